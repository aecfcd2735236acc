//! Mach exceptions decoded the way Apple's crash reports show them: `EXC_BAD_ACCESS (SIGSEGV)`,
//! `KERN_INVALID_ADDRESS at 0x…`.
//!
//! Pure code, compiled and tested on every host. Numbers from `<mach/exception_types.h>`
//! (`EXC_*`), `<mach/kern_return.h>` (`KERN_*`), `<sys/ux_exception.h>` (`EXC_UNIX_*`,
//! `EXC_SOFT_SIGNAL`) and Darwin's `<sys/signal.h>` (whose numbers differ from Linux's: SIGBUS
//! is 10, SIGSYS 12). The exception-to-signal rule is XNU's `ux_exception()`
//! (`bsd/uxkern/ux_exception.c`): the signal the kernel delivers when no Mach handler claims the
//! exception, which is the signal our POSIX handler then sees.

use crate::crash_report::MachExceptionNote;

/// `EXC_BAD_ACCESS`: could not access memory (code: `kern_return_t`, subcode: address).
pub const EXC_BAD_ACCESS: u32 = 1;
/// `EXC_BAD_INSTRUCTION`: illegal or undefined instruction.
pub const EXC_BAD_INSTRUCTION: u32 = 2;
/// `EXC_ARITHMETIC`: arithmetic exception (division by zero on some CPUs).
pub const EXC_ARITHMETIC: u32 = 3;
/// `EXC_EMULATION`: emulation instruction.
pub const EXC_EMULATION: u32 = 4;
/// `EXC_SOFTWARE`: software-generated (code: `EXC_UNIX_*`, `EXC_SOFT_SIGNAL`).
pub const EXC_SOFTWARE: u32 = 5;
/// `EXC_BREAKPOINT`: trace or breakpoint (`brk`, Swift runtime traps, `__builtin_trap`).
pub const EXC_BREAKPOINT: u32 = 6;
/// `EXC_CRASH`: abnormal process exit (delivered at death; not caught by the SDK).
pub const EXC_CRASH: u32 = 10;
/// `EXC_RESOURCE`: a resource limit was hit.
pub const EXC_RESOURCE: u32 = 11;
/// `EXC_GUARD`: a guarded resource was misused.
pub const EXC_GUARD: u32 = 12;

/// The exceptions the SDK's exception port takes (`EXC_MASK_*` = `1 << EXC_*`): bad access,
/// bad instruction, arithmetic, software, breakpoint; as KSCrash's and PLCrashReporter's
/// servers do. `EXC_CRASH` comes only as the process dies, `EXC_GUARD`/`EXC_RESOURCE` are not
/// crashes of the app's code.
pub const EXCEPTION_MASK: u32 = 1 << EXC_BAD_ACCESS
    | 1 << EXC_BAD_INSTRUCTION
    | 1 << EXC_ARITHMETIC
    | 1 << EXC_SOFTWARE
    | 1 << EXC_BREAKPOINT;

const KERN_INVALID_ADDRESS: i64 = 1;
const KERN_PROTECTION_FAILURE: i64 = 2;
/// `<mach/i386/exception.h>`: general protection fault (a non-canonical address).
const EXC_I386_GPFLT: i64 = 13;
/// `<mach/arm/exception.h>`: the arm64 `EXC_BAD_ACCESS` codes.
const EXC_ARM_DA_ALIGN: i64 = 0x101;
const EXC_ARM_DA_DEBUG: i64 = 0x102;
const EXC_ARM_SP_ALIGN: i64 = 0x103;
const EXC_ARM_SWP: i64 = 0x104;
const EXC_ARM_PAC_FAIL: i64 = 0x105;
const EXC_UNIX_BAD_SYSCALL: i64 = 0x10000;
const EXC_UNIX_BAD_PIPE: i64 = 0x10001;
const EXC_UNIX_ABORT: i64 = 0x10002;
const EXC_SOFT_SIGNAL: i64 = 0x10003;

/// Darwin signal numbers (`<sys/signal.h>`).
pub mod darwin_signal {
    /// `SIGILL`.
    pub const SIGILL: i32 = 4;
    /// `SIGTRAP`.
    pub const SIGTRAP: i32 = 5;
    /// `SIGABRT`.
    pub const SIGABRT: i32 = 6;
    /// `SIGEMT`.
    pub const SIGEMT: i32 = 7;
    /// `SIGFPE`.
    pub const SIGFPE: i32 = 8;
    /// `SIGKILL`.
    pub const SIGKILL: i32 = 9;
    /// `SIGBUS`.
    pub const SIGBUS: i32 = 10;
    /// `SIGSEGV`.
    pub const SIGSEGV: i32 = 11;
    /// `SIGSYS`.
    pub const SIGSYS: i32 = 12;
    /// `SIGPIPE`.
    pub const SIGPIPE: i32 = 13;

    /// The name of a Darwin signal number (`SIGSEGV`), or `signal`.
    pub fn name(signal: i32) -> &'static str {
        match signal {
            SIGILL => "SIGILL",
            SIGTRAP => "SIGTRAP",
            SIGABRT => "SIGABRT",
            SIGEMT => "SIGEMT",
            SIGFPE => "SIGFPE",
            SIGKILL => "SIGKILL",
            SIGBUS => "SIGBUS",
            SIGSEGV => "SIGSEGV",
            SIGSYS => "SIGSYS",
            SIGPIPE => "SIGPIPE",
            _ => "signal",
        }
    }
}

/// The name of an `EXC_*` number (`EXC_BAD_ACCESS`), or `EXC_UNKNOWN`.
pub fn exception_name(exception: u32) -> &'static str {
    match exception {
        EXC_BAD_ACCESS => "EXC_BAD_ACCESS",
        EXC_BAD_INSTRUCTION => "EXC_BAD_INSTRUCTION",
        EXC_ARITHMETIC => "EXC_ARITHMETIC",
        EXC_EMULATION => "EXC_EMULATION",
        EXC_SOFTWARE => "EXC_SOFTWARE",
        EXC_BREAKPOINT => "EXC_BREAKPOINT",
        EXC_CRASH => "EXC_CRASH",
        EXC_RESOURCE => "EXC_RESOURCE",
        EXC_GUARD => "EXC_GUARD",
        _ => "EXC_UNKNOWN",
    }
}

/// The Darwin signal XNU's `ux_exception()` turns an exception into; 0 when it sends none.
/// Includes the x86-64 rule of `bsd/dev/i386/unix_signal.c` (a general protection fault is
/// SIGSEGV); the main-thread stack rule of `handle_ux_exception()` is [`signal_for_fault`].
pub fn signal_for(exception: u32, code: i64) -> i32 {
    use darwin_signal::*;
    match exception {
        EXC_BAD_ACCESS if code == KERN_INVALID_ADDRESS => SIGSEGV,
        EXC_BAD_ACCESS if code == EXC_I386_GPFLT && cfg!(target_arch = "x86_64") => SIGSEGV,
        EXC_BAD_ACCESS => SIGBUS,
        EXC_BAD_INSTRUCTION => SIGILL,
        EXC_ARITHMETIC => SIGFPE,
        EXC_EMULATION => SIGEMT,
        EXC_SOFTWARE => match code {
            EXC_UNIX_BAD_SYSCALL => SIGSYS,
            EXC_UNIX_BAD_PIPE => SIGPIPE,
            EXC_UNIX_ABORT => SIGABRT,
            EXC_SOFT_SIGNAL => SIGKILL,
            _ => 0,
        },
        EXC_BREAKPOINT => SIGTRAP,
        _ => 0,
    }
}

/// The name Apple's reports give an exception's code (`KERN_INVALID_ADDRESS`,
/// `KERN_PROTECTION_FAILURE`, `UNIX_ABORT`…), or "" when it has none.
pub fn code_name(exception: u32, code: i64) -> &'static str {
    match (exception, code) {
        (EXC_BAD_ACCESS, KERN_INVALID_ADDRESS) => "KERN_INVALID_ADDRESS",
        (EXC_BAD_ACCESS, KERN_PROTECTION_FAILURE) => "KERN_PROTECTION_FAILURE",
        (EXC_BAD_ACCESS, EXC_ARM_DA_ALIGN) => "EXC_ARM_DA_ALIGN",
        (EXC_BAD_ACCESS, EXC_ARM_DA_DEBUG) => "EXC_ARM_DA_DEBUG",
        (EXC_BAD_ACCESS, EXC_ARM_SP_ALIGN) => "EXC_ARM_SP_ALIGN",
        (EXC_BAD_ACCESS, EXC_ARM_SWP) => "EXC_ARM_SWP",
        (EXC_BAD_ACCESS, EXC_ARM_PAC_FAIL) => "EXC_ARM_PAC_FAIL",
        (EXC_SOFTWARE, EXC_UNIX_BAD_SYSCALL) => "UNIX_BAD_SYSCALL",
        (EXC_SOFTWARE, EXC_UNIX_BAD_PIPE) => "UNIX_BAD_PIPE",
        (EXC_SOFTWARE, EXC_UNIX_ABORT) => "UNIX_ABORT",
        (EXC_SOFTWARE, EXC_SOFT_SIGNAL) => "SOFT_SIGNAL",
        _ => "",
    }
}

/// [`signal_for`], plus XNU's `handle_ux_exception()` rule: a `KERN_PROTECTION_FAILURE` whose
/// address lies in the main thread's stack region (`main_stack`, `[low, high)`: from the
/// lowest address the stack may grow to, guard included, up to its top) is a stack overflow,
/// delivered as SIGSEGV.
pub fn signal_for_fault(
    exception: u32,
    code: i64,
    fault_address: u64,
    main_stack: Option<(u64, u64)>,
) -> i32 {
    let in_main_stack =
        main_stack.is_some_and(|(low, high)| fault_address >= low && fault_address < high);
    if exception == EXC_BAD_ACCESS && code == KERN_PROTECTION_FAILURE && in_main_stack {
        return darwin_signal::SIGSEGV;
    }
    signal_for(exception, code)
}

/// Everything the report shows of one exception: names, signal (see [`signal_for_fault`]),
/// and the fault address (`code[1]` of `EXC_BAD_ACCESS`, else 0).
pub fn describe(
    exception: u32,
    code: i64,
    subcode: i64,
    main_stack: Option<(u64, u64)>,
) -> (MachExceptionNote, i32, u64) {
    let note = MachExceptionNote {
        exception,
        code,
        subcode,
        name: exception_name(exception),
        code_name: code_name(exception, code),
    };
    let fault_address = if exception == EXC_BAD_ACCESS {
        subcode as u64
    } else {
        0
    };
    (
        note,
        signal_for_fault(exception, code, fault_address, main_stack),
        fault_address,
    )
}

#[cfg(test)]
mod tests {
    use super::darwin_signal::*;
    use super::*;

    #[test]
    fn decodes_as_apple_crash_reports_show_them() {
        // A null dereference: "EXC_BAD_ACCESS (SIGSEGV) / KERN_INVALID_ADDRESS at 0x0".
        let (note, signal, address) = describe(EXC_BAD_ACCESS, 1, 0, None);
        assert_eq!(
            (note.name, note.code_name, signal, address),
            ("EXC_BAD_ACCESS", "KERN_INVALID_ADDRESS", SIGSEGV, 0)
        );
        // A write to read-only memory is a bus error on Darwin.
        let (note, signal, address) = describe(EXC_BAD_ACCESS, 2, 0x1_0000_4000, None);
        assert_eq!(
            (note.code_name, signal, address),
            ("KERN_PROTECTION_FAILURE", SIGBUS, 0x1_0000_4000)
        );
        // ... unless it is the main thread's stack guard: a stack overflow, SIGSEGV.
        let main_stack = Some((0x16f0_0000, 0x1710_0000));
        assert_eq!(
            describe(EXC_BAD_ACCESS, 2, 0x16f0_3ff8, main_stack).1,
            SIGSEGV
        );
        assert_eq!(
            describe(EXC_BAD_ACCESS, 2, 0x1_0000_4000, main_stack).1,
            SIGBUS
        );
        // Misaligned access and a pointer-authentication failure are bus errors on arm64.
        assert_eq!(
            describe(EXC_BAD_ACCESS, 0x101, 0x1003, None).0.code_name,
            "EXC_ARM_DA_ALIGN"
        );
        assert_eq!(describe(EXC_BAD_ACCESS, 0x105, 0, None).1, SIGBUS);
        // Swift runtime traps (brk #1) and abort().
        assert_eq!(signal_for(EXC_BREAKPOINT, 1), SIGTRAP);
        assert_eq!(
            describe(EXC_SOFTWARE, 0x10002, 0, None).0.code_name,
            "UNIX_ABORT"
        );
        assert_eq!(signal_for(EXC_SOFTWARE, 0x10002), SIGABRT);
        assert_eq!(signal_for(EXC_BAD_INSTRUCTION, 1), SIGILL);
        assert_eq!(signal_for(EXC_ARITHMETIC, 1), SIGFPE);
        assert_eq!(signal_for(EXC_GUARD, 0), 0);
        // The Intel simulator: a general protection fault is SIGSEGV (i386 unix_signal.c).
        assert_eq!(
            signal_for(EXC_BAD_ACCESS, 13),
            if cfg!(target_arch = "x86_64") {
                SIGSEGV
            } else {
                SIGBUS
            }
        );
        assert_eq!(name(SIGBUS), "SIGBUS");
        assert_eq!(EXCEPTION_MASK, 0b110_1110);
    }
}

//! Crash capture through POSIX signals, and the once-only guard every crash path shares.
//!
//! At install (allocation allowed): the report file and buffer are prepared
//! ([`crate::crash_report::prepare`]), the image list is published, an alternate signal stack is
//! given to the installing thread, the platform's own handlers are installed (Linux: the
//! sampling signal; Apple: the Mach exception server), and handlers for SIGSEGV, SIGBUS, SIGILL,
//! SIGFPE, SIGABRT and SIGTRAP are installed, keeping the previous ones.
//!
//! In the handler (async-signal-safe): the first crash writes the report; then the previous
//! handler runs (or the default action, which ends the process). A crash inside our handler,
//! while the report is being written, restores the default actions and ends the process
//! instead of looping or hanging. A second thread crashing while the first writes waits for
//! the report (at most 5 s) before it chains, so it cannot end the process first. On Apple platforms the Mach exception server usually writes
//! the report first ([`claim`], [`mark_reported`]); the signal that follows only chains.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::crash_report::{self, CrashInfo};
use crate::platform::{Backend, Host};

/// The signals handled.
pub const SIGNALS: [libc::c_int; 6] = [
    libc::SIGSEGV,
    libc::SIGBUS,
    libc::SIGILL,
    libc::SIGFPE,
    libc::SIGABRT,
    libc::SIGTRAP,
];

const ALT_STACK_BYTES: usize = 256 * 1024;

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Set by the first crash path to run; a second (or a crash inside it) finds it set.
static HANDLING: AtomicBool = AtomicBool::new(false);
/// Set once the report is written.
static REPORTED: AtomicBool = AtomicBool::new(false);
/// The thread (its report id) that claimed the report.
static HANDLING_THREAD: AtomicU64 = AtomicU64::new(u64::MAX);
/// How long a thread that crashes while another writes the report waits for it, ms.
const WAIT_FOR_REPORT_MS: u64 = 5_000;
static mut PREVIOUS: [Option<libc::sigaction>; 32] = [None; 32];

/// Installs the crash handlers, writing reports into `dir`. Idempotent.
pub fn install(dir: &std::path::Path, metadata_json: Vec<u8>) -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    crash_report::prepare(dir, metadata_json)?;
    let images = Host::loaded_images();
    let ranges: Vec<(u64, u64)> = images.iter().flat_map(|i| i.code_ranges.clone()).collect();
    crate::unwind::add_code_ranges(&ranges);
    crate::images::publish(&images);

    Host::install()?;
    install_alt_stack()?;
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is valid; handle_crash is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handle_crash as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &action, &mut previous) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            (*std::ptr::addr_of_mut!(PREVIOUS))[sig as usize] = Some(previous);
        }
    }
    Ok(())
}

/// Gives the calling thread an alternate signal stack (so a stack overflow can be reported).
/// Threads created later need their own: call [`install_alt_stack`] from them.
pub fn install_alt_stack() -> std::io::Result<()> {
    let stack = Box::leak(vec![0u8; ALT_STACK_BYTES].into_boxed_slice());
    let ss = libc::stack_t {
        ss_sp: stack.as_mut_ptr() as *mut libc::c_void,
        ss_flags: 0,
        ss_size: ALT_STACK_BYTES,
    };
    // SAFETY: the stack is leaked, so it outlives the thread.
    if unsafe { libc::sigaltstack(&ss, std::ptr::null_mut()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Claims the one report of this process: true for the first caller only. Async-signal-safe.
pub fn claim() -> bool {
    if HANDLING.swap(true, Ordering::AcqRel) {
        return false;
    }
    HANDLING_THREAD.store(
        Host::thread_report_id(Host::current_thread()),
        Ordering::Release,
    );
    true
}

/// Waits (bounded, sleeping 1 ms at a time) until the report is written. Async-signal-safe.
fn wait_for_report(timeout_ms: u64) -> bool {
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..timeout_ms {
        if REPORTED.load(Ordering::Acquire) {
            return true;
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
    REPORTED.load(Ordering::Acquire)
}

/// Records that the claimed report is written. Async-signal-safe.
pub fn mark_reported() {
    REPORTED.store(true, Ordering::Release);
}

/// The name of a POSIX signal of this platform (`SIGSEGV`), or `signal`.
pub fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGABRT => "SIGABRT",
        libc::SIGTRAP => "SIGTRAP",
        _ => "signal",
    }
}

extern "C" fn handle_crash(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if !claim() {
        let me = Host::thread_report_id(Host::current_thread());
        if !REPORTED.load(Ordering::Acquire) && HANDLING_THREAD.load(Ordering::Acquire) == me {
            // A crash inside our own handler: let the default action end the process rather
            // than risk a loop or a hang.
            restore_defaults();
            return;
        }
        // Reported already (by the Mach exception server), or another thread is writing the
        // report: let it finish (bounded), then chain, so this crash cannot end the process
        // before the report is on disk.
        wait_for_report(WAIT_FOR_REPORT_MS);
        chain(sig, info, ctx);
        return;
    }
    // SAFETY: `ctx` and `info` are this SA_SIGINFO handler's arguments.
    let (registers, fault_address) = unsafe {
        (
            Host::context_registers(ctx),
            Host::fault_address(info as *const libc::c_void),
        )
    };
    crash_report::write::<Host>(&CrashInfo {
        signal: sig,
        signal_name: signal_name(sig),
        mach_exception: None,
        fault_address,
        thread: Host::current_thread(),
        registers,
        skip: None,
    });
    mark_reported();
    chain(sig, info, ctx);
}

fn restore_defaults() {
    for sig in SIGNALS {
        // SAFETY: resetting to SIG_DFL is always valid.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// Runs the previous handler for `sig`, or the default action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: PREVIOUS was filled at install.
    let previous = unsafe { (*std::ptr::addr_of!(PREVIOUS))[sig as usize] };
    restore_defaults();
    match previous {
        Some(prev) if prev.sa_sigaction != libc::SIG_DFL && prev.sa_sigaction != libc::SIG_IGN => {
            // SAFETY: calling the previously installed handler the way the kernel would.
            unsafe {
                if prev.sa_flags & libc::SA_SIGINFO != 0 {
                    let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                        std::mem::transmute(prev.sa_sigaction);
                    f(sig, info, ctx);
                } else {
                    let f: extern "C" fn(libc::c_int) = std::mem::transmute(prev.sa_sigaction);
                    f(sig);
                }
            }
        }
        _ => {
            // Returning re-executes the faulting instruction under the default action; for
            // signals sent by raise/abort, send it again.
            // SAFETY: raise is async-signal-safe.
            if !matches!(
                sig,
                libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE
            ) {
                unsafe { libc::raise(sig) };
            }
        }
    }
}

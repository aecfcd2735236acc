//! Threads through Mach: the task's thread list, suspending and resuming, register state,
//! names; and memory reads that fail instead of faulting.
//!
//! All of these are Mach traps or MIG calls, usable from a signal handler or from the
//! exception server while other threads are suspended (as KSCrash and PLCrashReporter use
//! them). `task_threads` returns an array `vm_allocate`d in our task, released here; the send
//! rights it gives are kept (the process is ending).

use super::ffi::{self, mach_port_t, natural_t};
use crate::unwind::Registers;

/// Reads one 8-byte word with `vm_read_overwrite`; `None` when unmapped or unreadable.
pub fn read_word(addr: u64) -> Option<u64> {
    let mut value: u64 = 0;
    let mut read: ffi::vm_size_t = 0;
    // SAFETY: the kernel writes at most 8 bytes into `value`.
    let kr = unsafe {
        ffi::vm_read_overwrite(
            ffi::mach_task_self(),
            addr as ffi::vm_address_t,
            8,
            &mut value as *mut u64 as ffi::vm_address_t,
            &mut read,
        )
    };
    (kr == ffi::KERN_SUCCESS && read == 8).then_some(value)
}

/// Removes arm64e pointer-authentication bits from a code address: the bits above the user
/// address space (iOS, tvOS, watchOS, visionOS: 36 bits, `MACH_VM_MAX_ADDRESS` 0xFC0000000;
/// macOS: 47 bits). The mask KSCrash and Sentry use; the identity on x86-64.
pub fn strip_code_pointer(addr: u64) -> u64 {
    if !cfg!(target_arch = "aarch64") {
        addr
    } else if cfg!(target_os = "macos") {
        addr & 0x0000_7fff_ffff_ffff
    } else {
        addr & 0x0000_000f_ffff_ffff
    }
}

/// The `{pc, fp, sp, lr}` of an arm64 thread state, code pointers stripped.
pub fn arm64_registers(state: &ffi::arm_thread_state64_t) -> Registers {
    Registers {
        pc: strip_code_pointer(state.pc),
        fp: state.fp,
        sp: state.sp,
        lr: strip_code_pointer(state.lr),
    }
}

/// The `{rip, rbp, rsp}` of an x86-64 thread state.
pub fn x86_64_registers(state: &ffi::x86_thread_state64_t) -> Registers {
    Registers {
        pc: state.rip,
        fp: state.rbp,
        sp: state.rsp,
        lr: 0,
    }
}

/// The registers of a (suspended, or exception-stopped) thread, from `thread_get_state`.
pub fn thread_registers(thread: mach_port_t) -> Option<Registers> {
    // SAFETY: thread_get_state writes at most `count` 32-bit words into the state struct of
    // the flavor asked for; zeroed states are valid.
    unsafe {
        if cfg!(target_arch = "aarch64") {
            let mut state: ffi::arm_thread_state64_t = std::mem::zeroed();
            let mut count = ffi::ARM_THREAD_STATE64_COUNT;
            let kr = ffi::thread_get_state(
                thread,
                ffi::ARM_THREAD_STATE64,
                &mut state as *mut _ as *mut natural_t,
                &mut count,
            );
            (kr == ffi::KERN_SUCCESS).then(|| arm64_registers(&state))
        } else {
            let mut state: ffi::x86_thread_state64_t = std::mem::zeroed();
            let mut count = ffi::X86_THREAD_STATE64_COUNT;
            let kr = ffi::thread_get_state(
                thread,
                ffi::X86_THREAD_STATE64,
                &mut state as *mut _ as *mut natural_t,
                &mut count,
            );
            (kr == ffi::KERN_SUCCESS).then(|| x86_64_registers(&state))
        }
    }
}

/// The registers in a Darwin signal handler's `ucontext_t` (whose `uc_mcontext` is a pointer).
///
/// # Safety
/// `ctx` must be the context the kernel passed to an `SA_SIGINFO` handler.
pub unsafe fn context_registers(ctx: *const std::ffi::c_void) -> Registers {
    // SAFETY: the caller passes the kernel's ucontext, whose uc_mcontext points at the
    // machine context of this architecture.
    unsafe {
        let uc = &*(ctx as *const ffi::darwin_ucontext_head);
        if cfg!(target_arch = "aarch64") {
            arm64_registers(&(*(uc.uc_mcontext as *const ffi::arm_mcontext64_head)).ss)
        } else {
            x86_64_registers(&(*(uc.uc_mcontext as *const ffi::x86_mcontext64_head)).ss)
        }
    }
}

/// The task's threads into `out`; returns how many.
pub fn list(out: &mut [mach_port_t]) -> usize {
    let task = ffi::mach_task_self();
    let mut threads: *mut mach_port_t = std::ptr::null_mut();
    let mut count: ffi::mach_msg_type_number_t = 0;
    // SAFETY: task_threads fills a list it allocates in our task.
    if unsafe { ffi::task_threads(task, &mut threads, &mut count) } != ffi::KERN_SUCCESS
        || threads.is_null()
    {
        return 0;
    }
    // SAFETY: the kernel returned `count` ports at `threads`.
    let all = unsafe { std::slice::from_raw_parts(threads, count as usize) };
    let n = all.len().min(out.len());
    out[..n].copy_from_slice(&all[..n]);
    // SAFETY: releasing the rights we do not keep, and the list the kernel allocated.
    unsafe {
        for &extra in &all[n..] {
            ffi::mach_port_deallocate(task, extra);
        }
        ffi::vm_deallocate(
            task,
            threads as ffi::vm_address_t,
            count as usize * std::mem::size_of::<mach_port_t>(),
        );
    }
    n
}

/// The thread's name (`pthread_setname_np`, from `THREAD_EXTENDED_INFO`) into `out`; its
/// length in bytes, 0 when unnamed.
pub fn name(thread: mach_port_t, out: &mut [u8]) -> usize {
    // SAFETY: thread_info writes at most `count` words into the zeroed struct.
    unsafe {
        let mut info: ffi::thread_extended_info = std::mem::zeroed();
        let mut count = ffi::THREAD_EXTENDED_INFO_COUNT;
        if ffi::thread_info(
            thread,
            ffi::THREAD_EXTENDED_INFO,
            &mut info as *mut _ as *mut std::ffi::c_int,
            &mut count,
        ) != ffi::KERN_SUCCESS
        {
            return 0;
        }
        let name = &info.pth_name;
        let len = name
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(name.len())
            .min(out.len());
        for (o, &c) in out.iter_mut().zip(&name[..len]) {
            *o = c as u8;
        }
        len
    }
}

/// `thread_suspend`.
pub fn suspend(thread: mach_port_t) {
    // SAFETY: suspending a thread of our own task; the count nests.
    unsafe { ffi::thread_suspend(thread) };
}

/// `thread_resume`.
pub fn resume(thread: mach_port_t) {
    // SAFETY: undoes one `suspend`.
    unsafe { ffi::thread_resume(thread) };
}

/// Suspends the thread, walks its stack from its registers, resumes it.
pub fn sample(thread: mach_port_t, out: &mut [u64]) -> usize {
    suspend(thread);
    let n = match thread_registers(thread) {
        Some(regs) => crate::unwind::walk_with_scan(regs.pc, regs.fp, regs.sp, out),
        None => 0,
    };
    resume(thread);
    n
}

/// The calling thread's Mach port (`pthread_mach_thread_np(pthread_self())`, no new reference).
pub fn current() -> mach_port_t {
    // SAFETY: both only read the calling thread's own pthread structure.
    unsafe { ffi::pthread_mach_thread_np(libc::pthread_self()) }
}

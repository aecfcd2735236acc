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

/// Removes arm64e pointer-authentication bits from an address: the bits above the user
/// address space (iOS, tvOS, watchOS, visionOS: 36 bits, `MACH_VM_MAX_ADDRESS` 0xFC0000000,
/// the mask Sentry uses; macOS: 47 bits, KSCrash's arm64 mask); the identity on x86-64. An app
/// with the extended-virtual-addressing entitlement can map above 36 bits on iOS: its
/// addresses up there would be cut (not handled).
pub fn strip_code_pointer(addr: u64) -> u64 {
    if !cfg!(target_arch = "aarch64") {
        addr
    } else if cfg!(target_os = "macos") {
        addr & 0x0000_7fff_ffff_ffff
    } else {
        addr & 0x0000_000f_ffff_ffff
    }
}

/// The `{pc, fp, sp, lr}` of an arm64 thread state, stripped of pointer-authentication bits
/// (for arm64e processes XNU signs all four in user-visible thread states).
pub fn arm64_registers(state: &ffi::arm_thread_state64_t) -> Registers {
    Registers {
        pc: strip_code_pointer(state.pc),
        fp: strip_code_pointer(state.fp),
        sp: strip_code_pointer(state.sp),
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

/// The system-wide thread id (`THREAD_IDENTIFIER_INFO`), the same whatever port names the
/// thread: exception messages may carry a read port where `task_threads` gives the control
/// port. Falls back to the port name.
pub fn thread_id(thread: mach_port_t) -> u64 {
    // SAFETY: thread_info writes at most `count` words into the zeroed struct.
    unsafe {
        let mut info: ffi::thread_identifier_info = std::mem::zeroed();
        let mut count = ffi::THREAD_IDENTIFIER_INFO_COUNT;
        if ffi::thread_info(
            thread,
            ffi::THREAD_IDENTIFIER_INFO,
            &mut info as *mut _ as *mut std::ffi::c_int,
            &mut count,
        ) == ffi::KERN_SUCCESS
        {
            info.thread_id
        } else {
            u64::from(thread)
        }
    }
}

/// The main thread's stack region `[lowest address it may grow to, top)`, its guard page
/// included (the region XNU's `handle_ux_exception()` treats as the stack). Call at install.
pub fn main_stack_region() -> (u64, u64) {
    // SAFETY: reading the main thread's pthread attributes.
    unsafe {
        let main = ffi::pthread_main_thread_np();
        let top = ffi::pthread_get_stackaddr_np(main) as u64;
        let size = ffi::pthread_get_stacksize_np(main) as u64;
        // The guard lies below the stack; one 64 KiB band covers it on every page size.
        (top.saturating_sub(size).saturating_sub(64 * 1024), top)
    }
}

/// CPU time the thread used (`THREAD_EXTENDED_INFO`'s `pth_user_time + pth_system_time`,
/// nanoseconds); `None` when the thread is gone.
pub fn cpu_time_ns(thread: mach_port_t) -> Option<u64> {
    // SAFETY: thread_info writes at most `count` words into the zeroed struct.
    unsafe {
        let mut info: ffi::thread_extended_info = std::mem::zeroed();
        let mut count = ffi::THREAD_EXTENDED_INFO_COUNT;
        (ffi::thread_info(
            thread,
            ffi::THREAD_EXTENDED_INFO,
            &mut info as *mut _ as *mut std::ffi::c_int,
            &mut count,
        ) == ffi::KERN_SUCCESS)
            .then(|| info.pth_user_time + info.pth_system_time)
    }
}

/// The task's `phys_footprint` (`task_info(TASK_VM_INFO)`), bytes.
pub fn phys_footprint() -> Option<u64> {
    let mut info = [0u64; 64];
    let mut count = ffi::TASK_VM_INFO_REV1_COUNT;
    // SAFETY: task_info writes at most `count` words (152 bytes) into the 512-byte buffer.
    let ok = unsafe {
        ffi::task_info(
            ffi::mach_task_self(),
            ffi::TASK_VM_INFO,
            info.as_mut_ptr() as *mut std::ffi::c_int,
            &mut count,
        )
    } == ffi::KERN_SUCCESS;
    (ok && count >= ffi::TASK_VM_INFO_REV1_COUNT)
        .then(|| info[ffi::TASK_VM_INFO_PHYS_FOOTPRINT_OFFSET / 8])
}

/// A `struct timeval` sysctl (`kern.boottime`) as seconds.
pub fn sysctl_timeval_s(name: &std::ffi::CStr) -> Option<u64> {
    let mut tv = [0i64; 2];
    let mut len = std::mem::size_of_val(&tv);
    // SAFETY: sysctlbyname writes at most `len` bytes into `tv`.
    let ok = unsafe {
        ffi::sysctlbyname(
            name.as_ptr(),
            tv.as_mut_ptr() as *mut std::ffi::c_void,
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    } == 0;
    (ok && tv[0] > 0).then_some(tv[0] as u64)
}

/// This process's start time (`kinfo_proc`'s `p_starttime`), ms since the Unix epoch.
pub fn process_start_ms() -> Option<u64> {
    let info = kinfo_proc()?;
    let sec = info[ffi::KINFO_PROC_P_STARTTIME_OFFSET / 8] as i64;
    let usec = (info[ffi::KINFO_PROC_P_STARTTIME_OFFSET / 8 + 1] & 0xffff_ffff) as i64;
    (sec > 0).then(|| sec as u64 * 1000 + usec as u64 / 1000)
}

/// This process's `struct kinfo_proc` (`sysctl(KERN_PROC_PID)`), as 8-byte words.
fn kinfo_proc() -> Option<[u64; ffi::KINFO_PROC_SIZE.div_ceil(8)]> {
    let mut mib = [
        ffi::CTL_KERN,
        ffi::KERN_PROC,
        ffi::KERN_PROC_PID,
        // SAFETY: getpid has no preconditions.
        unsafe { libc::getpid() },
    ];
    let mut info = [0u64; ffi::KINFO_PROC_SIZE.div_ceil(8)];
    let mut len = ffi::KINFO_PROC_SIZE;
    // SAFETY: sysctl writes at most `len` bytes into `info`.
    let ok = unsafe {
        ffi::sysctl(
            mib.as_mut_ptr(),
            4,
            info.as_mut_ptr() as *mut std::ffi::c_void,
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    } == 0;
    ok.then_some(info)
}

/// Whether a debugger is attached (`P_TRACED`, as Apple's Technical Q&A QA1361 reads it).
pub fn being_debugged() -> bool {
    let Some(info) = kinfo_proc() else {
        return false;
    };
    let word = info[ffi::KINFO_PROC_P_FLAG_OFFSET / 8];
    let p_flag = (word & 0xffff_ffff) as i32; // little-endian: the low half is at offset 32
    p_flag & ffi::P_TRACED != 0
}

/// A string `sysctlbyname` value (`kern.osproductversion`); `None` when absent.
pub fn sysctl_string(name: &std::ffi::CStr) -> Option<String> {
    let mut buf = [0u8; 256];
    let mut len = buf.len();
    // SAFETY: sysctlbyname writes at most `len` bytes into `buf`.
    let r = unsafe {
        ffi::sysctlbyname(
            name.as_ptr(),
            buf.as_mut_ptr() as *mut std::ffi::c_void,
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    if r != 0 || len == 0 {
        return None;
    }
    let text = &buf[..len.min(buf.len())];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    Some(String::from_utf8_lossy(&text[..end]).into_owned())
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

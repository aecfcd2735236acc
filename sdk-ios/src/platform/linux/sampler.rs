//! Sampling another thread's stack from inside the process: the sampler sends the thread a
//! real-time signal (`tgkill`), the thread's handler walks its own frame pointers from its signal
//! context into a shared buffer, and the sampler waits (bounded) for it. Only async-signal-safe
//! calls are used, so the crash handler samples the other threads the same way the hang
//! watchdog samples the main thread. One sample at a time (a spin flag, no lock).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

use crate::unwind;

use super::context_registers;

use crate::unwind::MAX_FRAMES;

static BUSY: AtomicBool = AtomicBool::new(false);
static TARGET: AtomicI32 = AtomicI32::new(0);
static DONE: AtomicBool = AtomicBool::new(false);
static LEN: AtomicUsize = AtomicUsize::new(0);
static mut FRAMES: [u64; MAX_FRAMES] = [0; MAX_FRAMES];

/// The signal used to ask a thread for its stack.
pub fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 3
}

/// The calling thread's id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_sample(_sig: libc::c_int, _info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    if TARGET.load(Ordering::Acquire) != gettid() {
        return;
    }
    // SAFETY: `ctx` is this SA_SIGINFO handler's context.
    let regs = unsafe { context_registers(ctx) };
    // SAFETY: only the target thread writes FRAMES, while the sampler waits for DONE.
    let frames = unsafe { &mut *std::ptr::addr_of_mut!(FRAMES) };
    let n = unwind::walk_with_scan(regs.pc, regs.fp, regs.sp, frames);
    LEN.store(n, Ordering::Release);
    DONE.store(true, Ordering::Release);
}

/// Installs the sampling signal handler (once, at SDK install).
pub fn install() -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler is async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sample as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(signal(), &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime is async-signal-safe and writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
}

/// Samples thread `tid` into `out`; returns the number of frames (0 when the thread did not
/// answer within `timeout_ms`, or another sample is in progress). Async-signal-safe.
pub fn sample(tid: i32, out: &mut [u64], timeout_ms: u64) -> usize {
    if BUSY
        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return 0;
    }
    DONE.store(false, Ordering::Release);
    TARGET.store(tid, Ordering::Release);
    // SAFETY: tgkill only sends a signal.
    let sent = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, signal()) } == 0;
    let deadline = monotonic_ms() + timeout_ms;
    let mut n = 0;
    if sent {
        while !DONE.load(Ordering::Acquire) && monotonic_ms() < deadline {
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 200_000,
            };
            // SAFETY: nanosleep is async-signal-safe.
            unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        }
        if DONE.load(Ordering::Acquire) {
            n = LEN.load(Ordering::Acquire).min(out.len());
            // SAFETY: the target finished writing (DONE) and no one else samples (BUSY).
            let frames = unsafe { &*std::ptr::addr_of!(FRAMES) };
            out[..n].copy_from_slice(&frames[..n]);
        }
    }
    TARGET.store(0, Ordering::Release);
    BUSY.store(false, Ordering::Release);
    n
}

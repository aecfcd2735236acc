//! The Linux host backend: the one this repository runs and tests for real.
//!
//! Memory is read with `process_vm_readv` on our own process (`EFAULT` instead of a fault),
//! threads are listed from `/proc/self/task` with `getdents64` and named from
//! `/proc/self/task/<tid>/comm`, other threads' stacks are sampled through a real-time signal
//! ([`sampler`]), and images come from `dl_iterate_phdr` ([`images`]).

pub mod images;
pub mod sampler;

use std::ffi::c_void;

use super::Backend;
use crate::images::Image;
use crate::unwind::Registers;
use crate::writer::Writer;

/// The Linux host backend.
pub struct Linux;

impl Backend for Linux {
    /// The kernel thread id (`gettid`).
    type Thread = i32;

    const OS: &'static str = "linux";

    fn read_word(addr: u64) -> Option<u64> {
        let mut value: u64 = 0;
        let local = libc::iovec {
            iov_base: &mut value as *mut u64 as *mut c_void,
            iov_len: 8,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: 8,
        };
        // SAFETY: process_vm_readv writes at most 8 bytes into `value`; it is
        // async-signal-safe.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        (n == 8).then_some(value)
    }

    unsafe fn context_registers(ctx: *const c_void) -> Registers {
        // SAFETY: the caller passes the kernel's ucontext.
        unsafe { context_registers(ctx) }
    }

    unsafe fn fault_address(info: *const c_void) -> u64 {
        if info.is_null() {
            return 0;
        }
        // SAFETY: the caller passes the kernel's siginfo.
        unsafe { (*(info as *const libc::siginfo_t)).si_addr() as u64 }
    }

    fn current_thread() -> i32 {
        sampler::gettid()
    }

    fn thread_report_id(thread: i32) -> u64 {
        thread as u64
    }

    fn thread_name(thread: i32, out: &mut [u8]) -> usize {
        thread_name(thread, out)
    }

    fn list_threads(out: &mut [i32]) -> usize {
        list_threads(out)
    }

    fn suspend(_thread: i32) {}

    fn resume(_thread: i32) {}

    fn sample_thread(thread: i32, out: &mut [u64], timeout_ms: u64) -> usize {
        sampler::sample(thread, out, timeout_ms)
    }

    fn loaded_images() -> Vec<Image> {
        images::loaded_images()
    }

    fn thread_cpu_time_ns(thread: i32) -> Option<u64> {
        // The kernel's per-thread CPU clock id, as glibc's `pthread_getcpuclockid` builds it:
        // `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)` = `(~tid << 3) | 6`
        // (linux/include/linux/posix-timers_types.h).
        let clock = ((!(thread as libc::clockid_t)) << 3) | 6;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec to fill.
        if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
            return None;
        }
        Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    fn memory_footprint() -> Option<u64> {
        // `resident shared …` in pages; resident minus shared (file-backed and shmem pages,
        // often charged to whoever read the file first) is the anonymous resident set,
        // `RssAnon`: the app's own memory.
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let mut fields = statm.split(' ').skip(1).map(|f| f.parse::<u64>().ok());
        let (resident, shared) = (fields.next()??, fields.next()??);
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Some(resident.saturating_sub(shared) * u64::try_from(page).ok()?)
    }

    fn process_start_ms() -> Option<u64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the `(comm)`, which may hold spaces: field 3 (`state`) is the first.
        let after = &stat[stat.rfind(')')? + 2..];
        let ticks: u64 = after.split(' ').nth(22 - 3)?.parse().ok()?;
        // SAFETY: sysconf has no preconditions.
        let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
        let started_after_boot_ms = ticks * 1000 / hz.max(1);
        // Now minus the time since the start (both on the boot clock): `btime` is whole
        // seconds, so adding to it would be up to a second off.
        let mut boot = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: boot is a valid timespec to fill.
        if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut boot) } != 0 {
            return None;
        }
        let since_boot_ms = boot.tv_sec as u64 * 1000 + boot.tv_nsec as u64 / 1_000_000;
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis() as u64;
        now_ms.checked_sub(since_boot_ms.checked_sub(started_after_boot_ms)?)
    }

    fn boot_time_s() -> Option<u64> {
        std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse().ok())
    }

    fn main_function() -> Option<(u64, u64)> {
        images::main_function()
    }

    fn debugger_attached() -> bool {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("TracerPid:")?.trim().parse::<u32>().ok())
            })
            .is_some_and(|pid| pid != 0)
    }

    fn install() -> std::io::Result<()> {
        sampler::install()
    }
}

#[cfg(target_arch = "x86_64")]
unsafe fn context_registers(ctx: *const c_void) -> Registers {
    // SAFETY: the caller passes the kernel's ucontext.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let g = &uc.uc_mcontext.gregs;
    Registers {
        pc: g[libc::REG_RIP as usize] as u64,
        fp: g[libc::REG_RBP as usize] as u64,
        sp: g[libc::REG_RSP as usize] as u64,
        lr: 0,
    }
}

#[cfg(target_arch = "aarch64")]
unsafe fn context_registers(ctx: *const c_void) -> Registers {
    // SAFETY: the caller passes the kernel's ucontext.
    let uc = unsafe { &*(ctx as *const libc::ucontext_t) };
    let m = &uc.uc_mcontext;
    Registers {
        pc: m.pc,
        fp: m.regs[29],
        sp: m.sp,
        lr: m.regs[30],
    }
}

/// Reads `/proc/self/task/<tid>/comm` into `out`. Async-signal-safe.
fn thread_name(tid: i32, out: &mut [u8]) -> usize {
    let mut path = [0u8; 48];
    let mut w = Writer::new(&mut path);
    w.raw(b"/proc/self/task/");
    w.dec(tid as u64);
    w.raw(b"/comm\0");
    // SAFETY: open/read/close are async-signal-safe; `path` is NUL-terminated.
    unsafe {
        let fd = libc::open(w.as_bytes().as_ptr() as *const libc::c_char, libc::O_RDONLY);
        if fd < 0 {
            return 0;
        }
        let n = libc::read(fd, out.as_mut_ptr() as *mut c_void, out.len());
        libc::close(fd);
        if n <= 0 {
            return 0;
        }
        let n = n as usize;
        if out[n - 1] == b'\n' { n - 1 } else { n }
    }
}

/// Lists the process's thread ids (`/proc/self/task`, with `getdents64`). Async-signal-safe.
fn list_threads(out: &mut [i32]) -> usize {
    let mut count = 0;
    // SAFETY: open/getdents64/close are async-signal-safe; records are parsed within `buf`.
    unsafe {
        let fd = libc::open(
            c"/proc/self/task".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY,
        );
        if fd < 0 {
            return 0;
        }
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 {
                break;
            }
            let mut offset = 0usize;
            while offset + 19 < n as usize {
                let reclen = u16::from_ne_bytes([buf[offset + 16], buf[offset + 17]]) as usize;
                let name = &buf[offset + 19..offset + reclen.max(19)];
                let mut tid: i32 = 0;
                let mut digits = 0;
                for &b in name {
                    if !b.is_ascii_digit() {
                        break;
                    }
                    tid = tid.saturating_mul(10).saturating_add((b - b'0') as i32);
                    digits += 1;
                }
                if digits > 0 && count < out.len() {
                    out[count] = tid;
                    count += 1;
                }
                if reclen == 0 {
                    break;
                }
                offset += reclen;
            }
        }
        libc::close(fd);
    }
    count
}

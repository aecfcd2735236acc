//! The operating-system seam: everything the capture core needs from the platform, as one
//! [`Backend`] trait with two implementations.
//!
//! - [`linux`]: the host backend this repository tests for real: `process_vm_readv` reads,
//!   `/proc/self/task` thread lists, other threads sampled through a real-time signal,
//!   `dl_iterate_phdr` images with GNU build ids.
//! - [`apple`]: iOS/macOS: `vm_read_overwrite` reads, `task_threads` with `thread_suspend` /
//!   `thread_get_state`, dyld's image list with `LC_UUID`, arm64 pointer-authentication
//!   stripping, and a Mach exception server thread. Its pure parts (Mach-O load commands,
//!   exception decoding) are compiled and tested everywhere; the parts that call Mach and dyld
//!   are compiled on Apple targets, and type-checked on any host with the `apple-typecheck`
//!   feature (`cargo check -p symcluster-sdk-ios --features apple-typecheck`), never linked there.
//!
//! [`Host`] is the backend of the target being compiled. The crash handler, the hang watchdog
//! and the unwinder are written once against the trait.

pub mod apple;
#[cfg(target_os = "linux")]
pub mod linux;

use std::ffi::c_void;

use crate::images::Image;
use crate::unwind::Registers;

/// What the capture core needs from the operating system. Every method but
/// [`Backend::loaded_images`] and [`Backend::install`] is async-signal-safe: no allocation, no
/// locks.
pub trait Backend {
    /// A thread handle: the kernel thread id on Linux, the Mach thread port on Apple platforms.
    type Thread: Copy + Eq + Send + Sync + 'static;

    /// `metadata.os` in reports (`"linux"`, `"ios"`, `"macos"`).
    const OS: &'static str;

    /// The OS version as users know it (Apple: `17.2 (21C62)` from `kern.osproductversion` and
    /// `kern.osversion`); `None` where the kernel release (`uname`) is all there is.
    fn os_version() -> Option<String> {
        None
    }

    /// Reads one 8-byte word of this process's memory; `None` when it is not readable (never
    /// faults).
    fn read_word(addr: u64) -> Option<u64>;

    /// Removes pointer-authentication bits from a code address read from a stack or a register
    /// (arm64e); the identity elsewhere.
    fn strip_code_pointer(addr: u64) -> u64 {
        addr
    }

    /// The registers in a signal handler's context (its third argument).
    ///
    /// # Safety
    /// `ctx` must be the `ucontext_t` the kernel passed to an `SA_SIGINFO` handler.
    unsafe fn context_registers(ctx: *const c_void) -> Registers;

    /// The fault address (`si_addr`) of a signal handler's `siginfo_t`; 0 when `info` is null.
    ///
    /// # Safety
    /// `info` must be null or the `siginfo_t` the kernel passed to an `SA_SIGINFO` handler.
    unsafe fn fault_address(info: *const c_void) -> u64;

    /// The calling thread.
    fn current_thread() -> Self::Thread;

    /// The number reports carry as `thread_id`.
    fn thread_report_id(thread: Self::Thread) -> u64;

    /// Copies the thread's name into `out`; returns its length in bytes (0 when unnamed).
    fn thread_name(thread: Self::Thread, out: &mut [u8]) -> usize;

    /// Fills `out` with the process's threads; returns how many (at most `out.len()`).
    fn list_threads(out: &mut [Self::Thread]) -> usize;

    /// Stops a thread so that its stack holds still while it is read (Apple: `thread_suspend`);
    /// a no-op where threads are sampled from inside themselves (Linux).
    fn suspend(thread: Self::Thread);

    /// Undoes [`Backend::suspend`].
    fn resume(thread: Self::Thread);

    /// Walks another thread's stack into `out` (innermost first: its program counter, then
    /// return addresses); returns the number of frames, 0 when the thread could not be sampled
    /// within `timeout_ms`.
    fn sample_thread(thread: Self::Thread, out: &mut [u64], timeout_ms: u64) -> usize;

    /// Every loaded image, main executable first. Not async-signal-safe: called at install.
    fn loaded_images() -> Vec<Image>;

    /// Installs what the platform needs beyond the POSIX signal handlers (Linux: the sampling
    /// signal; Apple: the Mach exception server). Called once, from [`crate::crash::install`].
    fn install() -> std::io::Result<()>;

    /// CPU time the thread has used so far (user + system), in nanoseconds; `None` when the
    /// thread is gone. Linux: the thread's CPU-time clock (`clock_gettime`); Apple:
    /// `thread_info(THREAD_EXTENDED_INFO)`'s `pth_user_time + pth_system_time` (nanoseconds).
    fn thread_cpu_time_ns(thread: Self::Thread) -> Option<u64>;

    /// The process's memory footprint in bytes, as the system's memory limit counts it. Apple:
    /// `task_info(TASK_VM_INFO).phys_footprint` (what jetsam compares with its limit); Linux:
    /// the anonymous resident set (`/proc/self/statm` resident minus shared pages, `RssAnon`),
    /// the app's own memory a memory cgroup charges it for.
    fn memory_footprint() -> Option<u64>;

    /// When this process started, in ms since the Unix epoch, from the kernel. Linux:
    /// `/proc/self/stat` field 22 (clock ticks after boot) against the boot clock
    /// (`CLOCK_BOOTTIME`) and the wall clock (10 ms resolution); Apple: `sysctl(KERN_PROC_PID)`'s `p_starttime`.
    fn process_start_ms() -> Option<u64>;

    /// When the device booted, in seconds since the Unix epoch. Linux: `/proc/stat` `btime`;
    /// Apple: `sysctl kern.boottime`.
    fn boot_time_s() -> Option<u64>;

    /// The address range `[start, end)` of the program's `main` function. Apple: the main
    /// image's `LC_MAIN` entry offset, ended by the next entry of `LC_FUNCTION_STARTS`; Linux:
    /// the `main` symbol of `/proc/self/exe` (address and size), moved by the load bias.
    fn main_function() -> Option<(u64, u64)>;

    /// Whether a debugger is attached (`P_TRACED` on Apple platforms, `TracerPid` on Linux).
    fn debugger_attached() -> bool;

    /// Releases what [`Backend::list_threads`] handed out (Apple: one send right per listed
    /// thread port, `mach_port_deallocate`); nothing on Linux. For callers that list threads
    /// again and again (the CPU monitor), not for the crash handler.
    fn release_threads(_threads: &[Self::Thread]) {}

    /// Makes the main run loop itself answer the watchdog: Apple: a `CFRunLoopObserver` that
    /// calls [`crate::watchdog::heartbeat`] as each pass starts and
    /// [`crate::watchdog::will_wait`] before the loop waits. Returns `false` where there is no
    /// such run loop (Linux: the app calls them from its own loop).
    fn observe_main_run_loop() -> bool {
        false
    }
}

/// The backend of the platform being compiled.
#[cfg(target_os = "linux")]
pub type Host = linux::Linux;

/// The backend of the platform being compiled.
#[cfg(target_vendor = "apple")]
pub type Host = apple::Apple;

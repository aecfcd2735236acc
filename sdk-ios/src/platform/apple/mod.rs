//! The Apple backend (iOS, and macOS for the simulator host).
//!
//! - [`macho`]: `LC_UUID`, `__TEXT` and CPU type from a mapped image's load commands;
//! - [`exception`]: Mach exception numbers, names, and the signal XNU turns each into;
//! - `ffi`: the Mach, dyld and Darwin declarations used, transcribed from the SDK headers;
//! - `dyld_images`: the image list from dyld's add-image callback (kept current after
//!   `dlopen`);
//! - `threads`: `task_threads`, `thread_suspend`/`thread_resume`, `thread_get_state`
//!   (`ARM_THREAD_STATE64`, `x86_THREAD_STATE64`), thread names, `vm_read_overwrite` reads,
//!   pointer-authentication stripping;
//! - `mach_server`: the Mach exception server thread;
//! - `run_loop`: the main run loop's observer (pass starts and waits, for the watchdog).
//!
//! [`macho`] and [`exception`] are pure and compiled (and tested) everywhere. The rest calls
//! Mach and dyld: it is compiled for Apple targets and, with the `apple-typecheck` feature,
//! type-checked (never linked) on other hosts. This repository's machines have no Apple
//! toolchain, so that part is verified by the compiler and by the layout assertions in `ffi`,
//! not by running it (see the crate's README).

pub mod exception;
pub mod macho;

#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod dyld_images;
#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod ffi;
#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod mach_server;
#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod run_loop;
#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod threads;

#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
pub use backend::Apple;

#[cfg(any(target_vendor = "apple", feature = "apple-typecheck"))]
mod backend {
    use std::ffi::c_void;

    use super::{dyld_images, ffi, mach_server, run_loop, threads};
    use crate::images::Image;
    use crate::platform::Backend;
    use crate::unwind::Registers;

    /// The Apple backend.
    pub struct Apple;

    impl Backend for Apple {
        /// The Mach thread port.
        type Thread = ffi::mach_port_t;

        const OS: &'static str = std::env::consts::OS;

        fn os_version() -> Option<String> {
            let product = threads::sysctl_string(c"kern.osproductversion")?;
            Some(match threads::sysctl_string(c"kern.osversion") {
                Some(build) => format!("{product} ({build})"),
                None => product,
            })
        }

        fn read_word(addr: u64) -> Option<u64> {
            threads::read_word(addr)
        }

        fn strip_code_pointer(addr: u64) -> u64 {
            threads::strip_code_pointer(addr)
        }

        unsafe fn context_registers(ctx: *const c_void) -> Registers {
            // SAFETY: the caller passes the kernel's ucontext.
            unsafe { threads::context_registers(ctx) }
        }

        unsafe fn fault_address(info: *const c_void) -> u64 {
            if info.is_null() {
                return 0;
            }
            // SAFETY: the caller passes the kernel's siginfo.
            unsafe { (*(info as *const ffi::darwin_siginfo_head)).si_addr as u64 }
        }

        fn current_thread() -> ffi::mach_port_t {
            threads::current()
        }

        /// The system-wide thread id (`THREAD_IDENTIFIER_INFO`), as in Apple's `.ips`.
        fn thread_report_id(thread: ffi::mach_port_t) -> u64 {
            threads::thread_id(thread)
        }

        fn thread_name(thread: ffi::mach_port_t, out: &mut [u8]) -> usize {
            threads::name(thread, out)
        }

        fn list_threads(out: &mut [ffi::mach_port_t]) -> usize {
            let n = threads::list(out);
            // The exception server is an SDK thread, not the app's: leave it out.
            let server = threads::thread_id(mach_server::server_thread());
            let mut kept = 0;
            for i in 0..n {
                if threads::thread_id(out[i]) != server {
                    out[kept] = out[i];
                    kept += 1;
                } else {
                    // SAFETY: dropping the send right task_threads gave us for this port.
                    unsafe { ffi::mach_port_deallocate(ffi::mach_task_self(), out[i]) };
                }
            }
            kept
        }

        fn suspend(thread: ffi::mach_port_t) {
            threads::suspend(thread);
        }

        fn resume(thread: ffi::mach_port_t) {
            threads::resume(thread);
        }

        fn sample_thread(thread: ffi::mach_port_t, out: &mut [u64], _timeout_ms: u64) -> usize {
            threads::sample(thread, out)
        }

        fn loaded_images() -> Vec<Image> {
            dyld_images::loaded_images()
        }

        fn install() -> std::io::Result<()> {
            mach_server::install()
        }

        fn thread_cpu_time_ns(thread: ffi::mach_port_t) -> Option<u64> {
            threads::cpu_time_ns(thread)
        }

        fn memory_footprint() -> Option<u64> {
            threads::phys_footprint()
        }

        fn process_start_ms() -> Option<u64> {
            threads::process_start_ms()
        }

        fn boot_time_s() -> Option<u64> {
            threads::sysctl_timeval_s(c"kern.boottime")
        }

        fn main_function() -> Option<(u64, u64)> {
            dyld_images::main_function()
        }

        fn debugger_attached() -> bool {
            threads::being_debugged()
        }

        fn release_threads(threads: &[ffi::mach_port_t]) {
            for &thread in threads {
                // SAFETY: dropping the send right task_threads gave us for this port.
                unsafe { ffi::mach_port_deallocate(ffi::mach_task_self(), thread) };
            }
        }

        fn observe_main_run_loop() -> bool {
            run_loop::observe_main()
        }
    }
}

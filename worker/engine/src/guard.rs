//! Turning a panic inside a third-party parser into an error.
//!
//! Debug files and reports come from outside; a parser bug must cost one module (or give one
//! clear error for the report), not the job or the process. [`no_panic`] catches the panic;
//! [`quiet_caught_panics`], called once by a binary, keeps the default panic hook from printing
//! a message and a backtrace to the user for a panic that is caught there: the caller already
//! turns it into a one-line error, and the details go to the `debug` log level.
//!
//! Fuzz targets do not call [`quiet_caught_panics`]: libFuzzer's hook aborts on every panic,
//! caught or not, so that a parser panic is a finding there.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Once;

thread_local! {
    /// How many [`no_panic`] calls this thread is inside (they may nest).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    /// Panics [`no_panic`] caught on this thread since it started.
    static CAUGHT: Cell<u64> = const { Cell::new(0) };
}

/// Runs `f`; a panic becomes `Err("internal error while parsing: <message>")`.
pub fn no_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    DEPTH.with(|d| d.set(d.get() + 1));
    let outcome = catch_unwind(AssertUnwindSafe(f));
    DEPTH.with(|d| d.set(d.get() - 1));
    match outcome {
        Ok(result) => result,
        Err(payload) => {
            CAUGHT.with(|c| c.set(c.get() + 1));
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("internal error while parsing: {message}"))
        }
    }
}

/// The number of panics [`no_panic`] caught on the calling thread since the thread started
/// (a test's way to check that an input reached no panicking path: parsing runs on the
/// caller's thread).
pub fn panics_caught_on_this_thread() -> u64 {
    CAUGHT.with(Cell::get)
}

/// Installs, once per process, a panic hook that logs a panic raised inside [`no_panic`] at
/// `debug` level (message, location, and a backtrace when `RUST_BACKTRACE` asks for one) instead
/// of printing it; every other panic goes to the hook that was installed before, as it did.
/// Calling it again does nothing.
pub fn quiet_caught_panics() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if DEPTH.with(Cell::get) == 0 {
                return previous(info);
            }
            if tracing::enabled!(tracing::Level::DEBUG) {
                let backtrace = std::backtrace::Backtrace::capture();
                tracing::debug!(
                    "a parser panicked (caught, reported as a parse error): {info}\n{backtrace}"
                );
            }
        }));
    });
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// One test for both sides of the hook: it is process-wide, installed once.
    #[test]
    fn a_caught_panic_is_an_error_and_not_printed_any_other_panic_is() {
        // Panics that reach the hook installed before ours, from this test's threads only
        // (other tests may panic on theirs).
        static PRINTED: AtomicU64 = AtomicU64::new(0);
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("guard-test"));
            if ours {
                PRINTED.fetch_add(1, Ordering::SeqCst);
            }
            default(info)
        }));
        quiet_caught_panics();
        let caught = std::thread::Builder::new()
            .name("guard-test-caught".into())
            .spawn(|| {
                let before = panics_caught_on_this_thread();
                let r: Result<(), String> = no_panic(|| panic!("slice index {}", 13));
                assert_eq!(
                    r.unwrap_err(),
                    "internal error while parsing: slice index 13"
                );
                assert_eq!(no_panic(|| Ok(5)), Ok(5));
                panics_caught_on_this_thread() - before
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(caught, 1);
        assert_eq!(
            PRINTED.load(Ordering::SeqCst),
            0,
            "a caught panic was printed"
        );
        let outside = std::thread::Builder::new()
            .name("guard-test-outside".into())
            .spawn(|| panic!("not caught"))
            .unwrap()
            .join();
        assert!(outside.is_err());
        assert_eq!(
            PRINTED.load(Ordering::SeqCst),
            1,
            "an uncaught panic went unprinted"
        );
    }
}

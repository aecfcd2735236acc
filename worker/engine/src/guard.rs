//! Turning a panic inside a third-party parser into an error.
//!
//! Debug files come from outside; a parser bug must cost one module, not the job. Panics are
//! still printed by the default hook, so they stay visible.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// Runs `f`; a panic becomes `Err("internal error while parsing: <message>")`.
pub fn no_panic<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(format!("internal error while parsing: {message}"))
        }
    }
}

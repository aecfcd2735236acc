//! A retraced trace as Java prints one (`Throwable.printStackTrace`): what `symctl retrace`
//! prints by default, and what ProGuard's and R8's `retrace` print, so the outputs can be
//! diffed.
//!
//! ```text
//! com.example.shop.CheckoutFailedException: order 0 failed
//!     at com.example.shop.ShopApp.run(ShopApp.java:16)
//! Caused by: java.lang.IllegalStateException: negative price for pen
//!     at com.example.shop.PriceCalculator.checkPrice(PriceCalculator.java:17)
//!     ... 1 more
//! ```
//!
//! (each frame and `...` line starts with a tab). A frame without a file is `(Unknown Source)`, one with a file and no line `(File.java)`.

use std::fmt::Write as _;

use super::result::{JvmRetraceResult, Relation};

/// The text of `result`, one line per exception, frame and `... N more`, each ending in `\n`.
pub fn java_text(result: &JvmRetraceResult) -> String {
    let mut out = String::new();
    for exception in &result.exceptions {
        let prefix = match exception.relation {
            Relation::Thrown => "",
            Relation::CausedBy => "Caused by: ",
            Relation::Suppressed => "Suppressed: ",
        };
        let indent = "\t".repeat(exception.depth as usize);
        out.push_str(&indent);
        out.push_str(prefix);
        out.push_str(&exception.class);
        if let Some(message) = &exception.message {
            out.push_str(": ");
            out.push_str(message);
        }
        out.push('\n');
        for frame in &exception.frames {
            let _ = write!(out, "{indent}\tat {}.{}(", frame.class, frame.method);
            match (&frame.file, frame.line) {
                (Some(file), Some(line)) => {
                    let _ = write!(out, "{file}:{line}");
                }
                (Some(file), None) => out.push_str(file),
                (None, _) => out.push_str("Unknown Source"),
            }
            out.push_str(")\n");
        }
        if exception.omitted_frames > 0 {
            let _ = writeln!(out, "{indent}\t... {} more", exception.omitted_frames);
        }
    }
    out
}

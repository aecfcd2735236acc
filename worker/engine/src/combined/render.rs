//! A combined result as text: each exception as `type: value`, the thrown one first and each
//! cause after `Caused by: `, then a line per frame, innermost call first, in the style of its
//! layer (Java's `at class.method(File:line)`, JavaScript's `at function (file:line:column)`,
//! a native `at function (file:line)` or `(image + 0xoffset)`), tagged with the layer and, for
//! a frame not restored, its status.

use std::fmt::Write;

use super::result::{CombinedFrame, CombinedResult};
use crate::js::JsFrameStatus;
use crate::jvm::JvmFrameStatus;
use crate::result::FrameStatus;

/// The text of `result` ([module docs](self)).
pub fn text(result: &CombinedResult) -> String {
    let mut out = String::new();
    for (i, exception) in result.exceptions.iter().enumerate() {
        if i > 0 {
            out.push_str("Caused by: ");
        }
        out.push_str(&exception.type_);
        if let Some(value) = &exception.value {
            let _ = write!(out, ": {value}");
        }
        out.push('\n');
        for frame in &exception.frames {
            out.push_str("    at ");
            frame_text(&mut out, frame);
            out.push('\n');
        }
    }
    out
}

fn frame_text(out: &mut String, frame: &CombinedFrame) {
    match frame {
        CombinedFrame::Native(f) => {
            let _ = write!(out, "{}", f.function.as_deref().unwrap_or("?"));
            match (&f.filename, f.lineno, &f.image, f.image_addr) {
                (Some(file), Some(line), ..) => {
                    let _ = write!(out, " ({file}:{line})");
                }
                (_, _, Some(image), Some(base)) => {
                    let offset = f.instruction_addr.0.wrapping_sub(base.0);
                    let _ = write!(out, " ({image} + {offset:#x})");
                }
                _ => {
                    let _ = write!(out, " ({})", f.instruction_addr);
                }
            }
            out.push_str(" [native");
            if f.status != FrameStatus::Symbolicated {
                let _ = write!(out, ", {}", snake(&f.status));
            }
            out.push(']');
        }
        CombinedFrame::Jvm(f) => {
            let _ = write!(out, "{}.{}(", f.class, f.method);
            match (&f.file, f.line) {
                (Some(file), Some(line)) => {
                    let _ = write!(out, "{file}:{line}");
                }
                (Some(file), None) => out.push_str(file),
                _ => out.push_str("Unknown Source"),
            }
            out.push_str(") [java");
            if !matches!(
                f.status,
                JvmFrameStatus::Symbolicated | JvmFrameStatus::NotInMapping
            ) {
                let _ = write!(out, ", {}", snake(&f.status));
            }
            out.push(']');
        }
        CombinedFrame::Js(f) => {
            let _ = write!(out, "{}", f.function.as_deref().unwrap_or("<anonymous>"));
            match (&f.filename, f.lineno, f.colno) {
                (Some(file), Some(line), Some(column)) => {
                    let _ = write!(out, " ({file}:{line}:{column})");
                }
                _ => out.push_str(" [native code]"),
            }
            out.push_str(" [js");
            if !matches!(
                f.status,
                JsFrameStatus::Symbolicated | JsFrameStatus::Native
            ) {
                let _ = write!(out, ", {}", snake(&f.status));
            }
            out.push(']');
        }
        CombinedFrame::Other(f) => {
            let _ = write!(out, "{}", f.function.as_deref().unwrap_or("?"));
            if let Some(file) = &f.filename {
                let _ = write!(out, " ({file}");
                if let Some(line) = f.lineno {
                    let _ = write!(out, ":{line}");
                }
                out.push(')');
            }
        }
    }
}

/// A status as its JSON name (`missing_source_map`).
fn snake(status: &impl serde::Serialize) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

//! Rendering a result back into the report's own Apple format, as Xcode shows it.
//!
//! - `.crash` text ([`apple_text`]): every frame line of every thread section is rewritten from
//!   `0x104f4bf10 0x104f48000 + 16144` to `crash_write_null + 16 (crash.c:31)`; inlined calls
//!   become extra lines with the same frame number and address, innermost first.
//! - `.ips` JSON ([`apple_ips`]): the header line is kept as is; in the body every frame gets the
//!   fields Xcode fills in (`symbol`, `symbolLocation`, `sourceFile`, `sourceLine`), and inlined
//!   calls become extra frames with `"inline": true` before the frame they were inlined into.

mod apple_ips;
mod apple_text;

use crate::model::{NativeReport, ReportFormat};
use crate::result::{FrameResult, FrameStatus, SymbolicationResult};

/// Why a report cannot be rendered in Apple's format.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Only Apple `.crash` and `.ips` reports have an Apple rendering.
    #[error("--format apple needs an Apple .crash or .ips report; this is a {0} report")]
    NotApple(&'static str),
    /// The `.ips` text no longer parses (it parsed when the report was read, so this means the
    /// bytes given differ from the report's).
    #[error("cannot re-read the .ips report: {0}")]
    Ips(String),
}

/// Renders `result` in the format of the original report `data` (the same bytes
/// `report` was parsed from). Errors for non-Apple formats.
pub fn apple(
    data: &[u8],
    report: &NativeReport,
    result: &SymbolicationResult,
) -> Result<String, RenderError> {
    let text = String::from_utf8_lossy(data);
    match report.format {
        ReportFormat::AppleText => Ok(apple_text::render(&text, result)),
        ReportFormat::AppleIps => apple_ips::render(&text, result),
        other => Err(RenderError::NotApple(other.name())),
    }
}

/// The levels of raw frame `index` (innermost inlinee first), if it was symbolicated.
fn symbolicated_levels(frames: &[FrameResult], index: usize) -> &[FrameResult] {
    let start = frames.partition_point(|f| f.index < index);
    let end = frames.partition_point(|f| f.index <= index);
    let levels = &frames[start..end];
    if levels.iter().all(|f| f.status == FrameStatus::Symbolicated) {
        levels
    } else {
        &[]
    }
}

/// `function + offset (file:line)` as Xcode prints a frame. The offset (bytes from the
/// function's start) is printed for the outermost level only.
fn describe(level: &FrameResult) -> String {
    let mut out = level.function.clone().unwrap_or_else(|| "???".into());
    if !level.inlined
        && let Some(sym) = level.sym_addr
    {
        let offset = level.instruction_addr.0.wrapping_sub(sym.0);
        out.push_str(&format!(" + {offset}"));
    }
    if let Some(file) = &level.filename {
        match level.lineno {
            Some(line) => out.push_str(&format!(" ({file}:{line})")),
            None => out.push_str(&format!(" ({file})")),
        }
    }
    out
}

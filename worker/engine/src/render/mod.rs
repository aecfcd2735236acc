//! Rendering a result back into the report's own Apple format, as Xcode shows it.

use crate::model::NativeReport;
use crate::result::SymbolicationResult;

/// Why a report cannot be rendered in Apple's format.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Only Apple `.crash` and `.ips` reports have an Apple rendering.
    #[error("--format apple needs an Apple .crash or .ips report; this is a {0} report")]
    NotApple(&'static str),
}

/// Renders `result` in the format of the original report `data`.
pub fn apple(
    data: &[u8],
    report: &NativeReport,
    result: &SymbolicationResult,
) -> Result<String, RenderError> {
    let _ = (data, result);
    Err(RenderError::NotApple(report.format.name()))
}

//! Readers for every supported crash report format, and the detection that picks one.
//!
//! [`parse_report`] looks at the content only (never the file name):
//! - text that starts with `{` and holds two JSON documents (a one-line header, then a body) is an
//!   Apple `.ips` report; a single JSON object is KSCrash (`binary_images` + `crash`), a Sentry
//!   event (`debug_meta` or `exception`), a symbolicator request (`modules` + `stacktraces`), or
//!   a bare `.ips` body (`usedImages` + `threads`);
//! - text with a tombstone's `*** *** ***` banner (or a `pid: …, tid: …` line and a `backtrace:`
//!   line) is an Android text tombstone ([`tombstone_text`]);
//! - other text is read as an Apple text crash report (`apple-crash-report-parser`);
//! - binary input that decodes as a protobuf tombstone whose crashed thread is among its
//!   threads is an Android tombstone;
//! - a minidump (`MDMP`) is walked without unwind information ([`crate::minidump`] walks it
//!   with its images' CFI).
//!
//! Every reader maps into [`crate::model::NativeReport`]; frames come out innermost first.

mod apple_ips;
mod apple_text;
pub(crate) mod fields;
mod kscrash;
mod lenient;
pub mod routing;
mod sentry;
mod symbolicator;
pub mod tombstone;
pub mod tombstone_text;

use serde_json::Value;

use crate::model::{Modules, NativeReport, ReportFormat};
use lenient::TopLevel;

pub use apple_ips::split_header as split_ips_header;
pub use fields::{arch_from_macho_cpu, parse_addr};

/// Why a report could not be read at all. Each message is one line.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The input is empty (0 bytes, or whitespace only).
    #[error("the report is empty")]
    Empty,
    /// The input is neither JSON nor an Apple text crash report.
    #[error("not a crash report: {0}")]
    Unrecognized(String),
    /// The input is JSON, but none of the supported JSON report shapes.
    #[error("JSON is not a supported crash report ({0})")]
    UnknownJson(String),
    /// The input looked like JSON but does not parse.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// The format was recognised, but a required part is missing or has the wrong type.
    #[error("malformed {format} report: {message}")]
    Malformed {
        /// Which format's reader failed (see [`ReportFormat::name`]).
        format: &'static str,
        /// What is wrong, with the JSON path or text line where it helps.
        message: String,
    },
}

impl ReportError {
    pub(crate) fn malformed(format: ReportFormat, message: impl Into<String>) -> Self {
        ReportError::Malformed {
            format: format.name(),
            message: message.into(),
        }
    }
}

/// Reads a crash report of any supported format, detected from its content, for a result that
/// lists the images its frames use ([`Modules::Referenced`]; see [`parse_report_with`]).
///
/// `data` is the whole report file. Errors: [`ReportError`], never a panic, whatever the bytes.
pub fn parse_report(data: &[u8]) -> Result<NativeReport, ReportError> {
    parse_report_with(data, Modules::Referenced)
}

/// Reads a crash report of any supported format, detected from its content, for a result that
/// lists `modules` ([`NativeReport::modules`]). With [`Modules::Referenced`] the Sentry reader
/// reads only the address range of an image no frame is in (not its path, debug id or arch):
/// most of a Sentry event is its image list.
///
/// `data` is the whole report file. Errors: [`ReportError`], never a panic, whatever the bytes.
pub fn parse_report_with(data: &[u8], modules: Modules) -> Result<NativeReport, ReportError> {
    let mut report = read(data, modules)?;
    report.modules = modules;
    Ok(report)
}

fn read(data: &[u8], modules: Modules) -> Result<NativeReport, ReportError> {
    // A minidump here has no debug files to unwind with: its stacks are walked by frame
    // pointers and stack scanning; `crate::minidump::stackwalk` walks with CFI.
    if crate::minidump::is_minidump(data) {
        return crate::minidump::stackwalk(data, &Default::default(), modules);
    }
    let text = match std::str::from_utf8(data) {
        Ok(text) => text,
        Err(e) => {
            if let Some(report) = tombstone::try_parse(data) {
                return report;
            }
            return Err(ReportError::Unrecognized(format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.valid_up_to()
            )));
        }
    };
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err(ReportError::Empty);
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        return parse_json_report(trimmed, modules);
    }
    if tombstone_text::looks_like(trimmed) {
        return tombstone_text::parse(trimmed);
    }
    apple_text::parse(text)
}

/// Detects the format of a report without reading all of it into the model.
///
/// Same detection as [`parse_report`]; returns `None` for input it cannot classify.
pub fn detect_format(data: &[u8]) -> Option<ReportFormat> {
    if crate::minidump::is_minidump(data) {
        return Some(ReportFormat::Minidump);
    }
    if std::str::from_utf8(data).is_err() && tombstone::try_parse(data).is_some() {
        return Some(ReportFormat::Tombstone);
    }
    let text = std::str::from_utf8(data).ok()?.trim();
    if text.starts_with('{') {
        if let Some((_, body)) = apple_ips::split_header(text) {
            return serde_json::from_str::<Value>(body)
                .ok()
                .map(|_| ReportFormat::AppleIps);
        }
        let top: TopLevel = serde_json::from_str(text).ok()?;
        return json_shape(&top).ok();
    }
    if tombstone_text::looks_like(text) {
        return Some(ReportFormat::Tombstone);
    }
    apple_text::looks_like_apple_text(text).then_some(ReportFormat::AppleText)
}

fn parse_json_report(text: &str, modules: Modules) -> Result<NativeReport, ReportError> {
    // The commonest report in one pass: a Sentry event read straight into the Sentry
    // reader's four fields. First, because it is one JSON document: an `.ips` (two documents)
    // fails it at the end of its small header, while looking for the `.ips` header's line
    // end first scanned the whole of a one-line event.
    if let Some(report) = sentry::parse_event(text, modules) {
        return report;
    }
    // `.ips`: a single-line JSON header followed by the JSON body.
    if let Some((header, body)) = apple_ips::split_header(text) {
        let header: Value = serde_json::from_str(header)
            .map_err(|e| ReportError::InvalidJson(format!("ips header: {e}")))?;
        let body: Value = serde_json::from_str(body)
            .map_err(|e| ReportError::InvalidJson(format!("ips body: {e}")))?;
        return apple_ips::parse(Some(&header), &body);
    }
    // Else the top-level keys first (a scan that builds nothing), then each reader parses what
    // it uses: the Sentry reader only its four fields, typed; the others a `Value` of the whole.
    let top: TopLevel =
        serde_json::from_str(text).map_err(|e| ReportError::InvalidJson(e.to_string()))?;
    let format = json_shape(&top)?;
    if format == ReportFormat::SentryEvent {
        return match sentry::parse(&top, modules) {
            // A key given twice in one object: the typed readers refuse it, where a
            // `serde_json::Value` keeps the last one. Rare: read the event once through `Value`
            // to drop the duplicates, then as usual.
            Err(ReportError::InvalidJson(m)) if m.contains("duplicate field") => {
                let value: Value = serde_json::from_str(text)
                    .map_err(|e| ReportError::InvalidJson(e.to_string()))?;
                let deduplicated = value.to_string();
                let top: TopLevel = serde_json::from_str(&deduplicated)
                    .map_err(|e| ReportError::InvalidJson(e.to_string()))?;
                sentry::parse(&top, modules)
            }
            other => other,
        };
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| ReportError::InvalidJson(e.to_string()))?;
    match format {
        ReportFormat::KsCrash => kscrash::parse(&value),
        ReportFormat::SymbolicatorRequest => symbolicator::parse(&value),
        ReportFormat::AppleIps => apple_ips::parse(None, &value),
        ReportFormat::SentryEvent
        | ReportFormat::AppleText
        | ReportFormat::Minidump
        | ReportFormat::Tombstone => {
            unreachable!("handled above; json_shape yields JSON formats only")
        }
    }
}

fn json_shape(top: &TopLevel<'_>) -> Result<ReportFormat, ReportError> {
    if let TopLevel::NotObject(kind) = top {
        return Err(ReportError::UnknownJson(format!(
            "top level is {kind}, expected an object"
        )));
    }
    let has = |k: &str| top.has(k);
    if has("binary_images") && has("crash") {
        Ok(ReportFormat::KsCrash)
    } else if has("usedImages") && has("threads") {
        Ok(ReportFormat::AppleIps)
    } else if has("modules") && has("stacktraces") {
        Ok(ReportFormat::SymbolicatorRequest)
    } else if has("debug_meta") || has("exception") {
        Ok(ReportFormat::SentryEvent)
    } else {
        // The first six distinct keys (a key given twice counts once, as in a `Value`).
        let mut keys: Vec<&str> = Vec::new();
        for key in top.keys() {
            if keys.len() == 6 {
                break;
            }
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys.sort_unstable();
        Err(ReportError::UnknownJson(format!(
            "top-level keys [{}]; expected an .ips report, KSCrash, a Sentry event or a \
             symbolicator request",
            keys.join(", ")
        )))
    }
}

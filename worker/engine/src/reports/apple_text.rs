//! Apple's text crash report (`.crash`, "Report Version: 104"), read with the
//! `apple-crash-report-parser` crate.
//!
//! Threads appear as `Thread N:` / `Thread N Crashed:` sections with frames innermost first;
//! `Binary Images:` gives each image's load range, arch, UUID and path; the crashed thread's
//! registers come from `Thread N crashed with ARM Thread State`.

use apple_crash_report_parser::AppleCrashReport;

use super::ReportError;
use super::fields::{parse_arch, signal_in_text};
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::AppleText;

/// Whether text has the landmarks of an Apple crash report: a `Thread N:` section or a
/// `Binary Images:` section (header lines are optional: fragments without them are valid).
pub fn looks_like_apple_text(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_end();
        l.starts_with("Binary Images:")
            || l.strip_prefix("Thread ").is_some_and(|rest| {
                let digits =
                    rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                let tail = rest[digits..].trim_start();
                digits > 0 && (tail.starts_with(':') || tail.starts_with("Crashed"))
            })
    })
}

pub fn parse(text: &str) -> Result<NativeReport, ReportError> {
    if !looks_like_apple_text(text) {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let first: String = first.chars().take(60).collect();
        return Err(ReportError::Unrecognized(format!(
            "neither JSON nor an Apple crash report (no `Thread N:` or `Binary Images:` section); first line: {first:?}"
        )));
    }
    let parsed: AppleCrashReport = text
        .parse()
        .map_err(|e| ReportError::malformed(FORMAT, format!("{e}")))?;

    let arch = parsed
        .code_type
        .as_deref()
        .map(parse_arch)
        .unwrap_or(symbolic_common::Arch::Unknown);
    let images: Vec<Image> = parsed
        .binary_images
        .iter()
        .map(|i| Image {
            code_file: Some(if i.path.is_empty() {
                i.name.clone()
            } else {
                i.path.clone()
            }),
            debug_id: super::fields::parse_debug_id(&i.uuid.to_string()),
            arch: match parse_arch(&i.arch) {
                symbolic_common::Arch::Unknown => arch,
                a => a,
            },
            image_addr: i.addr.0,
            // The text gives an inclusive end address; the parser's size is `end - start`.
            image_size: i.size.saturating_add(1),
        })
        .collect();
    let arch = if arch == symbolic_common::Arch::Unknown {
        images.first().map(|i| i.arch).unwrap_or(arch)
    } else {
        arch
    };

    let exception_type = parsed.metadata.get("Exception Type").cloned();
    let signal = exception_type.as_deref().and_then(signal_in_text);
    let crashed_index = parsed.threads.iter().position(|t| t.crashed).or_else(|| {
        let n: u64 = parsed
            .metadata
            .get("Crashed Thread")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        parsed.threads.iter().position(|t| t.id == n)
    });
    let threads = parsed
        .threads
        .iter()
        .enumerate()
        .map(|(index, t)| Thread {
            id: t.id,
            // iOS writes `Thread 0 name:  Dispatch queue: com.apple.main-thread`, which the
            // parser reads as the name; the queue label alone is the useful part.
            name: t
                .name
                .as_deref()
                .map(|n| {
                    n.strip_prefix("Dispatch queue:")
                        .unwrap_or(n)
                        .trim()
                        .to_owned()
                })
                .or_else(|| t.dispatch_queue.clone()),
            crashed: crashed_index == Some(index),
            ip_register: t
                .registers
                .as_ref()
                .and_then(|r| r.get("pc").or_else(|| r.get("rip")))
                .map(|a| a.0),
            frames: t
                .frames
                .iter()
                .map(|f| RawFrame {
                    instruction_addr: f.instruction_addr.0,
                    function: f.symbol.clone(),
                    image_index: None,
                })
                .collect(),
        })
        .collect();

    Ok(NativeReport {
        format: FORMAT,
        arch,
        crash_reason: exception_type,
        signal,
        threads,
        images,
    })
}

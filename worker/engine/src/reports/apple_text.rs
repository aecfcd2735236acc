//! Apple's text crash report (`.crash`), read with the `apple-crash-report-parser` crate:
//! the classic layout ("Report Version: 104") and the one Console and Xcode write from `.ips`
//! files since macOS 12 / iOS 15 ("Translated Report", "Report Version: 12").
//!
//! Threads appear as `Thread N:` / `Thread N Crashed:` sections with frames innermost first;
//! `Binary Images:` gives each image's load range, arch, UUID and path; the crashed thread's
//! registers come from `Thread N crashed with ARM Thread State`.
//!
//! The macOS 12 layout differs where the upstream parser (0.6) looks: image lines carry no
//! arch (`0x10e30e000 - 0x10e311fff CrashingTest (*) <01d2a9d5-1f8a-35c8-9228-7c7cca13c5fc>
//! /path`), which its image pattern requires, so it finds no image at all; and thread headers
//! hold the queue (`Thread 0 Crashed::  Dispatch queue: com.apple.main-thread`), which it reads
//! as the name `:  Dispatch queue: …`. [`with_image_archs`] gives such image lines the arch of
//! `Code Type:` before parsing, and thread names are cleaned after.

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

/// `text` with every `Binary Images:` line that names no arch (the macOS 12 layout:
/// `START - END NAME (VERSION) <UUID> PATH`) given the arch of `Code Type:` (`unknown` when
/// there is none) after its name, as the classic layout writes it. Lines that have an arch, and
/// reports with no such line, are returned as they are.
pub fn with_image_archs(text: &str) -> std::borrow::Cow<'_, str> {
    let code_type = text
        .lines()
        .find_map(|l| l.strip_prefix("Code Type:"))
        .map(|v| parse_arch(v.trim()))
        .unwrap_or(symbolic_common::Arch::Unknown);
    let mut out: Option<String> = None;
    let mut in_images = false;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let body = line.trim_end_matches(['\n', '\r']);
        if body.starts_with("Binary Images:") {
            in_images = true;
        }
        let rewritten = in_images
            .then(|| image_line_with_arch(body, code_type.name()))
            .flatten();
        match (rewritten, &mut out) {
            (Some(fixed), out) => {
                let out = out
                    .get_or_insert_with(|| text.split_inclusive('\n').take(n).collect::<String>());
                out.push_str(&fixed);
                out.push_str(&line[body.len()..]);
            }
            (None, Some(out)) => out.push_str(line),
            (None, None) => {}
        }
    }
    match out {
        Some(fixed) => std::borrow::Cow::Owned(fixed),
        None => std::borrow::Cow::Borrowed(text),
    }
}

/// An image line without an arch, with `arch` put after the name; `None` for any other line.
fn image_line_with_arch(line: &str, arch: &str) -> Option<String> {
    let trimmed = line.trim_start();
    if !trimmed.starts_with("0x") {
        return None;
    }
    let open = line.find('<')?;
    // `START - END NAME` or `START - END NAME ARCH`, then an optional `(VERSION)`.
    let head = line[..open].trim_end();
    let (before_version, version) = match head.strip_suffix(')') {
        Some(rest) => {
            let start = rest.rfind('(')?;
            (rest[..start].trim_end(), &head[start..])
        }
        None => (head, ""),
    };
    let last = before_version.rsplit([' ', '\t']).next()?;
    let known_arch = last
        .parse::<symbolic_common::Arch>()
        .is_ok_and(|a| a != symbolic_common::Arch::Unknown);
    // The range and a name at least: `0x… - 0x… NAME`.
    if known_arch || before_version.split_whitespace().count() < 4 {
        return None;
    }
    let version = if version.is_empty() {
        String::new()
    } else {
        format!(" {version}")
    };
    Some(format!(
        "{before_version} {arch}{version} {}",
        &line[open..]
    ))
}

pub fn parse(text: &str) -> Result<NativeReport, ReportError> {
    if !looks_like_apple_text(text) {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let first: String = first.chars().take(60).collect();
        return Err(ReportError::Unrecognized(format!(
            "neither JSON nor an Apple crash report (no `Thread N:` or `Binary Images:` section); first line: {first:?}"
        )));
    }
    let parsed: AppleCrashReport = with_image_archs(text)
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
            // iOS writes `Thread 0 name:  Dispatch queue: com.apple.main-thread`, and macOS 12
            // `Thread 0 Crashed::  Dispatch queue: …` (read as the name `:  Dispatch queue: …`);
            // the queue label alone is the useful part.
            name: t
                .name
                .as_deref()
                .map(|n| {
                    let n = n.trim_start_matches(':').trim();
                    n.strip_prefix("Dispatch queue:")
                        .unwrap_or(n)
                        .trim()
                        .to_owned()
                })
                .filter(|n| !n.is_empty())
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
                    trust: None,
                })
                .collect(),
        })
        .collect();

    let mut report = NativeReport::crash(FORMAT, arch, exception_type, signal, threads, images);
    report.facets = facets(&parsed.metadata);
    Ok(report)
}

/// The facets of a text report, from its header lines: `Identifier:` and `Version:` (the
/// release; `build (version)` on iOS, `version (build)` on macOS, see
/// [`crate::facets::split_apple_version`]), `OS Version:` and `Hardware Model:`.
fn facets(metadata: &std::collections::BTreeMap<String, String>) -> crate::facets::ReportFacets {
    let field = |name: &str| metadata.get(name).map_or("", String::as_str);
    let os = crate::facets::os_name(field("OS Version"));
    let device = field("Hardware Model");
    let build_first = crate::facets::is_apple_mobile(&os, device);
    let (version, build) = crate::facets::split_apple_version(field("Version"), build_first);
    crate::facets::ReportFacets {
        release: crate::facets::release(field("Identifier"), version, build),
        dist: None,
        os: Some(os),
        device: Some(device.to_owned()),
    }
    .cleaned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macos12_image_lines_get_the_code_type_arch() {
        let text = "Code Type:             X86-64 (Native)\n\nBinary Images:\n       0x10e30e000 -        0x10e311fff CrashingTest (*) <01d2a9d5-1f8a-35c8-9228-7c7cca13c5fc> /Users/u/CrashingTest\n       0x1163c9000 -        0x116434fff dyld (1.0) <3b9f7a7e-4b1d-3e0e-9d0d-0b7b4f2d1a11> /usr/lib/dyld\n0x0 - 0xffffffffffffffff ??? (*) <00000000-0000-0000-0000-000000000000> ???\n";
        let fixed = with_image_archs(text);
        let lines: Vec<&str> = fixed.lines().collect();
        assert_eq!(
            lines[3],
            "       0x10e30e000 -        0x10e311fff CrashingTest x86_64 (*) <01d2a9d5-1f8a-35c8-9228-7c7cca13c5fc> /Users/u/CrashingTest"
        );
        assert_eq!(
            lines[4],
            "       0x1163c9000 -        0x116434fff dyld x86_64 (1.0) <3b9f7a7e-4b1d-3e0e-9d0d-0b7b4f2d1a11> /usr/lib/dyld"
        );
        assert_eq!(
            lines[5],
            "0x0 - 0xffffffffffffffff ??? x86_64 (*) <00000000-0000-0000-0000-000000000000> ???"
        );
        // The classic layout is left as it is (no copy).
        let classic = "Binary Images:\n0x104f48000 - 0x104f4ffff DemoApp arm64  <4c4c443b55553144a1263cc30cf88fdb> /p/DemoApp\n";
        assert!(matches!(
            with_image_archs(classic),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}

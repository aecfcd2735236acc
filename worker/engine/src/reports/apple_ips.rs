//! Apple's JSON crash report (`.ips`, iOS 15 / macOS 12 and later).
//!
//! Layout (Apple, "Interpreting the JSON format of a crash report"): a one-line JSON header
//! (`app_name`, `bug_type`, `os_version`, …), a newline, then the JSON body with `cpuType`,
//! `usedImages[]` (`base`, `size`, `uuid`, `arch`, `path`, `name`), `threads[]` (`frames[]` of
//! `imageIndex` + `imageOffset`, `triggered`, `threadState.pc.value`), `faultingThread`,
//! `exception` (`type`, `signal`) and `termination`. Frames are innermost first.

use serde_json::Value;

use super::ReportError;
use super::fields::{
    crash_reason, parse_addr, parse_arch, parse_debug_id, signal_number, str_field,
};
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::AppleIps;

/// Splits `.ips` text into its header line and body, if it has that shape: the first line is a
/// complete JSON object and more non-blank text follows.
pub fn split_header(text: &str) -> Option<(&str, &str)> {
    let (first, rest) = text.split_once('\n')?;
    let first = first.trim();
    if !(first.starts_with('{') && first.ends_with('}')) || rest.trim().is_empty() {
        return None;
    }
    serde_json::from_str::<serde::de::IgnoredAny>(first).ok()?;
    Some((first, rest))
}

pub fn parse(header: Option<&Value>, body: &Value) -> Result<NativeReport, ReportError> {
    if !body.is_object() {
        return Err(ReportError::malformed(
            FORMAT,
            "the body is not a JSON object",
        ));
    }
    let arch = str_field(body, "cpuType")
        .map(parse_arch)
        .unwrap_or(symbolic_common::Arch::Unknown);
    let used_images = body
        .get("usedImages")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`usedImages` is not an array"))?;
    // Keep indices aligned with `imageIndex`: an image without a base still takes its slot.
    let images: Vec<Image> = used_images
        .iter()
        .map(|i| Image {
            code_file: str_field(i, "path")
                .or_else(|| str_field(i, "name"))
                .map(str::to_owned),
            debug_id: str_field(i, "uuid").and_then(parse_debug_id),
            arch: str_field(i, "arch").map(parse_arch).unwrap_or(arch),
            image_addr: i.get("base").and_then(parse_addr).unwrap_or(0),
            image_size: i.get("size").and_then(parse_addr).unwrap_or(0),
        })
        .collect();

    let exception = body.get("exception");
    let signal_name = exception.and_then(|e| str_field(e, "signal"));
    let crash_reason = crash_reason(exception.and_then(|e| str_field(e, "type")), signal_name);
    let signal = signal_name.and_then(signal_number);

    let list = body
        .get("threads")
        .and_then(Value::as_array)
        .ok_or_else(|| ReportError::malformed(FORMAT, "`threads` is not an array"))?;
    let faulting = body
        .get("faultingThread")
        .and_then(Value::as_u64)
        .map(|i| i as usize)
        .or_else(|| {
            list.iter()
                .position(|t| t.get("triggered").and_then(Value::as_bool) == Some(true))
        });

    let mut threads = Vec::with_capacity(list.len());
    for (index, t) in list.iter().enumerate() {
        let frames = match t.get("frames") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(f)) => f.as_slice(),
            Some(_) => {
                return Err(ReportError::malformed(
                    FORMAT,
                    format!("`threads[{index}].frames` is not an array"),
                ));
            }
        };
        let mut raw = Vec::with_capacity(frames.len());
        for (n, f) in frames.iter().enumerate() {
            let image_index = f
                .get("imageIndex")
                .and_then(Value::as_u64)
                .map(|i| i as usize);
            let offset = f.get("imageOffset").and_then(parse_addr);
            let (instruction_addr, image_index) = match (image_index, offset) {
                (Some(i), Some(off)) if i < images.len() => {
                    (images[i].image_addr.wrapping_add(off), Some(i))
                }
                (Some(i), Some(_)) => {
                    return Err(ReportError::malformed(
                        FORMAT,
                        format!(
                            "`threads[{index}].frames[{n}].imageIndex` is {i}, but there are \
                             only {} images",
                            images.len()
                        ),
                    ));
                }
                // An unknown image (`imageIndex` absent): the offset is the absolute address.
                (None, Some(addr)) => (addr, None),
                _ => (0, None),
            };
            raw.push(RawFrame {
                instruction_addr,
                function: str_field(f, "symbol").map(str::to_owned),
                image_index,
                trust: None,
            });
        }
        threads.push(Thread {
            id: index as u64,
            name: str_field(t, "name")
                .or_else(|| str_field(t, "queue"))
                .map(str::to_owned),
            crashed: faulting == Some(index),
            ip_register: t.pointer("/threadState/pc/value").and_then(parse_addr),
            frames: raw,
        });
    }

    let mut report = NativeReport::crash(FORMAT, arch, crash_reason, signal, threads, images);
    report.facets = facets(header, body);
    Ok(report)
}

/// The facets of an `.ips` report: the body's `bundleInfo` (`CFBundleIdentifier`,
/// `CFBundleShortVersionString`, `CFBundleVersion`), `osVersion` (`train` + `build`) and
/// `modelCode`; where the body lacks one, the header's `bundleID`, `app_version`,
/// `build_version` and `os_version`.
fn facets(header: Option<&Value>, body: &Value) -> crate::facets::ReportFacets {
    let body_field = |pointer: &str| body.pointer(pointer).and_then(Value::as_str);
    let header_field = |name: &str| header.and_then(|h| str_field(h, name));
    let either = |pointer: &str, name: &str| {
        body_field(pointer)
            .or_else(|| header_field(name))
            .unwrap_or("")
    };
    let os = match (
        body_field("/osVersion/train"),
        body_field("/osVersion/build"),
    ) {
        (Some(train), Some(build)) => format!("{train} ({build})"),
        (Some(train), None) => train.to_owned(),
        _ => header_field("os_version").unwrap_or("").to_owned(),
    };
    crate::facets::ReportFacets {
        release: crate::facets::release(
            either("/bundleInfo/CFBundleIdentifier", "bundleID"),
            either("/bundleInfo/CFBundleShortVersionString", "app_version"),
            either("/bundleInfo/CFBundleVersion", "build_version"),
        ),
        dist: None,
        os: Some(crate::facets::os_name(&os)),
        device: str_field(body, "modelCode").map(str::to_owned),
    }
    .cleaned()
}

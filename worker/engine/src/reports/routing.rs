//! Routing hints: the debug id of the image holding most frames of a report's crashed thread
//! (the app's own binary, whose debug file is the big one to keep cached), for the master's
//! cache-affinity routing.
//!
//! [`routing_image`] reads Sentry events and KSCrash JSON with typed, borrowing serde structs
//! that skip every other field, several times cheaper than building the model; any other
//! format, or a report these light readers do not take, goes through [`parse_report`] and
//! [`main_image`], with the same rule and the same format detection (`reports::parse_json_report`).

use serde::Deserialize;
use symbolic_common::DebugId;

use super::fields::{parse_addr_str, parse_debug_id};
use super::{ReportError, parse_report};
use crate::model::NativeReport;

/// The debug id of the image holding most frames of the crashed thread (the first thread when
/// none crashed); ties go to the image listed first. `Ok(None)` when no frame falls in an image
/// with a debug id; `Err` when the report cannot be read at all ([`parse_report`]'s error).
pub fn routing_image(data: &[u8]) -> Result<Option<DebugId>, ReportError> {
    if let Some(found) = kscrash_light(data).or_else(|| sentry_light(data)) {
        return Ok(found);
    }
    Ok(main_image(&parse_report(data)?))
}

/// [`routing_image`]'s rule on a parsed report.
pub fn main_image(report: &NativeReport) -> Option<DebugId> {
    let thread = report
        .threads
        .iter()
        .find(|t| t.crashed)
        .or(report.threads.first())?;
    let images: Vec<(u64, Option<DebugId>)> = report
        .images
        .iter()
        .map(|i| (i.image_addr, i.debug_id))
        .collect();
    most_frames(
        &images,
        thread
            .frames
            .iter()
            .map(|f| (f.image_index, f.instruction_addr)),
    )
}

/// Counts frames per image (by index, else by the highest image address at or below the
/// frame's), over images with a debug id; the image with most, the first listed on a tie.
fn most_frames(
    images: &[(u64, Option<DebugId>)],
    frames: impl Iterator<Item = (Option<usize>, u64)>,
) -> Option<DebugId> {
    let mut counts: Vec<(usize, u64)> = Vec::new();
    for (index, addr) in frames {
        let image = index.or_else(|| {
            images
                .iter()
                .enumerate()
                .filter(|(_, (image_addr, _))| *image_addr <= addr)
                .max_by_key(|(_, (image_addr, _))| *image_addr)
                .map(|(n, _)| n)
        });
        if let Some(n) = image.filter(|&n| images.get(n).is_some_and(|i| i.1.is_some())) {
            match counts.iter_mut().find(|(i, _)| *i == n) {
                Some((_, c)) => *c += 1,
                None => counts.push((n, 1)),
            }
        }
    }
    counts
        .iter()
        .max_by_key(|(n, c)| (*c, std::cmp::Reverse(*n)))
        .and_then(|(n, _)| images[*n].1)
}

/// An address as KSCrash writes it: a number, or a string (`0x…` or decimal).
#[derive(Deserialize)]
#[serde(untagged)]
enum Addr<'a> {
    Number(u64),
    Text(&'a str),
}

impl Addr<'_> {
    fn value(&self) -> Option<u64> {
        match self {
            Addr::Number(n) => Some(*n),
            Addr::Text(s) => parse_addr_str(s),
        }
    }
}

#[derive(Deserialize)]
struct Report<'a> {
    #[serde(borrow)]
    binary_images: Vec<Image<'a>>,
    #[serde(borrow)]
    crash: Crash<'a>,
}

#[derive(Deserialize)]
struct Image<'a> {
    #[serde(borrow, default)]
    uuid: Option<&'a str>,
    #[serde(borrow, default)]
    image_addr: Option<Addr<'a>>,
}

#[derive(Deserialize)]
struct Crash<'a> {
    #[serde(borrow)]
    threads: Vec<Thread<'a>>,
}

#[derive(Deserialize)]
struct Thread<'a> {
    #[serde(default)]
    crashed: Option<bool>,
    #[serde(borrow, default)]
    backtrace: Option<Backtrace<'a>>,
}

#[derive(Deserialize)]
struct Backtrace<'a> {
    #[serde(borrow, default)]
    contents: Option<Vec<Frame<'a>>>,
}

#[derive(Deserialize)]
struct Frame<'a> {
    #[serde(borrow, default)]
    instruction_addr: Option<Addr<'a>>,
}

/// The KSCrash light reader: `None` when `data` is not a KSCrash report it can read.
fn kscrash_light(data: &[u8]) -> Option<Option<DebugId>> {
    let report: Report = serde_json::from_slice(data).ok()?;
    // As the full reader: images without an address are left out (indexes follow).
    let images: Vec<(u64, Option<DebugId>)> = report
        .binary_images
        .iter()
        .filter_map(|i| {
            Some((
                i.image_addr.as_ref()?.value()?,
                i.uuid.and_then(parse_debug_id),
            ))
        })
        .collect();
    let thread = report
        .crash
        .threads
        .iter()
        .find(|t| t.crashed == Some(true))
        .or(report.crash.threads.first())?;
    let frames = thread
        .backtrace
        .as_ref()
        .and_then(|b| b.contents.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    Some(most_frames(
        &images,
        frames.iter().map(|f| {
            (
                None,
                f.instruction_addr
                    .as_ref()
                    .and_then(Addr::value)
                    .unwrap_or(0),
            )
        }),
    ))
}

/// `{"values": [...]}`, as Sentry wraps `exception` and `threads`.
#[derive(Deserialize)]
struct Values<T> {
    #[serde(default = "Vec::new")]
    values: Vec<T>,
}

#[derive(Deserialize)]
struct SentryEvent<'a> {
    #[serde(borrow, default)]
    debug_meta: Option<DebugMeta<'a>>,
    #[serde(borrow, default)]
    exception: Option<Values<Exception<'a>>>,
    #[serde(borrow, default)]
    threads: Option<Values<SentryThread<'a>>>,
    // Present in the other JSON formats: the full parser then reads the report as one of those.
    #[serde(default)]
    binary_images: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "usedImages")]
    used_images: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    modules: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct DebugMeta<'a> {
    #[serde(borrow, default)]
    images: Option<Vec<SentryImage<'a>>>,
}

#[derive(Deserialize)]
struct SentryImage<'a> {
    #[serde(borrow, default)]
    image_addr: Option<Addr<'a>>,
    #[serde(borrow, default)]
    debug_id: Option<&'a str>,
    #[serde(borrow, default)]
    uuid: Option<&'a str>,
}

#[derive(Deserialize)]
struct Exception<'a> {
    #[serde(borrow, default)]
    stacktrace: Option<Stack<'a>>,
}

#[derive(Deserialize)]
struct SentryThread<'a> {
    #[serde(default)]
    crashed: Option<bool>,
    #[serde(borrow, default)]
    stacktrace: Option<Stack<'a>>,
}

#[derive(Deserialize)]
struct Stack<'a> {
    #[serde(borrow, default)]
    frames: Option<Vec<Frame<'a>>>,
}

/// The Sentry event light reader: `None` when `data` is not a Sentry event it can read.
fn sentry_light(data: &[u8]) -> Option<Option<DebugId>> {
    let event: SentryEvent = serde_json::from_slice(data).ok()?;
    if event.binary_images.is_some() || event.used_images.is_some() || event.modules.is_some() {
        return None;
    }
    if event.debug_meta.is_none() && event.exception.is_none() {
        return None;
    }
    let images: Vec<(u64, Option<DebugId>)> = event
        .debug_meta
        .as_ref()
        .and_then(|m| m.images.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|i| {
            Some((
                i.image_addr.as_ref()?.value()?,
                i.debug_id.or(i.uuid).and_then(parse_debug_id),
            ))
        })
        .collect();
    // The crashed stack: the last exception with a stack trace; else the first thread marked
    // crashed; else the first thread (as `sentry::parse` and `main_image` decide).
    let exceptions = event
        .exception
        .as_ref()
        .map(|e| e.values.as_slice())
        .unwrap_or_default();
    let threads = event
        .threads
        .as_ref()
        .map(|t| t.values.as_slice())
        .unwrap_or_default();
    let stack = exceptions
        .iter()
        .rev()
        .find_map(|e| e.stacktrace.as_ref())
        .or_else(|| {
            threads
                .iter()
                .find(|t| t.crashed == Some(true))
                .or(threads.first())
                .and_then(|t| t.stacktrace.as_ref())
        });
    let frames = stack
        .and_then(|s| s.frames.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    Some(most_frames(
        &images,
        frames.iter().map(|f| {
            (
                None,
                f.instruction_addr
                    .as_ref()
                    .and_then(Addr::value)
                    .unwrap_or(0),
            )
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_light_reader_agrees_with_the_full_parse_on_every_crashprobe_event() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/crashprobe");
        let root = std::env::var_os("SYMCLUSTER_FIXTURES")
            .map(|f| std::path::PathBuf::from(f).join("crashprobe"))
            .unwrap_or(root);
        let (mut checked, mut found) = (0, 0);
        for build in ["release", "debug"] {
            for entry in std::fs::read_dir(root.join(build).join("arm64")).unwrap() {
                let data = std::fs::read(entry.unwrap().path()).unwrap();
                let light = sentry_light(&data).expect("Sentry events take the light path");
                let full = main_image(&parse_report(&data).unwrap());
                assert_eq!(light, full);
                found += usize::from(light.is_some());
                checked += 1;
            }
        }
        assert_eq!(checked, 42);
        eprintln!("{found} of 42 events route by a debug id");
        // The full parse finds 37 (the other 5 crash with no frame in an image with a debug id).
        assert_eq!(found, 37);
    }

    #[test]
    fn other_formats_and_bad_input_fall_back_to_the_full_parse() {
        let request = b"{\"modules\": [], \"stacktraces\": []}";
        assert!(kscrash_light(request).is_none());
        assert!(sentry_light(request).is_none());
        assert!(kscrash_light(b"{\"binary_images\": 3, \"crash\": {}}").is_none());
        assert!(routing_image(b"not a report").is_err());
        assert!(routing_image(b"{\"binary_images\": 3, \"crash\": {}}").is_err());
    }
}

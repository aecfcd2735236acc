//! Routing hints: the debug id of the image holding most frames of a report's crashed thread
//! (the app's own binary, whose debug file is the big one to keep cached), for the master's
//! cache-affinity routing.
//!
//! [`routing_image`] reads Sentry events and KSCrash JSON with typed, borrowing serde structs
//! that skip every other field, several times cheaper than building the model; any other
//! format, or a report these light readers do not take, goes through [`parse_report_with`] (every image) and
//! [`main_image`], with the same rule and the same format detection (`reports::parse_json_report`).

use serde::Deserialize;
use symbolic_common::DebugId;

use super::fields::{parse_addr_str, parse_debug_id};
use super::{ReportError, parse_report_with};
use crate::model::{Modules, NativeReport};

/// The debug id of the image holding most frames of the crashed thread (the first thread when
/// none crashed); ties go to the image listed first. `Ok(None)` when no frame falls in an image
/// with a debug id; `Err` when the report cannot be read at all ([`parse_report_with`]'s error).
///
/// A minidump is not walked here (its stacks need its images' CFI): the image its exception
/// context's program counter is in is taken ([`crate::minidump::crash_image`]).
pub fn routing_image(data: &[u8]) -> Result<Option<DebugId>, ReportError> {
    if crate::minidump::is_minidump(data) {
        return crate::minidump::crash_image(data);
    }
    if let Some(found) = light(data) {
        return Ok(found);
    }
    // Every image read whole: the rule below counts a frame in the image that starts at or
    // below it, wherever that image ends.
    Ok(main_image(&parse_report_with(data, Modules::All)?))
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

/// An address as KSCrash and Sentry write it: a number, or a string (`0x…` or decimal), read
/// straight into its value (`None` for a string that is not an address). Any other JSON type
/// fails the light read, and the full parser decides.
struct Addr(Option<u64>);

impl<'de> Deserialize<'de> for Addr {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Addr;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an address (number or string)")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Addr, E> {
                Ok(Addr(Some(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Addr, E> {
                Ok(Addr(parse_addr_str(v)))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// The fields both light readers need, read in one pass: KSCrash's `binary_images` and `crash`,
/// Sentry's `debug_meta`, `exception` and `threads`; `usedImages` and `modules` only to tell
/// the other JSON formats apart. Every other field is skipped unread.
#[derive(Deserialize)]
struct Light<'a> {
    #[serde(borrow, default)]
    binary_images: Option<Vec<Image<'a>>>,
    #[serde(default)]
    crash: Option<Crash>,
    #[serde(borrow, default)]
    debug_meta: Option<DebugMeta<'a>>,
    #[serde(default)]
    exception: Option<Values<Exception>>,
    #[serde(default)]
    threads: Option<Values<SentryThread>>,
    #[serde(default, rename = "usedImages")]
    used_images: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    modules: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct Image<'a> {
    #[serde(borrow, default)]
    uuid: Option<&'a str>,
    #[serde(default)]
    image_addr: Option<Addr>,
}

#[derive(Deserialize)]
struct Crash {
    threads: Vec<Thread>,
}

#[derive(Deserialize)]
struct Thread {
    #[serde(default)]
    crashed: Option<bool>,
    #[serde(default)]
    backtrace: Option<Backtrace>,
}

#[derive(Deserialize)]
struct Backtrace {
    #[serde(default)]
    contents: Option<Vec<Frame>>,
}

#[derive(Deserialize)]
struct Frame {
    #[serde(default)]
    instruction_addr: Option<Addr>,
}

/// `{"values": [...]}`, as Sentry wraps `exception` and `threads`.
#[derive(Deserialize)]
struct Values<T> {
    #[serde(default = "Vec::new")]
    values: Vec<T>,
}

#[derive(Deserialize)]
struct DebugMeta<'a> {
    #[serde(borrow, default)]
    images: Option<Vec<SentryImage<'a>>>,
}

#[derive(Deserialize)]
struct SentryImage<'a> {
    #[serde(default)]
    image_addr: Option<Addr>,
    #[serde(borrow, default)]
    debug_id: Option<&'a str>,
    #[serde(borrow, default)]
    uuid: Option<&'a str>,
}

#[derive(Deserialize)]
struct Exception {
    #[serde(default)]
    stacktrace: Option<Stack>,
}

#[derive(Deserialize)]
struct SentryThread {
    #[serde(default)]
    crashed: Option<bool>,
    #[serde(default)]
    stacktrace: Option<Stack>,
}

#[derive(Deserialize)]
struct Stack {
    #[serde(default)]
    frames: Option<Vec<Frame>>,
}

/// The light readers, one pass over `data`: `Some(result)` for a KSCrash report or a Sentry
/// event they can read, `None` to leave the report to the full parser (another format, or a
/// field of an unexpected type).
fn light(data: &[u8]) -> Option<Option<DebugId>> {
    let report: Light = serde_json::from_slice(data).ok()?;
    match (&report.binary_images, &report.crash) {
        (Some(images), Some(crash)) => Some(kscrash(images, crash)),
        _ if report.binary_images.is_some()
            || report.used_images.is_some()
            || report.modules.is_some() =>
        {
            None
        }
        _ if report.debug_meta.is_none() && report.exception.is_none() => None,
        _ => Some(sentry(&report)),
    }
}

fn frame_addrs(frames: &[Frame]) -> impl Iterator<Item = (Option<usize>, u64)> + '_ {
    frames.iter().map(|f| {
        (
            None,
            f.instruction_addr.as_ref().and_then(|a| a.0).unwrap_or(0),
        )
    })
}

/// KSCrash: the crashed thread's backtrace over `binary_images`.
fn kscrash(binary_images: &[Image<'_>], crash: &Crash) -> Option<DebugId> {
    // As the full reader: images without an address are left out (indexes follow).
    let images: Vec<(u64, Option<DebugId>)> = binary_images
        .iter()
        .filter_map(|i| Some((i.image_addr.as_ref()?.0?, i.uuid.and_then(parse_debug_id))))
        .collect();
    let thread = crash
        .threads
        .iter()
        .find(|t| t.crashed == Some(true))
        .or(crash.threads.first())?;
    let frames = thread
        .backtrace
        .as_ref()
        .and_then(|b| b.contents.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    most_frames(&images, frame_addrs(frames))
}

/// Sentry: the crashed stack over `debug_meta.images`.
fn sentry(event: &Light<'_>) -> Option<DebugId> {
    let images: Vec<(u64, Option<DebugId>)> = event
        .debug_meta
        .as_ref()
        .and_then(|m| m.images.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|i| {
            Some((
                i.image_addr.as_ref()?.0?,
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
    most_frames(&images, frame_addrs(frames))
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
                let light = light(&data).expect("Sentry events take the light path");
                let full = main_image(&parse_report_with(&data, Modules::All).unwrap());
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

    /// `shared/fixtures/kscrash/Example-Reports/*.json`.
    const KSCRASH_EXAMPLES: usize = 10;

    #[test]
    fn the_light_reader_agrees_with_the_full_parse_on_every_kscrash_example() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures/kscrash");
        let root = std::env::var_os("SYMCLUSTER_FIXTURES")
            .map(|f| std::path::PathBuf::from(f).join("kscrash"))
            .unwrap_or(root)
            .join("Example-Reports");
        let mut checked = 0;
        for entry in std::fs::read_dir(root).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let data = std::fs::read(&path).unwrap();
            let light = light(&data).expect("KSCrash reports take the light path");
            assert_eq!(
                light,
                main_image(&parse_report_with(&data, Modules::All).unwrap()),
                "{path:?}"
            );
            checked += 1;
        }
        assert_eq!(checked, KSCRASH_EXAMPLES);
    }

    #[test]
    fn other_formats_and_bad_input_fall_back_to_the_full_parse() {
        let request = b"{\"modules\": [], \"stacktraces\": []}";
        assert!(light(request).is_none());
        assert!(light(b"{\"binary_images\": 3, \"crash\": {}}").is_none());
        assert!(routing_image(b"not a report").is_err());
        assert!(routing_image(b"{\"binary_images\": 3, \"crash\": {}}").is_err());
    }
}

//! Reading a Sentry event whose frames cross layers (JavaScript, Java/Kotlin, native).
//!
//! Fields read (<https://develop.sentry.dev/sdk/data-model/event-payloads/>): `release`, `dist`,
//! `exception.values[]` (`type`, `module`, `value`, `stacktrace.frames[]`; an exception without
//! frames takes the stack of its thread in `threads.values[]`, by `thread_id`, else of the
//! thread marked `crashed`, as native SDKs send it), `debug_meta.images[]` and
//! `contexts.device.arch`. Sentry lists exceptions cause first and frames oldest call first;
//! they are read here the other way round, as every symcluster result shows them: the thrown
//! exception first, innermost call first. Unknown fields are ignored. The limits
//! ([`MAX_EXCEPTIONS`], [`MAX_FRAMES`], [`MAX_IMAGES`]) are checked in a first pass that keeps
//! nothing, before the event is read.
//!
//! A frame's layer ([`Layer`]) is its `platform` when that names one (`javascript`, `node`,
//! `hermes`; `java`, `kotlin`; `native`, `c`, `cocoa`, `objc`, `swift`), else what it holds:
//! an `instruction_addr` is native; a `colno`, or a file that is a JavaScript bundle (`.js`,
//! `.bundle`, `.jsbundle`, `.hbc`, an `app://` URL), is JavaScript; a `module` (a class name)
//! is Java. Others are kept as given ([`Layer::Other`]).
//!
//! - JavaScript: `abs_path` (else `filename`), `lineno` and `colno` are the frame's position,
//!   **1-based** as Sentry's data model says (for Hermes bytecode: line 1 and the bytecode
//!   offset Hermes prints plus one, the column [`crate::js::parse_stack`] reads from
//!   `address at` text); a frame without a line (`[native code]`) is a native JS frame. Its
//!   source map is the `debug_meta.images[]` entry of type `sourcemap` whose `code_file` is
//!   the frame's file, or has the same file name (by its `debug_id`; no fallback to the
//!   release then), else the event's `release` and `dist` with the file's name
//!   (`app:///index.android.bundle` → `index.android.bundle`).
//! - Java: `module` is the class (fully qualified), `function` the method, `filename` and
//!   `lineno` (1-based) as given; the mapping file is the first `debug_meta.images[]` entry of
//!   type `proguard` (its `uuid`).
//! - Native: `instruction_addr` (`"0x…"` or a number) is looked up in the images of
//!   `debug_meta.images[]` of type `elf`, `macho`, `pe` or `symbolic` (`debug_id`, or `uuid` for
//!   Mach-O; `code_file`, `image_addr`, `image_size`, `arch`).

use serde::Deserialize;
use serde_json::Value;
use symbolic_common::Arch;

use crate::js::JsFrame;
use crate::jvm::trace::JvmFrame;
use crate::model::{Image, RawFrame};
use crate::reports::fields::{parse_arch, parse_debug_id};
use crate::reports::parse_addr;

/// Most exceptions read from one event, and most threads (`threads.values`); more is refused.
pub const MAX_EXCEPTIONS: usize = 1_000;
/// Most frames read from one event, over all its exceptions; more is refused.
pub const MAX_FRAMES: usize = 100_000;
/// Most images read from `debug_meta.images`; more is refused.
pub const MAX_IMAGES: usize = 10_000;

/// The layer a frame belongs to: which engine restores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    /// JavaScript (Hermes, JSC): restored by source map.
    Js,
    /// Java/Kotlin: retraced by ProGuard/R8 mapping file.
    Jvm,
    /// Machine code: symbolicated by SymCache.
    Native,
    /// None of them (no position, class or address): kept as given.
    Other,
}

/// An event read: its exceptions with each frame in its layer, and what the layers need.
#[derive(Debug, Clone, PartialEq)]
pub struct CombinedReport {
    /// The exceptions, the thrown one first (Sentry's list reversed).
    pub exceptions: Vec<ExceptionIn>,
    /// The native images of `debug_meta.images`, in its order.
    pub images: Vec<Image>,
    /// The ProGuard/R8 mapping ids (`proguard` images' `uuid`, lowercase), in order.
    pub mapping_ids: Vec<String>,
    /// The event's `release` (empty when none).
    pub release: String,
    /// The event's `dist` (empty when none).
    pub dist: String,
    /// The `sourcemap` images: (`code_file`, `debug_id` as a lowercase UUID with dashes), in
    /// order.
    pub sourcemap_ids: Vec<(String, String)>,
    /// The device's architecture (`contexts.device.arch`), else unknown (the images' then).
    pub arch: Arch,
    /// The event's `release` and `dist`, its `os` context and its device's `model`.
    pub facets: crate::facets::ReportFacets,
}

/// One exception of a [`CombinedReport`].
#[derive(Debug, Clone, PartialEq)]
pub struct ExceptionIn {
    /// `type`, with `module` before it (`java.lang.IllegalStateException`) when it has one.
    pub class: String,
    /// `value`: the message.
    pub message: Option<String>,
    /// The frames, innermost call first.
    pub frames: Vec<FrameIn>,
}

/// One frame as given, in its layer.
#[derive(Debug, Clone, PartialEq)]
pub enum FrameIn {
    /// A JavaScript frame and the file (bundle) its position is in, as given.
    Js {
        /// The position, or a native JS frame.
        frame: JsFrame,
        /// `abs_path` or `filename`, when given.
        file: Option<String>,
    },
    /// A Java/Kotlin frame.
    Jvm(JvmFrame),
    /// A native frame.
    Native(RawFrame),
    /// A frame of no layer: `function`, `filename`, `lineno` as given.
    Other {
        /// `function`.
        function: Option<String>,
        /// `filename` (else `abs_path`).
        file: Option<String>,
        /// `lineno`.
        line: Option<u32>,
    },
}

impl FrameIn {
    /// The frame's layer.
    pub fn layer(&self) -> Layer {
        match self {
            FrameIn::Js { .. } => Layer::Js,
            FrameIn::Jvm(_) => Layer::Jvm,
            FrameIn::Native(_) => Layer::Native,
            FrameIn::Other { .. } => Layer::Other,
        }
    }
}

/// A source map a report's JavaScript frames need: by debug id when the event names one for
/// the bundle, else by the event's release and dist and the bundle's file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceMapRef {
    /// The bundle's file name (`index.android.bundle`): the last path segment of the frames'
    /// file.
    pub bundle: String,
    /// The source map's debug id (lowercase), from a `sourcemap` image.
    pub debug_id: Option<String>,
}

impl CombinedReport {
    /// The source map a JavaScript frame's `file` needs ([`SourceMapRef`]); `None` for a frame
    /// with no file.
    pub fn sourcemap_for(&self, file: Option<&str>) -> Option<SourceMapRef> {
        let file = file?;
        let debug_id = self
            .sourcemap_ids
            .iter()
            .find(|(code_file, _)| code_file == file || file_name(code_file) == file_name(file))
            .map(|(_, id)| id.clone());
        Some(SourceMapRef {
            bundle: file_name(file).to_owned(),
            debug_id,
        })
    }

    /// Every source map the JavaScript frames need, each once, sorted.
    pub fn sourcemaps(&self) -> Vec<SourceMapRef> {
        let mut refs: Vec<SourceMapRef> = self
            .exceptions
            .iter()
            .flat_map(|e| &e.frames)
            .filter_map(|f| match f {
                FrameIn::Js {
                    frame: JsFrame::Position { .. },
                    file,
                } => self.sourcemap_for(file.as_deref()),
                _ => None,
            })
            .collect();
        refs.sort();
        refs.dedup();
        refs
    }

    /// Whether any frame is in `layer`.
    pub fn has(&self, layer: Layer) -> bool {
        self.exceptions
            .iter()
            .flat_map(|e| &e.frames)
            .any(|f| f.layer() == layer)
    }
}

/// The last segment of a path or URL (`app:///index.android.bundle` → `index.android.bundle`).
fn file_name(path: &str) -> &str {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    path.rsplit(['/', '\\']).next().unwrap_or(path)
}

/// Why an event cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// Not JSON, or JSON of another shape.
    #[error("the event cannot be read as a Sentry event: {0}")]
    Json(String),
    /// No exception with a frame.
    #[error("the event has no exception with a stack trace (exception.values[].stacktrace)")]
    NoFrames,
    /// More than [`MAX_EXCEPTIONS`], [`MAX_FRAMES`] or [`MAX_IMAGES`].
    #[error(
        "the event has more than {MAX_EXCEPTIONS} exceptions, {MAX_FRAMES} frames or {MAX_IMAGES} images"
    )]
    TooLarge,
}

#[derive(Deserialize)]
struct Event {
    #[serde(default)]
    release: Option<Value>,
    #[serde(default)]
    dist: Option<Value>,
    #[serde(default)]
    exception: Option<Values<Exception>>,
    #[serde(default)]
    threads: Option<Values<SentryThread>>,
    #[serde(default)]
    debug_meta: Option<DebugMeta>,
    #[serde(default)]
    contexts: Option<Value>,
}

/// `{"values": [...]}`.
#[derive(Deserialize)]
struct Values<T> {
    #[serde(default = "Vec::new")]
    values: Vec<T>,
}

#[derive(Deserialize)]
struct Exception {
    #[serde(default, rename = "type")]
    type_: Option<Value>,
    #[serde(default)]
    module: Option<Value>,
    #[serde(default)]
    value: Option<Value>,
    #[serde(default)]
    thread_id: Option<Value>,
    #[serde(default)]
    stacktrace: Option<Stacktrace>,
}

#[derive(Deserialize)]
struct SentryThread {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    crashed: Option<Value>,
    #[serde(default)]
    stacktrace: Option<Stacktrace>,
}

/// The first pass over an event: how many exceptions, frames and images it holds, counted
/// without keeping any of them (a frame read in full is ~600 bytes: a 16 MiB event of empty
/// frames would be gigabytes).
#[derive(Deserialize, Default)]
struct Census {
    #[serde(default)]
    exception: Option<CensusValues>,
    #[serde(default)]
    threads: Option<CensusValues>,
    #[serde(default)]
    debug_meta: Option<CensusMeta>,
}

#[derive(Deserialize, Default)]
struct CensusValues {
    #[serde(default)]
    values: Counted,
}

#[derive(Deserialize, Default)]
struct CensusMeta {
    #[serde(default)]
    images: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(Deserialize)]
struct CensusEntry {
    #[serde(default)]
    stacktrace: Option<CensusStack>,
}

#[derive(Deserialize)]
struct CensusStack {
    #[serde(default)]
    frames: Option<Vec<serde::de::IgnoredAny>>,
}

/// A list of exceptions or threads, counted as it is read: (entries, frames).
#[derive(Default)]
struct Counted(usize, usize);

impl<'de> Deserialize<'de> for Counted {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Counted;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Counted, A::Error> {
                let mut counted = Counted::default();
                while let Some(entry) = seq.next_element::<CensusEntry>()? {
                    counted.0 += 1;
                    counted.1 += entry
                        .stacktrace
                        .and_then(|s| s.frames)
                        .map_or(0, |f| f.len());
                }
                Ok(counted)
            }
        }
        d.deserialize_seq(Visit)
    }
}

#[derive(Deserialize)]
struct Stacktrace {
    #[serde(default)]
    frames: Option<Vec<Frame>>,
}

#[derive(Deserialize)]
struct Frame {
    #[serde(default)]
    platform: Option<Value>,
    #[serde(default)]
    function: Option<Value>,
    #[serde(default)]
    module: Option<Value>,
    #[serde(default)]
    filename: Option<Value>,
    #[serde(default)]
    abs_path: Option<Value>,
    #[serde(default)]
    lineno: Option<Value>,
    #[serde(default)]
    colno: Option<Value>,
    #[serde(default)]
    instruction_addr: Option<Value>,
}

#[derive(Deserialize)]
struct DebugMeta {
    #[serde(default)]
    images: Option<Vec<Value>>,
}

fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn number(value: Option<&Value>) -> Option<u32> {
    match value? {
        Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// Reads a Sentry event ([module docs](self)).
///
/// # Errors
/// [`EventError`]: not a Sentry event, no exception with a frame, or over the limits. Invalid
/// UTF-8 is an error (JSON is UTF-8).
pub fn parse_event(data: &[u8]) -> Result<CombinedReport, EventError> {
    let json = |e: serde_json::Error| EventError::Json(e.to_string());
    let census: Census = serde_json::from_slice(data).map_err(json)?;
    let (exceptions, frames) = census
        .exception
        .map_or((0, 0), |e| (e.values.0, e.values.1));
    let (threads, thread_frames) = census.threads.map_or((0, 0), |t| (t.values.0, t.values.1));
    let images = census
        .debug_meta
        .and_then(|m| m.images)
        .map_or(0, |i| i.len());
    if exceptions > MAX_EXCEPTIONS
        || threads > MAX_EXCEPTIONS
        || frames + thread_frames > MAX_FRAMES
        || images > MAX_IMAGES
    {
        return Err(EventError::TooLarge);
    }
    let event: Event = serde_json::from_slice(data).map_err(json)?;
    let mut images = Vec::new();
    let mut mapping_ids = Vec::new();
    let mut sourcemap_ids = Vec::new();
    let listed = event.debug_meta.and_then(|m| m.images).unwrap_or_default();
    if listed.len() > MAX_IMAGES {
        return Err(EventError::TooLarge);
    }
    for image in &listed {
        let field = |name: &str| text(image.get(name));
        match field("type").as_deref() {
            Some("proguard") => {
                if let Some(id) = field("uuid").or_else(|| field("debug_id")) {
                    mapping_ids.push(id.to_ascii_lowercase());
                }
            }
            Some("sourcemap") => {
                let id = field("debug_id").and_then(|id| parse_debug_id(&id));
                if let (Some(code_file), Some(id)) = (field("code_file"), id) {
                    sourcemap_ids.push((code_file, id.to_string()));
                }
            }
            Some("elf" | "macho" | "pe" | "symbolic") => {
                let debug_id = field("debug_id")
                    .or_else(|| field("uuid"))
                    .and_then(|id| parse_debug_id(&id));
                images.push(Image {
                    code_file: field("code_file"),
                    debug_id,
                    arch: field("arch").map_or(Arch::Unknown, |a| parse_arch(&a)),
                    image_addr: image.get("image_addr").and_then(parse_addr).unwrap_or(0),
                    image_size: image.get("image_size").and_then(parse_addr).unwrap_or(0),
                });
            }
            _ => {}
        }
    }
    let values = event.exception.map(|e| e.values).unwrap_or_default();
    let mut threads = event.threads.map(|t| t.values).unwrap_or_default();
    let mut exceptions = Vec::with_capacity(values.len());
    for exception in values.into_iter().rev() {
        let mut given = exception
            .stacktrace
            .and_then(|s| s.frames)
            .unwrap_or_default();
        if given.is_empty() {
            // Native SDKs put the crashing stack on the thread (`exception.thread_id`), or
            // mark the thread that crashed; each thread's stack is taken once.
            let wanted = text(exception.thread_id.as_ref());
            let thread = threads.iter_mut().find(|t| match &wanted {
                Some(id) => text(t.id.as_ref()).as_ref() == Some(id),
                None => t.crashed.as_ref().and_then(Value::as_bool) == Some(true),
            });
            if let Some(thread) = thread {
                given = thread
                    .stacktrace
                    .take()
                    .and_then(|s| s.frames)
                    .unwrap_or_default();
            }
        }
        let type_ = text(exception.type_.as_ref()).unwrap_or_default();
        let class = match text(exception.module.as_ref()) {
            Some(module) if !type_.is_empty() && !type_.contains('.') => {
                format!("{module}.{type_}")
            }
            _ => type_,
        };
        exceptions.push(ExceptionIn {
            class,
            message: text(exception.value.as_ref()),
            frames: given.iter().rev().map(frame).collect(),
        });
    }
    if exceptions.iter().all(|e| e.frames.is_empty()) {
        return Err(EventError::NoFrames);
    }
    let release = text(event.release.as_ref()).unwrap_or_default();
    let dist = text(event.dist.as_ref()).unwrap_or_default();
    let context = |pointer: &str| {
        event
            .contexts
            .as_ref()
            .and_then(|c| c.pointer(pointer))
            .and_then(Value::as_str)
    };
    let facets = crate::facets::ReportFacets {
        release: Some(release.clone()),
        dist: Some(dist.clone()),
        os: crate::facets::sentry_os(
            context("/os/name"),
            context("/os/version"),
            context("/os/build"),
        ),
        device: context("/device/model").map(str::to_owned),
    }
    .cleaned();
    Ok(CombinedReport {
        exceptions,
        images,
        mapping_ids,
        release,
        dist,
        facets,
        sourcemap_ids,
        arch: event
            .contexts
            .as_ref()
            .and_then(|c| text(c.pointer("/device/arch")))
            .map_or(Arch::Unknown, |a| parse_arch(&a)),
    })
}

/// Whether a file is a JavaScript bundle or source by its name.
fn is_js_file(file: &str) -> bool {
    let name = file_name(file);
    file.starts_with("app://")
        || [".js", ".bundle", ".jsbundle", ".hbc", ".mjs", ".cjs"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

fn frame(given: &Frame) -> FrameIn {
    let function = text(given.function.as_ref());
    let file = text(given.abs_path.as_ref()).or_else(|| text(given.filename.as_ref()));
    let line = number(given.lineno.as_ref());
    let column = number(given.colno.as_ref());
    let address = given.instruction_addr.as_ref().and_then(parse_addr);
    let class = text(given.module.as_ref());
    let layer = match text(given.platform.as_ref()).as_deref() {
        Some("javascript" | "node" | "hermes") => Layer::Js,
        Some("java" | "kotlin") => Layer::Jvm,
        Some("native" | "c" | "cocoa" | "objc" | "swift") => Layer::Native,
        _ if address.is_some() => Layer::Native,
        _ if column.is_some() || file.as_deref().is_some_and(is_js_file) => Layer::Js,
        _ if class.is_some() => Layer::Jvm,
        _ => Layer::Other,
    };
    match (layer, address, class) {
        (Layer::Js, ..) => {
            let native = matches!(file.as_deref(), Some("[native code]" | "native"));
            let frame = match line {
                Some(line) if !native && line > 0 => JsFrame::Position {
                    function,
                    file: file.clone(),
                    line,
                    column: column.unwrap_or(1).max(1),
                },
                _ => JsFrame::Native { function },
            };
            FrameIn::Js { frame, file }
        }
        (Layer::Jvm, _, Some(class)) => FrameIn::Jvm(JvmFrame {
            class,
            method: function.unwrap_or_default(),
            file: text(given.filename.as_ref()),
            line: line.filter(|l| *l > 0),
        }),
        (Layer::Native, Some(instruction_addr), _) => FrameIn::Native(RawFrame {
            instruction_addr,
            function,
            image_index: None,
            trust: None,
        }),
        _ => FrameIn::Other {
            function,
            file,
            line,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_by_platform_then_by_content() {
        let event = br#"{
          "release": "app@1", "dist": "7",
          "exception": {"values": [
            {"type": "SIGSEGV", "stacktrace": {"frames": [
              {"instruction_addr": "0x1010"},
              {"platform": "native", "instruction_addr": 4128}
            ]}},
            {"type": "IllegalStateException", "module": "java.lang", "value": "boom",
             "stacktrace": {"frames": [
              {"module": "a.b", "function": "c", "filename": "SourceFile", "lineno": 3},
              {"platform": "java", "module": "a.d", "function": "e"},
              {"abs_path": "app:///index.android.bundle", "function": "f", "lineno": 1, "colno": 40},
              {"filename": "[native code]", "function": "map", "platform": "javascript"},
              {"function": "nothing"}
            ]}}
          ]},
          "debug_meta": {"images": [
            {"type": "elf", "code_file": "/data/app/base.apk!libapp.so",
             "debug_id": "e0356ff6-9e08-a224-5037-26179d47ad6c", "image_addr": "0x1000",
             "image_size": 4096, "arch": "arm64"},
            {"type": "proguard", "uuid": "A8F1E5C6-0D9B-5E1F-9C3A-1B2C3D4E5F60"},
            {"type": "sourcemap", "code_file": "app:///index.android.bundle",
             "debug_id": "5B1FA7D2-8C3E-4F10-9A6B-7C8D9E0F1A2B"}
          ]}
        }"#;
        let report = parse_event(event).unwrap();
        assert_eq!(report.release, "app@1");
        assert_eq!(report.dist, "7");
        assert_eq!(report.mapping_ids, ["a8f1e5c6-0d9b-5e1f-9c3a-1b2c3d4e5f60"]);
        assert_eq!(report.images.len(), 1);
        assert_eq!(report.images[0].image_addr, 0x1000);
        assert_eq!(report.images[0].arch, Arch::Arm64);
        // The thrown exception first, innermost call first.
        let thrown = &report.exceptions[0];
        assert_eq!(thrown.class, "java.lang.IllegalStateException");
        let layers: Vec<Layer> = thrown.frames.iter().map(FrameIn::layer).collect();
        assert_eq!(
            layers,
            [Layer::Other, Layer::Js, Layer::Js, Layer::Jvm, Layer::Jvm]
        );
        assert_eq!(
            thrown.frames[2],
            FrameIn::Js {
                frame: JsFrame::Position {
                    function: Some("f".into()),
                    file: Some("app:///index.android.bundle".into()),
                    line: 1,
                    column: 40
                },
                file: Some("app:///index.android.bundle".into())
            }
        );
        assert!(matches!(
            thrown.frames[1],
            FrameIn::Js {
                frame: JsFrame::Native { .. },
                ..
            }
        ));
        let native: Vec<u64> = report.exceptions[1]
            .frames
            .iter()
            .map(|f| match f {
                FrameIn::Native(raw) => raw.instruction_addr,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(native, [0x1020, 0x1010]);
        assert_eq!(
            report.sourcemaps(),
            [SourceMapRef {
                bundle: "index.android.bundle".into(),
                debug_id: Some("5b1fa7d2-8c3e-4f10-9a6b-7c8d9e0f1a2b".into())
            }]
        );
    }

    #[test]
    fn not_an_event() {
        assert!(matches!(parse_event(b"nope"), Err(EventError::Json(_))));
        assert_eq!(
            parse_event(br#"{"exception": {"values": [{"type": "E"}]}}"#),
            Err(EventError::NoFrames)
        );
        let many = format!(
            r#"{{"exception": {{"values": [{}]}}}}"#,
            vec![r#"{"type": "E"}"#; MAX_EXCEPTIONS + 1].join(",")
        );
        assert_eq!(parse_event(many.as_bytes()), Err(EventError::TooLarge));
        // Counted before anything is kept: empty frames over the limit.
        let frames = format!(
            r#"{{"exception": {{"values": [{{"stacktrace": {{"frames": [{}]}}}}]}}}}"#,
            vec!["{}"; MAX_FRAMES + 1].join(",")
        );
        assert_eq!(parse_event(frames.as_bytes()), Err(EventError::TooLarge));
    }

    #[test]
    fn an_exception_without_frames_takes_its_threads_stack() {
        let event = br#"{
          "contexts": {"device": {"arch": "arm64"}},
          "exception": {"values": [
            {"type": "SIGABRT", "thread_id": 7},
            {"type": "SIGSEGV"}
          ]},
          "threads": {"values": [
            {"id": 1, "crashed": true, "stacktrace": {"frames": [{"instruction_addr": "0x20"}]}},
            {"id": "7", "stacktrace": {"frames": [{"instruction_addr": "0x10"}]}}
          ]}
        }"#;
        let report = parse_event(event).unwrap();
        assert_eq!(report.arch, Arch::Arm64);
        let address = |e: usize| match &report.exceptions[e].frames[..] {
            [FrameIn::Native(raw)] => raw.instruction_addr,
            other => panic!("{other:?}"),
        };
        // The thrown exception (last) had no thread id: the crashed thread's stack.
        assert_eq!(address(0), 0x20);
        assert_eq!(address(1), 0x10);
    }
}

//! Sentry event JSON: `debug_meta.images` plus `exception.values[].stacktrace` and `threads`.
//!
//! Format: <https://develop.sentry.dev/sdk/data-model/event-payloads/> (stack traces list frames
//! outermost first; we reverse them). The exception's stack trace becomes the crashed thread; the
//! `threads` entry with the same id only lends it its name.
//!
//! Read with the typed, borrowing readers of [`super::lenient`], so nothing of the event but the
//! four top-level fields it uses is built (the image list is most of an event: 106 KB of
//! CrashProbe's 125 KB). [`parse_event`] reads them in one pass over the text; [`parse`] from
//! the raw text of each field once [`TopLevel`] has found them (the general path, for events
//! the one pass leaves to it).

use std::borrow::Cow;

use serde::Deserialize;

use super::ReportError;
use super::fields::{
    arch_from_macho_cpu, crash_reason, ip_register_names, parse_arch, parse_debug_id,
    signal_in_text,
};
use super::lenient::TopLevel;
use super::lenient::{Addr, Field, Listed, Present, Raw, Scalar};
use crate::model::{Image, Modules, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::SentryEvent;

#[derive(Deserialize, Default)]
struct Contexts<'a> {
    #[serde(default, borrow)]
    device: Field<Device<'a>>,
    #[serde(default, borrow)]
    os: Field<Os<'a>>,
}

#[derive(Deserialize, Default)]
struct Device<'a> {
    #[serde(default, borrow)]
    arch: Scalar<'a>,
    #[serde(default, borrow)]
    model: Scalar<'a>,
}

/// The `os` context: `name` (`iOS`), `version` (`15.0`), `build` (`19A346`).
#[derive(Deserialize, Default)]
struct Os<'a> {
    #[serde(default, borrow)]
    name: Scalar<'a>,
    #[serde(default, borrow)]
    version: Scalar<'a>,
    #[serde(default, borrow)]
    build: Scalar<'a>,
}

#[derive(Deserialize, Default)]
struct DebugMeta<'a> {
    #[serde(default, borrow)]
    images: Field<SentryImage<'a>>,
}

/// One image as the list is read: its address range, and the rest as raw text, read only for
/// the images a result lists ([`image`]). Small (144 bytes), since an event lists hundreds.
#[derive(Deserialize, Default)]
struct SentryImage<'a> {
    #[serde(default)]
    image_addr: Addr,
    #[serde(default)]
    image_size: Addr,
    #[serde(default, borrow)]
    debug_id: Raw<'a>,
    #[serde(default, borrow)]
    uuid: Raw<'a>,
    #[serde(default, borrow)]
    arch: Raw<'a>,
    #[serde(default, borrow)]
    cpu_type: Raw<'a>,
    #[serde(default, borrow)]
    cpu_subtype: Raw<'a>,
    #[serde(default, borrow)]
    code_file: Raw<'a>,
    #[serde(default, borrow)]
    name: Raw<'a>,
}

#[derive(Deserialize, Default)]
struct Exception<'a> {
    #[serde(default, borrow)]
    stacktrace: Field<Stack<'a>>,
    #[serde(default, borrow)]
    mechanism: Field<Mechanism<'a>>,
    #[serde(default, borrow, rename = "type")]
    kind: Scalar<'a>,
    #[serde(default, borrow)]
    thread_id: Scalar<'a>,
}

#[derive(Deserialize, Default)]
struct Mechanism<'a> {
    #[serde(default, borrow)]
    posix_signal: Field<Signal<'a>>,
    #[serde(default, borrow)]
    mach_exception: Field<MachException<'a>>,
    #[serde(default, borrow)]
    meta: Field<Meta<'a>>,
}

#[derive(Deserialize, Default)]
struct Signal<'a> {
    #[serde(default, borrow)]
    signal: Scalar<'a>,
    #[serde(default, borrow)]
    number: Scalar<'a>,
    #[serde(default, borrow)]
    name: Scalar<'a>,
}

#[derive(Deserialize, Default)]
struct MachException<'a> {
    #[serde(default, borrow)]
    exception_name: Scalar<'a>,
    #[serde(default, borrow)]
    name: Scalar<'a>,
}

#[derive(Deserialize, Default)]
struct Meta<'a> {
    #[serde(default, borrow)]
    signal: Field<Signal<'a>>,
    #[serde(default, borrow)]
    mach_exception: Field<MachException<'a>>,
}

#[derive(Deserialize, Default)]
struct SentryThread<'a> {
    #[serde(default, borrow)]
    id: Scalar<'a>,
    #[serde(default, borrow)]
    crashed: Scalar<'a>,
    #[serde(default, borrow)]
    name: Scalar<'a>,
    #[serde(default, borrow)]
    stacktrace: Field<Stack<'a>>,
}

#[derive(Deserialize, Default)]
struct Stack<'a> {
    #[serde(default, borrow)]
    frames: Field<Frame<'a>>,
    #[serde(default, borrow)]
    registers: Field<Registers<'a>>,
}

#[derive(Deserialize, Default)]
struct Frame<'a> {
    #[serde(default, borrow)]
    instruction_addr: Scalar<'a>,
    #[serde(default, borrow)]
    function: Scalar<'a>,
    #[serde(default, borrow)]
    symbol: Scalar<'a>,
}

#[derive(Deserialize, Default)]
struct Registers<'a> {
    #[serde(default, borrow)]
    pc: Scalar<'a>,
    #[serde(default, borrow)]
    rip: Scalar<'a>,
    #[serde(default, borrow)]
    eip: Scalar<'a>,
}

impl Registers<'_> {
    fn get(&self, name: &str) -> &Scalar<'_> {
        match name {
            "pc" => &self.pc,
            "rip" => &self.rip,
            _ => &self.eip,
        }
    }
}

/// Reads one top-level field (absent reads as the type's default).
fn field<'a, T: Deserialize<'a> + Default>(
    top: &TopLevel<'a>,
    name: &str,
) -> Result<T, ReportError> {
    match top.raw(name) {
        None => Ok(T::default()),
        Some(raw) => serde_json::from_str(raw)
            .map_err(|e| ReportError::InvalidJson(format!("`{name}`: {e}"))),
    }
}

/// A Sentry event's top level read in one pass: the four fields the reader uses, and whether a
/// key that marks another JSON format is there (see [`super::json_shape`]).
#[derive(Deserialize, Default)]
struct Event<'a> {
    #[serde(default, borrow)]
    release: Scalar<'a>,
    #[serde(default, borrow)]
    dist: Scalar<'a>,
    #[serde(default, borrow)]
    contexts: Field<Contexts<'a>>,
    #[serde(default, borrow)]
    debug_meta: Field<DebugMeta<'a>>,
    #[serde(default, borrow)]
    exception: Listed<Exception<'a>>,
    #[serde(default, borrow)]
    threads: Listed<SentryThread<'a>>,
    #[serde(default)]
    binary_images: Present,
    #[serde(default, rename = "usedImages")]
    used_images: Present,
    #[serde(default)]
    modules: Present,
}

/// Reads `text` as a Sentry event in one pass, when that is surely what it
/// is: `debug_meta` or `exception` is there and not `null`, and no key of the formats
/// [`super::json_shape`] tries first (`binary_images`, `usedImages`, `modules`) is.
///
/// `None` leaves the text to the general path ([`TopLevel`], then [`parse`]), which also
/// words every error: any other JSON, invalid JSON, a key given twice.
pub(super) fn parse_event(
    text: &str,
    modules: Modules,
) -> Option<Result<NativeReport, ReportError>> {
    // A derived struct also reads an array, positionally.
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let event: Event = serde_json::from_str(text).ok()?;
    let other_format = event.binary_images.0 || event.used_images.0 || event.modules.0;
    let sentry =
        !matches!(event.debug_meta, Field::Absent) || !matches!(event.exception, Listed::Absent);
    if other_format || !sentry {
        return None;
    }
    let facets = facets(&event.contexts, &event.release, &event.dist);
    Some(from_fields(
        facets,
        event.contexts,
        event.debug_meta,
        event.exception,
        event.threads,
        modules,
    ))
}

/// Reads a Sentry event from its top-level fields.
pub(super) fn parse(top: &TopLevel<'_>, modules: Modules) -> Result<NativeReport, ReportError> {
    let contexts = field(top, "contexts")?;
    let facets = facets(&contexts, &field(top, "release")?, &field(top, "dist")?);
    from_fields(
        facets,
        contexts,
        field(top, "debug_meta")?,
        field(top, "exception")?,
        field(top, "threads")?,
        modules,
    )
}

/// The facets of an event: its `release` and `dist`, the `os` context (`name version
/// (build)`) and the `device` context's `model`.
fn facets(
    contexts: &Field<Contexts<'_>>,
    release: &Scalar<'_>,
    dist: &Scalar<'_>,
) -> crate::facets::ReportFacets {
    let contexts = contexts.object();
    let os = contexts.and_then(|c| c.os.object()).and_then(|os| {
        crate::facets::sentry_os(os.name.as_str(), os.version.as_str(), os.build.as_str())
    });
    crate::facets::ReportFacets {
        release: release.as_str().map(str::to_owned),
        dist: dist.as_str().map(str::to_owned),
        os,
        device: contexts
            .and_then(|c| c.device.object())
            .and_then(|d| d.model.as_str())
            .map(str::to_owned),
    }
    .cleaned()
}

/// The report, from the event's `contexts`, `debug_meta`, `exception` and `threads`; with
/// [`Modules::Referenced`], the images no frame is in read as their address range only.
fn from_fields(
    facets: crate::facets::ReportFacets,
    contexts: Field<Contexts<'_>>,
    debug_meta: Field<DebugMeta<'_>>,
    exception: Listed<Exception<'_>>,
    threads: Listed<SentryThread<'_>>,
    modules: Modules,
) -> Result<NativeReport, ReportError> {
    let arch = contexts
        .object()
        .and_then(|c| c.device.object())
        .and_then(|d| d.arch.as_str())
        .map(parse_arch)
        .unwrap_or(symbolic_common::Arch::Unknown);

    // Images without an address are no images (nothing can be found in them).
    let listed_images: Vec<SentryImage> = match debug_meta.into_object().map(|d| d.images) {
        None | Some(Field::Absent) => Vec::new(),
        Some(Field::Array(list)) => list
            .into_iter()
            .flatten()
            .filter(|i| i.image_addr.0.is_some())
            .collect(),
        Some(_) => {
            return Err(ReportError::malformed(
                FORMAT,
                "`debug_meta.images` is not an array",
            ));
        }
    };

    let exceptions: Vec<Exception> = values(exception, "exception")?;
    // The last exception is the one that ended the process (Sentry orders them oldest first).
    let exception = exceptions
        .iter()
        .rev()
        .find(|e| !matches!(e.stacktrace, Field::Absent))
        .or(exceptions.last());
    let listed_threads: Vec<SentryThread> = values(threads, "threads")?;

    let mechanism = exception.and_then(|e| e.mechanism.object());
    let meta = mechanism.and_then(|m| m.meta.object());
    let posix = mechanism.and_then(|m| m.posix_signal.object());
    let meta_signal = meta.and_then(|m| m.signal.object());
    let signal = posix
        .map(|p| &p.signal)
        .filter(|s| s.is_present())
        .or_else(|| meta_signal.map(|s| &s.number))
        .and_then(Scalar::as_u64)
        .map(|s| s as u32);
    let signal_name = posix
        .map(|p| &p.name)
        .filter(|s| s.is_present())
        .or_else(|| meta_signal.map(|s| &s.name))
        .and_then(Scalar::as_str);
    let mach_name = mechanism
        .and_then(|m| m.mach_exception.object())
        .map(|m| &m.exception_name)
        .filter(|s| s.is_present())
        .or_else(|| {
            meta.and_then(|m| m.mach_exception.object())
                .map(|m| &m.name)
        })
        .and_then(Scalar::as_str);
    let exception_type = exception.and_then(|e| e.kind.as_str());
    let crash_reason =
        crash_reason(mach_name, signal_name).or_else(|| exception_type.map(str::to_owned));
    let signal = signal.or_else(|| crash_reason.as_deref().and_then(signal_in_text));

    let mut threads = Vec::new();
    let crashed_stack = exception
        .map(|e| &e.stacktrace)
        .filter(|s| !matches!(s, Field::Absent));
    let crashed_id = exception.and_then(|e| e.thread_id.addr());
    let mut crashed_placed = crashed_stack.is_none();

    for (index, t) in listed_threads.iter().enumerate() {
        let id = t.id.addr().unwrap_or(index as u64);
        let is_crash_thread = match crashed_id {
            Some(cid) => cid == id,
            None => t.crashed.as_bool().unwrap_or(false),
        };
        let name = t.name.as_str().map(str::to_owned);
        if is_crash_thread
            && !crashed_placed
            && let Some(stack) = crashed_stack
        {
            threads.push(thread(id, name, true, stack, arch)?);
            crashed_placed = true;
            continue;
        }
        let crashed = crashed_stack.is_none()
            && t.crashed.as_bool().unwrap_or(false)
            && !threads.iter().any(|t: &Thread| t.crashed);
        match &t.stacktrace {
            Field::Absent => threads.push(Thread {
                id,
                name,
                crashed,
                ip_register: None,
                frames: Vec::new(),
            }),
            stack => threads.push(thread(id, name, crashed, stack, arch)?),
        }
    }
    if !crashed_placed {
        let stack = crashed_stack.expect("crashed_placed is false only with a stack");
        let id = crashed_id.unwrap_or(0);
        threads.insert(0, thread(id, None, true, stack, arch)?);
    }
    if threads.is_empty() {
        return Err(ReportError::malformed(
            FORMAT,
            "no stack trace: neither `exception.values[].stacktrace` nor `threads.values[]`",
        ));
    }

    let mut report = NativeReport {
        format: FORMAT,
        arch,
        crash_reason,
        signal,
        threads,
        images: listed_images
            .iter()
            .map(|i| Image::range_only(i.image_addr.0.unwrap_or(0), image_size(i)))
            .collect(),
        call_tree: Vec::new(),
        kind: crate::model::ReportKind::Crash,
        details: None,
        modules,
        facets,
    };
    // The rest of an image (path, debug id, arch) only where the result lists it.
    let read: Vec<bool> = match modules {
        Modules::All => vec![true; listed_images.len()],
        Modules::Referenced => {
            let mut read = vec![false; listed_images.len()];
            for i in crate::symbolicate::referenced_images(&report) {
                read[i] = true;
            }
            read
        }
    };
    for ((slot, listed), read) in report.images.iter_mut().zip(listed_images).zip(read) {
        if read {
            *slot = image(listed, arch);
        }
    }
    Ok(report)
}

fn image_size(image: &SentryImage<'_>) -> u64 {
    image.image_size.0.unwrap_or(0)
}

/// `{"values": [...]}` or a bare array (older events); absent means empty. Elements that are
/// not objects read as all fields absent.
fn values<T: Default>(field: Listed<T>, name: &str) -> Result<Vec<T>, ReportError> {
    match field {
        Listed::Absent => Ok(Vec::new()),
        Listed::List(list) => Ok(list.into_iter().map(Option::unwrap_or_default).collect()),
        Listed::ValuesWrong => Err(ReportError::malformed(
            FORMAT,
            format!("`{name}.values` is not an array"),
        )),
        Listed::Wrong => Err(ReportError::malformed(
            FORMAT,
            format!("`{name}` is neither an object nor an array"),
        )),
    }
}

fn thread(
    id: u64,
    name: Option<String>,
    crashed: bool,
    stack: &Field<Stack<'_>>,
    arch: symbolic_common::Arch,
) -> Result<Thread, ReportError> {
    // A stack trace that is not an object has no frames (as an absent `frames`).
    let stack = stack.object();
    let frames = match stack.map(|s| &s.frames) {
        None | Some(Field::Absent) => &[][..],
        Some(Field::Array(frames)) => frames.as_slice(),
        Some(_) => {
            return Err(ReportError::malformed(
                FORMAT,
                format!("thread {id}: `stacktrace.frames` is not an array"),
            ));
        }
    };
    let registers = stack.and_then(|s| s.registers.object());
    let ip_register = registers.and_then(|r| {
        ip_register_names(arch)
            .iter()
            .find_map(|name| r.get(name).addr())
    });
    Ok(Thread {
        id,
        name,
        crashed,
        ip_register,
        // Sentry lists frames outermost first.
        frames: frames
            .iter()
            .rev()
            .map(|f| match f {
                Some(f) => RawFrame {
                    instruction_addr: f.instruction_addr.addr().unwrap_or(0),
                    function: f
                        .function
                        .as_str()
                        .or_else(|| f.symbol.as_str())
                        .map(str::to_owned),
                    image_index: None,
                    trust: None,
                },
                None => RawFrame {
                    instruction_addr: 0,
                    function: None,
                    image_index: None,
                    trust: None,
                },
            })
            .collect(),
    })
}

/// The whole image (its address was checked when the list was read).
fn image(v: SentryImage<'_>, report_arch: symbolic_common::Arch) -> Image {
    let image_addr = v.image_addr.0.unwrap_or(0);
    let image_size = image_size(&v);
    let debug_id = match v.debug_id.scalar() {
        Scalar::Str(id) => parse_debug_id(&id),
        _ => v.uuid.scalar().as_str().and_then(parse_debug_id),
    };
    let arch = match (v.arch.scalar(), v.cpu_type.scalar().as_u64()) {
        (Scalar::Str(a), _) => parse_arch(&a),
        (_, Some(cpu_type)) => {
            arch_from_macho_cpu(cpu_type, v.cpu_subtype.scalar().as_u64().unwrap_or(0))
        }
        (_, None) => report_arch,
    };
    Image {
        // Moved, not copied, when unescaping already made it a `String` (`\/` in every
        // path NSJSONSerialization writes).
        code_file: match v.code_file.scalar() {
            Scalar::Str(path) => Some(path),
            _ => v.name.scalar().into_str(),
        }
        .map(Cow::into_owned),
        debug_id,
        arch,
        image_addr,
        image_size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass read and the general path, as `Debug` text (the report has no `PartialEq`),
    /// reading every image.
    fn both(text: &str) -> (Option<String>, String) {
        both_with(text, Modules::All)
    }

    fn both_with(text: &str, modules: Modules) -> (Option<String>, String) {
        let one_pass = parse_event(text, modules).map(|r| format!("{r:?}"));
        let top: TopLevel = serde_json::from_str(text).unwrap();
        (one_pass, format!("{:?}", parse(&top, modules)))
    }

    const EVENT: &str = r#"{
        "event_id": "x",
        "contexts": {"device": {"arch": "arm64"}},
        "debug_meta": {"images": [
            {"type": "macho", "image_addr": "0x100000000", "image_size": 16384,
             "debug_id": "82d13d98-219e-3040-b62a-07a297007a7c", "code_file": "/a/Cr\u0061sh"},
            {"image_addr": 4295000064, "uuid": "12345678-219e-3040-b62a-07a297007a7c",
             "cpu_type": 16777228, "cpu_subtype": 0, "name": "/usr/lib/libA.dylib"},
            "not an image"
        ]},
        "exception": {"values": [{"type": "EXC_BAD_ACCESS", "thread_id": 1,
            "mechanism": {"meta": {"signal": {"number": 11, "name": "SIGSEGV"},
                                   "mach_exception": {"name": "EXC_BAD_ACCESS"}}},
            "stacktrace": {"frames": [{"instruction_addr": "0x100001000"},
                                      {"instruction_addr": "0x100002000", "function": "f"}],
                           "registers": {"pc": "0x100002000"}}}]},
        "threads": {"values": [{"id": 0, "name": "main",
                                "stacktrace": {"frames": [{"instruction_addr": 4294971392}]}},
                               {"id": 1, "crashed": true}]}
    }"#;

    #[test]
    fn one_pass_reads_an_event_as_the_general_path_does() {
        let (one_pass, general) = both(EVENT);
        assert_eq!(one_pass.as_deref(), Some(general.as_str()));
        assert!(
            general.contains("instruction_addr: 4294975488"),
            "{general}"
        );
        // Old events: bare arrays, `debug_meta: null` beside an exception.
        let old = r#"{"debug_meta": null, "exception": [{"stacktrace": {"frames": [
            {"instruction_addr": "0x10"}]}}], "threads": []}"#;
        let (one_pass, general) = both(old);
        assert_eq!(one_pass.as_deref(), Some(general.as_str()));
    }

    #[test]
    fn an_image_as_the_list_is_read_stays_small() {
        // An event lists hundreds: every byte is moved as the list grows.
        assert!(std::mem::size_of::<SentryImage>() <= 144);
    }

    #[test]
    fn an_image_no_frame_is_in_is_read_as_its_range_only() {
        let (one_pass, general) = both_with(EVENT, Modules::Referenced);
        assert_eq!(one_pass.as_deref(), Some(general.as_str()));
        let top: TopLevel = serde_json::from_str(EVENT).unwrap();
        let referenced = parse(&top, Modules::Referenced).unwrap();
        let all = parse(&top, Modules::All).unwrap();
        // The first image holds frames: read whole, its escaped path undone.
        assert_eq!(referenced.images[0], all.images[0]);
        assert_eq!(referenced.images[0].code_file.as_deref(), Some("/a/Crash"));
        // The second holds none: its range only.
        assert_eq!(
            all.images[1].code_file.as_deref(),
            Some("/usr/lib/libA.dylib")
        );
        assert_eq!(
            referenced.images[1],
            Image::range_only(all.images[1].image_addr, all.images[1].image_size)
        );
        assert_eq!(referenced.threads, all.threads);
        assert_eq!(
            (referenced.modules, all.modules),
            (Modules::Referenced, Modules::All)
        );
    }

    #[test]
    fn one_pass_leaves_everything_else_to_the_general_path() {
        for text in [
            // Another format's key beside Sentry's, even a null one.
            r#"{"debug_meta": {"images": []}, "binary_images": [], "crash": {}}"#,
            r#"{"exception": {"values": []}, "usedImages": null, "threads": []}"#,
            r#"{"debug_meta": {}, "modules": [], "stacktraces": []}"#,
            // Neither `debug_meta` nor `exception`, or both null.
            r#"{"threads": {"values": []}}"#,
            r#"{"debug_meta": null, "exception": null}"#,
            // A key given twice, invalid JSON, not an object.
            r#"{"debug_meta": {}, "debug_meta": {"images": []}}"#,
            r#"{"debug_meta": {"images": [}"#,
            r#"[{"images": []}, {}]"#,
        ] {
            assert!(parse_event(text, Modules::All).is_none(), "{text}");
        }
    }
}

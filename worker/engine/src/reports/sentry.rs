//! Sentry event JSON: `debug_meta.images` plus `exception.values[].stacktrace` and `threads`.
//!
//! Format: <https://develop.sentry.dev/sdk/data-model/event-payloads/> (stack traces list frames
//! outermost first; we reverse them). The exception's stack trace becomes the crashed thread; the
//! `threads` entry with the same id only lends it its name.

use serde_json::Value;

use super::ReportError;
use super::fields::{
    arch_from_macho_cpu, crash_reason, ip_register, parse_addr, parse_arch, parse_debug_id,
    signal_in_text, str_field,
};
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::SentryEvent;

pub fn parse(event: &Value) -> Result<NativeReport, ReportError> {
    let arch = event
        .pointer("/contexts/device/arch")
        .and_then(Value::as_str)
        .map(parse_arch)
        .unwrap_or(symbolic_common::Arch::Unknown);

    let images = match event.pointer("/debug_meta/images") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list.iter().filter_map(|i| image(i, arch)).collect(),
        Some(_) => {
            return Err(ReportError::malformed(
                FORMAT,
                "`debug_meta.images` is not an array",
            ));
        }
    };

    let exceptions = values(event.get("exception"), "exception")?;
    // The last exception is the one that ended the process (Sentry orders them oldest first).
    let exception = exceptions
        .iter()
        .rev()
        .find(|e| e.get("stacktrace").is_some_and(|s| !s.is_null()))
        .or(exceptions.last());
    let listed_threads = values(event.get("threads"), "threads")?;

    let mechanism = exception.and_then(|e| e.get("mechanism"));
    let signal = mechanism
        .and_then(|m| {
            m.pointer("/posix_signal/signal")
                .or_else(|| m.pointer("/meta/signal/number"))
        })
        .and_then(Value::as_u64)
        .map(|s| s as u32);
    let signal_name = mechanism.and_then(|m| {
        m.pointer("/posix_signal/name")
            .or_else(|| m.pointer("/meta/signal/name"))
            .and_then(Value::as_str)
    });
    let mach_name = mechanism.and_then(|m| {
        m.pointer("/mach_exception/exception_name")
            .or_else(|| m.pointer("/meta/mach_exception/name"))
            .and_then(Value::as_str)
    });
    let exception_type = exception.and_then(|e| str_field(e, "type"));
    let crash_reason =
        crash_reason(mach_name, signal_name).or_else(|| exception_type.map(str::to_owned));
    let signal = signal.or_else(|| crash_reason.as_deref().and_then(signal_in_text));

    let mut threads = Vec::new();
    let crashed_stack = exception
        .and_then(|e| e.get("stacktrace"))
        .filter(|s| !s.is_null());
    let crashed_id = exception
        .and_then(|e| e.get("thread_id"))
        .and_then(thread_id);
    let mut crashed_placed = crashed_stack.is_none();

    for (index, t) in listed_threads.iter().enumerate() {
        let id = t.get("id").and_then(thread_id).unwrap_or(index as u64);
        let is_crash_thread = match crashed_id {
            Some(cid) => cid == id,
            None => t.get("crashed").and_then(Value::as_bool).unwrap_or(false),
        };
        let name = str_field(t, "name").map(str::to_owned);
        if is_crash_thread
            && !crashed_placed
            && let Some(stack) = crashed_stack
        {
            threads.push(thread(id, name, true, stack, arch)?);
            crashed_placed = true;
            continue;
        }
        let crashed = crashed_stack.is_none()
            && t.get("crashed").and_then(Value::as_bool).unwrap_or(false)
            && !threads.iter().any(|t: &Thread| t.crashed);
        match t.get("stacktrace").filter(|s| !s.is_null()) {
            Some(stack) => threads.push(thread(id, name, crashed, stack, arch)?),
            None => threads.push(Thread {
                id,
                name,
                crashed,
                ip_register: None,
                frames: Vec::new(),
            }),
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

    Ok(NativeReport {
        format: FORMAT,
        arch,
        crash_reason,
        signal,
        threads,
        images,
        call_tree: Vec::new(),
    })
}

/// `{"values": [...]}` or a bare array (older events); absent means empty.
fn values<'a>(field: Option<&'a Value>, name: &str) -> Result<&'a [Value], ReportError> {
    match field {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(list)) => Ok(list),
        Some(Value::Object(obj)) => match obj.get("values") {
            Some(Value::Array(list)) => Ok(list),
            None | Some(Value::Null) => Ok(&[]),
            Some(_) => Err(ReportError::malformed(
                FORMAT,
                format!("`{name}.values` is not an array"),
            )),
        },
        Some(_) => Err(ReportError::malformed(
            FORMAT,
            format!("`{name}` is neither an object nor an array"),
        )),
    }
}

fn thread_id(v: &Value) -> Option<u64> {
    parse_addr(v)
}

fn thread(
    id: u64,
    name: Option<String>,
    crashed: bool,
    stack: &Value,
    arch: symbolic_common::Arch,
) -> Result<Thread, ReportError> {
    let frames = match stack.get("frames") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(frames)) => frames.as_slice(),
        Some(_) => {
            return Err(ReportError::malformed(
                FORMAT,
                format!("thread {id}: `stacktrace.frames` is not an array"),
            ));
        }
    };
    Ok(Thread {
        id,
        name,
        crashed,
        ip_register: ip_register(stack.get("registers"), arch),
        // Sentry lists frames outermost first.
        frames: frames
            .iter()
            .rev()
            .map(|f| RawFrame {
                instruction_addr: f.get("instruction_addr").and_then(parse_addr).unwrap_or(0),
                function: str_field(f, "function")
                    .or_else(|| str_field(f, "symbol"))
                    .map(str::to_owned),
                image_index: None,
            })
            .collect(),
    })
}

fn image(v: &Value, report_arch: symbolic_common::Arch) -> Option<Image> {
    let image_addr = v.get("image_addr").and_then(parse_addr)?;
    let debug_id = str_field(v, "debug_id")
        .or_else(|| str_field(v, "uuid"))
        .and_then(parse_debug_id);
    let arch = match (
        str_field(v, "arch"),
        v.get("cpu_type").and_then(Value::as_u64),
    ) {
        (Some(a), _) => parse_arch(a),
        (None, Some(cpu_type)) => arch_from_macho_cpu(
            cpu_type,
            v.get("cpu_subtype").and_then(Value::as_u64).unwrap_or(0),
        ),
        (None, None) => report_arch,
    };
    Some(Image {
        code_file: str_field(v, "code_file")
            .or_else(|| str_field(v, "name"))
            .map(str::to_owned),
        debug_id,
        arch,
        image_addr,
        image_size: v.get("image_size").and_then(parse_addr).unwrap_or(0),
    })
}

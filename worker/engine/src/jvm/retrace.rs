//! Retracing: obfuscated frames and exception classes back to the original ones through a
//! prepared mapping, with R8's rules as the `proguard` crate implements them (R8's
//! `retrace.md`, <https://r8.googlesource.com/r8/+/refs/heads/main/doc/retrace.md>): an
//! obfuscated line inside an inlined range expands to the whole inlined call chain, innermost
//! first; outline frames are dropped and their position carried to the caller; synthesized
//! frames and `rewriteFrame` rules (`removeInnerFrames` when the exception matches) apply to the
//! first frame after each exception line.

use proguard::{StackFrame, class_name_to_descriptor};

use super::mapping::JvmMapping;
use super::result::{
    JvmExceptionResult, JvmFrameResult, JvmFrameStatus, JvmRetraceResult, RawJvmFrame,
};
use super::trace::{JvmFrame, JvmTrace};

/// Retraces every exception of `trace` through `mapping` (whose id, when known, goes into the
/// result). Never fails: what the mapping does not name is kept as given, with its status.
pub fn retrace(
    trace: &JvmTrace,
    mapping: &JvmMapping,
    mapping_id: Option<&str>,
) -> JvmRetraceResult {
    let cache = mapping.cache();
    let exceptions = trace
        .exceptions
        .iter()
        .map(|exception| {
            let original = cache.remap_class(&exception.class);
            let class = original.unwrap_or(&exception.class);
            let descriptor = (!class.is_empty()).then(|| class_name_to_descriptor(class));
            let mut carried_outline = None;
            let mut first = true;
            let mut frames = Vec::with_capacity(exception.frames.len());
            for (index, frame) in exception.frames.iter().enumerate() {
                let input = stack_frame(frame);
                let Some(remapped) = cache.remap_frame_with_context(
                    &input,
                    descriptor.as_deref(),
                    first,
                    &mut carried_outline,
                ) else {
                    // An outline: its position was carried to the next frame.
                    continue;
                };
                first = false;
                let had_mappings = remapped.had_mappings();
                let remapped: Vec<StackFrame<'_>> = remapped.collect();
                if remapped.is_empty() {
                    if !had_mappings {
                        frames.push(as_given(index, frame));
                    }
                    // else: a rewrite rule removed the frame.
                    continue;
                }
                // A class-only answer keeps the given (obfuscated) method name: the crate's
                // answer for a class it knows and a method it does not, or a line outside every
                // range of the method. A method whose name obfuscation kept (`-keep`) maps to
                // itself; told apart by a lookup, made only when the name came back unchanged.
                let class_only = remapped.len() == 1
                    && remapped[0].method() == frame.method
                    && cache
                        .remap_method(&frame.class, &frame.method)
                        .is_none_or(|(_, method)| method != frame.method);
                let last = remapped.len() - 1;
                for (i, out) in remapped.iter().enumerate() {
                    frames.push(JvmFrameResult {
                        index,
                        status: if class_only {
                            JvmFrameStatus::ClassOnly
                        } else {
                            JvmFrameStatus::Symbolicated
                        },
                        class: out.class().to_owned(),
                        method: out.method().to_owned(),
                        file: out.file().map(str::to_owned),
                        line: out
                            .line()
                            .and_then(|l| u32::try_from(l).ok())
                            .filter(|l| *l > 0),
                        inlined: i < last,
                        raw: raw(frame),
                    });
                }
            }
            JvmExceptionResult {
                relation: exception.relation,
                depth: exception.depth,
                class: class.to_owned(),
                raw_class: exception.class.clone(),
                message: exception.message.clone(),
                frames,
                omitted_frames: exception.omitted_frames,
            }
        })
        .collect();
    JvmRetraceResult {
        mapping_id: mapping_id.map(str::to_owned),
        exceptions,
    }
}

/// The frames of `trace` as given, each [`JvmFrameStatus::NotInMapping`]: what a job whose
/// mapping file is missing still shows.
pub fn unmapped(trace: &JvmTrace) -> JvmRetraceResult {
    JvmRetraceResult {
        mapping_id: None,
        exceptions: trace
            .exceptions
            .iter()
            .map(|e| JvmExceptionResult {
                relation: e.relation,
                depth: e.depth,
                class: e.class.clone(),
                raw_class: e.class.clone(),
                message: e.message.clone(),
                frames: e
                    .frames
                    .iter()
                    .enumerate()
                    .map(|(i, f)| as_given(i, f))
                    .collect(),
                omitted_frames: e.omitted_frames,
            })
            .collect(),
    }
}

fn stack_frame(frame: &JvmFrame) -> StackFrame<'_> {
    let line = frame.line.unwrap_or(0) as usize;
    match &frame.file {
        Some(file) => StackFrame::with_file(&frame.class, &frame.method, line, file),
        None => StackFrame::new(&frame.class, &frame.method, line),
    }
}

fn raw(frame: &JvmFrame) -> RawJvmFrame {
    RawJvmFrame {
        class: frame.class.clone(),
        method: frame.method.clone(),
        file: frame.file.clone(),
        line: frame.line,
    }
}

fn as_given(index: usize, frame: &JvmFrame) -> JvmFrameResult {
    JvmFrameResult {
        index,
        status: JvmFrameStatus::NotInMapping,
        class: frame.class.clone(),
        method: frame.method.clone(),
        file: frame.file.clone(),
        line: frame.line,
        inlined: false,
        raw: raw(frame),
    }
}

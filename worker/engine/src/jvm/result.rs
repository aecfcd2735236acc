//! The result of retracing a Java/Kotlin trace: what `symctl retrace --format json` prints and
//! what a JVM job's result holds.
//!
//! Shape: exceptions in the trace's order (the thrown one first, then its causes), each with its
//! frames innermost call first; a frame R8 or ProGuard inlined comes out as several frames, the
//! inlined calls first (`inlined: true`), all with the same `index`. Lines are **1-based**.

use serde::{Deserialize, Serialize};

pub use super::trace::Relation;

/// How one frame fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JvmFrameStatus {
    /// Class and method found in the mapping: original class, method, file and line.
    Symbolicated,
    /// The class is in the mapping but no method of it matches the frame's name and line: the
    /// class (and its file) is original, the method and line are as given.
    ClassOnly,
    /// The mapping does not name the class: code it did not obfuscate (the platform's, a
    /// library kept as is), left as given.
    NotInMapping,
    /// The mapping file was not had (a combined report: the result's `mapping` says why); the
    /// frame is as given.
    MissingMapping,
}

/// A retraced trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JvmRetraceResult {
    /// The mapping id of the mapping file used (lowercase UUID), when known.
    pub mapping_id: Option<String>,
    /// The exceptions, the thrown one first.
    pub exceptions: Vec<JvmExceptionResult>,
}

/// One exception, retraced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JvmExceptionResult {
    /// How it relates to the exception that encloses it ([`super::trace::JvmException`]).
    pub relation: Relation,
    /// How deep it is nested: 0 for the thrown exception and its causes, 1 inside a
    /// `Suppressed:` (as the tabs of `printStackTrace` say).
    #[serde(default)]
    pub depth: u32,
    /// The exception's original class (as given when the mapping does not name it; empty when
    /// the trace gave none).
    pub class: String,
    /// The class as given (obfuscated).
    pub raw_class: String,
    /// The message, as given.
    pub message: Option<String>,
    /// The frames, innermost call first.
    pub frames: Vec<JvmFrameResult>,
    /// `... N more`: frames shared with the enclosing exception, not in the input.
    pub omitted_frames: u32,
}

/// One retraced frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JvmFrameResult {
    /// 0-based index of the input frame in its exception (inlined frames share it).
    pub index: usize,
    /// How it fared.
    pub status: JvmFrameStatus,
    /// The original class, fully qualified.
    pub class: String,
    /// The original method.
    pub method: String,
    /// The original source file name (e.g. `Checkout.kt`), when known.
    pub file: Option<String>,
    /// The original 1-based line, when known.
    pub line: Option<u32>,
    /// This call was inlined into the frame that follows it (same `index`).
    pub inlined: bool,
    /// The frame as given.
    pub raw: RawJvmFrame,
}

/// A frame as the trace gave it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawJvmFrame {
    /// Class, fully qualified.
    pub class: String,
    /// Method.
    pub method: String,
    /// Source file named by the frame.
    pub file: Option<String>,
    /// 1-based line.
    pub line: Option<u32>,
}

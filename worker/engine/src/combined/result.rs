//! The result of restoring a report that crosses layers: what a combined job's result holds
//! and `symctl restore-event --format json` prints.
//!
//! Shape: exceptions the thrown one first, each with its frames innermost call first, every
//! frame tagged with its `layer` and carrying that layer's own result fields and status (a
//! JavaScript frame as in a JS result, a Java frame as in a JVM result, a native frame as in a
//! native result). A frame that expands (a Java frame R8 inlined into its caller, a native
//! frame with inlinees) comes out as several frames sharing its `index`, the inlined calls
//! first. Lines and columns are **1-based**. Which files were used and which were missing is
//! listed once: `modules` (native), `sourcemaps`, `mapping`.

use serde::{Deserialize, Serialize};

use crate::js::JsFrameResult;
use crate::jvm::JvmFrameResult;
use crate::result::{FrameResult, ModuleResult};

/// A restored report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CombinedResult {
    /// The exceptions, the thrown one first.
    pub exceptions: Vec<CombinedException>,
    /// The native images frames are in, with their statuses (as a native result's `modules`).
    pub modules: Vec<ModuleResult>,
    /// The source maps the JavaScript frames needed, one per bundle.
    pub sourcemaps: Vec<FileStatus>,
    /// The mapping file the Java frames needed, when they needed one.
    pub mapping: Option<FileStatus>,
    /// Where the event came from (its `release`, `dist`, `os` and device `model`); absent from
    /// the JSON when it says none of them.
    #[serde(default, skip_serializing_if = "crate::facets::ReportFacets::is_empty")]
    pub facets: crate::facets::ReportFacets,
}

/// One exception, restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CombinedException {
    /// The exception's class or type: the original class when the mapping file names the given
    /// one (a Java exception), else as given.
    #[serde(rename = "type")]
    pub type_: String,
    /// The class or type as given.
    pub raw_type: String,
    /// The message, as given.
    pub value: Option<String>,
    /// The frames, innermost call first.
    pub frames: Vec<CombinedFrame>,
}

/// One frame, with its layer's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "layer", rename_all = "snake_case")]
pub enum CombinedFrame {
    /// A JavaScript frame; its `index` is the frame's 0-based place in its exception.
    Js(JsFrameResult<'static>),
    /// A Java/Kotlin frame (`index` as above; inlined calls share it).
    Jvm(JvmFrameResult),
    /// A native frame (`index` as above; inlinees share it).
    Native(FrameResult),
    /// A frame of no layer, as given.
    Other(OtherFrame),
}

impl CombinedFrame {
    /// The frame's 0-based place in its exception (the input frame's).
    pub fn index(&self) -> usize {
        match self {
            CombinedFrame::Js(f) => f.index,
            CombinedFrame::Jvm(f) => f.index,
            CombinedFrame::Native(f) => f.index,
            CombinedFrame::Other(f) => f.index,
        }
    }
}

/// A frame no engine could read (no position, class or address), as given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OtherFrame {
    /// 0-based place in its exception.
    pub index: usize,
    /// `function`, as given.
    pub function: Option<String>,
    /// `filename` or `abs_path`, as given.
    pub filename: Option<String>,
    /// `lineno` (1-based), as given.
    pub lineno: Option<u32>,
}

/// A file (source map, mapping file) a layer needed, and whether it was had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStatus {
    /// What names it: `debug-id:<id>` or `release:<release>/<dist>/<bundle>` for a source
    /// map, `proguard:<mapping id>` for a mapping file (the keys `symctl missing` lists).
    pub key: String,
    /// Whether it was had.
    pub status: LoadStatus,
    /// Why not, when it was not (one line).
    pub error: Option<String>,
}

/// Whether a file was had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadStatus {
    /// Found and read: its frames are restored.
    Found,
    /// Not uploaded (yet): its frames are as given; the job runs again when it arrives.
    Missing,
    /// Found but unreadable (or, for a source map, named by no usable key): its frames are as
    /// given.
    Malformed,
}

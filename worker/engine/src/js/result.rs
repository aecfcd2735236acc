//! The result of restoring a JavaScript stack: what `symctl restore-js --format json` prints.
//!
//! Shape: the JS part of the symctl contract (`shared/conformance/CONTRACT.md`): one frame per
//! input frame in input order; lines and columns **1-based**.
//!
//! A result borrows its strings (names, file names, context lines) from the
//! [`JsSourceMap`](super::JsSourceMap) it was restored with, so that restoring a frame copies no
//! text; a result read back from JSON owns them (`JsRestoreResult<'static>`).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Status of one restored frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsFrameStatus {
    /// Mapped to an original file, line and column.
    Symbolicated,
    /// Nothing in the map covers the position (or its segment/module is unknown).
    MissingMapping,
    /// A native frame (`[native code]`); nothing to map.
    Native,
    /// The frame's source map was not had (a combined report: the result's `sourcemaps` says
    /// why); the frame is as given.
    MissingSourceMap,
}

/// The restored stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsRestoreResult<'a> {
    /// One entry per input frame, in input order.
    pub frames: Vec<JsFrameResult<'a>>,
}

/// One restored frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsFrameResult<'a> {
    /// 0-based index of the frame in the input (text lines that are not frames do not count).
    pub index: usize,
    /// How the frame fared.
    pub status: JsFrameStatus,
    /// The enclosing function's original name: from the Metro function map
    /// (`x_facebook_sources`), or from the bundle's scopes when `--bundle` was given.
    pub function: Option<Cow<'a, str>>,
    /// The source map's `names` entry at the position (often the called identifier).
    pub name: Option<Cow<'a, str>>,
    /// The original source file, as the map names it.
    pub filename: Option<Cow<'a, str>>,
    /// 1-based original line.
    pub lineno: Option<u32>,
    /// 1-based original column.
    pub colno: Option<u32>,
    /// The original source line (without its terminator), from `sourcesContent`.
    pub context_line: Option<Cow<'a, str>>,
    /// Up to 5 lines before `context_line`, oldest first.
    pub pre_context: Vec<Cow<'a, str>>,
    /// Up to 5 lines after `context_line`.
    pub post_context: Vec<Cow<'a, str>>,
    /// Whether the source is on the map's ignore list (`x_google_ignoreList`: library code).
    #[serde(default)]
    pub in_ignore_list: bool,
}

impl JsRestoreResult<'_> {
    /// The same result with every string copied out of the source map, to keep it longer
    /// than the map.
    pub fn into_owned(self) -> JsRestoreResult<'static> {
        JsRestoreResult {
            frames: self
                .frames
                .into_iter()
                .map(JsFrameResult::into_owned)
                .collect(),
        }
    }
}

impl JsFrameResult<'_> {
    /// The same frame with every string copied out of the source map.
    pub fn into_owned(self) -> JsFrameResult<'static> {
        let owned = |s: Cow<'_, str>| Cow::Owned(s.into_owned());
        let lines = |l: Vec<Cow<'_, str>>| l.into_iter().map(owned).collect();
        JsFrameResult {
            index: self.index,
            status: self.status,
            function: self.function.map(owned),
            name: self.name.map(owned),
            filename: self.filename.map(owned),
            lineno: self.lineno,
            colno: self.colno,
            context_line: self.context_line.map(owned),
            pre_context: lines(self.pre_context),
            post_context: lines(self.post_context),
            in_ignore_list: self.in_ignore_list,
        }
    }

    /// A frame with the given status and nothing else.
    pub fn empty(index: usize, status: JsFrameStatus) -> Self {
        JsFrameResult {
            index,
            status,
            function: None,
            name: None,
            filename: None,
            lineno: None,
            colno: None,
            context_line: None,
            pre_context: Vec::new(),
            post_context: Vec::new(),
            in_ignore_list: false,
        }
    }
}

//! The result of restoring a JavaScript stack: what `symctl restore-js --format json` prints.
//!
//! Shape: the JS part of the symctl contract (`shared/conformance/CONTRACT.md`): one frame per
//! input frame in input order; lines and columns **1-based**.

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
}

/// The restored stack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsRestoreResult {
    /// One entry per input frame, in input order.
    pub frames: Vec<JsFrameResult>,
}

/// One restored frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsFrameResult {
    /// 0-based index of the frame in the input (text lines that are not frames do not count).
    pub index: usize,
    /// How the frame fared.
    pub status: JsFrameStatus,
    /// The enclosing function's original name: from the Metro function map
    /// (`x_facebook_sources`), or from the bundle's scopes when `--bundle` was given.
    pub function: Option<String>,
    /// The source map's `names` entry at the position (often the called identifier).
    pub name: Option<String>,
    /// The original source file, as the map names it.
    pub filename: Option<String>,
    /// 1-based original line.
    pub lineno: Option<u32>,
    /// 1-based original column.
    pub colno: Option<u32>,
    /// The original source line (without its terminator), from `sourcesContent`.
    pub context_line: Option<String>,
    /// Up to 5 lines before `context_line`, oldest first.
    pub pre_context: Vec<String>,
    /// Up to 5 lines after `context_line`.
    pub post_context: Vec<String>,
    /// Whether the source is on the map's ignore list (`x_google_ignoreList`: library code).
    #[serde(default)]
    pub in_ignore_list: bool,
}

impl JsFrameResult {
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

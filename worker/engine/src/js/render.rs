//! metro-symbolicate's output format, so React Native developers can diff the two tools.
//!
//! - Text stacks are rewritten line by line with metro-symbolicate's own pattern: every
//!   `func@file:line:col`, `file:line:col` or `[native code]` becomes `source:line:name` (`name`
//!   being the enclosing function from the function map when there is one, else the map's
//!   `names` entry; `null` for what is unknown); everything else on the line stays.
//! - Hermes crash JSON becomes metro's `--hermes-crash` JSON array: `{source, line (1-based),
//!   column (0-based), name, functionName, isIgnored}` per frame, `{"NativeCode": true}` for
//!   native frames.

use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde_json::{Value, json};

use super::restore::{RestoreOptions, restore_frame};
use super::result::{JsFrameResult, JsFrameStatus, JsRestoreResult};
use super::sourcemap::JsSourceMap;
use super::stack::{JsFrame, JsStack, JsStackKind};

/// metro-symbolicate's frame pattern (`Symbolication.js`, `symbolicate()`).
static METRO_FRAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:([^@: \n(]+)(@|:))?(?:(?:([^@: \n(]+):)?(\d+):(\d+)|\[native code\])")
        .expect("valid pattern")
});

/// Renders a restored stack the way metro-symbolicate prints it.
///
/// `input` is the original stack text (for text stacks), `column_base` the base its columns
/// were read with (see [`super::stack::parse_stack`]).
pub fn metro_text(
    input: &str,
    stack: &JsStack,
    result: &JsRestoreResult,
    map: &JsSourceMap,
    column_base: u32,
) -> String {
    match stack.kind {
        JsStackKind::HermesCrash => hermes_crash_json(result),
        JsStackKind::Text => {
            let mut out = String::with_capacity(input.len());
            for line in input.lines() {
                out.push_str(&rewrite_line(line, map, column_base));
                out.push('\n');
            }
            out
        }
    }
}

/// A restored Hermes crash as metro-symbolicate's `--hermes-crash` JSON array (pretty, with a
/// final newline): it needs the result alone, not the map.
pub fn hermes_crash_json(result: &JsRestoreResult) -> String {
    let frames: Vec<Value> = result.frames.iter().map(hermes_json).collect();
    let mut out = serde_json::to_string_pretty(&frames).unwrap_or_default();
    out.push('\n');
    out
}

fn rewrite_line(line: &str, map: &JsSourceMap, column_base: u32) -> String {
    METRO_FRAME
        .replace_all(line, |caps: &Captures<'_>| {
            let mut func = caps.get(1).map(|m| m.as_str());
            let delimiter = caps.get(2).map(|m| m.as_str());
            let mut file = caps.get(3).map(|m| m.as_str());
            if delimiter == Some(":") && func.is_some() && file.is_none() {
                file = func.take();
            }
            // Hermes' `address at F:1:N` offsets are 0-based, whatever the other columns use.
            let start = caps.get(0).map_or(0, |m| m.start());
            let base = if line[..start].ends_with("address at ") {
                0
            } else {
                column_base
            };
            let frame = match (caps.get(4), caps.get(5)) {
                (Some(l), Some(c)) => JsFrame::Position {
                    function: func.map(str::to_owned),
                    file: file.map(str::to_owned),
                    line: l.as_str().parse().unwrap_or(u32::MAX),
                    column: c
                        .as_str()
                        .parse::<u32>()
                        .unwrap_or(u32::MAX)
                        .saturating_add(1 - base.min(1)),
                },
                _ => JsFrame::Native { function: None },
            };
            let restored = restore_frame(0, &frame, map, RestoreOptions { context_lines: 0 });
            format!(
                "{}:{}:{}",
                restored.filename.as_deref().unwrap_or("null"),
                restored.lineno.map_or("null".to_owned(), |l| l.to_string()),
                restored
                    .function
                    .as_deref()
                    .or(restored.name.as_deref())
                    .unwrap_or("null"),
            )
        })
        .into_owned()
}

fn hermes_json(frame: &JsFrameResult) -> Value {
    match frame.status {
        JsFrameStatus::Native => json!({"NativeCode": true}),
        _ => json!({
            "source": frame.filename,
            "line": frame.lineno,
            "column": frame.colno.map(|c| c - 1),
            "name": frame.name,
            "functionName": frame.function,
            "isIgnored": frame.in_ignore_list,
        }),
    }
}

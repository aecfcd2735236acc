//! Reading JavaScript stack traces: Hermes crash JSON and text stacks (V8/Node, JSC, Hermes).
//!
//! Text stacks are read one line at a time. A line is a frame when it ends in a
//! `file:line:col` position (optionally inside parentheses) or in `[native code]`:
//! - V8 / Node: `at fn (file:line:col)`, `at file:line:col`, `at fn ([native code])`,
//!   `at Array.map (<anonymous>)` (a builtin: native),
//!   `at eval (eval at file:line:col)` (the position is the last one on the line);
//! - Hermes: `at fn (address at file:line:col)`, where `col` is the bytecode offset, which
//!   Hermes prints **0-based** (`JSError.cpp`; checked against the Hermes VM's own output in
//!   `examples/rn-demo`); `at fn (native)` is a native frame;
//! - JSC: `fn@file:line:col` (names may contain spaces: `global code@…`), `fn@[native code]`;
//! - bare `file:line:col`.
//!
//! Other lines (`TypeError: …`, `eval code`) are kept as text. Positions are **1-based** lines
//! and columns, as browsers, Node and Hermes print them (a stack with 0-based columns can be read
//! with `column_base = 0`).
//!
//! Hermes crash JSON (`{"callstack": [...]}` or a bare array) has frames with `FunctionID`,
//! `ByteCodeOffset` and `CJSModuleOffset` or `SegmentID` (and a `SourceURL`), or
//! `{"NativeCode": true}`; the format is metro-symbolicate's `--hermes-crash` input.

use serde_json::Value;

/// A parsed stack: frames and pass-through text lines, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct JsStack {
    /// How the stack was written.
    pub kind: JsStackKind,
    /// Every input line (text stacks) or callstack entry (Hermes JSON), in order.
    pub items: Vec<StackItem>,
}

impl JsStack {
    /// The stack's frames in order, without its text lines; a frame's position here is its
    /// `index` in a [`JsRestoreResult`](super::JsRestoreResult).
    pub fn frames(&self) -> impl Iterator<Item = &JsFrame> {
        self.items.iter().filter_map(|item| match item {
            StackItem::Frame(frame) => Some(frame),
            StackItem::Text(_) => None,
        })
    }
}

/// The input format of a [`JsStack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsStackKind {
    /// A text stack trace, one frame per line.
    Text,
    /// A Hermes crash JSON callstack.
    HermesCrash,
}

/// One item of a stack.
#[derive(Debug, Clone, PartialEq)]
pub enum StackItem {
    /// A frame.
    Frame(JsFrame),
    /// A line that is not a frame, kept verbatim (without its line terminator).
    Text(String),
}

/// One frame of a JavaScript stack.
#[derive(Debug, Clone, PartialEq)]
pub enum JsFrame {
    /// A position in a minified bundle (or in Hermes bytecode: line 1, column = offset + 1).
    Position {
        /// The function name the engine printed, if any.
        function: Option<String>,
        /// The file or URL the engine printed (`index.android.bundle`, `seg-1_2.js`, a URL).
        file: Option<String>,
        /// 1-based line.
        line: u32,
        /// 1-based column (for Hermes `address at`: the 0-based bytecode offset Hermes prints,
        /// plus 1).
        column: u32,
    },
    /// A Hermes crash JSON frame.
    Hermes {
        /// `FunctionID`: index into the segment's `x_hermes_function_offsets`.
        function_id: u32,
        /// `ByteCodeOffset`: offset inside the function, in bytes.
        bytecode_offset: u32,
        /// `CJSModuleOffset` or `SegmentID`: the generated line (0-based) and the key of the
        /// function offsets.
        segment: u32,
        /// `SourceURL`, which selects a segment (`seg-N.js`) in legacy-format maps.
        source_url: Option<String>,
    },
    /// A native frame (`[native code]`, `{"NativeCode": true}`).
    Native {
        /// The function name, if printed.
        function: Option<String>,
    },
}

/// Why a stack could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StackError {
    /// The input is empty.
    #[error("the stack trace is empty")]
    Empty,
    /// The input is not UTF-8 text.
    #[error("the stack trace is not UTF-8 text (invalid byte at offset {0})")]
    NotUtf8(usize),
    /// The input is JSON but not a Hermes crash callstack.
    #[error("malformed Hermes crash JSON: {0}")]
    MalformedHermes(String),
    /// The text has no frame at all.
    #[error(
        "no stack frame found (expected lines like `at fn (file:line:col)` or `fn@file:line:col`)"
    )]
    NoFrames,
}

/// Reads a stack trace, detecting Hermes crash JSON vs text from the content.
///
/// `column_base` is the base of columns in text stacks: 1 (browsers, Node, Hermes; the default)
/// or 0 (metro-symbolicate's default input convention). Errors: [`StackError`].
pub fn parse_stack(data: &[u8], column_base: u32) -> Result<JsStack, StackError> {
    let text = std::str::from_utf8(data).map_err(|e| StackError::NotUtf8(e.valid_up_to()))?;
    let trimmed = text.trim_start_matches('\u{feff}').trim();
    if trimmed.is_empty() {
        return Err(StackError::Empty);
    }
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        if let Ok(value) = serde_json::from_str::<Value>(trimmed) {
            return parse_hermes(&value);
        }
        if trimmed.starts_with('{') {
            // JSON-looking text that does not parse is a broken crash file, not a stack.
            let e = serde_json::from_str::<Value>(trimmed).unwrap_err();
            return Err(StackError::MalformedHermes(format!("invalid JSON: {e}")));
        }
    }
    let items: Vec<StackItem> = text
        .lines()
        .map(|line| match parse_line(line, column_base) {
            Some(frame) => StackItem::Frame(frame),
            None => StackItem::Text(line.to_owned()),
        })
        .collect();
    if !items.iter().any(|i| matches!(i, StackItem::Frame(_))) {
        return Err(StackError::NoFrames);
    }
    Ok(JsStack {
        kind: JsStackKind::Text,
        items,
    })
}

fn parse_hermes(value: &Value) -> Result<JsStack, StackError> {
    let frames = match value {
        Value::Array(frames) => frames,
        Value::Object(obj) => match obj.get("callstack") {
            Some(Value::Array(frames)) => frames,
            Some(_) => {
                return Err(StackError::MalformedHermes(
                    "`callstack` is not an array".into(),
                ));
            }
            None => {
                return Err(StackError::MalformedHermes(
                    "no `callstack` array (expected {\"callstack\": [...]})".into(),
                ));
            }
        },
        _ => {
            return Err(StackError::MalformedHermes(
                "expected an object or an array".into(),
            ));
        }
    };
    let mut items = Vec::with_capacity(frames.len());
    for (i, f) in frames.iter().enumerate() {
        if f.get("NativeCode").and_then(Value::as_bool) == Some(true) {
            items.push(StackItem::Frame(JsFrame::Native { function: None }));
            continue;
        }
        let num = |key: &str| {
            f.get(key)
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        let segment = num("CJSModuleOffset").or_else(|| num("SegmentID"));
        let (Some(function_id), Some(bytecode_offset), Some(segment)) =
            (num("FunctionID"), num("ByteCodeOffset"), segment)
        else {
            return Err(StackError::MalformedHermes(format!(
                "callstack[{i}] needs `FunctionID`, `ByteCodeOffset` and `CJSModuleOffset` or \
                 `SegmentID` as non-negative integers, or `NativeCode: true`"
            )));
        };
        items.push(StackItem::Frame(JsFrame::Hermes {
            function_id,
            bytecode_offset,
            segment,
            source_url: f
                .get("SourceURL")
                .and_then(Value::as_str)
                .map(str::to_owned),
        }));
    }
    Ok(JsStack {
        kind: JsStackKind::HermesCrash,
        items,
    })
}

/// Parses one text line into a frame, or `None` when it is not one.
pub fn parse_line(line: &str, column_base: u32) -> Option<JsFrame> {
    let line = line.trim();
    let (body, v8) = match line.strip_prefix("at ") {
        Some(rest) => (rest.trim_start(), true),
        None => (line, false),
    };

    if let Some(function) = native_function(body, v8) {
        return Some(JsFrame::Native { function });
    }

    let (function, location) = if v8 {
        match body.find(" (") {
            Some(open) if body.ends_with(')') => {
                (Some(&body[..open]), &body[open + 2..body.len() - 1])
            }
            _ => (None, body),
        }
    } else {
        match jsc_split(body) {
            Some((function, location)) => (Some(function), location),
            None => (None, body),
        }
    };
    let (file, line_no, column) = last_position(location)?;
    // Hermes prints `address at F:1:N` with N the 0-based bytecode offset (Hermes'
    // `JSError.cpp`), whatever base the stack's other columns use.
    let column_base = if location.trim_start().starts_with("address at ") {
        0
    } else {
        column_base
    };
    // A bare `file:line:col` must be just that; prose that ends in a position is not a frame.
    if !v8 && function.is_none() && file.contains(char::is_whitespace) {
        return None;
    }
    let file = file
        .rsplit(" at ")
        .next()
        .unwrap_or(file)
        .trim_start_matches('(')
        .trim();
    Some(JsFrame::Position {
        function: function
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_owned),
        file: (!file.is_empty()).then(|| file.to_owned()),
        line: line_no,
        column: column + (1 - column_base.min(1)),
    })
}

/// `fn@[native code]`, `[native code]`, `at fn ([native code])`, and V8's / Hermes' builtins
/// `at Array.map (<anonymous>)`, `at map (native)` → the function name.
fn native_function(body: &str, v8: bool) -> Option<Option<String>> {
    const NATIVE: &str = "[native code]";
    if v8 {
        let inner = [" ([native code])", " (native)", " (<anonymous>)"]
            .iter()
            .find_map(|suffix| body.strip_suffix(suffix))?;
        return Some(Some(inner.trim().to_owned()).filter(|f| !f.is_empty()));
    }
    let function = body.strip_suffix(NATIVE)?;
    match function.strip_suffix('@') {
        Some(f) => Some(Some(f.trim().to_owned()).filter(|f| !f.is_empty())),
        None if function.is_empty() => Some(None),
        None => None,
    }
}

/// Splits JSC's `fn@location` at the `@` that starts the location.
fn jsc_split(body: &str) -> Option<(&str, &str)> {
    let at = body.rfind('@')?;
    Some((&body[..at], &body[at + 1..]))
}

/// The last `file:line:col` at the end of `location` → (file, line, col).
fn last_position(location: &str) -> Option<(&str, u32, u32)> {
    let location = location.trim_end();
    let (rest, column) = location.rsplit_once(':')?;
    let (file, line) = rest.rsplit_once(':')?;
    let column: u32 = column.parse().ok()?;
    let line: u32 = line.parse().ok()?;
    Some((file, line, column))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(function: Option<&str>, file: &str, line: u32, column: u32) -> Option<JsFrame> {
        Some(JsFrame::Position {
            function: function.map(str::to_owned),
            file: Some(file.to_owned()),
            line,
            column,
        })
    }

    #[test]
    fn v8_lines() {
        assert_eq!(
            parse_line("    at throws6 (/js/thrower.min.js:1:161)", 1),
            pos(Some("throws6"), "/js/thrower.min.js", 1, 161)
        );
        assert_eq!(
            parse_line("at /js/thrower.min.js:1:488", 1),
            pos(None, "/js/thrower.min.js", 1, 488)
        );
        assert_eq!(
            parse_line("    at eval (eval at /js/thrower.min.js:1:451)", 1),
            pos(Some("eval"), "/js/thrower.min.js", 1, 451)
        );
        assert_eq!(
            parse_line("    at global code (/js/thrower.min.js:1:534)", 1),
            pos(Some("global code"), "/js/thrower.min.js", 1, 534)
        );
        assert_eq!(
            parse_line(
                "at foo (http://localhost:8081/index.bundle?platform=ios:12:34)",
                1
            ),
            pos(
                Some("foo"),
                "http://localhost:8081/index.bundle?platform=ios",
                12,
                34
            )
        );
        assert_eq!(
            parse_line("    at forEach ([native code])", 1),
            Some(JsFrame::Native {
                function: Some("forEach".into())
            })
        );
    }

    #[test]
    fn hermes_and_jsc_lines() {
        // The bytecode offset Hermes prints is 0-based, whatever the column base.
        assert_eq!(
            parse_line("at foo (address at index.android.bundle:1:11939)", 1),
            pos(Some("foo"), "index.android.bundle", 1, 11940)
        );
        assert_eq!(
            parse_line("at map (native)", 1),
            Some(JsFrame::Native {
                function: Some("map".into())
            })
        );
        assert_eq!(
            parse_line("    at Array.map (<anonymous>)", 1),
            Some(JsFrame::Native {
                function: Some("Array.map".into())
            })
        );
        assert_eq!(
            parse_line("global code@thrower.min.js:1:534", 1),
            pos(Some("global code"), "thrower.min.js", 1, 534)
        );
        assert_eq!(parse_line("1.js:6:7", 1), pos(None, "1.js", 6, 7));
        assert_eq!(
            parse_line("eval@[native code]", 1),
            Some(JsFrame::Native {
                function: Some("eval".into())
            })
        );
        // 0-based input columns are shifted to 1-based.
        assert_eq!(parse_line("f@a.js:1:0", 0), pos(Some("f"), "a.js", 1, 1));
    }

    #[test]
    fn text_lines() {
        assert_eq!(
            parse_line("TypeError: undefined is not a function", 1),
            None
        );
        assert_eq!(parse_line("eval code", 1), None);
        assert_eq!(parse_line("Error: failed at step 3:1:2", 1), None);
        assert_eq!(parse_line("", 1), None);
    }
}

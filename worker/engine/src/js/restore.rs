//! Restoring frames: minified positions and Hermes bytecode offsets to original source.
//!
//! The rules are metro-symbolicate's (`Symbolication.js`), so that answers agree with it:
//! - text frames look up (line - 1, column - 1); in legacy-format maps the file name selects a
//!   RAM bundle module (`N.js`: line offset `x_facebook_offsets[N]`) or segment (`seg-S.js`,
//!   `seg-S_N.js`); an unknown module or segment gives `missing_mapping`;
//! - Hermes crash frames look up line `CJSModuleOffset` (or `SegmentID`), column
//!   `x_hermes_function_offsets[segment][FunctionID] + ByteCodeOffset`, in the segment the
//!   `SourceURL` selects; without function offsets the frame is `missing_mapping`.

use std::borrow::Cow;

use symbolic_sourcemapcache::ScopeLookupResult;

use super::result::{JsFrameResult, JsFrameStatus, JsRestoreResult};
use super::sourcemap::{JsSourceMap, MappedLocation, Mapping, Segment};
use super::stack::{JsFrame, JsStack};

/// Lines of context on each side of `context_line`, by default.
pub const CONTEXT_LINES: usize = 5;

/// What [`restore_with`] adds to each frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestoreOptions {
    /// Source lines of context on each side of `context_line` (0: none, and no
    /// `context_line` either).
    pub context_lines: usize,
}

impl Default for RestoreOptions {
    fn default() -> Self {
        RestoreOptions {
            context_lines: CONTEXT_LINES,
        }
    }
}

/// Restores every frame of `stack` with `map`, with [`CONTEXT_LINES`] lines of context.
/// Never fails: unmapped frames get a status.
pub fn restore<'m>(stack: &JsStack, map: &'m JsSourceMap) -> JsRestoreResult<'m> {
    restore_with(stack, map, RestoreOptions::default())
}

/// [`restore`] with explicit options.
pub fn restore_with<'m>(
    stack: &JsStack,
    map: &'m JsSourceMap,
    options: RestoreOptions,
) -> JsRestoreResult<'m> {
    let frames: Vec<&JsFrame> = stack.frames().collect();
    // Frames are looked up a chunk at a time, then their context lines are read, then their
    // results built: each step waits on memory (a random place in a big map or source), and a
    // tight loop over the chunk lets the CPU wait for several frames at once.
    const CHUNK: usize = 32;
    let mut out = Vec::with_capacity(frames.len());
    let mut located = Vec::with_capacity(CHUNK);
    let mut context_starts = Vec::with_capacity(CHUNK);
    for (chunk_index, chunk) in frames.chunks(CHUNK).enumerate() {
        located.extend(chunk.iter().map(|frame| locate(frame, map)));
        for found in located.iter_mut() {
            *found = std::mem::replace(found, Located::Missing).resolve();
        }
        if options.context_lines > 0 {
            context_starts.extend(located.iter().map(|found| match found {
                Located::Mapped(_, mapped) => {
                    let first = (mapped.line as usize).saturating_sub(options.context_lines);
                    let source = mapped.source()?;
                    Some((source, source.line_start(first)?))
                }
                _ => None,
            }));
            let first_bytes = context_starts
                .drain(..)
                .flatten()
                .fold(0u8, |acc, (source, start)| acc ^ source.byte(start));
            // Read only to have the text in the cache when the results are built.
            std::hint::black_box(first_bytes);
        }
        for (i, found) in located.drain(..).enumerate() {
            out.push(build(chunk_index * CHUNK + i, found, options));
        }
    }
    JsRestoreResult { frames: out }
}

/// Restores one frame; `index` is its position among the stack's frames.
pub fn restore_frame<'m>(
    index: usize,
    frame: &JsFrame,
    map: &'m JsSourceMap,
    options: RestoreOptions,
) -> JsFrameResult<'m> {
    build(index, locate(frame, map), options)
}

/// Where a frame's position maps to, before its result is built.
enum Located<'m> {
    Native,
    Missing,
    Found(&'m Segment, Mapping<'m>),
    Mapped(&'m Segment, MappedLocation<'m>),
}

impl<'m> Located<'m> {
    /// Resolves a found mapping ([`Mapping::resolve`]).
    fn resolve(self) -> Self {
        match self {
            Located::Found(segment, mapping) => match mapping.resolve() {
                Some(mapped) => Located::Mapped(segment, mapped),
                None => Located::Missing,
            },
            other => other,
        }
    }
}

fn build<'m>(index: usize, located: Located<'m>, options: RestoreOptions) -> JsFrameResult<'m> {
    match located {
        Located::Native => JsFrameResult::empty(index, JsFrameStatus::Native),
        Located::Missing => JsFrameResult::empty(index, JsFrameStatus::MissingMapping),
        found @ Located::Found(..) => build(index, found.resolve(), options),
        Located::Mapped(segment, mapped) => symbolicated(index, segment, &mapped, options),
    }
}

fn locate<'m>(frame: &JsFrame, map: &'m JsSourceMap) -> Located<'m> {
    let mapped = |segment: &'m Segment, line: u32, column: u32| match segment.find(line, column) {
        Some(found) => Located::Found(segment, found),
        None => Located::Missing,
    };
    match frame {
        JsFrame::Native { .. } => Located::Native,
        JsFrame::Position {
            file, line, column, ..
        } => {
            let ids = module_ids(map, file.as_deref());
            let Some(segment) = map.segment(ids.segment) else {
                return Located::Missing;
            };
            let module_offset = match ids.module {
                Some(module) => match segment.module_offset(module) {
                    Some(offset) => offset,
                    None => return Located::Missing,
                },
                None => 0,
            };
            let Some(line0) = line
                .checked_sub(1)
                .and_then(|l| l.checked_add(module_offset))
            else {
                return Located::Missing;
            };
            mapped(segment, line0, column.saturating_sub(1))
        }
        JsFrame::Hermes {
            function_id,
            bytecode_offset,
            segment: key,
            source_url,
        } => {
            let ids = module_ids(map, source_url.as_deref());
            let Some(segment) = map.segment(ids.segment) else {
                return Located::Missing;
            };
            let Some(function_start) = segment.hermes_function_offset(*key, *function_id) else {
                return Located::Missing;
            };
            let Some(column) = function_start.checked_add(*bytecode_offset) else {
                return Located::Missing;
            };
            mapped(segment, *key, column)
        }
    }
}

fn symbolicated<'m>(
    index: usize,
    segment: &Segment,
    mapped: &MappedLocation<'m>,
    options: RestoreOptions,
) -> JsFrameResult<'m> {
    let function = match mapped.scope {
        ScopeLookupResult::NamedScope(name) => Some(Cow::Borrowed(name)),
        ScopeLookupResult::AnonymousScope | ScopeLookupResult::Unknown => None,
    };
    let line = mapped.line as usize;
    let context = options.context_lines;
    let source = if context > 0 { mapped.source() } else { None };
    let source_line = |n: usize| source.and_then(|s| s.line(n)).map(Cow::Borrowed);
    let context_line = source_line(line);
    let (pre_context, post_context) = if context_line.is_some() {
        let mut pre = Vec::with_capacity(context.min(line));
        pre.extend((line.saturating_sub(context)..line).filter_map(source_line));
        let mut post = Vec::with_capacity(context);
        post.extend((line + 1..=line + context).map_while(source_line));
        (pre, post)
    } else {
        (Vec::new(), Vec::new())
    };
    let filename = mapped.file_name;
    JsFrameResult {
        index,
        status: JsFrameStatus::Symbolicated,
        function,
        name: mapped.name.map(Cow::Borrowed),
        in_ignore_list: filename.is_some_and(|f| segment.is_ignored(f)),
        filename: filename.map(Cow::Borrowed),
        lineno: Some(mapped.line + 1),
        colno: Some(mapped.column + 1),
        context_line,
        pre_context,
        post_context,
    }
}

/// Which segment and RAM bundle module a file name selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleIds {
    /// Segment id (0 = main bundle).
    pub segment: u32,
    /// RAM bundle module id, if the name gives one.
    pub module: Option<u32>,
}

/// Metro's legacy file names: `N.js` → module N of segment 0; `seg-S.js` → segment S;
/// `seg-S_N.js` → module N of segment S. Only in legacy-format maps; otherwise segment 0.
/// The name is the last path component of `file`, without a query string.
pub fn module_ids(map: &JsSourceMap, file: Option<&str>) -> ModuleIds {
    let main = ModuleIds {
        segment: 0,
        module: None,
    };
    if !map.legacy_format() {
        return main;
    }
    let Some(file) = file else { return main };
    let name = file.split(['?', '#']).next().unwrap_or(file);
    let name = name.rsplit('/').next().unwrap_or(name);
    let Some(stem) = name.strip_suffix(".js") else {
        return main;
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if all_digits(stem) {
        return ModuleIds {
            segment: 0,
            module: stem.parse().ok(),
        };
    }
    if let Some(rest) = stem.strip_prefix("seg-") {
        let (segment, module) = match rest.split_once('_') {
            Some((s, m)) if all_digits(s) && all_digits(m) => (s, Some(m)),
            None if all_digits(rest) => (rest, None),
            _ => return main,
        };
        if let Ok(segment) = segment.parse() {
            return ModuleIds {
                segment,
                module: module.and_then(|m| m.parse().ok()),
            };
        }
    }
    main
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::js::parse_stack;

    /// One generated line with a mapping every 2 columns, mapping `k` to line `k` (0-based) of
    /// `src.js`, whose text is `line 0`, `line 1`, ...
    fn map() -> JsSourceMap {
        let mut segments = vec!["AAAA".to_owned()];
        segments.extend((1..100).map(|_| "EACA".to_owned()));
        let text: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        let map = serde_json::json!({
            "version": 3,
            "sources": ["src.js"],
            "names": [],
            "mappings": segments.join(","),
            "sourcesContent": [text.join("\n")],
        });
        JsSourceMap::parse(map.to_string().as_bytes(), None).unwrap()
    }

    #[test]
    fn frames_in_several_chunks_keep_their_order_and_index() {
        let map = map();
        // 70 positions (3 chunks of 32), a native frame among them, a text line before.
        let mut text = String::from("TypeError: boom\n");
        for i in 0..70 {
            if i == 40 {
                text.push_str("    at map (native)\n");
            }
            text.push_str(&format!("    at f{i} (bundle.js:1:{})\n", 2 * i + 1));
        }
        let stack = parse_stack(text.as_bytes(), 1).unwrap();
        let result = restore(&stack, &map);
        assert_eq!(result.frames.len(), 71);
        for (index, (got, frame)) in result.frames.iter().zip(stack.frames()).enumerate() {
            assert_eq!(got.index, index);
            assert_eq!(
                *got,
                restore_frame(index, frame, &map, RestoreOptions::default())
            );
        }
        assert_eq!(result.frames[40].status, JsFrameStatus::Native);
        for (index, i) in (0..40u32)
            .map(|i| (i as usize, i))
            .chain((40..70).map(|i| (i as usize + 1, i)))
        {
            let frame = &result.frames[index];
            assert_eq!(frame.status, JsFrameStatus::Symbolicated, "frame {index}");
            assert_eq!(frame.lineno, Some(i + 1), "frame {index}");
            assert_eq!(
                frame.context_line.as_deref(),
                Some(format!("line {i}").as_str())
            );
            assert_eq!(frame.pre_context.len(), (i as usize).min(CONTEXT_LINES));
        }
    }
}

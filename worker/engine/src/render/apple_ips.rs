//! Adds Xcode's symbolication fields to the frames of an Apple `.ips` report.

use serde_json::{Map, Value};

use super::{RenderError, symbolicated_levels};
use crate::result::{FrameResult, SymbolicationResult};

/// Renders the `.ips` `text` (header line + body) with symbolicated frames.
pub fn render(text: &str, result: &SymbolicationResult) -> Result<String, RenderError> {
    let trimmed = text.trim_start_matches('\u{feff}').trim_start();
    let (header, body) = match crate::reports::split_ips_header(trimmed) {
        Some((header, body)) => (Some(header), body),
        None => (None, trimmed),
    };
    let mut body: Value =
        serde_json::from_str(body).map_err(|e| RenderError::Ips(e.to_string()))?;
    if let Some(threads) = body.get_mut("threads").and_then(Value::as_array_mut) {
        for (index, thread) in threads.iter_mut().enumerate() {
            let Some(result_thread) = result.threads.iter().find(|t| t.id == index as u64) else {
                continue;
            };
            let Some(frames) = thread.get_mut("frames").and_then(Value::as_array_mut) else {
                continue;
            };
            let mut rendered = Vec::with_capacity(frames.len());
            for (n, frame) in frames.drain(..).enumerate() {
                let levels = symbolicated_levels(&result_thread.frames, n);
                let Value::Object(original) = frame else {
                    rendered.push(frame);
                    continue;
                };
                if levels.is_empty() {
                    rendered.push(Value::Object(original));
                    continue;
                }
                for level in levels {
                    rendered.push(Value::Object(annotate(original.clone(), level)));
                }
            }
            *frames = rendered;
        }
    }
    let body = serde_json::to_string_pretty(&body).map_err(|e| RenderError::Ips(e.to_string()))?;
    Ok(match header {
        Some(header) => format!("{header}\n{body}\n"),
        None => format!("{body}\n"),
    })
}

fn annotate(mut frame: Map<String, Value>, level: &FrameResult) -> Map<String, Value> {
    if level.inlined {
        frame.insert("inline".into(), Value::Bool(true));
    }
    if let Some(function) = &level.function {
        frame.insert("symbol".into(), Value::from(function.as_str()));
    }
    if let (false, Some(sym)) = (level.inlined, level.sym_addr) {
        frame.insert(
            "symbolLocation".into(),
            Value::from(level.instruction_addr.0.wrapping_sub(sym.0)),
        );
    }
    if let Some(file) = &level.filename {
        frame.insert("sourceFile".into(), Value::from(file.as_str()));
    }
    if let Some(line) = level.lineno {
        frame.insert("sourceLine".into(), Value::from(line));
    }
    frame
}

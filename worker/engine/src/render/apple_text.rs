//! Rewrites the frame lines of an Apple `.crash` report with symbolicated names.

use super::{describe, symbolicated_levels};
use crate::result::SymbolicationResult;

/// Renders the report `text` with every symbolicated frame rewritten; other lines unchanged.
pub fn render(text: &str, result: &SymbolicationResult) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut thread: Option<usize> = None; // index into result.threads
    let mut frame_number = 0usize;
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let ending = &line[body.len()..];
        if let Some(id) = thread_header(body) {
            thread = result.threads.iter().position(|t| t.id == id);
            frame_number = 0;
            out.push_str(line);
            continue;
        }
        let Some(parts) = thread.and_then(|_| frame_line(body)) else {
            if body.trim().is_empty() {
                thread = None;
            }
            out.push_str(line);
            continue;
        };
        let frames = &result.threads[thread.expect("in a thread")].frames;
        let levels = symbolicated_levels(frames, frame_number);
        frame_number += 1;
        if levels.is_empty() {
            out.push_str(line);
            continue;
        }
        for level in levels {
            out.push_str(parts.prefix);
            out.push_str(&describe(level));
            out.push_str(if ending.is_empty() { "\n" } else { ending });
        }
        if ending.is_empty() {
            out.pop();
        }
    }
    out
}

/// `Thread 3:` / `Thread 0 Crashed:` → the thread number. `Thread 0 name:` and
/// `Thread 0 crashed with ARM Thread State` are not section headers.
fn thread_header(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("Thread ")?;
    let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let tail = rest[digits..].trim_start();
    if digits > 0 && (tail.starts_with(':') || tail.starts_with("Crashed:")) {
        rest[..digits].parse().ok()
    } else {
        None
    }
}

struct FrameLine<'a> {
    /// `0   DemoApp   0x0000000104f4bf10 ` — everything up to the symbol part.
    prefix: &'a str,
}

/// Splits `N  image  0xADDR  rest` after the address; `None` if the line is not a frame line.
fn frame_line(line: &str) -> Option<FrameLine<'_>> {
    let trimmed = line.trim_start();
    let digits = trimmed.len()
        - trimmed
            .trim_start_matches(|c: char| c.is_ascii_digit())
            .len();
    if digits == 0 || !trimmed[digits..].starts_with([' ', '\t']) {
        return None;
    }
    // The address is the first `0x…` token after the image name.
    let mut offset = line.len() - trimmed.len() + digits;
    let mut seen_image = false;
    for token in line[offset..].split_inclusive([' ', '\t']) {
        let word = token.trim_end_matches([' ', '\t']);
        offset += token.len();
        if word.is_empty() {
            continue;
        }
        if seen_image && word.starts_with("0x") && u64::from_str_radix(&word[2..], 16).is_ok() {
            // Keep a single space between the address and the symbol.
            let end = offset - (token.len() - word.len());
            return Some(FrameLine {
                prefix: &line[..end + usize::from(end < line.len())],
            });
        }
        seen_image = true;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        assert_eq!(thread_header("Thread 0 Crashed:"), Some(0));
        assert_eq!(thread_header("Thread 12:"), Some(12));
        assert_eq!(thread_header("Thread 0 name:  Dispatch queue: main"), None);
        assert_eq!(
            thread_header("Thread 0 crashed with ARM Thread State (64-bit):"),
            None
        );
        assert_eq!(thread_header("Threads: 3"), None);
    }

    #[test]
    fn frame_lines() {
        let line = "1   DemoApp                       \t0x0000000104f4bf10 0x104f48000 + 16144";
        assert_eq!(
            frame_line(line).unwrap().prefix,
            "1   DemoApp                       \t0x0000000104f4bf10 "
        );
        let spaced = "2   My Framework   0x0000000104f4bf10 0x104f48000 + 16144";
        assert_eq!(
            frame_line(spaced).unwrap().prefix,
            "2   My Framework   0x0000000104f4bf10 "
        );
        assert!(frame_line("Binary Images:").is_none());
        assert!(frame_line("0x104f48000 - 0x104f4ffff DemoApp arm64").is_none());
    }
}

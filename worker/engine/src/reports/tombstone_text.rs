//! Android tombstones as text: what debuggerd writes to `/data/tombstones/tombstone_NN` (before
//! Android 12, and beside the protobuf since) and logs to logcat under the tag `DEBUG`, and
//! what a user pastes from either.
//!
//! Format (AOSP `system/core/debuggerd/libdebuggerd/tombstone_proto_to_text.cpp`, and the
//! "Diagnosing native crashes" page of the Android documentation): a `*** *** ***` line, then
//! `ABI: 'arm64'`, `pid: P, tid: T, name: N  >>> process <<<` (the crashed thread), `signal 11
//! (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0`, `Abort message: '…'`, the registers
//! (not read: they hold absolute addresses, the frames relative ones), `backtrace:` and its frames:
//!
//! ```text
//!       #00 pc 000000000001a2b4  /data/app/~~x==/com.example-y==/base.apk!libfoo.so (offset 0x8000) (crash()+20) (BuildId: 0123abcd…)
//! ```
//!
//! then, after `--- --- ---` lines, the other threads the same way (`pid: … tid: …`,
//! `backtrace:`). Logcat's line prefixes (`… F DEBUG   : `, `F/DEBUG  ( 123): `) are dropped.
//!
//! A frame gives its address relative to its ELF (`pc`: what the protobuf calls `rel_pc`), the
//! ELF's path (`base.apk!libfoo.so` when loaded straight from the APK), the function debuggerd
//! found and the GNU build id; the load address is not given. So every ELF is an image at
//! address 0, each frame names its image explicitly (by build id and path), and its address is
//! the relative one: what the tombstone printed is what the result shows. As with the protobuf
//! ([`super::tombstone`]), libunwindstack already moved callers' addresses into their call,
//! and the reader adds that back.

use symbolic_common::Arch;

use super::ReportError;
use super::fields::{debug_id_from_build_id, parse_arch, signal_number};
use super::tombstone::{MAX_FRAMES, MAX_THREADS, MAX_TOTAL_FRAMES};
use crate::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};

const FORMAT: ReportFormat = ReportFormat::Tombstone;

/// Whether `text` is a text tombstone: its `*** *** ***` banner anywhere (a logcat dump holds
/// it among other lines), or a `pid: …, tid: …` line and a `backtrace:` line (a paste without
/// the banner). Linear in the text.
pub fn looks_like(text: &str) -> bool {
    if text.contains(BANNER) {
        return true;
    }
    let mut pid = false;
    let mut backtrace = false;
    for line in text.lines() {
        let line = strip_logcat(line).trim();
        pid |= line.starts_with("pid: ") && line.contains(", tid: ");
        backtrace |= line == "backtrace:";
        if pid && backtrace {
            return true;
        }
    }
    false
}

/// The line a tombstone starts with.
const BANNER: &str = "*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***";

/// One frame as printed.
struct FrameLine<'a> {
    rel_pc: u64,
    path: &'a str,
    function: Option<&'a str>,
    build_id: Option<&'a str>,
}

/// Reads a text tombstone ([module docs](self)).
///
/// # Errors
/// [`ReportError::Malformed`]: no thread with a frame, or more than the protobuf reader's
/// limits ([`MAX_THREADS`], [`MAX_FRAMES`] in one thread, [`MAX_TOTAL_FRAMES`]).
pub fn parse(text: &str) -> Result<NativeReport, ReportError> {
    let mut arch = Arch::Unknown;
    let mut signal: Option<u32> = None;
    let mut reason: Option<String> = None;
    let mut abort_message: Option<String> = None;
    let mut build_fingerprint: Option<String> = None;
    let mut threads: Vec<Thread> = Vec::new();
    let mut images: Vec<Image> = Vec::new();
    // (build id or path) → image index.
    let mut by_key: std::collections::HashMap<String, usize> = Default::default();
    let mut in_backtrace = false;
    let mut total = 0usize;
    // The crashed process: a logcat paste may hold several crashes; the first is read.
    let mut pid: Option<u64> = None;
    let mut banners = 0;
    for raw in text.lines() {
        let line = strip_logcat(raw.trim_end_matches('\r'));
        let trimmed = line.trim();
        if trimmed.starts_with(BANNER) {
            banners += 1;
            if banners > 1 && !threads.is_empty() {
                break;
            }
            continue;
        }
        if let Some((thread_pid, tid, name)) = thread_line(trimmed) {
            if pid.is_some_and(|p| p != thread_pid) {
                break;
            }
            pid = Some(thread_pid);
            if threads.len() == MAX_THREADS {
                return Err(too_large());
            }
            threads.push(Thread {
                id: tid,
                name: name.map(str::to_owned),
                crashed: threads.is_empty(),
                ip_register: None,
                frames: Vec::new(),
            });
            in_backtrace = false;
            continue;
        }
        if in_backtrace {
            if let Some(frame) = frame_line(trimmed) {
                let thread = threads.last_mut().expect("a backtrace follows its thread");
                if thread.frames.len() == MAX_FRAMES || total == MAX_TOTAL_FRAMES {
                    return Err(too_large());
                }
                total += 1;
                let image_index = image_for(&mut images, &mut by_key, &frame, arch);
                thread.frames.push(RawFrame {
                    instruction_addr: frame.rel_pc,
                    function: frame.function.map(str::to_owned),
                    image_index: Some(image_index),
                    trust: None,
                });
                continue;
            }
            // Anything else ends it (a blank line, which logcat does not show, or the next
            // section: `deallocated by thread N:`, `Guest thread information …`, `memory near`).
            if !trimmed.starts_with("NOTE:") {
                in_backtrace = false;
            }
        }
        if let Some(abi) = trimmed.strip_prefix("ABI: ") {
            if arch == Arch::Unknown {
                arch = parse_arch(unquote(abi));
            }
        } else if trimmed.starts_with("signal ") && reason.is_none() {
            (signal, reason) = signal_line(trimmed);
        } else if let Some(fingerprint) = trimmed.strip_prefix("Build fingerprint: ") {
            build_fingerprint.get_or_insert_with(|| unquote(fingerprint).to_owned());
        } else if let Some(message) = trimmed.strip_prefix("Abort message: ") {
            abort_message.get_or_insert_with(|| unquote(message).to_owned());
        } else if trimmed == "backtrace:" {
            // The backtrace of the thread just named (one per thread: a guest architecture's
            // second backtrace is not this thread's).
            in_backtrace = threads.last().is_some_and(|t| t.frames.is_empty());
        }
    }
    if !threads.iter().any(|t| !t.frames.is_empty()) {
        return Err(ReportError::malformed(
            FORMAT,
            "no thread with a backtrace (`pid: …, tid: …` then `backtrace:` and `#00 pc …` lines)",
        ));
    }
    // The architecture is known once the whole header is read: images and callers then.
    let adjustment = match arch {
        Arch::X86 | Arch::Amd64 => 1,
        Arch::Arm => 2,
        _ => 4,
    };
    for thread in &mut threads {
        for frame in thread.frames.iter_mut().skip(1) {
            frame.instruction_addr = frame.instruction_addr.wrapping_add(adjustment);
        }
    }
    // Each image spans its frames' addresses (nothing says more: frames name their image).
    for image in &mut images {
        image.arch = arch;
    }
    for frame in threads.iter().flat_map(|t| &t.frames) {
        if let Some(image) = frame.image_index.and_then(|i| images.get_mut(i)) {
            image.image_size = image
                .image_size
                .max(frame.instruction_addr.saturating_add(1));
        }
    }
    let crash_reason = reason.map(|reason| match abort_message {
        Some(message) => format!("{reason}: {message}"),
        None => reason,
    });
    let mut report = NativeReport::crash(FORMAT, arch, crash_reason, signal, threads, images);
    report.facets = crate::facets::android_fingerprint(build_fingerprint.as_deref().unwrap_or(""));
    Ok(report)
}

fn too_large() -> ReportError {
    ReportError::malformed(
        FORMAT,
        format!(
            "more than read ({MAX_THREADS} threads, {MAX_FRAMES} frames in one, \
             {MAX_TOTAL_FRAMES} in all)"
        ),
    )
}

/// The image a frame is in: one per build id (else per path), at address 0 (its size is set
/// once every frame is read).
fn image_for(
    images: &mut Vec<Image>,
    by_key: &mut std::collections::HashMap<String, usize>,
    frame: &FrameLine<'_>,
    arch: Arch,
) -> usize {
    let key = frame.build_id.unwrap_or(frame.path).to_owned();
    *by_key.entry(key).or_insert_with(|| {
        images.push(Image {
            code_file: (!frame.path.is_empty()).then(|| frame.path.to_owned()),
            debug_id: frame.build_id.and_then(debug_id_from_build_id),
            arch,
            image_addr: 0,
            image_size: 0,
        });
        images.len() - 1
    })
}

/// `pid: 123, tid: 456, name: RenderThread  >>> com.example <<<` → (pid, tid, name).
fn thread_line(line: &str) -> Option<(u64, u64, Option<&str>)> {
    let rest = line.strip_prefix("pid: ")?;
    let (pid, rest) = rest.split_once(", tid: ")?;
    let pid = pid.trim().parse().ok()?;
    let (tid, rest) = rest.split_once(',').unwrap_or((rest, ""));
    let tid = tid.trim().parse().ok()?;
    let name = rest
        .trim()
        .strip_prefix("name: ")
        .map(|n| n.split("  >>>").next().unwrap_or(n).trim())
        .filter(|n| !n.is_empty());
    Some((pid, tid, name))
}

/// A value in single quotes (`'arm64'`), without them (once on each side).
fn unquote(value: &str) -> &str {
    let value = value.trim();
    value
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(value)
}

/// `signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0` → (11, `SIGSEGV / SEGV_MAPERR at
/// 0x0`), as the protobuf reader words it; a code's ` from pid N, uid N` is left out.
fn signal_line(line: &str) -> (Option<u32>, Option<String>) {
    // The text inside the first parentheses of `s`.
    let inside = |s: &str| {
        let start = s.find('(')?;
        let end = s[start..].find(')')? + start;
        Some(s[start + 1..end].to_owned())
    };
    let head = line.split(", code ").next().unwrap_or(line);
    let name = inside(head);
    let number = head
        .strip_prefix("signal ")
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .or_else(|| name.as_deref().and_then(signal_number));
    let mut reason = name;
    if let Some(at) = line.find(", code ")
        && let Some(code) = inside(&line[at..])
        && let Some(r) = &mut reason
    {
        let code = code.split(" from ").next().unwrap_or(&code);
        *r = format!("{r} / {code}");
    }
    if let Some(at) = line.find("fault addr ")
        && let Some(r) = &mut reason
    {
        let addr = line[at + "fault addr ".len()..]
            .split_whitespace()
            .next()
            .unwrap_or("");
        let hex = addr.strip_prefix("0x").unwrap_or(addr);
        if let Ok(addr) = u64::from_str_radix(hex, 16) {
            *r = format!("{r} at {addr:#x}");
        }
    }
    (number, reason)
}

/// `#00 pc 000000000001a2b4  /path/lib.so (offset 0x8000) (fn(int)+20) (BuildId: ab…)`.
fn frame_line(line: &str) -> Option<FrameLine<'_>> {
    let rest = line.strip_prefix('#')?;
    let (number, rest) = rest.split_once(char::is_whitespace)?;
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let rest = rest.trim_start().strip_prefix("pc ")?.trim_start();
    let (address, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let rel_pc = u64::from_str_radix(address, 16).ok()?;
    let mut rest = rest.trim();
    // From the end: the build id, then the function (whose name may hold parentheses), then
    // the offset in the file; what is left is the path (which may end in ` (deleted)`).
    let mut build_id = None;
    if let Some(start) = rest.rfind(" (BuildId: ")
        && rest.ends_with(')')
    {
        build_id =
            Some(&rest[start + " (BuildId: ".len()..rest.len() - 1]).filter(|b| !b.is_empty());
        rest = rest[..start].trim_end();
    }
    let mut function = None;
    if let Some(open) = last_group(rest) {
        let group = &rest[open + 1..rest.len() - 1];
        if !group.starts_with("offset 0x") && group != "deleted" {
            function = Some(match group.rfind('+') {
                Some(plus)
                    if plus > 0
                        && plus + 1 < group.len()
                        && group[plus + 1..].bytes().all(|b| b.is_ascii_digit()) =>
                {
                    &group[..plus]
                }
                _ => group,
            })
            .filter(|f| !f.is_empty());
            rest = rest[..open].trim_end();
        }
    }
    if let Some(open) = last_group(rest)
        && rest[open + 1..].starts_with("offset 0x")
    {
        rest = rest[..open].trim_end();
    }
    let path = rest;
    Some(FrameLine {
        rel_pc,
        path: path.trim(),
        function,
        build_id,
    })
}

/// Where the parenthesised group that ends `text` opens (` (…)`, its parentheses balanced,
/// after a space); `None` when `text` does not end in one.
fn last_group(text: &str) -> Option<usize> {
    if !text.ends_with(')') {
        return None;
    }
    let mut depth = 0usize;
    for (at, byte) in text.bytes().enumerate().rev() {
        match byte {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return (at > 0 && text.as_bytes()[at - 1] == b' ').then_some(at);
                }
            }
            _ => {}
        }
    }
    None
}

/// A line without logcat's prefix, when it has one: `adb logcat`'s (`MM-DD HH:MM:SS.mmm  PID
/// TID F DEBUG   : `, brief `F/DEBUG  ( PID): `) or Android Studio's copy (`YYYY-MM-DD
/// HH:MM:SS.mmm  PID-TID  DEBUG  package  A  `).
fn strip_logcat(line: &str) -> &str {
    let Some(at) = line.find("DEBUG") else {
        return line;
    };
    if at > 64 || !(line[..at].ends_with(' ') || line[..at].ends_with('/')) {
        return line;
    }
    let rest = line[at + "DEBUG".len()..].trim_start();
    let rest = match rest.strip_prefix('(') {
        Some(r) => r
            .split_once(')')
            .map_or(rest, |(_, after)| after.trim_start()),
        None => rest,
    };
    if let Some(message) = rest.strip_prefix(": ").or_else(|| rest.strip_prefix(':')) {
        return message;
    }
    // Android Studio: the package, then the priority letter, then the message.
    let Some((_package, after)) = rest.split_once(char::is_whitespace) else {
        return line;
    };
    let after = after.trim_start();
    let mut chars = after.chars();
    match (chars.next(), chars.next()) {
        (Some('V' | 'D' | 'I' | 'W' | 'E' | 'F' | 'A'), Some(' ')) => &after[2..],
        _ => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lines_with_apk_offsets_and_parentheses_in_names() {
        let f = frame_line(
            "#01 pc 000000000001d840  /apex/com.android.art/lib64/libperfetto_hprof.so (void* std::__1::__thread_proxy<std::__1::tuple<int> >(void*)+260) (BuildId: 525cc92a7dc49130157aeb74f6870364)",
        )
        .unwrap();
        assert_eq!(f.rel_pc, 0x1d840);
        assert_eq!(f.path, "/apex/com.android.art/lib64/libperfetto_hprof.so");
        assert_eq!(
            f.function,
            Some("void* std::__1::__thread_proxy<std::__1::tuple<int> >(void*)")
        );
        assert_eq!(f.build_id, Some("525cc92a7dc49130157aeb74f6870364"));
        let f = frame_line(
            "#00 pc 0000000000001139  /data/app/~~demo==/com.example.demo-1==/base.apk!libdemo.so (offset 0x8000) (crash_write_null+9) (BuildId: f66635e0)",
        )
        .unwrap();
        assert_eq!(
            (f.path, f.function, f.build_id),
            (
                "/data/app/~~demo==/com.example.demo-1==/base.apk!libdemo.so",
                Some("crash_write_null"),
                Some("f66635e0")
            )
        );
        // Paths that end in ` (deleted)`; a function at offset 0 with a `+` in its name.
        let f = frame_line(
            "#03 pc 00000000002a3c4  /memfd:jit-cache (deleted) (offset 0x2000000) (art_jni_trampoline+116)",
        )
        .unwrap();
        assert_eq!(
            (f.path, f.function, f.build_id),
            (
                "/memfd:jit-cache (deleted)",
                Some("art_jni_trampoline"),
                None
            )
        );
        let f = frame_line(
            "#04 pc 0000000000001000  /data/app/x/lib/arm64/libfoo.so (deleted) (BuildId: ab12)",
        )
        .unwrap();
        assert_eq!(
            (f.path, f.function, f.build_id),
            (
                "/data/app/x/lib/arm64/libfoo.so (deleted)",
                None,
                Some("ab12")
            )
        );
        let f =
            frame_line("#05 pc 0000000000001000  /system/lib64/libc++.so (operator++)").unwrap();
        assert_eq!(f.function, Some("operator++"));
        let f = frame_line("#02 pc 00000000000b63b0  <anonymous:7a1b000000>").unwrap();
        assert_eq!(
            (f.path, f.function, f.build_id),
            ("<anonymous:7a1b000000>", None, None)
        );
        assert!(frame_line("#xx pc 12").is_none());
        assert!(frame_line("#00 pc zz /a.so").is_none());
    }

    #[test]
    fn logcat_prefixes_are_dropped() {
        assert_eq!(
            strip_logcat("11-28 10:00:00.123  1234  1234 F DEBUG   : backtrace:"),
            "backtrace:"
        );
        assert_eq!(
            strip_logcat("F/DEBUG  ( 1234): ABI: 'arm64'"),
            "ABI: 'arm64'"
        );
        assert_eq!(strip_logcat("    #00 pc 0 /a.so"), "    #00 pc 0 /a.so");
        assert_eq!(
            strip_logcat(
                "2024-11-28 10:00:00.123  1234-1234  DEBUG                   crash_dump64                         A        #00 pc 0 /a.so"
            ),
            "       #00 pc 0 /a.so"
        );
    }

    #[test]
    fn signals_and_threads() {
        assert_eq!(
            signal_line("signal 11 (SIGSEGV), code 1 (SEGV_MAPERR), fault addr 0x0000000000000000"),
            (Some(11), Some("SIGSEGV / SEGV_MAPERR at 0x0".into()))
        );
        assert_eq!(
            signal_line("signal 6 (SIGABRT), code -1 (SI_QUEUE), fault addr --------"),
            (Some(6), Some("SIGABRT / SI_QUEUE".into()))
        );
        assert_eq!(
            thread_line("pid: 4242, tid: 4250, name: RenderThread  >>> com.example <<<"),
            Some((4242, 4250, Some("RenderThread")))
        );
        assert_eq!(
            signal_line(
                "signal 6 (SIGABRT), code 0 (SI_USER from pid 1810, uid 1000), fault addr --------"
            ),
            (Some(6), Some("SIGABRT / SI_USER".into()))
        );
    }

    #[test]
    fn sections_after_a_backtrace_and_a_second_crash_are_not_this_crashs() {
        // As logcat shows them: no blank lines; a crash loop logs the next crash after it.
        let crash = |pid: u32, abort: &str| {
            format!(
                "{BANNER}\nABI: 'arm64'\npid: {pid}, tid: {pid}, name: main  >>> app <<<\n\
                 signal 6 (SIGABRT), code -1 (SI_QUEUE), fault addr --------\n\
                 Abort message: '{abort}'\nbacktrace:\n\
                 NOTE: Function names and BuildId information is missing for some frames.\n\
                 #00 pc 0000000000001000  /system/lib64/libc.so (abort+164) (BuildId: aa)\n\
                 #01 pc 0000000000002000  /data/app/lib/arm64/libapp.so (BuildId: bb)\n\
                 deallocated by thread {pid}:\n\
                 #00 pc 0000000000003000  /system/lib64/libc.so (free+8) (BuildId: aa)\n"
            )
        };
        let text = format!("{}{}", crash(10, "it's 'quoted'"), crash(11, "second"));
        let logcat: String = text
            .lines()
            .map(|l| format!("11-28 10:00:00.123    10    10 F DEBUG   : {l}\n"))
            .collect();
        let report = parse(&logcat).unwrap();
        assert_eq!(report.threads.len(), 1);
        let frames: Vec<u64> = report.threads[0]
            .frames
            .iter()
            .map(|f| f.instruction_addr)
            .collect();
        assert_eq!(frames, [0x1000, 0x2004]);
        assert_eq!(
            report.crash_reason.as_deref(),
            Some("SIGABRT / SI_QUEUE: it's 'quoted'")
        );
        assert_eq!(report.images.len(), 2);
        assert_eq!(report.images[1].image_size, 0x2005);
    }

    #[test]
    fn not_a_tombstone() {
        assert!(!looks_like("Incident Identifier: 1\nbacktrace:\n"));
        let e = parse("*** *** *** *** *** *** *** *** *** *** *** *** *** *** *** ***\npid: 1, tid: 1, name: x\n")
            .unwrap_err();
        assert!(e.to_string().contains("no thread with a backtrace"), "{e}");
    }
}

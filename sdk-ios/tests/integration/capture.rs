//! Real crashes and a real hang, captured and symbolicated.

use std::os::unix::process::ExitStatusExt;

use symcluster_engine::SymbolicationResult;
use symcluster_engine::result::FrameStatus;

use crate::support::{crasher_source, marker_line, report, run, symbolicate_report};

/// The 1-based line of the first source line containing `text`.
fn line_of(text: &str) -> u32 {
    let source = std::fs::read_to_string(crasher_source()).unwrap();
    source.lines().position(|l| l.contains(text)).unwrap() as u32 + 1
}

fn frame(function: &str, line: u32) -> (String, String, u32) {
    (function.to_owned(), "crasher.c".to_owned(), line)
}

/// (function, file, line) of the crashed thread's first `n` symbolicated frames in the crasher.
fn top(result: &SymbolicationResult, n: usize) -> Vec<(String, String, u32)> {
    result
        .crashed_thread()
        .expect("crashed thread")
        .frames
        .iter()
        .filter(|f| f.status == FrameStatus::Symbolicated && f.image.as_deref() == Some("crasher"))
        .take(n)
        .map(|f| {
            (
                f.function.clone().unwrap_or_default(),
                f.filename.clone().unwrap_or_default(),
                f.lineno.unwrap_or(0),
            )
        })
        .collect()
}

#[test]
fn null_dereference() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "null");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGSEGV),
        "the process still dies of its signal"
    );
    let path = report(dir.path(), "crash");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(json["symcluster_sdk_report"], 1);
    assert_eq!(
        (json["kind"].as_str(), json["signal"].as_u64()),
        (Some("crash"), Some(11))
    );
    assert_eq!(json["fault_address"], "0x0");
    assert_eq!(json["metadata"]["app"], "crasher");
    assert_eq!(json["metadata"]["app_version"], "1.2 (34)");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(json["metadata"]["os_version"], release.trim());
    assert_eq!(json["metadata"]["machine"], std::env::consts::ARCH);
    assert!(json["stacktraces"][0]["registers"]["rip"].is_string());
    let result = symbolicate_report(&path);
    assert_eq!(result.crash_reason.as_deref(), Some("SIGSEGV"));
    assert_eq!(
        top(&result, 2),
        [
            frame("crash_null_deref", marker_line("null")),
            frame(
                "main",
                line_of("if (strcmp(mode, \"null\") == 0) crash_null_deref();")
            ),
        ]
    );
}

#[test]
fn abort() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "abort");
    assert_eq!(out.status.signal(), Some(libc::SIGABRT));
    let result = symbolicate_report(&report(dir.path(), "crash"));
    assert_eq!(result.crash_reason.as_deref(), Some("SIGABRT"));
    // abort() runs in libc (no debug file here): the first crasher frames are its callers.
    assert_eq!(
        top(&result, 2),
        [
            frame("call_abort", marker_line("abort")),
            frame(
                "main",
                line_of("if (strcmp(mode, \"abort\") == 0) call_abort();")
            ),
        ]
    );
}

#[test]
fn stack_overflow() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "overflow");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    let result = symbolicate_report(&report(dir.path(), "crash"));
    let frames = top(&result, 5);
    assert_eq!(frames.len(), 5);
    // Deep in the recursion: the same function all the way down.
    assert!(
        frames
            .iter()
            .all(|f| f.0 == "recurse_forever" && f.1 == "crasher.c"),
        "{frames:?}"
    );
    assert_eq!(frames[1].2, marker_line("overflow"));
}

#[test]
fn crash_on_another_thread() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "thread");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    let result = symbolicate_report(&report(dir.path(), "crash"));
    assert_eq!(
        top(&result, 2),
        [
            frame("crash_null_deref", marker_line("null")),
            frame("crashing_thread", marker_line("thread")),
        ]
    );
    // The main thread (waiting in pthread_join) was sampled too: it is listed, named, with its
    // program counter in libc's futex wait. (glibc keeps no frame pointers, so the walk cannot
    // go further on this host; on arm64 Apple platforms every frame keeps one.)
    assert_eq!(result.threads.len(), 2);
    let main = result.threads.iter().find(|t| !t.crashed).unwrap();
    assert_eq!(main.name.as_deref(), Some("crasher"));
    assert!(!main.frames.is_empty());
    assert!(
        main.frames[0]
            .image
            .as_deref()
            .is_some_and(|i| i.starts_with("libc.so")),
        "{:?}",
        main.frames[0]
    );
}

#[test]
fn hang_report_names_the_blocking_function() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "hang");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = report(dir.path(), "hang");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(json["kind"], "hang");
    assert!(json["hang_duration_ms"].as_u64().unwrap() >= 1000);
    assert!(json["samples"].as_u64().unwrap() >= 3);
    let result = symbolicate_report(&path);
    assert!(
        result
            .crash_reason
            .as_deref()
            .unwrap()
            .starts_with("App Hang: main thread blocked for")
    );
    assert_eq!(
        top(&result, 3),
        [
            frame("busy_wait_ms", marker_line("hang")),
            frame("block_main_thread", marker_line("hang-caller")),
            frame(
                "main",
                line_of("block_main_thread(strcmp(mode, \"hang\") == 0")
            ),
        ]
    );
    // The whole call tree, every node symbolicated: the samples are the root's hits, and the
    // path main → block_main_thread → busy_wait_ms carries samples at each level.
    let tree = &result.call_tree;
    assert!(!tree.is_empty());
    let total: u64 = tree
        .iter()
        .filter(|n| n.parent.is_none())
        .map(|n| n.hits)
        .sum();
    assert_eq!(total, json["samples"].as_u64().unwrap());
    let name = |i: usize| {
        tree[i]
            .frames
            .last()
            .and_then(|f| f.function.clone())
            .unwrap_or_default()
    };
    let busy = (0..tree.len())
        .filter(|&i| name(i) == "busy_wait_ms")
        .max_by_key(|&i| tree[i].hits)
        .expect("a busy_wait_ms node");
    assert_eq!(tree[busy].frames[0].lineno, Some(marker_line("hang")));
    let mut path = vec![name(busy)];
    let mut node = tree[busy].parent;
    while let Some(i) = node {
        assert!(
            tree[i].hits >= tree[busy].hits,
            "a parent has at least its child's hits"
        );
        path.push(name(i));
        node = tree[i].parent;
    }
    assert_eq!(&path[..3], ["busy_wait_ms", "block_main_thread", "main"]);
}

#[test]
fn hang_report_survives_the_app_being_killed_blocked() {
    let dir = tempfile::tempdir().unwrap();
    // Killed when dropped, also when an assertion below fails.
    let mut child = crate::support::KillOnDrop(
        std::process::Command::new(crate::support::crasher())
            .arg(dir.path())
            .arg("hang-forever")
            .spawn()
            .unwrap(),
    );
    // Blocked after ~0.2 s of run loop, reported from 0.2 s of silence: wait for the report.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(dir.path()).unwrap().flatten().any(|e| {
            e.file_name().to_string_lossy().starts_with("hang-")
                && e.file_name().to_string_lossy().ends_with(".json")
        });
        if found {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no hang report while blocked"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let result = symbolicate_report(&report(dir.path(), "hang"));
    assert_eq!(
        top(&result, 1),
        [frame("busy_wait_ms", marker_line("hang"))]
    );
    // Killed while hung: a watchdog's kill, not an out-of-memory exit, at the next launch.
    assert!(run(dir.path(), "clean").status.success());
    let ooms = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("oom-"))
        .count();
    assert_eq!(ooms, 0);
}

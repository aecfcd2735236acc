//! The crash handler's own behaviour under real crashes: chaining to the app's previous
//! handler, two threads crashing at once, and a crash inside the handler itself.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use symcluster_engine::result::FrameStatus;

use crate::support::{crasher, marker_line, output_within, report, run, symbolicate_report};

fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // The run state every launch keeps (for the out-of-memory decision).
        .filter(|n| n != symcluster_sdk::run_state::STATE_FILE)
        .collect();
    names.sort();
    names
}

#[test]
fn the_apps_previous_handler_still_runs_after_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "chain");
    // The app's handler (installed before the SDK) printed and exited with its own code.
    assert_eq!(out.status.code(), Some(42), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "previous handler ran for signal 11\n"
    );
    // And the SDK's report was on disk before it ran.
    let result = symbolicate_report(&report(dir.path(), "crash"));
    let frame = result
        .crashed_thread()
        .unwrap()
        .frames
        .iter()
        .find(|f| f.status == FrameStatus::Symbolicated)
        .unwrap();
    assert_eq!(
        (frame.function.as_deref(), frame.lineno),
        (Some("crash_null_deref"), Some(marker_line("null")))
    );
}

#[test]
fn two_threads_crashing_at_once_give_one_whole_report() {
    for _ in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let out = output_within(
            Command::new(crasher()).arg(dir.path()).arg("two-threads"),
            Duration::from_secs(30),
        )
        .expect("the process ended");
        assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
        // Exactly one report, complete JSON, and it symbolicates: the second crash waited for
        // the first one's report instead of ending the process under it.
        let result = symbolicate_report(&report(dir.path(), "crash"));
        let crashed = result.crashed_thread().unwrap();
        let names: Vec<&str> = crashed
            .frames
            .iter()
            .filter_map(|f| f.function.as_deref())
            .collect();
        assert_eq!(
            &names[..2],
            ["crash_null_deref", "crash_at_once"],
            "{names:?}"
        );
        assert_eq!(
            crashed
                .frames
                .iter()
                .find(|f| f.function.as_deref() == Some("crash_at_once"))
                .unwrap()
                .lineno,
            Some(marker_line("two-threads"))
        );
        assert_eq!(result.threads.len(), 3, "main and both crashing threads");
    }
}

#[test]
fn a_crash_inside_the_handler_ends_the_process_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    // The app replaced the SDK's alternate stack with a 4 KiB one above a guard page: the
    // handler's own frames overflow it and fault inside the handler, for real.
    let out = output_within(
        Command::new(crasher()).arg(dir.path()).arg("tiny-altstack"),
        Duration::from_secs(30),
    )
    .expect("a crash inside the handler must not hang the app");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    // No report claims to be one: only the empty file opened at install is left, and the next
    // launch removes it.
    let left = files(dir.path());
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with("crash-") && left[0].ends_with(".inprogress"));
    assert_eq!(
        std::fs::metadata(dir.path().join(&left[0])).unwrap().len(),
        0
    );
    symcluster_sdk::send::clean_stale(dir.path());
    assert!(files(dir.path()).is_empty());
}

/// A report larger than its buffer (200 threads each 100 calls deep, a 128 KiB buffer set with
/// `symcluster_sdk_set_report_bytes`) is still one whole JSON document: the crashed thread
/// first, symbolicated, as many other threads as fit, and `"truncated": true`. Before, the
/// buffer filled mid-token and the report was never closed, so nothing could read it.
#[test]
fn a_report_larger_than_its_buffer_is_whole_and_marked_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let out = output_within(
        Command::new(crasher()).arg(dir.path()).arg("many-threads"),
        Duration::from_secs(60),
    )
    .expect("the crasher hung");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    let path = report(dir.path(), "crash");
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() <= 128 * 1024, "{} bytes", bytes.len());
    let json: serde_json::Value = serde_json::from_slice(&bytes).expect("a whole JSON report");
    assert_eq!(json["truncated"], true);
    let threads = json["stacktraces"].as_array().unwrap();
    assert_eq!(threads[0]["is_requesting"], true);
    // Some of the 200 waiting threads, not all: each is about 2 KiB of its 50 sampled frames.
    assert!(
        (2..201).contains(&threads.len()),
        "{} threads in the report",
        threads.len()
    );
    assert!(threads[1..].iter().all(|t| t["is_requesting"] == false));
    let result = symbolicate_report(&path);
    let top = result
        .crashed_thread()
        .expect("the crashed thread")
        .frames
        .iter()
        .find(|f| f.status == FrameStatus::Symbolicated && f.image.as_deref() == Some("crasher"))
        .expect("a frame of the crasher");
    assert_eq!(
        (top.function.as_deref(), top.lineno),
        (Some("crash_null_deref"), Some(marker_line("null")))
    );
}

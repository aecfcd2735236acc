//! `symctl` as a user runs it: the real binary, real files, exit codes and output.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn demo(rel: &str) -> PathBuf {
    repo().join("examples/ios-demo").join(rel)
}

fn symctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_symctl"))
        .args(args)
        .output()
        .expect("run symctl")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn readme_example_prints_the_symbolicated_crash() {
    let dsym = demo("DemoApp.dSYM");
    let report = demo("DemoApp.crash");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dsym.to_str().unwrap(),
        "--format",
        "apple",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("0x0000000104f4c08c demo::Checkout::run(int) + 28 (checkout.cpp:23)"),
        "{text}"
    );
}

#[test]
fn json_output_follows_the_contract() {
    let dsym = demo("DemoApp.dSYM");
    let report = demo("DemoApp.ips");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dsym.to_str().unwrap(),
        "--format",
        "json",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "complete");
    let frame = &json["threads"][0]["frames"][0];
    assert_eq!(frame["instruction_addr"], "0x104f4c008");
    assert_eq!(frame["image_addr"], "0x104f48000");
    assert_eq!(frame["image"], "DemoApp");
    assert_eq!(frame["function"], "crash_write_null");
    assert_eq!(frame["lineno"], 23);
    assert_eq!(frame["status"], "symbolicated");
    assert_eq!(json["modules"][0]["status"], "found");
    assert_eq!(
        json["modules"][0]["debug_id"],
        "4c4c443b-5555-3144-a126-3cc30cf88fdb"
    );
}

#[test]
fn missing_debug_files_still_exit_zero() {
    let empty = tempfile::tempdir().unwrap();
    let report = demo("DemoApp.crash");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        empty.path().to_str().unwrap(),
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["threads"][0]["frames"][0]["status"], "missing");
    assert_eq!(json["modules"][0]["status"], "missing");
}

#[test]
fn unreadable_report_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "just some notes\nnothing to see\n").unwrap();
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dir.path().to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("symctl: "), "{err}");
    assert!(err.contains("not a crash report"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_report_file_fails_with_one_line() {
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        ".",
        "/nonexistent/report.crash",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot read /nonexistent/report.crash"),
        "{err}"
    );
}

//! Bad input gets a precise error or status, never a panic.

use std::path::PathBuf;

use proptest::prelude::*;
use symcluster_engine::result::{FrameStatus, ModuleStatus};
use symcluster_engine::{ReportError, parse_report};

use crate::support::{crashed, fixture, run};

fn error(input: &[u8]) -> String {
    match parse_report(input) {
        Ok(report) => panic!("expected an error, got a {:?} report", report.format),
        Err(e) => e.to_string(),
    }
}

#[test]
fn empty_and_blank_input() {
    assert!(matches!(parse_report(b""), Err(ReportError::Empty)));
    assert!(matches!(parse_report(b"  \n\t\n"), Err(ReportError::Empty)));
}

#[test]
fn binary_garbage_is_not_utf8() {
    assert_eq!(
        error(&[0xcf, 0xfa, 0xed, 0xfe, 0xff, 0x00]),
        "not a crash report: not UTF-8 text (invalid byte at offset 0)"
    );
}

#[test]
fn prose_is_not_a_crash_report() {
    let e = error(b"Dear team,\nthe app crashed again.\n");
    assert!(
        e.starts_with("not a crash report: neither JSON nor an Apple crash report"),
        "{e}"
    );
    assert!(e.contains("\"Dear team,\""), "{e}");
}

#[test]
fn json_of_the_wrong_shape() {
    assert_eq!(
        error(b"[1, 2, 3]"),
        "JSON is not a supported crash report (top level is an array, expected an object)"
    );
    let e = error(br#"{"hello": "world"}"#);
    assert!(
        e.starts_with("JSON is not a supported crash report (top-level keys [hello]"),
        "{e}"
    );
}

#[test]
fn truncated_json() {
    let data = std::fs::read(fixture("kscrash/Example-Reports/Abort.json")).unwrap();
    let e = error(&data[..data.len() / 2]);
    assert!(e.starts_with("invalid JSON: EOF while parsing"), "{e}");
}

#[test]
fn truncated_ips_body() {
    let e = error(b"{\"bug_type\":\"309\"}\n{\"usedImages\": [");
    assert!(
        e.starts_with("invalid JSON: ips body: EOF while parsing"),
        "{e}"
    );
}

#[test]
fn ips_frame_with_an_image_index_out_of_range() {
    let e = error(
        br#"{"bug_type":"309"}
{"usedImages": [{"base": 4096, "size": 100, "uuid": "54039061-a983-3323-a49d-837a894d667f"}],
 "threads": [{"triggered": true, "frames": [{"imageIndex": 7, "imageOffset": 12}]}]}"#,
    );
    assert_eq!(
        e,
        "malformed apple-ips report: `threads[0].frames[0].imageIndex` is 7, but there are only \
         1 images"
    );
}

#[test]
fn wrong_types_in_known_formats() {
    assert_eq!(
        error(br#"{"binary_images": [], "crash": {"threads": 5}}"#),
        "malformed kscrash report: `crash.threads` is not an array"
    );
    assert_eq!(
        error(br#"{"debug_meta": {"images": {}}, "exception": {"values": []}}"#),
        "malformed sentry report: `debug_meta.images` is not an array"
    );
    assert_eq!(
        error(br#"{"exception": {"values": [{"stacktrace": {"frames": "x"}}]}}"#),
        "malformed sentry report: thread 0: `stacktrace.frames` is not an array"
    );
    assert_eq!(
        error(br#"{"modules": [], "stacktraces": []}"#),
        "malformed symbolicator report: `stacktraces` is empty"
    );
    assert_eq!(
        error(br#"{"usedImages": {}, "threads": []}"#),
        "malformed apple-ips report: `usedImages` is not an array"
    );
}

/// Copies the CrashLibiOS dSYM with its DWARF cut in half into a fresh directory.
fn truncated_dsym() -> (tempfile::TempDir, PathBuf) {
    let src = fixture(
        "crashprobe/release/dSYMs/3CD3E3CC-281E-3AF3-84EB-CDE6D56F0559.dSYM/Contents/Resources/DWARF/CrashLibiOS",
    );
    let data = std::fs::read(src).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("CrashLibiOS");
    // Keep the Mach-O header and load commands (so the UUID is readable), cut the DWARF.
    std::fs::write(&path, &data[..data.len() / 3]).unwrap();
    (dir, path)
}

#[test]
fn truncated_dsym_gives_malformed_module_and_frames() {
    let (dir, _) = truncated_dsym();
    let result = run(
        &fixture("crashprobe/release/arm64/Call abort().json"),
        &[
            dir.path().to_owned(),
            fixture("crashprobe/release/dSYMs/54039061-A983-3323-A49D-837A894D667F.dSYM"),
        ],
    );
    let module = result
        .modules
        .iter()
        .find(|m| m.debug_id.as_deref() == Some("3cd3e3cc-281e-3af3-84eb-cde6d56f0559"))
        .unwrap();
    // Either the container or its DWARF is unreadable; both are `malformed`, never a panic.
    let thread = crashed(&result);
    let lib_frames: Vec<_> = thread
        .frames
        .iter()
        .filter(|f| f.image.as_deref() == Some("CrashLibiOS"))
        .collect();
    assert!(!lib_frames.is_empty());
    match module.status {
        ModuleStatus::Malformed => {
            assert!(
                module
                    .error
                    .as_deref()
                    .unwrap()
                    .contains("malformed debug file")
            );
            assert!(
                lib_frames
                    .iter()
                    .all(|f| f.status == FrameStatus::Malformed)
            );
        }
        ModuleStatus::Missing => {
            // The header itself did not parse: the file is reported as unreadable at scan time.
            assert!(lib_frames.iter().all(|f| f.status == FrameStatus::Missing));
        }
        other => panic!("truncated dSYM gave module status {other:?}"),
    }
    // The other image's frames are unaffected.
    assert!(thread.frames.iter().any(|f| f.function.as_deref()
        == Some("-[CRLDetailViewController doCrash]")
        && f.status == FrameStatus::Symbolicated));
}

#[test]
fn garbage_with_a_macho_magic_is_listed_as_unreadable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("Broken");
    let mut data = vec![0xcf, 0xfa, 0xed, 0xfe];
    data.extend(std::iter::repeat_n(0xab, 64));
    std::fs::write(&path, data).unwrap();
    let index = symcluster_engine::debug_files::DebugFileIndex::scan(&[dir.path()]).unwrap();
    assert!(index.is_empty());
    assert_eq!(index.unreadable().len(), 1);
    assert_eq!(index.unreadable()[0].path, path);
}

#[test]
fn missing_debug_files_path_is_an_error() {
    let e = symcluster_engine::debug_files::DebugFileIndex::scan(&["/nonexistent/dsyms"])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("debug files: cannot read /nonexistent/dsyms: "),
        "{e}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_report(&data);
    }

    #[test]
    fn arbitrary_json_reports_never_panic(
        images in proptest::collection::vec((any::<u32>(), any::<u16>()), 0..4),
        frames in proptest::collection::vec((any::<u64>(), proptest::option::of(0usize..6)), 0..8),
        faulting in proptest::option::of(0u64..3),
    ) {
        // An .ips report with random bases, sizes, addresses and indices.
        let images: Vec<String> = images.iter().map(|(base, size)| format!(
            r#"{{"base": {base}, "size": {size}, "uuid": "54039061-a983-3323-a49d-837a894d667f"}}"#
        )).collect();
        let frames: Vec<String> = frames.iter().map(|(off, idx)| match idx {
            Some(i) => format!(r#"{{"imageIndex": {i}, "imageOffset": {off}}}"#),
            None => format!(r#"{{"imageOffset": {off}}}"#),
        }).collect();
        let faulting = faulting.map(|f| format!(r#""faultingThread": {f},"#)).unwrap_or_default();
        let ips = format!(
            "{{\"bug_type\":\"309\"}}\n{{{faulting} \"usedImages\": [{}], \"threads\": [{{\"frames\": [{}]}}]}}",
            images.join(","), frames.join(",")
        );
        if let Ok(report) = parse_report(ips.as_bytes()) {
            let sources = symcluster_engine::LocalSymCaches::default();
            let _ = symcluster_engine::symbolicate(&report, &sources);
        }
    }
}

/// A key given twice in one object of a Sentry event: the last one counts, as in any JSON
/// reader that keeps one value per key (the typed readers refuse duplicates; the event is then
/// read through `serde_json::Value` once).
#[test]
fn a_sentry_event_with_a_key_given_twice_reads_the_last_one() {
    let event = br#"{
        "exception": {"values": [{"type": "EXC_BAD_ACCESS", "stacktrace": {"frames": [
            {"instruction_addr": "0x1", "instruction_addr": "0x1010"}]}}]},
        "debug_meta": {"images": [
            {"image_addr": "0x9000", "image_addr": "0x1000", "image_size": 4096,
             "uuid": "54039061-a983-3323-a49d-837a894d667f", "name": "/a/App"}]}
    }"#;
    let report = symcluster_engine::parse_report(event).unwrap();
    assert_eq!(report.images.len(), 1);
    assert_eq!(report.images[0].image_addr, 0x1000);
    assert_eq!(report.threads[0].frames[0].instruction_addr, 0x1010);
}

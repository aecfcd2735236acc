//! Android protobuf tombstones: a real one from Sentry's Android SDK tests
//! (`examples/third-party/sentry-java`, arm64, no debug files: structure, addresses and
//! statuses), and the Linux demo's real crash as a tombstone whose library is loaded from the
//! APK (`base.apk!libdemo.so`, `examples/linux-demo/make_tombstone.py`), matched to its debug
//! file by build id and symbolicated.

use std::io::Read;

use symcluster_engine::model::ReportFormat;
use symcluster_engine::result::{FrameStatus, ModuleStatus};
use symcluster_engine::{LocalSymCaches, parse_report, symbolicate};

use crate::support::{crashed, repo, summary};

fn sentry_tombstone() -> Vec<u8> {
    let gz =
        std::fs::read(repo().join("examples/third-party/sentry-java/tombstone.pb.gz")).unwrap();
    let mut data = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut data)
        .unwrap();
    data
}

#[test]
fn a_real_tombstone_is_read_thread_by_thread() {
    let data = sentry_tombstone();
    assert_eq!(
        symcluster_engine::reports::detect_format(&data),
        Some(ReportFormat::Tombstone)
    );
    let report = parse_report(&data).unwrap();
    assert_eq!(report.format, ReportFormat::Tombstone);
    assert_eq!(report.arch, symbolic_common::Arch::Arm64);
    assert_eq!(report.signal, Some(11));
    assert_eq!(report.threads.len(), 62);
    let thread = report.threads.iter().find(|t| t.crashed).unwrap();
    assert_eq!(
        (thread.id, thread.name.as_deref(), thread.frames.len()),
        (21891, Some("samples.android"), 69)
    );
    // Frame 0 as given; a caller's pc given back its 4 bytes (libunwindstack took them off).
    assert_eq!(thread.frames[0].instruction_addr, 0x7546e46a7c);
    assert_eq!(thread.frames[1].instruction_addr, 0x7692c69504);
    assert_eq!(thread.ip_register, Some(0x7546e46a7c));

    let sources = LocalSymCaches::default();
    let result = symbolicate(&report, &sources);
    assert_eq!(
        result.crash_reason.as_deref(),
        Some("SIGSEGV / SEGV_MAPERR at 0x0")
    );
    let f = &crashed(&result).frames;
    assert_eq!(f[1].lookup_addr.0, 0x7692c69500);
    assert_eq!(
        (f[0].image.as_deref(), f[0].status, f[0].function.as_deref()),
        (
            Some("libnative-sample.so"),
            FrameStatus::Missing,
            Some("Java_io_sentry_samples_android_NativeSample_crash")
        )
    );
    let lib = result
        .modules
        .iter()
        .find(|m| {
            m.code_file
                .as_deref()
                .is_some_and(|c| c.ends_with("/libnative-sample.so"))
        })
        .unwrap();
    assert_eq!(
        (
            lib.debug_id.as_deref(),
            lib.image_addr.0,
            lib.image_size,
            lib.status
        ),
        (
            Some("1f53f264-a4cb-5da9-aeaf-6a4c899d517b"),
            0x7546e46000,
            0x5000,
            ModuleStatus::Missing
        )
    );
}

#[test]
fn a_library_loaded_from_the_apk_is_matched_by_build_id() {
    let data = std::fs::read(repo().join("examples/linux-demo/demo-app-tombstone.pb")).unwrap();
    let report = parse_report(&data).unwrap();
    let sources =
        LocalSymCaches::scan(&[repo().join("examples/linux-demo/demo-app.debug")]).unwrap();
    let result = symbolicate(&report, &sources);
    let f = &crashed(&result).frames;
    let got: Vec<_> = f.iter().map(summary).collect();
    assert_eq!(got, crate::support::DEMO_CHAIN);
    assert!(
        f.iter()
            .all(|f| f.image.as_deref() == Some("base.apk!libdemo.so"))
    );
    // The call instruction itself, as in the minidump: 0x1153 into the ELF.
    assert_eq!(f[1].lookup_addr.0 - f[1].image_addr.unwrap().0, 0x1153);
    let module = &result.modules[0];
    assert_eq!(
        (
            module.code_file.as_deref(),
            module.debug_id.as_deref(),
            module.status
        ),
        (
            Some("/data/app/~~demo==/com.example.demo-1==/base.apk!libdemo.so"),
            Some("e03566f6-988e-a224-5037-26179d47ad6c"),
            ModuleStatus::Found
        )
    );
}

#[test]
fn damaged_tombstones_are_refused() {
    let data = sentry_tombstone();
    // Cut inside a message: not a tombstone any more, and not text.
    let e = parse_report(&data[..data.len() / 3])
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("not a crash report: not UTF-8 text"), "{e}");
}

#[test]
fn a_text_tombstone_and_its_logcat_lines_are_the_same_crash() {
    let text =
        std::fs::read_to_string(repo().join("examples/linux-demo/demo-app-tombstone.txt")).unwrap();
    // As `adb logcat` shows it: debuggerd logs every line under the tag DEBUG.
    let logcat: String = text
        .lines()
        .map(|l| format!("11-20 10:00:00.123 15999 15999 F DEBUG   : {l}\n"))
        .collect();
    let sources =
        LocalSymCaches::scan(&[repo().join("examples/linux-demo/demo-app.debug")]).unwrap();
    for data in [text.as_bytes(), logcat.as_bytes()] {
        assert_eq!(
            symcluster_engine::reports::detect_format(data),
            Some(ReportFormat::Tombstone)
        );
        let report = parse_report(data).unwrap();
        assert_eq!(report.arch, symbolic_common::Arch::Amd64);
        assert_eq!(report.signal, Some(11));
        let result = symbolicate(&report, &sources);
        assert_eq!(
            result.crash_reason.as_deref(),
            Some("SIGSEGV / SEGV_MAPERR at 0x0")
        );
        let f = &crashed(&result).frames;
        let got: Vec<_> = f.iter().map(summary).collect();
        assert_eq!(got, crate::support::DEMO_CHAIN);
        // Addresses are the ELF's own, as printed: the library's load address is not given.
        assert_eq!(f[0].instruction_addr.0, 0x1130);
        assert_eq!(f[1].lookup_addr.0, 0x1153);
        let module = &result.modules[0];
        assert_eq!(
            (
                module.code_file.as_deref(),
                module.debug_id.as_deref(),
                module.image_addr.0,
                module.status
            ),
            (
                Some("/data/app/~~demo==/com.example.demo-1==/base.apk!libdemo.so"),
                Some("e03566f6-988e-a224-5037-26179d47ad6c"),
                0,
                ModuleStatus::Found
            )
        );
    }
}

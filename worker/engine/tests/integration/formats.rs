//! Every report format reads into the one model: checked against the fixtures' ground truth
//! (`shared/fixtures/apple-crash-reports/README.md`, `shared/fixtures/kscrash/README.md`).

use symbolic_common::Arch;
use symcluster_engine::model::ReportFormat;
use symcluster_engine::parse_report;
use symcluster_engine::reports::detect_format;

use crate::support::fixture;

fn read(rel: &str) -> symcluster_engine::NativeReport {
    let data = std::fs::read(fixture(rel)).unwrap();
    parse_report(&data).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn apple_text_bruno() {
    let report = read("apple-crash-reports/fixtures/bruno.txt");
    assert_eq!(report.format, ReportFormat::AppleText);
    assert_eq!(report.arch, Arch::Amd64);
    assert_eq!(report.crash_reason.as_deref(), Some("SIGSEGV"));
    assert_eq!(report.signal, Some(11));
    assert_eq!(report.threads.len(), 55);
    let crashed: Vec<_> = report.threads.iter().filter(|t| t.crashed).collect();
    assert_eq!(crashed.len(), 1);
    assert_eq!(crashed[0].id, 5);
    assert_eq!(crashed[0].ip_register, Some(0x1090a0132));
    assert_eq!(crashed[0].frames[0].instruction_addr, 0x1090a0132);
    assert_eq!(crashed[0].frames[0].function, None);
    assert_eq!(report.images.len(), 272);
    // The text's end address is inclusive: the real size is one more than end - start.
    assert_eq!(report.images[0].image_size, 108_797_952);
    assert_eq!(
        report.images[0].debug_id.unwrap().to_string(),
        "2d903291-397d-3d14-bfca-52c7fb8c5e00"
    );
}

#[test]
fn apple_text_handcrafted_edge_cases() {
    let report = read("apple-crash-reports/fixtures/handcrafted.txt");
    // `Thread 1 Crashed:` wins over the header's `Crashed Thread: 5`.
    let crashed = report.threads.iter().find(|t| t.crashed).unwrap();
    assert_eq!(crashed.id, 1);
    assert_eq!(crashed.name.as_deref(), Some("Test Thread Name"));
    let t0 = &report.threads[0];
    assert_eq!(t0.frames[11].function.as_deref(), Some("a_function_here"));
    assert_eq!(t0.frames[13].function.as_deref(), Some("main"));
    assert_eq!(report.images.len(), 5);
    assert_eq!(
        report.images[0].name(),
        Some("YetAnotherMac"),
        "the `+` prefix is not part of the name"
    );
}

#[test]
fn apple_text_fragment_without_header() {
    let report = read("apple-crash-reports/fixtures/spaces.txt");
    assert_eq!(report.threads.len(), 1);
    assert_eq!(report.threads[0].frames.len(), 17);
    assert_eq!(report.images.len(), 17);
    assert_eq!(report.images[0].name(), Some("App Namespace"));
    assert_eq!(report.images[0].arch, Arch::Arm64);
}

#[test]
fn kscrash_examples_match_their_text_renderings() {
    // (report, crash reason, crashed-thread frame count, first Crash-Tester frame and address)
    let cases = [
        (
            "Abort",
            "EXC_CRASH (SIGABRT)",
            19,
            "-[Crasher doAbort]",
            0x668a8,
        ),
        (
            "BadPointer",
            "EXC_BAD_ACCESS (SIGSEGV)",
            16,
            "-[Crasher dereferenceBadPointer]",
            0x5b720,
        ),
        (
            "StackOverflow",
            "EXC_BAD_ACCESS (SIGSEGV)",
            50,
            "-[Crasher causeStackOverflow]",
            0x61898,
        ),
        ("Zombie", "EXC_BAD_ACCESS (SIGSEGV)", 11, "main", 0xc47b8),
    ];
    for (name, reason, count, function, addr) in cases {
        let report = read(&format!("kscrash/Example-Reports/{name}.json"));
        assert_eq!(report.format, ReportFormat::KsCrash);
        assert_eq!(report.arch, Arch::ArmV7, "{name}");
        assert_eq!(report.crash_reason.as_deref(), Some(reason), "{name}");
        assert_eq!(report.images.len(), 123, "{name}");
        let crashed = report.threads.iter().find(|t| t.crashed).unwrap();
        assert_eq!(crashed.id, 0, "{name}");
        assert_eq!(crashed.frames.len(), count, "{name}");
        let first_app = crashed
            .frames
            .iter()
            .find(|f| {
                let image = report
                    .images
                    .iter()
                    .filter(|i| i.image_addr <= f.instruction_addr)
                    .max_by_key(|i| i.image_addr)
                    .unwrap();
                image.name() == Some("Crash-Tester")
            })
            .unwrap();
        assert_eq!(first_app.function.as_deref(), Some(function), "{name}");
        assert_eq!(first_app.instruction_addr, addr, "{name}");
    }
}

#[test]
fn kscrash_3_x_cpp_exception_report() {
    let report = read("kscrash/KSCrashRecordingTests-Resources/raw.json");
    assert_eq!(report.arch, Arch::X86);
    assert_eq!(report.crash_reason.as_deref(), Some("EXC_CRASH (SIGABRT)"));
    let crashed = report.threads.iter().find(|t| t.crashed).unwrap();
    assert_eq!(
        crashed.frames[0].function.as_deref(),
        Some("_ZN10MyCPPClass16throwAnExceptionEv")
    );
    assert_eq!(report.images.len(), 220);
}

#[test]
fn sentry_event_reverses_frames_and_merges_the_crashed_thread() {
    let report = read("crashprobe/release/arm64/Call abort().json");
    assert_eq!(report.format, ReportFormat::SentryEvent);
    assert_eq!(report.signal, Some(6));
    assert_eq!(
        report.threads.len(),
        11,
        "the crashed thread is not listed twice"
    );
    let crashed = report.threads.iter().find(|t| t.crashed).unwrap();
    assert_eq!(crashed.id, 0);
    // Innermost first: the exception's last frame comes first.
    assert_eq!(crashed.frames.last().unwrap().instruction_addr, 0x805315b8);
    assert_eq!(crashed.ip_register, Some(0x80643014));
}

#[test]
fn detection_is_by_content() {
    let cases = [
        (
            "apple-crash-reports/fixtures/bruno.txt",
            ReportFormat::AppleText,
        ),
        ("kscrash/Example-Reports/Abort.json", ReportFormat::KsCrash),
        (
            "crashprobe/release/arm64/Swift.json",
            ReportFormat::SentryEvent,
        ),
    ];
    for (rel, format) in cases {
        assert_eq!(
            detect_format(&std::fs::read(fixture(rel)).unwrap()),
            Some(format),
            "{rel}"
        );
    }
    assert_eq!(detect_format(b"hello world"), None);
}

#[test]
fn symbolicator_request() {
    let request = br#"{
        "signal": 11,
        "modules": [{"type": "macho", "debug_id": "54039061-A983-3323-A49D-837A894D667F",
                     "code_file": "/var/App/CrashProbeiOS", "image_addr": "0xc8000",
                     "image_size": 65536, "arch": "arm64"}],
        "stacktraces": [
            {"frames": [{"instruction_addr": "0xcf9b0"}]},
            {"is_requesting": true, "registers": {"pc": "0xd1988"},
             "frames": [{"instruction_addr": "0xd1988"}, {"instruction_addr": "0xcf9b0"}]}
        ]
    }"#;
    let report = parse_report(request).unwrap();
    assert_eq!(report.format, ReportFormat::SymbolicatorRequest);
    assert_eq!(report.signal, Some(11));
    assert!(!report.threads[0].crashed);
    assert!(report.threads[1].crashed);
    assert_eq!(report.threads[1].frames[0].instruction_addr, 0xd1988);
    assert_eq!(report.images[0].arch, Arch::Arm64);
}

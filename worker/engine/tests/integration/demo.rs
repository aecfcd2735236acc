//! The project's own example (`examples/ios-demo`, built by its `generate.sh` from C and C++
//! sources): the same crash in every report format gives the frames `expected.md` derives from
//! the source, with the inlined call expanded and the C++ name demangled.

use symcluster_engine::result::{FrameResult, FrameStatus, ModuleStatus, SymbolicationResult};
use symcluster_engine::{parse_report, render};

use crate::support::{crashed, demo, run, summary};

const DEBUG_ID: &str = "4c4c443b-5555-3144-a126-3cc30cf88fdb";

/// The first five frames of the crashed thread, as `expected.md` derives them from the source
/// markers in `examples/ios-demo/src` (shared by the Mach-O and ELF builds).
fn assert_source_frames(frames: &[FrameResult]) {
    let got: Vec<_> = frames.iter().map(|f| (f.index, summary(f))).collect();
    let run_int = Some("demo::Checkout::run(int)");
    assert_eq!(
        got[..5],
        [
            (
                0,
                (Some("crash_write_null"), Some("crash.c"), Some(23), false)
            ),
            (1, (Some("validate_total"), Some("crash.c"), Some(33), true)),
            (1, (Some("process_order"), Some("crash.c"), Some(41), false)),
            (2, (run_int, Some("checkout.cpp"), Some(23), false)),
            (3, (Some("main"), Some("checkout.cpp"), Some(35), false)),
        ]
    );
}

fn assert_expected_frames(result: &SymbolicationResult) {
    assert_eq!(
        result.crash_reason.as_deref(),
        Some("EXC_BAD_ACCESS (SIGSEGV)")
    );
    let thread = crashed(result);
    assert_eq!(thread.name.as_deref(), Some("com.apple.main-thread"));
    let f = &thread.frames;
    assert_source_frames(f);
    // Frame 0 is the faulting PC; the others are return addresses looked up at the `bl`.
    assert_eq!(
        (f[0].instruction_addr.0, f[0].lookup_addr.0),
        (0x104f4c008, 0x104f4c008)
    );
    assert_eq!(
        (f[1].instruction_addr.0, f[1].lookup_addr.0),
        (0x104f4c040, 0x104f4c03c)
    );
    assert_eq!(f[1].instruction_addr, f[2].instruction_addr);
    assert_eq!(f[3].symbol.as_deref(), Some("_ZN4demo8Checkout3runEi"));
    assert_eq!(
        f[0].abs_path.as_deref(),
        Some("/Users/dev/DemoApp/src/crash.c")
    );
    assert_eq!(f[0].sym_addr.map(|a| a.0), Some(0x104f4c000));
    // libdyld has no dSYM: it keeps the report's name where the report has one.
    assert_eq!(f[5].status, FrameStatus::Missing);
    assert_eq!(f[5].image.as_deref(), Some("libdyld.dylib"));
    let module = result
        .modules
        .iter()
        .find(|m| m.debug_id.as_deref() == Some(DEBUG_ID))
        .unwrap();
    assert_eq!(module.status, ModuleStatus::Found);
    assert_eq!(module.image_addr.0, 0x104f48000);
    assert_eq!(module.image_size, 0x8000);
}

#[test]
fn apple_text_report() {
    assert_expected_frames(&run(&demo("DemoApp.crash"), &[demo("DemoApp.dSYM")]));
}

/// The macOS 12+/iOS 15+ text layout (`DemoApp-macos12.crash`, the same crash as
/// `DemoApp.crash`): images without an arch, dashed UUIDs, `Thread 0 Crashed::  Dispatch
/// queue: …` headers.
#[test]
fn macos12_text_report() {
    let result = run(&demo("DemoApp-macos12.crash"), &[demo("DemoApp.dSYM")]);
    assert_expected_frames(&result);
    let thread = crashed(&result);
    assert_eq!(thread.name.as_deref(), Some("com.apple.main-thread"));
    // Every image of the report takes its arch from `Code Type:`.
    let data = std::fs::read(demo("DemoApp-macos12.crash")).unwrap();
    let every_image = symcluster_engine::symbolicate(
        &symcluster_engine::parse_report_with(&data, symcluster_engine::Modules::All).unwrap(),
        &symcluster_engine::LocalSymCaches::scan(&[demo("DemoApp.dSYM")]).unwrap(),
    );
    assert!(
        every_image.modules.iter().all(|m| m.arch == "arm64"),
        "{:?}",
        every_image.modules
    );
    assert_eq!(every_image.modules.len(), 4);

    // Rendered back in its own layout.
    let report = parse_report(&data).unwrap();
    let text = render::apple(&data, &report, &result).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let header = lines
        .iter()
        .position(|l| *l == "Thread 0 Crashed::  Dispatch queue: com.apple.main-thread")
        .expect("the thread header as it was");
    assert_eq!(
        lines[header + 1],
        "0   DemoApp                       \t0x104f4c008 crash_write_null + 8 (crash.c:23)"
    );
    assert!(text.contains("DemoApp (*) <4c4c443b-5555-3144-a126-3cc30cf88fdb>"));
}

#[test]
fn apple_ips_report() {
    assert_expected_frames(&run(&demo("DemoApp.ips"), &[demo("DemoApp.dSYM")]));
}

#[test]
fn sentry_event() {
    assert_expected_frames(&run(&demo("DemoApp-sentry.json"), &[demo("DemoApp.dSYM")]));
}

#[test]
fn fat_dsym_slice_is_chosen_by_uuid_not_position() {
    // The x86_64 slice comes first in DemoAppFat.dSYM; the report names the arm64 UUID.
    assert_expected_frames(&run(&demo("DemoApp.ips"), &[demo("DemoAppFat.dSYM")]));
}

#[test]
fn without_debug_files_frames_are_missing_and_nothing_is_lost() {
    let result = run(&demo("DemoApp.crash"), &[]);
    let thread = crashed(&result);
    assert_eq!(
        thread.frames.len(),
        5,
        "one frame per raw frame, none dropped"
    );
    assert!(
        thread.frames[..4]
            .iter()
            .all(|f| f.status == FrameStatus::Missing)
    );
    let module = result
        .modules
        .iter()
        .find(|m| m.debug_id.as_deref() == Some(DEBUG_ID))
        .unwrap();
    assert_eq!(module.status, ModuleStatus::Missing);
}

#[test]
fn apple_text_rendering_rewrites_frames_like_xcode() {
    let data = std::fs::read(demo("DemoApp.crash")).unwrap();
    let report = parse_report(&data).unwrap();
    let result = run(&demo("DemoApp.crash"), &[demo("DemoApp.dSYM")]);
    let text = render::apple(&data, &report, &result).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()) && l.contains("0x0000000104f4c"))
        .collect();
    assert_eq!(
        lines,
        [
            "0   DemoApp                       \t0x0000000104f4c008 crash_write_null + 8 (crash.c:23)",
            "1   DemoApp                       \t0x0000000104f4c040 validate_total (crash.c:33)",
            "1   DemoApp                       \t0x0000000104f4c040 process_order + 32 (crash.c:41)",
            "2   DemoApp                       \t0x0000000104f4c08c demo::Checkout::run(int) + 28 (checkout.cpp:23)",
            "3   DemoApp                       \t0x0000000104f4c0d4 main + 28 (checkout.cpp:35)",
        ]
    );
    // Everything else is the report as it was.
    let original = String::from_utf8(data).unwrap();
    assert_eq!(text.lines().count(), original.lines().count() + 1);
    assert!(text.contains("Binary Images:"));
}

#[test]
fn ips_rendering_adds_xcode_fields() {
    let data = std::fs::read(demo("DemoApp.ips")).unwrap();
    let report = parse_report(&data).unwrap();
    let result = run(&demo("DemoApp.ips"), &[demo("DemoApp.dSYM")]);
    let text = render::apple(&data, &report, &result).unwrap();
    let (header, body) = text.split_once('\n').unwrap();
    assert_eq!(
        header,
        std::str::from_utf8(&data).unwrap().lines().next().unwrap()
    );
    let body: serde_json::Value = serde_json::from_str(body).unwrap();
    let frames = body["threads"][0]["frames"].as_array().unwrap();
    assert_eq!(frames.len(), 5 + 1, "the inlined call adds one frame");
    assert_eq!(
        frames[1],
        serde_json::json!({"imageOffset": 16448, "imageIndex": 0, "inline": true,
            "symbol": "validate_total", "sourceFile": "crash.c", "sourceLine": 33})
    );
    assert_eq!(
        frames[3],
        serde_json::json!({"imageOffset": 16524, "imageIndex": 0,
            "symbol": "demo::Checkout::run(int)", "symbolLocation": 28,
            "sourceFile": "checkout.cpp", "sourceLine": 23})
    );
    // The rendered report reads back as the same report.
    assert_eq!(
        parse_report(text.as_bytes()).unwrap().threads.len(),
        report.threads.len()
    );
}

#[test]
fn apple_rendering_refuses_other_formats() {
    let data = std::fs::read(demo("DemoApp-sentry.json")).unwrap();
    let report = parse_report(&data).unwrap();
    let result = run(&demo("DemoApp-sentry.json"), &[demo("DemoApp.dSYM")]);
    let e = render::apple(&data, &report, &result)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "--format apple needs an Apple .crash or .ips report; this is a sentry report"
    );
}

/// The Linux build of the same sources (`examples/linux-demo`): an ELF debug file matched by the
/// debug id derived from its GNU build id; x86 return addresses step back one byte.
#[test]
fn elf_debug_file_from_a_symbolicator_request() {
    let result = run(
        &crate::support::repo().join("examples/linux-demo/demo-app-request.json"),
        &[crate::support::repo().join("examples/linux-demo")],
    );
    let f = &crashed(&result).frames;
    assert_source_frames(f);
    assert_eq!(
        (f[1].instruction_addr.0, f[1].lookup_addr.0),
        (0x55d4a0c01154, 0x55d4a0c01153)
    );
    assert_eq!(
        result.modules[0].debug_id.as_deref(),
        Some("e03566f6-988e-a224-5037-26179d47ad6c")
    );
    assert_eq!(result.modules[0].status, ModuleStatus::Found);
}

#[test]
fn elf_module_with_only_a_code_id_is_matched_by_build_id() {
    let path = crate::support::repo().join("examples/linux-demo/demo-app-request.json");
    let mut request: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    request["modules"][0]
        .as_object_mut()
        .unwrap()
        .remove("debug_id");
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("request.json");
    std::fs::write(&report, serde_json::to_vec(&request).unwrap()).unwrap();
    let result = run(
        &report,
        &[crate::support::repo().join("examples/linux-demo")],
    );
    assert_eq!(
        result.modules[0].debug_id.as_deref(),
        Some("e03566f6-988e-a224-5037-26179d47ad6c")
    );
    assert_eq!(
        crashed(&result).frames[0].function.as_deref(),
        Some("crash_write_null")
    );
}

//! CrashProbe (Sentry events from real iPhone crashes, with their dSYMs): exact frames.
//! Ground truth: `shared/fixtures/crashprobe/README.md` (upstream `test_crashprobe.py`).

use symcluster_engine::result::{FrameStatus, ModuleStatus};

use crate::support::{crashed, fixture, frames_in, run, summary};

const APP: &[&str] = &["CrashProbeiOS", "CrashLibiOS"];

#[test]
fn release_abort_resolves_both_in_app_frames_at_the_call_site() {
    let result = run(
        &fixture("crashprobe/release/arm64/Call abort().json"),
        &[fixture("crashprobe/release/dSYMs")],
    );
    assert_eq!(result.crash_reason.as_deref(), Some("EXC_CRASH (SIGABRT)"));
    let thread = crashed(&result);
    let app = frames_in(thread, APP);
    assert_eq!(
        summary(app[0]),
        (
            Some("-[CRLCrashAbort crash]"),
            Some("CRLCrashAbort.m"),
            Some(37),
            false
        )
    );
    // 0x20cd00 is a return address: looked up at 0x20ccfc, as the README works out by hand.
    assert_eq!(app[0].instruction_addr.0, 0x20cd00);
    assert_eq!(app[0].lookup_addr.0, 0x20ccfc);
    assert_eq!(
        summary(app[1]),
        (
            Some("-[CRLDetailViewController doCrash]"),
            Some("CRLDetailViewController.m"),
            Some(53),
            false
        )
    );
    // System frames have no dSYM: they keep the report's own name and say so.
    let libsystem = thread
        .frames
        .iter()
        .find(|f| f.image.as_deref() == Some("libsystem_c.dylib"))
        .unwrap();
    assert_eq!(libsystem.status, FrameStatus::Missing);
    assert!(libsystem.function.is_some());
}

#[test]
fn release_swift_expands_the_inlined_call_innermost_first() {
    let result = run(
        &fixture("crashprobe/release/arm64/Swift.json"),
        &[fixture("crashprobe/release/dSYMs")],
    );
    let thread = crashed(&result);
    let f = &thread.frames;
    assert_eq!(
        summary(&f[0]),
        (Some("crash"), Some("CRLCrashSwift.swift"), Some(36), true)
    );
    // The outer level of the same raw frame: the @objc thunk, named from the symbol table. Its
    // pre-Swift-4 mangling is beyond today's Swift demangler, so it stays mangled.
    assert_eq!(f[1].index, 0);
    assert_eq!(f[1].instruction_addr, f[0].instruction_addr);
    assert_eq!(
        f[1].symbol.as_deref(),
        Some("_TToFC11CrashLibiOS13CRLCrashSwift5crashfT_T_")
    );
    assert!(!f[1].inlined);
    assert_eq!(f[2].index, 1);
    assert_eq!(
        f[2].function.as_deref(),
        Some("-[CRLDetailViewController doCrash]")
    );
}

#[test]
fn release_released_object_block_and_method_lines_are_arm64_specific() {
    let result = run(
        &fixture("crashprobe/release/arm64/Message a released object.json"),
        &[fixture("crashprobe/release/dSYMs")],
    );
    let app = frames_in(crashed(&result), APP);
    assert_eq!(
        summary(app[0]),
        (
            Some("__31-[CRLCrashReleasedObject crash]_block_invoke"),
            Some("CRLCrashReleasedObject.m"),
            Some(51),
            false
        )
    );
    assert_eq!(
        summary(app[1]),
        (
            Some("-[CRLCrashReleasedObject crash]"),
            Some("CRLCrashReleasedObject.m"),
            Some(49),
            false
        )
    );
}

#[test]
fn debug_sigill_frame_zero_is_looked_up_at_the_exact_pc() {
    // SIGILL with pc == frame address: frame 0 is not a return address.
    let result = run(
        &fixture("crashprobe/debug/arm64/Execute a privileged instruction.json"),
        &[fixture("crashprobe/debug/dSYMs")],
    );
    let app = frames_in(crashed(&result), APP);
    assert_eq!(app[0].lookup_addr, app[0].instruction_addr);
    assert_eq!(
        summary(app[0]),
        (
            Some("-[CRLCrashPrivInst crash]"),
            Some("CRLCrashPrivInst.m"),
            Some(52),
            false
        )
    );
}

#[test]
fn debug_nx_page_has_an_empty_crashed_thread() {
    let result = run(
        &fixture("crashprobe/debug/arm64/Jump into an NX page.json"),
        &[fixture("crashprobe/debug/dSYMs")],
    );
    assert!(crashed(&result).frames.is_empty());
    assert_eq!(result.threads.iter().filter(|t| t.crashed).count(), 1);
}

#[test]
fn module_statuses_cover_found_missing_and_unused() {
    let data = std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap();
    let report =
        symcluster_engine::parse_report_with(&data, symcluster_engine::Modules::All).unwrap();
    let sources =
        symcluster_engine::LocalSymCaches::scan(&[fixture("crashprobe/release/dSYMs")]).unwrap();
    let result = symcluster_engine::symbolicate(&report, &sources);
    let status = |name: &str| {
        result
            .modules
            .iter()
            .find(|m| m.code_file.as_deref().is_some_and(|p| p.ends_with(name)))
            .unwrap_or_else(|| panic!("no module {name}"))
            .status
    };
    assert_eq!(status("/CrashLibiOS"), ModuleStatus::Found);
    // In a frame, no dSYM given.
    assert_eq!(status("/libsystem_c.dylib"), ModuleStatus::Missing);
    // In no frame: not looked for, whether its dSYM is among the debug files or not.
    assert_eq!(status("/libswiftCore.dylib"), ModuleStatus::Unused);
    assert_eq!(status("/CoreAudio"), ModuleStatus::Unused);
    assert_eq!(result.modules.len(), 327);
    assert_eq!(
        result
            .modules
            .iter()
            .filter(|m| m.status != ModuleStatus::Unused)
            .count(),
        15,
        "the 15 images of the event's frames (as loadtest/src/images.rs counts them)"
    );
    let app = result
        .modules
        .iter()
        .find(|m| m.debug_id.as_deref() == Some("54039061-a983-3323-a49d-837a894d667f"))
        .unwrap();
    assert_eq!(app.image_addr.0, 0xc8000);
    assert_eq!(app.arch, "arm64");
}

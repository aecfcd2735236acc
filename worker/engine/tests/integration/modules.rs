//! Which images a result lists (`modules`): the ones a frame is in, or every image on request
//! (`../shared/conformance/CONTRACT.md`).

use symcluster_engine::result::{FrameStatus, ModuleStatus, SymbolicationResult};
use symcluster_engine::{
    LocalSymCaches, Modules, parse_report_with, symbolicate, symbolicate_owned,
};

use crate::support::demo;

const DEMO_APP: &str = "4c4c443b-5555-3144-a126-3cc30cf88fdb";
const LIBDYLD: &str = "0c0ac2cf-a179-36dc-89dd-d97c77997448";

/// The demo app's Sentry event with 300 images: its own two that frames are in (DemoApp,
/// libdyld), then 298 that no frame is in (paths written with `\/`, as iOS SDKs write them),
/// and one more frame, outermost, in no image at all.
fn event_with_300_images() -> Vec<u8> {
    let mut event: serde_json::Value =
        serde_json::from_slice(&std::fs::read(demo("DemoApp-sentry.json")).unwrap()).unwrap();
    let images = event["debug_meta"]["images"].as_array_mut().unwrap();
    images.truncate(2);
    assert_eq!(images[0]["debug_id"], DEMO_APP);
    assert_eq!(images[1]["debug_id"], LIBDYLD);
    for i in 0..298u64 {
        images.push(serde_json::json!({
            "type": "macho",
            "debug_id": format!("{i:08x}-0000-4000-8000-000000000000"),
            "code_file": format!("/System/Library/Frameworks/F{i}.framework/F{i}"),
            "image_addr": format!("{:#x}", 0x2_0000_0000u64 + i * 0x10000),
            "image_size": 0x8000,
            "arch": "arm64e",
        }));
    }
    let frames = event["exception"]["values"][0]["stacktrace"]["frames"]
        .as_array_mut()
        .unwrap();
    frames.insert(0, serde_json::json!({"instruction_addr": "0x10"}));
    serde_json::to_string(&event)
        .unwrap()
        .replace('/', "\\/")
        .into_bytes()
}

fn run(report: &[u8], modules: Modules) -> SymbolicationResult {
    let parsed = parse_report_with(report, modules).unwrap();
    let sources = LocalSymCaches::scan(&[demo("DemoApp.dSYM")]).unwrap();
    let result = symbolicate(&parsed, &sources);
    assert_eq!(
        symbolicate_owned(parsed, &sources),
        result,
        "the owned and borrowed paths agree"
    );
    result
}

#[test]
fn a_result_lists_the_images_its_frames_are_in() {
    let result = run(&event_with_300_images(), Modules::Referenced);
    let listed: Vec<(&str, ModuleStatus)> = result
        .modules
        .iter()
        .map(|m| (m.debug_id.as_deref().unwrap(), m.status))
        .collect();
    assert_eq!(
        listed,
        [
            (DEMO_APP, ModuleStatus::Found),
            (LIBDYLD, ModuleStatus::Missing)
        ]
    );
    assert_eq!(result.unreferenced_modules, 298);
    assert_eq!(
        result.modules[0].code_file.as_deref(),
        Some(
            "/private/var/containers/Bundle/Application/0C1D2E3F-4A5B-4C6D-8E7F-9A0B1C2D3E4F/DemoApp.app/DemoApp"
        )
    );
    assert_eq!(result.modules[1].arch, "arm64e");

    // The frame in no image keeps its status and adds no module.
    let crashed = result.crashed_thread().unwrap();
    let outermost = crashed.frames.last().unwrap();
    assert_eq!(outermost.instruction_addr.0, 0x10);
    assert_eq!(outermost.status, FrameStatus::UnknownImage);
    assert_eq!(outermost.image, None);
    assert_eq!(
        crashed.frames[0].function.as_deref(),
        Some("crash_write_null")
    );

    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["unreferenced_modules"], 298);
    assert_eq!(json["modules"].as_array().unwrap().len(), 2);
}

#[test]
fn every_image_is_listed_on_request_the_unreferenced_ones_unused() {
    let report = event_with_300_images();
    let all = run(&report, Modules::All);
    let referenced = run(&report, Modules::Referenced);
    assert_eq!(all.modules.len(), 300);
    assert_eq!(all.unreferenced_modules, 0);
    assert_eq!(
        all.modules
            .iter()
            .filter(|m| m.status == ModuleStatus::Unused)
            .count(),
        298
    );
    assert_eq!(all.modules[..2], referenced.modules[..]);
    assert_eq!(all.threads, referenced.threads);
    let unused = &all.modules[2 + 150];
    assert_eq!(
        (
            unused.code_file.as_deref(),
            unused.debug_id.as_deref(),
            &*unused.arch,
            unused.image_addr.0,
            unused.image_size,
            unused.status,
        ),
        (
            Some("/System/Library/Frameworks/F150.framework/F150"),
            Some("00000096-0000-4000-8000-000000000000"),
            "arm64e",
            0x2_0000_0000 + 150 * 0x10000,
            0x8000,
            ModuleStatus::Unused,
        )
    );
}

/// Every reader, not only the Sentry event's lazy one: an Apple text report lists 4 images,
/// and the demo crash's frames are in 2 of them.
#[test]
fn every_format_lists_referenced_images_by_default() {
    let data = std::fs::read(demo("DemoApp.crash")).unwrap();
    let referenced = run(&data, Modules::Referenced);
    let all = run(&data, Modules::All);
    assert_eq!(all.modules.len(), 4);
    let used: Vec<_> = all
        .modules
        .iter()
        .filter(|m| m.status != ModuleStatus::Unused)
        .cloned()
        .collect();
    assert_eq!(referenced.modules, used);
    assert_eq!(referenced.unreferenced_modules, 4 - used.len());
    assert!(!used.is_empty() && used.len() < 4);
}

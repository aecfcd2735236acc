//! The Apple backend's platform-neutral parts against real Apple files: the Mach-O reader the
//! dyld image list uses, on the CrashProbe dSYMs (`../shared/fixtures/crashprobe`, Xcode-built,
//! MIT), checked against what KSCrash itself reported on the device for the same images; and a
//! report in the SDK's format with `macho` modules, symbolicated by the engine.

use std::path::{Path, PathBuf};

use symcluster_engine::result::FrameStatus;
use symcluster_engine::{LocalSymCaches, parse_report, symbolicate};
use symcluster_sdk::images::{Image, ImageId, modules_json, uuid_string};
use symcluster_sdk::platform::apple::macho;
use symcluster_sdk::writer::Writer;

/// `../shared/fixtures/crashprobe` beside the repository (or under `SYMCLUSTER_FIXTURES`).
fn crashprobe() -> PathBuf {
    std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"))
        .join("crashprobe")
}

/// Every DWARF file under `build/dSYMs` (`debug` or `release`).
fn dwarf_files(build: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dsym in std::fs::read_dir(crashprobe().join(build).join("dSYMs")).unwrap() {
        let dwarf = dsym.unwrap().path().join("Contents/Resources/DWARF");
        for file in std::fs::read_dir(dwarf).unwrap() {
            files.push(file.unwrap().path());
        }
    }
    files.sort();
    files
}

fn report(build: &str, name: &str) -> serde_json::Value {
    let path = crashprobe().join(build).join("arm64").join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `"0x1000ac000"` → 0x1000ac000.
fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn parse_dwarf_file(path: &Path) -> macho::MachImage {
    macho::parse(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn mach_o_headers_match_what_kscrash_reported_on_the_device() {
    for build in ["debug", "release"] {
        let on_device = report(build, "Dereference a NULL pointer.json");
        let images = on_device["debug_meta"]["images"].as_array().unwrap();
        let files = dwarf_files(build);
        assert!(files.len() >= 2, "{build}: {files:?}");
        for file in files {
            let parsed = parse_dwarf_file(&file);
            let uuid = uuid_string(&parsed.uuid.expect("every Xcode image has LC_UUID"));
            let reported = images
                .iter()
                .find(|i| i["uuid"].as_str().map(str::to_lowercase) == Some(uuid.clone()))
                .unwrap_or_else(|| panic!("{}: UUID {uuid} not in the report", file.display()));
            // KSCrash computed the image size on the device from the same load commands.
            assert_eq!(
                Some(parsed.text_vmsize),
                reported["image_size"].as_u64(),
                "{}",
                file.display()
            );
            assert_eq!(parsed.arch, "arm64", "{}", file.display());
            let is_executable = file.ends_with("CrashProbeiOS");
            assert_eq!(
                parsed.text_vmaddr,
                if is_executable { 0x1_0000_0000 } else { 0 },
                "{}",
                file.display()
            );
        }
    }
}

#[test]
fn the_demo_dsym_has_the_uuid_and_size_of_its_crash_report() {
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/ios-demo");
    let parsed = parse_dwarf_file(&demo.join("DemoApp.dSYM/Contents/Resources/DWARF/DemoApp"));
    let crash = std::fs::read_to_string(demo.join("DemoApp.crash")).unwrap();
    // "0x104f48000 - 0x104f4ffff DemoApp arm64  <4c4c443b…> /…/DemoApp"
    let line = crash
        .lines()
        .skip_while(|l| !l.starts_with("Binary Images:"))
        .find(|l| l.contains(" DemoApp "))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(parsed.text_vmsize, hex(fields[2]) + 1 - hex(fields[0]));
    let uuid: String = parsed
        .uuid
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(format!("<{uuid}>"), fields[5]);
    assert_eq!(parsed.arch, fields[4]);
}

/// An SDK report (the format `crash_report::write` produces) for the device crash "Dereference
/// a NULL pointer": modules built from the dSYMs' headers as the Apple backend builds them from
/// dyld's, at the load addresses of the device, and the device's crashing stack.
#[test]
fn an_sdk_report_with_macho_modules_symbolicates_to_the_crashing_method() {
    let on_device = report("release", "Dereference a NULL pointer.json");
    let device_images = on_device["debug_meta"]["images"].as_array().unwrap();
    let images: Vec<Image> = dwarf_files("release")
        .iter()
        .map(|file| {
            let parsed = parse_dwarf_file(file);
            let uuid = parsed.uuid.unwrap();
            let device = device_images
                .iter()
                .find(|i| i["uuid"].as_str().map(str::to_lowercase) == Some(uuid_string(&uuid)))
                .unwrap();
            let image_addr = hex(device["image_addr"].as_str().unwrap());
            Image {
                path: device["name"].as_str().unwrap().to_owned(),
                image_addr,
                image_size: parsed.text_vmsize,
                id: ImageId::MachUuid(uuid),
                arch: parsed.arch,
                code_ranges: vec![(image_addr, image_addr + parsed.text_vmsize)],
            }
        })
        .collect();
    let stack = &on_device["exception"]["values"][0]["stacktrace"];
    let frames: Vec<u64> = stack["frames"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|f| hex(f["instruction_addr"].as_str().unwrap()))
        .collect();

    let mut buf = vec![0u8; 1 << 20];
    let mut w = Writer::new(&mut buf);
    w.raw(b"{");
    w.key("symcluster_sdk_report", true);
    w.dec(1);
    w.key("kind", false);
    w.string(b"crash");
    w.key("signal", false);
    w.dec(11);
    w.key("crash_reason", false);
    w.string(b"EXC_BAD_ACCESS (SIGSEGV)");
    w.key("modules", false);
    w.raw(&modules_json(&images));
    w.key("stacktraces", false);
    w.raw(b"[{");
    w.key("thread_id", true);
    w.dec(259);
    w.key("is_requesting", false);
    w.raw(b"true");
    w.key("registers", false);
    w.raw(b"{");
    w.key("pc", true);
    w.hex(frames[0]);
    w.raw(b"}");
    w.key("frames", false);
    w.frames(&frames);
    w.raw(b"}]}");

    let report = parse_report(w.as_bytes()).unwrap();
    let caches = LocalSymCaches::scan(&[crashprobe().join("release/dSYMs")]).unwrap();
    let result = symbolicate(&report, &caches);
    assert_eq!(
        result.crash_reason.as_deref(),
        Some("EXC_BAD_ACCESS (SIGSEGV)")
    );
    let top: Vec<(String, String, u32)> = result
        .crashed_thread()
        .unwrap()
        .frames
        .iter()
        .filter(|f| f.status == FrameStatus::Symbolicated)
        .filter(|f| {
            f.filename
                .as_deref()
                .is_some_and(|n| !n.ends_with("main.m"))
        })
        .take(2)
        .map(|f| {
            (
                f.function.clone().unwrap(),
                f.filename
                    .clone()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_owned(),
                f.lineno.unwrap(),
            )
        })
        .collect();
    assert_eq!(
        top,
        [
            ("-[CRLCrashNULL crash]".into(), "CRLCrashNULL.m".into(), 37),
            (
                "-[CRLDetailViewController doCrash]".into(),
                "CRLDetailViewController.m".into(),
                53
            ),
        ]
    );
}

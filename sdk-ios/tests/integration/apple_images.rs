//! The Apple backend's platform-neutral parts against real Apple files: the Mach-O reader the
//! dyld image list uses, on the CrashProbe dSYMs (`../shared/fixtures/crashprobe`, Xcode-built,
//! MIT), checked against what KSCrash itself reported on the device for the same images; and a
//! report in the SDK's format with `macho` modules, symbolicated by the engine.

use std::path::{Path, PathBuf};

use symcluster_engine::result::FrameStatus;
use symcluster_engine::{LocalSymCaches, parse_report, symbolicate};
use symcluster_sdk::crash_report::{
    CrashInfo, ThreadStack, write_head, write_tail, write_thread_json,
};
use symcluster_sdk::images::{Image, ImageId, modules_json, uuid_string};
use symcluster_sdk::platform::apple::{exception, macho};
use symcluster_sdk::unwind::Registers;
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

/// An SDK report for the device crash "Dereference a NULL pointer", written by the pieces
/// `crash_report::write` is made of: modules built from the dSYMs' headers as the Apple backend
/// builds them from dyld's, at the load addresses of the device, the Mach exception decoded as
/// the exception server decodes it, and the device's crashing stack.
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

    // The crash as the Mach exception server would describe it, written by the SDK's own
    // report writer.
    let (note, signal, fault_address) = exception::describe(1, 1, 0, None); // EXC_BAD_ACCESS
    let crash = CrashInfo {
        signal,
        signal_name: exception::darwin_signal::name(signal),
        mach_exception: Some(note),
        fault_address,
        thread: 259u32,
        registers: Registers::default(),
        skip: None,
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut w = Writer::new(&mut buf);
    write_head(
        &mut w,
        &crash,
        b"",
        1_488_000_000_000,
        b"{}",
        &modules_json(&images),
    );
    let stack = ThreadStack {
        id: 259,
        name: b"com.apple.main-thread",
        crashed: true,
        registers: None,
        frames: &frames,
    };
    write_thread_json(&mut w, &stack, true);
    write_tail(&mut w);
    let json: serde_json::Value = serde_json::from_slice(w.as_bytes()).unwrap();
    assert_eq!(json["mach_exception"]["code_name"], "KERN_INVALID_ADDRESS");
    assert_eq!(json["signal"], 11);

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

//! Minidumps: the image list, then a stack walk with the CFI of the Linux demo's debug file
//! (examples/linux-demo, the dump's own app) and a symbolication against it: a mutated dump
//! must give an error, never a panic or a hang.
#![no_main]

use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use symcluster_engine::minidump::{self, UnwindInfo, UnwindTable};
use symcluster_engine::{LocalSymCaches, Modules, symbolicate};

const DEBUG_FILE: &[u8] = include_bytes!("../../examples/linux-demo/demo-app.debug");

static TABLE: LazyLock<UnwindTable> = LazyLock::new(|| {
    let id = "e03566f6-988e-a224-5037-26179d47ad6c".parse().unwrap();
    let info = UnwindInfo::from_object_file(DEBUG_FILE, id).expect("the demo's CFI");
    UnwindTable::from([(id, Arc::new(info))])
});

static SOURCES: LazyLock<LocalSymCaches> = LazyLock::new(|| {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/linux-demo/demo-app.debug");
    LocalSymCaches::scan(&[dir]).expect("the demo's debug file")
});

fuzz_target!(|data: &[u8]| {
    let _ = minidump::read_images(data);
    if let Ok(report) = minidump::stackwalk(data, &TABLE, Modules::All) {
        let _ = symbolicate(&report, &*SOURCES);
    }
});

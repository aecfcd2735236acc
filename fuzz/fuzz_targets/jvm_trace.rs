//! The Java trace reader (printStackTrace text, logcat, Sentry events) and a retrace of
//! whatever it reads through the demo's real ProGuard mapping (examples/android-demo).
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use symcluster_engine::jvm::{JvmMapping, parse_trace, render, retrace};

static MAPPING: LazyLock<JvmMapping> = LazyLock::new(|| {
    JvmMapping::from_mapping_file(include_bytes!("../../examples/android-demo/mapping.txt"))
        .expect("the demo's mapping")
});

fuzz_target!(|data: &[u8]| {
    if let Ok(trace) = parse_trace(data) {
        let result = retrace(&trace, &MAPPING, None);
        let _ = render::java_text(&result);
    }
});

//! ProGuard/R8 mapping files: the conversion to a prepared mapping and a retrace through it
//! (the demo's obfuscated trace), and the prepared form read back from arbitrary bytes (a
//! damaged file on the worker's disk).
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use symcluster_engine::jvm::{JvmMapping, JvmTrace, parse_trace, retrace};

static TRACE: LazyLock<JvmTrace> = LazyLock::new(|| {
    parse_trace(include_bytes!("../../examples/android-demo/obfuscated-trace.txt"))
        .expect("the demo's trace")
});

fuzz_target!(|data: &[u8]| {
    if let Ok(mapping) = JvmMapping::from_mapping_file(data) {
        let _ = retrace(&TRACE, &mapping, None);
    }
    if let Ok(prepared) = JvmMapping::from_prepared(data.to_vec()) {
        let _ = retrace(&TRACE, &prepared, None);
    }
});

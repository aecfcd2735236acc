//! The source map loader (plain, indexed, RAM bundle, Hermes, Metro function maps) and a
//! restore of a small stack through whatever loads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symcluster_engine::js::{JsSourceMap, parse_stack, restore};

const STACK: &[u8] = b"TypeError: boom\n    at crash (index.android.bundle:1:105)\n    \
    at onPress (index.android.bundle:2:40)\n    at 7.js:1:12\n    at seg-1_3.js:4:2\n    \
    at global (address at index.android.bundle:1:9)\n";

fuzz_target!(|data: &[u8]| {
    let Ok(map) = JsSourceMap::parse(data, Some("index.android.bundle")) else {
        return;
    };
    if let Some(main) = map.segment(0) {
        let _ = main.lookup(0, 0);
        let _ = main.lookup(1, 105);
    }
    if let Ok(stack) = parse_stack(STACK, 1) {
        let _ = restore(&stack, &map);
    }
});

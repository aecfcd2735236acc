//! The JS stack parser (V8, JSC and Hermes text stacks, Hermes crash JSON), 0- and 1-based.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symcluster_engine::js::parse_stack;

fuzz_target!(|data: &[u8]| {
    let _ = parse_stack(data, 0);
    let _ = parse_stack(data, 1);
});

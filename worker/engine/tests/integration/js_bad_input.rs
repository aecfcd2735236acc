//! Bad JavaScript input: a clear error or status, never a panic.

use symcluster_engine::js::{JsFrameStatus, JsSourceMap, SourceMapError, parse_stack, restore};

use crate::support::fixture;

fn map_error(data: &[u8]) -> SourceMapError {
    JsSourceMap::parse(data, None).expect_err("expected a map error")
}

#[test]
fn truncated_map() {
    let data = std::fs::read(fixture("js/metro-symbolicate/__fixtures__/testfile.js.map")).unwrap();
    let e = map_error(&data[..data.len() / 2]);
    assert!(matches!(e, SourceMapError::InvalidJson(_)), "{e}");
    assert!(
        e.to_string()
            .starts_with("invalid source map JSON: EOF while parsing"),
        "{e}"
    );
}

#[test]
fn wrong_json() {
    assert_eq!(
        map_error(b"[1, 2]").to_string(),
        "not a source map: the top level is not a JSON object"
    );
    assert_eq!(
        map_error(br#"{"version": 3, "sources": []}"#).to_string(),
        "not a source map: neither `mappings` nor `sections` present"
    );
    assert!(matches!(map_error(b""), SourceMapError::InvalidJson(_)));
}

#[test]
fn out_of_range_indices_in_mappings() {
    // A segment pointing at source 5 and name 9 of a map with one source and no names.
    let e = map_error(br#"{"version": 3, "sources": ["a.js"], "names": [], "mappings": "AKAAS"}"#);
    assert!(matches!(e, SourceMapError::Malformed(_)), "{e}");
    assert!(e.to_string().starts_with("malformed source map: "), "{e}");
}

#[test]
fn bad_vlq() {
    let e = map_error(br#"{"version": 3, "sources": ["a.js"], "names": [], "mappings": "!!!!"}"#);
    assert!(matches!(e, SourceMapError::Malformed(_)), "{e}");
}

#[test]
fn empty_bundle_is_accepted_and_changes_nothing() {
    let map = std::fs::read(fixture("js/metro-symbolicate/__fixtures__/testfile.js.map")).unwrap();
    let with_empty = JsSourceMap::parse(&map, Some("")).unwrap();
    let stack = parse_stack(b"throws6@thrower.min.js:1:162", 1).unwrap();
    let f = &restore(&stack, &with_empty).frames[0];
    assert_eq!(
        (f.filename.as_deref(), f.lineno),
        (Some("thrower.js"), Some(18))
    );
}

#[test]
fn hermes_function_id_out_of_range_is_missing_mapping() {
    let map = std::fs::read(fixture(
        "js/metro-symbolicate/__fixtures__/hermes.js.hbc.map",
    ))
    .unwrap();
    let map = JsSourceMap::parse(&map, None).unwrap();
    let stack = parse_stack(
        br#"{"callstack": [{"CJSModuleOffset": 0, "FunctionID": 99999999, "ByteCodeOffset": 1, "SourceURL": "x"},
                          {"CJSModuleOffset": 7, "FunctionID": 1, "ByteCodeOffset": 1, "SourceURL": "x"}]}"#,
        1,
    )
    .unwrap();
    let result = restore(&stack, &map);
    assert!(
        result
            .frames
            .iter()
            .all(|f| f.status == JsFrameStatus::MissingMapping)
    );
}

#[test]
fn bad_stacks() {
    let err = |data: &[u8]| parse_stack(data, 1).unwrap_err().to_string();
    assert_eq!(err(b""), "the stack trace is empty");
    assert_eq!(err(b"\n \n"), "the stack trace is empty");
    assert_eq!(
        err(b"nothing to see here\n"),
        "no stack frame found (expected lines like `at fn (file:line:col)` or `fn@file:line:col`)"
    );
    assert_eq!(
        err(br#"{"callstack": [{"FunctionID": 1}]}"#),
        "malformed Hermes crash JSON: callstack[0] needs `FunctionID`, `ByteCodeOffset` and \
         `CJSModuleOffset` or `SegmentID` as non-negative integers, or `NativeCode: true`"
    );
    assert_eq!(
        err(br#"{"frames": []}"#),
        "malformed Hermes crash JSON: no `callstack` array (expected {\"callstack\": [...]})"
    );
    assert!(err(br#"{"callstack": [ {"#).starts_with("malformed Hermes crash JSON: invalid JSON"));
    assert_eq!(
        err(&[0xff, 0xfe]),
        "the stack trace is not UTF-8 text (invalid byte at offset 0)"
    );
}

mod never_panics {
    use proptest::prelude::*;
    use symcluster_engine::js::{JsSourceMap, parse_stack, restore};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_maps(mappings in "[A-Za-z0-9+/,;!]{0,64}", sources in 0usize..3, names in 0usize..3) {
            let sources: Vec<String> = (0..sources).map(|i| format!("\"s{i}.js\"")).collect();
            let names: Vec<String> = (0..names).map(|i| format!("\"n{i}\"")).collect();
            let map = format!(
                r#"{{"version":3,"sources":[{}],"names":[{}],"mappings":"{mappings}"}}"#,
                sources.join(","), names.join(",")
            );
            if let Ok(map) = JsSourceMap::parse(map.as_bytes(), None) {
                let stack = parse_stack(b"f@a.js:1:1\ng@a.js:2:5\nh@a.js:1:4294967295", 1).unwrap();
                let _ = restore(&stack, &map);
            }
        }

        #[test]
        fn arbitrary_stacks(text in "\\PC{0,200}") {
            let _ = parse_stack(text.as_bytes(), 1);
        }
    }
}

//! Bad JavaScript input: a clear error or status, never a panic.

use symcluster_engine::js::{JsFrameStatus, JsSourceMap, SourceMapError, parse_stack, restore};

use crate::support::{fixture, repo};

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

// ECMA-426 rules: one test per rule, each with its exact message. The maps are small and our
// own; the cases follow those the TC39 source map test suite calls invalid.

/// The message of a map refused as malformed (without `malformed source map: `).
fn malformed(map: &str) -> String {
    match JsSourceMap::parse(map.as_bytes(), None) {
        Err(SourceMapError::Malformed(message)) => message,
        Err(other) => panic!("{map}: expected a malformed map error, got {other:?}"),
        Ok(_) => panic!("{map}: accepted"),
    }
}

fn accepted(map: &str) -> JsSourceMap {
    JsSourceMap::parse(map.as_bytes(), None).unwrap_or_else(|e| panic!("{map}: {e}"))
}

/// A plain map over two sources and two names with these mappings.
fn mapped(mappings: &str) -> String {
    format!(
        r#"{{"version":3,"sources":["a.js","b.js"],"names":["x","y"],"mappings":"{mappings}"}}"#
    )
}

/// The message for these mappings of [`mapped`].
fn mappings_error(mappings: &str) -> String {
    malformed(&mapped(mappings))
}

/// An index map of these sections (JSON text of the array's items).
fn indexed(sections: &[&str]) -> String {
    format!(r#"{{"version":3,"sections":[{}]}}"#, sections.join(","))
}

/// A section at (line, column) with a one-source map of these mappings.
fn section(line: u32, column: u32, mappings: &str) -> String {
    format!(
        r#"{{"offset":{{"line":{line},"column":{column}}},
            "map":{{"version":3,"sources":["s.js"],"names":[],"mappings":"{mappings}"}}}}"#
    )
}

#[test]
fn version_must_be_the_number_3() {
    assert_eq!(
        malformed(r#"{"sources":[],"mappings":""}"#),
        "version is missing (must be the number 3)"
    );
    assert_eq!(
        malformed(r#"{"version":"3","sources":[],"mappings":""}"#),
        r#"version must be the number 3, not "3""#
    );
    assert_eq!(
        malformed(r#"{"version":2,"sources":[],"mappings":""}"#),
        "version must be the number 3, not 2"
    );
    assert_eq!(
        malformed(r#"{"version":4,"sections":[]}"#),
        "version must be the number 3, not 4"
    );
    assert_eq!(
        malformed(
            r#"{"version":3,"sections":[{"offset":{"line":0,"column":0},
                      "map":{"version":"three","sources":[],"mappings":""}}]}"#
        ),
        r#"sections[0].map.version must be the number 3, not "three""#
    );
    accepted(r#"{"version":3,"sources":[],"mappings":""}"#);
}

#[test]
fn file_and_source_root_must_be_strings() {
    assert_eq!(
        malformed(r#"{"version":3,"file":17,"sources":[],"mappings":""}"#),
        "file is not a string"
    );
    assert_eq!(
        malformed(r#"{"version":3,"file":["out.js"],"sources":[],"mappings":""}"#),
        "file is not a string"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sourceRoot":{},"sources":[],"mappings":""}"#),
        "sourceRoot is not a string"
    );
    assert_eq!(
        malformed(r#"{"version":3,"file":false,"sections":[]}"#),
        "file is not a string"
    );
    // `null` reads as absent.
    accepted(r#"{"version":3,"file":null,"sourceRoot":null,"sources":[],"mappings":""}"#);
}

#[test]
fn sources_must_be_an_array_of_strings_and_nulls() {
    assert_eq!(
        malformed(r#"{"version":3,"names":[],"mappings":""}"#),
        "sources is missing (must be an array of strings and nulls)"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":"a.js","mappings":""}"#),
        "sources is not an array"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":{"a.js":0},"mappings":""}"#),
        "sources is not an array"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":["a.js",null,7],"mappings":""}"#),
        "sources[2] is not a string or null"
    );
}

#[test]
fn sources_content_must_be_an_array_of_strings_and_nulls() {
    assert_eq!(
        malformed(r#"{"version":3,"sources":["a.js"],"sourcesContent":"x","mappings":""}"#),
        "sourcesContent is not an array"
    );
    assert_eq!(
        malformed(
            r#"{"version":3,"sources":["a.js","b.js"],"sourcesContent":[null,false],"mappings":""}"#
        ),
        "sourcesContent[1] is not a string or null"
    );
    // The same in a section (read from the parsed tree rather than the raw text).
    assert_eq!(
        malformed(&indexed(&[r#"{"offset":{"line":0,"column":0},
                "map":{"version":3,"sources":["a.js"],"sourcesContent":[{}],"mappings":""}}"#])),
        "sections[0].map.sourcesContent[0] is not a string or null"
    );
}

#[test]
fn names_must_be_an_array_of_strings() {
    assert_eq!(
        malformed(r#"{"version":3,"sources":[],"names":"x","mappings":""}"#),
        "names is not an array"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":[],"names":["x",null],"mappings":""}"#),
        "names[1] is not a string"
    );
    assert_eq!(
        malformed(&indexed(&[r#"{"offset":{"line":0,"column":0},
                "map":{"version":3,"sources":[],"names":[42],"mappings":""}}"#])),
        "sections[0].map.names[0] is not a string"
    );
    // Optional.
    accepted(r#"{"version":3,"sources":["a.js"],"mappings":"AAAA"}"#);
}

#[test]
fn ignore_lists_must_be_arrays_of_source_indices() {
    let map =
        |list: &str| format!(r#"{{"version":3,"sources":["a.js","b.js"],"mappings":"",{list}}}"#);
    assert_eq!(
        malformed(&map(r#""ignoreList":1"#)),
        "ignoreList is not an array"
    );
    assert_eq!(
        malformed(&map(r#""ignoreList":["1"]"#)),
        r#"ignoreList[0] is not a non-negative integer: "1""#
    );
    assert_eq!(
        malformed(&map(r#""ignoreList":[0,0.25]"#)),
        "ignoreList[1] is not a non-negative integer: 0.25"
    );
    assert_eq!(
        malformed(&map(r#""ignoreList":[-2]"#)),
        "ignoreList[0] is not a non-negative integer: -2"
    );
    assert_eq!(
        malformed(&map(r#""ignoreList":[1,2]"#)),
        "ignoreList[1]: 2 is not the index of a source (2 sources)"
    );
    assert_eq!(
        malformed(&map(r#""x_google_ignoreList":[9]"#)),
        "x_google_ignoreList[0]: 9 is not the index of a source (2 sources)"
    );
    accepted(&map(r#""ignoreList":[],"x_google_ignoreList":[1]"#));
}

#[test]
fn mappings_must_be_a_string() {
    assert_eq!(
        malformed(r#"{"version":3,"sources":[],"mappings":12}"#),
        "mappings is not a string"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":[],"mappings":["AAAA"]}"#),
        "mappings is not a string"
    );
    assert_eq!(
        malformed(&indexed(&[
            r#"{"offset":{"line":0,"column":0},"map":{"version":3,"sources":[]}}"#
        ])),
        "sections[0].map.mappings is missing"
    );
}

#[test]
fn mappings_hold_only_base64_digits_commas_and_semicolons() {
    assert_eq!(
        mappings_error("AAAA.CAAC"),
        "mappings: line 1, segment 1: invalid character '.' (only base64 digits, ',' and ';' \
         are allowed)"
    );
    assert_eq!(
        mappings_error("AAAA;A="),
        "mappings: line 2, segment 1: invalid character '=' (only base64 digits, ',' and ';' \
         are allowed)"
    );
    assert_eq!(
        mappings_error("AAAA,CAAé"),
        "mappings: line 1, segment 2: invalid character 'é' (only base64 digits, ',' and ';' \
         are allowed)"
    );
}

#[test]
fn a_vlq_value_must_end() {
    assert_eq!(
        mappings_error("AAAA,k"),
        "mappings: line 1, segment 2: a VLQ value ends on a continuation digit"
    );
    assert_eq!(
        mappings_error("AAAw;AAAA"),
        "mappings: line 1, segment 1: a VLQ value ends on a continuation digit"
    );
}

#[test]
fn a_vlq_value_must_fit_in_32_bits() {
    // 7 digits: 5 bits each, the last at bit 30; "H" (7) there makes 7 * 2^30 >= 2^32.
    let too_big = "kgggggH";
    for (i, field) in [
        "generated column",
        "source index",
        "original line",
        "original column",
        "name index",
    ]
    .iter()
    .enumerate()
    {
        let mut fields = ["A"; 5];
        fields[i] = too_big;
        assert_eq!(
            mappings_error(&fields.concat()),
            format!("mappings: line 1, segment 1: {field} VLQ value does not fit in 32 bits")
        );
    }
}

#[test]
fn a_segment_has_1_4_or_5_fields() {
    let empty = "empty segment (a segment has 1, 4 or 5 fields)";
    assert_eq!(
        mappings_error("AAAA,,AAAA"),
        format!("mappings: line 1, segment 2: {empty}")
    );
    assert_eq!(
        mappings_error(",AAAA"),
        format!("mappings: line 1, segment 1: {empty}")
    );
    assert_eq!(
        mappings_error("AAAA;EAAA,;AAAA"),
        format!("mappings: line 2, segment 2: {empty}")
    );
    assert_eq!(
        mappings_error("AAAA,"),
        format!("mappings: line 1, segment 2: {empty}")
    );
    assert_eq!(
        mappings_error("AAAA;GC"),
        "mappings: line 2, segment 1: segment has 2 fields (must have 1, 4 or 5)"
    );
    assert_eq!(
        mappings_error("GCA"),
        "mappings: line 1, segment 1: segment has 3 fields (must have 1, 4 or 5)"
    );
    assert_eq!(
        mappings_error("AAAAAC"),
        "mappings: line 1, segment 1: segment has more than 5 fields (must have 1, 4 or 5)"
    );
    // Empty lines are fine.
    accepted(&mapped(";;AAAA;;;G;"));
}

#[test]
fn running_values_must_not_be_negative() {
    // First segment: the value itself.
    for (mappings, field) in [
        ("D", "generated column"),
        ("ADAA", "source index"),
        ("AADA", "original line"),
        ("AAAD", "original column"),
        ("AAAAD", "name index"),
    ] {
        assert_eq!(
            mappings_error(mappings),
            format!("mappings: line 1, segment 1: {field} -1 is negative")
        );
    }
    // Later segments: the running sum (the generated column restarts on each line, the
    // others carry over).
    assert_eq!(
        mappings_error("E,H"),
        "mappings: line 1, segment 2: generated column -1 is negative"
    );
    assert_eq!(
        mappings_error("I;D"),
        "mappings: line 2, segment 1: generated column -1 is negative"
    );
    assert_eq!(
        mappings_error("ACAA,ADAA,ADAA"),
        "mappings: line 1, segment 3: source index -1 is negative"
    );
    assert_eq!(
        mappings_error("AAGA;AAJA"),
        "mappings: line 2, segment 1: original line -1 is negative"
    );
    assert_eq!(
        mappings_error("AAAK,AAAN"),
        "mappings: line 1, segment 2: original column -1 is negative"
    );
    assert_eq!(
        mappings_error("AAAAC,AAAAF"),
        "mappings: line 1, segment 2: name index -1 is negative"
    );
    // A sign bit without magnitude is -2^31 (ECMA-426 VLQSignedValue).
    assert_eq!(
        mappings_error("B"),
        "mappings: line 1, segment 1: generated column -2147483648 is negative"
    );
}

#[test]
fn running_values_must_stay_within_2_pow_31() {
    // "+/////D" is 2^31 - 1, the largest value.
    assert_eq!(
        mappings_error("+/////D,C"),
        "mappings: line 1, segment 2: generated column 2147483648 is more than 2147483647"
    );
    assert_eq!(
        mappings_error("AA+/////DA;AACA"),
        "mappings: line 2, segment 1: original line 2147483648 is more than 2147483647"
    );
}

#[test]
fn source_and_name_indices_must_be_in_range() {
    assert_eq!(
        mappings_error("AEAA"),
        "mappings: line 1, segment 1: source index 2 is out of range (2 sources)"
    );
    assert_eq!(
        mappings_error("AAAA,ACAAC,AAAAC"),
        "mappings: line 1, segment 3: name index 2 is out of range (2 names)"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":["a.js"],"mappings":"AAAAA"}"#),
        "mappings: line 1, segment 1: name index 0 is out of range (0 names)"
    );
    assert_eq!(
        malformed(r#"{"version":3,"sources":[],"names":["x"],"mappings":"A,AAAA"}"#),
        "mappings: line 1, segment 2: source index 0 is out of range (0 sources)"
    );
}

#[test]
fn index_map_sections_must_be_an_array_and_no_mappings() {
    assert_eq!(
        malformed(r#"{"version":3,"sections":{"0":{}}}"#),
        "sections is not an array"
    );
    assert_eq!(
        malformed(&format!(
            r#"{{"version":3,"mappings":"AAAA","sources":["s.js"],"sections":[{}]}}"#,
            section(0, 0, "AAAA")
        )),
        "mappings must not be present in an index map (one with sections)"
    );
    assert_eq!(malformed(&indexed(&["[]"])), "sections[0] is not an object");
}

#[test]
fn index_map_offsets_must_be_non_negative_integers() {
    let map = r#""map":{"version":3,"sources":[],"mappings":""}"#;
    let with = |offset: &str| indexed(&[&format!("{{{offset}{map}}}")]);
    assert_eq!(malformed(&with("")), "sections[0].offset is missing");
    assert_eq!(
        malformed(&with(r#""offset":[0,0],"#)),
        "sections[0].offset is not an object"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"column":0},"#)),
        "sections[0].offset.line is missing"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":0},"#)),
        "sections[0].offset.column is missing"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":false,"column":0},"#)),
        "sections[0].offset.line must be an integer from 0 to 2147483647, not false"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":0,"column":"2"},"#)),
        r#"sections[0].offset.column must be an integer from 0 to 2147483647, not "2""#
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":-3,"column":0},"#)),
        "sections[0].offset.line must be an integer from 0 to 2147483647, not -3"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":1.5,"column":0},"#)),
        "sections[0].offset.line must be an integer from 0 to 2147483647, not 1.5"
    );
    assert_eq!(
        malformed(&with(r#""offset":{"line":0,"column":2147483648},"#)),
        "sections[0].offset.column must be an integer from 0 to 2147483647, not 2147483648"
    );
}

#[test]
fn index_map_sections_must_embed_a_valid_map() {
    let offset = r#""offset":{"line":0,"column":0}"#;
    assert_eq!(
        malformed(&indexed(&[&format!("{{{offset}}}")])),
        "sections[0].map is missing"
    );
    assert_eq!(
        malformed(&indexed(&[&format!(
            r#"{{{offset},"url":"other.js.map"}}"#
        )])),
        "sections[0] refers to a map by `url`, which is not supported: the map must be \
         embedded as `map`"
    );
    assert_eq!(
        malformed(&indexed(&[&format!(r#"{{{offset},"map":"a.js.map"}}"#)])),
        "sections[0].map is not an object"
    );
    assert_eq!(
        malformed(&indexed(&[&section(0, 0, "AAAA"), &section(1, 0, "ACAA")])),
        "sections[1].map.mappings: line 1, segment 1: source index 1 is out of range (1 sources)"
    );
}

#[test]
fn index_map_sections_must_be_sorted() {
    assert_eq!(
        malformed(&indexed(&[&section(2, 0, "AAAA"), &section(1, 5, "AAAA")])),
        "sections[1]: offset (1, 5) is before the offset (2, 0) of sections[0] (sections must \
         be sorted)"
    );
    assert_eq!(
        malformed(&indexed(&[&section(0, 8, ""), &section(0, 7, "")])),
        "sections[1]: offset (0, 7) is before the offset (0, 8) of sections[0] (sections must \
         be sorted)"
    );
}

#[test]
fn index_map_sections_must_not_overlap() {
    // Two sections at one offset, both mapping it.
    assert_eq!(
        malformed(&indexed(&[&section(0, 0, "AAAA"), &section(0, 0, "AAAA")])),
        "sections[1]: offset (0, 0) is not after the last mapping of sections[0], at (0, 0) \
         (sections must not overlap)"
    );
    // Section 0 at column 5 maps columns 5 and 15 (the column offset applies to its first
    // line); section 1 starts at 12, inside it.
    assert_eq!(
        malformed(&indexed(&[
            &section(0, 5, "AAAA,UAAA"),
            &section(0, 12, "AAAA")
        ])),
        "sections[1]: offset (0, 12) is not after the last mapping of sections[0], at (0, 15) \
         (sections must not overlap)"
    );
    // On a later line of section 0, its column offset no longer applies: (3 + 1, 2).
    assert_eq!(
        malformed(&indexed(&[
            &section(3, 4, "AAAA;EAAA"),
            &section(4, 1, "AAAA")
        ])),
        "sections[1]: offset (4, 1) is not after the last mapping of sections[0], at (4, 2) \
         (sections must not overlap)"
    );
}

#[test]
fn nested_index_maps_are_accepted_and_checked() {
    // ECMA-426 decodes a section's map as a regular map, but Metro's RAM bundle maps nest an
    // index map per module group: accepted, with the same rules at each level.
    let inner = |sections: &[&str]| {
        format!(
            r#"{{"offset":{{"line":1,"column":0}},"map":{}}}"#,
            indexed(sections)
        )
    };
    // The inner map's second section maps (0, 3) of its line 1: (1 + 1, 3) outside.
    let nested = inner(&[&section(0, 0, "AAAA,KAAC"), &section(1, 0, "AACA,GAAA")]);
    assert_eq!(
        malformed(&indexed(&[&nested, &section(2, 3, "AAAA")])),
        "sections[1]: offset (2, 3) is not after the last mapping of sections[0], at (2, 3) \
         (sections must not overlap)"
    );
    let map = accepted(&indexed(&[&nested, &section(2, 4, "AAGA")]));
    let segment = map.segment(0).unwrap();
    let at = |line, column| {
        let found = segment.lookup(line, column).unwrap();
        (found.file_name, found.line, found.column)
    };
    assert_eq!(at(1, 6), (Some("s.js"), 0, 1));
    assert_eq!(at(2, 3), (Some("s.js"), 1, 0));
    assert_eq!(at(2, 9), (Some("s.js"), 3, 0));
    // Orders are checked inside too, and the message gives the path.
    let unsorted = inner(&[&section(1, 0, "AAAA"), &section(0, 9, "AAAA")]);
    assert_eq!(
        malformed(&indexed(&[&unsorted])),
        "sections[0].map.sections[1]: offset (0, 9) is before the offset (1, 0) of \
         sections[0].map.sections[0] (sections must be sorted)"
    );
    // At most 8 levels.
    let mut deep = r#"{"version":3,"sources":[],"mappings":""}"#.to_owned();
    for _ in 0..9 {
        deep = format!(
            r#"{{"version":3,"sections":[{{"offset":{{"line":0,"column":0}},"map":{deep}}}]}}"#
        );
    }
    assert!(
        malformed(&deep).ends_with(".map.sections nested too deeply (more than 8 levels)"),
        "{}",
        malformed(&deep)
    );
}

#[test]
fn segment_maps_are_checked_as_maps() {
    let with = |segments: &str| {
        format!(
            r#"{{"version":3,"sources":["a.js"],"mappings":"AAAA","x_facebook_segments":{segments}}}"#
        )
    };
    assert_eq!(
        malformed(&with("[]")),
        "x_facebook_segments is not an object"
    );
    assert_eq!(
        malformed(&with(r#"{"1":7}"#)),
        r#"x_facebook_segments["1"] is not an object"#
    );
    assert_eq!(
        malformed(&with(
            r#"{"1":{"version":3,"sources":[],"mappings":"AAAA"}}"#
        )),
        r#"x_facebook_segments["1"].mappings: line 1, segment 1: source index 0 is out of range (0 sources)"#
    );
    let map = accepted(&with(
        r#"{"1":{"version":3,"sources":["b.js"],"mappings":"AAAA"}}"#,
    ));
    assert_eq!(
        map.segment(1).unwrap().lookup(0, 0).unwrap().file_name,
        Some("b.js")
    );
}

/// Every optional field, Metro's and Hermes' extensions, a null source and content, an unknown
/// field, the largest values, a long VLQ of zero continuation digits and empty lines: accepted,
/// and lookups answer.
#[test]
fn a_valid_map_with_every_optional_field_resolves() {
    let map = serde_json::json!({
        "version": 3,
        "file": "bundle.js",
        "sourceRoot": "",
        "sources": ["app.js", null, "lib.js"],
        // Shorter than `sources`: allowed.
        "sourcesContent": ["l0\nl1\nl2\nl3\nl4", null],
        "names": ["start", "helper"],
        // Line 0: app.js 0:0 `start`; column 6 to lib.js 3:4; column 10 unmapped.
        // Line 1: column 2^31 - 1 back to app.js 3:4 `helper`.
        // Line 2: column 1 (a VLQ with ten zero continuation digits) to app.js 3:4.
        // Lines 3 and 4 empty; line 5: app.js 4:4.
        "mappings": "AAAAA,MEGI,I;+/////DFAAC;iggggggggggAAAA;;;AACA",
        "ignoreList": [2],
        "x_google_ignoreList": [2],
        "x_facebook_sources": [[{"names": ["<global>"], "mappings": "AAA"}], null, null],
        "x_metro_module_paths": [],
        "x_hermes_function_offsets": {"0": [0, 10]},
        "x_unknown": {"anything": [1, 2]},
    })
    .to_string();
    let map = accepted(&map);
    let segment = map.segment(0).unwrap();
    let at = |line, column| {
        segment
            .lookup(line, column)
            .map(|m| (m.file_name, m.line, m.column, m.name))
    };
    assert_eq!(at(0, 0), Some((Some("app.js"), 0, 0, Some("start"))));
    assert_eq!(at(0, 8), Some((Some("lib.js"), 3, 4, None)));
    assert_eq!(at(0, 12), None);
    assert_eq!(
        at(1, i32::MAX as u32),
        Some((Some("app.js"), 3, 4, Some("helper")))
    );
    assert_eq!(at(2, 5), Some((Some("app.js"), 3, 4, None)));
    assert_eq!(at(3, 0), None);
    let last = segment.lookup(5, 0).unwrap();
    assert_eq!((last.line, last.column), (4, 4));
    assert_eq!(last.source().and_then(|s| s.line(4)), Some("l4"));
    assert!(segment.is_ignored("lib.js") && !segment.is_ignored("app.js"));
    assert_eq!(segment.hermes_function_offset(0, 1), Some(10));

    // An index map of two sections, the second starting right after the first's last mapping;
    // `sources` on the index map itself is an unknown field there (ECMA-426 § Extensions).
    let map = accepted(&format!(
        r#"{{"version":3,"file":"out.js","sources":["ignored.js"],"sections":[{},{}]}}"#,
        section(0, 0, "AAAA,IACA"),
        section(0, 5, "AAIA")
    ));
    let segment = map.segment(0).unwrap();
    assert_eq!(segment.lookup(0, 4).unwrap().line, 1);
    assert_eq!(segment.lookup(0, 5).unwrap().line, 4);
    // No sections at all.
    accepted(r#"{"version":3,"sections":[]}"#);
}

/// Real React Native maps (Metro, Hermes, RAM bundles, Metro's and rust-sourcemap's test maps,
/// the project's demo) are all valid.
#[test]
fn every_real_map_is_accepted() {
    let is_map = |p: &std::path::Path| p.extension().is_some_and(|e| e == "map");
    let mut maps: Vec<std::path::PathBuf> = walkdir::WalkDir::new(fixture("js"))
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .filter(|p| is_map(p))
        .collect();
    maps.extend(
        std::fs::read_dir(repo().join("examples/rn-demo/dist"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| is_map(p)),
    );
    assert!(maps.len() >= 20, "only {} maps", maps.len());
    for path in maps {
        JsSourceMap::parse(&std::fs::read(&path).unwrap(), None)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
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

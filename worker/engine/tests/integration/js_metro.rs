//! React Native stack restoration against metro-symbolicate's own fixtures and snapshots
//! (`shared/fixtures/js/metro-symbolicate/README.md`) and symbolic's / rust-sourcemap's lookup
//! tables (`js/sourcemapcache-hermes-metro`, `js/rust-sourcemap-rn`).

use symcluster_engine::js::{JsFrameStatus, JsSourceMap, parse_stack, render, restore};

use crate::support::{fixture, js_summary, restore_js};

fn metro(rel: &str) -> std::path::PathBuf {
    fixture(&format!("js/metro-symbolicate/__fixtures__/{rel}"))
}

#[test]
fn hermes_crash_json_with_segments() {
    let stack = std::fs::read(metro("hermesStackTrace.json")).unwrap();
    let result = restore_js(&metro("hermes.js.hbc.map"), None, &stack, 1);
    let f = &result.frames;
    assert_eq!(f.len(), 6);
    assert_eq!(
        js_summary(&f[0]),
        (
            Some("/js/node_modules/react-native/Libraries/polyfills/console.js"),
            Some(480),
            Some(22),
            Some("columns.forEach$argument_0"),
            Some("rows")
        )
    );
    let hmt = "/js/RKJSModules/Apps/HermesModulesTest/HMTLazyFetched.js";
    // `seg-1.js` selects segment 1 of the map.
    assert_eq!(
        js_summary(&f[2]),
        (Some(hmt), Some(13), Some(3), Some("getValue"), None)
    );
    // `seg-16.js`: there is no segment 16.
    assert_eq!(f[3].status, JsFrameStatus::MissingMapping);
    assert_eq!(js_summary(&f[3]), (None, None, None, None, None));
    assert_eq!(f[5].status, JsFrameStatus::Native);
}

#[test]
fn hermes_crash_json_cjs_module_offsets_and_segment_ids() {
    for stack in [
        "hermesStackTraceCJS.json",
        "hermesStackTraceCJS-SegmentID.json",
    ] {
        let data = std::fs::read(metro(stack)).unwrap();
        let result = restore_js(&metro("hermescjs.js.hbc.map"), None, &data, 1);
        let f = &result.frames;
        assert_eq!(
            js_summary(&f[0]),
            (
                Some("/js/react-native-github/Libraries/Utilities/createPerformanceLogger.js"),
                Some(160),
                Some(37),
                Some("result.clearExceptTimespans"),
                None
            ),
            "{stack}"
        );
        // CJSModuleOffset 51 selects the offsets; the `seg-5.js` URL is ignored (not legacy).
        for frame in &f[1..4] {
            assert_eq!(frame.function.as_deref(), Some("getValue"), "{stack}");
            assert_eq!(frame.lineno, Some(13), "{stack}");
        }
        assert_eq!(f[4].status, JsFrameStatus::Native);
    }
}

#[test]
fn text_stack_jsc_format_with_plain_map() {
    let stack = std::fs::read(metro("testfile.stack")).unwrap();
    // metro-symbolicate's fixtures are written with 0-based columns.
    let result = restore_js(&metro("testfile.js.map"), None, &stack, 0);
    let f = &result.frames;
    // 12 frames: `eval code` is text; `eval@[native code]` is a frame.
    assert_eq!(f.len(), 12);
    assert_eq!(
        js_summary(&f[0]),
        (Some("thrower.js"), Some(18), Some(21), None, None)
    );
    assert_eq!(f[1].name.as_deref(), Some("arg"));
    assert_eq!(f[2].status, JsFrameStatus::Native);
    assert_eq!(f[5].status, JsFrameStatus::Native);
    assert_eq!(
        (f[7].lineno, f[7].name.as_deref()),
        (Some(39), Some("throws3"))
    );
    assert_eq!(
        (f[11].filename.as_deref(), f[11].lineno),
        (Some("thrower.js"), Some(1))
    );
}

#[test]
fn function_map_names_enclosing_functions_in_indexed_maps() {
    let stack = std::fs::read(metro("with-function-map.stack")).unwrap();
    let result = restore_js(&metro("with-function-map.js.map"), None, &stack, 0);
    let got: Vec<_> = result
        .frames
        .iter()
        .map(|f| {
            (
                f.filename.as_deref().unwrap(),
                f.lineno.unwrap(),
                f.function.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "/js/RKJSModules/segmented/biz.js",
                5,
                Some("module.exports.throwSmthInner")
            ),
            (
                "/js/RKJSModules/segmented/glo.js",
                7,
                Some("module.exports.throwSmth")
            ),
            ("/js/RKJSModules/bar.js", 14, Some("makeItThrowInner")),
            ("/js/RKJSModules/bar.js", 10, Some("makeItThrow")),
            ("/js/RKJSModules/bar.js", 5, Some("import.then$argument_0")),
        ]
    );
}

#[test]
fn segmented_ram_bundle_file_names_select_modules() {
    // `seg-1_2.js`, `seg-1_1.js` and `1.js`, as metro's snapshot 12.
    let stack = std::fs::read(metro("testfile.ram.stack")).unwrap();
    let result = restore_js(&metro("testfile.ram.js.map"), None, &stack, 0);
    let got: Vec<_> = result
        .frames
        .iter()
        .map(|f| {
            (
                f.filename.as_deref().unwrap(),
                f.lineno.unwrap(),
                f.name.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("/js/RKJSModules/segmented/biz.js", 5, None),
            (
                "/js/RKJSModules/segmented/glo.js",
                7,
                Some("throwSmthInner")
            ),
            ("/js/RKJSModules/bar.js", 14, Some("throwSmth")),
            ("/js/RKJSModules/bar.js", 10, Some("makeItThrowInner")),
            ("/js/RKJSModules/bar.js", 5, Some("makeItThrow")),
        ]
    );
}

#[test]
fn indexed_ram_bundle_module_offsets() {
    // metro: `testfile.sectioned.js.map 353.js 1 72` gives `nested-thrower.js:6:start`.
    let result = restore_js(
        &metro("testfile.sectioned.js.map"),
        None,
        b"start@353.js:1:72",
        0,
    );
    let f = &result.frames[0];
    assert_eq!(f.filename.as_deref(), Some("nested-thrower.js"));
    assert_eq!(f.lineno, Some(6));
    assert_eq!(f.name.as_deref(), Some("start"));
    // A module id the map does not know.
    let result = restore_js(
        &metro("testfile.sectioned.js.map"),
        None,
        b"f@99999.js:1:1",
        1,
    );
    assert_eq!(result.frames[0].status, JsFrameStatus::MissingMapping);
}

#[test]
fn out_of_range_positions() {
    let map = metro("testfile.js.map");
    // Column past the end of the line: the last mapping on the line (metro: thrower.js:1).
    let far = restore_js(&map, None, b"f@thrower.min.js:1:1000000", 1);
    assert_eq!(far.frames[0].filename.as_deref(), Some("thrower.js"));
    assert_eq!(far.frames[0].lineno, Some(1));
    // Line past the end: nothing (metro: null:null:null).
    let below = restore_js(&map, None, b"f@thrower.min.js:1000000:161", 1);
    assert_eq!(below.frames[0].status, JsFrameStatus::MissingMapping);
    // An absurd column does not overflow.
    let huge = restore_js(&map, None, b"f@thrower.min.js:4294967295:4294967295", 1);
    assert_eq!(huge.frames[0].status, JsFrameStatus::MissingMapping);
}

#[test]
fn metro_text_output_matches_metro_symbolicate() {
    let input = std::fs::read_to_string(metro("testfile.node.stack")).unwrap();
    let map = JsSourceMap::parse(&std::fs::read(metro("testfile.js.map")).unwrap(), None).unwrap();
    let stack = parse_stack(input.as_bytes(), 0).unwrap();
    let result = restore(&stack, &map);
    let text = render::metro_text(&input, &stack, &result, &map, 0);
    // metro-symbolicate's snapshot 9, verbatim.
    assert_eq!(
        text,
        "TypeError: undefined is not a function
    at throws6 (thrower.js:18:null)
    at thrower.js:30:arg
    at forEach (null:null:null)
    at o (thrower.js:30:arguments)
    at throws4 (thrower.js:35:this)
    at eval (eval at thrower.js:30:forEach)
    at t (thrower.js:27:null)
    at throws2 (thrower.js:39:throws3)
    at throws1 (thrower.js:44:throws2)
    at throws0 (thrower.js:49:throws1)
    at thrower.js:53:throws0
    at global code (thrower.js:1:null)
"
    );
}

#[test]
fn hermes_composed_map_with_context_lines() {
    let result = restore_js(
        &fixture("js/sourcemapcache-hermes-metro/react-native-hermes.map"),
        None,
        b"at foo (address at index.android.bundle:1:11940)\nat anonymous (address at index.android.bundle:1:11858)\n",
        1,
    );
    let f = &result.frames;
    assert_eq!(
        js_summary(&f[0]),
        (Some("module.js"), Some(2), Some(11), Some("foo"), None)
    );
    assert_eq!(
        f[0].context_line.as_deref(),
        Some("    throw new Error(\"lets throw!\");")
    );
    assert_eq!(f[0].pre_context, ["export function foo() {"]);
    assert_eq!(f[0].post_context, ["}", ""]);
    assert_eq!(
        js_summary(&f[1]),
        (Some("input.js"), Some(3), Some(1), Some("<global>"), None)
    );
}

#[test]
fn metro_bundle_with_minified_source() {
    let dir = "js/sourcemapcache-hermes-metro";
    let result = restore_js(
        &fixture(&format!("{dir}/react-native-metro.js.map")),
        Some(&fixture(&format!("{dir}/react-native-metro.js"))),
        b"e.foo (react-native-metro.js:7:101)\nat react-native-metro.js:6:44\n",
        1,
    );
    let f = &result.frames;
    assert_eq!(f.len(), 1, "the first line has no `@` or `at`: it is text");
    assert_eq!(
        js_summary(&f[0]),
        (
            Some("input.js"),
            Some(3),
            Some(1),
            Some("<global>"),
            Some("foo")
        )
    );
}

//! The project's own React Native app (`examples/rn-demo`, built by its `generate.sh` with Metro
//! 0.84 and Hermes 0.12 from npm, crashed for real in node and in the Hermes VM): every frame
//! gives the original file, line, column and enclosing function that `expected.md` derives
//! from the source markers.

use symcluster_engine::js::{JsFrameStatus, JsRestoreResult};

use crate::support::{repo, restore_js};

pub(crate) fn dist(rel: &str) -> std::path::PathBuf {
    repo().join("examples/rn-demo/dist").join(rel)
}

const APP: &str = "/Users/dev/DemoApp/src/";
const REQUIRE: &str = "/Users/dev/DemoApp/node_modules/metro-runtime/src/polyfills/require.js";

/// `(file, line, column, function)` per frame, `None` for the native `map` frame.
pub(crate) type Expected<'a> = [Option<(&'a str, u32, u32, &'a str)>; 11];

pub(crate) fn check(result: &JsRestoreResult, expected: &Expected<'_>) {
    assert_eq!(
        result.frames.len(),
        12,
        "11 mapped or native frames and `__r(0)`"
    );
    for (frame, want) in result.frames.iter().zip(expected) {
        match want {
            None => assert_eq!(frame.status, JsFrameStatus::Native, "frame {}", frame.index),
            Some((file, line, column, function)) => {
                assert_eq!(
                    frame.status,
                    JsFrameStatus::Symbolicated,
                    "frame {}",
                    frame.index
                );
                let file = if file.starts_with('/') {
                    file.to_string()
                } else {
                    format!("{APP}{file}")
                };
                assert_eq!(
                    (
                        frame.filename.as_deref(),
                        frame.lineno,
                        frame.colno,
                        frame.function.as_deref()
                    ),
                    (
                        Some(file.as_str()),
                        Some(*line),
                        Some(*column),
                        Some(*function)
                    ),
                    "frame {}",
                    frame.index
                );
            }
        }
    }
    // The bundle's last statement, `__r(0)`, has no mapping.
    assert_eq!(result.frames[11].status, JsFrameStatus::MissingMapping);
}

/// V8 and JSC report a call at the callee's name.
const MINIFIED: Expected<'static> = [
    Some(("pricing.js", 22, 15, "list.map$argument_0")),
    None,
    Some(("pricing.js", 20, 17, "lineTotals")),
    Some(("pricing.js", 29, 20, "computeTotal")),
    Some(("cart.js", 24, 19, "Cart#checkout")),
    Some(("index.js", 23, 15, "App")),
    Some(("util.js", 23, 12, "AppRegistry.runApplication")),
    Some(("index.js", 27, 13, "<global>")),
    Some((REQUIRE, 285, 5, "loadModuleImplementation")),
    Some((REQUIRE, 190, 12, "guardedLoadModule")),
    Some((REQUIRE, 98, 7, "metroRequire")),
];

#[test]
fn real_v8_stack_with_metro_minified_bundle() {
    let stack = std::fs::read(dist("stack-v8.txt")).unwrap();
    let result = restore_js(
        &dist("index.bundle.map"),
        Some(&dist("index.bundle")),
        &stack,
        1,
    );
    check(&result, &MINIFIED);
    let throw = &result.frames[0];
    assert_eq!(
        throw.context_line.as_deref().map(str::trim),
        Some("throw new Error('price missing'); // [js-frame 0]")
    );
    assert_eq!(throw.pre_context.len(), 5);
}

#[test]
fn jsc_stack_with_metro_minified_bundle() {
    let stack = std::fs::read(dist("stack-jsc.txt")).unwrap();
    check(
        &restore_js(&dist("index.bundle.map"), None, &stack, 1),
        &MINIFIED,
    );
}

#[test]
fn real_hermes_stack_with_composed_bytecode_map() {
    // Hermes reports a call at the `(` of its arguments, hence other columns.
    let stack = std::fs::read(dist("stack-hermes.txt")).unwrap();
    let result = restore_js(&dist("index.android.bundle.hbc.map"), None, &stack, 1);
    check(&result, &HERMES);
}

/// The Hermes stack's frames (`stack-hermes.txt`) restored with the composed bytecode map.
pub(crate) const HERMES: Expected<'static> = [
    Some(("pricing.js", 22, 24, "list.map$argument_0")),
    None,
    Some(("pricing.js", 20, 20, "lineTotals")),
    Some(("pricing.js", 29, 30, "computeTotal")),
    Some(("cart.js", 24, 31, "Cart#checkout")),
    Some(("index.js", 23, 23, "App")),
    Some(("util.js", 23, 21, "AppRegistry.runApplication")),
    Some(("index.js", 27, 27, "<global>")),
    Some((REQUIRE, 285, 12, "loadModuleImplementation")),
    Some((REQUIRE, 190, 36, "guardedLoadModule")),
    Some((REQUIRE, 98, 24, "metroRequire")),
];

#[test]
fn hermes_text_output_is_metro_symbolicates() {
    use symcluster_engine::js::{JsSourceMap, parse_stack, render, restore};
    let input = std::fs::read_to_string(dist("stack-hermes.txt")).unwrap();
    let map_bytes = std::fs::read(dist("index.android.bundle.hbc.map")).unwrap();
    let map = JsSourceMap::parse(&map_bytes, None).unwrap();
    let stack = parse_stack(input.as_bytes(), 1).unwrap();
    let text = render::metro_text(&input, &stack, &restore(&stack, &map), &map, 1);
    // What `metro-symbolicate index.android.bundle.hbc.map < stack-hermes.txt` prints.
    let lines: Vec<&str> = text.lines().take(5).collect();
    assert_eq!(
        lines,
        [
            "Error: price missing",
            "    at anonymous (address at /Users/dev/DemoApp/src/pricing.js:22:list.map$argument_0)",
            "    at map (native)",
            "    at lineTotals (address at /Users/dev/DemoApp/src/pricing.js:20:lineTotals)",
            "    at computeTotal (address at /Users/dev/DemoApp/src/pricing.js:29:computeTotal)",
        ]
    );
}

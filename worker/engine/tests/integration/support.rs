//! Shared helpers: locating fixtures, running the engine, picking frames.

use std::path::PathBuf;

use symcluster_engine::result::{FrameResult, SymbolicationResult, ThreadResult};
use symcluster_engine::{LocalSymCaches, parse_report, symbolicate};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A path inside the shared third-party fixtures (`../shared/fixtures` beside the repo).
pub fn fixture(rel: &str) -> PathBuf {
    let root = std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/fixtures"));
    let path = root.join(rel);
    assert!(
        path.exists(),
        "fixture {} not found (set SYMCLUSTER_FIXTURES to the shared fixtures folder)",
        path.display()
    );
    path
}

/// A path inside the project's own generated example.
pub fn demo(rel: &str) -> PathBuf {
    repo().join("examples/ios-demo").join(rel)
}

/// Parses `report` and symbolicates it against `debug_files`.
pub fn run(report: &PathBuf, debug_files: &[PathBuf]) -> SymbolicationResult {
    let data = std::fs::read(report).unwrap();
    let parsed = parse_report(&data).unwrap_or_else(|e| panic!("{}: {e}", report.display()));
    let sources = LocalSymCaches::scan(debug_files).unwrap();
    symbolicate(&parsed, &sources)
}

/// The crashed thread.
pub fn crashed(result: &SymbolicationResult) -> &ThreadResult {
    result.crashed_thread().expect("a crashed thread")
}

/// `(function, filename, lineno, inlined)` of a frame, for compact assertions.
pub type Summary<'a> = (Option<&'a str>, Option<&'a str>, Option<u32>, bool);

/// A frame's [`Summary`].
pub fn summary(frame: &FrameResult) -> Summary<'_> {
    (
        frame.function.as_deref(),
        frame.filename.as_deref(),
        frame.lineno,
        frame.inlined,
    )
}

/// Frames whose image name is one of `images`.
pub fn frames_in<'a>(thread: &'a ThreadResult, images: &[&str]) -> Vec<&'a FrameResult> {
    thread
        .frames
        .iter()
        .filter(|f| f.image.as_deref().is_some_and(|i| images.contains(&i)))
        .collect()
}

/// Restores `stack` (file contents) with the map at `map` (a fixture path).
pub fn restore_js(
    map: &PathBuf,
    bundle: Option<&PathBuf>,
    stack: &[u8],
    column_base: u32,
) -> symcluster_engine::js::JsRestoreResult<'static> {
    use symcluster_engine::js::{JsSourceMap, parse_stack, restore};
    let bundle = bundle.map(|b| std::fs::read_to_string(b).unwrap());
    let map = JsSourceMap::parse(&std::fs::read(map).unwrap(), bundle.as_deref())
        .unwrap_or_else(|e| panic!("{}: {e}", map.display()));
    let stack = parse_stack(stack, column_base).unwrap();
    restore(&stack, &map).into_owned()
}

/// `(filename, lineno, colno, function, name)` of a JS frame.
pub type JsSummary<'a> = (
    Option<&'a str>,
    Option<u32>,
    Option<u32>,
    Option<&'a str>,
    Option<&'a str>,
);

/// The [`JsSummary`] of a frame.
pub fn js_summary<'a>(frame: &'a symcluster_engine::js::JsFrameResult<'_>) -> JsSummary<'a> {
    (
        frame.filename.as_deref(),
        frame.lineno,
        frame.colno,
        frame.function.as_deref(),
        frame.name.as_deref(),
    )
}

/// The Linux demo's crashed thread from its crash to `main`, as `summary` gives each level: the
/// ground truth of `examples/linux-demo/expected.md`, plus `main` (checkout.cpp:35).
pub const DEMO_CHAIN: [Summary<'static>; 5] = [
    (Some("crash_write_null"), Some("crash.c"), Some(23), false),
    (Some("validate_total"), Some("crash.c"), Some(33), true),
    (Some("process_order"), Some("crash.c"), Some(41), false),
    (
        Some("demo::Checkout::run(int)"),
        Some("checkout.cpp"),
        Some(23),
        false,
    ),
    (Some("main"), Some("checkout.cpp"), Some(35), false),
];

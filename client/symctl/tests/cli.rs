//! `symctl` as a user runs it: the real binary, real files, exit codes and output.

use std::path::PathBuf;
use std::process::{Command, Output};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn demo(rel: &str) -> PathBuf {
    repo().join("examples/ios-demo").join(rel)
}

fn symctl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_symctl"))
        .args(args)
        .output()
        .expect("run symctl")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn readme_example_prints_the_symbolicated_crash() {
    let dsym = demo("DemoApp.dSYM");
    let report = demo("DemoApp.crash");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dsym.to_str().unwrap(),
        "--format",
        "apple",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("0x0000000104f4c08c demo::Checkout::run(int) + 28 (checkout.cpp:23)"),
        "{text}"
    );
}

#[test]
fn json_output_follows_the_contract() {
    let dsym = demo("DemoApp.dSYM");
    let report = demo("DemoApp.ips");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dsym.to_str().unwrap(),
        "--format",
        "json",
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "complete");
    let frame = &json["threads"][0]["frames"][0];
    assert_eq!(frame["instruction_addr"], "0x104f4c008");
    assert_eq!(frame["image_addr"], "0x104f48000");
    assert_eq!(frame["image"], "DemoApp");
    assert_eq!(frame["function"], "crash_write_null");
    assert_eq!(frame["lineno"], 23);
    assert_eq!(frame["status"], "symbolicated");
    assert_eq!(json["modules"][0]["status"], "found");
    assert_eq!(
        json["modules"][0]["debug_id"],
        "4c4c443b-5555-3144-a126-3cc30cf88fdb"
    );
}

/// `symctl symbolicate` of the demo crash with its dSYM, `--modules MODULES` and `args` more;
/// its standard output, once it exited 0.
fn symbolicate_demo(modules: &str, args: &[&str]) -> Vec<u8> {
    let dsym = demo("DemoApp.dSYM");
    let report = demo("DemoApp.crash");
    let mut all = vec!["symbolicate", "--debug-files", dsym.to_str().unwrap()];
    all.extend(["--modules", modules]);
    all.extend(args);
    all.push(report.to_str().unwrap());
    let out = symctl(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    out.stdout
}

/// `(image name, status)` of each module, and `unreferenced_modules`, of `symctl symbolicate
/// --modules MODULES` on the demo crash.
fn modules(modules: &str) -> (Vec<(String, String)>, u64) {
    let json: serde_json::Value = serde_json::from_slice(&symbolicate_demo(modules, &[])).unwrap();
    let listed = json["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let path = m["code_file"].as_str().unwrap();
            let name = path.rsplit('/').next().unwrap().to_owned();
            (name, m["status"].as_str().unwrap().to_owned())
        })
        .collect();
    (listed, json["unreferenced_modules"].as_u64().unwrap())
}

/// The demo crash lists 4 images; its threads' frames are in 3 (UIKitCore holds none).
#[test]
fn modules_lists_the_images_frames_are_in_or_every_image_on_request() {
    let owned = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(n, s)| (n.to_string(), s.to_string()))
            .collect()
    };
    let referenced = [
        ("DemoApp", "found"),
        ("libdyld.dylib", "missing"),
        ("libsystem_kernel.dylib", "missing"),
    ];
    assert_eq!(modules("referenced"), (owned(&referenced), 1));
    let every = [
        ("DemoApp", "found"),
        ("UIKitCore", "unused"),
        ("libdyld.dylib", "missing"),
        ("libsystem_kernel.dylib", "missing"),
    ];
    assert_eq!(modules("all"), (owned(&every), 0));

    // `--format apple` renders the report's own image list either way.
    let apple = |modules: &str| {
        String::from_utf8(symbolicate_demo(modules, &["--format", "apple"])).unwrap()
    };
    let text = apple("referenced");
    assert!(text.contains("UIKitCore arm64e"), "{text}");
    assert_eq!(text, apple("all"));
}

#[test]
fn missing_debug_files_still_exit_zero() {
    let empty = tempfile::tempdir().unwrap();
    let report = demo("DemoApp.crash");
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        empty.path().to_str().unwrap(),
        report.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["threads"][0]["frames"][0]["status"], "missing");
    assert_eq!(json["modules"][0]["status"], "missing");
}

#[test]
fn unreadable_report_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(&path, "just some notes\nnothing to see\n").unwrap();
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        dir.path().to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("symctl: "), "{err}");
    assert!(err.contains("not a crash report"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_report_file_fails_with_one_line() {
    let out = symctl(&[
        "symbolicate",
        "--debug-files",
        ".",
        "/nonexistent/report.crash",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot read /nonexistent/report.crash"),
        "{err}"
    );
}

fn metro_fixture(rel: &str) -> PathBuf {
    let root = std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/fixtures"));
    root.join("js/metro-symbolicate/__fixtures__").join(rel)
}

#[test]
fn restore_js_json_output_follows_the_contract() {
    let map = metro_fixture("with-function-map.js.map");
    let dir = tempfile::tempdir().unwrap();
    let stack = dir.path().join("stack.txt");
    // metro's fixture with 0-based columns, made 1-based as the contract reads them.
    std::fs::write(&stack, "Object.throwSmthInner@bundle.js:427:175\n").unwrap();
    let out = symctl(&[
        "restore-js",
        "--sourcemap",
        map.to_str().unwrap(),
        "--format",
        "json",
        stack.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let frame = &json["frames"][0];
    assert_eq!(frame["index"], 0);
    assert_eq!(frame["status"], "symbolicated");
    assert_eq!(frame["filename"], "/js/RKJSModules/segmented/biz.js");
    assert_eq!(frame["lineno"], 5);
    assert_eq!(frame["function"], "module.exports.throwSmthInner");
}

#[test]
fn restore_js_text_output_mirrors_metro_symbolicate() {
    let map = metro_fixture("testfile.js.map");
    let stack = metro_fixture("testfile.stack");
    let out = symctl(&[
        "restore-js",
        "--sourcemap",
        map.to_str().unwrap(),
        "--format",
        "text",
        "--input-column-start",
        "0",
        stack.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // metro-symbolicate's snapshot for this input, verbatim.
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "thrower.js:18:null\nthrower.js:30:arg\nnull:null:null\nthrower.js:30:arguments\n\
         thrower.js:35:this\neval code\nnull:null:null\nthrower.js:27:null\nthrower.js:39:throws3\n\
         thrower.js:44:throws2\nthrower.js:49:throws1\nthrower.js:53:throws0\n\
         global thrower.js:1:null\n"
    );
}

#[test]
fn restore_js_malformed_map_fails_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("broken.map");
    std::fs::write(
        &map,
        r#"{"version": 3, "sources": ["a.js"], "mappings": "AAAA;AA"#,
    )
    .unwrap();
    let stack = dir.path().join("stack.txt");
    std::fs::write(&stack, "at f (a.js:1:1)\n").unwrap();
    let out = symctl(&[
        "restore-js",
        "--sourcemap",
        map.to_str().unwrap(),
        stack.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("invalid source map JSON: EOF while parsing"),
        "{err}"
    );
}

fn android_demo(name: &str) -> PathBuf {
    repo().join("examples/android-demo").join(name)
}

#[test]
fn retrace_text_is_proguards_and_json_has_the_inlined_calls() {
    let mapping = android_demo("mapping.txt");
    let trace = android_demo("obfuscated-logcat.txt");
    let out = symctl(&[
        "retrace",
        "--mapping",
        mapping.to_str().unwrap(),
        "--format",
        "text",
        trace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // ProGuard's retrace of the same crash, but for the JVM's prefixes (logcat prints none).
    let peer = std::fs::read_to_string(android_demo("retrace-proguard.txt"))
        .unwrap()
        .replace("Exception in thread \"main\" ", "")
        .replace("java.base/", "");
    assert_eq!(String::from_utf8(out.stdout).unwrap(), peer);

    let out = symctl(&[
        "retrace",
        "--mapping",
        mapping.to_str().unwrap(),
        android_demo("obfuscated-sentry.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "the event names this mapping");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cause = &json["exceptions"][1];
    assert_eq!(cause["class"], "java.lang.IllegalStateException");
    assert_eq!(cause["relation"], "caused_by");
    let first = &cause["frames"][0];
    assert_eq!(first["class"], "com.example.shop.PriceCalculator");
    assert_eq!(first["method"], "checkPrice");
    assert_eq!(first["file"], "PriceCalculator.java");
    assert_eq!(first["line"], 17);
    assert_eq!(first["inlined"], true);
    assert_eq!(first["status"], "symbolicated");
    assert_eq!(first["raw"]["class"], "com.example.shop.d");
}

#[test]
fn restore_event_restores_each_layer_with_its_file() {
    let event = repo().join("examples/rn-android/combined-event.json");
    let debug_file = repo().join("examples/linux-demo/demo-app.debug");
    let map = repo().join("examples/rn-demo/dist/index.android.bundle.hbc.map");
    let sourcemap = format!("index.android.bundle={}", map.display());
    let mapping = android_demo("mapping.txt");
    let out = symctl(&[
        "restore-event",
        "--format",
        "text",
        "--debug-files",
        debug_file.to_str().unwrap(),
        "--sourcemap",
        &sourcemap,
        "--mapping",
        mapping.to_str().unwrap(),
        event.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "the event names this mapping");
    let text = String::from_utf8(out.stdout).unwrap();
    for line in [
        "SIGSEGV: Segmentation fault\n    at crash_write_null (crash.c:23) [native]\n",
        "    at main (checkout.cpp:35) [native]\n    at com.example.shop.PriceCalculator.checkPrice(PriceCalculator.java:17) [java]\n",
        "    at com.example.shop.ShopApp.main(ShopApp.java:6) [java]\n    at list.map$argument_0 (/Users/dev/DemoApp/src/pricing.js:22:24) [js]\n",
        "    at map [native code] [js]\n",
        // Nothing in the map covers the bundle's last statement: the frame as given.
        "    at global (app:///index.android.bundle:1:532) [js, missing_mapping]\n",
        "Caused by: com.example.shop.CheckoutFailedException: order 0 failed\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }

    // Without the mapping file: the Java frames as given, the others restored.
    let out = symctl(&[
        "restore-event",
        "--debug-files",
        debug_file.to_str().unwrap(),
        "--sourcemap",
        map.to_str().unwrap(),
        event.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["mapping"]["status"], "missing");
    assert_eq!(json["exceptions"][1]["type"], "com.example.shop.c");
    let frames = json["exceptions"][0]["frames"].as_array().unwrap();
    let java = frames.iter().find(|f| f["layer"] == "jvm").unwrap();
    assert_eq!(
        (&java["class"], &java["status"]),
        (&"com.example.shop.d".into(), &"missing_mapping".into())
    );
    assert_eq!(frames[0]["function"], "crash_write_null");
    let js = frames.iter().find(|f| f["layer"] == "js").unwrap();
    assert_eq!(js["lineno"], 22);
}

#[test]
fn retrace_refuses_a_file_that_is_no_mapping_in_one_line() {
    let trace = android_demo("obfuscated-trace.txt");
    let out = symctl(&[
        "retrace",
        "--mapping",
        trace.to_str().unwrap(),
        trace.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a ProGuard/R8 mapping file"), "{err}");
}

fn check_json(path: &std::path::Path) -> (Output, Vec<serde_json::Value>) {
    let out = symctl(&["debug-files", "check", "-o", "json", path.to_str().unwrap()]);
    let listed = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (out, listed)
}

#[test]
fn debug_files_check_says_what_each_file_holds_and_whether_it_is_usable() {
    // The example dSYM: usable, with DWARF.
    let (out, listed) = check_json(&demo("DemoApp.dSYM"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let dsym = &listed[0];
    assert_eq!(
        (
            &dsym["debug_id"],
            &dsym["arch"],
            &dsym["kind"],
            &dsym["usable"]
        ),
        (
            &serde_json::json!("4c4c443b-5555-3144-a126-3cc30cf88fdb"),
            &serde_json::json!("arm64"),
            &serde_json::json!("dsym"),
            &serde_json::json!(true)
        )
    );
    assert_eq!(
        dsym["features"],
        serde_json::json!(["symtab", "debug", "inlinees"])
    );

    // A stripped binary (compiled and stripped of its DWARF here): usable with a warning.
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("app.c");
    std::fs::write(
        &source,
        "int twice(int x) { return 2 * x; }\nint main(void) { return twice(1); }\n",
    )
    .unwrap();
    let binary = dir.path().join("app");
    assert!(
        Command::new("cc")
            .args(["-g", "-Wl,--build-id=sha1", "-o"])
            .arg(&binary)
            .arg(&source)
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Command::new("strip")
            .arg("--strip-debug")
            .arg(&binary)
            .status()
            .unwrap()
            .success()
    );
    let (out, listed) = check_json(&binary);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        (
            &listed[0]["kind"],
            &listed[0]["usable"],
            &listed[0]["features"][0]
        ),
        (
            &serde_json::json!("elf"),
            &serde_json::json!(true),
            &serde_json::json!("symtab")
        )
    );
    assert!(
        !listed[0]["features"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("debug"))
    );
    let table = symctl(&["debug-files", "check", binary.to_str().unwrap()]);
    assert!(table.status.success());
    assert!(
        stderr(&table).contains("warning: ") && stderr(&table).contains("no line info"),
        "{}",
        stderr(&table)
    );

    // Optimized code with DWARF: its inlined calls are seen.
    let optimized = dir.path().join("optimized");
    let inlining = dir.path().join("inlining.c");
    std::fs::write(
        &inlining,
        "static int twice(int x) { return 2 * x; }\n\
         int main(int argc, char **argv) { (void)argv; return twice(argc); }\n",
    )
    .unwrap();
    assert!(
        Command::new("cc")
            .args(["-g", "-O2", "-Wl,--build-id=sha1", "-o"])
            .arg(&optimized)
            .arg(&inlining)
            .status()
            .unwrap()
            .success()
    );
    let (out, listed) = check_json(&optimized);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        listed[0]["features"],
        serde_json::json!(["symtab", "debug", "inlinees", "unwind"])
    );

    // A source map: usable; garbage that looks like an object file: nothing usable, exit 1.
    let (out, listed) = check_json(&repo().join("examples/rn-demo/dist/index.bundle.map"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        (&listed[0]["kind"], &listed[0]["usable"]),
        (&serde_json::json!("sourcemap"), &serde_json::json!(true))
    );
    let garbage = dir.path().join("garbage");
    let mut bytes = b"\x7fELF".to_vec();
    bytes.extend_from_slice(&[0xab; 60]);
    std::fs::write(&garbage, bytes).unwrap();
    let (out, listed) = check_json(&garbage);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(listed[0]["usable"], false);
    assert!(
        stderr(&out).contains("no usable debug file or source map found"),
        "{}",
        stderr(&out)
    );
}

//! Java/Kotlin retrace: the demo's real ProGuard build (examples/android-demo: the same program
//! run obfuscated and not), and R8's inline, outline and rewriteFrame cases from the `proguard`
//! crate's own test data (read from the crate's package in Cargo's registry, BSD-3-Clause).

use std::path::PathBuf;

use symcluster_engine::jvm::result::Relation;
use symcluster_engine::jvm::{
    JvmFrameStatus, JvmMapping, JvmRetraceResult, mapping_id, parse_trace, render, retrace,
};

use crate::support::repo;

pub(crate) fn android_demo(name: &str) -> Vec<u8> {
    let path = repo().join("examples/android-demo").join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A test data file of the `proguard` crate, from its package in Cargo's registry (the version
/// Cargo.lock names: the one the engine is built with).
fn proguard_test_data(name: &str) -> Vec<u8> {
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"proguard\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .and_then(|v| v.strip_suffix('"'))
        .expect("proguard in Cargo.lock");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo"));
    let src = cargo_home.join("registry/src");
    for index in std::fs::read_dir(&src).unwrap() {
        let path = index
            .unwrap()
            .path()
            .join(format!("proguard-{version}/tests/res/{name}"));
        if let Ok(bytes) = std::fs::read(&path) {
            return bytes;
        }
    }
    panic!(
        "proguard-{version}/tests/res/{name} not found under {}",
        src.display()
    );
}

fn retrace_with(mapping_file: &[u8], trace: &[u8]) -> JvmRetraceResult {
    let mapping = JvmMapping::from_mapping_file(mapping_file).unwrap();
    let id = mapping_id(mapping_file);
    retrace(&parse_trace(trace).unwrap(), &mapping, Some(&id))
}

pub(crate) type Frame = (String, String, Option<String>, Option<u32>);

/// The unobfuscated run's exceptions: (class, message, frames), with `... N more` filled in from
/// the enclosing exception's last N frames, as Java means it.
pub(crate) fn ground_truth() -> Vec<(String, Option<String>, Vec<Frame>)> {
    let trace = parse_trace(&android_demo("expected-trace.txt")).unwrap();
    let mut out: Vec<(String, Option<String>, Vec<Frame>)> = Vec::new();
    for exception in trace.exceptions {
        let mut frames: Vec<Frame> = exception
            .frames
            .iter()
            .map(|f| (f.class.clone(), f.method.clone(), f.file.clone(), f.line))
            .collect();
        if exception.omitted_frames > 0 {
            let enclosing = &out.last().unwrap().2;
            let n = exception.omitted_frames as usize;
            frames.extend_from_slice(&enclosing[enclosing.len() - n..]);
        }
        out.push((exception.class, exception.message, frames));
    }
    out
}

fn frames_of(result: &JvmRetraceResult) -> Vec<(String, Option<String>, Vec<Frame>)> {
    result
        .exceptions
        .iter()
        .map(|e| {
            let frames = e
                .frames
                .iter()
                .map(|f| (f.class.clone(), f.method.clone(), f.file.clone(), f.line))
                .collect();
            (e.class.clone(), e.message.clone(), frames)
        })
        .collect()
}

#[test]
fn proguard_demo_every_frame_is_the_unobfuscated_runs() {
    let mapping = android_demo("mapping.txt");
    let result = retrace_with(&mapping, &android_demo("obfuscated-trace.txt"));
    assert_eq!(frames_of(&result), ground_truth());

    let [thrown, cause] = &result.exceptions[..] else {
        panic!("two exceptions: {result:?}");
    };
    assert_eq!(thrown.relation, Relation::Thrown);
    assert_eq!(thrown.raw_class, "com.example.shop.c");
    assert_eq!(thrown.class, "com.example.shop.CheckoutFailedException");
    assert_eq!(cause.relation, Relation::CausedBy);
    // ProGuard inlined checkPrice and lineTotal into the lambda: one obfuscated frame, three
    // original ones, the inlined calls first.
    let inlined: Vec<_> = cause
        .frames
        .iter()
        .filter(|f| f.index == 0)
        .map(|f| (f.method.as_str(), f.line, f.inlined, f.status))
        .collect();
    assert_eq!(
        inlined,
        [
            ("checkPrice", Some(17), true, JvmFrameStatus::Symbolicated),
            ("lineTotal", Some(11), true, JvmFrameStatus::Symbolicated),
            (
                "lambda$total$0",
                Some(7),
                false,
                JvmFrameStatus::Symbolicated
            ),
        ]
    );
    assert_eq!(cause.frames[0].raw.class, "com.example.shop.d");
    assert_eq!(cause.frames[0].raw.line, Some(1017));
    // The JDK's own frames are not in the mapping and stay as they were.
    let jdk = &cause.frames[3];
    assert_eq!(
        (
            jdk.class.as_str(),
            jdk.method.as_str(),
            jdk.line,
            jdk.status
        ),
        (
            "java.util.stream.ReferencePipeline$5$1",
            "accept",
            Some(231),
            JvmFrameStatus::NotInMapping
        )
    );
    assert_eq!(
        result.mapping_id.as_deref(),
        Some(mapping_id(&mapping).as_str())
    );
}

#[test]
fn proguard_demo_agrees_with_proguards_retrace() {
    let result = retrace_with(
        &android_demo("mapping.txt"),
        &android_demo("obfuscated-trace.txt"),
    );
    let peer = String::from_utf8(android_demo("retrace-proguard.txt")).unwrap();
    // ProGuard keeps the JVM's `Exception in thread "main" ` and `java.base/` module prefixes.
    let peer = peer
        .replace("Exception in thread \"main\" ", "")
        .replace("java.base/", "");
    assert_eq!(render::java_text(&result), peer);
}

#[test]
fn logcat_and_sentry_shapes_give_the_same_frames() {
    let mapping = android_demo("mapping.txt");
    let text = retrace_with(&mapping, &android_demo("obfuscated-trace.txt"));
    let logcat = retrace_with(&mapping, &android_demo("obfuscated-logcat.txt"));
    assert_eq!(frames_of(&logcat), frames_of(&text));

    let event = android_demo("obfuscated-sentry.json");
    let trace = parse_trace(&event).unwrap();
    assert_eq!(trace.mapping_ids, [mapping_id(&mapping)]);
    let sentry = retrace_with(&mapping, &event);
    assert_eq!(frames_of(&sentry), frames_of(&text));
}

#[test]
fn r8_inlines_expand_innermost_first() {
    // The Sentry sample app's R8 mapping and trace, and the answer, from the crate's tests
    // (tests/basic.rs); the mapping id is the one sentry-cli gives that file.
    let mapping = proguard_test_data("mapping-inlines.txt");
    assert_eq!(mapping_id(&mapping), "3828bd45-950f-5e77-9737-b6b3a1d80299");
    let result = retrace_with(
        &mapping,
        b"java.lang.RuntimeException: Button press caused an exception!\n\
          \tat io.sentry.sample.MainActivity.t(MainActivity.java:1)\n\
          \tat e.a.c.a.onClick\n\
          \tat android.view.View.performClick(View.java:7125)\n",
    );
    let frames: Vec<_> = result.exceptions[0]
        .frames
        .iter()
        .map(|f| (f.index, f.method.as_str(), f.line, f.inlined, f.status))
        .collect();
    assert_eq!(
        frames,
        [
            (0, "bar", Some(54), true, JvmFrameStatus::Symbolicated),
            (0, "foo", Some(44), true, JvmFrameStatus::Symbolicated),
            (
                0,
                "onClickHandler",
                Some(40),
                false,
                JvmFrameStatus::Symbolicated
            ),
            (1, "onClick", None, false, JvmFrameStatus::ClassOnly),
            (
                2,
                "performClick",
                Some(7125),
                false,
                JvmFrameStatus::NotInMapping
            ),
        ]
    );
    assert_eq!(
        result.exceptions[0].frames[0].class,
        "io.sentry.sample.MainActivity"
    );
    // The class is in the mapping (a synthesized lambda class), `onClick` is not.
    assert_eq!(
        result.exceptions[0].frames[3].class,
        "io.sentry.sample.-$$Lambda$r3Avcbztes2hicEObh02jjhQqd4"
    );
    assert_eq!(
        result.exceptions[0].frames[0].file.as_deref(),
        Some("MainActivity.java")
    );
}

#[test]
fn r8_outlines_are_dropped_and_their_position_carried() {
    // tests/r8.rs, test_remap_outlines_cache (the first three frames; the answer is the first
    // seven lines of the crate's): the first frame is an outline (`ev.h.b`), dropped; its
    // position maps the caller's line.
    let result = retrace_with(
        &proguard_test_data("mapping-outline-complex.txt"),
        b"java.lang.IllegalStateException: Oops!\n\
          \tat ev.h.b(SourceFile:3)\n\
          \tat uu0.k.l(SourceFile:43)\n\
          \tat b80.f.a(SourceFile:33)\n",
    );
    let text = render::java_text(&result);
    assert_eq!(
        text,
        "java.lang.IllegalStateException: Oops!\n\
         \tat com.example.projection.MapProjectionViewController.onProjectionView(MapProjectionViewController.kt:160)\n\
         \tat com.example.projection.MapProjectionViewController.createProjectionMarkerInternal(MapProjectionViewController.kt:133)\n\
         \tat com.example.projection.MapProjectionViewController.createProjectionMarker(MapProjectionViewController.kt:79)\n\
         \tat com.example.MapAnnotations.createProjectionMarker(MapAnnotations.kt:63)\n\
         \tat com.example.mapcomponents.marker.currentlocation.DotRendererDelegate.createCurrentLocationProjectionMarker(DotRendererDelegate.kt:101)\n\
         \tat com.example.mapcomponents.marker.currentlocation.DotRendererDelegate.render(DotRendererDelegate.kt:34)\n\
         \tat com.example.mapcomponents.marker.currentlocation.CurrentLocationRenderer.render(CurrentLocationRenderer.kt:39)\n"
    );
}

#[test]
fn r8_rewrite_frame_rules_remove_inner_frames_for_their_exception() {
    // tests/r8.rs, rewrite_frame_complex_stacktrace: a `removeInnerFrames` rule for
    // NullPointerException applies to the first frame after that exception only.
    let result = retrace_with(
        &proguard_test_data("mapping-rewrite-complex.txt"),
        b"java.lang.NullPointerException: Primary issue\n\
          \tat a.start(SourceFile:10)\n\
          \tat b.dispatch(SourceFile:5)\n\
          \tat c.draw(SourceFile:20)\n\
          Caused by: java.lang.IllegalStateException: Secondary issue\n\
          \tat b.dispatch(SourceFile:5)\n\
          \tat c.draw(SourceFile:20)\n",
    );
    assert_eq!(
        render::java_text(&result),
        "java.lang.NullPointerException: Primary issue\n\
         \tat com.example.flow.Initializer.start(Initializer.java:42)\n\
         \tat com.example.flow.StreamRouter$Inline.internalDispatch(StreamRouter.java:30)\n\
         \tat com.example.flow.StreamRouter.dispatch(StreamRouter.java:12)\n\
         \tat com.example.flow.UiBridge.render(UiBridge.java:200)\n\
         Caused by: java.lang.IllegalStateException: Secondary issue\n\
         \tat com.example.flow.StreamRouter.dispatch(StreamRouter.java:12)\n\
         \tat com.example.flow.UiBridge.render(UiBridge.java:200)\n"
    );
}

#[test]
fn statuses_tell_mapped_kept_and_class_only_frames_apart() {
    let mapping = b"com.example.Shop -> a.a:\n\
                    \x20   1:5:void run():10:14 -> a\n\
                    \x20   20:24:void main():20:24 -> main\n";
    let result = retrace_with(
        mapping,
        b"java.lang.Error: x\n\
          \tat a.a.a(SourceFile:2)\n\
          \tat a.a.main(SourceFile:21)\n\
          \tat a.a.a(SourceFile:99)\n\
          \tat a.a.b(SourceFile:3)\n",
    );
    let frames: Vec<_> = result.exceptions[0]
        .frames
        .iter()
        .map(|f| (f.class.as_str(), f.method.as_str(), f.line, f.status))
        .collect();
    assert_eq!(
        frames,
        [
            (
                "com.example.Shop",
                "run",
                Some(11),
                JvmFrameStatus::Symbolicated
            ),
            // Kept by name (-keep), lines the same: mapped all the same.
            (
                "com.example.Shop",
                "main",
                Some(21),
                JvmFrameStatus::Symbolicated
            ),
            // A line outside every range of `a`, and a method the mapping does not name.
            ("com.example.Shop", "a", Some(99), JvmFrameStatus::ClassOnly),
            ("com.example.Shop", "b", Some(3), JvmFrameStatus::ClassOnly),
        ]
    );
}

#[test]
fn suppressed_exceptions_print_nested_as_java_prints_them() {
    let trace = b"java.lang.Error: outer\n\
                  \tat a.a.a(SourceFile:2)\n\
                  \tSuppressed: java.io.IOException: closing\n\
                  \t\tat a.a.a(SourceFile:3)\n\
                  \tCaused by: java.lang.Error: inner\n\
                  \t\tat a.a.a(SourceFile:4)\n\
                  \t\t... 1 more\n";
    let mapping = b"com.example.Shop -> a.a:\n    1:5:void run():10:14 -> a\n";
    assert_eq!(
        render::java_text(&retrace_with(mapping, trace)),
        "java.lang.Error: outer\n\
         \tat com.example.Shop.run(Shop.java:11)\n\
         \tSuppressed: java.io.IOException: closing\n\
         \t\tat com.example.Shop.run(Shop.java:12)\n\
         \tCaused by: java.lang.Error: inner\n\
         \t\tat com.example.Shop.run(Shop.java:13)\n\
         \t\t... 1 more\n"
    );
}

#[test]
fn a_mapping_that_is_not_one_and_a_trace_that_is_not_one() {
    assert!(JvmMapping::from_mapping_file(&android_demo("obfuscated-trace.txt")).is_err());
    assert!(parse_trace(&android_demo("mapping.txt")).is_err());
}

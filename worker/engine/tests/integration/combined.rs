//! One report, three layers (`examples/rn-android/combined-event.json`, composed by its
//! `make_event.py` from three real crashes): every JavaScript frame as the Hermes demo's ground
//! truth, every Java frame as the unobfuscated run's, every native frame as the Linux demo's
//! source markers, each in its place in one stack.

use std::collections::HashMap;

use symcluster_engine::LocalSymCaches;
use symcluster_engine::combined::{
    CombinedFrame, CombinedResult, FileLoad, Layer, LoadStatus, SourceMapRef, Sources, parse_event,
    restore,
};
use symcluster_engine::js::{JsFrameStatus, JsRestoreResult, JsSourceMap};
use symcluster_engine::jvm::{JvmFrameStatus, JvmMapping, mapping_id};

use crate::js_demo;
use crate::jvm::{Frame, android_demo, ground_truth};
use crate::support::{DEMO_CHAIN, repo, summary};

fn event() -> Vec<u8> {
    std::fs::read(repo().join("examples/rn-android/combined-event.json")).unwrap()
}

fn layer(frame: &CombinedFrame) -> Layer {
    match frame {
        CombinedFrame::Js(_) => Layer::Js,
        CombinedFrame::Jvm(_) => Layer::Jvm,
        CombinedFrame::Native(_) => Layer::Native,
        CombinedFrame::Other(_) => Layer::Other,
    }
}

fn java_frames(frames: &[CombinedFrame]) -> Vec<Frame> {
    frames
        .iter()
        .filter_map(|f| match f {
            CombinedFrame::Jvm(f) => {
                Some((f.class.clone(), f.method.clone(), f.file.clone(), f.line))
            }
            _ => None,
        })
        .collect()
}

/// Restores the event with the demo's files; `with_map` and `with_mapping` leave either out.
fn run(with_map: bool, with_mapping: bool) -> CombinedResult {
    let report = parse_event(&event()).unwrap();
    let symcaches =
        LocalSymCaches::scan(&[repo().join("examples/linux-demo/demo-app.debug")]).unwrap();
    let map_bytes = std::fs::read(js_demo::dist("index.android.bundle.hbc.map")).unwrap();
    let map = JsSourceMap::parse(&map_bytes, None).unwrap();
    let mapping_file = android_demo("mapping.txt");
    let mapping = JvmMapping::from_mapping_file(&mapping_file).unwrap();
    let id = mapping_id(&mapping_file);
    assert_eq!(report.mapping_ids, std::slice::from_ref(&id));
    let bundle = SourceMapRef {
        bundle: "index.android.bundle".into(),
        debug_id: None,
    };
    assert_eq!(report.sourcemaps(), std::slice::from_ref(&bundle));
    let key = "release:com.example.demo@1.0+1/1/index.android.bundle".to_owned();
    let sourcemaps = HashMap::from([(
        bundle,
        FileLoad {
            key,
            file: if with_map {
                Ok(&map)
            } else {
                Err((LoadStatus::Missing, "not uploaded".into()))
            },
        },
    )]);
    let mapping = FileLoad {
        key: format!("proguard:{id}"),
        file: if with_mapping {
            Ok((&mapping, id.as_str()))
        } else {
            Err((LoadStatus::Missing, "not uploaded".into()))
        },
    };
    let result = restore(
        &report,
        &Sources {
            symcaches: &symcaches,
            sourcemaps,
            mapping: Some(mapping),
        },
    );
    // What a job stores reads back the same.
    let json = serde_json::to_vec(&result).unwrap();
    assert_eq!(
        serde_json::from_slice::<CombinedResult>(&json).unwrap(),
        result
    );
    result
}

#[test]
fn every_layer_restored_in_its_place() {
    let result = run(true, true);
    let [thrown, checkout, price] = &result.exceptions[..] else {
        panic!("three exceptions: {:?}", result.exceptions.len());
    };
    // The Java exceptions' classes through the mapping; the signal as given.
    assert_eq!(thrown.type_, "SIGSEGV");
    let truth = ground_truth();
    assert_eq!(checkout.raw_type, "com.example.shop.c");
    assert_eq!(checkout.type_, truth[0].0);
    assert_eq!(checkout.type_, "com.example.shop.CheckoutFailedException");
    assert_eq!(price.type_, "java.lang.IllegalStateException");
    assert_eq!(java_frames(&checkout.frames), truth[0].2);
    assert_eq!(java_frames(&price.frames), truth[1].2);

    // The thrown stack, innermost call first: native, then Java, then JavaScript.
    let layers: Vec<Layer> = thrown.frames.iter().map(layer).collect();
    let runs: Vec<(Layer, usize)> = layers
        .chunk_by(|a, b| a == b)
        .map(|r| (r[0], r.len()))
        .collect();
    assert_eq!(
        runs,
        [
            (Layer::Native, DEMO_CHAIN.len()),
            (Layer::Jvm, truth[1].2.len()),
            (Layer::Js, 12)
        ]
    );
    let native: Vec<_> = thrown
        .frames
        .iter()
        .filter_map(|f| match f {
            CombinedFrame::Native(f) => Some(summary(f)),
            _ => None,
        })
        .collect();
    assert_eq!(native, DEMO_CHAIN);
    assert_eq!(java_frames(&thrown.frames), truth[1].2);
    let js = JsRestoreResult {
        frames: thrown
            .frames
            .iter()
            .filter_map(|f| match f {
                CombinedFrame::Js(f) => Some(f.clone()),
                _ => None,
            })
            .collect(),
    };
    js_demo::check(&js, &js_demo::HERMES);
    // Indexes are the input frames' places: 4 native frames (one with an inlinee), 11 Java
    // frames (ProGuard inlined two calls into one), then 12 JavaScript frames.
    let indexes: Vec<usize> = thrown.frames.iter().map(CombinedFrame::index).collect();
    assert_eq!(indexes.first(), Some(&0));
    assert_eq!(indexes.last(), Some(&(4 + 11 + 12 - 1)));
    assert!(indexes.windows(2).all(|w| w[0] <= w[1]));

    assert_eq!(result.modules.len(), 1);
    assert_eq!(
        result.modules[0].code_file.as_deref(),
        Some("/data/app/~~demo==/com.example.demo-1==/lib/x86_64/libdemo.so")
    );
    assert_eq!(result.sourcemaps.len(), 1);
    assert_eq!(result.sourcemaps[0].status, LoadStatus::Found);
    assert_eq!(result.mapping.as_ref().unwrap().status, LoadStatus::Found);
}

#[test]
fn a_missing_file_leaves_its_layer_as_given_and_the_others_restored() {
    let result = run(false, false);
    let thrown = &result.exceptions[0];
    assert_eq!(result.exceptions[1].type_, "com.example.shop.c");
    assert_eq!(result.sourcemaps[0].status, LoadStatus::Missing);
    let mapping = result.mapping.as_ref().unwrap();
    assert_eq!(
        (mapping.status, mapping.key.starts_with("proguard:")),
        (LoadStatus::Missing, true)
    );
    let mut statuses: Vec<String> = Vec::new();
    for frame in &thrown.frames {
        let status = match frame {
            CombinedFrame::Js(f) => {
                if f.status == JsFrameStatus::MissingSourceMap {
                    // As given: the bundle, line 1, the Hermes column.
                    assert_eq!(f.filename.as_deref(), Some("app:///index.android.bundle"));
                    assert_eq!(f.lineno, Some(1));
                }
                format!("js:{:?}", f.status)
            }
            CombinedFrame::Jvm(f) => {
                assert_eq!(f.class, f.raw.class);
                format!("jvm:{:?}", f.status)
            }
            CombinedFrame::Native(f) => format!("native:{:?}", f.status),
            CombinedFrame::Other(_) => "other".into(),
        };
        if statuses.last() != Some(&status) {
            statuses.push(status);
        }
    }
    assert_eq!(
        statuses,
        [
            "native:Symbolicated",
            "jvm:MissingMapping",
            "js:MissingSourceMap",
            "js:Native",
            "js:MissingSourceMap"
        ]
    );
    // Without the mapping no frame expands: the 11 given.
    assert_eq!(
        thrown
            .frames
            .iter()
            .filter(
                |f| matches!(f, CombinedFrame::Jvm(f) if f.status == JvmFrameStatus::MissingMapping)
            )
            .count(),
        11
    );
}

#[test]
fn native_frames_below_other_layers_are_return_addresses() {
    // The thrown stack with a Java frame called by the crashing native code: the native
    // frames are then all callers (return addresses), the first one included.
    let mut event: serde_json::Value = serde_json::from_slice(&event()).unwrap();
    let thrown = event["exception"]["values"]
        .as_array_mut()
        .unwrap()
        .last_mut()
        .unwrap();
    thrown["stacktrace"]["frames"].as_array_mut().unwrap().push(
        serde_json::json!({"platform": "java", "module": "com.example.shop.d", "function": "a"}),
    );
    let report = parse_event(&serde_json::to_vec(&event).unwrap()).unwrap();
    let symcaches =
        LocalSymCaches::scan(&[repo().join("examples/linux-demo/demo-app.debug")]).unwrap();
    let result = restore(
        &report,
        &Sources {
            symcaches: &symcaches,
            sourcemaps: HashMap::new(),
            mapping: None,
        },
    );
    let native: Vec<_> = result.exceptions[0]
        .frames
        .iter()
        .filter_map(|f| match f {
            CombinedFrame::Native(f) => Some(f),
            _ => None,
        })
        .collect();
    let first = native[0];
    assert_eq!(first.index, 1, "after the Java frame");
    assert_eq!(first.lookup_addr.0, first.instruction_addr.0 - 1);
    // The placeholder that makes it so is not in the result, nor in the modules.
    assert_eq!(native.len(), DEMO_CHAIN.len());
    assert_eq!(result.modules.len(), 1);
    // As the innermost frame, the same address is the faulting instruction.
    let plain = run(true, true);
    let CombinedFrame::Native(pc) = &plain.exceptions[0].frames[0] else {
        panic!("native first");
    };
    assert_eq!(pc.lookup_addr.0, pc.instruction_addr.0);
}

//! The combined event reader (a Sentry event whose frames cross JavaScript, Java and native)
//! and a restore of whatever it reads: the JavaScript frames through the Hermes demo's real
//! source map, the Java frames through the ProGuard demo's mapping, the native frames with no
//! debug file (every image missing), then the text rendering.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use symcluster_engine::combined::{FileLoad, Sources, parse_event, render, restore};
use symcluster_engine::js::JsSourceMap;
use symcluster_engine::jvm::JvmMapping;
use symcluster_engine::model::Image;
use symcluster_engine::symbolicate::{ModuleLoad, SymCacheSource};

static MAP: LazyLock<JsSourceMap> = LazyLock::new(|| {
    JsSourceMap::parse(
        include_bytes!("../../examples/rn-demo/dist/index.android.bundle.hbc.map"),
        None,
    )
    .expect("the demo's source map")
});

static MAPPING: LazyLock<JvmMapping> = LazyLock::new(|| {
    JvmMapping::from_mapping_file(include_bytes!("../../examples/android-demo/mapping.txt"))
        .expect("the demo's mapping")
});

struct NoDebugFiles;

impl SymCacheSource for NoDebugFiles {
    fn load(&self, _image: &Image) -> ModuleLoad {
        ModuleLoad::Missing
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(report) = parse_event(data) else {
        return;
    };
    let sourcemaps: HashMap<_, _> = report
        .sourcemaps()
        .into_iter()
        .map(|r| {
            let load = FileLoad {
                key: r.bundle.clone(),
                file: Ok(&*MAP),
            };
            (r, load)
        })
        .collect();
    let sources = Sources {
        symcaches: &NoDebugFiles,
        sourcemaps,
        mapping: Some(FileLoad {
            key: "proguard:fuzz".into(),
            file: Ok((&*MAPPING, "fuzz")),
        }),
    };
    let result = restore(&report, &sources);
    let _ = render::text(&result);
    let _ = serde_json::to_vec(&result);
});

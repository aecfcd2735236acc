//! Every native report reader (Apple .crash and .ips, KSCrash and the SDK's reports, Sentry
//! events, symbolicator requests; detected from the content), the master's routing reader, and
//! symbolication of whatever parses with no debug file at hand, listing the referenced images
//! and every image (the Sentry reader reads less in the first case): none may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use symcluster_engine::reports::routing::routing_image;
use symcluster_engine::{
    ModuleLoad, Modules, SymCacheSource, parse_report, parse_report_with, symbolicate,
};

struct NoDebugFiles;

impl SymCacheSource for NoDebugFiles {
    fn load(&self, _image: &symcluster_engine::model::Image) -> ModuleLoad {
        ModuleLoad::Missing
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = routing_image(data);
    if let Ok(report) = parse_report(data) {
        let result = symbolicate(&report, &NoDebugFiles);
        let _ = serde_json::to_vec(&result);
        let all = parse_report_with(data, Modules::All).expect("it parsed with referenced images");
        let every = symbolicate(&all, &NoDebugFiles);
        assert_eq!(every.threads, result.threads);
        assert_eq!(every.modules.len(), all.images.len());
    }
});

//! What names a debug file or source map a job lacked (`MissingFile.key`), the same way on
//! the worker that reports it, the master that records it and `symctl upload` that announces
//! its arrival (`Ingest/FilesUploaded`).

use crate::v1;

/// The key of a native debug file: its debug id, lowercase with dashes (as
/// `debugid::DebugId` prints it, e.g. `4c4c443b-5555-3144-a126-3cc30cf88fdb`, `-<age>` when
/// non-zero).
pub fn native_key(debug_id: &str) -> String {
    debug_id.to_ascii_lowercase()
}

/// The key of a source map: `debug-id:<id, lowercase>` when it is found by debug id, else
/// `release:<release>/<dist>/<bundle>` (also the cache-affinity key of JS jobs).
pub fn js_key(debug_id: &str, release: &str, dist: &str, bundle: &str) -> String {
    if debug_id.is_empty() {
        format!("release:{release}/{dist}/{bundle}")
    } else {
        format!("debug-id:{}", debug_id.to_ascii_lowercase())
    }
}

/// [`js_key`] of a JS job.
pub fn js_job_key(js: &v1::JsJob) -> String {
    js_key(&js.debug_id, &js.release, &js.dist, &js.bundle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(
            native_key("4C4C443B-5555-3144-A126-3CC30CF88FDB"),
            "4c4c443b-5555-3144-a126-3cc30cf88fdb"
        );
        assert_eq!(
            js_key("", "demo@1.0", "", "index.android.bundle"),
            "release:demo@1.0//index.android.bundle"
        );
        assert_eq!(js_key("ABC", "r", "", "b"), "debug-id:abc");
    }
}

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
/// `release:<release>/<dist>/<bundle>` with `%` and `/` in each part percent-encoded (`%25`,
/// `%2F`), so that the three parts read back apart ([`split_release_key`]). Also the
/// cache-affinity key of JS jobs.
pub fn js_key(debug_id: &str, release: &str, dist: &str, bundle: &str) -> String {
    if debug_id.is_empty() {
        format!(
            "release:{}/{}/{}",
            escape(release),
            escape(dist),
            escape(bundle)
        )
    } else {
        format!("debug-id:{}", debug_id.to_ascii_lowercase())
    }
}

/// `(release, dist, bundle)` of a `release:` [`js_key`]; `None` for any other key.
pub fn split_release_key(key: &str) -> Option<(String, String, String)> {
    let mut parts = key.strip_prefix("release:")?.split('/');
    let (release, dist, bundle) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some((unescape(release), unescape(dist), unescape(bundle)))
}

fn escape(part: &str) -> String {
    part.replace('%', "%25").replace('/', "%2F")
}

fn unescape(part: &str) -> String {
    part.replace("%2F", "/").replace("%25", "%")
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
        let odd = js_key("", "app@1.0/beta", "100%", "static/js/main.js");
        assert_eq!(odd, "release:app@1.0%2Fbeta/100%25/static%2Fjs%2Fmain.js");
        assert_eq!(
            split_release_key(&odd),
            Some((
                "app@1.0/beta".into(),
                "100%".into(),
                "static/js/main.js".into()
            ))
        );
        assert_eq!(split_release_key("debug-id:abc"), None);
    }
}

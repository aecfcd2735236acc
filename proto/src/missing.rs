//! What names a debug file, source map or ProGuard mapping a job lacked (`MissingFile.key`), the same way on
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

/// Longest release, dist or bundle name accepted, in bytes (S3 keys end at 1,024 bytes).
pub const MAX_KEY_PART_BYTES: usize = 256;

/// Checks that `part` (a release, dist or bundle name; `what` names it in the error) can be one
/// segment of an object key once `%` and `/` are percent-encoded: not empty, not `.` or `..`
/// (which a directory source, or an S3 server that normalizes paths, would resolve to a parent
/// prefix, possibly another project's), at most [`MAX_KEY_PART_BYTES`].
pub fn check_key_part(what: &str, part: &str) -> Result<(), String> {
    if part.is_empty() || part == "." || part == ".." {
        return Err(format!("{what} must not be \".\", \"..\" or empty"));
    }
    if part.len() > MAX_KEY_PART_BYTES {
        return Err(format!(
            "{what} must be at most {MAX_KEY_PART_BYTES} bytes, not {}",
            part.len()
        ));
    }
    Ok(())
}

/// Parses the debug id of a JS bundle (`JsJob.debug_id`, `symctl upload sourcemap --debug-id`),
/// which names a key: only the canonical form of a debug id is accepted, a UUID with dashes in
/// either case, optionally followed by `-<age in hex>` (as `debugid::DebugId` prints it, and as
/// Metro, Hermes and sentry-cli write it into bundles), so that each id has one key.
///
/// # Errors
/// Anything else, in one line quoting (the start of) the input.
pub fn js_debug_id(text: &str) -> Result<debugid::DebugId, String> {
    text.parse::<debugid::DebugId>()
        .ok()
        .filter(|id| id.to_string() == text.to_ascii_lowercase())
        .ok_or_else(|| {
            let shown: String = text.chars().take(80).collect();
            format!(
                "debug_id \"{shown}\" is not a debug id \
                 (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, optionally -<age in hex>)"
            )
        })
}

/// The key of a ProGuard/R8 mapping file: `proguard:<mapping id, lowercase with dashes>`
/// (a [`mapping_id`]). Also the cache-affinity key of JVM jobs.
pub fn jvm_key(mapping_id: &str) -> String {
    format!("proguard:{}", mapping_id.to_ascii_lowercase())
}

/// Parses the id of a ProGuard/R8 mapping file (`JvmJob.mapping_id`, a Sentry event's
/// `debug_meta.images[].uuid`): a UUID with dashes in either case, returned in lowercase, so
/// that each file has one key.
///
/// # Errors
/// Anything else, in one line quoting (the start of) the input.
pub fn mapping_id(text: &str) -> Result<String, String> {
    text.parse::<debugid::DebugId>()
        .ok()
        .filter(|id| id.appendix() == 0 && id.to_string() == text.to_ascii_lowercase())
        .map(|id| id.to_string())
        .ok_or_else(|| {
            let shown: String = text.chars().take(80).collect();
            format!("mapping_id \"{shown}\" is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)")
        })
}

/// Checks what names a JS job's source map: a [`js_debug_id`], or a release and a bundle (and
/// an optional dist) that each pass [`check_key_part`].
///
/// # Errors
/// The first rule broken, in one line.
pub fn check_js_source(js: &v1::JsJob) -> Result<(), String> {
    if !js.debug_id.is_empty() {
        return js_debug_id(&js.debug_id).map(|_| ());
    }
    if js.release.is_empty() || js.bundle.is_empty() {
        return Err("a JS job needs a debug_id, or a release and a bundle".into());
    }
    check_key_part("release", &js.release)?;
    if !js.dist.is_empty() {
        check_key_part("dist", &js.dist)?;
    }
    check_key_part("bundle", &js.bundle)
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

    #[test]
    fn mapping_ids_are_canonical_uuids() {
        let id = "3828BD45-950F-5E77-9737-B6B3A1D80299";
        assert_eq!(
            mapping_id(id).as_deref(),
            Ok("3828bd45-950f-5e77-9737-b6b3a1d80299")
        );
        assert_eq!(
            jvm_key(&mapping_id(id).unwrap()),
            "proguard:3828bd45-950f-5e77-9737-b6b3a1d80299"
        );
        for bad in [
            "3828bd45950f5e779737b6b3a1d80299",
            "3828bd45-950f-5e77-9737-b6b3a1d80299-1",
            "../x",
            "",
        ] {
            assert!(mapping_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn js_sources_name_one_key_segment_each() {
        let id = "B2A5D2CC-3C9F-4D45-9D6A-6D1E2F0A1B3C";
        assert_eq!(
            js_debug_id(id).unwrap().to_string(),
            id.to_ascii_lowercase()
        );
        assert_eq!(
            js_debug_id("b2a5d2cc-3c9f-4d45-9d6a-6d1e2f0a1b3c-1f")
                .unwrap()
                .appendix(),
            0x1f
        );
        for bad in [
            "../../b/js/debug-id/x",
            "b2a5d2cc3c9f4d459d6a6d1e2f0a1b3c",
            "b2a5d2cc-3c9f-4d45-9d6a-6d1e2f0a1b3c/../x",
            "",
        ] {
            assert!(js_debug_id(bad).is_err(), "{bad}");
        }
        let job = |release: &str, dist: &str, bundle: &str| v1::JsJob {
            release: release.into(),
            dist: dist.into(),
            bundle: bundle.into(),
            ..Default::default()
        };
        assert_eq!(
            check_js_source(&job("app@1.0/beta", "", "static/main.js")),
            Ok(())
        );
        assert_eq!(
            check_js_source(&job("..", "1", "b")),
            Err("release must not be \".\", \"..\" or empty".into())
        );
        assert_eq!(
            check_js_source(&job("r", ".", "b")),
            Err("dist must not be \".\", \"..\" or empty".into())
        );
        assert_eq!(
            check_js_source(&job("r", "", "..")),
            Err("bundle must not be \".\", \"..\" or empty".into())
        );
        assert_eq!(
            check_js_source(&job("r", "", &"b".repeat(257))),
            Err("bundle must be at most 256 bytes, not 257".into())
        );
    }
}

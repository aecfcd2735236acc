//! Where files live in a bucket (or a source directory).
//!
//! Every file belongs to a project, or to the shared prefix that every project reads (Apple's
//! system libraries, a company's common frameworks):
//! - `<base>projects/<project>/…`: one project's files ([`Scope::Project`]);
//! - `<base>shared/…`: files any project may read ([`Scope::Shared`]);
//!
//! where `<base>` is the operator's `--s3-prefix` (usually empty) and project names are those
//! [`symcluster_proto::project::validate`] accepts (no `/`, so one project's prefix never holds
//! another's). A native job looks each debug id up in its project first, then in the shared
//! prefix; a JS job reads its project's source maps only, a JVM job its project's mapping
//! files only.
//!
//! Under each prefix, native debug files use Sentry symbolicator's **unified** layout, so
//! trees made by Sentry's tools (`sentry-cli`, `symsorter`) can be copied under a prefix as they
//! are: `<id[0..2]>/<id[2..]>/debuginfo`, where `id` is the debug id in lowercase hex without
//! dashes (the Mach-O UUID or the ELF build-id-derived GUID, followed by the age in hex when
//! non-zero). Workers put the SymCache they derive from a `debuginfo` beside it
//! ([`symcache_key`]), so that other workers download it instead of converting again.
//!
//! ProGuard/R8 mapping files: `<id[0..2]>/<id[2..]>/proguard` by mapping id ([`proguard_key`]).
//!
//! Source maps and bundles:
//! - by debug id: `js/debug-id/<debug id, lowercase with dashes>/sourcemap` and
//!   `…/minified_source`;
//! - by release: `js/release/<release>/<dist or _>/<bundle>.map` and `…/<bundle>`, with `%` and
//!   `/` in the release, dist and bundle percent-encoded.
//!
//! No key leaves its prefix: a JS debug id must be a debug id
//! ([`symcluster_proto::missing::js_debug_id`]), a release, dist or bundle one segment
//! ([`symcluster_proto::missing::check_key_part`]), and every [`crate::Source`] refuses a key
//! with an empty, `.` or `..` segment ([`check_key`]) before it touches a directory or a
//! bucket.

pub use symbolic_common::DebugId;

/// Whose files: one project's, or the shared prefix's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope<'a> {
    /// A project's own files (a valid project name).
    Project(&'a str),
    /// Files every project reads.
    Shared,
}

impl Scope<'_> {
    /// The key prefix of this scope under `base` (the bucket's `--s3-prefix`), ending in `/`.
    pub fn prefix(&self, base: &str) -> String {
        match self {
            Scope::Project(project) => format!("{base}projects/{project}/"),
            Scope::Shared => format!("{base}shared/"),
        }
    }
}

/// Where a native job of `project` looks for a debug file, in order: the project, then the
/// shared prefix.
pub fn native_scopes(project: &str) -> [Scope<'_>; 2] {
    [Scope::Project(project), Scope::Shared]
}

/// The unified-layout key of a native debug file under `prefix` (a [`Scope::prefix`]).
pub fn debug_file_key(prefix: &str, debug_id: &DebugId) -> String {
    let mut id = debug_id.uuid().simple().to_string();
    if debug_id.appendix() != 0 {
        id.push_str(&format!("{:x}", debug_id.appendix()));
    }
    format!("{prefix}{}/{}/debuginfo", &id[..2], &id[2..])
}

/// The key of the SymCache a worker derived from the debug file at `debug_file_key` (a
/// [`debug_file_key`]) and shared with the other workers: beside it, named by the SymCache
/// `format` (the format version and the conversion's revision, e.g. `9.1`) and the original's
/// `original_version` ([`crate::Source::version`]), so that a replaced debug file, a new format
/// or a new conversion never reads an old SymCache:
/// `<id[0..2]>/<id[2..]>/symcache-v<format>-<original_version>`.
pub fn symcache_key(debug_file_key: &str, format: &str, original_version: &str) -> String {
    let dir = debug_file_key
        .strip_suffix("debuginfo")
        .unwrap_or(debug_file_key);
    format!("{dir}symcache-v{format}-{original_version}")
}

/// A key that would not name an object inside its prefix (one line, for the caller's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidKey(pub String);

/// Checks that every `/`-separated segment of `key` is a name: not empty, `.` or `..`, so that
/// neither a directory source nor an S3 server that normalizes paths resolves it outside the
/// prefix it was built under.
pub fn check_key(key: &str) -> Result<(), InvalidKey> {
    match key
        .split('/')
        .find(|segment| segment.is_empty() || *segment == "." || *segment == "..")
    {
        None => Ok(()),
        Some(segment) => Err(InvalidKey(format!(
            "the key {key:?} has a {segment:?} segment"
        ))),
    }
}

/// The key of a ProGuard/R8 mapping file under `prefix`, found by its `mapping_id` (a UUID,
/// [`symcluster_proto::missing::mapping_id`]): `<id[0..2]>/<id[2..]>/proguard`, with `id` in
/// lowercase hex without dashes, beside native debug files in the same unified shape (Sentry's
/// unified layout names no JVM file; `proguard` is the file type's name there).
///
/// # Errors
/// When `mapping_id` is not a UUID.
pub fn proguard_key(prefix: &str, mapping_id: &str) -> Result<String, InvalidKey> {
    let id = symcluster_proto::missing::mapping_id(mapping_id)
        .map_err(InvalidKey)?
        .replace('-', "");
    Ok(format!("{prefix}{}/{}/proguard", &id[..2], &id[2..]))
}

/// Keys of a source map and its minified bundle under `prefix`, found by `debug_id` (its
/// canonical form, [`symcluster_proto::missing::js_debug_id`]).
///
/// # Errors
/// When `debug_id` is not a debug id.
pub fn sourcemap_keys_by_debug_id(
    prefix: &str,
    debug_id: &str,
) -> Result<(String, String), InvalidKey> {
    let id = symcluster_proto::missing::js_debug_id(debug_id).map_err(InvalidKey)?;
    Ok((
        format!("{prefix}js/debug-id/{id}/sourcemap"),
        format!("{prefix}js/debug-id/{id}/minified_source"),
    ))
}

/// Keys of a source map and its minified bundle under `prefix`, found by release, dist (empty:
/// none) and bundle name.
///
/// # Errors
/// When a part is not one key segment ([`symcluster_proto::missing::check_key_part`]).
pub fn sourcemap_keys_by_release(
    prefix: &str,
    release: &str,
    dist: &str,
    bundle: &str,
) -> Result<(String, String), InvalidKey> {
    use symcluster_proto::missing::check_key_part;
    check_key_part("release", release).map_err(InvalidKey)?;
    let dist = if dist.is_empty() { "_" } else { dist };
    check_key_part("dist", dist).map_err(InvalidKey)?;
    check_key_part("bundle", bundle).map_err(InvalidKey)?;
    let base = format!(
        "{prefix}js/release/{}/{}/{}",
        escape(release),
        escape(dist),
        escape(bundle)
    );
    Ok((format!("{base}.map"), base))
}

fn escape(part: &str) -> String {
    part.replace('%', "%25").replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unified_layout_under_scopes() {
        let id: DebugId = "4C4C443B-5555-3144-A126-3CC30CF88FDB".parse().unwrap();
        assert_eq!(
            debug_file_key(&Scope::Project("demo").prefix(""), &id),
            "projects/demo/4c/4c443b55553144a1263cc30cf88fdb/debuginfo"
        );
        assert_eq!(
            debug_file_key(&Scope::Shared.prefix("sym/"), &id),
            "sym/shared/4c/4c443b55553144a1263cc30cf88fdb/debuginfo"
        );
        let pdb: DebugId = "3249d99d-0c40-4931-8610-f4e4fb0b6936-1".parse().unwrap();
        assert_eq!(
            debug_file_key("p/", &pdb),
            "p/32/49d99d0c40493186 10f4e4fb0b69361/debuginfo".replace(' ', "")
        );
        assert_eq!(native_scopes("a"), [Scope::Project("a"), Scope::Shared]);
    }

    #[test]
    fn derived_symcaches_sit_beside_their_debug_file() {
        let id: DebugId = "4C4C443B-5555-3144-A126-3CC30CF88FDB".parse().unwrap();
        let original = debug_file_key("projects/demo/", &id);
        assert_eq!(
            symcache_key(&original, "9.1", "d41d8cd98f00b204e9800998ecf8427e-26714"),
            "projects/demo/4c/4c443b55553144a1263cc30cf88fdb/symcache-v9.1-d41d8cd98f00b204e9800998ecf8427e-26714"
        );
    }

    #[test]
    fn js_layout() {
        assert_eq!(
            sourcemap_keys_by_release("", "app@1.0/beta", "", "index.android.bundle")
                .unwrap()
                .0,
            "js/release/app@1.0%2Fbeta/_/index.android.bundle.map"
        );
        assert_eq!(
            sourcemap_keys_by_debug_id("projects/x/", "B2A5D2CC-3C9F-4D45-9D6A-6D1E2F0A1B3C")
                .unwrap()
                .0,
            "projects/x/js/debug-id/b2a5d2cc-3c9f-4d45-9d6a-6d1e2f0a1b3c/sourcemap"
        );
    }

    #[test]
    fn proguard_layout() {
        assert_eq!(
            proguard_key("projects/x/", "3828BD45-950F-5E77-9737-B6B3A1D80299").unwrap(),
            "projects/x/38/28bd45950f5e779737b6b3a1d80299/proguard"
        );
        assert!(proguard_key("projects/x/", "../../y").is_err());
    }

    #[test]
    fn no_key_climbs_out_of_its_prefix() {
        assert!(sourcemap_keys_by_debug_id("projects/a/", "../../../b/js/debug-id/x").is_err());
        assert!(sourcemap_keys_by_release("projects/a/", "..", "..", "x").is_err());
        assert!(sourcemap_keys_by_release("projects/a/", "r", "", ".").is_err());
        // A `/` inside a part is encoded, so `../b` stays one segment.
        let (map, _) = sourcemap_keys_by_release("projects/a/", "r", "", "../b").unwrap();
        assert_eq!(map, "projects/a/js/release/r/_/..%2Fb.map");
        assert_eq!(check_key(&map), Ok(()));
        assert_eq!(
            check_key("projects/a/js/debug-id/../../../b/x"),
            Err(InvalidKey(
                "the key \"projects/a/js/debug-id/../../../b/x\" has a \"..\" segment".into()
            ))
        );
        assert!(check_key("projects//a").is_err());
        assert!(check_key("/etc/passwd").is_err());
        assert!(check_key("projects/./a").is_err());
    }
}

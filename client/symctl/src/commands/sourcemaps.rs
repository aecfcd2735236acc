//! `symctl sourcemaps inject BUNDLE MAP`: one debug id in a JavaScript bundle and its source map,
//! as the TC39 source map debug id proposal (tc39/ecma426, "Debug ID") describes and Sentry's,
//! Metro's and Hermes' tooling write it: the bundle ends with a `//# debugId=<id>` comment, the
//! map holds `"debugId": "<id>"` (and `"debug_id"`, the spelling older tools read). An upload
//! then stores the map under that id, and a JS job that carries it finds the map by it.
//!
//! The id is the one the bundle or the map already carries, or else one derived from the
//! bundle's bytes (SHA-256, its first 16 bytes as a version-4 UUID, as sentry-cli derives one
//! from a hash of the file), so that injecting again changes nothing.

use std::path::Path;

use anyhow::Context;
use sha2::{Digest, Sha256};

/// The comment that carries a bundle's debug id.
const COMMENT: &str = "//# debugId=";

/// The debug id a bundle's `//# debugId=` comment names (the last one), if any.
pub fn bundle_debug_id(bundle: &str) -> Option<String> {
    bundle
        .lines()
        .rev()
        .take(16)
        .find_map(|line| line.trim().strip_prefix(COMMENT))
        .map(|id| id.trim().to_ascii_lowercase())
}

/// The debug id a source map's `debugId` (or `debug_id`) field names, if any.
pub fn map_debug_id(map: &serde_json::Value) -> Option<String> {
    map.get("debugId")
        .or_else(|| map.get("debug_id"))
        .and_then(|v| v.as_str())
        .map(str::to_ascii_lowercase)
}

/// A version-4 UUID (RFC 9562) from the first 16 bytes of SHA-256 of `bytes`, lowercase with
/// dashes.
fn derived_id(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut raw = [0u8; 16];
    raw.copy_from_slice(&digest[..16]);
    raw[6] = (raw[6] & 0x0f) | 0x40;
    raw[8] = (raw[8] & 0x3f) | 0x80;
    uuid::Uuid::from_bytes(raw).hyphenated().to_string()
}

/// Injects one debug id into `bundle` and `map` (files rewritten in place, each through a
/// temporary file renamed over it); returns the id and whether anything changed.
///
/// # Errors
/// A file that cannot be read or written, a bundle that is not UTF-8 text (a Hermes bytecode
/// bundle: inject into the JS bundle before `hermesc`, or upload its map by release), a map that
/// is not JSON, or a bundle and map that already carry different ids.
pub fn inject(bundle: &Path, map: &Path) -> anyhow::Result<(String, bool)> {
    let bundle_bytes =
        std::fs::read(bundle).with_context(|| format!("cannot read {}", bundle.display()))?;
    let bundle_text = String::from_utf8(bundle_bytes).map_err(|_| {
        anyhow::anyhow!(
            "{} is not JavaScript text (a Hermes bytecode bundle?): inject into the JS bundle \
             before hermesc compiles it",
            bundle.display()
        )
    })?;
    let map_bytes = std::fs::read(map).with_context(|| format!("cannot read {}", map.display()))?;
    let mut map_json: serde_json::Value = serde_json::from_slice(&map_bytes)
        .with_context(|| format!("{} is not a JSON source map", map.display()))?;
    if !map_json.is_object() {
        anyhow::bail!("{} is not a JSON source map (not an object)", map.display());
    }
    let in_bundle = bundle_debug_id(&bundle_text);
    let in_map = map_debug_id(&map_json);
    let id = match (&in_bundle, &in_map) {
        (Some(a), Some(b)) if a != b => anyhow::bail!(
            "{} carries debug id {a} and {} carries {b}: they are not a pair (build them again)",
            bundle.display(),
            map.display()
        ),
        (Some(id), _) | (None, Some(id)) => id.clone(),
        (None, None) => derived_id(bundle_text.as_bytes()),
    };
    symcluster_client::missing::js_debug_id(&id)
        .map_err(|e| anyhow::anyhow!("{}: {e}", bundle.display()))?;
    let mut changed = false;
    if in_bundle.is_none() {
        let mut text = bundle_text;
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("{COMMENT}{id}\n"));
        write_beside(bundle, text.as_bytes())?;
        changed = true;
    }
    let object = map_json.as_object_mut().expect("checked above");
    if object.get("debugId").and_then(|v| v.as_str()) != Some(id.as_str())
        || object.get("debug_id").and_then(|v| v.as_str()) != Some(id.as_str())
    {
        object.insert("debugId".into(), id.clone().into());
        object.insert("debug_id".into(), id.clone().into());
        write_beside(map, &serde_json::to_vec(&map_json)?)?;
        changed = true;
    }
    Ok((id, changed))
}

/// Writes `bytes` to a temporary file beside `path` and renames it over `path`.
fn write_beside(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let mut file = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))
        .with_context(|| format!("cannot write beside {}", path.display()))?;
    std::io::Write::write_all(&mut file, bytes)?;
    // The file keeps its permissions (a temporary file is created 0600).
    if let Ok(meta) = std::fs::metadata(path) {
        std::fs::set_permissions(file.path(), meta.permissions())?;
    }
    file.persist(path)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

/// Runs `symctl sourcemaps inject`: prints `<debug id> <bundle> <map>` and whether it was there.
pub fn run_inject(bundle: &Path, map: &Path) -> anyhow::Result<()> {
    let (id, changed) = inject(bundle, map)?;
    println!(
        "{id} {} {}{}",
        bundle.display(),
        map.display(),
        if changed { "" } else { " (already injected)" }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_and_its_map_get_one_id_once() {
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("index.bundle");
        let map = dir.path().join("index.bundle.map");
        std::fs::write(&bundle, "var a=1;\n//# sourceMappingURL=index.bundle.map").unwrap();
        std::fs::write(
            &map,
            r#"{"version":3,"sources":["a.js"],"names":[],"mappings":"AAAA"}"#,
        )
        .unwrap();
        let (id, changed) = inject(&bundle, &map).unwrap();
        assert!(changed);
        assert_eq!(
            id,
            derived_id(b"var a=1;\n//# sourceMappingURL=index.bundle.map")
        );
        assert_eq!(&id[14..15], "4");
        let text = std::fs::read_to_string(&bundle).unwrap();
        assert!(text.ends_with(&format!("index.bundle.map\n//# debugId={id}\n")));
        assert_eq!(bundle_debug_id(&text), Some(id.clone()));
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&map).unwrap()).unwrap();
        assert_eq!(map_debug_id(&json), Some(id.clone()));
        assert_eq!(json["debug_id"], id.as_str());
        assert_eq!(json["mappings"], "AAAA");
        // Again: nothing changes.
        assert_eq!(inject(&bundle, &map).unwrap(), (id, false));

        // A map of another build: refused.
        std::fs::write(
            &map,
            r#"{"version":3,"debugId":"00000000-0000-4000-8000-000000000000","mappings":""}"#,
        )
        .unwrap();
        let refused = inject(&bundle, &map).unwrap_err().to_string();
        assert!(refused.contains("they are not a pair"), "{refused}");
    }
}

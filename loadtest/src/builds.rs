//! Many app builds from one: the CrashProbe debug files and reports copied under new debug ids,
//! as if every build of an app (and of the libraries it ships) had been uploaded, so that the
//! debug files a load needs exceed a worker's caches and cache-affinity routing shows what it
//! is worth against random routing.
//!
//! Build 0 is the fixtures as they are. Build `b > 0` replaces each debug id (a Mach-O UUID,
//! stored as its 16 raw bytes in the object's `LC_UUID`) with one derived from it and `b`
//! (SHA-256 of both, with the version 4 and variant bits of RFC 9562 set), in the debug file's
//! bytes and in the text of every report, in each spelling a report uses (upper or lower case,
//! with or without dashes).

use std::path::Path;

use sha2::{Digest, Sha256};
use symcluster_engine::debug_files::list_objects;
use symcluster_sources::layout::DebugId;

/// A debug file of one build: its debug ids and bytes.
pub struct DebugFile {
    /// The debug ids of its objects (one per architecture slice).
    pub debug_ids: Vec<DebugId>,
    /// The file.
    pub bytes: Vec<u8>,
}

/// The CrashProbe material of one build: its debug files and reports (plain JSON).
pub struct Build {
    /// The dSYMs' DWARF files.
    pub debug_files: Vec<DebugFile>,
    /// The reports.
    pub reports: Vec<Vec<u8>>,
}

/// The fixtures' debug files (every file under a `…/Contents/Resources/DWARF/` folder of
/// `dsym_dirs`) and reports (every file in `report_dirs`), as build 0.
pub fn original(dsym_dirs: &[&Path], report_dirs: &[&Path]) -> anyhow::Result<Build> {
    let mut debug_files = Vec::new();
    for dir in dsym_dirs {
        for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
            let entry = entry?;
            let in_dwarf = entry
                .path()
                .parent()
                .is_some_and(|p| p.ends_with("Contents/Resources/DWARF"));
            if !entry.file_type().is_file() || !in_dwarf {
                continue;
            }
            let bytes = std::fs::read(entry.path())?;
            let debug_ids = list_objects(&bytes)
                .map_err(|e| anyhow::anyhow!("{}: {e}", entry.path().display()))?
                .into_iter()
                .map(|(id, _, _)| id)
                .collect();
            debug_files.push(DebugFile { debug_ids, bytes });
        }
    }
    let mut reports = Vec::new();
    for dir in report_dirs {
        for entry in std::fs::read_dir(dir)? {
            reports.push(std::fs::read(entry?.path())?);
        }
    }
    Ok(Build {
        debug_files,
        reports,
    })
}

/// The debug id that stands for `id` in build `build`.
pub fn derived_id(id: DebugId, build: u32) -> DebugId {
    let digest = Sha256::new()
        .chain_update(id.uuid().as_bytes())
        .chain_update(build.to_le_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    DebugId::from_uuid(uuid::Uuid::from_bytes(bytes))
}

/// Build `build` of `original`: every debug id replaced by [`derived_id`]. Fails when a debug
/// file does not read back with the new ids (an id not stored as 16 raw bytes).
pub fn derive(original: &Build, build: u32) -> anyhow::Result<Build> {
    let ids: Vec<DebugId> = original
        .debug_files
        .iter()
        .flat_map(|f| f.debug_ids.iter().copied())
        .collect();
    let mut debug_files = Vec::with_capacity(original.debug_files.len());
    for file in &original.debug_files {
        let mut bytes = file.bytes.clone();
        for id in &file.debug_ids {
            replace(
                &mut bytes,
                id.uuid().as_bytes(),
                derived_id(*id, build).uuid().as_bytes(),
            );
        }
        let debug_ids: Vec<DebugId> = list_objects(&bytes)
            .map_err(|e| anyhow::anyhow!("build {build}: {e}"))?
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        let wanted: Vec<DebugId> = file
            .debug_ids
            .iter()
            .map(|id| derived_id(*id, build))
            .collect();
        anyhow::ensure!(
            debug_ids == wanted,
            "build {build}: a debug file reads back as {debug_ids:?}, not {wanted:?}"
        );
        debug_files.push(DebugFile { debug_ids, bytes });
    }
    let reports = original
        .reports
        .iter()
        .map(|report| {
            let mut text = report.clone();
            for id in &ids {
                let new = derived_id(*id, build).uuid();
                let old = id.uuid();
                for (from, to) in [
                    (old.hyphenated().to_string(), new.hyphenated().to_string()),
                    (old.simple().to_string(), new.simple().to_string()),
                ] {
                    replace(&mut text, from.as_bytes(), to.as_bytes());
                    replace(
                        &mut text,
                        from.to_ascii_uppercase().as_bytes(),
                        to.to_ascii_uppercase().as_bytes(),
                    );
                }
            }
            text
        })
        .collect();
    Ok(Build {
        debug_files,
        reports,
    })
}

/// Replaces every occurrence of `from` in `bytes` by `to` (same length).
fn replace(bytes: &mut [u8], from: &[u8], to: &[u8]) {
    assert_eq!(from.len(), to.len());
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(from.len()).position(|w| w == from) {
        let start = at + found;
        bytes[start..start + to.len()].copy_from_slice(to);
        at = start + to.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_differ_per_build_and_are_stable() {
        let id: DebugId = "FC4AD1B9-1FD4-3FB7-AC3E-0239C3A7D115".parse().unwrap();
        assert_eq!(derived_id(id, 1), derived_id(id, 1));
        assert_ne!(derived_id(id, 1), derived_id(id, 2));
        assert_ne!(derived_id(id, 1), id);
        assert_eq!(derived_id(id, 1).uuid().get_version_num(), 4);
    }

    /// The SymCaches of a build's debug files, by debug id, in memory.
    struct InMemory(std::collections::HashMap<DebugId, symcluster_engine::ModuleLoad>);

    impl InMemory {
        fn of(build: &Build) -> Self {
            let mut caches = std::collections::HashMap::new();
            for file in &build.debug_files {
                for id in &file.debug_ids {
                    let symcache = symcluster_engine::symcache::SymCacheFile::from_object_file(
                        &file.bytes,
                        *id,
                    )
                    .unwrap();
                    caches.insert(
                        *id,
                        symcluster_engine::ModuleLoad::Found(std::sync::Arc::new(symcache)),
                    );
                }
            }
            InMemory(caches)
        }
    }

    impl symcluster_engine::SymCacheSource for InMemory {
        fn load(&self, image: &symcluster_engine::model::Image) -> symcluster_engine::ModuleLoad {
            image
                .debug_id
                .and_then(|id| self.0.get(&id).cloned())
                .unwrap_or(symcluster_engine::ModuleLoad::Missing)
        }
    }

    #[test]
    fn a_derived_build_symbolicates_as_the_original_under_its_own_ids() {
        let fixtures = crate::cluster::repo().join("../shared/fixtures/crashprobe/release");
        let original = original(&[&fixtures.join("dSYMs")], &[&fixtures.join("arm64")]).unwrap();
        let build = derive(&original, 7).unwrap();
        let (before, after) = (InMemory::of(&original), InMemory::of(&build));
        for (old, new) in original.reports.iter().zip(&build.reports) {
            // Every image read whole, not only those a frame is in.
            let all = symcluster_engine::Modules::All;
            let old_report = symcluster_engine::parse_report_with(old, all).unwrap();
            let new_report = symcluster_engine::parse_report_with(new, all).unwrap();
            // Every image with a debug file now names the derived id.
            for (a, b) in old_report.images.iter().zip(&new_report.images) {
                if a.debug_id.is_some_and(|id| before.0.contains_key(&id)) {
                    assert_eq!(b.debug_id, a.debug_id.map(|id| derived_id(id, 7)));
                }
            }
            let frames = |result: &symcluster_engine::SymbolicationResult| {
                let json = serde_json::to_value(result).unwrap();
                json["threads"].clone()
            };
            let old_frames = frames(&symcluster_engine::symbolicate(&old_report, &before));
            let new_frames = frames(&symcluster_engine::symbolicate(&new_report, &after));
            assert_eq!(old_frames, new_frames);
            assert!(
                old_frames
                    .to_string()
                    .contains("\"status\":\"symbolicated\"")
            );
        }
        // And not under the original ids.
        let report = symcluster_engine::parse_report(&build.reports[0]).unwrap();
        let result =
            serde_json::to_string(&symcluster_engine::symbolicate(&report, &before)).unwrap();
        assert!(!result.contains("\"status\":\"symbolicated\""), "{result}");
    }

    #[test]
    fn replace_changes_every_occurrence() {
        let mut text = b"a-XY-b-XY".to_vec();
        replace(&mut text, b"XY", b"ZW");
        assert_eq!(text, b"a-ZW-b-ZW");
    }
}

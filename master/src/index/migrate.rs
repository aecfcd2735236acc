//! Bringing an index stored by an older master up to this schema, once, when it opens.
//!
//! Schema version 1 (before projects) stored jobs under the client's id and crash groups under
//! their fingerprint. Version 2 keys them by project ([`super::keys`]): such an index is
//! rewritten in one write transaction into project `default` (jobs, their specs, results,
//! submission order, open jobs, groups), the same way on every master, so their indexes stay
//! equal. The stored version is kept in `index_meta` (`schema_version`); an index with no jobs
//! and no version is new and simply gets the current one.
//!
//! An index whose missing-files table has the layout from before missing sets (one row per job
//! and file) gets it rewritten by set ([`super::missing::convert_rows`]) in the same
//! transaction.

use prost::Message;
use redb::{Database, ReadableTable, ReadableTableMetadata};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::project::DEFAULT_PROJECT;
use symcluster_proto::v1;

use super::body_tables::{INLINE_RESULTS, INLINE_SPECS};
use super::{
    BY_SEQUENCE, GROUPS, IndexError, JOBS, META, OPEN, SCHEMA_VERSION, db, decode_record, keys,
};

/// The `index_meta` key of the stored schema version.
pub const SCHEMA_KEY: &str = "schema_version";

/// Migrates `database` to [`SCHEMA_VERSION`] if it holds an older index; the version it had
/// (the current one for a new index).
pub fn migrate(database: &Database) -> Result<u64, IndexError> {
    let txn = database.begin_write().map_err(db)?;
    let stored = {
        let meta = txn.open_table(META).map_err(db)?;
        let version = meta.get(SCHEMA_KEY).map_err(db)?.map(|v| v.value());
        let jobs = txn.open_table(JOBS).map_err(db)?;
        let groups = txn.open_table(GROUPS).map_err(db)?;
        let empty = jobs.len().map_err(db)? == 0 && groups.len().map_err(db)? == 0;
        match version {
            Some(v) => v,
            None if empty => u64::from(SCHEMA_VERSION),
            None => 1,
        }
    };
    if stored < 2 {
        to_projects(&txn)?;
    }
    // The missing-files index by sets (not a schema version of its own: the commands and the
    // records are the same; only this table's layout changed).
    let converted = super::missing::convert_rows(&txn)?;
    // Groups' call trees apart from their records (not a schema version of its own either).
    let moved = super::groups::move_trees_apart(&txn)?;
    txn.open_table(META)
        .map_err(db)?
        .insert(SCHEMA_KEY, u64::from(SCHEMA_VERSION))
        .map_err(db)?;
    txn.commit().map_err(db)?;
    if moved > 0 {
        tracing::info!(
            groups = moved,
            "index migrated: crash groups' call trees are stored apart from their records"
        );
    }
    if converted > 0 {
        tracing::info!(
            jobs = converted,
            "index migrated: the jobs that lacked files are now indexed by missing set"
        );
    }
    if stored < 2 {
        tracing::info!(
            from = stored,
            to = SCHEMA_VERSION,
            "index migrated: jobs and groups now belong to project `default`"
        );
    }
    Ok(stored)
}

/// Version 1 → 2: every job and group into project `default`.
fn to_projects(txn: &redb::WriteTransaction) -> Result<(), IndexError> {
    let prefixed = |id: &str| keys::job_key(DEFAULT_PROJECT, id);
    let mut jobs = txn.open_table(JOBS).map_err(db)?;
    let old: Vec<(String, Vec<u8>)> = jobs
        .iter()
        .map_err(db)?
        .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
        .collect::<Result<_, _>>()
        .map_err(db)?;
    // A version-1 index holds its bodies in `redb` (moved to body files later, as `Index::open`
    // does for every index from before them).
    let mut specs = txn.open_table(INLINE_SPECS).map_err(db)?;
    let mut results = txn.open_table(INLINE_RESULTS).map_err(db)?;
    let mut by_sequence = txn.open_table(BY_SEQUENCE).map_err(db)?;
    let mut open = txn.open_table(OPEN).map_err(db)?;
    for (id, bytes) in old {
        let mut record: pb::JobRecord = decode_record(&id, &bytes)?;
        let key = prefixed(&id);
        record.job_id = key.clone();
        jobs.remove(id.as_str()).map_err(db)?;
        jobs.insert(key.as_str(), record.encode_to_vec().as_slice())
            .map_err(db)?;
        let spec = specs
            .remove(id.as_str())
            .map_err(db)?
            .map(|v| v.value().to_vec());
        if let Some(spec) = spec {
            let spec = match v1::JobSpec::decode(spec.as_slice()) {
                Ok(mut decoded) => {
                    decoded.job_id = key.clone();
                    decoded.project = DEFAULT_PROJECT.to_owned();
                    decoded.encode_to_vec()
                }
                Err(_) => spec,
            };
            specs.insert(key.as_str(), spec.as_slice()).map_err(db)?;
        }
        let result = results
            .remove(id.as_str())
            .map_err(db)?
            .map(|v| v.value().to_vec());
        if let Some(result) = result {
            results
                .insert(key.as_str(), result.as_slice())
                .map_err(db)?;
        }
        by_sequence
            .insert(record.sequence, key.as_str())
            .map_err(db)?;
        if open.get(record.sequence).map_err(db)?.is_some() {
            open.insert(record.sequence, key.as_str()).map_err(db)?;
        }
    }
    let mut groups = txn.open_table(GROUPS).map_err(db)?;
    let old: Vec<(String, Vec<u8>)> = groups
        .iter()
        .map_err(db)?
        .map(|e| e.map(|(k, v)| (k.value().to_owned(), v.value().to_vec())))
        .collect::<Result<_, _>>()
        .map_err(db)?;
    for (fingerprint, bytes) in old {
        let mut group =
            v1::CrashGroup::decode(bytes.as_slice()).map_err(|source| IndexError::Decode {
                what: format!("group {fingerprint}"),
                source,
            })?;
        group.project = DEFAULT_PROJECT.to_owned();
        groups.remove(fingerprint.as_str()).map_err(db)?;
        groups
            .insert(
                keys::group_key(DEFAULT_PROJECT, &fingerprint).as_str(),
                group.encode_to_vec().as_slice(),
            )
            .map_err(db)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::index::Index;

    #[test]
    fn a_version_1_index_moves_into_project_default_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        // What a version-1 master left: ids without a project, no schema version.
        {
            let database = Index::open_database(&path).unwrap();
            let txn = database.begin_write().unwrap();
            {
                let record = pb::JobRecord {
                    job_id: "a/b".into(),
                    state: v1::JobState::Queued as i32,
                    sequence: 1,
                    ..Default::default()
                };
                let spec = v1::JobSpec {
                    job_id: "a/b".into(),
                    ..Default::default()
                };
                let group = v1::CrashGroup {
                    fingerprint: "g1".into(),
                    count: 1,
                    ..Default::default()
                };
                txn.open_table(JOBS)
                    .unwrap()
                    .insert("a/b", record.encode_to_vec().as_slice())
                    .unwrap();
                txn.open_table(INLINE_SPECS)
                    .unwrap()
                    .insert("a/b", spec.encode_to_vec().as_slice())
                    .unwrap();
                txn.open_table(BY_SEQUENCE)
                    .unwrap()
                    .insert(1, "a/b")
                    .unwrap();
                txn.open_table(OPEN).unwrap().insert(1, "a/b").unwrap();
                txn.open_table(GROUPS)
                    .unwrap()
                    .insert("g1", group.encode_to_vec().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        for _ in 0..2 {
            // Opened twice: migrated once, then left as it is.
            let index = Index::open_file(&path).unwrap();
            let job = index.job("default/a/b", false).unwrap().expect("moved");
            assert_eq!(job.record.job_id, "default/a/b");
            assert!(index.job("a/b", false).unwrap().is_none());
            let spec = v1::JobSpec::decode(index.spec("default/a/b").unwrap().unwrap().as_slice())
                .unwrap();
            assert_eq!(
                (spec.job_id.as_str(), spec.project.as_str()),
                ("default/a/b", "default")
            );
            assert_eq!(index.open_jobs().unwrap()[0].job_id, "default/a/b");
            let groups = index.groups(10, None, true, |p| p == "default").unwrap();
            assert_eq!((groups.len(), groups[0].project.as_str()), (1, "default"));
            drop(Arc::clone(index.database()));
        }
    }

    #[test]
    fn an_index_from_before_missing_sets_gets_them_from_its_records_once() {
        use crate::index::missing;
        use redb::{ReadableDatabase, TableHandle};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        let lacking_files = |files: &[(&str, &str)]| -> Vec<v1::MissingFile> {
            files
                .iter()
                .map(|(key, image)| v1::MissingFile {
                    key: (*key).into(),
                    image: (*image).into(),
                    arch: "arm64".into(),
                })
                .collect()
        };
        {
            let database = Index::open_file(&path).unwrap().database().clone();
            let txn = database.begin_write().unwrap();
            {
                // The records (what the sets are built from; demo/a lists k1 twice)...
                let mut jobs = txn.open_table(JOBS).unwrap();
                for (job, files, at, group) in [
                    (
                        "demo/a",
                        &[("k1", "A"), ("k2", "B"), ("k1", "0-first")][..],
                        10,
                        "g1",
                    ),
                    ("demo/b", &[("k1", "A")][..], 20, "g2"),
                    ("other/c", &[("k2", "B")][..], 30, ""),
                    ("demo/d", &[][..], 40, "g1"),
                ] {
                    let record = pb::JobRecord {
                        job_id: job.into(),
                        state: v1::JobState::Completed as i32,
                        finished_at_ms: at,
                        fingerprint: group.into(),
                        missing: lacking_files(files),
                        ..Default::default()
                    };
                    jobs.insert(job, record.encode_to_vec().as_slice()).unwrap();
                }
                // ...the old layout's table (a row per job and file), and a set row left by a
                // conversion before an older master ran again: dropped, not merged.
                txn.open_table(missing::ROWS_BEFORE_SETS)
                    .unwrap()
                    .insert("demo\0k1\0a", b"".as_slice())
                    .unwrap();
                txn.open_table(missing::JOBS)
                    .unwrap()
                    .insert("00000000000000000000000000000000\0demo/x", b"".as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let lacking = |index: &Index, project, key: &str| -> Vec<String> {
            index
                .jobs_lacking(project, &[key.to_owned()])
                .unwrap()
                .into_iter()
                .collect()
        };
        for _ in 0..2 {
            // Opened twice: converted once, then left as it is.
            let index = Index::open_file(&path).unwrap();
            assert_eq!(lacking(&index, Some("demo"), "k1"), ["demo/a", "demo/b"]);
            assert_eq!(lacking(&index, Some("demo"), "k2"), ["demo/a"]);
            assert_eq!(lacking(&index, None, "k2"), ["demo/a", "other/c"]);
            let entries: Vec<_> = index
                .missing_files(10, |_| true)
                .unwrap()
                .into_iter()
                .map(|e| (e.project, e.key, e.image, e.jobs, e.groups, e.last_seen_ms))
                .collect();
            assert_eq!(
                entries,
                [
                    ("demo".into(), "k1".into(), "A".into(), 2, 2, 20),
                    ("other".into(), "k2".into(), "B".into(), 1, 0, 30),
                    ("demo".into(), "k2".into(), "B".into(), 1, 1, 10),
                ]
            );
            let read = index.database().begin_read().unwrap();
            assert!(
                !read.list_tables().unwrap().any(|t| t.name() == "missing"),
                "the old table is gone"
            );
            let stale = read.open_table(missing::JOBS).unwrap();
            assert!(stale.iter().unwrap().all(|row| {
                !row.unwrap()
                    .0
                    .value()
                    .starts_with("00000000000000000000000000000000")
            }));
        }
        // Taken out by its record's list (as a purge or a new revision does), demo/a is gone.
        let index = Index::open_file(&path).unwrap();
        let record = index.job("demo/a", false).unwrap().unwrap().record;
        let txn = index.database().begin_write().unwrap();
        missing::MissingTables::open(&txn)
            .unwrap()
            .unrecord("demo/a", &record.missing)
            .unwrap();
        txn.commit().unwrap();
        assert_eq!(lacking(&index, None, "k2"), ["other/c"]);
        assert_eq!(lacking(&index, Some("demo"), "k1"), ["demo/b"]);
    }
}

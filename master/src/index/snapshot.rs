//! Index snapshots: the whole index at one applied log index, as one `IndexSnapshot` message
//! (`symcluster.cluster.v1`, prost): every job record with its spec (unfinished jobs, and
//! finished ones that lacked a file) and compressed result, every
//! crash group, and the next submission sequence. A follower too far behind the leader's log
//! receives one inside Raft's `MsgSnapshot` and replaces its index with it.

use prost::Message;
use redb::{ReadableDatabase, ReadableTable};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use symcluster_proto::project::DEFAULT_PROJECT;

use super::apply::Applier;
use super::{
    BY_SEQUENCE, GROUPS, Index, IndexError, JOBS, JobState, META, OPEN, RESULTS, SCHEMA_VERSION,
    SPECS, db, decode_record, is_terminal, keys, meta, missing,
};

impl Index {
    /// The index as snapshot bytes, with the log index and term it reflects.
    pub fn snapshot(&self) -> Result<(Vec<u8>, u64, u64), IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let jobs = read.open_table(JOBS).map_err(db)?;
        let specs = read.open_table(SPECS).map_err(db)?;
        let results = read.open_table(RESULTS).map_err(db)?;
        let groups = read.open_table(GROUPS).map_err(db)?;
        let meta_table = read.open_table(META).map_err(db)?;
        let get = |key: &str| -> Result<u64, IndexError> {
            Ok(meta_table.get(key).map_err(db)?.map_or(0, |v| v.value()))
        };
        let mut snapshot = pb::IndexSnapshot {
            version: SCHEMA_VERSION,
            jobs: Vec::new(),
            groups: Vec::new(),
            next_sequence: get(meta::NEXT_SEQUENCE)?,
        };
        for entry in jobs.iter().map_err(db)? {
            let (id, bytes) = entry.map_err(db)?;
            let id = id.value();
            snapshot.jobs.push(pb::SnapshotJob {
                record: Some(decode_record(id, bytes.value())?),
                spec: specs
                    .get(id)
                    .map_err(db)?
                    .map(|v| v.value().to_vec())
                    .unwrap_or_default(),
                result_zstd: results
                    .get(id)
                    .map_err(db)?
                    .map(|v| v.value().to_vec())
                    .unwrap_or_default(),
            });
        }
        for entry in groups.iter().map_err(db)? {
            let (fingerprint, bytes) = entry.map_err(db)?;
            snapshot
                .groups
                .push(v1::CrashGroup::decode(bytes.value()).map_err(|source| {
                    IndexError::Decode {
                        what: format!("group {}", fingerprint.value()),
                        source,
                    }
                })?);
        }
        Ok((
            snapshot.encode_to_vec(),
            get(meta::APPLIED_INDEX)?,
            get(meta::APPLIED_TERM)?,
        ))
    }

    /// Replaces the whole index with `data` (from [`Index::snapshot`]), which reflects log
    /// entry `index` of `term`. One durable transaction: a crash leaves the old index or the new.
    pub fn restore(&self, data: &[u8], index: u64, term: u64) -> Result<(), IndexError> {
        let snapshot = pb::IndexSnapshot::decode(data).map_err(|source| IndexError::Decode {
            what: "snapshot".into(),
            source,
        })?;
        let txn = self.db.begin_write().map_err(db)?;
        for table in [JOBS, SPECS, RESULTS, GROUPS, missing::JOBS, missing::SETS] {
            txn.delete_table(table).map_err(db)?;
        }
        txn.delete_table(missing::FILES).map_err(db)?;
        // An index from before missing sets (a snapshot restored as it opens) loses that layout.
        txn.delete_table(missing::ROWS_BEFORE_SETS).map_err(db)?;
        txn.delete_table(BY_SEQUENCE).map_err(db)?;
        txn.delete_table(OPEN).map_err(db)?;
        txn.delete_table(META).map_err(db)?;
        {
            let mut jobs = txn.open_table(JOBS).map_err(db)?;
            let mut specs = txn.open_table(SPECS).map_err(db)?;
            let mut results = txn.open_table(RESULTS).map_err(db)?;
            let mut by_sequence = txn.open_table(BY_SEQUENCE).map_err(db)?;
            let mut open = txn.open_table(OPEN).map_err(db)?;
            let mut groups = txn.open_table(GROUPS).map_err(db)?;
            let mut meta_table = txn.open_table(META).map_err(db)?;
            let mut missing_tables = missing::MissingTables::open(&txn)?;
            let mut counts = [0u64; 4];
            for job in &snapshot.jobs {
                let Some(record) = &job.record else { continue };
                // Version 1 had no projects: its jobs are `default`'s ([`keys::upgrade`]).
                let mut record = record.clone();
                if snapshot.version < 2 {
                    record.job_id = keys::job_key(DEFAULT_PROJECT, &record.job_id);
                }
                let id = record.job_id.as_str();
                jobs.insert(id, record.encode_to_vec().as_slice())
                    .map_err(db)?;
                // Finished jobs have no spec (see `SPECS`), unless they lacked a file. A version-1
                // spec gets its index key and project, as a version-2 leader stores it.
                if !job.spec.is_empty() {
                    let spec = match v1::JobSpec::decode(job.spec.as_slice()) {
                        Ok(mut spec) if snapshot.version < 2 => {
                            spec.job_id = id.to_owned();
                            spec.project = DEFAULT_PROJECT.to_owned();
                            spec.encode_to_vec()
                        }
                        _ => job.spec.clone(),
                    };
                    specs.insert(id, spec.as_slice()).map_err(db)?;
                }
                if !job.result_zstd.is_empty() {
                    results.insert(id, job.result_zstd.as_slice()).map_err(db)?;
                }
                by_sequence.insert(record.sequence, id).map_err(db)?;
                // The missing-files index is an index over the records' lists.
                missing_tables.record(
                    id,
                    &record.missing,
                    record.finished_at_ms,
                    &record.fingerprint,
                )?;
                let state = JobState::try_from(record.state).unwrap_or(JobState::Unspecified);
                if !is_terminal(state) {
                    open.insert(record.sequence, id).map_err(db)?;
                }
                match state {
                    JobState::Queued => counts[0] += 1,
                    JobState::Running => counts[1] += 1,
                    JobState::Completed => counts[2] += 1,
                    JobState::Failed => counts[3] += 1,
                    JobState::Unspecified => {}
                }
            }
            for group in &snapshot.groups {
                let mut group = group.clone();
                if group.project.is_empty() {
                    group.project = DEFAULT_PROJECT.to_owned();
                }
                let key = keys::group_key(&group.project, &group.fingerprint);
                groups
                    .insert(key.as_str(), group.encode_to_vec().as_slice())
                    .map_err(db)?;
            }
            for (key, value) in [
                // A restored index is of this schema (whatever version wrote the snapshot).
                (super::migrate::SCHEMA_KEY, u64::from(SCHEMA_VERSION)),
                (meta::QUEUED, counts[0]),
                (meta::RUNNING, counts[1]),
                (meta::COMPLETED, counts[2]),
                (meta::FAILED, counts[3]),
                (meta::NEXT_SEQUENCE, snapshot.next_sequence),
            ] {
                meta_table.insert(key, value).map_err(db)?;
            }
        }
        {
            let mut applier = Applier::new(&txn)?;
            applier.set_applied(index, term)?;
        }
        txn.commit().map_err(db)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::index::command;

    #[test]
    fn a_restored_snapshot_is_the_same_index() {
        let dir = tempfile::tempdir().unwrap();
        let one = Index::open(Index::open_database(&dir.path().join("1.redb")).unwrap()).unwrap();
        let two = Index::open(Index::open_database(&dir.path().join("2.redb")).unwrap()).unwrap();
        let txn = one.database().begin_write().unwrap();
        {
            let mut applier = Applier::new(&txn).unwrap();
            for c in [
                command::submit("a", v1::JobKind::Native, vec![7], "k", 1),
                command::submit("b", v1::JobKind::Js, vec![8], "k2", 2),
                command::lease("a", "w", 1, 3),
                command::with_missing(
                    command::complete(
                        "a",
                        1,
                        "w",
                        b"{}".to_vec(),
                        Some(v1::CrashGroupKey {
                            fingerprint: "f".into(),
                            ..Default::default()
                        }),
                        4,
                    ),
                    vec![v1::MissingFile {
                        key: "dbg".into(),
                        image: "App".into(),
                        arch: "arm64".into(),
                    }],
                ),
            ] {
                applier.apply(&c).unwrap();
            }
            applier.set_applied(4, 2).unwrap();
        }
        txn.commit().unwrap();
        let (data, index, term) = one.snapshot().unwrap();
        assert_eq!((index, term), (4, 2));
        two.restore(&data, index, term).unwrap();
        assert_eq!(two.applied().unwrap(), (4, 2));
        assert_eq!(two.job("a", true).unwrap(), one.job("a", true).unwrap());
        assert_eq!(
            two.list_jobs(None, 10, |_| true).unwrap(),
            one.list_jobs(None, 10, |_| true).unwrap()
        );
        assert_eq!(two.open_jobs().unwrap(), one.open_jobs().unwrap());
        assert_eq!(
            two.groups(10, None, |_| true).unwrap(),
            one.groups(10, None, |_| true).unwrap()
        );
        assert_eq!(two.counts().unwrap(), one.counts().unwrap());
        // The missing-files index is rebuilt from the records, and the spec a job that lacked a file
        // keeps travels with it.
        let missing = one.missing_files(10, |_| true).unwrap();
        assert_eq!(missing.len(), 1);
        assert_eq!(two.missing_files(10, |_| true).unwrap(), missing);
        assert_eq!(two.spec("a").unwrap(), Some(vec![7]));
        let _ = Arc::strong_count(two.database());
    }
}

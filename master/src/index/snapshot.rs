//! Index snapshots as a stream of records: what a follower too far behind the leader's log
//! receives in place of the entries it misses.
//!
//! A snapshot is the index at one applied log index, read from one `redb` read transaction
//! ([`SnapshotSource`], taken when Raft asks for it; the writer goes on meanwhile, redb is
//! MVCC) and written as a sequence of `symcluster.cluster.v1.SnapshotRecord`s, each
//! length-delimited (prost's varint length, then the message): one header (schema version,
//! applied index and term, next submission sequence), every job with its spec and compressed
//! result, every crash group, then an end record with the counts. It is written one record at a
//! time ([`SnapshotSource::write_to`]): memory does not grow with the index. The follower reads
//! it back from a file the same way ([`Index::restore_from`]) in one durable write transaction:
//! a crash or a cut stream leaves the old index or the new, never half of one. The tables
//! derived from the records (`by_sequence`, `open`, the missing-files index, the per-state
//! counts) are rebuilt, not sent.
//!
//! Masters before streamed snapshots sent the whole index as one `IndexSnapshot` message;
//! [`Index::restore`] still reads one.

use std::io::{self, BufRead, Write};

use prost::Message;
use redb::{ReadTransaction, ReadableDatabase, ReadableTable};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::cluster::v1::snapshot_record::Record;
use symcluster_proto::project::DEFAULT_PROJECT;
use symcluster_proto::v1;

use super::apply::Applier;
use super::bodies::BodyReader;
use super::body_tables::{self, BodyWriter};
use super::{
    BY_SEQUENCE, GROUPS, Index, IndexError, JOBS, JobState, META, OPEN, RESULTS, SCHEMA_VERSION,
    SPECS, db, decode_record, groups, is_terminal, keys, members, meta, missing,
};

/// A record longer than this is corruption, not data (a job's record, spec and result are
/// bounded far below by the admission and result limits), bytes.
const MAX_RECORD_BYTES: u64 = 1 << 30;

/// The index as one read transaction sees it: the source of one snapshot.
pub struct SnapshotSource {
    pub(super) txn: ReadTransaction,
    /// The body files as they were before `txn` began (so none it references is deleted).
    pub(super) reader: BodyReader,
    /// The log index the snapshot reflects (the index's applied index in `txn`).
    pub index: u64,
    /// That entry's term.
    pub term: u64,
}

/// How many records a snapshot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotCounts {
    /// Job records.
    pub jobs: u64,
    /// Crash groups.
    pub groups: u64,
}

fn write_record(out: &mut impl Write, buf: &mut Vec<u8>, record: Record) -> io::Result<()> {
    buf.clear();
    pb::SnapshotRecord {
        record: Some(record),
    }
    .encode_length_delimited(buf)
    .map_err(io::Error::other)?;
    out.write_all(buf)
}

/// An I/O error of the snapshot's destination, or the index's.
fn io_or_index(e: io::Error) -> IndexError {
    IndexError::Corrupt(format!("writing the snapshot: {e}"))
}

impl SnapshotSource {
    /// The group's membership in this source's transaction (`None` before a first one).
    pub fn membership(&self) -> Result<Option<pb::Membership>, IndexError> {
        match self.txn.open_table(members::MEMBERSHIP) {
            Ok(table) => members::read(&table),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(None),
            Err(e) => Err(db(e)),
        }
    }

    /// Writes the snapshot's records into `out`, one at a time. Errors: the store's, a record
    /// that does not decode, and `out`'s (reported as [`IndexError::Corrupt`] with its cause).
    pub fn write_to(&self, out: &mut impl Write) -> Result<SnapshotCounts, IndexError> {
        let jobs = self.txn.open_table(JOBS).map_err(db)?;
        let specs = self.txn.open_table(SPECS).map_err(db)?;
        let results = self.txn.open_table(RESULTS).map_err(db)?;
        let groups = self.txn.open_table(GROUPS).map_err(db)?;
        let trees = self.txn.open_table(groups::TREES).map_err(db)?;
        let facets = self.txn.open_table(super::facets::FACETS).map_err(db)?;
        let meta_table = self.txn.open_table(META).map_err(db)?;
        let next_sequence = meta_table
            .get(meta::NEXT_SEQUENCE)
            .map_err(db)?
            .map_or(0, |v| v.value());
        let mut buf = Vec::new();
        write_record(
            out,
            &mut buf,
            Record::Header(pb::SnapshotHeader {
                version: SCHEMA_VERSION,
                applied_index: self.index,
                applied_term: self.term,
                next_sequence,
                membership: self.membership()?,
            }),
        )
        .map_err(io_or_index)?;
        let mut counts = SnapshotCounts::default();
        for entry in jobs.iter().map_err(db)? {
            let (id, bytes) = entry.map_err(db)?;
            let id = id.value();
            let job = pb::SnapshotJob {
                record: Some(decode_record(id, bytes.value())?),
                spec: body_tables::read(&specs, &self.reader, id)?.unwrap_or_default(),
                result_zstd: body_tables::read(&results, &self.reader, id)?.unwrap_or_default(),
            };
            write_record(out, &mut buf, Record::Job(job)).map_err(io_or_index)?;
            counts.jobs += 1;
        }
        for entry in groups.iter().map_err(db)? {
            let (fingerprint, bytes) = entry.map_err(db)?;
            let mut group =
                v1::CrashGroup::decode(bytes.value()).map_err(|source| IndexError::Decode {
                    what: format!("group {}", fingerprint.value()),
                    source,
                })?;
            // A group travels with its call tree, as masters before stored it, and its facets.
            if let Some(tree) = trees.get(fingerprint.value()).map_err(db)? {
                let tree = groups::decode_tree(fingerprint.value(), tree.value())?;
                group.call_tree = tree.nodes;
                group.call_tree_other_hits = tree.other_hits;
            }
            if let Some(stored) = facets.get(fingerprint.value()).map_err(db)? {
                group.facets = Some(groups::decode_facets(fingerprint.value(), stored.value())?);
            }
            write_record(out, &mut buf, Record::Group(group)).map_err(io_or_index)?;
            counts.groups += 1;
        }
        write_record(
            out,
            &mut buf,
            Record::End(pb::SnapshotEnd {
                jobs: counts.jobs,
                groups: counts.groups,
            }),
        )
        .map_err(io_or_index)?;
        out.flush().map_err(io_or_index)?;
        Ok(counts)
    }
}

/// Reads prost's varint length prefix; `None` at the end of `input`.
fn read_length(input: &mut impl BufRead) -> io::Result<Option<u64>> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let mut byte = [0u8];
        if input.read(&mut byte)? == 0 {
            return if shift == 0 {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
        value |= u64::from(byte[0] & 0x7f) << shift;
        if byte[0] & 0x80 == 0 {
            return Ok(Some(value));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "a record length is not a varint",
    ))
}

/// The next record of a snapshot stream; `None` at its end.
fn read_record(input: &mut impl BufRead, buf: &mut Vec<u8>) -> Result<Option<Record>, IndexError> {
    let cut = |e: io::Error| IndexError::Corrupt(format!("the snapshot is cut or unreadable: {e}"));
    let Some(len) = read_length(input).map_err(cut)? else {
        return Ok(None);
    };
    if len > MAX_RECORD_BYTES {
        return Err(IndexError::Corrupt(format!(
            "a snapshot record claims {len} bytes"
        )));
    }
    buf.resize(len as usize, 0);
    input.read_exact(buf).map_err(cut)?;
    let record =
        pb::SnapshotRecord::decode(buf.as_slice()).map_err(|source| IndexError::Decode {
            what: "snapshot record".into(),
            source,
        })?;
    record
        .record
        .map(Some)
        .ok_or_else(|| IndexError::Corrupt("an empty snapshot record".into()))
}

/// What a restore does with the membership the index holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum MembershipOnRestore {
    /// Takes the snapshot's (a snapshot without one, from before membership changes, leaves
    /// the index's as it is).
    FromSnapshot,
    /// Deletes it and records the backup, of this SHA-256, that seeds a new group
    /// ([`members::clear_for_backup`]).
    ClearForBackup {
        /// SHA-256 of the backup file.
        sha256: Vec<u8>,
    },
}

impl Index {
    /// The index as it is now, held by a read transaction until the source is dropped (pages
    /// the writer frees meanwhile are reused only after that).
    pub fn snapshot_source(&self) -> Result<SnapshotSource, IndexError> {
        let reader = self.bodies.reader();
        let txn = self.db.begin_read().map_err(db)?;
        let (index, term) = {
            let meta_table = txn.open_table(META).map_err(db)?;
            let get = |key: &str| -> Result<u64, IndexError> {
                Ok(meta_table.get(key).map_err(db)?.map_or(0, |v| v.value()))
            };
            (get(meta::APPLIED_INDEX)?, get(meta::APPLIED_TERM)?)
        };
        Ok(SnapshotSource {
            txn,
            reader,
            index,
            term,
        })
    }

    /// Replaces the whole index with the snapshot stream read from `input` (written by
    /// [`SnapshotSource::write_to`]), in one durable write transaction: on any error (a cut or
    /// corrupt stream, counts that do not match its end record) the index is left as it was.
    /// Returns the log index and term the snapshot reflects.
    pub fn restore_from(&self, input: &mut impl BufRead) -> Result<(u64, u64), IndexError> {
        self.restore_stream(input, MembershipOnRestore::FromSnapshot)
    }

    /// As [`Index::restore_from`], for a backup seeding a new group (`--restore`): the
    /// backed-up group's membership is deleted in the same durable transaction, since the new
    /// group's is its own (`--peers`), and the backup is recorded ([`Index::restored_from`]:
    /// `sha256`, the SHA-256 of the backup file, 32 bytes, and the header's applied index and
    /// term). A crash leaves the old index or the restored one without a membership, never the
    /// backup's jobs under the old group's members.
    pub fn restore_backup_from(
        &self,
        input: &mut impl BufRead,
        sha256: &[u8],
    ) -> Result<(u64, u64), IndexError> {
        self.restore_stream(
            input,
            MembershipOnRestore::ClearForBackup {
                sha256: sha256.to_vec(),
            },
        )
    }

    fn restore_stream(
        &self,
        input: &mut impl BufRead,
        membership: MembershipOnRestore,
    ) -> Result<(u64, u64), IndexError> {
        let mut buf = Vec::new();
        let header = match read_record(input, &mut buf)? {
            Some(Record::Header(header)) => header,
            _ => {
                return Err(IndexError::Corrupt(
                    "the snapshot does not start with its header".into(),
                ));
            }
        };
        let mut end = None;
        self.restore_records(&header, membership, || {
            if end.is_some() {
                return Ok(None);
            }
            match read_record(input, &mut buf)? {
                Some(Record::End(e)) => {
                    end = Some(e);
                    Ok(None)
                }
                Some(Record::Header(_)) => Err(IndexError::Corrupt(
                    "a second header inside the snapshot".into(),
                )),
                Some(record) => Ok(Some(record)),
                None => Err(IndexError::Corrupt(
                    "the snapshot ends before its end record".into(),
                )),
            }
        })
        .map(|counts| (counts, header.applied_index, header.applied_term))
        .and_then(|(counts, index, term)| {
            let end = end.unwrap_or_default();
            if (end.jobs, end.groups) != (counts.jobs, counts.groups) {
                return Err(IndexError::Corrupt(format!(
                    "the snapshot holds {} jobs and {} groups but says {} and {}",
                    counts.jobs, counts.groups, end.jobs, end.groups
                )));
            }
            Ok((index, term))
        })
    }

    /// Replaces the whole index with `data`, one `IndexSnapshot` message as masters before
    /// streamed snapshots sent it, which reflects log entry `index` of `term`. One durable
    /// transaction: a crash leaves the old index or the new.
    pub fn restore(&self, data: &[u8], index: u64, term: u64) -> Result<(), IndexError> {
        let snapshot = pb::IndexSnapshot::decode(data).map_err(|source| IndexError::Decode {
            what: "snapshot".into(),
            source,
        })?;
        let header = pb::SnapshotHeader {
            version: snapshot.version,
            applied_index: index,
            applied_term: term,
            next_sequence: snapshot.next_sequence,
            membership: None,
        };
        let mut records = snapshot
            .jobs
            .into_iter()
            .map(Record::Job)
            .chain(snapshot.groups.into_iter().map(Record::Group));
        self.restore_records(&header, MembershipOnRestore::FromSnapshot, || {
            Ok(records.next())
        })?;
        Ok(())
    }

    /// Replaces every table with the jobs and groups `next` yields (until `None`), then sets
    /// the applied index of `header`; commits only if every record was read and stored.
    fn restore_records(
        &self,
        header: &pb::SnapshotHeader,
        membership: MembershipOnRestore,
        mut next: impl FnMut() -> Result<Option<Record>, IndexError>,
    ) -> Result<SnapshotCounts, IndexError> {
        let txn = self.db.begin_write().map_err(db)?;
        // Every body is replaced: the files that held the old ones go once this commits.
        let mut bodies = BodyWriter::open(&txn, &self.bodies)?;
        bodies.clear()?;
        for table in [
            JOBS,
            SPECS,
            RESULTS,
            body_tables::INLINE_SPECS,
            body_tables::INLINE_RESULTS,
            GROUPS,
            groups::TREES,
            super::facets::FACETS,
            missing::JOBS,
            missing::SETS,
        ] {
            txn.delete_table(table).map_err(db)?;
        }
        txn.delete_table(missing::FILES).map_err(db)?;
        // An index from before missing sets (a snapshot restored as it opens) loses that layout.
        txn.delete_table(missing::ROWS_BEFORE_SETS).map_err(db)?;
        txn.delete_table(BY_SEQUENCE).map_err(db)?;
        txn.delete_table(OPEN).map_err(db)?;
        txn.delete_table(META).map_err(db)?;
        let from_backup = matches!(membership, MembershipOnRestore::ClearForBackup { .. });
        match (membership, &header.membership) {
            (MembershipOnRestore::ClearForBackup { sha256 }, _) => {
                let restored_from = v1::RestoredFrom {
                    sha256,
                    applied_index: header.applied_index,
                    applied_term: header.applied_term,
                };
                members::clear_for_backup(&txn, &restored_from)?;
            }
            (MembershipOnRestore::FromSnapshot, Some(membership)) => {
                let mut table = txn.open_table(members::MEMBERSHIP).map_err(db)?;
                members::write(&mut table, membership)?;
            }
            // A snapshot from a master before membership changes has none: the index's stays.
            (MembershipOnRestore::FromSnapshot, None) => {}
        }
        let mut counts = SnapshotCounts::default();
        {
            let mut jobs = txn.open_table(JOBS).map_err(db)?;
            let mut specs = txn.open_table(SPECS).map_err(db)?;
            let mut results = txn.open_table(RESULTS).map_err(db)?;
            let mut by_sequence = txn.open_table(BY_SEQUENCE).map_err(db)?;
            let mut open = txn.open_table(OPEN).map_err(db)?;
            let mut group_tables = groups::GroupTables::open(&txn)?;
            let mut meta_table = txn.open_table(META).map_err(db)?;
            let mut missing_tables = missing::MissingTables::open(&txn)?;
            let mut states = [0u64; 4];
            while let Some(record) = next()? {
                match record {
                    Record::Job(job) => {
                        counts.jobs += 1;
                        let Some(mut record) = job.record else {
                            continue;
                        };
                        // Version 1 had no projects: its jobs are `default`'s ([`keys::upgrade`]).
                        if header.version < 2 {
                            record.job_id = keys::job_key(DEFAULT_PROJECT, &record.job_id);
                        }
                        let id = record.job_id.as_str();
                        jobs.insert(id, record.encode_to_vec().as_slice())
                            .map_err(db)?;
                        // Finished jobs have no spec (see `SPECS`), unless they lacked a file.
                        // A version-1 spec gets its index key and project, as a version-2
                        // leader stores it.
                        if !job.spec.is_empty() {
                            let spec = match v1::JobSpec::decode(job.spec.as_slice()) {
                                Ok(mut spec) if header.version < 2 => {
                                    spec.job_id = id.to_owned();
                                    spec.project = DEFAULT_PROJECT.to_owned();
                                    spec.encode_to_vec()
                                }
                                _ => job.spec,
                            };
                            bodies.put(&mut specs, id, &spec)?;
                        }
                        if !job.result_zstd.is_empty() {
                            bodies.put(&mut results, id, &job.result_zstd)?;
                        }
                        by_sequence.insert(record.sequence, id).map_err(db)?;
                        // The missing-files index is an index over the records' lists.
                        missing_tables.record(
                            id,
                            &record.missing,
                            record.finished_at_ms,
                            &record.fingerprint,
                        )?;
                        let state =
                            JobState::try_from(record.state).unwrap_or(JobState::Unspecified);
                        if !is_terminal(state) {
                            open.insert(record.sequence, id).map_err(db)?;
                        }
                        match state {
                            JobState::Queued => states[0] += 1,
                            JobState::Running => states[1] += 1,
                            JobState::Completed => states[2] += 1,
                            JobState::Failed => states[3] += 1,
                            JobState::Unspecified => {}
                        }
                    }
                    Record::Group(mut group) => {
                        counts.groups += 1;
                        if group.project.is_empty() {
                            group.project = DEFAULT_PROJECT.to_owned();
                        }
                        let key = keys::group_key(&group.project, &group.fingerprint);
                        group_tables.restore(&key, group)?;
                    }
                    Record::Header(_) | Record::End(_) => {
                        return Err(IndexError::Corrupt(
                            "a header or end record inside the snapshot".into(),
                        ));
                    }
                }
            }
            for (key, value) in [
                // A restored index is of this schema (whatever version wrote the snapshot).
                (super::migrate::SCHEMA_KEY, u64::from(SCHEMA_VERSION)),
                (groups::TREES_APART_KEY, 1),
                (meta::QUEUED, states[0]),
                (meta::RUNNING, states[1]),
                (meta::COMPLETED, states[2]),
                (meta::FAILED, states[3]),
                (meta::NEXT_SEQUENCE, header.next_sequence),
            ] {
                meta_table.insert(key, value).map_err(db)?;
            }
        }
        let mut retired = bodies.take_retired();
        drop(bodies);
        {
            let mut applier = Applier::new(&txn, &self.bodies)?;
            applier.set_applied(header.applied_index, header.applied_term)?;
            retired.extend(applier.take_retired());
        }
        body_tables::sync(&self.bodies)?;
        if from_backup {
            crate::failpoints::point!(crate::failpoints::RESTORE_BEFORE_COMMIT);
        }
        txn.commit().map_err(db)?;
        self.bodies.retire(retired);
        body_tables::delete_retired(&self.bodies);
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;
    use crate::index::command;

    /// An index with two jobs (one completed, in a group, lacking a file) applied up to 4.
    fn sample(path: &std::path::Path) -> Index {
        let index = Index::open_file(path).unwrap();
        let txn = index.database().begin_write().unwrap();
        {
            let mut applier = Applier::new(&txn, index.bodies()).unwrap();
            for c in [
                command::submit("a", v1::JobKind::Native, vec![7], "k", 1),
                command::submit("b", v1::JobKind::Js, vec![8], "k2", 2),
                command::lease("a", "w", "", 1, 3),
                command::with_call_tree(
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
                    // A hang's call tree: its group's travels with the group.
                    vec![v1::CallTreeNode {
                        name: "main".into(),
                        hits: 3,
                        parent: -1,
                    }],
                ),
            ]
            .into_iter()
            // And its facets.
            .map(|c| {
                command::with_facets(
                    c,
                    Some(v1::ReportFacets {
                        release: "app@1.0+1".into(),
                        device: "iPhone13,2".into(),
                        ..Default::default()
                    }),
                )
            }) {
                applier.apply(&c).unwrap();
            }
            applier.set_applied(4, 2).unwrap();
        }
        txn.commit().unwrap();
        index
    }

    fn stream_of(index: &Index) -> Vec<u8> {
        let mut stream = Vec::new();
        index
            .snapshot_source()
            .unwrap()
            .write_to(&mut stream)
            .unwrap();
        stream
    }

    fn assert_same(one: &Index, two: &Index) {
        assert_eq!(two.applied().unwrap(), (4, 2));
        assert_eq!(two.job("a", true).unwrap(), one.job("a", true).unwrap());
        assert_eq!(
            two.list_jobs(None, 10, |_| true).unwrap(),
            one.list_jobs(None, 10, |_| true).unwrap()
        );
        assert_eq!(two.open_jobs().unwrap(), one.open_jobs().unwrap());
        let groups = one.groups(10, None, true, |_| true).unwrap();
        assert_eq!(groups[0].call_tree.len(), 1);
        assert_eq!(two.groups(10, None, true, |_| true).unwrap(), groups);
        let with_facets = |index: &Index| {
            let filter = super::super::listing::GroupFilter {
                with_facets: true,
                ..Default::default()
            };
            index.groups_page(10, filter, None, |_| true).unwrap().items
        };
        let facets = with_facets(one)[0]
            .facets
            .clone()
            .expect("the group's facets");
        assert_eq!(facets.releases.unwrap().top[0].value, "app@1.0+1");
        assert_eq!(with_facets(two), with_facets(one));
        assert_eq!(two.counts().unwrap(), one.counts().unwrap());
        // The missing-files index is rebuilt from the records, and the spec a job that lacked a
        // file keeps travels with it.
        let missing = one.missing_files(10, |_| true).unwrap();
        assert_eq!(missing.len(), 1);
        assert_eq!(two.missing_files(10, |_| true).unwrap(), missing);
        assert_eq!(two.spec("a").unwrap(), Some(vec![7]));
        // Every table, byte for byte.
        assert_eq!(two.digest().unwrap(), one.digest().unwrap());
    }

    #[test]
    fn a_restored_snapshot_stream_is_the_same_index() {
        let dir = tempfile::tempdir().unwrap();
        let one = sample(&dir.path().join("1.redb"));
        let two = Index::open_file(&dir.path().join("2.redb")).unwrap();
        let source = one.snapshot_source().unwrap();
        assert_eq!((source.index, source.term), (4, 2));
        let mut stream = Vec::new();
        let counts = source.write_to(&mut stream).unwrap();
        assert_eq!(counts, SnapshotCounts { jobs: 2, groups: 1 });
        let restored = two
            .restore_from(&mut BufReader::new(stream.as_slice()))
            .unwrap();
        assert_eq!(restored, (4, 2));
        assert_same(&one, &two);
    }

    #[test]
    fn a_backup_restores_without_its_group_in_one_transaction() {
        let dir = tempfile::tempdir().unwrap();
        let one = sample(&dir.path().join("1.redb"));
        let old_group = pb::Membership {
            members: vec![pb::MemberRecord {
                id: 7,
                address: "http://10.0.0.7:7000".into(),
                learner: false,
                seen: true,
            }],
            conf_state: vec![7],
        };
        assert!(one.seed_membership(&old_group).unwrap());
        let stream = stream_of(&one);
        let two = Index::open_file(&dir.path().join("2.redb")).unwrap();
        let own_group = pb::Membership {
            members: Vec::new(),
            conf_state: vec![1, 2, 3],
        };
        assert!(two.seed_membership(&own_group).unwrap());
        // A cut backup changes nothing, the membership included.
        let cut = &stream[..stream.len() - 3];
        let sha256 = [7u8; 32];
        assert!(
            two.restore_backup_from(&mut BufReader::new(cut), &sha256)
                .is_err()
        );
        assert_eq!(two.membership().unwrap(), Some(own_group));
        assert_eq!(two.restored_from().unwrap(), None);
        // A whole one holds the backed-up jobs and no membership: never the old group's; and
        // it says which backup seeded it.
        let restored = two
            .restore_backup_from(&mut BufReader::new(stream.as_slice()), &sha256)
            .unwrap();
        assert_eq!(restored, (4, 2));
        assert_eq!(two.membership().unwrap(), None);
        assert_eq!(
            two.restored_from().unwrap(),
            Some(v1::RestoredFrom {
                sha256: sha256.to_vec(),
                applied_index: 4,
                applied_term: 2,
            })
        );
        assert_eq!(two.job("a", true).unwrap(), one.job("a", true).unwrap());
        assert!(two.job("a", true).unwrap().is_some());
        assert_eq!(two.counts().unwrap(), one.counts().unwrap());
        // A snapshot between members of one group keeps the group's.
        let three = Index::open_file(&dir.path().join("3.redb")).unwrap();
        three
            .restore_from(&mut BufReader::new(stream.as_slice()))
            .unwrap();
        assert_eq!(three.membership().unwrap(), Some(old_group.clone()));
        assert_eq!(three.restored_from().unwrap(), None);
        // A snapshot installed on a restored master keeps its record of the backup (its own,
        // not the group's) and takes the group's membership.
        two.restore_from(&mut BufReader::new(stream.as_slice()))
            .unwrap();
        assert_eq!(two.membership().unwrap(), Some(old_group));
        assert_eq!(two.restored_from().unwrap().unwrap().applied_index, 4);
    }

    #[test]
    fn a_cut_stream_leaves_the_index_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let one = sample(&dir.path().join("1.redb"));
        let stream = stream_of(&one);
        // The index to replace holds a job of its own.
        let two = Index::open_file(&dir.path().join("2.redb")).unwrap();
        let txn = two.database().begin_write().unwrap();
        {
            let mut applier = Applier::new(&txn, two.bodies()).unwrap();
            applier
                .apply(&command::submit("c", v1::JobKind::Js, vec![9], "k3", 1))
                .unwrap();
            applier.set_applied(1, 1).unwrap();
        }
        txn.commit().unwrap();
        let before = two.digest().unwrap();
        assert_eq!((before.jobs, before.applied_index), (1, 1));
        // Cut anywhere: the end record (7 bytes with its length) cut in two or left out, the
        // stream cut half-way, nothing at all. A changed byte inside a record is the transfer's
        // checksums' to catch.
        for (what, bytes) in [
            ("cut in the end record", &stream[..stream.len() - 1]),
            ("without the end record", &stream[..stream.len() - 7]),
            ("cut in the middle", &stream[..stream.len() / 2]),
            ("empty", &stream[..0]),
        ] {
            let error = two.restore_from(&mut BufReader::new(bytes));
            assert!(error.is_err(), "{what}: restored");
            assert_eq!(two.digest().unwrap(), before, "{what}: the index changed");
        }
    }

    #[test]
    fn a_whole_snapshot_message_of_an_older_leader_is_restored() {
        let dir = tempfile::tempdir().unwrap();
        let one = sample(&dir.path().join("1.redb"));
        // The message an older leader built, from the same records.
        let stream = stream_of(&one);
        let mut input = BufReader::new(stream.as_slice());
        let mut buf = Vec::new();
        let mut message = pb::IndexSnapshot::default();
        while let Some(record) = read_record(&mut input, &mut buf).unwrap() {
            match record {
                Record::Header(h) => {
                    message.version = h.version;
                    message.next_sequence = h.next_sequence;
                }
                Record::Job(job) => message.jobs.push(job),
                Record::Group(group) => message.groups.push(group),
                Record::End(_) => {}
            }
        }
        let two = Index::open_file(&dir.path().join("2.redb")).unwrap();
        two.restore(&message.encode_to_vec(), 4, 2).unwrap();
        assert_same(&one, &two);
    }
}

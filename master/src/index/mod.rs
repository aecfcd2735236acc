//! The index: jobs, results and crash groups, as a deterministic state machine over the
//! replicated log, stored on disk in `redb` tables (not in memory).
//!
//! Every change is a [`Command`] (`symcluster.cluster.v1.Command`, a versioned prost message)
//! taken from a committed Raft entry; [`apply::Applier::apply`] is a pure function of the stored
//! state and the command (times travel inside the commands), so every master that applies the
//! same log holds the same index. The tables, all in the master's one `redb` file:
//!
//! | table | key → value |
//! |---|---|
//! | `jobs` | job key (`<project>/<job id>`, [`keys`]) → `JobRecord` (prost) |
//! | `spec_refs` | job key → where its encoded `symcluster.v1.JobSpec` is: the Raft log or the body files ([`bodies`]) |
//! | `result_refs` | job key → where its result JSON, zstd-compressed, is: the Raft log or the body files |
//! | `body_files` | body file number → its live bytes ([`body_tables`]) |
//! | `log_bodies` | Raft log segment → the live bytes referenced in it |
//! | `by_sequence` | submission sequence (1-based) → job key |
//! | `open` | submission sequence → job key, for queued and running jobs only |
//! | `groups` | `<project>/<fingerprint>` → `symcluster.v1.CrashGroup` (prost), without its call tree |
//! | `group_trees` | `<project>/<fingerprint>` → `symcluster.cluster.v1.GroupTree`: a hang group's merged call tree, bounded ([`groups`], [`tree`]) |
//! | `group_facets` | `<project>/<fingerprint>` → `symcluster.v1.GroupFacets`: a group's jobs by release, dist, OS, device and day, bounded ([`facets`]) |
//! | `missing_sets`, `missing_files`, `missing_jobs` | finished jobs that lacked a debug file or source map, by the set of files they lacked ([`missing`]) |
//! | `index_meta` | `applied_index`, `applied_term`, `next_sequence`, per-state counts, the active body file and its end → u64 |
//! | `membership` | `membership` → the master group's members and raft-rs's `ConfState` ([`members`]) |
//!
//! A job's bodies (its spec and result) are kept out of `redb`: in the Raft log entry that
//! brought them, or in append-only body files in `bodies/` beside it ([`bodies`]): the tables
//! hold 20- or 24-byte references.
//!
//! Reads open their own read transaction and never wait for the writer (redb is MVCC).
//! [`snapshot`] writes the tables as a stream of records and restores them from one;
//! [`digest`] hashes every table, to check that masters hold the same index.

pub mod apply;
pub mod bodies;
pub(crate) mod body_tables;
pub mod command;
pub mod digest;
pub mod facets;
pub mod groups;
pub mod keys;
pub mod listing;
pub mod members;
pub(crate) mod migrate;
pub(crate) mod missing;
pub mod snapshot;
pub mod tree;

use std::path::Path;
use std::sync::Arc;

use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

pub use pb::Command;

pub(crate) const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("jobs");
/// Where the encoded `JobSpec` (the report) of each job is ([`bodies::BodyRef`]); removed when
/// the job finishes unless its finishing command keeps it.
pub(crate) const SPECS: TableDefinition<&str, &[u8]> = TableDefinition::new("spec_refs");
/// Where each completed job's result (zstd) is ([`bodies::BodyRef`]).
pub(crate) const RESULTS: TableDefinition<&str, &[u8]> = TableDefinition::new("result_refs");
pub(crate) const BY_SEQUENCE: TableDefinition<u64, &str> = TableDefinition::new("by_sequence");
pub(crate) const OPEN: TableDefinition<u64, &str> = TableDefinition::new("open");
pub(crate) const GROUPS: TableDefinition<&str, &[u8]> = TableDefinition::new("groups");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("index_meta");

/// redb's page cache, bytes (its default, 1 GiB, would be most of a master's memory).
pub const CACHE_BYTES: usize = 64 << 20;

/// The schema version this master writes into [`Command::version`] and snapshots.
/// Version 2 keys jobs and groups by project ([`keys`]); version 3 records missing files and
/// adds `Resymbolicate`; version 4 gives a job's new revision the whole attempt budget
/// (`JobRecord.uncounted_attempts`, set by a version-4 `Resymbolicate` only, so that an older
/// entry replays as it applied then) and adds `Requeue.unstarted`; version 5's `Purge` takes
/// the jobs it deletes out of their crash groups (a group left with no job is deleted); version
/// 6's `Complete` and `Fail` name the revision they end and are ignored on another; version 7's
/// `Complete` carries the report's facets, counted in its group ([`facets`]; an older entry has
/// none and counts nothing, as it applied then). Every
/// version's group call trees are bounded ([`tree::MAX_GROUP_TREE_NODES`]) and stored apart
/// from the group records ([`groups`], moved once when an older index opens).
pub const SCHEMA_VERSION: u32 = 7;

/// Keys of [`META`].
pub(crate) mod meta {
    pub const APPLIED_INDEX: &str = "applied_index";
    pub const APPLIED_TERM: &str = "applied_term";
    pub const NEXT_SEQUENCE: &str = "next_sequence";
    pub const QUEUED: &str = "jobs_queued";
    pub const RUNNING: &str = "jobs_running";
    pub const COMPLETED: &str = "jobs_completed";
    pub const FAILED: &str = "jobs_failed";
}

/// Errors of the index store.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The database could not be opened, read or written.
    #[error("index store: {0}")]
    Db(#[source] Box<redb::Error>),
    /// A stored record or snapshot does not decode (corrupt, or from an incompatible version).
    #[error("index store: {what} does not decode: {source}")]
    Decode {
        /// What was being decoded.
        what: String,
        /// The decoder's error.
        source: prost::DecodeError,
    },
    /// A stored Raft record does not decode.
    #[error("index store: {0}")]
    Corrupt(String),
    /// A stored result does not decompress.
    #[error("index store: the result of job {job_id} does not decompress: {reason}")]
    Decompress {
        /// The job.
        job_id: String,
        /// Why (one line, from [`symcluster_proto::result::decompress`]).
        reason: String,
    },
}

/// Shorthand: a redb error of any kind becomes an [`IndexError::Db`].
pub(crate) fn db(e: impl Into<redb::Error>) -> IndexError {
    IndexError::Db(Box::new(e.into()))
}

/// Job states as stored (the API's enum).
pub use v1::JobState;

/// Whether `state` is COMPLETED or FAILED.
pub fn is_terminal(state: JobState) -> bool {
    matches!(state, JobState::Completed | JobState::Failed)
}

/// How a read returns a completed job's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultForm {
    /// Not at all.
    Omit,
    /// Decompressed JSON ([`JobView::result_json`]).
    Json,
    /// The stored zstd frame as it is ([`JobView::result_zstd`]).
    Zstd,
}

/// A job as read from the index.
#[derive(Debug, Clone, PartialEq)]
pub struct JobView {
    /// The stored record.
    pub record: pb::JobRecord,
    /// The result JSON (decompressed), when asked for ([`ResultForm::Json`]) and completed.
    pub result_json: Option<Vec<u8>>,
    /// The result as stored (one zstd frame), when asked for ([`ResultForm::Zstd`]) and
    /// completed.
    pub result_zstd: Option<Vec<u8>>,
}

impl JobView {
    /// The job's state.
    pub fn state(&self) -> JobState {
        JobState::try_from(self.record.state).unwrap_or(JobState::Unspecified)
    }
}

/// Jobs per state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Waiting for a slot.
    pub queued: u64,
    /// Leased.
    pub running: u64,
    /// Completed.
    pub completed: u64,
    /// Failed for good.
    pub failed: u64,
}

/// A job's scheduling fields, as its record holds them after a change: what applying a command
/// that changed the job returns ([`apply::Applied::Changed`]), and what the scheduler's
/// projection (`scheduler/projection.rs`) is rebuilt from after a restart or a snapshot
/// ([`Index::open_jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// The job.
    pub job_id: String,
    /// Its state after the change.
    pub state: JobState,
    /// Cache-affinity routing key.
    pub routing_key: String,
    /// Leases granted so far (the current attempt's number, 1-based; 0 before the first).
    pub attempts: u32,
    /// Of those, how many do not count against `max_attempts` (earlier revisions' attempts,
    /// leases that never started); never more than `attempts`.
    pub uncounted_attempts: u32,
    /// The worker holding the current lease, when running.
    pub running_on: Option<String>,
    /// The name of the token that worker registered with (empty in records of older
    /// versions), when running.
    pub lease_token: String,
    /// 1 for the first result; more when it runs again for a file that arrived.
    pub revision: u32,
    /// Native or JS (`v1::JobKind` as i32).
    pub kind: i32,
    /// When it was submitted, or queued again for a file that arrived: ms since the epoch, by
    /// the leader's clock at the time.
    pub queued_since_ms: u64,
}

impl JobSummary {
    /// The scheduling fields of `record`.
    pub fn of(record: &pb::JobRecord) -> Self {
        let state = JobState::try_from(record.state).unwrap_or(JobState::Unspecified);
        JobSummary {
            job_id: record.job_id.clone(),
            state,
            routing_key: record.routing_key.clone(),
            attempts: record.attempts,
            uncounted_attempts: record.uncounted_attempts.min(record.attempts),
            running_on: (state == JobState::Running).then(|| record.worker_id.clone()),
            lease_token: if state == JobState::Running {
                record.lease_token.clone()
            } else {
                String::new()
            },
            revision: record.revision.max(1),
            kind: record.kind,
            queued_since_ms: record.resymbolicated_at_ms.max(record.submitted_at_ms),
        }
    }
}

/// The index over the master's `redb` database and its body files (Raft's log is in segment
/// files beside them).
#[derive(Clone)]
pub struct Index {
    db: Arc<Database>,
    bodies: Arc<bodies::Bodies>,
}

impl Index {
    /// Creates the index's tables in `db` if they do not exist, migrates an older index
    /// ([`migrate`]; bodies stored in `redb` move to body files), and opens the body files in
    /// `bodies_dir` as the last durable commit left them ([`bodies::Bodies::open`]). Errors:
    /// the store's, and body files that do not match what the index references.
    pub fn open(database: Arc<Database>, bodies_dir: &Path) -> Result<Self, IndexError> {
        let txn = database.begin_write().map_err(db)?;
        for table in [JOBS, SPECS, RESULTS, GROUPS, groups::TREES, facets::FACETS] {
            txn.open_table(table).map_err(db)?;
        }
        txn.open_table(BY_SEQUENCE).map_err(db)?;
        txn.open_table(OPEN).map_err(db)?;
        txn.open_table(META).map_err(db)?;
        txn.open_table(body_tables::BODY_FILES).map_err(db)?;
        txn.open_table(body_tables::LOG_BODIES).map_err(db)?;
        txn.open_table(members::MEMBERSHIP).map_err(db)?;
        missing::MissingTables::open(&txn)?;
        txn.commit().map_err(db)?;
        migrate::migrate(&database)?;
        let txn = database.begin_write().map_err(db)?;
        let (position, live) = body_tables::recorded(&txn)?;
        let bodies = bodies::Bodies::open(bodies_dir, position, &live).map_err(|e| {
            IndexError::Corrupt(format!("body files in {}: {e}", bodies_dir.display()))
        })?;
        let moved = body_tables::move_inline(&txn, &bodies)?;
        if moved > 0 {
            body_tables::sync(&bodies)?;
            txn.commit().map_err(db)?;
            tracing::info!(
                bodies = moved,
                "index migrated: job bodies moved to body files"
            );
        } else {
            txn.abort().map_err(db)?;
        }
        Ok(Index {
            db: database,
            bodies: Arc::new(bodies),
        })
    }

    /// Opens (or creates) the index in the `redb` file at `path` with its body files in the
    /// directory beside it named as the file with the extension `bodies` (`master.redb`:
    /// `master.bodies/`). Errors as [`Index::open_database`] and [`Index::open`].
    pub fn open_file(path: &Path) -> Result<Self, IndexError> {
        Index::open(Self::open_database(path)?, &path.with_extension("bodies"))
    }

    /// The body files.
    pub fn bodies(&self) -> &Arc<bodies::Bodies> {
        &self.bodies
    }

    /// The Raft log segments (sequence numbers) the last commit references bodies in.
    /// Errors: the store's.
    pub fn log_segments_in_use(&self) -> Result<std::collections::BTreeSet<u64>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let table = read.open_table(body_tables::LOG_BODIES).map_err(db)?;
        body_tables::log_segments_in_use(&table)
    }

    /// Opens (or creates) the master's database file at `path`.
    pub fn open_database(path: &Path) -> Result<Arc<Database>, IndexError> {
        Ok(Arc::new(
            Database::builder()
                .set_cache_size(CACHE_BYTES)
                .create(path)
                .map_err(db)?,
        ))
    }

    /// The database (for Raft's storage, which shares it).
    pub fn database(&self) -> &Arc<Database> {
        &self.db
    }

    fn meta_value(&self, key: &str) -> Result<u64, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let table = read.open_table(META).map_err(db)?;
        Ok(table.get(key).map_err(db)?.map_or(0, |v| v.value()))
    }

    /// The last log index applied to the index, and its term (0, 0 for an empty index).
    pub fn applied(&self) -> Result<(u64, u64), IndexError> {
        Ok((
            self.meta_value(meta::APPLIED_INDEX)?,
            self.meta_value(meta::APPLIED_TERM)?,
        ))
    }

    /// A job by id; `with_result` also reads (and decompresses) its result.
    pub fn job(&self, job_id: &str, with_result: bool) -> Result<Option<JobView>, IndexError> {
        let form = if with_result {
            ResultForm::Json
        } else {
            ResultForm::Omit
        };
        self.job_with(job_id, form)
    }

    /// A job by id, with its result in `form`. Errors: the store's, a corrupt record, and
    /// (`ResultForm::Json` only) a stored result that does not decompress.
    pub fn job_with(&self, job_id: &str, form: ResultForm) -> Result<Option<JobView>, IndexError> {
        self.read_job(job_id, |_| form)
    }

    /// A job by id, with its result in `form` only when it is finished (COMPLETED or
    /// FAILED): what a watcher wants, read in one read transaction. Errors as
    /// [`Index::job_with`].
    pub fn job_with_result_when_finished(
        &self,
        job_id: &str,
        form: ResultForm,
    ) -> Result<Option<JobView>, IndexError> {
        self.read_job(job_id, |state| {
            if is_terminal(state) {
                form
            } else {
                ResultForm::Omit
            }
        })
    }

    /// Reads job `job_id` and then its result in the form `form_for(its state)` chooses, in one
    /// read transaction.
    fn read_job(
        &self,
        job_id: &str,
        form_for: impl FnOnce(JobState) -> ResultForm,
    ) -> Result<Option<JobView>, IndexError> {
        let reader = self.bodies.reader();
        let read = self.db.begin_read().map_err(db)?;
        let jobs = read.open_table(JOBS).map_err(db)?;
        let Some(bytes) = jobs.get(job_id).map_err(db)? else {
            return Ok(None);
        };
        let record = decode_record(job_id, bytes.value())?;
        let mut view = JobView {
            record,
            result_json: None,
            result_zstd: None,
        };
        let form = form_for(view.state());
        if form != ResultForm::Omit {
            let results = read.open_table(RESULTS).map_err(db)?;
            if let Some(blob) = body_tables::read(&results, &reader, job_id)? {
                if form == ResultForm::Json {
                    view.result_json = Some(decompress(job_id, &blob)?);
                } else {
                    view.result_zstd = Some(blob);
                }
            }
        }
        Ok(Some(view))
    }

    /// Whether a job exists.
    pub fn contains(&self, job_id: &str) -> Result<bool, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let jobs = read.open_table(JOBS).map_err(db)?;
        Ok(jobs.get(job_id).map_err(db)?.is_some())
    }

    /// A job's encoded `JobSpec`. Errors: the store's, and a body file that is gone or
    /// corrupt.
    pub fn spec(&self, job_id: &str) -> Result<Option<Vec<u8>>, IndexError> {
        let reader = self.bodies.reader();
        let read = self.db.begin_read().map_err(db)?;
        let specs = read.open_table(SPECS).map_err(db)?;
        body_tables::read(&specs, &reader, job_id)
    }

    /// Queued and running jobs, oldest first.
    pub fn open_jobs(&self) -> Result<Vec<JobSummary>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let open = read.open_table(OPEN).map_err(db)?;
        let jobs = read.open_table(JOBS).map_err(db)?;
        let mut out = Vec::with_capacity(open.len().map_err(db)? as usize);
        for entry in open.iter().map_err(db)? {
            let (_, id) = entry.map_err(db)?;
            let Some(bytes) = jobs.get(id.value()).map_err(db)? else {
                continue;
            };
            out.push(JobSummary::of(&decode_record(id.value(), bytes.value())?));
        }
        Ok(out)
    }

    /// The finished jobs (index keys) of `project` (of every project when `None`) that lack
    /// one of the files `file_keys` name (`MissingFile.key`), each once ([`missing::jobs_lacking`]).
    pub fn jobs_lacking(
        &self,
        project: Option<&str>,
        file_keys: &[String],
    ) -> Result<std::collections::BTreeSet<String>, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        missing::jobs_lacking(&read, project, file_keys)
    }

    /// Jobs per state.
    pub fn counts(&self) -> Result<Counts, IndexError> {
        let read = self.db.begin_read().map_err(db)?;
        let table = read.open_table(META).map_err(db)?;
        let get = |key: &str| -> Result<u64, IndexError> {
            Ok(table.get(key).map_err(db)?.map_or(0, |v| v.value()))
        };
        Ok(Counts {
            queued: get(meta::QUEUED)?,
            running: get(meta::RUNNING)?,
            completed: get(meta::COMPLETED)?,
            failed: get(meta::FAILED)?,
        })
    }
}

pub(crate) fn decode_record(job_id: &str, bytes: &[u8]) -> Result<pb::JobRecord, IndexError> {
    pb::JobRecord::decode(bytes).map_err(|source| IndexError::Decode {
        what: format!("job {job_id}"),
        source,
    })
}

/// zstd level for results: fast (results are written once per job on every master).
pub(crate) const ZSTD_LEVEL: i32 = 1;

pub(crate) fn compress(json: &[u8]) -> Vec<u8> {
    // Compressing from memory into memory cannot fail.
    zstd::bulk::compress(json, ZSTD_LEVEL).unwrap_or_default()
}

/// Largest result accepted, bytes of JSON (a big native crash symbolicates to a few MB).
pub const MAX_RESULT_BYTES: u64 = symcluster_proto::result::MAX_RESULT_BYTES as u64;

/// Checks a result that a worker compressed (`CompleteJobRequest.result_zstd`) without
/// decompressing it: exactly one zstd frame (RFC 8878) whose header records a content size of
/// at most [`MAX_RESULT_BYTES`]. `Err` holds a one-line reason.
pub fn check_result_zstd(blob: &[u8]) -> Result<(), String> {
    symcluster_proto::result::checked_len(blob).map(|_| ())
}

/// A stored result's JSON: the same bounded decompression (into the size the frame header
/// records, at most 64 MiB) that clients use, so a corrupt frame cannot make the leader
/// allocate without limit.
pub(crate) fn decompress(job_id: &str, blob: &[u8]) -> Result<Vec<u8>, IndexError> {
    symcluster_proto::result::decompress(blob).map_err(|reason| IndexError::Decompress {
        job_id: job_id.to_owned(),
        reason,
    })
}

/// A group's report kind: its `kind`, or for a group made before kinds were recorded, `hang`
/// when it sums call trees (`has_tree`: only hangs had them) and `crash` otherwise.
pub fn group_kind(group: &v1::CrashGroup, has_tree: bool) -> &str {
    match group.kind.as_str() {
        "" if has_tree => "hang",
        "" => "crash",
        kind => kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_compressed_result_is_checked_without_decompressing() {
        let json = br#"{"status":"completed"}"#.repeat(100);
        let frame = zstd::bulk::compress(&json, 1).unwrap();
        assert_eq!(check_result_zstd(&frame), Ok(()));
        assert_eq!(decompress("j", &frame).unwrap(), json);

        assert_eq!(
            check_result_zstd(&json),
            Err("result_zstd is not a zstd frame".to_owned())
        );
        assert!(check_result_zstd(&frame[..frame.len() - 1]).is_err());
        let mut two = frame.clone();
        two.extend_from_slice(&frame);
        assert_eq!(
            check_result_zstd(&two),
            Err(format!(
                "result_zstd holds {} bytes after its first frame",
                frame.len()
            ))
        );
        // A streaming encoder that never learnt the size leaves it out of the header.
        let mut unsized_frame = Vec::new();
        let mut encoder = zstd::stream::Encoder::new(&mut unsized_frame, 1).unwrap();
        std::io::Write::write_all(&mut encoder, &json).unwrap();
        encoder.finish().unwrap();
        assert_eq!(
            check_result_zstd(&unsized_frame),
            Err("result_zstd does not record its content size in the frame header".to_owned())
        );
        // 65 MiB of zeros: a tiny frame claiming more than the limit.
        let big =
            zstd::bulk::compress(&vec![0u8; (MAX_RESULT_BYTES + (1 << 20)) as usize], 1).unwrap();
        assert_eq!(
            check_result_zstd(&big),
            Err(format!(
                "the result is {} bytes; at most {MAX_RESULT_BYTES} are accepted",
                MAX_RESULT_BYTES + (1 << 20)
            ))
        );
    }
}

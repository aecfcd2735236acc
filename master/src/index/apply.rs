//! Applying committed commands to the index tables, inside the caller's write transaction.
//!
//! The rules (each a pure function of the stored record and the command):
//! - `Submit` creates a QUEUED job; ignored when the id exists (submits are idempotent).
//! - `Lease` with `attempt = attempts + 1` makes a QUEUED job RUNNING on a worker.
//! - `Requeue` for the current attempt puts a RUNNING job back to QUEUED.
//! - `Complete` from any attempt completes a job that is not finished: the first completion
//!   wins, later ones are ignored, so racing workers complete a job once; it adds the job to its
//!   crash group.
//! - `Fail` fails a job that is not finished.
//! - `Purge` deletes finished jobs that finished before its cut-off.

use prost::Message;
use redb::{ReadableTable, Table, WriteTransaction};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{
    BY_SEQUENCE, GROUPS, IndexError, JOBS, JobState, META, OPEN, RESULTS, SPECS, compress, db,
    decode_record, is_terminal, keys, meta,
};

/// What applying one command changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// Job `job_id` changed; it is now in `state`.
    Changed {
        /// The job.
        job_id: String,
        /// Its new state.
        state: JobState,
    },
    /// A purge deleted this many jobs.
    Purged(u64),
    /// No effect (existing id, stale attempt, finished or unknown job, empty entry).
    Ignored,
}

/// The index tables, open in one write transaction.
pub struct Applier<'t> {
    jobs: Table<'t, &'static str, &'static [u8]>,
    specs: Table<'t, &'static str, &'static [u8]>,
    results: Table<'t, &'static str, &'static [u8]>,
    by_sequence: Table<'t, u64, &'static str>,
    open: Table<'t, u64, &'static str>,
    groups: Table<'t, &'static str, &'static [u8]>,
    meta: Table<'t, &'static str, u64>,
}

fn state_key(state: JobState) -> Option<&'static str> {
    match state {
        JobState::Queued => Some(meta::QUEUED),
        JobState::Running => Some(meta::RUNNING),
        JobState::Completed => Some(meta::COMPLETED),
        JobState::Failed => Some(meta::FAILED),
        JobState::Unspecified => None,
    }
}

impl<'t> Applier<'t> {
    /// Opens the tables in `txn`.
    pub fn new(txn: &'t WriteTransaction) -> Result<Self, IndexError> {
        Ok(Applier {
            jobs: txn.open_table(JOBS).map_err(db)?,
            specs: txn.open_table(SPECS).map_err(db)?,
            results: txn.open_table(RESULTS).map_err(db)?,
            by_sequence: txn.open_table(BY_SEQUENCE).map_err(db)?,
            open: txn.open_table(OPEN).map_err(db)?,
            groups: txn.open_table(GROUPS).map_err(db)?,
            meta: txn.open_table(META).map_err(db)?,
        })
    }

    fn meta_get(&self, key: &str) -> Result<u64, IndexError> {
        Ok(self.meta.get(key).map_err(db)?.map_or(0, |v| v.value()))
    }

    fn meta_add(&mut self, key: &str, delta: i64) -> Result<(), IndexError> {
        let value = self.meta_get(key)?.saturating_add_signed(delta);
        self.meta.insert(key, value).map_err(db)?;
        Ok(())
    }

    /// Records that log entry `index` of `term` is applied (also for entries with no command).
    pub fn set_applied(&mut self, index: u64, term: u64) -> Result<(), IndexError> {
        self.meta.insert(meta::APPLIED_INDEX, index).map_err(db)?;
        self.meta.insert(meta::APPLIED_TERM, term).map_err(db)?;
        Ok(())
    }

    /// Applies `command`. Errors are storage errors only; a command that does not fit the
    /// job's state is [`Applied::Ignored`].
    pub fn apply(&mut self, command: &pb::Command) -> Result<Applied, IndexError> {
        use pb::command::Kind;
        let upgraded = keys::upgrade(command);
        let command = upgraded.as_ref().unwrap_or(command);
        let Some(kind) = &command.kind else {
            return Ok(Applied::Ignored);
        };
        match kind {
            Kind::Submit(c) => self.submit(c),
            Kind::Lease(c) => self.update(&c.job_id, |job| {
                if job.state != JobState::Queued as i32 || c.attempt != job.attempts + 1 {
                    return false;
                }
                job.state = JobState::Running as i32;
                job.attempts = c.attempt;
                job.worker_id = c.worker_id.clone();
                true
            }),
            Kind::Requeue(c) => self.update(&c.job_id, |job| {
                if job.state != JobState::Running as i32 || c.attempt != job.attempts {
                    return false;
                }
                job.state = JobState::Queued as i32;
                job.error = c.reason.clone();
                job.worker_id.clear();
                true
            }),
            Kind::Complete(c) => self.complete(c),
            Kind::Fail(c) => self.update(&c.job_id, |job| {
                if is_terminal(job_state(job)) {
                    return false;
                }
                job.state = JobState::Failed as i32;
                job.finished_at_ms = c.at_ms;
                job.error = c.error.clone();
                true
            }),
            Kind::Purge(c) => self.purge(c.finished_before_ms),
        }
    }

    fn submit(&mut self, c: &pb::Submit) -> Result<Applied, IndexError> {
        if self.jobs.get(c.job_id.as_str()).map_err(db)?.is_some() {
            return Ok(Applied::Ignored);
        }
        let sequence = self.meta_get(meta::NEXT_SEQUENCE)?.max(1);
        self.meta
            .insert(meta::NEXT_SEQUENCE, sequence + 1)
            .map_err(db)?;
        // A report that cannot be read is stored FAILED at once, with no spec and no queue entry.
        let state = if c.unreadable.is_empty() {
            JobState::Queued
        } else {
            JobState::Failed
        };
        let record = pb::JobRecord {
            job_id: c.job_id.clone(),
            kind: c.kind,
            state: state as i32,
            routing_key: c.routing_key.clone(),
            attempts: 0,
            submitted_at_ms: c.at_ms,
            finished_at_ms: if is_terminal(state) { c.at_ms } else { 0 },
            error: c.unreadable.clone(),
            worker_id: String::new(),
            fingerprint: String::new(),
            sequence,
        };
        let id = c.job_id.as_str();
        self.jobs
            .insert(id, record.encode_to_vec().as_slice())
            .map_err(db)?;
        self.by_sequence.insert(sequence, id).map_err(db)?;
        if !is_terminal(state) {
            self.specs.insert(id, c.spec.as_slice()).map_err(db)?;
            self.open.insert(sequence, id).map_err(db)?;
        }
        if let Some(key) = state_key(state) {
            self.meta_add(key, 1)?;
        }
        Ok(Applied::Changed {
            job_id: c.job_id.clone(),
            state,
        })
    }

    fn complete(&mut self, c: &pb::Complete) -> Result<Applied, IndexError> {
        let group = c.group.as_ref().filter(|g| !g.fingerprint.is_empty());
        let applied = self.update(&c.job_id, |job| {
            if is_terminal(job_state(job)) {
                return false;
            }
            job.state = JobState::Completed as i32;
            job.finished_at_ms = c.at_ms;
            job.worker_id = c.worker_id.clone();
            job.error.clear();
            job.fingerprint = group.map(|g| g.fingerprint.clone()).unwrap_or_default();
            true
        })?;
        if let Applied::Changed { .. } = applied {
            let blob = if c.result_zstd.is_empty() {
                compress(&c.result_json)
            } else {
                c.result_zstd.clone()
            };
            self.results
                .insert(c.job_id.as_str(), blob.as_slice())
                .map_err(db)?;
            if let Some(group) = group {
                self.add_to_group(group, &c.job_id, c.at_ms)?;
            }
        }
        Ok(applied)
    }

    fn add_to_group(
        &mut self,
        key: &v1::CrashGroupKey,
        job_key: &str,
        at_ms: u64,
    ) -> Result<(), IndexError> {
        let (project, job_id) = keys::split(job_key);
        let group_key = keys::group_key(project, &key.fingerprint);
        let existing = self
            .groups
            .get(group_key.as_str())
            .map_err(db)?
            .map(|v| v1::CrashGroup::decode(v.value()));
        let mut group = match existing {
            Some(Ok(group)) => group,
            Some(Err(source)) => {
                return Err(IndexError::Decode {
                    what: format!("group {}", key.fingerprint),
                    source,
                });
            }
            None => v1::CrashGroup {
                fingerprint: key.fingerprint.clone(),
                title: key.title.clone(),
                count: 0,
                first_seen_ms: at_ms,
                last_seen_ms: at_ms,
                key_stack: key.key_stack.clone(),
                last_job_id: job_id.to_owned(),
                project: project.to_owned(),
            },
        };
        group.count += 1;
        group.first_seen_ms = group.first_seen_ms.min(at_ms);
        group.last_seen_ms = group.last_seen_ms.max(at_ms);
        group.last_job_id = job_id.to_owned();
        self.groups
            .insert(group_key.as_str(), group.encode_to_vec().as_slice())
            .map_err(db)?;
        Ok(())
    }

    fn update(
        &mut self,
        job_id: &str,
        f: impl FnOnce(&mut pb::JobRecord) -> bool,
    ) -> Result<Applied, IndexError> {
        let Some(bytes) = self.jobs.get(job_id).map_err(db)? else {
            return Ok(Applied::Ignored);
        };
        let mut record = decode_record(job_id, bytes.value())?;
        drop(bytes);
        let before = job_state(&record);
        if !f(&mut record) {
            return Ok(Applied::Ignored);
        }
        let after = job_state(&record);
        self.jobs
            .insert(job_id, record.encode_to_vec().as_slice())
            .map_err(db)?;
        if before != after {
            if let Some(key) = state_key(before) {
                self.meta_add(key, -1)?;
            }
            if let Some(key) = state_key(after) {
                self.meta_add(key, 1)?;
            }
            if is_terminal(after) {
                self.open.remove(record.sequence).map_err(db)?;
                // The report is only needed to lease the job: a finished job keeps its record
                // and result, not the (often 100+ KB) report, so the file stays bounded.
                self.specs.remove(job_id).map_err(db)?;
            }
        }
        Ok(Applied::Changed {
            job_id: job_id.to_owned(),
            state: after,
        })
    }

    fn purge(&mut self, finished_before_ms: u64) -> Result<Applied, IndexError> {
        let mut doomed = Vec::new();
        for entry in self.by_sequence.iter().map_err(db)? {
            let (sequence, id) = entry.map_err(db)?;
            let Some(bytes) = self.jobs.get(id.value()).map_err(db)? else {
                continue;
            };
            let record = decode_record(id.value(), bytes.value())?;
            if record.submitted_at_ms >= finished_before_ms {
                // Every later job was submitted (so finished) after the cut-off.
                break;
            }
            if is_terminal(job_state(&record)) && record.finished_at_ms < finished_before_ms {
                doomed.push((sequence.value(), record));
            }
        }
        for (sequence, record) in &doomed {
            let id = record.job_id.as_str();
            self.jobs.remove(id).map_err(db)?;
            self.specs.remove(id).map_err(db)?;
            self.results.remove(id).map_err(db)?;
            self.by_sequence.remove(*sequence).map_err(db)?;
            if let Some(key) = state_key(job_state(record)) {
                self.meta_add(key, -1)?;
            }
        }
        Ok(Applied::Purged(doomed.len() as u64))
    }
}

fn job_state(job: &pb::JobRecord) -> JobState {
    JobState::try_from(job.state).unwrap_or(JobState::Unspecified)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::index::{Index, command};

    fn index() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().unwrap();
        let db = Index::open_database(&dir.path().join("master.redb")).unwrap();
        (dir, Index::open(Arc::clone(&db)).unwrap())
    }

    fn apply_all(index: &Index, commands: &[pb::Command]) -> Vec<Applied> {
        let txn = index.database().begin_write().unwrap();
        let out = {
            let mut applier = Applier::new(&txn).unwrap();
            commands.iter().map(|c| applier.apply(c).unwrap()).collect()
        };
        txn.commit().unwrap();
        out
    }

    fn group(fingerprint: &str) -> v1::CrashGroupKey {
        v1::CrashGroupKey {
            fingerprint: fingerprint.into(),
            title: "t".into(),
            key_stack: vec!["f (a.c:1)".into()],
        }
    }

    #[test]
    fn submit_is_idempotent() {
        let (_dir, index) = index();
        let applied = apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![1], "k", 1),
                command::submit("a", v1::JobKind::Native, vec![2], "k", 2),
            ],
        );
        assert_eq!(
            applied,
            vec![
                Applied::Changed {
                    job_id: "a".into(),
                    state: JobState::Queued
                },
                Applied::Ignored
            ]
        );
        let job = index.job("a", false).unwrap().unwrap();
        assert_eq!(job.record.submitted_at_ms, 1);
        assert_eq!(index.spec("a").unwrap(), Some(vec![1]));
    }

    #[test]
    fn a_job_completes_once_even_when_two_workers_race() {
        let (_dir, index) = index();
        let applied = apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![], "k", 1),
                command::lease("a", "w1", 1, 2),
                command::requeue("a", 1, "lease expired", 9),
                command::lease("a", "w2", 2, 9),
                // The slow w1 finishes first: accepted. w2's late result is ignored.
                command::complete("a", 1, "w1", b"{\"r\":1}".to_vec(), Some(group("g1")), 10),
                command::complete("a", 2, "w2", b"{\"r\":2}".to_vec(), Some(group("g1")), 11),
            ],
        );
        assert_eq!(applied[5], Applied::Ignored);
        let job = index.job("a", true).unwrap().unwrap();
        assert_eq!(job.state(), JobState::Completed);
        assert_eq!(job.record.worker_id, "w1");
        assert_eq!(job.record.finished_at_ms, 10);
        assert_eq!(job.result_json.as_deref(), Some(&b"{\"r\":1}"[..]));
        let groups = index.groups(10, |_| true).unwrap();
        assert_eq!((groups.len(), groups[0].count), (1, 1));
        assert_eq!(
            index.counts().unwrap(),
            crate::index::Counts {
                completed: 1,
                ..Default::default()
            }
        );
        assert!(index.open_jobs().unwrap().is_empty());
        // The report went with the lease; only the record and the result stay.
        assert_eq!(index.spec("a").unwrap(), None);
    }

    #[test]
    fn an_unreadable_report_is_stored_failed_in_one_command() {
        let (_dir, index) = index();
        let applied = apply_all(
            &index,
            &[command::submit_unreadable(
                "a",
                v1::JobKind::Native,
                b"not a report".to_vec(),
                "unrecognized report format",
                7,
            )],
        );
        assert_eq!(
            applied,
            vec![Applied::Changed {
                job_id: "a".into(),
                state: JobState::Failed
            }]
        );
        let job = index.job("a", false).unwrap().unwrap();
        assert_eq!(job.state(), JobState::Failed);
        assert_eq!(job.record.error, "unrecognized report format");
        assert_eq!(
            (job.record.submitted_at_ms, job.record.finished_at_ms),
            (7, 7)
        );
        assert_eq!(job.record.attempts, 0);
        assert_eq!(index.spec("a").unwrap(), None);
        assert!(index.open_jobs().unwrap().is_empty());
        assert_eq!(
            index.counts().unwrap(),
            crate::index::Counts {
                failed: 1,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_failed_job_keeps_its_record_and_drops_its_report() {
        let (_dir, index) = index();
        apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![1, 2, 3], "k", 1),
                command::submit("b", v1::JobKind::Native, vec![4], "k", 1),
                command::lease("a", "w1", 1, 2),
                command::fail("a", 1, "malformed report", 3),
            ],
        );
        let job = index.job("a", false).unwrap().unwrap();
        assert_eq!(job.state(), JobState::Failed);
        assert_eq!(job.record.error, "malformed report");
        assert_eq!(index.spec("a").unwrap(), None);
        // The queued job still has its report.
        assert_eq!(index.spec("b").unwrap(), Some(vec![4]));
    }

    #[test]
    fn stale_requeue_and_out_of_order_leases_are_ignored() {
        let (_dir, index) = index();
        let applied = apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Js, vec![], "k", 1),
                command::lease("a", "w1", 2, 2),
                command::lease("a", "w1", 1, 2),
                command::requeue("a", 0, "x", 3),
            ],
        );
        assert_eq!(applied[1], Applied::Ignored);
        assert_eq!(applied[3], Applied::Ignored);
        let open = index.open_jobs().unwrap();
        assert_eq!(open[0].running_on.as_deref(), Some("w1"));
        assert_eq!(open[0].attempts, 1);
    }

    #[test]
    fn purge_deletes_old_finished_jobs_only() {
        let (_dir, index) = index();
        apply_all(
            &index,
            &[
                command::submit("old", v1::JobKind::Native, vec![], "k", 1),
                command::fail("old", 0, "bad report", 2),
                command::submit("old-open", v1::JobKind::Native, vec![], "k", 3),
                command::submit("new", v1::JobKind::Native, vec![], "k", 100),
                command::fail("new", 0, "bad report", 101),
            ],
        );
        let applied = apply_all(&index, &[command::purge(50, 200)]);
        assert_eq!(applied, vec![Applied::Purged(1)]);
        assert!(index.job("old", false).unwrap().is_none());
        assert!(index.job("old-open", false).unwrap().is_some());
        assert!(index.job("new", false).unwrap().is_some());
        let counts = index.counts().unwrap();
        assert_eq!((counts.queued, counts.failed), (1, 1));
        let listed: Vec<String> = index
            .list_jobs(None, 10, |_| true)
            .unwrap()
            .into_iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(listed, ["new", "old-open"]);
    }
}

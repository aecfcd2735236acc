//! Applying committed commands to the index tables, inside the caller's write transaction.
//!
//! The rules (each a pure function of the stored record and the command):
//! - `Submit` creates a QUEUED job; ignored when the id exists (submits are idempotent).
//! - `Lease` with `attempt = attempts + 1` makes a QUEUED job RUNNING on a worker.
//! - `Requeue` for the current attempt puts a RUNNING job back to QUEUED; an `unstarted` one
//!   also takes that attempt out of the count against `max_attempts` (`uncounted_attempts`).
//! - `Complete` from any attempt completes a job that is not finished: the first completion
//!   wins, later ones are ignored, so racing workers complete a job once; it adds the job to its
//!   crash group. From version 6, a `Complete` naming another revision than the job's
//!   (`Complete.revision`; a record's 0 is revision 1) is stale and ignored: a late duplicate
//!   of a finished revision never completes the next one.
//! - `Fail` fails a job that is not finished; from version 6, only one naming the job's
//!   revision (`Fail.revision`), as `Complete`.
//! - `Complete` and `Fail` record the files the job lacked ([`super::missing`]); such a job keeps
//!   its spec, so that it can run again.
//! - `Resymbolicate` puts a finished job that lacked a file (and kept its spec) back in the
//!   queue as its next revision, with the whole attempt budget again (`uncounted_attempts`);
//!   its result stays until the next `Complete` replaces it, which also moves the job from its
//!   old crash group to its new one.
//! - `Purge` deletes finished jobs that finished before its cut-off; since version 5 it also
//!   takes them out of their crash groups ([`super::groups`]): a group left with no job is
//!   deleted.
//! - `MembersSeen` marks members of the group as seen ([`super::members`]); membership changes
//!   themselves are Raft's entries, written by [`Applier::set_membership`].

use prost::Message;
use redb::{ReadableTable, Table, WriteTransaction};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::bodies::{Bodies, InLog};
use super::body_tables::BodyWriter;
use super::{
    BY_SEQUENCE, IndexError, JOBS, JobState, JobSummary, META, OPEN, RESULTS, SPECS, compress, db,
    decode_record,
    groups::{GroupTables, Member},
    is_terminal, keys, members, meta,
    missing::MissingTables,
};

/// What applying one command changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A job changed: its record after the change. The scheduler's projection is made of
    /// these alone (`scheduler/projection.rs`); it never reads the index back.
    Changed {
        /// The job's scheduling fields after the change.
        job: JobSummary,
        /// For a `Lease` applied by an [`Applier::with_lease_specs`] (the leader's, which sends
        /// the lease), the job's spec (an encoded `v1::JobSpec`, as submitted) that the worker
        /// gets with it; `None` otherwise.
        spec: Option<Vec<u8>>,
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
    groups: GroupTables<'t>,
    meta: Table<'t, &'static str, u64>,
    membership: Table<'t, &'static str, &'static [u8]>,
    missing: MissingTables<'t>,
    /// The body files, and their live bytes.
    bodies: BodyWriter<'t>,
    /// Leases return the job's spec ([`Applier::with_lease_specs`]).
    lease_specs: bool,
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
    /// Opens the tables in `txn`; bodies go to `bodies` (the index's, [`super::Index::bodies`]).
    pub fn new(txn: &'t WriteTransaction, bodies: &'t Bodies) -> Result<Self, IndexError> {
        Ok(Applier {
            jobs: txn.open_table(JOBS).map_err(db)?,
            specs: txn.open_table(SPECS).map_err(db)?,
            results: txn.open_table(RESULTS).map_err(db)?,
            by_sequence: txn.open_table(BY_SEQUENCE).map_err(db)?,
            open: txn.open_table(OPEN).map_err(db)?,
            groups: GroupTables::open(txn)?,
            meta: txn.open_table(META).map_err(db)?,
            membership: txn.open_table(members::MEMBERSHIP).map_err(db)?,
            missing: MissingTables::open(txn)?,
            bodies: BodyWriter::open(txn, bodies)?,
            lease_specs: false,
        })
    }

    /// Whether an applied `Lease` returns the job's spec ([`Applied::Changed`]): on the leader
    /// only, which sends it to the worker; a follower does not read it.
    pub fn with_lease_specs(mut self, yes: bool) -> Self {
        self.lease_specs = yes;
        self
    }

    fn meta_get(&self, key: &str) -> Result<u64, IndexError> {
        Ok(self.meta.get(key).map_err(db)?.map_or(0, |v| v.value()))
    }

    fn meta_add(&mut self, key: &str, delta: i64) -> Result<(), IndexError> {
        let value = self.meta_get(key)?.saturating_add_signed(delta);
        self.meta.insert(key, value).map_err(db)?;
        Ok(())
    }

    /// Records that log entry `index` of `term` is applied (also for entries with no command),
    /// and where the body files end: the last call before the transaction commits.
    pub fn set_applied(&mut self, index: u64, term: u64) -> Result<(), IndexError> {
        self.meta.insert(meta::APPLIED_INDEX, index).map_err(db)?;
        self.meta.insert(meta::APPLIED_TERM, term).map_err(db)?;
        self.bodies.record(&mut self.meta)
    }

    /// The body files whose last body this transaction removed: hand them to
    /// [`Bodies::retire`] once it has committed.
    pub fn take_retired(&mut self) -> Vec<u32> {
        self.bodies.take_retired()
    }

    /// The group's membership as this transaction sees it.
    pub fn membership(&self) -> Result<Option<pb::Membership>, IndexError> {
        members::read(&self.membership)
    }

    /// Replaces the group's membership (a membership change applied by Raft).
    pub fn set_membership(&mut self, membership: &pb::Membership) -> Result<(), IndexError> {
        members::write(&mut self.membership, membership)
    }

    /// Applies `command`. Errors are storage errors only; a command that does not fit the
    /// job's state is [`Applied::Ignored`].
    pub fn apply(&mut self, command: &pb::Command) -> Result<Applied, IndexError> {
        self.apply_from(command, None)
    }

    /// [`Applier::apply`] of a command decoded from log entry `entry`: the bodies it brings
    /// (a submit's report, a completion's result) are referenced there rather than written
    /// again ([`BodyWriter::put_from`]).
    pub fn apply_from(
        &mut self,
        command: &pb::Command,
        entry: Option<InLog<'_>>,
    ) -> Result<Applied, IndexError> {
        use pb::command::Kind;
        let upgraded = keys::upgrade(command);
        let command = upgraded.as_ref().unwrap_or(command);
        let Some(kind) = &command.kind else {
            return Ok(Applied::Ignored);
        };
        match kind {
            Kind::Submit(c) => self.submit(c, entry),
            Kind::Lease(c) => {
                let mut applied = self.update(&c.job_id, true, |job| {
                    if job.state != JobState::Queued as i32 || c.attempt != job.attempts + 1 {
                        return false;
                    }
                    job.state = JobState::Running as i32;
                    job.attempts = c.attempt;
                    job.worker_id = c.worker_id.clone();
                    job.lease_token = c.token.clone();
                    true
                })?;
                if let Applied::Changed { spec, .. } = &mut applied
                    && self.lease_specs
                {
                    *spec = self.bodies.read(&self.specs, c.job_id.as_str())?;
                }
                Ok(applied)
            }
            Kind::Requeue(c) => self.update(&c.job_id, true, |job| {
                if job.state != JobState::Running as i32 || c.attempt != job.attempts {
                    return false;
                }
                job.state = JobState::Queued as i32;
                job.error = c.reason.clone();
                job.worker_id.clear();
                if c.unstarted {
                    job.uncounted_attempts = (job.uncounted_attempts + 1).min(job.attempts);
                }
                true
            }),
            Kind::Complete(c) => {
                let revision = named_revision(command.version, c.revision);
                self.complete(c, revision, command.version >= 5, entry)
            }
            Kind::Fail(c) => {
                let revision = named_revision(command.version, c.revision);
                self.fail(c, revision, command.version >= 5)
            }
            Kind::Purge(c) => self.purge(c.finished_before_ms, c.max_jobs, command.version),
            Kind::Resymbolicate(c) => self.resymbolicate(c, command.version),
            Kind::MembersSeen(c) => {
                if let Some(mut membership) = self.membership()?
                    && members::mark_seen(&mut membership, &c.member_ids)
                {
                    self.set_membership(&membership)?;
                }
                Ok(Applied::Ignored)
            }
        }
    }

    fn submit(&mut self, c: &pb::Submit, entry: Option<InLog<'_>>) -> Result<Applied, IndexError> {
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
            uncounted_attempts: 0,
            submitted_at_ms: c.at_ms,
            finished_at_ms: if is_terminal(state) { c.at_ms } else { 0 },
            error: c.unreadable.clone(),
            worker_id: String::new(),
            fingerprint: String::new(),
            sequence,
            revision: 1,
            resymbolicated_at_ms: 0,
            missing: Vec::new(),
            call_tree: Vec::new(),
            lease_token: String::new(),
            facets: None,
        };
        let id = c.job_id.as_str();
        self.jobs
            .insert(id, record.encode_to_vec().as_slice())
            .map_err(db)?;
        self.by_sequence.insert(sequence, id).map_err(db)?;
        if !is_terminal(state) {
            self.bodies.put_from(&mut self.specs, id, &c.spec, entry)?;
            self.open.insert(sequence, id).map_err(db)?;
        }
        if let Some(key) = state_key(state) {
            self.meta_add(key, 1)?;
        }
        Ok(Applied::Changed {
            job: JobSummary::of(&record),
            spec: None,
        })
    }

    /// `revision`: the job's revision the result was made for (`None`: any, as older entries
    /// applied). `bounded`: the group's tree is bounded ([`super::tree::merge`]; entries of
    /// version 5 on).
    fn complete(
        &mut self,
        c: &pb::Complete,
        revision: Option<u32>,
        bounded: bool,
        entry: Option<InLog<'_>>,
    ) -> Result<Applied, IndexError> {
        let group = c.group.as_ref().filter(|g| !g.fingerprint.is_empty());
        let keep_spec = c.keep_spec || !c.missing.is_empty();
        let (applied, before) = self.finish(&c.job_id, keep_spec, revision, |job| {
            job.state = JobState::Completed as i32;
            job.finished_at_ms = c.at_ms;
            job.worker_id = c.worker_id.clone();
            job.error.clear();
            job.fingerprint = group.map(|g| g.fingerprint.clone()).unwrap_or_default();
            job.missing = c.missing.clone();
            job.call_tree = c.call_tree.clone();
            job.facets = group.and(c.facets.clone());
        })?;
        if let Applied::Changed { .. } = applied {
            if c.result_zstd.is_empty() {
                let compressed = compress(&c.result_json);
                self.bodies
                    .put(&mut self.results, c.job_id.as_str(), &compressed)?;
            } else {
                self.bodies.put_from(
                    &mut self.results,
                    c.job_id.as_str(),
                    &c.result_zstd,
                    entry,
                )?;
            }
            self.missing.unrecord(&c.job_id, &before.missing)?;
            let fingerprint = group.map_or("", |g| g.fingerprint.as_str());
            self.missing
                .record(&c.job_id, &c.missing, c.at_ms, fingerprint)?;
            let old = before.member(&c.job_id);
            let new = Member {
                job_key: &c.job_id,
                at_ms: c.at_ms,
                facets: c.facets.as_ref(),
            };
            if before.fingerprint != fingerprint {
                self.groups
                    .leave(old, &before.fingerprint, &before.call_tree, bounded)?;
                if let Some(group) = group {
                    self.groups.join(group, new, &c.call_tree, bounded)?;
                }
            } else if let Some(key) = group {
                self.groups
                    .revise(key, (old, new), &before.call_tree, &c.call_tree, bounded)?;
            }
        }
        Ok(applied)
    }

    /// `revision`: as [`Applier::complete`]'s.
    fn fail(
        &mut self,
        c: &pb::Fail,
        revision: Option<u32>,
        bounded: bool,
    ) -> Result<Applied, IndexError> {
        // A re-run (for a file that arrived) that fails keeps the result it had: the job is
        // COMPLETED again, as it was, with the re-run's error; its group, missing files and
        // spec stay, so the next arrival can run it again.
        let had_result = self.results.get(c.job_id.as_str()).map_err(db)?.is_some();
        if had_result {
            return self.update(&c.job_id, true, |job| {
                if is_terminal(job_state(job)) || job.revision <= 1 || stale(job, revision) {
                    return false;
                }
                job.state = JobState::Completed as i32;
                job.error = format!("symbolicating again failed: {}", c.error);
                true
            });
        }
        let (applied, before) = self.finish(
            &c.job_id,
            c.keep_spec || !c.missing.is_empty(),
            revision,
            |job| {
                job.state = JobState::Failed as i32;
                job.finished_at_ms = c.at_ms;
                job.error = c.error.clone();
                job.missing = c.missing.clone();
            },
        )?;
        if let Applied::Changed { .. } = applied {
            self.missing.unrecord(&c.job_id, &before.missing)?;
            self.missing.record(&c.job_id, &c.missing, c.at_ms, "")?;
            self.groups.leave(
                before.member(&c.job_id),
                &before.fingerprint,
                &before.call_tree,
                bounded,
            )?;
        }
        Ok(applied)
    }

    /// Finishes job `job_id` with `f` unless it is finished already (then `Ignored`): the
    /// change, and what its previous revision left (a job queued again by `Resymbolicate`),
    /// taken out of the record before `f` writes the new revision's.
    fn finish(
        &mut self,
        job_id: &str,
        keep_spec: bool,
        revision: Option<u32>,
        f: impl FnOnce(&mut pb::JobRecord),
    ) -> Result<(Applied, Previous), IndexError> {
        let mut before = Previous::default();
        let applied = self.update(job_id, keep_spec, |job| {
            if is_terminal(job_state(job)) || stale(job, revision) {
                return false;
            }
            before = Previous::take(job);
            f(job);
            true
        })?;
        Ok((applied, before))
    }

    fn resymbolicate(
        &mut self,
        c: &pb::Resymbolicate,
        version: u32,
    ) -> Result<Applied, IndexError> {
        if self.specs.get(c.job_id.as_str()).map_err(db)?.is_none() {
            return Ok(Applied::Ignored);
        }
        self.update(&c.job_id, true, |job| {
            if !is_terminal(job_state(job)) || job.missing.is_empty() {
                return false;
            }
            job.state = JobState::Queued as i32;
            job.revision = job.revision.max(1) + 1;
            // A new revision gets the whole attempt budget; its attempt numbers go on. Entries
            // of version 3 replay as they applied then (every revision's attempts counted).
            if version >= 4 {
                job.uncounted_attempts = job.attempts;
            }
            job.resymbolicated_at_ms = c.at_ms;
            job.error = c.reason.clone();
            job.worker_id.clear();
            true
        })
    }

    /// Changes job `job_id` with `f` (which says whether it changed anything) and keeps the
    /// counts and the open jobs in step. A job that finishes keeps its spec (the report,
    /// compressed as sent: it runs again if it lacked a file, and `symctl job --format apple`
    /// renders it) until it is purged when `keep_spec`, which the finishing command says;
    /// commands of older leaders do not, and their rule applies on replay: the spec goes unless
    /// the job lacked a file.
    fn update(
        &mut self,
        job_id: &str,
        keep_spec: bool,
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
        if after != JobState::Running {
            // The token is the running lease's only: a finished or queued record is the same
            // on a master of the previous version, which records none.
            record.lease_token.clear();
        }
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
                if !keep_spec {
                    self.bodies.remove(&mut self.specs, job_id)?;
                }
            } else if is_terminal(before) {
                self.open.insert(record.sequence, job_id).map_err(db)?;
            }
        }
        Ok(Applied::Changed {
            job: JobSummary::of(&record),
            spec: None,
        })
    }

    /// Deletes the jobs that finished before `finished_before_ms`, oldest submitted first, at
    /// most `max_jobs` (0: all).
    fn purge(
        &mut self,
        finished_before_ms: u64,
        max_jobs: u64,
        version: u32,
    ) -> Result<Applied, IndexError> {
        let mut doomed = Vec::new();
        for entry in self.by_sequence.iter().map_err(db)? {
            if max_jobs > 0 && doomed.len() as u64 >= max_jobs {
                break;
            }
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
            self.bodies.remove(&mut self.specs, id)?;
            self.bodies.remove(&mut self.results, id)?;
            self.by_sequence.remove(*sequence).map_err(db)?;
            self.missing.unrecord(id, &record.missing)?;
            // Groups age out with their jobs. Entries before version 5 replay as they applied
            // then: the groups kept their counts.
            if version >= 5 {
                let member = Member {
                    job_key: id,
                    at_ms: record.finished_at_ms,
                    facets: record.facets.as_ref(),
                };
                self.groups
                    .leave(member, &record.fingerprint, &record.call_tree, true)?;
            }
            if let Some(key) = state_key(job_state(record)) {
                self.meta_add(key, -1)?;
            }
        }
        Ok(Applied::Purged(doomed.len() as u64))
    }
}

/// What a job's previous revision left in its record when it finishes again: its group, the
/// files it lacked and its call tree, to be taken out of the group and the missing-files index.
#[derive(Default)]
struct Previous {
    fingerprint: String,
    missing: Vec<v1::MissingFile>,
    call_tree: Vec<v1::CallTreeNode>,
    facets: Option<v1::ReportFacets>,
    finished_at_ms: u64,
}

impl Previous {
    fn take(job: &mut pb::JobRecord) -> Self {
        Previous {
            fingerprint: std::mem::take(&mut job.fingerprint),
            missing: std::mem::take(&mut job.missing),
            call_tree: std::mem::take(&mut job.call_tree),
            facets: job.facets.take(),
            finished_at_ms: job.finished_at_ms,
        }
    }

    /// The job as its previous group counted it.
    fn member<'a>(&'a self, job_key: &'a str) -> Member<'a> {
        Member {
            job_key,
            at_ms: self.finished_at_ms,
            facets: self.facets.as_ref(),
        }
    }
}

/// The revision a `Complete` or `Fail` ends (its `revision` field), from version 6 on; `None`
/// for older entries (and a 0), which end whatever revision runs, as they applied then.
fn named_revision(version: u32, revision: u32) -> Option<u32> {
    (version >= 6 && revision != 0).then_some(revision)
}

/// Whether a command that ends `revision` is stale for `job`. A record's revision 0 (written
/// before revisions) is revision 1, as `JobSummary::of` reads it and the leader stamps it.
fn stale(job: &pb::JobRecord, revision: Option<u32>) -> bool {
    revision.is_some_and(|r| r != job.revision.max(1))
}

fn job_state(job: &pb::JobRecord) -> JobState {
    JobState::try_from(job.state).unwrap_or(JobState::Unspecified)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Index, command};

    fn index() -> (tempfile::TempDir, Index) {
        let dir = tempfile::tempdir().unwrap();
        let index = Index::open_file(&dir.path().join("master.redb")).unwrap();
        (dir, index)
    }

    fn apply_all(index: &Index, commands: &[pb::Command]) -> Vec<Applied> {
        apply_as(index, commands, false)
    }

    /// As the leader applies: leases return their spec.
    fn apply_with_specs(index: &Index, commands: &[pb::Command]) -> Vec<Applied> {
        apply_as(index, commands, true)
    }

    fn apply_as(index: &Index, commands: &[pb::Command], lease_specs: bool) -> Vec<Applied> {
        let txn = index.database().begin_write().unwrap();
        let out = {
            let mut applier = Applier::new(&txn, index.bodies())
                .unwrap()
                .with_lease_specs(lease_specs);
            commands.iter().map(|c| applier.apply(c).unwrap()).collect()
        };
        txn.commit().unwrap();
        out
    }

    /// Each command's job and state after it, `None` when it changed nothing.
    fn outcomes(applied: &[Applied]) -> Vec<Option<(&str, JobState)>> {
        applied
            .iter()
            .map(|a| match a {
                Applied::Changed { job, .. } => Some((job.job_id.as_str(), job.state)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_change_returns_the_record_after_it_and_a_lease_its_spec() {
        let (_dir, index) = index();
        let applied = apply_with_specs(
            &index,
            &[
                command::submit("p/a", v1::JobKind::Js, vec![9, 9], "key", 5),
                command::lease("p/a", "w1", "", 1, 6),
                command::requeue_unstarted("p/a", 1, "gone", 7),
                command::lease("p/a", "w2", "", 2, 8),
                command::complete("p/a", 2, "w2", b"{}".to_vec(), None, 9),
            ],
        );
        type After<'a> = (JobState, u32, u32, Option<&'a str>, Option<&'a [u8]>);
        let summaries: Vec<After<'_>> = applied
            .iter()
            .map(|a| match a {
                Applied::Changed { job, spec } => (
                    job.state,
                    job.attempts,
                    job.uncounted_attempts,
                    job.running_on.as_deref(),
                    spec.as_deref(),
                ),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            summaries,
            vec![
                (JobState::Queued, 0, 0, None, None),
                (JobState::Running, 1, 0, Some("w1"), Some(&[9u8, 9][..])),
                (JobState::Queued, 1, 1, None, None),
                (JobState::Running, 2, 1, Some("w2"), Some(&[9u8, 9][..])),
                (JobState::Completed, 2, 1, None, None),
            ]
        );
        let Applied::Changed { job, .. } = &applied[0] else {
            unreachable!()
        };
        assert_eq!(
            (
                job.routing_key.as_str(),
                job.kind,
                job.queued_since_ms,
                job.revision
            ),
            ("key", v1::JobKind::Js as i32, 5, 1)
        );
        // A follower's lease (no one to send it to) does not read the spec.
        let applied = apply_all(
            &index,
            &[
                command::submit("p/b", v1::JobKind::Js, vec![7], "key", 10),
                command::lease("p/b", "w1", "", 1, 11),
            ],
        );
        assert!(
            matches!(&applied[1], Applied::Changed { job, spec: None } if job.state == JobState::Running)
        );
    }

    fn group(fingerprint: &str) -> v1::CrashGroupKey {
        v1::CrashGroupKey {
            fingerprint: fingerprint.into(),
            title: "t".into(),
            key_stack: vec!["f (a.c:1)".into()],
            kind: String::new(),
        }
    }

    fn lacking(key: &str) -> v1::MissingFile {
        v1::MissingFile {
            key: key.into(),
            image: "DemoApp".into(),
            arch: "arm64".into(),
        }
    }

    #[test]
    fn a_job_that_lacked_a_file_runs_again_and_moves_to_its_real_group() {
        let (_dir, index) = index();
        let key = "demo/a";
        let unsymbolicated = command::with_missing(
            command::complete(key, 1, "w", b"{\"r\":1}".to_vec(), Some(group("raw")), 10),
            vec![lacking("dbg-1")],
        );
        apply_all(
            &index,
            &[
                command::submit(key, v1::JobKind::Native, vec![7], "k", 1),
                command::submit("demo/b", v1::JobKind::Native, vec![8], "k", 2),
                command::lease(key, "w", "", 1, 3),
                unsymbolicated,
                command::lease("demo/b", "w", "", 1, 4),
                command::complete("demo/b", 1, "w", b"{}".to_vec(), Some(group("raw")), 11),
            ],
        );
        // Finished, lacking dbg-1: the missing-files index lists it. Finished jobs keep their specs.
        assert_eq!(index.spec(key).unwrap(), Some(vec![7]));
        assert_eq!(index.spec("demo/b").unwrap(), Some(vec![8]));
        assert_eq!(
            index
                .jobs_lacking(Some("demo"), &["dbg-1".to_owned()])
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![key.to_owned()]
        );
        assert_eq!(
            index
                .jobs_lacking(None, &["dbg-1".to_owned()])
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![key.to_owned()]
        );
        assert!(
            index
                .jobs_lacking(Some("other"), &["dbg-1".to_owned()])
                .unwrap()
                .is_empty()
        );
        let missing = index.missing_files(10, |_| true).unwrap();
        assert_eq!(missing.len(), 1);
        assert_eq!(
            (
                missing[0].project.as_str(),
                missing[0].key.as_str(),
                missing[0].image.as_str(),
                missing[0].jobs,
                missing[0].groups,
                missing[0].first_seen_ms
            ),
            ("demo", "dbg-1", "DemoApp", 1, 1, 10)
        );
        assert!(index.missing_files(10, |p| p != "demo").unwrap().is_empty());

        // The file arrives: queued again as revision 2 (once: a second arrival while it is
        // queued changes nothing); a job that lacked nothing is not touched.
        let applied = apply_all(
            &index,
            &[
                command::resymbolicate(key, "dbg-1 arrived", 20),
                command::resymbolicate(key, "dbg-1 arrived", 21),
                command::resymbolicate("demo/b", "dbg-1 arrived", 21),
            ],
        );
        assert_eq!(
            outcomes(&applied),
            vec![Some((key, JobState::Queued)), None, None]
        );
        let job = index.job(key, false).unwrap().unwrap();
        assert_eq!(
            (job.record.revision, job.record.resymbolicated_at_ms),
            (2, 20)
        );
        assert_eq!(index.open_jobs().unwrap()[0].revision, 2);
        assert_eq!(index.counts().unwrap().queued, 1);

        // Symbolicated: result replaced, out of the missing-files index, out of the raw group (which
        // keeps b) and into its real one.
        apply_all(
            &index,
            &[
                command::lease(key, "w", "", 2, 22),
                command::complete(key, 2, "w", b"{\"r\":2}".to_vec(), Some(group("real")), 30),
            ],
        );
        let job = index.job(key, true).unwrap().unwrap();
        assert_eq!(job.result_json.as_deref(), Some(&b"{\"r\":2}"[..]));
        assert!(job.record.missing.is_empty());
        assert_eq!(job.record.fingerprint, "real");
        assert!(index.missing_files(10, |_| true).unwrap().is_empty());
        assert_eq!(index.spec(key).unwrap(), Some(vec![7]));
        let counts: Vec<(String, u64)> = index
            .groups(10, None, true, |_| true)
            .unwrap()
            .into_iter()
            .map(|g| (g.fingerprint, g.count))
            .collect();
        // Ties: the most recently seen first.
        assert_eq!(counts, vec![("real".into(), 1), ("raw".into(), 1)]);
        assert_eq!(index.counts().unwrap().completed, 2);
    }

    #[test]
    fn a_failed_rerun_keeps_the_result_it_had() {
        let (_dir, index) = index();
        let key = "demo/a";
        apply_all(
            &index,
            &[
                command::submit(key, v1::JobKind::Native, vec![7], "k", 1),
                command::lease(key, "w", "", 1, 2),
                command::with_missing(
                    command::complete(key, 1, "w", b"{\"r\":1}".to_vec(), Some(group("raw")), 3),
                    vec![lacking("dbg-1")],
                ),
                command::resymbolicate(key, "dbg-1 arrived", 4),
                command::lease(key, "w", "", 2, 5),
                command::fail(key, 2, "worker lost (attempt 3 of 3)", 6),
            ],
        );
        let job = index.job(key, true).unwrap().unwrap();
        assert_eq!(job.state(), JobState::Completed);
        assert_eq!(job.result_json.as_deref(), Some(&b"{\"r\":1}"[..]));
        assert_eq!(
            job.record.error,
            "symbolicating again failed: worker lost (attempt 3 of 3)"
        );
        assert_eq!(
            (job.record.fingerprint.as_str(), job.record.revision),
            ("raw", 2)
        );
        assert_eq!(index.spec(key).unwrap(), Some(vec![7]));
        assert_eq!(
            index
                .jobs_lacking(Some("demo"), &["dbg-1".to_owned()])
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![key.to_owned()]
        );
        assert_eq!(index.groups(10, None, true, |_| true).unwrap()[0].count, 1);
        assert_eq!(index.counts().unwrap().completed, 1);
    }

    #[test]
    fn groups_keep_their_kind_and_list_by_kind() {
        let (_dir, index) = index();
        let kinded = |fingerprint: &str, kind: &str| v1::CrashGroupKey {
            kind: kind.into(),
            ..group(fingerprint)
        };
        let tree = vec![v1::CallTreeNode {
            name: "busy".into(),
            hits: 3,
            parent: -1,
        }];
        let mut commands = Vec::new();
        for (i, (key, group, tree)) in [
            ("a", kinded("cpu-1", "cpu"), tree.clone()),
            ("b", kinded("crash-1", ""), Vec::new()),
            // From a worker that sends no kind: a hang, told by its call tree.
            ("c", kinded("hang-1", ""), tree),
        ]
        .into_iter()
        .enumerate()
        {
            let at = 10 * i as u64;
            commands.push(command::submit(key, v1::JobKind::Native, vec![1], "k", at));
            commands.push(command::lease(key, "w", "", 1, at + 1));
            commands.push(command::with_call_tree(
                command::complete(key, 1, "w", b"{}".to_vec(), Some(group), at + 2),
                tree,
            ));
        }
        apply_all(&index, &commands);
        let listed = |kind| -> Vec<String> {
            index
                .groups(10, kind, true, |_| true)
                .unwrap()
                .into_iter()
                .map(|g| g.fingerprint)
                .collect()
        };
        assert_eq!(listed(Some("cpu")), ["cpu-1"]);
        assert_eq!(listed(Some("crash")), ["crash-1"]);
        assert_eq!(listed(Some("jank")), Vec::<String>::new());
        assert_eq!(listed(None).len(), 3);
        assert_eq!(listed(Some("hang")), ["hang-1"]);
        // A group stored before kinds (no `kind`) reads as a hang when it sums call trees.
        let mut legacy = index
            .groups(10, Some("hang"), true, |_| true)
            .unwrap()
            .remove(0);
        legacy.kind.clear();
        assert_eq!(super::super::group_kind(&legacy, true), "hang");
        assert_eq!(super::super::group_kind(&legacy, false), "crash");
    }

    #[test]
    fn purge_forgets_what_a_purged_job_lacked() {
        let (_dir, index) = index();
        apply_all(
            &index,
            &[
                command::submit("p/a", v1::JobKind::Js, vec![1], "k", 1),
                command::lease("p/a", "w", "", 1, 2),
                command::with_missing(
                    command::fail("p/a", 1, "no source map", 3),
                    vec![lacking("release:r//b")],
                ),
            ],
        );
        assert_eq!(
            index
                .jobs_lacking(Some("p"), &["release:r//b".to_owned()])
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec!["p/a".to_owned()]
        );
        assert_eq!(index.spec("p/a").unwrap(), Some(vec![1]));
        apply_all(&index, &[command::purge(100, 100, 0)]);
        assert!(index.missing_files(10, |_| true).unwrap().is_empty());
        assert_eq!(index.spec("p/a").unwrap(), None);
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
            outcomes(&applied),
            vec![Some(("a", JobState::Queued)), None]
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
                command::lease("a", "w1", "", 1, 2),
                command::requeue("a", 1, "lease expired", 9),
                command::lease("a", "w2", "", 2, 9),
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
        let groups = index.groups(10, None, true, |_| true).unwrap();
        assert_eq!((groups.len(), groups[0].count), (1, 1));
        assert_eq!(
            index.counts().unwrap(),
            crate::index::Counts {
                completed: 1,
                ..Default::default()
            }
        );
        assert!(index.open_jobs().unwrap().is_empty());
        // The report stays with the record and the result (until purged).
        assert_eq!(index.spec("a").unwrap(), Some(Vec::new()));
    }

    /// Job `a`: revision 1 completed lacking `dbg-1` (its completion naming revision 1), the
    /// file arrived, revision 2 leased (attempt 2) and running.
    fn revision_2_running() -> Vec<pb::Command> {
        vec![
            command::submit("a", v1::JobKind::Native, vec![7], "k", 1),
            command::lease("a", "w", "", 1, 2),
            command::with_revision(
                command::with_missing(
                    command::complete("a", 1, "w", b"{}".to_vec(), Some(group("g0")), 3),
                    vec![lacking("dbg-1")],
                ),
                1,
            ),
            command::resymbolicate("a", "dbg-1 arrived", 4),
            command::lease("a", "w", "", 2, 5),
        ]
    }

    /// From version 6 a completion names its revision: one of revision 1 committed while the
    /// job runs revision 2 is ignored; the same command written by an older leader (version 5,
    /// no revision) replays as it applied then, completing whatever revision runs.
    #[test]
    fn a_completion_of_another_revision_is_stale_from_version_6() {
        let late = |version: u32| {
            let mut c = command::with_revision(
                command::complete("a", 1, "w", b"{\"r\":1}".to_vec(), Some(group("g1")), 30),
                1,
            );
            c.version = version;
            c
        };
        for (version, want) in [(6, JobState::Running), (5, JobState::Completed)] {
            let (_dir, index) = self::index();
            let mut commands = revision_2_running();
            commands.push(late(version));
            let applied = apply_all(&index, &commands);
            let job = index.job("a", true).unwrap().unwrap();
            assert_eq!(
                (job.state(), job.record.revision),
                (want, 2),
                "version {version}"
            );
            assert_eq!(
                matches!(applied[5], Applied::Ignored),
                version >= 6,
                "version {version}"
            );
        }
        // A failure of revision 1 committed while revision 2 runs is stale too.
        let (_dir, index) = self::index();
        let mut commands = revision_2_running();
        commands.push(command::with_revision(
            command::fail("a", 1, "no such image", 6),
            1,
        ));
        let applied = apply_all(&index, &commands);
        assert_eq!(applied[5], Applied::Ignored);
        let job = index.job("a", true).unwrap().unwrap();
        assert_eq!((job.state(), job.record.revision), (JobState::Running, 2));

        // A record written before revisions (revision 0) is revision 1: the leader's
        // completion, stamped 1, completes it.
        let (_dir, index) = self::index();
        apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![7], "k", 1),
                command::lease("a", "w", "", 1, 2),
            ],
        );
        {
            let txn = index.database().begin_write().unwrap();
            {
                let mut jobs = txn.open_table(JOBS).unwrap();
                let stored = jobs.get("a").unwrap().unwrap().value().to_vec();
                let mut record = decode_record("a", &stored).unwrap();
                record.revision = 0;
                jobs.insert("a", record.encode_to_vec().as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
        let applied = apply_all(
            &index,
            &[command::with_revision(
                command::complete("a", 1, "w", b"{}".to_vec(), Some(group("g0")), 3),
                1,
            )],
        );
        assert!(matches!(applied[0], Applied::Changed { .. }));

        // A completion naming the revision that runs is taken.
        let (_dir, index) = self::index();
        let applied = apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![7], "k", 1),
                command::lease("a", "w", "", 1, 2),
                command::with_revision(
                    command::complete("a", 1, "w", b"{}".to_vec(), Some(group("g0")), 3),
                    1,
                ),
            ],
        );
        assert!(matches!(applied[2], Applied::Changed { .. }));
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
        assert_eq!(outcomes(&applied), vec![Some(("a", JobState::Failed))]);
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
    fn a_failed_job_keeps_its_record_and_its_report() {
        let (_dir, index) = index();
        apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Native, vec![1, 2, 3], "k", 1),
                command::submit("b", v1::JobKind::Native, vec![4], "k", 1),
                command::lease("a", "w1", "", 1, 2),
                command::fail("a", 1, "malformed report", 3),
            ],
        );
        let job = index.job("a", false).unwrap().unwrap();
        assert_eq!(job.state(), JobState::Failed);
        assert_eq!(job.record.error, "malformed report");
        assert_eq!(index.spec("a").unwrap(), Some(vec![1, 2, 3]));
        // A finishing command of an older leader (no `keep_spec`) applies that leader's rule on
        // replay: the report goes, as it went then.
        let mut old = command::fail("b", 1, "malformed report", 4);
        if let Some(pb::command::Kind::Fail(c)) = &mut old.kind {
            c.keep_spec = false;
        }
        apply_all(&index, &[command::lease("b", "w1", "", 1, 3), old]);
        assert_eq!(index.spec("b").unwrap(), None);
    }

    #[test]
    fn stale_requeue_and_out_of_order_leases_are_ignored() {
        let (_dir, index) = index();
        let applied = apply_all(
            &index,
            &[
                command::submit("a", v1::JobKind::Js, vec![], "k", 1),
                command::lease("a", "w1", "", 2, 2),
                command::lease("a", "w1", "", 1, 2),
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
    fn unstarted_leases_and_earlier_revisions_do_not_count_as_attempts() {
        let (_dir, index) = index();
        let key = "demo/a";
        let lacking_one = command::with_missing(
            command::complete(key, 3, "w3", b"{}".to_vec(), Some(group("raw")), 10),
            vec![lacking("dbg-1")],
        );
        let applied = apply_all(
            &index,
            &[
                command::submit(key, v1::JobKind::Native, vec![7], "k", 1),
                // Handed back unstarted: attempt 1 does not count.
                command::lease(key, "w1", "", 1, 2),
                command::requeue_unstarted(key, 1, "worker w1 left (not started)", 3),
                // Ran and was lost: attempt 2 counts.
                command::lease(key, "w2", "", 2, 4),
                command::requeue(key, 2, "lease expired on worker w2", 5),
                command::lease(key, "w3", "", 3, 6),
                // A stale unstarted hand-back (attempt 2 is over) changes nothing.
                command::requeue_unstarted(key, 2, "late", 7),
            ],
        );
        assert_eq!(applied[6], Applied::Ignored);
        let open = index.open_jobs().unwrap();
        assert_eq!(
            (open[0].attempts, open[0].uncounted_attempts),
            (3, 1),
            "{open:?}"
        );
        // Finished lacking dbg-1, then queued again when it arrived: the new revision's
        // attempts start from nothing (3 uncounted), its numbers go on (the next lease is 4).
        apply_all(
            &index,
            &[
                lacking_one,
                command::resymbolicate(key, "dbg-1 arrived", 11),
            ],
        );
        let open = index.open_jobs().unwrap();
        assert_eq!(
            (
                open[0].attempts,
                open[0].uncounted_attempts,
                open[0].revision
            ),
            (3, 3, 2)
        );
    }

    #[test]
    fn a_version_3_resymbolicate_replays_as_it_applied_then() {
        let (_dir, index) = index();
        let key = "demo/a";
        let mut old = command::resymbolicate(key, "dbg-1 arrived", 11);
        old.version = 3;
        apply_all(
            &index,
            &[
                command::submit(key, v1::JobKind::Native, vec![7], "k", 1),
                command::lease(key, "w1", "", 1, 2),
                command::with_missing(
                    command::complete(key, 1, "w1", b"{}".to_vec(), Some(group("raw")), 10),
                    vec![lacking("dbg-1")],
                ),
                old,
            ],
        );
        let open = index.open_jobs().unwrap();
        assert_eq!(
            (
                open[0].attempts,
                open[0].uncounted_attempts,
                open[0].revision
            ),
            (1, 0, 2)
        );
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
        let applied = apply_all(&index, &[command::purge(50, 200, 0)]);
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

    #[test]
    fn a_purge_deletes_at_most_its_batch_oldest_first() {
        let (_dir, index) = index();
        let mut commands = Vec::new();
        for i in 0..5u64 {
            let id = format!("job-{i}");
            commands.push(command::submit(
                &id,
                v1::JobKind::Native,
                vec![],
                "k",
                1 + i,
            ));
            commands.push(command::fail(&id, 0, "bad report", 10 + i));
        }
        apply_all(&index, &commands);
        let purge = command::purge(100, 200, 2);
        assert_eq!(
            apply_all(&index, &[purge.clone(), purge.clone()]),
            [Applied::Purged(2), Applied::Purged(2)]
        );
        let left: Vec<String> = index
            .list_jobs(None, 10, |_| true)
            .unwrap()
            .into_iter()
            .map(|j| j.job_id)
            .collect();
        assert_eq!(left, ["job-4"]);
        assert_eq!(
            apply_all(&index, &[purge.clone(), purge]),
            [Applied::Purged(1), Applied::Purged(0)]
        );
        assert_eq!(index.counts().unwrap().failed, 0);
    }

    fn facets(release: &str, device: &str) -> Option<v1::ReportFacets> {
        Some(v1::ReportFacets {
            release: release.into(),
            dist: String::new(),
            os: "iOS 15.0 (19A346)".into(),
            device: device.into(),
        })
    }

    /// Each group's facets, as `ListGroups` with `facets` answers: (fingerprint, releases
    /// with their jobs, days with theirs, first and last release).
    type Counted = (String, Vec<(String, u64)>, Vec<(u64, u64)>, String, String);

    fn counted(index: &Index) -> Vec<Counted> {
        let filter = crate::index::listing::GroupFilter {
            with_facets: true,
            ..Default::default()
        };
        let mut groups = index.groups_page(10, filter, None, |_| true).unwrap().items;
        groups.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        groups
            .into_iter()
            .map(|g| {
                let f = g.facets.unwrap_or_default();
                let releases = f.releases.unwrap_or_default().top;
                (
                    g.fingerprint,
                    releases.into_iter().map(|c| (c.value, c.jobs)).collect(),
                    f.days.into_iter().map(|d| (d.day, d.jobs)).collect(),
                    g.first_release,
                    g.last_release,
                )
            })
            .collect()
    }

    /// A job's facets are counted in the group it joins, under the day it finished, and taken
    /// out of it when it moves (symbolicated again into another group), and when it is purged.
    #[test]
    fn facets_follow_each_job_into_and_out_of_its_group() {
        let (_dir, index) = index();
        let day = 20_000 * crate::index::facets::DAY_MS;
        let complete = |job: &str, group_key: &str, release: &str, at: u64| {
            command::with_facets(
                command::with_missing(
                    command::complete(job, 1, "w", b"{}".to_vec(), Some(group(group_key)), at),
                    vec![lacking("dbg-1")],
                ),
                facets(release, "iPhone13,2"),
            )
        };
        apply_all(
            &index,
            &[
                command::submit("p/a", v1::JobKind::Native, vec![7], "k", 1),
                command::submit("p/b", v1::JobKind::Native, vec![8], "k", 2),
                command::lease("p/a", "w", "", 1, 3),
                command::lease("p/b", "w", "", 1, 4),
                complete("p/a", "raw", "app@1.0+1", day + 5),
                complete("p/b", "raw", "app@1.1+2", day + 6),
            ],
        );
        assert_eq!(
            counted(&index),
            vec![(
                "raw".into(),
                vec![("app@1.0+1".into(), 1), ("app@1.1+2".into(), 1)],
                vec![(20_000, 2)],
                "app@1.0+1".into(),
                "app@1.1+2".into(),
            )]
        );
        // The file arrives: p/a runs again a day later and moves to its real group.
        let rerun = command::with_facets(
            command::with_revision(
                command::complete(
                    "p/a",
                    2,
                    "w",
                    b"{}".to_vec(),
                    Some(group("real")),
                    day + crate::index::facets::DAY_MS,
                ),
                2,
            ),
            facets("app@1.0+1", "iPhone13,2"),
        );
        apply_all(
            &index,
            &[
                command::resymbolicate("p/a", "dbg-1 arrived", day + 100),
                command::lease("p/a", "w", "", 2, day + 101),
                rerun,
            ],
        );
        assert_eq!(
            counted(&index),
            vec![
                (
                    "raw".into(),
                    vec![("app@1.1+2".into(), 1)],
                    vec![(20_000, 1)],
                    "app@1.0+1".into(),
                    "app@1.1+2".into(),
                ),
                (
                    "real".into(),
                    vec![("app@1.0+1".into(), 1)],
                    vec![(20_001, 1)],
                    "app@1.0+1".into(),
                    "app@1.0+1".into(),
                ),
            ]
        );
        // Purged, the groups go, and their facets with them.
        apply_all(&index, &[command::purge(u64::MAX, day * 2, 0)]);
        assert!(counted(&index).is_empty());
        let read = redb::ReadableDatabase::begin_read(index.database().as_ref()).unwrap();
        let stored = read.open_table(crate::index::facets::FACETS).unwrap();
        assert_eq!(stored.iter().unwrap().count(), 0);
    }
}

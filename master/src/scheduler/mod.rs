//! Scheduling by leases, on the leader, from the replicated index.
//!
//! Every master keeps, in memory, the unfinished jobs only ([`projection`]: the queue and the
//! current leases), a projection of the records that applying commands returns
//! ([`Hooks::applied`]; it never reads the index back), so a master that becomes leader already
//! knows every queued and running job: running jobs get a fresh lease deadline, and a completion
//! for the current attempt from the worker that held it still counts. Finished jobs live only in
//! the index on disk.
//!
//! Only the leader schedules. A free worker slot takes a queued job ([`placement`]); the grant
//! is proposed as a `Lease` command and sent on the worker's lease stream once applied. Leases
//! are renewed by heartbeats (in memory: deadlines are the leader's business) and expire into a
//! `Requeue`, or a `Fail` after `max_attempts`. Jobs with a proposal in flight are `pending` so
//! that nothing is proposed twice.
//!
//! - [`projection`]: the unfinished jobs, the queue and the leases, from the applied records;
//! - [`queue`]: what enters the queue, and dispatch (leases proposed to free slots);
//! - [`lease_clock`]: the monotonic clock deadlines are kept on;
//! - [`leases`]: completions, failed attempts, heartbeats, expiry, draining (the one rule for
//!   who may end an attempt);
//! - [`placement`]: rendezvous routing, least-loaded fallback, random baseline;
//! - [`workers`]: the connected workers, their slots and lease streams;
//! - [`watchers`]: waking the watch streams of one job.

pub mod lease_clock;
pub mod leases;
pub mod placement;
pub mod projection;
pub mod queue;
pub mod watchers;
pub mod workers;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use dashmap::DashMap;

use symcluster_proto::cluster::v1::command::Kind;
use symcluster_proto::v1;
use tokio::sync::mpsc;

use crate::index::apply::Applied;
use crate::index::{Command, Index, IndexError};
use crate::raft::ProposeError;
use crate::replica::{Hooks, RaftHandle};
pub use placement::Routing;
use projection::{Change, Projection};
use watchers::Watchers;
pub use workers::OutgoingLease;
use workers::WorkerEntry;

/// Scheduling settings.
#[derive(Debug, Clone, Copy)]
pub struct SchedulerConfig {
    /// How jobs pick workers.
    pub routing: Routing,
    /// How long a lease lasts without a heartbeat, in ms.
    pub lease_ms: u64,
    /// Heartbeat interval asked of workers, in ms.
    pub heartbeat_ms: u64,
    /// Attempts before a job fails for good.
    pub max_attempts: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            routing: Routing::Affinity,
            lease_ms: 30_000,
            heartbeat_ms: 5_000,
            max_attempts: 3,
        }
    }
}

/// Queued jobs affinity routing looks at for one whose preferred worker is free.
pub const LOOKAHEAD: usize = 64;

/// The scheduler's state, under one lock.
#[derive(Default)]
struct Core {
    /// The unfinished jobs, the queue and the leases, as applied.
    projection: Projection,
    /// Jobs dispatched ahead of the oldest queued job since it became the oldest.
    head_skips: usize,
    /// Jobs with a Lease, Requeue or Fail proposed and not yet applied.
    pending: HashSet<String>,
    workers: BTreeMap<String, WorkerEntry>,
    is_leader: bool,
    affine_leases: u64,
    total_leases: u64,
}

/// Why a request to the scheduler failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// Not the leader, or the log cannot be written.
    #[error(transparent)]
    Propose(#[from] ProposeError),
    /// The index cannot be read.
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What a worker's completion carries besides its lease.
#[derive(Debug, Default)]
pub struct Completion {
    /// The result JSON as one zstd frame (`CompleteJobRequest.result_zstd`, checked by the
    /// caller).
    pub result_zstd: Vec<u8>,
    /// Its crash group, when it has one.
    pub group: Option<v1::CrashGroupKey>,
    /// The debug files it lacked.
    pub missing: Vec<v1::MissingFile>,
    /// Its named call tree (hang reports).
    pub call_tree: Vec<v1::CallTreeNode>,
    /// Where its report came from, bounded ([`crate::index::facets::bounded`]; empty values
    /// where it does not say, and the job still counts in its group's days); `None` counts
    /// nothing.
    pub facets: Option<v1::ReportFacets>,
}

/// The queue and the workers' slots, for autoscaling ([`Scheduler::queue_stats`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// Per job kind: queued jobs, and the age of the oldest (ms since it was submitted or queued
    /// again for a file that arrived).
    pub queued: BTreeMap<v1::JobKind, (u64, u64)>,
    /// Leases held by connected workers that are not draining: jobs running, and jobs waiting
    /// in a worker's prefetch for a slot (demand too, so this may exceed the slots).
    pub busy_slots: u64,
    /// Slots free for a job, on the same workers.
    pub free_slots: u64,
    /// Workers draining (stopping).
    pub draining_workers: u64,
}

/// The scheduler: queue, workers, leases (leader), kept in step with the index (every master).
pub struct Scheduler {
    core: Mutex<Core>,
    index: Index,
    raft: RaftHandle,
    watchers: Arc<Watchers>,
    /// Worker id → the token that registered it, as `Core::workers` holds it: read by every
    /// worker call ([`Scheduler::worker_owner`]) without the scheduler's lock, which the Raft
    /// thread holds while it applies. Written under that lock.
    owners: DashMap<String, Arc<str>>,
    config: SchedulerConfig,
    /// Whether this master leads, as the Raft thread last said (for streams to end on a loss).
    leading: tokio::sync::watch::Sender<bool>,
}

impl Scheduler {
    /// A scheduler over `index` (unfinished jobs are read from it) proposing through `raft`.
    pub fn new(
        index: Index,
        raft: RaftHandle,
        config: SchedulerConfig,
    ) -> Result<Self, IndexError> {
        let scheduler = Scheduler {
            core: Mutex::new(Core::default()),
            index,
            raft,
            watchers: Arc::default(),
            owners: DashMap::new(),
            config,
            leading: tokio::sync::watch::Sender::new(false),
        };
        scheduler.reload()?;
        Ok(scheduler)
    }

    /// Rebuilds the unfinished jobs from the index: running jobs get a fresh lease deadline.
    fn reload(&self) -> Result<(), IndexError> {
        let open_jobs = self.index.open_jobs()?;
        let deadline_ms = lease_clock::now() + self.config.lease_ms;
        let mut core = self.lock();
        core.pending.clear();
        core.projection.rebuild(open_jobs, deadline_ms);
        let workers: Vec<String> = core.workers.keys().cloned().collect();
        for worker_id in workers {
            Self::rebuild_busy(&mut core, &worker_id);
        }
        Ok(())
    }

    /// Sets the jobs `worker_id` holds from the projection's leases.
    fn rebuild_busy(core: &mut Core, worker_id: &str) {
        let held: HashSet<String> = core
            .projection
            .held_by(worker_id)
            .map(|(id, _)| id.clone())
            .collect();
        if let Some(worker) = core.workers.get_mut(worker_id) {
            worker.busy = held;
        }
    }

    /// The index (read-only).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Raft.
    pub fn raft(&self) -> &RaftHandle {
        &self.raft
    }

    /// The settings.
    pub fn config(&self) -> SchedulerConfig {
        self.config
    }

    /// The watch registry.
    pub fn watchers(&self) -> &Arc<Watchers> {
        &self.watchers
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes of leadership from now on (`true` while this master leads): long-lived calls
    /// that only the leader serves end when it turns `false`.
    pub fn leadership(&self) -> tokio::sync::watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Registers (or re-registers) a worker with `slots` job slots and room for `prefetch`
    /// leases waiting for a slot (at most [`workers::MAX_PREFETCH_PER_SLOT`] per slot), on
    /// behalf of token `owner`.
    /// A worker id registered by another token is refused (`Err` naming that token) unless
    /// `take_over` (an admin token); so is one not registered here whose leases in the
    /// replicated index record another token (after a failover, before the worker registers
    /// with the new leader, no other token takes its id).
    pub fn register(
        &self,
        worker_id: &str,
        slots: u32,
        prefetch: u32,
        owner: Arc<str>,
        take_over: bool,
    ) -> Result<(), Arc<str>> {
        let mut core = self.lock();
        if let Some(existing) = core.workers.get(worker_id)
            && existing.owner != owner
            && !take_over
        {
            return Err(existing.owner.clone());
        }
        if !take_over && !core.workers.contains_key(worker_id) {
            let leased_to = core
                .projection
                .open
                .values()
                .filter_map(|j| j.lease.as_ref())
                .find(|l| l.worker_id == worker_id && !l.token.is_empty() && *l.token != *owner);
            if let Some(lease) = leased_to {
                return Err(lease.token.as_str().into());
            }
        }
        let entry = core
            .workers
            .entry(worker_id.to_owned())
            .or_insert_with(|| WorkerEntry::new(slots, prefetch, owner.clone()));
        entry.set_slots(slots, prefetch);
        entry.last_heartbeat = std::time::Instant::now();
        entry.owner = owner.clone();
        entry.draining = false;
        self.owners.insert(worker_id.to_owned(), owner);
        Self::rebuild_busy(&mut core, worker_id);
        Ok(())
    }

    /// The name of the token that registered `worker_id`, when it is registered here.
    pub fn worker_owner(&self, worker_id: &str) -> Option<Arc<str>> {
        self.owners.get(worker_id).map(|o| o.value().clone())
    }

    /// The name of the token whose worker registered for `job_id`'s current lease, when that
    /// lease is `worker_id`'s attempt `attempt` (`None` for another or no lease, and for a
    /// lease that predates recorded tokens).
    pub fn lease_token(&self, job_id: &str, worker_id: &str, attempt: u32) -> Option<String> {
        self.lock()
            .projection
            .open
            .get(job_id)
            .and_then(|j| j.lease.as_ref())
            .filter(|l| l.worker_id == worker_id && l.attempt == attempt && !l.token.is_empty())
            .map(|l| l.token.clone())
    }

    /// Opens a worker's lease stream; `None` when the worker is not registered. A draining
    /// worker's stream ends at once.
    pub fn open_lease_stream(&self, worker_id: &str) -> Option<mpsc::Receiver<OutgoingLease>> {
        let mut core = self.lock();
        let entry = core.workers.get_mut(worker_id)?;
        let (tx, rx) = mpsc::channel(entry.capacity() as usize + 1);
        if entry.draining {
            // A draining worker's stream ends at once.
            return Some(rx);
        }
        entry.sender = Some(tx);
        self.dispatch(&mut core);
        Some(rx)
    }

    fn release(core: &mut Core, job_id: &str, worker_id: &str) {
        if let Some(w) = core.workers.get_mut(worker_id) {
            w.busy.remove(job_id);
        }
    }

    /// The cluster's state for the admin API (masters and workers).
    pub fn status(&self) -> Result<v1::ClusterStatusResponse, IndexError> {
        let counts = self.index.counts()?;
        let raft = self.raft.status();
        let ((queued, running), workers, affine_leases, total_leases) = {
            let core = self.lock();
            (
                core.projection.counts(),
                core.workers.iter().map(|(id, w)| w.status(id)).collect(),
                core.affine_leases,
                core.total_leases,
            )
        };
        let masters = self
            .raft
            .members
            .addresses()
            .into_iter()
            .map(|(id, address)| {
                let mut m = v1::MasterStatus {
                    id,
                    address: address.clone(),
                    role: "unknown".into(),
                    ..Default::default()
                };
                if id == raft.id {
                    m.role = role_name(raft.role).into();
                    m.term = raft.term;
                    m.commit_index = raft.commit;
                    m.applied_index = raft.applied;
                    m.lag = raft.last_index.saturating_sub(raft.applied);
                } else if let Some(&(_, matched)) =
                    raft.progress.iter().find(|(peer, _)| *peer == id)
                {
                    m.role = "follower".into();
                    m.term = raft.term;
                    m.commit_index = matched.min(raft.commit);
                    m.applied_index = matched.min(raft.commit);
                    m.lag = raft.last_index.saturating_sub(matched);
                } else if id == raft.leader_id {
                    m.role = "leader".into();
                    m.term = raft.term;
                }
                m
            })
            .collect();
        Ok(v1::ClusterStatusResponse {
            workers,
            queue_depth: queued,
            from_leader: raft.role == raft::StateRole::Leader,
            leader: raft.leader_address.unwrap_or_default(),
            jobs_running: running,
            jobs_completed: counts.completed,
            jobs_failed: counts.failed,
            affine_leases,
            total_leases,
            masters,
        })
    }
}

/// The job whose pending proposal `command` settles, applied or ignored: the commands the
/// scheduler marks `pending` (a lease, the end of an attempt). A submit or a new revision does
/// not: one that changed nothing (a resubmit, a file arriving twice) must not let a second end
/// of the same attempt be proposed while the first is in flight.
fn settles_proposal(command: &Command) -> Option<&str> {
    match command.kind.as_ref()? {
        Kind::Lease(c) => Some(&c.job_id),
        Kind::Requeue(c) => Some(&c.job_id),
        Kind::Complete(c) => Some(&c.job_id),
        Kind::Fail(c) => Some(&c.job_id),
        Kind::Submit(_) | Kind::Resymbolicate(_) | Kind::Purge(_) | Kind::MembersSeen(_) => None,
    }
}

/// Lower-case role names, as `symctl status` shows them.
pub fn role_name(role: raft::StateRole) -> &'static str {
    match role {
        raft::StateRole::Leader => "leader",
        raft::StateRole::Follower => "follower",
        raft::StateRole::Candidate => "candidate",
        raft::StateRole::PreCandidate => "pre-candidate",
    }
}

impl Hooks for Scheduler {
    fn applied(&self, changes: &mut [(Command, Applied)], is_leader: bool) {
        let mut core = self.lock();
        core.is_leader = is_leader;
        let deadline_ms = lease_clock::now() + self.config.lease_ms;
        for (command, applied) in changes {
            if let Some(job_id) = settles_proposal(command) {
                // Its proposal (if this master made one) is settled.
                core.pending.remove(job_id);
            }
            match applied {
                Applied::Changed { job, spec } => {
                    let id = job.job_id.as_str();
                    match core.projection.change(job, deadline_ms) {
                        Change::Queued { released } => {
                            if let Some(worker_id) = released {
                                Self::release(&mut core, id, &worker_id);
                            }
                        }
                        Change::Finished { .. } => {
                            if is_leader && job.state == v1::JobState::Failed {
                                crate::metrics::JOBS_FAILED_TOTAL.inc();
                            }
                            // Its slot is free on whichever worker holds it, also one whose
                            // lease was proposed while it finished (that Lease is then ignored).
                            for w in core.workers.values_mut() {
                                w.busy.remove(id);
                            }
                        }
                        Change::Leased { lease, released } => {
                            if let Some(worker_id) = released {
                                Self::release(&mut core, id, &worker_id);
                            }
                            if let Some(w) = core.workers.get_mut(&lease.worker_id) {
                                w.busy.insert(id.to_owned());
                            }
                            if is_leader {
                                self.send_lease(&mut core, id, &lease, spec.take());
                            }
                        }
                    }
                    self.watchers
                        .changed(id, crate::index::is_terminal(job.state));
                }
                Applied::Ignored => {
                    if let Some(Kind::Lease(c)) = &command.kind {
                        Self::lease_refused(&mut core, &c.job_id, &c.worker_id);
                    }
                }
                Applied::Purged(_) => {}
            }
        }
        self.dispatch(&mut core);
    }

    fn role_changed(&self, is_leader: bool) {
        self.leading.send_replace(is_leader);
        let mut core = self.lock();
        core.is_leader = is_leader;
        core.pending.clear();
        if is_leader {
            // Every lease starts afresh under the new leader's clock; queued jobs go back to
            // the queue in submission order is not known here, so keep the applied order.
            let deadline_ms = lease_clock::now() + self.config.lease_ms;
            let mut queued = Vec::new();
            for (id, job) in core.projection.open.iter_mut() {
                match &mut job.lease {
                    Some(lease) => lease.deadline_ms = deadline_ms,
                    None => queued.push(id.clone()),
                }
            }
            let known: HashSet<String> = core.projection.queue.iter().cloned().collect();
            for id in queued {
                if !known.contains(&id) {
                    core.projection.queue.push_back(id);
                }
            }
            tracing::info!(
                open_jobs = core.projection.open.len(),
                "leading: scheduling from the replicated index"
            );
        } else {
            // Workers follow the leader: end their streams here.
            core.workers.clear();
            self.owners.clear();
            tracing::info!("following: worker streams closed");
        }
    }

    fn restored(&self) {
        if let Err(e) = self.reload() {
            tracing::error!(error = %e, "cannot reload the scheduler after a snapshot");
        }
        self.watchers.all_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::command;
    use crate::index::{JobState, JobSummary};
    use crate::raft::RaftConfig;

    /// A scheduler over a Raft channel no node reads: what it proposes stays in flight.
    fn in_flight_scheduler(
        dir: &std::path::Path,
    ) -> (
        Scheduler,
        std::sync::mpsc::Receiver<crate::raft::Input<Applied>>,
    ) {
        let index = Index::open_file(&dir.join("master.redb")).unwrap();
        let config = RaftConfig::alone(dir);
        let (raft, inputs) = crate::raft::channel(&config);
        let scheduler = Scheduler::new(
            index,
            raft,
            SchedulerConfig {
                lease_ms: 0,
                ..SchedulerConfig::default()
            },
        )
        .unwrap();
        (scheduler, inputs)
    }

    fn changed(job_id: &str, state: JobState, attempts: u32, on: Option<&str>) -> Applied {
        Applied::Changed {
            job: JobSummary {
                job_id: job_id.into(),
                state,
                routing_key: "k".into(),
                attempts,
                uncounted_attempts: 0,
                running_on: on.map(str::to_owned),
                lease_token: String::new(),
                revision: 2,
                kind: v1::JobKind::Native as i32,
                queued_since_ms: 1,
            },
            spec: None,
        }
    }

    /// Commits `commands` as the node does: one batch through the real state machine
    /// (`replica::IndexMachine`, the scheduler as its hooks), the log index after `last`.
    fn commit(machine: &crate::replica::IndexMachine, last: &mut u64, commands: &[Vec<u8>]) {
        use crate::raft::StateMachine;
        use crate::raft::state_machine::{Applying, Batch};
        let entries = commands
            .iter()
            .map(|data| {
                *last += 1;
                Applying::Command {
                    index: *last,
                    data,
                    place: None,
                }
            })
            .collect();
        machine
            .apply(Batch {
                entries,
                applied: (*last, 1),
                durable: false,
                is_leader: true,
            })
            .unwrap();
    }

    /// The commands proposed so far and not taken yet (each `then` after its command).
    fn proposed(inputs: &std::sync::mpsc::Receiver<crate::raft::Input<Applied>>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Ok(input) = inputs.try_recv() {
            if let crate::raft::Input::Propose { command, then, .. } = input {
                out.push(command);
                out.extend(then);
            }
        }
        out
    }

    /// Issue 54, item 4: a worker's completion of revision 1 proposed twice (its retry after a
    /// failover reaches the new leader while the first is still in flight) must not complete
    /// revision 2 when the duplicate commits after the job was queued again for a file that
    /// arrived and leased again: before, `apply` took a completion of any attempt or revision,
    /// and the re-run's job ended COMPLETED with the old result while its worker still ran.
    #[tokio::test]
    async fn a_late_duplicate_completion_of_revision_1_does_not_complete_revision_2() {
        use futures::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let (scheduler, inputs) = in_flight_scheduler(dir.path());
        let scheduler = Arc::new(scheduler);
        let machine =
            crate::replica::IndexMachine::new(scheduler.index().clone(), scheduler.clone());
        let mut last = 0;
        let job = "p/x";
        scheduler.role_changed(true);
        scheduler
            .register("w1", 1, 0, "worker".into(), false)
            .unwrap();
        let _leases = scheduler.open_lease_stream("w1").unwrap();
        let submit = command::submit(job, v1::JobKind::Native, vec![7; 64], "k", 1);
        commit(&machine, &mut last, &[command::encode(&submit)]);
        // The scheduler leased it to w1 (attempt 1).
        let lease = proposed(&inputs);
        assert_eq!(lease.len(), 1, "one lease proposed");
        commit(&machine, &mut last, &lease);
        assert_eq!(
            scheduler.lease_token(job, "w1", 1).as_deref(),
            Some("worker")
        );

        let completion = |result: &str| Completion {
            result_zstd: crate::index::compress(result.as_bytes()),
            missing: vec![v1::MissingFile {
                key: "0a0b0c0d-0000-0000-0000-000000000001".into(),
                image: "App".into(),
                arch: "arm64".into(),
            }],
            ..Completion::default()
        };
        // Its result is proposed (and stays in flight: no node commits it)...
        let first = scheduler.complete("w1", job, 1, completion(r#"{"revision":1}"#));
        assert!(
            first.now_or_never().is_none(),
            "the completion waits for its commit"
        );
        let first = proposed(&inputs);
        // ...a failover: the new leader knows nothing in flight; the worker re-registers and
        // reports the same result again, which it proposes too.
        scheduler.role_changed(false);
        scheduler.role_changed(true);
        scheduler
            .register("w1", 1, 0, "worker".into(), false)
            .unwrap();
        let _leases = scheduler.open_lease_stream("w1").unwrap();
        let second = scheduler.complete("w1", job, 1, completion(r#"{"revision":1}"#));
        assert!(
            second.now_or_never().is_none(),
            "the completion waits for its commit"
        );
        let duplicate = proposed(&inputs);
        assert_eq!((first.len(), duplicate.len()), (1, 1));

        // The first commits: revision 1 is COMPLETED, lacking a file; the file arrives, the job
        // is queued again as revision 2 and leased again (attempt 2).
        commit(&machine, &mut last, &first);
        let resymbolicate = command::resymbolicate(job, "App arrived", 10);
        commit(&machine, &mut last, &[command::encode(&resymbolicate)]);
        let lease = proposed(&inputs);
        assert_eq!(lease.len(), 1, "revision 2 leased");
        commit(&machine, &mut last, &lease);
        let running = scheduler.index().job(job, true).unwrap().unwrap();
        assert_eq!(
            (
                running.state(),
                running.record.revision,
                running.record.attempts
            ),
            (JobState::Running, 2, 2)
        );

        // The duplicate of revision 1 commits now: stale, it changes nothing.
        commit(&machine, &mut last, &duplicate);
        let after = scheduler.index().job(job, true).unwrap().unwrap();
        assert_eq!(
            (after.state(), after.record.revision, after.record.attempts),
            (JobState::Running, 2, 2),
            "revision 2 was completed by a duplicate of revision 1's result"
        );
        assert!(
            scheduler.lease_token(job, "w1", 2).is_some(),
            "w1 still runs attempt 2"
        );

        // Revision 2's own result completes it.
        let third = scheduler.complete(
            "w1",
            job,
            2,
            Completion {
                result_zstd: crate::index::compress(br#"{"revision":2}"#),
                ..Completion::default()
            },
        );
        assert!(third.now_or_never().is_none());
        commit(&machine, &mut last, &proposed(&inputs));
        let done = scheduler.index().job(job, true).unwrap().unwrap();
        assert_eq!(
            (done.state(), done.record.revision),
            (JobState::Completed, 2)
        );
        assert_eq!(done.result_json.as_deref(), Some(&br#"{"revision":2}"#[..]));
    }

    #[test]
    fn a_resymbolicate_or_resubmit_that_changes_nothing_leaves_an_attempt_s_end_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let (scheduler, _inputs) = in_flight_scheduler(dir.path());
        let job = "p/x";
        scheduler.applied(
            &mut [
                (
                    command::submit(job, v1::JobKind::Native, vec![1], "k", 1),
                    changed(job, JobState::Queued, 0, None),
                ),
                (
                    command::lease(job, "w1", "", 1, 2),
                    changed(job, JobState::Running, 1, Some("w1")),
                ),
            ],
            false,
        );
        // Leading now: every lease gets a fresh deadline, here of 0 ms.
        scheduler.role_changed(true);
        assert_eq!(
            scheduler.expire_leases(),
            1,
            "the lease expired: a Requeue proposed"
        );
        assert_eq!(scheduler.expire_leases(), 0, "that Requeue is in flight");
        // A second file the job lacked arrives, and a client resubmits it: both change nothing.
        scheduler.applied(
            &mut [
                (
                    command::resymbolicate(job, "dbg-2 arrived", 3),
                    Applied::Ignored,
                ),
                (
                    command::submit(job, v1::JobKind::Native, vec![1], "k", 4),
                    Applied::Ignored,
                ),
            ],
            true,
        );
        assert_eq!(
            scheduler.expire_leases(),
            0,
            "the Requeue is still in flight: no second end of attempt 1"
        );
        // The Requeue applies: settled, and the job waits for a worker.
        scheduler.applied(
            &mut [(
                command::requeue(job, 1, "lease expired", 5),
                changed(job, JobState::Queued, 1, None),
            )],
            true,
        );
        assert!(!scheduler.lock().pending.contains(job));
        assert_eq!(scheduler.lock().projection.counts(), (1, 0));
    }
}

//! Scheduling by leases, on the leader, from the replicated index.
//!
//! Every master keeps, in memory, the unfinished jobs only ([`OpenJob`]: the queue and the
//! current leases), updated from the commands it applies ([`Hooks::applied`]), so a master that
//! becomes leader already knows every queued and running job: running jobs get a fresh lease
//! deadline, and a completion for the current attempt from the worker that held it still counts.
//! Finished jobs live only in the index on disk.
//!
//! Only the leader schedules. A free worker slot takes a queued job ([`placement`]); the grant
//! is proposed as a `Lease` command and sent on the worker's lease stream once applied. Leases
//! are renewed by heartbeats (in memory: deadlines are the leader's business) and expire into a
//! `Requeue`, or a `Fail` after `max_attempts`. Jobs with a proposal in flight are `pending` so
//! that nothing is proposed twice.
//!
//! - [`placement`]: rendezvous routing, least-loaded fallback, random baseline;
//! - [`workers`]: the connected workers, their slots and lease streams;
//! - [`watchers`]: waking the watch streams of one job.

pub mod placement;
pub mod watchers;
pub mod workers;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use prost::Message;
use symcluster_proto::cluster::v1::command::Kind;
use symcluster_proto::v1;
use tokio::sync::mpsc;

use crate::index::apply::Applied;
use crate::index::command::{self, now_ms};
use crate::index::{Command, Index, IndexError, JobView};
use crate::raft::{Hooks, ProposeError, RaftHandle};
pub use placement::Routing;
use watchers::Watchers;
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

/// The current lease of a running job.
#[derive(Debug, Clone)]
struct LeaseInfo {
    worker_id: String,
    attempt: u32,
    /// Ms since the epoch, by this master's clock.
    deadline_ms: u64,
}

/// An unfinished job.
#[derive(Debug, Clone)]
struct OpenJob {
    routing_key: String,
    /// `v1::JobKind` as i32.
    kind: i32,
    /// Submitted (or queued again for a file that arrived) at, ms since the epoch.
    queued_since_ms: u64,
    attempts: u32,
    /// Of `attempts`, those that do not count against `max_attempts`
    /// (`JobRecord.uncounted_attempts`).
    uncounted: u32,
    lease: Option<LeaseInfo>,
    /// It runs again for a file that arrived: the worker looks every file up afresh.
    recheck_missing: bool,
}

#[derive(Default)]
struct Core {
    open: HashMap<String, OpenJob>,
    /// Queued job ids, oldest first (may hold ids that are no longer queued: skipped).
    queue: VecDeque<String>,
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
            config,
            leading: tokio::sync::watch::Sender::new(false),
        };
        scheduler.reload()?;
        Ok(scheduler)
    }

    /// Rebuilds the unfinished jobs from the index: running jobs get a fresh lease deadline.
    fn reload(&self) -> Result<(), IndexError> {
        let open_jobs = self.index.open_jobs()?;
        let deadline_ms = now_ms() + self.config.lease_ms;
        let mut core = self.lock();
        core.open.clear();
        core.queue.clear();
        core.pending.clear();
        for job in open_jobs {
            let lease = job.running_on.map(|worker_id| LeaseInfo {
                worker_id,
                attempt: job.attempts,
                deadline_ms,
            });
            if lease.is_none() {
                core.queue.push_back(job.job_id.clone());
            }
            core.open.insert(
                job.job_id,
                OpenJob {
                    routing_key: job.routing_key,
                    kind: job.kind,
                    queued_since_ms: job.queued_since_ms,
                    attempts: job.attempts,
                    uncounted: job.uncounted_attempts,
                    lease,
                    recheck_missing: job.revision > 1,
                },
            );
        }
        let leases: Vec<(String, String)> = core
            .open
            .iter()
            .filter_map(|(id, j)| j.lease.as_ref().map(|l| (id.clone(), l.worker_id.clone())))
            .collect();
        for worker in core.workers.values_mut() {
            worker.busy.clear();
        }
        for (job_id, worker_id) in leases {
            if let Some(w) = core.workers.get_mut(&worker_id) {
                w.busy.insert(job_id);
            }
        }
        Ok(())
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

    /// Submits a job (idempotent by id). Returns the stored job and whether this call created it.
    pub async fn submit(
        &self,
        job_id: &str,
        kind: v1::JobKind,
        spec: Vec<u8>,
        routing_key: &str,
    ) -> Result<(JobView, bool), ScheduleError> {
        self.propose_submit(
            job_id,
            command::submit(job_id, kind, spec, routing_key, now_ms()),
        )
        .await
    }

    /// Proposes `submit` unless `job_id` exists: the stored job, and whether it was created.
    async fn propose_submit(
        &self,
        job_id: &str,
        submit: Command,
    ) -> Result<(JobView, bool), ScheduleError> {
        if let Some(existing) = self.index.job(job_id, true)? {
            return Ok((existing, false));
        }
        let applied = self.raft.propose(submit).await?;
        let created = matches!(applied, Applied::Changed { .. });
        let job = self.index.job(job_id, true)?.ok_or_else(|| {
            IndexError::Corrupt(format!("job {job_id} is missing right after its submit"))
        })?;
        Ok((job, created))
    }

    /// Records a job that cannot run at all (its report does not parse): stored FAILED with
    /// `error` by one command, never queued, so the client reads a precise error instead of
    /// losing the job.
    pub async fn submit_failed(
        &self,
        job_id: &str,
        kind: v1::JobKind,
        spec: Vec<u8>,
        error: &str,
    ) -> Result<(JobView, bool), ScheduleError> {
        self.propose_submit(
            job_id,
            command::submit_unreadable(job_id, kind, spec, error, now_ms()),
        )
        .await
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
    /// `take_over` (an admin token).
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
        let busy: HashSet<String> = core
            .open
            .iter()
            .filter(|(_, j)| j.lease.as_ref().is_some_and(|l| l.worker_id == worker_id))
            .map(|(id, _)| id.clone())
            .collect();
        let entry = core
            .workers
            .entry(worker_id.to_owned())
            .or_insert_with(|| WorkerEntry::new(slots, prefetch, owner.clone()));
        entry.set_slots(slots, prefetch);
        entry.busy = busy;
        entry.last_heartbeat = std::time::Instant::now();
        entry.owner = owner;
        entry.draining = false;
        Ok(())
    }

    /// The name of the token that registered `worker_id`, when it is registered here.
    pub fn worker_owner(&self, worker_id: &str) -> Option<Arc<str>> {
        self.lock().workers.get(worker_id).map(|w| w.owner.clone())
    }

    /// Opens a worker's lease stream; `None` when the worker is not registered. A draining
    /// worker's stream ends at once.
    pub fn open_lease_stream(&self, worker_id: &str) -> Option<mpsc::Receiver<v1::Lease>> {
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

    /// A worker's result: `false` when the job is already finished or unknown, or when
    /// `worker_id` and `attempt` are not the job's current lease (another worker's, or an
    /// attempt that expired).
    pub async fn complete(
        &self,
        worker_id: &str,
        job_id: &str,
        attempt: u32,
        completion: Completion,
    ) -> Result<bool, ScheduleError> {
        let next_leases = {
            let mut core = self.lock();
            let current = core.open.get(job_id).and_then(|j| j.lease.as_ref());
            if current.is_none_or(|l| l.attempt != attempt || l.worker_id != worker_id) {
                return Ok(false);
            }
            // The worker's slot is free from now on, whatever becomes of this result: its next
            // lease is proposed with the completion, in the same Ready (one fsync and one
            // message per follower for both, and the worker gets its next job a commit sooner).
            if let Some(worker) = core.workers.get_mut(worker_id) {
                worker.busy.remove(job_id);
            }
            self.next_leases(&mut core)
        };
        let applied = self
            .raft
            .propose_then(
                command::with_call_tree(
                    command::with_missing(
                        command::complete_zstd(
                            job_id,
                            attempt,
                            worker_id,
                            completion.result_zstd,
                            completion.group,
                            now_ms(),
                        ),
                        completion.missing,
                    ),
                    completion.call_tree,
                ),
                next_leases,
            )
            .await?;
        Ok(matches!(applied, Applied::Changed { .. }))
    }

    /// A worker's failed attempt: requeued while attempts remain and the error is retryable,
    /// failed for good otherwise (recording the source map it lacked, `missing`). `false` when
    /// the attempt is not the job's current lease.
    pub async fn fail(
        &self,
        worker_id: &str,
        job_id: &str,
        attempt: u32,
        error: &str,
        retryable: bool,
        missing: Vec<v1::MissingFile>,
    ) -> Result<bool, ScheduleError> {
        let command = {
            let mut core = self.lock();
            let current = core.open.get(job_id).and_then(|j| j.lease.as_ref());
            if current.is_none_or(|l| l.attempt != attempt || l.worker_id != worker_id)
                || core.pending.contains(job_id)
            {
                return Ok(false);
            }
            core.pending.insert(job_id.to_owned());
            let uncounted = core.open.get(job_id).map_or(0, |j| j.uncounted);
            let end = self.end_attempt(job_id, attempt, uncounted, error, retryable);
            command::with_missing(end, missing)
        };
        let applied = self.raft.propose(command).await;
        if applied.is_err() {
            self.lock().pending.remove(job_id);
        }
        Ok(matches!(applied?, Applied::Changed { .. }))
    }

    /// Queues again every finished job of `project` (of every project when `None`) that
    /// lacked one of the files `keys` name (`MissingFile.key`): one `Resymbolicate` per job,
    /// all proposed at once (one commit for many). Jobs queued or running already are left
    /// alone, so each job runs once per arrival. Returns how many jobs were queued again.
    pub async fn files_uploaded(
        &self,
        project: Option<&str>,
        keys: &[String],
    ) -> Result<u64, ScheduleError> {
        // Read off the async runtime: one project's lookups are range scans, but shared files
        // scan the whole table.
        let (index, project_owned, wanted) = (
            self.index.clone(),
            project.map(str::to_owned),
            keys.to_vec(),
        );
        let jobs = tokio::task::spawn_blocking(move || {
            index.jobs_lacking(project_owned.as_deref(), &wanted)
        })
        .await
        .map_err(|e| ScheduleError::Propose(ProposeError::Storage(format!("index task: {e}"))))??;
        let reason = match keys {
            [one] => format!("symbolicating again: {one} arrived"),
            many => format!("symbolicating again: {} files arrived", many.len()),
        };
        let at_ms = now_ms();
        let mut proposals = tokio::task::JoinSet::new();
        for job in jobs {
            let (raft, reason) = (self.raft.clone(), reason.clone());
            proposals.spawn(async move {
                raft.propose(command::resymbolicate(&job, &reason, at_ms))
                    .await
            });
        }
        let mut requeued = 0;
        while let Some(done) = proposals.join_next().await {
            let applied = done.map_err(|e| {
                ScheduleError::Propose(ProposeError::Storage(format!("proposal task: {e}")))
            })??;
            requeued += u64::from(matches!(applied, Applied::Changed { .. }));
        }
        Ok(requeued)
    }

    /// The command that ends an attempt without a result: `Requeue`, or `Fail` when the error
    /// is permanent or the attempts that count (`attempt - uncounted`) are used up.
    fn end_attempt(
        &self,
        job_id: &str,
        attempt: u32,
        uncounted: u32,
        error: &str,
        retryable: bool,
    ) -> Command {
        let at_ms = now_ms();
        let counted = counted_attempt(attempt, uncounted);
        if retryable && counted < self.config.max_attempts {
            command::requeue(job_id, attempt, error, at_ms)
        } else if retryable {
            let error = format!(
                "{error} (attempt {counted} of {})",
                self.config.max_attempts
            );
            command::fail(job_id, attempt, &error, at_ms)
        } else {
            command::fail(job_id, attempt, error, at_ms)
        }
    }

    /// Starts draining `worker_id` (`WorkerApi.Drain`): it gets no more leases, and its lease
    /// stream ends after the leases already sent (a lease applied later finds no stream and goes
    /// back to the queue). Returns how many jobs it holds leases for; `None` when the worker is
    /// not registered here.
    pub fn drain(&self, worker_id: &str) -> Option<u32> {
        let mut core = self.lock();
        let worker = core.workers.get_mut(worker_id)?;
        worker.draining = true;
        worker.sender = None;
        Some(worker.busy.len() as u32)
    }

    /// Ends `worker_id` (`WorkerApi.Deregister`): every job it still holds a lease for goes back
    /// to the queue at once, with `reason`, and the worker leaves the registry. The jobs the
    /// worker names in `unstarted` never ran there: their attempt does not count against
    /// `max_attempts` (`Requeue.unstarted`). Resolves when the requeues are applied; returns how
    /// many jobs were queued again.
    pub async fn deregister(
        &self,
        worker_id: &str,
        reason: &str,
        unstarted: &HashSet<String>,
    ) -> Result<u32, ScheduleError> {
        let commands: Vec<(String, Command)> = {
            let mut core = self.lock();
            core.workers.remove(worker_id);
            let held: Vec<(String, u32)> = core
                .open
                .iter()
                .filter(|(id, _)| !core.pending.contains(*id))
                .filter_map(|(id, j)| {
                    j.lease
                        .as_ref()
                        .filter(|l| l.worker_id == worker_id)
                        .map(|l| (id.clone(), l.attempt))
                })
                .collect();
            let at_ms = now_ms();
            held.into_iter()
                .map(|(job_id, attempt)| {
                    core.pending.insert(job_id.clone());
                    let command = if unstarted.contains(&job_id) {
                        let reason = format!("{reason} (it never started there: not counted)");
                        command::requeue_unstarted(&job_id, attempt, &reason, at_ms)
                    } else {
                        command::requeue(&job_id, attempt, reason, at_ms)
                    };
                    (job_id, command)
                })
                .collect()
        };
        // All proposed at once: one commit for many.
        let mut proposals = tokio::task::JoinSet::new();
        for (job_id, command) in commands {
            let raft = self.raft.clone();
            proposals.spawn(async move { (raft.propose(command).await, job_id) });
        }
        let (mut requeued, mut refused) = (0, None);
        while let Some(done) = proposals.join_next().await {
            let (applied, job_id) = done.map_err(|e| {
                ScheduleError::Propose(ProposeError::Storage(format!("proposal task: {e}")))
            })?;
            match applied {
                Ok(applied) => requeued += u32::from(matches!(applied, Applied::Changed { .. })),
                Err(e) => {
                    self.lock().pending.remove(&job_id);
                    refused = Some(e);
                }
            }
        }
        match refused {
            Some(e) => Err(e.into()),
            None => Ok(requeued),
        }
    }

    /// What an autoscaler needs: queued jobs by kind, the oldest queued job's age, and the
    /// busy and free slots of the workers that take leases (draining workers excluded). Leader
    /// only; other masters report an empty queue.
    pub fn queue_stats(&self) -> QueueStats {
        let core = self.lock();
        let mut stats = QueueStats::default();
        if !core.is_leader {
            return stats;
        }
        let now = now_ms();
        for job in core.open.values().filter(|j| j.lease.is_none()) {
            let kind = v1::JobKind::try_from(job.kind).unwrap_or(v1::JobKind::Unspecified);
            let entry = stats.queued.entry(kind).or_default();
            entry.0 += 1;
            entry.1 = entry.1.max(now.saturating_sub(job.queued_since_ms));
        }
        for worker in core.workers.values() {
            if worker.draining {
                stats.draining_workers += 1;
            } else if worker.connected() {
                let held = worker.busy.len() as u32;
                stats.busy_slots += u64::from(held);
                stats.free_slots += u64::from(worker.slots.saturating_sub(held));
            }
        }
        stats
    }

    /// Renews the leases of the `leased` jobs on `worker_id` (running or waiting for a slot) and
    /// records how many `running` hold a slot; `false` if the worker is unknown.
    pub fn heartbeat(
        &self,
        worker_id: &str,
        leased: &[String],
        running: u32,
        cache: Option<v1::CacheStats>,
    ) -> bool {
        let mut core = self.lock();
        let deadline = now_ms() + self.config.lease_ms;
        let Some(worker) = core.workers.get_mut(worker_id) else {
            return false;
        };
        worker.last_heartbeat = std::time::Instant::now();
        worker.running = running;
        if let Some(cache) = cache {
            worker.cache = cache;
        }
        for job_id in leased {
            if let Some(lease) = core.open.get_mut(job_id).and_then(|j| j.lease.as_mut())
                && lease.worker_id == worker_id
            {
                lease.deadline_ms = deadline;
            }
        }
        true
    }

    /// Proposes the end of every lease whose deadline passed (worker dead, hung or cut off);
    /// returns how many. Leader only.
    pub fn expire_leases(&self) -> usize {
        let now = now_ms();
        let mut core = self.lock();
        if !core.is_leader {
            return 0;
        }
        let expired: Vec<(String, LeaseInfo, u32)> = core
            .open
            .iter()
            .filter(|(id, _)| !core.pending.contains(*id))
            .filter_map(|(id, j)| j.lease.clone().map(|l| (id.clone(), l, j.uncounted)))
            .filter(|(_, l, _)| l.deadline_ms <= now)
            .collect();
        for (job_id, lease, uncounted) in &expired {
            core.pending.insert(job_id.clone());
            let reason = format!("lease expired on worker {}", lease.worker_id);
            let end = self.end_attempt(job_id, lease.attempt, *uncounted, &reason, true);
            self.raft.propose_nowait(end);
        }
        expired.len()
    }

    /// Hands queued jobs to workers with free slots (leader only).
    ///
    /// Affinity routing looks at the first [`LOOKAHEAD`] queued jobs for one whose preferred
    /// worker has a free slot; when none has, the oldest job goes to the least-loaded worker.
    /// The oldest job is never passed over more than [`LOOKAHEAD`] times in a row.
    fn dispatch(&self, core: &mut Core) {
        for lease in self.next_leases(core) {
            self.raft.propose_nowait(lease);
        }
    }

    /// The lease commands that fill free worker slots from the queue (marked pending; the
    /// caller proposes them).
    fn next_leases(&self, core: &mut Core) -> Vec<Command> {
        let mut leases = Vec::new();
        if !core.is_leader {
            return leases;
        }
        loop {
            while let Some(head) = core.queue.front() {
                if core.pending.contains(head)
                    || core.open.get(head).is_none_or(|j| j.lease.is_some())
                {
                    core.queue.pop_front();
                    core.head_skips = 0;
                } else {
                    break;
                }
            }
            if core.queue.is_empty() || !core.workers.values().any(WorkerEntry::free) {
                return leases;
            }
            let head_key = core.open[&core.queue[0]].routing_key.clone();
            let choice = match self.config.routing {
                Routing::Affinity => Self::affine_choice(core).or_else(|| {
                    placement::pick_worker(&core.workers, &head_key).map(|(w, a)| (0, w, a))
                }),
                Routing::Random => {
                    placement::pick_random(&core.workers, core.total_leases, &head_key)
                        .map(|(w, a)| (0, w, a))
                }
            };
            let Some((position, worker_id, affine)) = choice else {
                return leases;
            };
            core.head_skips = if position == 0 {
                0
            } else {
                core.head_skips + 1
            };
            let job_id = core.queue.remove(position).expect("position in queue");
            let attempt = core.open[&job_id].attempts + 1;
            core.pending.insert(job_id.clone());
            if let Some(w) = core.workers.get_mut(&worker_id) {
                w.busy.insert(job_id.clone());
            }
            core.total_leases += 1;
            core.affine_leases += u64::from(affine);
            crate::metrics::LEASES.inc();
            if affine {
                crate::metrics::AFFINE_LEASES.inc();
            }
            tracing::debug!(job_id = %job_id, attempt, worker_id = %worker_id, affine, "job leased");
            leases.push(command::lease(&job_id, &worker_id, attempt, now_ms()));
        }
    }

    /// The first of the first [`LOOKAHEAD`] queued jobs whose preferred worker has a free slot,
    /// unless the oldest job has waited its turn long enough (a prefetch is filled only by
    /// [`placement::pick_worker`], when no worker has a free slot).
    fn affine_choice(core: &Core) -> Option<(usize, String, bool)> {
        if core.head_skips >= LOOKAHEAD {
            return None;
        }
        for (position, job_id) in core.queue.iter().take(LOOKAHEAD).enumerate() {
            if core.pending.contains(job_id) {
                continue;
            }
            let Some(job) = core.open.get(job_id).filter(|j| j.lease.is_none()) else {
                continue;
            };
            if let Some((id, worker)) = placement::preferred(&core.workers, &job.routing_key)
                && worker.has_free_slot()
            {
                return Some((position, id.clone(), true));
            }
        }
        None
    }

    /// Sends an applied lease on its worker's stream; a worker that is gone gets its lease
    /// ended at once.
    fn send_lease(
        &self,
        core: &mut Core,
        job_id: &str,
        worker_id: &str,
        attempt: u32,
        deadline_ms: u64,
    ) {
        let spec = match self.index.spec(job_id) {
            Ok(Some(spec)) => v1::JobSpec::decode(spec.as_slice()).ok(),
            _ => None,
        };
        // The attempt's trace starts here; the worker's `job` span and the completion continue it.
        let span = tracing::info_span!("lease", job_id, attempt, worker_id);
        let _entered = span.enter();
        let lease = v1::Lease {
            job: spec,
            attempt,
            deadline_ms,
            recheck_missing: core.open.get(job_id).is_some_and(|j| j.recheck_missing),
            traceparent: symcluster_telemetry::trace_context::traceparent(&span),
        };
        let sent = core
            .workers
            .get(worker_id)
            .and_then(|w| w.sender.as_ref())
            .is_some_and(|s| s.try_send(lease).is_ok());
        if !sent {
            if let Some(w) = core.workers.get_mut(worker_id) {
                w.sender = None;
            }
            core.pending.insert(job_id.to_owned());
            // The lease never reached the worker: the attempt does not count.
            let reason = format!("worker {worker_id} disconnected");
            self.raft.propose_nowait(command::requeue_unstarted(
                job_id,
                attempt,
                &reason,
                now_ms(),
            ));
        }
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
        let (workers, affine_leases, total_leases) = {
            let core = self.lock();
            (
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
            queue_depth: counts.queued,
            from_leader: raft.role == raft::StateRole::Leader,
            leader: raft.leader_address.unwrap_or_default(),
            jobs_running: counts.running,
            jobs_completed: counts.completed,
            jobs_failed: counts.failed,
            affine_leases,
            total_leases,
            masters,
        })
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
    fn applied(&self, changes: &[(Command, Applied)], is_leader: bool) {
        let mut core = self.lock();
        core.is_leader = is_leader;
        for (command, applied) in changes {
            let Some(kind) = &command.kind else { continue };
            let changed = matches!(applied, Applied::Changed { .. });
            match kind {
                Kind::Submit(c) => {
                    if changed && c.unreadable.is_empty() {
                        core.open.insert(
                            c.job_id.clone(),
                            OpenJob {
                                routing_key: c.routing_key.clone(),
                                kind: c.kind,
                                queued_since_ms: c.at_ms,
                                attempts: 0,
                                uncounted: 0,
                                lease: None,
                                recheck_missing: false,
                            },
                        );
                        core.queue.push_back(c.job_id.clone());
                    }
                }
                Kind::Lease(c) => {
                    core.pending.remove(&c.job_id);
                    if changed {
                        let deadline_ms = now_ms() + self.config.lease_ms;
                        if let Some(job) = core.open.get_mut(&c.job_id) {
                            job.attempts = c.attempt;
                            job.lease = Some(LeaseInfo {
                                worker_id: c.worker_id.clone(),
                                attempt: c.attempt,
                                deadline_ms,
                            });
                        }
                        if let Some(w) = core.workers.get_mut(&c.worker_id) {
                            w.busy.insert(c.job_id.clone());
                        }
                        if is_leader {
                            self.send_lease(
                                &mut core,
                                &c.job_id,
                                &c.worker_id,
                                c.attempt,
                                deadline_ms,
                            );
                        }
                    } else {
                        Self::release(&mut core, &c.job_id, &c.worker_id);
                        if core.open.get(&c.job_id).is_some_and(|j| j.lease.is_none()) {
                            core.queue.push_front(c.job_id.clone());
                        }
                    }
                }
                Kind::Requeue(c) => {
                    core.pending.remove(&c.job_id);
                    if changed {
                        // Hooks run after the whole batch is applied: the record (not a count
                        // kept here) says how many attempts do not count, whatever else the
                        // batch did to the job.
                        // Unread (a storage error, logged), the count kept stays: one attempt
                        // too many counted, never one too few.
                        let uncounted = match c.unstarted.then(|| self.index.job(&c.job_id, false))
                        {
                            Some(Ok(Some(job))) => {
                                Some(job.record.uncounted_attempts.min(job.record.attempts))
                            }
                            Some(Err(e)) => {
                                tracing::warn!(job_id = %c.job_id, error = %e, "cannot read the job's uncounted attempts");
                                None
                            }
                            Some(Ok(None)) | None => None,
                        };
                        let worker = core.open.get_mut(&c.job_id).and_then(|j| {
                            if let Some(uncounted) = uncounted {
                                j.uncounted = uncounted;
                            }
                            j.lease.take()
                        });
                        let worker = worker.map(|l| l.worker_id);
                        if let Some(worker) = worker {
                            Self::release(&mut core, &c.job_id, &worker);
                        }
                        core.queue.push_front(c.job_id.clone());
                    }
                }
                Kind::Resymbolicate(c) => {
                    // Queued again: its routing key and attempts so far (attempt numbers go on
                    // across revisions; the earlier ones no longer count) are in its record.
                    let record = changed
                        .then(|| self.index.job(&c.job_id, false).ok().flatten())
                        .flatten();
                    if let Some(job) = record {
                        core.open.insert(
                            c.job_id.clone(),
                            OpenJob {
                                routing_key: job.record.routing_key,
                                kind: job.record.kind,
                                queued_since_ms: c.at_ms,
                                attempts: job.record.attempts,
                                uncounted: job.record.uncounted_attempts.min(job.record.attempts),
                                lease: None,
                                recheck_missing: true,
                            },
                        );
                        core.queue.push_back(c.job_id.clone());
                    }
                }
                Kind::Complete(pb) => self.finished(&mut core, &pb.job_id, changed),
                Kind::Fail(pb) => self.finished(&mut core, &pb.job_id, changed),
                Kind::Purge(_) | Kind::MembersSeen(_) => {}
            }
            if let Applied::Changed { job_id, .. } = applied {
                self.watchers.changed(job_id);
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
            let deadline_ms = now_ms() + self.config.lease_ms;
            let mut queued = Vec::new();
            for (id, job) in core.open.iter_mut() {
                match &mut job.lease {
                    Some(lease) => lease.deadline_ms = deadline_ms,
                    None => queued.push(id.clone()),
                }
            }
            let known: HashSet<String> = core.queue.iter().cloned().collect();
            for id in queued {
                if !known.contains(&id) {
                    core.queue.push_back(id);
                }
            }
            tracing::info!(
                open_jobs = core.open.len(),
                "leading: scheduling from the replicated index"
            );
        } else {
            // Workers follow the leader: end their streams here.
            core.workers.clear();
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

impl Scheduler {
    fn finished(&self, core: &mut Core, job_id: &str, changed: bool) {
        core.pending.remove(job_id);
        if changed && let Some(job) = core.open.remove(job_id) {
            if let Some(lease) = job.lease {
                Self::release(core, job_id, &lease.worker_id);
            }
            // A job leased while the Fail was in flight (not possible for the leader's own
            // proposals, but harmless): free its slot anywhere.
            for w in core.workers.values_mut() {
                w.busy.remove(job_id);
            }
        }
    }
}

/// The attempt number that counts against `max_attempts`: `attempt` less the attempts that do
/// not count (an earlier revision's, leases that never started); at least 1.
fn counted_attempt(attempt: u32, uncounted: u32) -> u32 {
    attempt.saturating_sub(uncounted).max(1)
}

#[cfg(test)]
mod tests {
    use super::counted_attempt;

    #[test]
    fn attempts_of_earlier_revisions_and_unstarted_leases_do_not_count() {
        assert_eq!(counted_attempt(1, 0), 1);
        assert_eq!(counted_attempt(3, 0), 3);
        // Revision 2 of a job whose first revision took 3 attempts: its first lease is 4.
        assert_eq!(counted_attempt(4, 3), 1);
        // Attempt 2 after a lease handed back unstarted is the first that ran.
        assert_eq!(counted_attempt(2, 1), 1);
        // Never below 1, even from a record whose count is off.
        assert_eq!(counted_attempt(2, 5), 1);
    }
}

//! Scheduling by leases, with cache-affinity routing.
//!
//! The [`Scheduler`] owns the command log and is the only writer of the index: every change is
//! appended to the durable log, then applied to the [`StateMachine`], under one lock. It keeps
//! the queue, the workers and their open lease streams, and the live leases (in memory: after a
//! master restart every unfinished job is queued again).
//!
//! Routing: each job has a routing key (its main debug id, or its source map key). Among
//! connected workers, the one with the highest rendezvous score `hash(key, worker id)` is the
//! job's preferred worker: the same key always lands on the same worker while the set of workers
//! is stable, so its caches already hold the files. A free slot first takes a queued job that
//! prefers its worker (looking a bounded way down the queue); when no queued job does, the
//! oldest job goes to the least-loaded worker with a free slot. Leases expire unless renewed by heartbeats;
//! a job whose every attempt (up to `max_attempts`) ends in expiry or a retryable failure fails
//! with the last error.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::Hasher;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use symcluster_proto::v1;
use tokio::sync::{broadcast, mpsc};

use crate::state::{Applied, Command, JobRecord, JobState, StateMachine};
use crate::store::{CommandLog, StoreError};

/// How jobs pick workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Rendezvous hashing on the routing key, falling back to the least-loaded worker.
    Affinity,
    /// A pseudo-random worker with a free slot (the baseline affinity is measured against).
    Random,
}

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

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A worker as the master sees it.
#[derive(Debug)]
struct WorkerEntry {
    slots: u32,
    busy: HashSet<String>,
    sender: Option<mpsc::Sender<v1::Lease>>,
    last_heartbeat: Instant,
    cache: v1::CacheStats,
}

impl WorkerEntry {
    fn connected(&self) -> bool {
        self.sender.as_ref().is_some_and(|s| !s.is_closed())
    }

    fn free(&self) -> bool {
        self.connected() && (self.busy.len() as u32) < self.slots
    }
}

#[derive(Debug, Clone)]
struct LeaseInfo {
    worker_id: String,
    attempt: u32,
    deadline_ms: u64,
}

/// Queued jobs affinity routing looks at for one whose preferred worker is free.
pub const LOOKAHEAD: usize = 64;

struct Core {
    log: CommandLog,
    /// Jobs dispatched ahead of the oldest queued job since it became the oldest.
    head_skips: usize,
    queue: VecDeque<String>,
    workers: BTreeMap<String, WorkerEntry>,
    leases: HashMap<String, LeaseInfo>,
    affine_leases: u64,
    total_leases: u64,
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The spec is invalid (one line).
    #[error("{0}")]
    Invalid(String),
    /// The log could not be written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The scheduler: queue, workers, leases, and the only writer of the index.
pub struct Scheduler {
    core: Mutex<Core>,
    state: Arc<StateMachine>,
    changes: broadcast::Sender<String>,
    config: SchedulerConfig,
}

impl Scheduler {
    /// Opens the scheduler over `log`, replaying it into a fresh index. Unfinished jobs are
    /// queued again in submission order.
    pub fn open(log: CommandLog, config: SchedulerConfig) -> Result<Self, StoreError> {
        let state = Arc::new(StateMachine::new());
        for command in log.replay()? {
            state.apply(&command);
        }
        let queue = state
            .unfinished_jobs()
            .into_iter()
            .map(|j| j.job_id)
            .collect();
        let (changes, _) = broadcast::channel(1024);
        Ok(Scheduler {
            core: Mutex::new(Core {
                log,
                head_skips: 0,
                queue,
                workers: BTreeMap::new(),
                leases: HashMap::new(),
                affine_leases: 0,
                total_leases: 0,
            }),
            state,
            changes,
            config,
        })
    }

    /// The index (read-only view).
    pub fn state(&self) -> &Arc<StateMachine> {
        &self.state
    }

    /// The settings.
    pub fn config(&self) -> SchedulerConfig {
        self.config
    }

    /// Job ids whose record changed, as they change.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Core> {
        // A panic while holding the lock would leave it poisoned; the data is still the log's
        // truth, so keep going.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `commands` durably, then applies them.
    fn commit(&self, core: &mut Core, commands: Vec<Command>) -> Result<Vec<Applied>, StoreError> {
        core.log.append(&commands)?;
        let applied: Vec<Applied> = commands.iter().map(|c| self.state.apply(c)).collect();
        for a in &applied {
            if let Applied::Changed(id) = a {
                let _ = self.changes.send(id.clone());
            }
        }
        Ok(applied)
    }

    /// Submits a job (idempotent by id). Returns the stored job and whether this call created it.
    pub fn submit(
        &self,
        job_id: String,
        kind: crate::state::JobKind,
        spec: Vec<u8>,
        routing_key: String,
    ) -> Result<(JobRecord, bool), SubmitError> {
        let mut core = self.lock();
        if let Some(existing) = self.state.job(&job_id) {
            return Ok((existing, false));
        }
        self.commit(
            &mut core,
            vec![Command::Submit {
                job_id: job_id.clone(),
                kind,
                spec,
                routing_key,
                at_ms: now_ms(),
            }],
        )?;
        core.queue.push_back(job_id.clone());
        self.dispatch(&mut core);
        let job = self.state.job(&job_id).expect("just submitted");
        Ok((job, true))
    }

    /// Records a job that cannot run at all (its report does not parse): submitted and failed at
    /// once, so the client reads a precise error instead of losing the job.
    pub fn submit_failed(
        &self,
        job_id: String,
        kind: crate::state::JobKind,
        spec: Vec<u8>,
        error: String,
    ) -> Result<(JobRecord, bool), SubmitError> {
        let mut core = self.lock();
        if let Some(existing) = self.state.job(&job_id) {
            return Ok((existing, false));
        }
        let at_ms = now_ms();
        self.commit(
            &mut core,
            vec![
                Command::Submit {
                    job_id: job_id.clone(),
                    kind,
                    spec,
                    routing_key: String::new(),
                    at_ms,
                },
                Command::Fail {
                    job_id: job_id.clone(),
                    attempt: 0,
                    error,
                    at_ms,
                },
            ],
        )?;
        Ok((self.state.job(&job_id).expect("just submitted"), true))
    }

    /// Registers (or re-registers) a worker with `slots` job slots.
    pub fn register(&self, worker_id: &str, slots: u32) {
        let mut core = self.lock();
        let entry = core
            .workers
            .entry(worker_id.to_owned())
            .or_insert_with(|| WorkerEntry {
                slots,
                busy: HashSet::new(),
                sender: None,
                last_heartbeat: Instant::now(),
                cache: v1::CacheStats::default(),
            });
        entry.slots = slots.max(1);
        entry.last_heartbeat = Instant::now();
    }

    /// Opens a worker's lease stream; `None` when the worker is not registered.
    pub fn open_lease_stream(&self, worker_id: &str) -> Option<mpsc::Receiver<v1::Lease>> {
        let mut core = self.lock();
        let entry = core.workers.get_mut(worker_id)?;
        let (tx, rx) = mpsc::channel(entry.slots as usize + 1);
        entry.sender = Some(tx);
        self.dispatch(&mut core);
        Some(rx)
    }

    /// A worker's result. `false` when the job is already terminal or unknown.
    pub fn complete(
        &self,
        worker_id: &str,
        job_id: &str,
        attempt: u32,
        result_json: Vec<u8>,
    ) -> Result<bool, StoreError> {
        let mut core = self.lock();
        let applied = self.commit(
            &mut core,
            vec![Command::Complete {
                job_id: job_id.to_owned(),
                attempt,
                worker_id: worker_id.to_owned(),
                result_json,
                at_ms: now_ms(),
            }],
        )?;
        Self::release(&mut core, job_id, worker_id);
        self.dispatch(&mut core);
        Ok(matches!(applied[0], Applied::Changed(_)))
    }

    /// A worker's failed attempt: requeued while attempts remain and the error is retryable,
    /// failed for good otherwise. `false` when the attempt is stale.
    pub fn fail(
        &self,
        worker_id: &str,
        job_id: &str,
        attempt: u32,
        error: String,
        retryable: bool,
    ) -> Result<bool, StoreError> {
        let mut core = self.lock();
        let current = core.leases.get(job_id).cloned();
        if current
            .as_ref()
            .is_none_or(|l| l.attempt != attempt || l.worker_id != worker_id)
        {
            return Ok(false);
        }
        Self::release(&mut core, job_id, worker_id);
        let accepted = self.end_attempt(&mut core, job_id, attempt, error, retryable)?;
        self.dispatch(&mut core);
        Ok(accepted)
    }

    /// Requeues or fails a job whose attempt ended without a result.
    fn end_attempt(
        &self,
        core: &mut Core,
        job_id: &str,
        attempt: u32,
        error: String,
        retryable: bool,
    ) -> Result<bool, StoreError> {
        let at_ms = now_ms();
        let command = if retryable && attempt < self.config.max_attempts {
            Command::Requeue {
                job_id: job_id.to_owned(),
                attempt,
                reason: error,
                at_ms,
            }
        } else {
            let error = if retryable {
                format!(
                    "{error} (attempt {attempt} of {})",
                    self.config.max_attempts
                )
            } else {
                error
            };
            Command::Fail {
                job_id: job_id.to_owned(),
                attempt,
                error,
                at_ms,
            }
        };
        let requeue = matches!(command, Command::Requeue { .. });
        let applied = self.commit(core, vec![command])?;
        let changed = matches!(applied[0], Applied::Changed(_));
        if changed && requeue {
            core.queue.push_front(job_id.to_owned());
        }
        Ok(changed)
    }

    fn release(core: &mut Core, job_id: &str, worker_id: &str) {
        if core
            .leases
            .get(job_id)
            .is_some_and(|l| l.worker_id == worker_id)
        {
            core.leases.remove(job_id);
        }
        if let Some(w) = core.workers.get_mut(worker_id) {
            w.busy.remove(job_id);
        }
    }

    /// Renews the leases of `running` jobs on `worker_id`; `false` if the worker is unknown.
    pub fn heartbeat(
        &self,
        worker_id: &str,
        running: &[String],
        cache: Option<v1::CacheStats>,
    ) -> bool {
        let mut core = self.lock();
        let deadline = now_ms() + self.config.lease_ms;
        let Some(worker) = core.workers.get_mut(worker_id) else {
            return false;
        };
        worker.last_heartbeat = Instant::now();
        if let Some(cache) = cache {
            worker.cache = cache;
        }
        for job_id in running {
            if let Some(lease) = core.leases.get_mut(job_id)
                && lease.worker_id == worker_id
            {
                lease.deadline_ms = deadline;
            }
        }
        true
    }

    /// Ends every lease whose deadline passed (worker dead, hung or cut off); returns how many.
    pub fn expire_leases(&self) -> Result<usize, StoreError> {
        let mut core = self.lock();
        let now = now_ms();
        let expired: Vec<(String, LeaseInfo)> = core
            .leases
            .iter()
            .filter(|(_, l)| l.deadline_ms <= now)
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        for (job_id, lease) in &expired {
            Self::release(&mut core, job_id, &lease.worker_id);
            let reason = format!("lease expired on worker {}", lease.worker_id);
            self.end_attempt(&mut core, job_id, lease.attempt, reason, true)?;
        }
        if !expired.is_empty() {
            self.dispatch(&mut core);
        }
        Ok(expired.len())
    }

    /// Hands queued jobs to workers with free slots.
    ///
    /// Affinity routing looks at the first [`LOOKAHEAD`] queued jobs for one whose preferred
    /// worker has a free slot; when none has, the oldest job goes to the least-loaded worker.
    /// The oldest job is never passed over more than [`LOOKAHEAD`] times in a row.
    fn dispatch(&self, core: &mut Core) {
        loop {
            while let Some(head) = core.queue.front() {
                match self.state.job(head) {
                    Some(job) if job.state == JobState::Queued => break,
                    _ => {
                        core.queue.pop_front();
                        core.head_skips = 0;
                    }
                }
            }
            if core.queue.is_empty() || !core.workers.values().any(WorkerEntry::free) {
                return;
            }
            let choice = match self.config.routing {
                Routing::Affinity => self.affine_choice(core).or_else(|| {
                    let head = self.state.job(&core.queue[0])?;
                    pick_worker(&core.workers, &head.routing_key).map(|(w, a)| (0, w, a))
                }),
                Routing::Random => {
                    let head = self.state.job(&core.queue[0]);
                    head.and_then(|h| {
                        pick_random(&core.workers, core.total_leases, &h.routing_key)
                            .map(|(w, a)| (0, w, a))
                    })
                }
            };
            let Some((position, worker_id, affine)) = choice else {
                return;
            };
            core.head_skips = if position == 0 {
                0
            } else {
                core.head_skips + 1
            };
            let job_id = core.queue.remove(position).expect("position in queue");
            if !self.grant(core, job_id, worker_id, affine) {
                return;
            }
        }
    }

    /// The first of the first [`LOOKAHEAD`] queued jobs whose preferred worker is free, unless
    /// the oldest job has waited its turn long enough.
    fn affine_choice(&self, core: &Core) -> Option<(usize, String, bool)> {
        if core.head_skips >= LOOKAHEAD {
            return None;
        }
        for (position, job_id) in core.queue.iter().take(LOOKAHEAD).enumerate() {
            let Some(job) = self.state.job(job_id) else {
                continue;
            };
            if job.state != JobState::Queued {
                continue;
            }
            let preferred = core
                .workers
                .iter()
                .filter(|(_, w)| w.connected())
                .max_by_key(|(id, _)| rendezvous_score(&job.routing_key, id));
            if let Some((id, worker)) = preferred
                && worker.free()
            {
                return Some((position, id.clone(), true));
            }
        }
        None
    }

    /// Leases `job_id` to `worker_id`: logs the lease and sends it on the worker's stream.
    /// Returns `false` when dispatching should stop (the log cannot be written).
    fn grant(&self, core: &mut Core, job_id: String, worker_id: String, affine: bool) -> bool {
        let Some(job) = self.state.job(&job_id) else {
            return true;
        };
        let attempt = job.attempts + 1;
        let lease_cmd = Command::Lease {
            job_id: job_id.clone(),
            worker_id: worker_id.clone(),
            attempt,
            at_ms: now_ms(),
        };
        if let Err(e) = self.commit(core, vec![lease_cmd]) {
            tracing::error!(error = %e, "cannot log a lease; job stays queued");
            core.queue.push_front(job_id);
            return false;
        }
        let deadline_ms = now_ms() + self.config.lease_ms;
        let lease = v1::Lease {
            job: prost::Message::decode(job.spec.as_slice()).ok(),
            attempt,
            deadline_ms,
        };
        let worker = core
            .workers
            .get_mut(&worker_id)
            .expect("picked worker exists");
        let sent = worker
            .sender
            .as_ref()
            .is_some_and(|s| s.try_send(lease).is_ok());
        if !sent {
            worker.sender = None;
            let requeued = self.commit(
                core,
                vec![Command::Requeue {
                    job_id: job_id.clone(),
                    attempt,
                    reason: format!("worker {worker_id} disconnected"),
                    at_ms: now_ms(),
                }],
            );
            match requeued {
                Ok(_) => core.queue.push_front(job_id),
                Err(e) => {
                    // The job stays running in the index: keep its lease so expiry retries.
                    tracing::error!(error = %e, job = %job_id, "cannot log a requeue");
                    core.leases.insert(
                        job_id,
                        LeaseInfo {
                            worker_id,
                            attempt,
                            deadline_ms,
                        },
                    );
                }
            }
            return true;
        }
        worker.busy.insert(job_id.clone());
        core.leases.insert(
            job_id,
            LeaseInfo {
                worker_id,
                attempt,
                deadline_ms,
            },
        );
        core.total_leases += 1;
        core.affine_leases += u64::from(affine);
        true
    }

    /// The cluster's state for the admin API.
    pub fn status(&self) -> v1::ClusterStatusResponse {
        let core = self.lock();
        let (queued, running, completed, failed) = self.state.counts();
        v1::ClusterStatusResponse {
            workers: core
                .workers
                .iter()
                .map(|(id, w)| v1::WorkerStatus {
                    worker_id: id.clone(),
                    slots: w.slots,
                    busy: w.busy.len() as u32,
                    last_heartbeat_ms_ago: w.last_heartbeat.elapsed().as_millis() as u64,
                    connected: w.connected(),
                    cache_hits: w.cache.hits,
                    cache_misses: w.cache.misses,
                })
                .collect(),
            queue_depth: queued,
            leader: String::new(),
            jobs_running: running,
            jobs_completed: completed,
            jobs_failed: failed,
            affine_leases: core.affine_leases,
            total_leases: core.total_leases,
        }
    }
}

/// Rendezvous (highest random weight) score of a worker for a routing key.
pub fn rendezvous_score(key: &str, worker_id: &str) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(key.as_bytes());
    h.write_u8(0);
    h.write(worker_id.as_bytes());
    // FNV mixes the tail weakly; finish with a 64-bit avalanche (splitmix64's finalizer).
    let mut z = h.finish();
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The worker for a job: its preferred (highest-score connected) worker when that one has a free
/// slot, else the least-loaded worker with a free slot. Returns `(worker, affine)`.
fn pick_worker(workers: &BTreeMap<String, WorkerEntry>, key: &str) -> Option<(String, bool)> {
    let preferred = workers
        .iter()
        .filter(|(_, w)| w.connected())
        .max_by_key(|(id, _)| rendezvous_score(key, id))?;
    if preferred.1.free() {
        return Some((preferred.0.clone(), true));
    }
    workers
        .iter()
        .filter(|(_, w)| w.free())
        .min_by(|(a_id, a), (b_id, b)| {
            let load = |w: &WorkerEntry| w.busy.len() as f64 / w.slots as f64;
            load(a).total_cmp(&load(b)).then(a_id.cmp(b_id))
        })
        .map(|(id, _)| (id.clone(), false))
}

/// A pseudo-random worker with a free slot (seeded by the lease count: deterministic per run).
/// `affine` still reports whether it happens to be the preferred worker.
fn pick_random(
    workers: &BTreeMap<String, WorkerEntry>,
    seed: u64,
    key: &str,
) -> Option<(String, bool)> {
    let free: Vec<&String> = workers
        .iter()
        .filter(|(_, w)| w.free())
        .map(|(id, _)| id)
        .collect();
    if free.is_empty() {
        return None;
    }
    let pick = free[(rendezvous_score(&seed.to_string(), "random") % free.len() as u64) as usize];
    let preferred = workers
        .iter()
        .filter(|(_, w)| w.connected())
        .max_by_key(|(id, _)| rendezvous_score(key, id))
        .map(|(id, _)| id);
    Some((pick.clone(), preferred == Some(pick)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_spreads_keys_and_is_stable() {
        let workers = ["w1", "w2", "w3"];
        let mut counts = [0usize; 3];
        for k in 0..3000 {
            let key = format!("debug-id-{k}");
            let best = (0..3)
                .max_by_key(|&i| rendezvous_score(&key, workers[i]))
                .unwrap();
            counts[best] += 1;
            // Removing a worker that was not chosen never moves the key.
            let other = (best + 1) % 3;
            let remaining: Vec<usize> = (0..3).filter(|&i| i != other).collect();
            let again = *remaining
                .iter()
                .max_by_key(|&&i| rendezvous_score(&key, workers[i]))
                .unwrap();
            assert_eq!(again, best);
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven spread {counts:?}");
        }
    }
}

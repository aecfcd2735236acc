//! The queue and dispatch (leader): what enters the queue (submits, jobs queued again for a
//! file that arrived), and handing queued jobs to free worker slots as `Lease` commands, sent on
//! the worker's stream once applied.

use symcluster_proto::v1;

use super::projection::LeaseInfo;
use super::workers::{OutgoingLease, WorkerEntry};
use super::{Core, LOOKAHEAD, QueueStats, Routing, ScheduleError, Scheduler, placement};
use crate::index::apply::Applied;
use crate::index::command::{self, now_ms};
use crate::index::{Command, IndexError, JobView};
use crate::raft::ProposeError;

impl Scheduler {
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
        let applied = self.raft.propose_bounded(submit).await?;
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
        for job in core.projection.open.values().filter(|j| j.lease.is_none()) {
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

    /// Hands queued jobs to workers with free slots (leader only).
    ///
    /// Affinity routing looks at the first [`LOOKAHEAD`] queued jobs for one whose preferred
    /// worker has a free slot; when none has, the oldest job goes to the least-loaded worker.
    /// The oldest job is never passed over more than [`LOOKAHEAD`] times in a row.
    pub(super) fn dispatch(&self, core: &mut Core) {
        for lease in self.next_leases(core) {
            self.raft.propose_nowait(lease);
        }
    }

    /// The lease commands that fill free worker slots from the queue (marked pending; the
    /// caller proposes them).
    pub(super) fn next_leases(&self, core: &mut Core) -> Vec<Command> {
        let mut leases = Vec::new();
        if !core.is_leader {
            return leases;
        }
        loop {
            while let Some(head) = core.projection.queue.front() {
                if core.pending.contains(head)
                    || core
                        .projection
                        .open
                        .get(head)
                        .is_none_or(|j| j.lease.is_some())
                {
                    core.projection.queue.pop_front();
                    core.head_skips = 0;
                } else {
                    break;
                }
            }
            if core.projection.queue.is_empty() || !core.workers.values().any(WorkerEntry::free) {
                return leases;
            }
            let head_key = core.projection.open[&core.projection.queue[0]]
                .routing_key
                .clone();
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
            let job_id = core
                .projection
                .queue
                .remove(position)
                .expect("position in queue");
            let attempt = core.projection.open[&job_id].attempts + 1;
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
            let token = core
                .workers
                .get(&worker_id)
                .map(|w| w.owner.to_string())
                .unwrap_or_default();
            leases.push(command::lease(
                &job_id,
                &worker_id,
                &token,
                attempt,
                now_ms(),
            ));
        }
    }

    /// The first of the first [`LOOKAHEAD`] queued jobs whose preferred worker has a free slot,
    /// unless the oldest job has waited its turn long enough (a prefetch is filled only by
    /// [`placement::pick_worker`], when no worker has a free slot).
    fn affine_choice(core: &Core) -> Option<(usize, String, bool)> {
        if core.head_skips >= LOOKAHEAD {
            return None;
        }
        for (position, job_id) in core.projection.queue.iter().take(LOOKAHEAD).enumerate() {
            if core.pending.contains(job_id) {
                continue;
            }
            let Some(job) = core
                .projection
                .open
                .get(job_id)
                .filter(|j| j.lease.is_none())
            else {
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

    /// Sends an applied lease, with the job's `spec` (an encoded `v1::JobSpec`, from the
    /// applied record), on its worker's stream; a worker that is gone gets its lease ended at
    /// once.
    pub(super) fn send_lease(
        &self,
        core: &mut Core,
        job_id: &str,
        lease: &LeaseInfo,
        spec: Option<Vec<u8>>,
    ) {
        let (worker_id, attempt) = (lease.worker_id.as_str(), lease.attempt);
        // The attempt's trace starts here; the worker's `job` span and the completion continue it.
        let span = tracing::info_span!("lease", job_id, attempt, worker_id);
        let _entered = span.enter();
        let lease = v1::Lease {
            job: None,
            attempt,
            deadline_ms: super::lease_clock::wall_ms(lease.deadline_ms),
            recheck_missing: core
                .projection
                .open
                .get(job_id)
                .is_some_and(|j| j.recheck_missing),
            traceparent: symcluster_telemetry::trace_context::traceparent(&span),
        };
        let sent_lease = OutgoingLease { lease, spec };
        let sent = core
            .workers
            .get(worker_id)
            .and_then(|w| w.sender.as_ref())
            .is_some_and(|s| s.try_send(sent_lease).is_ok());
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

    /// A lease this master proposed was not applied (the job changed meanwhile): the worker's
    /// slot is free again, and a job still queued goes back to the queue's front.
    pub(super) fn lease_refused(core: &mut Core, job_id: &str, worker_id: &str) {
        Self::release(core, job_id, worker_id);
        if core
            .projection
            .open
            .get(job_id)
            .is_some_and(|j| j.lease.is_none())
        {
            core.projection.queue.push_front(job_id.to_owned());
        }
    }
}

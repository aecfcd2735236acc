//! The leases (leader): a worker's result or failed attempt, heartbeats that renew leases,
//! leases that expire, draining and deregistering workers.
//!
//! **Who may end an attempt** is decided here, in one place ([`Scheduler::holds_lease`]): the
//! worker that holds the job's current lease, for that attempt. What the log then does with the
//! command is the index's rule (`index/apply.rs`: the first completion of an unfinished job's
//! revision wins, a `Requeue` must name the current attempt, a `Complete` or `Fail` the
//! current revision), applied alike on every master and on replay.

use std::collections::HashSet;

use symcluster_proto::v1;

use super::projection::LeaseInfo;
use super::{Completion, Core, ScheduleError, Scheduler};
use crate::index::Command;
use crate::index::apply::Applied;
use crate::index::command::{self, now_ms};
use crate::raft::ProposeError;

impl Scheduler {
    /// Whether `worker_id` holds the current lease of `job_id`, for `attempt`: the one rule for
    /// accepting a worker's completion or failed attempt.
    fn holds_lease(core: &Core, job_id: &str, worker_id: &str, attempt: u32) -> bool {
        core.projection
            .open
            .get(job_id)
            .and_then(|j| j.lease.as_ref())
            .is_some_and(|l| l.attempt == attempt && l.worker_id == worker_id)
    }

    /// A worker's result: `false` when the job is already finished or unknown, when
    /// `worker_id` and `attempt` are not the job's current lease (another worker's, or an
    /// attempt that expired), or when the end of that attempt is already proposed (a duplicate
    /// completion). The command names the job's revision, so that it applies only to the
    /// revision it was made for.
    pub async fn complete(
        &self,
        worker_id: &str,
        job_id: &str,
        attempt: u32,
        completion: Completion,
    ) -> Result<bool, ScheduleError> {
        let (revision, next_leases) = {
            let mut core = self.lock();
            // A second completion of the attempt while the first is in flight (a worker's retry
            // after a failover) is not proposed again: the first one's answer says what it did.
            if !Self::holds_lease(&core, job_id, worker_id, attempt)
                || core.pending.contains(job_id)
            {
                return Ok(false);
            }
            core.pending.insert(job_id.to_owned());
            let revision = core.projection.open.get(job_id).map_or(0, |j| j.revision);
            // The worker's slot is free from now on, whatever becomes of this result: its next
            // lease is proposed with the completion, in the same Ready (one fsync and one
            // message per follower for both, and the worker gets its next job a commit sooner).
            if let Some(worker) = core.workers.get_mut(worker_id) {
                worker.busy.remove(job_id);
            }
            (revision, self.next_leases(&mut core))
        };
        // Stamped with the revision the lease belongs to: if the job runs again for a file
        // that arrived before this commits, this result is stale and the index ignores it.
        let complete = command::with_revision(
            command::with_facets(
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
                completion.facets,
            ),
            revision,
        );
        let applied = self.raft.propose_then(complete, next_leases).await;
        if applied.is_err() {
            self.lock().pending.remove(job_id);
        }
        Ok(matches!(applied?, Applied::Changed { .. }))
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
            if !Self::holds_lease(&core, job_id, worker_id, attempt)
                || core.pending.contains(job_id)
            {
                return Ok(false);
            }
            core.pending.insert(job_id.to_owned());
            let open = core.projection.open.get(job_id);
            let (uncounted, revision) = open.map_or((0, 0), |j| (j.uncounted, j.revision));
            let end = self.end_attempt(job_id, attempt, uncounted, error, retryable);
            // A `Fail` names the revision it ends, as a completion does (a `Requeue` names the
            // attempt, which is the current one only while its revision runs).
            command::with_revision(command::with_missing(end, missing), revision)
        };
        let applied = self.raft.propose(command).await;
        if applied.is_err() {
            self.lock().pending.remove(job_id);
        }
        Ok(matches!(applied?, Applied::Changed { .. }))
    }

    /// The command that ends an attempt without a result: `Requeue`, or `Fail` when the error
    /// is permanent or the attempts that count (`attempt - uncounted`) are used up.
    pub(super) fn end_attempt(
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
            self.owners.remove(worker_id);
            let held: Vec<(String, u32)> = core
                .projection
                .held_by(worker_id)
                .filter(|(id, _)| !core.pending.contains(*id))
                .map(|(id, l)| (id.clone(), l.attempt))
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
        let deadline = super::lease_clock::now() + self.config.lease_ms;
        let Some(worker) = core.workers.get_mut(worker_id) else {
            return false;
        };
        worker.last_heartbeat = std::time::Instant::now();
        worker.running = running;
        if let Some(cache) = cache {
            worker.cache = cache;
        }
        for job_id in leased {
            if let Some(lease) = core
                .projection
                .open
                .get_mut(job_id)
                .and_then(|j| j.lease.as_mut())
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
        let now = super::lease_clock::now();
        let mut core = self.lock();
        if !core.is_leader {
            return 0;
        }
        let expired: Vec<(String, LeaseInfo, u32, u32)> = core
            .projection
            .open
            .iter()
            .filter(|(id, _)| !core.pending.contains(*id))
            .filter_map(|(id, j)| {
                j.lease
                    .clone()
                    .map(|l| (id.clone(), l, j.uncounted, j.revision))
            })
            .filter(|(_, l, _, _)| l.deadline_ms <= now)
            .collect();
        for (job_id, lease, uncounted, revision) in &expired {
            core.pending.insert(job_id.clone());
            let reason = format!("lease expired on worker {}", lease.worker_id);
            let end = self.end_attempt(job_id, lease.attempt, *uncounted, &reason, true);
            self.raft
                .propose_nowait(command::with_revision(end, *revision));
        }
        expired.len()
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

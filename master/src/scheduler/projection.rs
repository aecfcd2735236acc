//! The scheduler's projection of the index: the unfinished jobs, the queue of those waiting for
//! a worker, and the current lease of those running.
//!
//! It is made of the records that applying commands returns ([`Applied::Changed`] holds the
//! job's [`JobSummary`] after each change), in log order, and of nothing else: it never reads
//! the index back, so it follows the index's own rules (`index/apply.rs`) instead of repeating
//! them. After a restart or a snapshot it is rebuilt from the index's open jobs
//! ([`crate::index::Index::open_jobs`]), through the same [`Projection::change`].
//!
//! [`Applied::Changed`]: crate::index::apply::Applied::Changed

use std::collections::{HashMap, VecDeque};

use crate::index::{JobState, JobSummary};

/// The current lease of a running job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseInfo {
    /// The worker holding it.
    pub worker_id: String,
    /// The attempt it grants (1-based).
    pub attempt: u32,
    /// The name of the token the worker registered with: only that token ends the attempt
    /// (empty for a lease of an older version: any token acting as the worker may).
    pub token: String,
    /// Ms on this master's monotonic clock ([`super::lease_clock::now`], not the wall clock):
    /// renewed by heartbeats, reset for every running job when this master becomes leader.
    pub deadline_ms: u64,
}

/// An unfinished job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenJob {
    /// Cache-affinity routing key.
    pub routing_key: String,
    /// `v1::JobKind` as i32.
    pub kind: i32,
    /// Submitted (or queued again for a file that arrived) at, ms since the epoch.
    pub queued_since_ms: u64,
    /// Leases granted so far.
    pub attempts: u32,
    /// Of `attempts`, those that do not count against `max_attempts`
    /// (`JobRecord.uncounted_attempts`).
    pub uncounted: u32,
    /// Its current lease; `None` while queued.
    pub lease: Option<LeaseInfo>,
    /// It runs again for a file that arrived (revision 2 or more): the worker looks every file
    /// up afresh.
    pub recheck_missing: bool,
    /// Its revision (`JobRecord.revision`, 1-based): what a completion of its current attempt
    /// is for (`Complete.revision`).
    pub revision: u32,
}

/// What one change did, for the scheduler to follow with the workers' slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The job waits for a worker (new, queued again after an attempt, or for a file that
    /// arrived); `released`: the worker whose lease ended with it.
    Queued {
        /// The worker that held the job until now.
        released: Option<String>,
    },
    /// The job runs on `worker_id` under `lease`; `released`: another worker that held it
    /// until now (a lease ended and granted again in one batch).
    Leased {
        /// The new lease.
        lease: LeaseInfo,
        /// The worker that held the job until now, when another.
        released: Option<String>,
    },
    /// The job finished (completed or failed); `released`: the worker that held it.
    Finished {
        /// The worker that held the job until now.
        released: Option<String>,
    },
}

/// The unfinished jobs and the queue.
#[derive(Debug, Default)]
pub struct Projection {
    /// Unfinished jobs by id.
    pub open: HashMap<String, OpenJob>,
    /// Queued job ids, oldest first (may hold ids that are no longer queued: dispatch skips
    /// them).
    pub queue: VecDeque<String>,
}

impl Projection {
    /// Rebuilds from the index's open jobs (oldest first); running jobs get `deadline_ms`.
    pub fn rebuild(&mut self, open_jobs: Vec<JobSummary>, deadline_ms: u64) {
        self.open.clear();
        self.queue.clear();
        for job in &open_jobs {
            self.change(job, deadline_ms);
        }
    }

    /// Follows one job's change: `job` is its record after the change; a new lease gets
    /// `deadline_ms`. A job queued again after an attempt goes to the queue's front (it waited
    /// its turn once), a new one to the back.
    pub fn change(&mut self, job: &JobSummary, deadline_ms: u64) -> Change {
        let id = job.job_id.as_str();
        match job.state {
            JobState::Queued => {
                let previous = self.open.insert(id.to_owned(), open_job(job, None));
                let released = previous.as_ref().and_then(|p| p.lease.clone());
                match (&previous, &released) {
                    (Some(_), Some(_)) => self.queue.push_front(id.to_owned()),
                    (None, _) => self.queue.push_back(id.to_owned()),
                    // Queued already: it has its place.
                    (Some(_), None) => {}
                }
                Change::Queued {
                    released: released.map(|l| l.worker_id),
                }
            }
            JobState::Running => {
                let lease = LeaseInfo {
                    worker_id: job.running_on.clone().unwrap_or_default(),
                    attempt: job.attempts,
                    token: job.lease_token.clone(),
                    deadline_ms,
                };
                let previous = self
                    .open
                    .insert(id.to_owned(), open_job(job, Some(lease.clone())));
                let released = previous
                    .and_then(|p| p.lease)
                    .map(|l| l.worker_id)
                    .filter(|w| *w != lease.worker_id);
                Change::Leased { lease, released }
            }
            _ => Change::Finished {
                released: self
                    .open
                    .remove(id)
                    .and_then(|p| p.lease)
                    .map(|l| l.worker_id),
            },
        }
    }

    /// The jobs `worker_id` holds a lease for.
    pub fn held_by(&self, worker_id: &str) -> impl Iterator<Item = (&String, &LeaseInfo)> {
        self.open.iter().filter_map(move |(id, job)| {
            job.lease
                .as_ref()
                .filter(|l| l.worker_id == worker_id)
                .map(|l| (id, l))
        })
    }

    /// Jobs queued and jobs running.
    pub fn counts(&self) -> (u64, u64) {
        let running = self.open.values().filter(|j| j.lease.is_some()).count() as u64;
        (self.open.len() as u64 - running, running)
    }
}

fn open_job(job: &JobSummary, lease: Option<LeaseInfo>) -> OpenJob {
    OpenJob {
        routing_key: job.routing_key.clone(),
        kind: job.kind,
        queued_since_ms: job.queued_since_ms,
        attempts: job.attempts,
        uncounted: job.uncounted_attempts,
        lease,
        recheck_missing: job.revision > 1,
        revision: job.revision,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, state: JobState, attempts: u32, on: Option<&str>) -> JobSummary {
        JobSummary {
            job_id: id.into(),
            state,
            routing_key: "k".into(),
            attempts,
            uncounted_attempts: 0,
            running_on: on.map(str::to_owned),
            lease_token: on.map(|w| format!("{w}-token")).unwrap_or_default(),
            revision: 1,
            kind: 1,
            queued_since_ms: 10,
        }
    }

    #[test]
    fn a_job_is_queued_leased_requeued_at_the_front_and_finished() {
        let mut p = Projection::default();
        assert_eq!(
            p.change(&summary("a", JobState::Queued, 0, None), 0),
            Change::Queued { released: None }
        );
        p.change(&summary("b", JobState::Queued, 0, None), 0);
        let leased = p.change(&summary("a", JobState::Running, 1, Some("w1")), 500);
        assert_eq!(
            leased,
            Change::Leased {
                lease: LeaseInfo {
                    worker_id: "w1".into(),
                    attempt: 1,
                    token: "w1-token".into(),
                    deadline_ms: 500
                },
                released: None
            }
        );
        assert_eq!(p.counts(), (1, 1));
        assert_eq!(
            p.held_by("w1")
                .map(|(id, _)| id.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        // Queued again after its attempt: released from w1, ahead of b.
        assert_eq!(
            p.change(&summary("a", JobState::Queued, 1, None), 0),
            Change::Queued {
                released: Some("w1".into())
            }
        );
        assert_eq!(p.queue.front().map(String::as_str), Some("a"));
        p.change(&summary("a", JobState::Running, 2, Some("w2")), 900);
        assert_eq!(
            p.change(&summary("a", JobState::Completed, 2, None), 0),
            Change::Finished {
                released: Some("w2".into())
            }
        );
        assert!(!p.open.contains_key("a"));
        assert_eq!(p.counts(), (1, 0));
    }

    #[test]
    fn a_rebuild_gives_what_the_changes_gave() {
        let mut by_changes = Projection::default();
        by_changes.change(&summary("a", JobState::Queued, 0, None), 7);
        by_changes.change(&summary("b", JobState::Queued, 0, None), 7);
        by_changes.change(&summary("b", JobState::Running, 1, Some("w")), 7);
        let mut rebuilt = Projection::default();
        rebuilt.rebuild(
            vec![
                summary("a", JobState::Queued, 0, None),
                summary("b", JobState::Running, 1, Some("w")),
            ],
            7,
        );
        assert_eq!(rebuilt.open, by_changes.open);
        assert_eq!(rebuilt.queue, ["a"]);
    }
}

//! The index as a deterministic state machine over an ordered command log.
//!
//! Every change to jobs and crash groups is a [`Command`]; [`StateMachine::apply`] is a pure
//! function of the current state and the command (times are inside the commands, never read
//! from a clock), so replaying the same log gives the same index on any master. That is what
//! lets Raft replication plug in later: the log becomes Raft's log, `apply` its state machine.
//!
//! Reads go straight to `DashMap`s, without the scheduler's lock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::grouping::{self, GroupKey};

/// A change to the index. Serialized with bincode into the durable log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A new job (never logged for an id that exists).
    Submit {
        /// The job.
        job_id: String,
        /// Native or JS.
        kind: JobKind,
        /// The encoded `symcluster.v1.JobSpec`.
        spec: Vec<u8>,
        /// Cache-affinity routing key (main debug id, source map key).
        routing_key: String,
        /// When, in ms since the Unix epoch (from the leader's clock, inside the command).
        at_ms: u64,
    },
    /// A lease was granted: attempt `attempt` runs on `worker_id`.
    Lease {
        /// The job.
        job_id: String,
        /// The worker.
        worker_id: String,
        /// The attempt (1-based lease number) this concerns.
        attempt: u32,
        /// When, in ms since the Unix epoch (from the leader's clock, inside the command).
        at_ms: u64,
    },
    /// The job goes back to the queue (lease expired, worker lost, retryable failure).
    Requeue {
        /// The job.
        job_id: String,
        /// The attempt (1-based lease number) this concerns.
        attempt: u32,
        /// Why (one line).
        reason: String,
        /// When, in ms since the Unix epoch (from the leader's clock, inside the command).
        at_ms: u64,
    },
    /// The job completed with a result.
    Complete {
        /// The job.
        job_id: String,
        /// The attempt (1-based lease number) this concerns.
        attempt: u32,
        /// The worker.
        worker_id: String,
        /// The engine's result JSON.
        result_json: Vec<u8>,
        /// When, in ms since the Unix epoch (from the leader's clock, inside the command).
        at_ms: u64,
    },
    /// The job failed for good.
    Fail {
        /// The job.
        job_id: String,
        /// The attempt (1-based lease number) this concerns.
        attempt: u32,
        /// The error (one line).
        error: String,
        /// When, in ms since the Unix epoch (from the leader's clock, inside the command).
        at_ms: u64,
    },
}

/// Job kinds, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobKind {
    /// A native crash report.
    Native,
    /// A JavaScript stack.
    Js,
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting for a slot.
    Queued,
    /// Leased.
    Running,
    /// Completed with a result.
    Completed,
    /// Failed for good.
    Failed,
}

impl JobState {
    /// Completed or failed.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed)
    }
}

/// One job in the index.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    /// Client-chosen id.
    pub job_id: String,
    /// Native or JS.
    pub kind: JobKind,
    /// Current state.
    pub state: JobState,
    /// The encoded `JobSpec`.
    pub spec: Arc<Vec<u8>>,
    /// Cache-affinity routing key.
    pub routing_key: String,
    /// Leases granted so far.
    pub attempts: u32,
    /// Submission time, ms since the epoch.
    pub submitted_at_ms: u64,
    /// Completion or failure time, 0 before.
    pub finished_at_ms: u64,
    /// The result JSON, when completed.
    pub result_json: Option<Arc<Vec<u8>>>,
    /// Last error (failed, or last failed attempt).
    pub error: Option<String>,
    /// The worker holding or that completed the job.
    pub worker_id: Option<String>,
    /// Crash group, when completed with symbolicated frames.
    pub fingerprint: Option<String>,
    /// Position in submission order (the log index of its `Submit`).
    pub sequence: u64,
}

/// A crash group.
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// Fingerprint (hex).
    pub fingerprint: String,
    /// Title: crash reason and top function.
    pub title: String,
    /// Number of jobs.
    pub count: u64,
    /// First and last completion, ms since the epoch.
    pub first_seen_ms: u64,
    /// See `first_seen_ms`.
    pub last_seen_ms: u64,
    /// The key stack, innermost first.
    pub key_stack: Vec<String>,
    /// The most recent job.
    pub last_job_id: String,
}

/// What applying a command changed, for the scheduler and watchers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The command changed job `job_id`.
    Changed(String),
    /// The command was a no-op (stale attempt, job already terminal, unknown job).
    Ignored,
}

/// The index: jobs and crash groups.
#[derive(Debug, Default)]
pub struct StateMachine {
    jobs: DashMap<String, JobRecord>,
    groups: DashMap<String, Group>,
    applied: AtomicU64,
}

impl StateMachine {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of commands applied.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }

    /// Applies one command. Deterministic; never panics on any command sequence. Callers
    /// serialize `apply` calls (the scheduler's lock); reads may run concurrently.
    pub fn apply(&self, command: &Command) -> Applied {
        let sequence = self.applied.fetch_add(1, Ordering::Relaxed) + 1;
        match command {
            Command::Submit {
                job_id,
                kind,
                spec,
                routing_key,
                at_ms,
            } => {
                if self.jobs.contains_key(job_id) {
                    return Applied::Ignored;
                }
                self.jobs.insert(
                    job_id.clone(),
                    JobRecord {
                        job_id: job_id.clone(),
                        kind: *kind,
                        state: JobState::Queued,
                        spec: Arc::new(spec.clone()),
                        routing_key: routing_key.clone(),
                        attempts: 0,
                        submitted_at_ms: *at_ms,
                        finished_at_ms: 0,
                        result_json: None,
                        error: None,
                        worker_id: None,
                        fingerprint: None,
                        sequence,
                    },
                );
                Applied::Changed(job_id.clone())
            }
            Command::Lease {
                job_id,
                worker_id,
                attempt,
                ..
            } => self.update(job_id, |job| {
                if job.state != JobState::Queued || *attempt != job.attempts + 1 {
                    return false;
                }
                job.state = JobState::Running;
                job.attempts = *attempt;
                job.worker_id = Some(worker_id.clone());
                true
            }),
            Command::Requeue {
                job_id,
                attempt,
                reason,
                ..
            } => self.update(job_id, |job| {
                if job.state != JobState::Running || *attempt != job.attempts {
                    return false;
                }
                job.state = JobState::Queued;
                job.error = Some(reason.clone());
                job.worker_id = None;
                true
            }),
            Command::Complete {
                job_id,
                worker_id,
                result_json,
                at_ms,
                ..
            } => {
                let mut group_key = None;
                let changed = self.update(job_id, |job| {
                    // Any attempt may complete a job, but only once.
                    if job.state.is_terminal() {
                        return false;
                    }
                    job.state = JobState::Completed;
                    job.finished_at_ms = *at_ms;
                    job.result_json = Some(Arc::new(result_json.clone()));
                    job.worker_id = Some(worker_id.clone());
                    job.error = None;
                    group_key = grouping::group_key(job.kind, result_json);
                    job.fingerprint = group_key.as_ref().map(|k| k.fingerprint.clone());
                    true
                });
                if let (Applied::Changed(_), Some(key)) = (&changed, group_key) {
                    self.add_to_group(key, job_id, *at_ms);
                }
                changed
            }
            Command::Fail {
                job_id,
                error,
                at_ms,
                ..
            } => self.update(job_id, |job| {
                if job.state.is_terminal() {
                    return false;
                }
                job.state = JobState::Failed;
                job.finished_at_ms = *at_ms;
                job.error = Some(error.clone());
                true
            }),
        }
    }

    fn update(&self, job_id: &str, f: impl FnOnce(&mut JobRecord) -> bool) -> Applied {
        let Some(mut job) = self.jobs.get_mut(job_id) else {
            return Applied::Ignored;
        };
        if f(&mut job) {
            Applied::Changed(job_id.to_owned())
        } else {
            Applied::Ignored
        }
    }

    fn add_to_group(&self, key: GroupKey, job_id: &str, at_ms: u64) {
        let mut group = self
            .groups
            .entry(key.fingerprint.clone())
            .or_insert_with(|| Group {
                fingerprint: key.fingerprint.clone(),
                title: key.title.clone(),
                count: 0,
                first_seen_ms: at_ms,
                last_seen_ms: at_ms,
                key_stack: key.key_stack.clone(),
                last_job_id: job_id.to_owned(),
            });
        group.count += 1;
        group.first_seen_ms = group.first_seen_ms.min(at_ms);
        group.last_seen_ms = group.last_seen_ms.max(at_ms);
        group.last_job_id = job_id.to_owned();
    }

    /// A job by id (a copy; results are shared, not copied).
    pub fn job(&self, job_id: &str) -> Option<JobRecord> {
        self.jobs.get(job_id).map(|j| j.clone())
    }

    /// Jobs in `state` (all when `None`), newest first, at most `limit`.
    pub fn list_jobs(&self, state: Option<JobState>, limit: usize) -> Vec<JobRecord> {
        let mut jobs: Vec<JobRecord> = self
            .jobs
            .iter()
            .filter(|j| state.is_none_or(|s| j.state == s))
            .map(|j| j.clone())
            .collect();
        jobs.sort_by_key(|j| std::cmp::Reverse(j.sequence));
        jobs.truncate(limit);
        jobs
    }

    /// Jobs that are queued or running (to rebuild the queue after a restart), oldest first.
    pub fn unfinished_jobs(&self) -> Vec<JobRecord> {
        let mut jobs: Vec<JobRecord> = self
            .jobs
            .iter()
            .filter(|j| !j.state.is_terminal())
            .map(|j| j.clone())
            .collect();
        jobs.sort_by_key(|j| j.sequence);
        jobs
    }

    /// Crash groups, most frequent first (ties: most recent first), at most `limit`.
    pub fn groups(&self, limit: usize) -> Vec<Group> {
        let mut groups: Vec<Group> = self.groups.iter().map(|g| g.clone()).collect();
        groups.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(b.last_seen_ms.cmp(&a.last_seen_ms))
                .then(a.fingerprint.cmp(&b.fingerprint))
        });
        groups.truncate(limit);
        groups
    }

    /// Counts of jobs per state: (queued, running, completed, failed).
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let mut c = (0, 0, 0, 0);
        for job in self.jobs.iter() {
            match job.state {
                JobState::Queued => c.0 += 1,
                JobState::Running => c.1 += 1,
                JobState::Completed => c.2 += 1,
                JobState::Failed => c.3 += 1,
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(id: &str, at: u64) -> Command {
        Command::Submit {
            job_id: id.into(),
            kind: JobKind::Native,
            spec: vec![1, 2, 3],
            routing_key: "k".into(),
            at_ms: at,
        }
    }

    fn lease(id: &str, worker: &str, attempt: u32) -> Command {
        Command::Lease {
            job_id: id.into(),
            worker_id: worker.into(),
            attempt,
            at_ms: 5,
        }
    }

    fn complete(id: &str, worker: &str, attempt: u32, at: u64) -> Command {
        Command::Complete {
            job_id: id.into(),
            attempt,
            worker_id: worker.into(),
            result_json: br#"{"status":"complete","threads":[]}"#.to_vec(),
            at_ms: at,
        }
    }

    #[test]
    fn submit_is_idempotent() {
        let sm = StateMachine::new();
        assert_eq!(sm.apply(&submit("a", 1)), Applied::Changed("a".into()));
        assert_eq!(sm.apply(&submit("a", 2)), Applied::Ignored);
        assert_eq!(sm.job("a").unwrap().submitted_at_ms, 1);
    }

    #[test]
    fn a_job_completes_once_even_when_two_workers_race() {
        let sm = StateMachine::new();
        sm.apply(&submit("a", 1));
        sm.apply(&lease("a", "w1", 1));
        // w1's lease expires; w2 gets attempt 2.
        sm.apply(&Command::Requeue {
            job_id: "a".into(),
            attempt: 1,
            reason: "lease expired".into(),
            at_ms: 9,
        });
        sm.apply(&lease("a", "w2", 2));
        // The slow w1 finishes first: accepted. w2's late result is ignored.
        assert_eq!(
            sm.apply(&complete("a", "w1", 1, 10)),
            Applied::Changed("a".into())
        );
        assert_eq!(sm.apply(&complete("a", "w2", 2, 11)), Applied::Ignored);
        let job = sm.job("a").unwrap();
        assert_eq!(job.state, JobState::Completed);
        assert_eq!(job.worker_id.as_deref(), Some("w1"));
        assert_eq!(job.finished_at_ms, 10);
    }

    #[test]
    fn stale_requeue_and_out_of_order_leases_are_ignored() {
        let sm = StateMachine::new();
        sm.apply(&submit("a", 1));
        assert_eq!(sm.apply(&lease("a", "w1", 2)), Applied::Ignored);
        sm.apply(&lease("a", "w1", 1));
        assert_eq!(
            sm.apply(&Command::Requeue {
                job_id: "a".into(),
                attempt: 0,
                reason: "x".into(),
                at_ms: 3
            }),
            Applied::Ignored
        );
        assert_eq!(sm.job("a").unwrap().state, JobState::Running);
    }

    #[test]
    fn replay_gives_the_same_index() {
        let log = vec![
            submit("a", 1),
            submit("b", 2),
            lease("a", "w1", 1),
            complete("a", "w1", 1, 7),
            lease("b", "w1", 1),
            Command::Fail {
                job_id: "b".into(),
                attempt: 1,
                error: "boom".into(),
                at_ms: 8,
            },
        ];
        let one = StateMachine::new();
        let two = StateMachine::new();
        for c in &log {
            one.apply(c);
        }
        for c in &log {
            two.apply(c);
        }
        assert_eq!(one.job("a"), two.job("a"));
        assert_eq!(one.job("b"), two.job("b"));
        assert_eq!(one.counts(), (0, 0, 1, 1));
        assert_eq!(one.job("b").unwrap().error.as_deref(), Some("boom"));
    }
}

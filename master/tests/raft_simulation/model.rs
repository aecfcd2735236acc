//! The job record as a sequential specification: what the index must hold after each command
//! of the job state machine, applied one after another, and what each command's apply must
//! answer. The rules are the ones `index/apply.rs` documents (and `ARCHITECTURE.md`, "How a
//! job flows"): a job is submitted (QUEUED, revision 1, or FAILED at once when its report is
//! unreadable), leased by attempt numbers that only go up (RUNNING), requeued by the attempt
//! that runs (a lease expired or handed back), finished once per revision by a result or an
//! error of that revision (a re-run's error keeps the result the job had), queued again under
//! the next revision when it lacked a file (resymbolicate), and purged once finished before a
//! cut-off. The simulation checks the real node's answers and indexes against it (`jobs.rs`).

use std::collections::BTreeMap;

use symcluster_master::index::{Command, JobView, command};
use symcluster_proto::v1::{self, JobState};

/// What the model holds of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub state: JobState,
    /// The last attempt leased (0: none yet).
    pub attempts: u32,
    /// 1, one more at each resymbolicate.
    pub revision: u32,
    /// The result it holds: the [`Op::Complete`] `result` that gave it.
    pub result: Option<u64>,
    pub error: String,
    /// Whether its last finish named a missing file (it may be resymbolicated).
    pub missing: bool,
    /// Whether its report (spec) is kept: a readable report's is, until it is purged.
    pub spec: bool,
    pub submitted_at: u64,
    pub finished_at: u64,
    /// Its place in the submit order: the index's `sequence`, which the index assigns as it
    /// applies the submit (the commit order, which need not be the order of `submitted_at`
    /// when a proposal was forwarded); [`Model::apply`] takes the next number, and the
    /// simulation sets the index's ([`Model::sequenced`]).
    pub sequence: u64,
}

impl Job {
    fn finished(&self) -> bool {
        matches!(self.state, JobState::Completed | JobState::Failed)
    }

    /// Whether `view` (a job read from an index, with its result) is this job.
    pub fn matches(&self, view: &JobView) -> bool {
        let record = &view.record;
        let result = match (self.state, self.result) {
            (JobState::Completed, Some(n)) => Some(result_json(n)),
            _ => None,
        };
        record.state == self.state as i32
            && record.attempts == self.attempts
            && record.revision.max(1) == self.revision
            && record.error == self.error
            && record.missing.is_empty() != self.missing
            && record.submitted_at_ms == self.submitted_at
            && record.finished_at_ms == self.finished_at
            && (self.state != JobState::Completed || view.result_json == result)
    }
}

/// A result's bytes: `{"op":N,"pad":"xx..."}`, 0.5-3.5 KiB (results fill the log, which is
/// compacted, so that members that fall behind need snapshots).
pub fn result_json(n: u64) -> Vec<u8> {
    let pad = "x".repeat(512 + (n * 7919 % 3072) as usize);
    format!("{{\"op\":{n},\"pad\":\"{pad}\"}}").into_bytes()
}

/// One command of the job state machine, as the simulation proposes it. `at`: the leader's
/// clock when it made it, ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Submit {
        job: String,
        unreadable: bool,
        at: u64,
    },
    Lease {
        job: String,
        attempt: u32,
        at: u64,
    },
    /// A lease that expired, or was handed back: the attempt ends without a result.
    Requeue {
        job: String,
        attempt: u32,
        at: u64,
    },
    Complete {
        job: String,
        attempt: u32,
        revision: u32,
        missing: bool,
        result: u64,
        at: u64,
    },
    Fail {
        job: String,
        attempt: u32,
        revision: u32,
        missing: bool,
        at: u64,
    },
    Resymbolicate {
        job: String,
        at: u64,
    },
    /// Every job finished before `before` (ms).
    Purge {
        before: u64,
        at: u64,
    },
}

/// The error text an unreadable report's job is stored with.
pub const UNREADABLE: &str = "not a crash report";
/// A requeue's reason.
pub const EXPIRED: &str = "lease expired";
/// A fail's error.
pub const FAILED: &str = "symbolication failed";
/// A resymbolicate's reason.
pub const ARRIVED: &str = "a missing file arrived";

impl Op {
    /// Its kind, for the tallies.
    pub fn kind(&self) -> &'static str {
        match self {
            Op::Submit { .. } => "submit",
            Op::Lease { .. } => "lease",
            Op::Requeue { .. } => "requeue",
            Op::Complete { .. } => "complete",
            Op::Fail { .. } => "fail",
            Op::Resymbolicate { .. } => "resymbolicate",
            Op::Purge { .. } => "purge",
        }
    }

    /// The job it is for (`None`: a purge, which is for every job).
    pub fn job(&self) -> Option<&str> {
        match self {
            Op::Submit { job, .. }
            | Op::Lease { job, .. }
            | Op::Requeue { job, .. }
            | Op::Complete { job, .. }
            | Op::Fail { job, .. }
            | Op::Resymbolicate { job, .. } => Some(job),
            Op::Purge { .. } => None,
        }
    }

    /// The command the master would propose for it.
    pub fn command(&self, padding: Vec<u8>) -> Command {
        let missing = |yes: bool| {
            if yes {
                vec![v1::MissingFile {
                    key: "4c4c4416-5555-3144-a1b0-11c3d0a6b3f2".into(),
                    image: "DemoApp".into(),
                    arch: "arm64".into(),
                }]
            } else {
                Vec::new()
            }
        };
        match self {
            Op::Submit {
                job,
                unreadable: true,
                at,
            } => command::submit_unreadable(job, v1::JobKind::Native, padding, UNREADABLE, *at),
            Op::Submit { job, at, .. } => {
                command::submit(job, v1::JobKind::Native, padding, "sim", *at)
            }
            Op::Lease { job, attempt, at } => command::lease(job, "w1", "t1", *attempt, *at),
            Op::Requeue { job, attempt, at } => command::requeue(job, *attempt, EXPIRED, *at),
            Op::Complete {
                job,
                attempt,
                revision,
                missing: m,
                result,
                at,
            } => command::with_missing(
                command::with_revision(
                    command::complete(job, *attempt, "w1", result_json(*result), None, *at),
                    *revision,
                ),
                missing(*m),
            ),
            Op::Fail {
                job,
                attempt,
                revision,
                missing: m,
                at,
            } => command::with_missing(
                command::with_revision(command::fail(job, *attempt, FAILED, *at), *revision),
                missing(*m),
            ),
            Op::Resymbolicate { job, at } => command::resymbolicate(job, ARRIVED, *at),
            Op::Purge { before, at } => command::purge(*before, *at, 0),
        }
    }
}

/// What applying a command answers (`Applied`, without the record it carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    Changed,
    Ignored,
    Purged(u64),
}

/// Every job, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub jobs: BTreeMap<String, Job>,
    /// The last [`Job::sequence`] given.
    sequence: u64,
}

impl Model {
    /// Applies `op`: its effect.
    pub fn apply(&mut self, op: &Op) -> Effect {
        if let Op::Purge { before, .. } = op {
            return Effect::Purged(self.purge(*before));
        }
        if let Op::Submit {
            job,
            unreadable,
            at,
        } = op
        {
            if self.jobs.contains_key(job) {
                return Effect::Ignored;
            }
            self.sequence += 1;
            self.jobs.insert(
                job.clone(),
                Job {
                    state: if *unreadable {
                        JobState::Failed
                    } else {
                        JobState::Queued
                    },
                    attempts: 0,
                    revision: 1,
                    result: None,
                    error: if *unreadable {
                        UNREADABLE.into()
                    } else {
                        "".into()
                    },
                    missing: false,
                    spec: !unreadable,
                    submitted_at: *at,
                    finished_at: if *unreadable { *at } else { 0 },
                    sequence: self.sequence,
                },
            );
            return Effect::Changed;
        }
        let Some(job) = op.job().and_then(|id| self.jobs.get_mut(id)) else {
            return Effect::Ignored;
        };
        let changed = match op {
            Op::Lease { attempt, .. } => {
                let ok = job.state == JobState::Queued && *attempt == job.attempts + 1;
                if ok {
                    job.state = JobState::Running;
                    job.attempts = *attempt;
                }
                ok
            }
            Op::Requeue { attempt, .. } => {
                let ok = job.state == JobState::Running && *attempt == job.attempts;
                if ok {
                    job.state = JobState::Queued;
                    job.error = EXPIRED.into();
                }
                ok
            }
            Op::Complete {
                revision,
                missing,
                result,
                at,
                ..
            } => {
                let ok = !job.finished() && *revision == job.revision;
                if ok {
                    job.state = JobState::Completed;
                    job.result = Some(*result);
                    job.error.clear();
                    job.missing = *missing;
                    job.finished_at = *at;
                }
                ok
            }
            Op::Fail {
                revision,
                missing,
                at,
                ..
            } if job.result.is_none() => {
                let ok = !job.finished() && *revision == job.revision;
                if ok {
                    job.state = JobState::Failed;
                    job.error = FAILED.into();
                    job.missing = *missing;
                    job.finished_at = *at;
                }
                ok
            }
            // A re-run that fails keeps the result the job had, and what it lacked.
            Op::Fail { revision, .. } => {
                let ok = !job.finished() && job.revision > 1 && *revision == job.revision;
                if ok {
                    job.state = JobState::Completed;
                    job.error = format!("symbolicating again failed: {FAILED}");
                }
                ok
            }
            Op::Resymbolicate { .. } => {
                let ok = job.spec && job.finished() && job.missing;
                if ok {
                    job.state = JobState::Queued;
                    job.revision += 1;
                    job.error = ARRIVED.into();
                }
                ok
            }
            Op::Submit { .. } | Op::Purge { .. } => unreachable!("handled above"),
        };
        if changed {
            Effect::Changed
        } else {
            Effect::Ignored
        }
    }

    /// Deletes the jobs finished before `before`, in submit order, up to the first submitted
    /// at or after it: how many.
    fn purge(&mut self, before: u64) -> u64 {
        let mut order: Vec<(u64, &String)> = self
            .jobs
            .iter()
            .map(|(id, job)| (job.sequence, id))
            .collect();
        order.sort_unstable();
        let mut doomed = Vec::new();
        for (_, id) in order {
            let job = &self.jobs[id];
            if job.submitted_at >= before {
                break;
            }
            if job.finished() && job.finished_at < before {
                doomed.push(id.clone());
            }
        }
        for id in &doomed {
            self.jobs.remove(id);
        }
        doomed.len() as u64
    }

    /// Job `job` has `sequence` in the index's submit order.
    pub fn sequenced(&mut self, job: &str, sequence: u64) {
        if let Some(job) = self.jobs.get_mut(job) {
            job.sequence = sequence;
        }
    }
}

#[test]
fn the_model_finishes_a_revision_once_and_refuses_stale_attempts_and_revisions() {
    let mut model = Model::default();
    let job = || "j".to_owned();
    let ops = [
        (
            Op::Submit {
                job: job(),
                unreadable: false,
                at: 1,
            },
            Effect::Changed,
        ),
        (
            Op::Lease {
                job: job(),
                attempt: 2,
                at: 2,
            },
            Effect::Ignored,
        ),
        (
            Op::Lease {
                job: job(),
                attempt: 1,
                at: 2,
            },
            Effect::Changed,
        ),
        (
            Op::Requeue {
                job: job(),
                attempt: 1,
                at: 3,
            },
            Effect::Changed,
        ),
        (
            Op::Lease {
                job: job(),
                attempt: 2,
                at: 4,
            },
            Effect::Changed,
        ),
        (
            Op::Complete {
                job: job(),
                attempt: 2,
                revision: 1,
                missing: true,
                result: 7,
                at: 5,
            },
            Effect::Changed,
        ),
        // A duplicate of revision 1, and a lease of a finished job: nothing.
        (
            Op::Complete {
                job: job(),
                attempt: 1,
                revision: 1,
                missing: false,
                result: 8,
                at: 6,
            },
            Effect::Ignored,
        ),
        (Op::Resymbolicate { job: job(), at: 7 }, Effect::Changed),
        // Revision 1's late result must not finish revision 2.
        (
            Op::Complete {
                job: job(),
                attempt: 2,
                revision: 1,
                missing: false,
                result: 9,
                at: 8,
            },
            Effect::Ignored,
        ),
        (
            Op::Lease {
                job: job(),
                attempt: 3,
                at: 9,
            },
            Effect::Changed,
        ),
        (
            Op::Fail {
                job: job(),
                attempt: 3,
                revision: 2,
                missing: false,
                at: 10,
            },
            Effect::Changed,
        ),
        (Op::Purge { before: 5, at: 11 }, Effect::Purged(0)),
    ];
    for (op, effect) in &ops {
        assert_eq!(model.apply(op), *effect, "{op:?}");
    }
    let j = &model.jobs["j"];
    // The re-run's error keeps revision 1's result.
    assert_eq!(
        (j.state, j.revision, j.attempts, j.result, j.finished_at),
        (JobState::Completed, 2, 3, Some(7), 5)
    );
    assert_eq!(
        model.apply(&Op::Purge { before: 6, at: 12 }),
        Effect::Purged(1)
    );
    assert!(model.jobs.is_empty());
}

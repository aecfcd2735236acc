//! The job state machine under the simulation: the commands a leader's scheduler proposes
//! (submits, leases, requeues of expired leases, completions, fails, resymbolicates, purges),
//! stale ones among them (an attempt that no longer runs, a revision already finished), through
//! three real members that crash, are cut off and catch up through snapshots; with the
//! `failpoints` feature, a member also crashes inside a turn at one of the master's failpoints
//! (before or after a log fsync or an index commit, between a snapshot's index restore and the
//! log reset), armed with `panic` and caught as the member's crash.
//!
//! Checked against the model ([`super::model`]), as the nemesis checks a real cluster's
//! history against its own: each job has one command in flight at a time, and a purge is
//! proposed only when nothing else is in flight or undecided, so the order the answers come in
//! is an order the log holds. Every answer must be the model's for that command (a stale one
//! `Ignored`, a purge the number the model purges). A proposal whose answer is lost (its leader
//! crashed or stepped down) is undecided, as a history's unknown outcome is: its job gets no
//! other command until a leader of a later term has committed an entry of its own term and
//! applied everything committed (from then on the command is in the log for good or never
//! will be); then that leader's index must hold the job as the model does with the command
//! applied, or without it, and the model takes the one it holds. At the end, healed, every
//! member's index holds every job exactly as the model does, and the indexes agree byte for
//! byte.

use std::collections::{BTreeMap, BTreeSet};

use raft::StateRole;
use symcluster_master::index::apply::Applied;
use symcluster_master::index::{Index, command};
use symcluster_master::raft::{Input, ProposeError};
use tokio::sync::oneshot;

use super::model::{Effect, Model, Op};
use super::sim::{FAILPOINTS, Sim};

/// A command waiting for its answer.
struct Flight {
    op: Op,
    /// The term of the leader it was proposed to.
    term: u64,
    reply: oneshot::Receiver<Result<Applied, ProposeError>>,
}

/// A command whose answer was lost.
struct Undecided {
    op: Op,
    term: u64,
}

/// What a seed did, summed over seeds by the test.
#[derive(Debug, Default)]
pub struct Tally {
    /// Answers by command kind: (changed, ignored).
    pub answers: BTreeMap<&'static str, (u64, u64)>,
    /// Undecided commands the group turned out to hold, not to hold, or either (the command
    /// changes nothing either way).
    pub undecided_applied: u64,
    pub undecided_dropped: u64,
    pub undecided_either: u64,
    /// Jobs purged.
    pub purged: u64,
    /// Failpoints that crashed a member, by name.
    pub fired: BTreeMap<String, u64>,
    pub snapshots: u64,
    pub crashes: u64,
}

/// The master's failpoints a simulated member reaches inside a turn.
#[cfg(feature = "failpoints")]
const POINTS: [&str; 5] = [
    symcluster_master::failpoints::LOG_FSYNC_BEFORE,
    symcluster_master::failpoints::LOG_FSYNC_AFTER,
    symcluster_master::failpoints::INDEX_COMMIT_BEFORE,
    symcluster_master::failpoints::INDEX_COMMIT_AFTER,
    symcluster_master::failpoints::SNAPSHOT_BEFORE_LOG_RESET,
];

struct JobSim {
    seed: u64,
    sim: Sim,
    model: Model,
    /// Jobs by id; in submit order.
    jobs: Vec<String>,
    flights: BTreeMap<String, Flight>,
    undecided: BTreeMap<String, Undecided>,
    /// The purge in flight or undecided (one at a time, with nothing else).
    purge: Option<Flight>,
    purge_undecided: Option<Undecided>,
    /// Ids ever proposed (purged or never applied ones too), for the end's check.
    named: BTreeSet<String>,
    next_result: u64,
    tally: Tally,
    /// The step before which a crashed member stays down.
    down_until: usize,
    /// Failpoints armed so far (the next is armed once the last one fired).
    #[cfg(feature = "failpoints")]
    armed: u64,
}

/// The "now" commands are made at: one ms a step, from 1.
fn at(step: usize) -> u64 {
    step as u64 + 1
}

impl JobSim {
    fn leader_term(&self) -> Option<(u64, u64)> {
        self.sim
            .members
            .iter()
            .filter_map(|m| m.running.as_ref().map(|r| (m.id, r)))
            .find(|(_, r)| r.node.raft().state == StateRole::Leader)
            .map(|(id, r)| (id, r.node.raft().term))
    }

    /// Proposes `op` to the leader, if there is one.
    fn propose(&mut self, op: Op) {
        let Some((leader, term)) = self.leader_term() else {
            return;
        };
        // Reports of 0.5-4 KiB: the log passes its retention and is compacted.
        let padding = vec![b'x'; 512 + self.sim.rng.below(3584) as usize];
        let (reply, rx) = oneshot::channel();
        self.sim.member(leader).unwrap().deliver(Input::Propose {
            command: command::encode(&op.command(padding)),
            reply: Some(reply),
            then: Vec::new(),
            bounded: true,
        });
        let flight = Flight {
            op,
            term,
            reply: rx,
        };
        match flight.op.job() {
            Some(job) => {
                self.named.insert(job.to_owned());
                self.flights.insert(job.to_owned(), flight);
            }
            None => self.purge = Some(flight),
        }
    }

    /// Picks the next command: a new job, a purge when nothing else is open, or one for a job
    /// that has none open, mostly what its state calls for, sometimes a stale or late one.
    fn next_op(&mut self, step: usize) -> Option<Op> {
        let now = at(step);
        let rng = &mut self.sim.rng;
        if self.purge.is_some() || self.purge_undecided.is_some() {
            return None;
        }
        let roll = rng.below(100);
        if roll < 15 || self.jobs.is_empty() {
            let job = format!("default/job-{}", self.jobs.len() + 1);
            self.jobs.push(job.clone());
            return Some(Op::Submit {
                job,
                unreadable: rng.chance(15),
                at: now,
            });
        }
        if roll < 17 {
            if self.flights.is_empty() && self.undecided.is_empty() {
                // Jobs finished more than 300 steps ago.
                return Some(Op::Purge {
                    before: now.saturating_sub(300),
                    at: now,
                });
            }
            return None;
        }
        // A job with nothing open: among the last 40 submitted, mostly.
        let from = if rng.chance(80) {
            self.jobs.len().saturating_sub(40)
        } else {
            0
        };
        let job = self.jobs[from + rng.below((self.jobs.len() - from) as u64) as usize].clone();
        if self.flights.contains_key(&job) || self.undecided.contains_key(&job) {
            return None;
        }
        let Some(record) = self.model.jobs.get(&job) else {
            // Not applied (yet), or purged: a submit again, or a late lease.
            return Some(if rng.chance(50) {
                Op::Submit {
                    job,
                    unreadable: false,
                    at: now,
                }
            } else {
                Op::Lease {
                    job,
                    attempt: 1,
                    at: now,
                }
            });
        };
        let (attempts, revision) = (record.attempts, record.revision);
        self.next_result += 1;
        let result = self.next_result;
        let stale = rng.chance(15);
        use symcluster_proto::v1::JobState;
        Some(match record.state {
            JobState::Queued if !stale => Op::Lease {
                job,
                attempt: attempts + 1,
                at: now,
            },
            JobState::Running if !stale => match rng.below(10) {
                0..=3 => Op::Complete {
                    job,
                    attempt: attempts,
                    revision,
                    missing: rng.chance(40),
                    result,
                    at: now,
                },
                4..=5 => Op::Fail {
                    job,
                    attempt: attempts,
                    revision,
                    missing: rng.chance(40),
                    at: now,
                },
                _ => Op::Requeue {
                    job,
                    attempt: attempts,
                    at: now,
                },
            },
            JobState::Completed | JobState::Failed if !stale => {
                if rng.chance(70) {
                    Op::Resymbolicate { job, at: now }
                } else {
                    // A duplicate finish of the revision that finished.
                    Op::Complete {
                        job,
                        attempt: attempts,
                        revision,
                        missing: false,
                        result,
                        at: now,
                    }
                }
            }
            // Stale: an attempt that no longer runs, a revision already left, a lease out of
            // order.
            _ => match rng.below(5) {
                4 => Op::Submit {
                    job,
                    unreadable: false,
                    at: now,
                },
                0 => Op::Complete {
                    job,
                    attempt: attempts,
                    revision: revision.saturating_sub(1).max(1),
                    missing: false,
                    result,
                    at: now,
                },
                1 => Op::Fail {
                    job,
                    attempt: attempts.saturating_sub(1),
                    revision: revision + 1,
                    missing: false,
                    at: now,
                },
                2 => Op::Requeue {
                    job,
                    attempt: attempts.saturating_sub(1),
                    at: now,
                },
                _ => Op::Lease {
                    job,
                    attempt: attempts + 2,
                    at: now,
                },
            },
        })
    }

    /// Takes the answers that came: each checked against the model and applied to it; a lost
    /// one makes its command undecided.
    fn answers(&mut self) {
        let mut done = Vec::new();
        for (job, flight) in &mut self.flights {
            match flight.reply.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => {}
                answer => done.push((job.clone(), answer)),
            }
        }
        for (job, answer) in done {
            let flight = self.flights.remove(&job).unwrap();
            self.answered(flight, answer);
        }
        if let Some(flight) = self.purge.as_mut() {
            match flight.reply.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => {}
                answer => {
                    let flight = self.purge.take().unwrap();
                    self.answered(flight, answer);
                }
            }
        }
    }

    fn answered(
        &mut self,
        flight: Flight,
        answer: Result<Result<Applied, ProposeError>, oneshot::error::TryRecvError>,
    ) {
        let seed = self.seed;
        let got = match answer {
            Ok(Ok(Applied::Changed { .. })) => Effect::Changed,
            Ok(Ok(Applied::Ignored)) => Effect::Ignored,
            Ok(Ok(Applied::Purged(n))) => Effect::Purged(n),
            // Nothing was proposed.
            Ok(Err(ProposeError::Overloaded { .. })) => return,
            // Lost with its leader: it may be in the log.
            _ => {
                let undecided = Undecided {
                    op: flight.op,
                    term: flight.term,
                };
                match undecided.op.job() {
                    Some(job) => {
                        self.undecided.insert(job.to_owned(), undecided);
                    }
                    None => self.purge_undecided = Some(undecided),
                }
                return;
            }
        };
        let before = flight
            .op
            .job()
            .and_then(|job| self.model.jobs.get(job).cloned());
        let want = self.model.apply(&flight.op);
        if let (Op::Submit { job, .. }, Effect::Changed) = (&flight.op, got) {
            let sequence = self.sequence(job);
            self.model.sequenced(job, sequence);
        }
        assert_eq!(
            got, want,
            "seed {seed}: {:?} was answered {got:?}, the model says {want:?} (the job was {before:?})",
            flight.op
        );
        let counts = self.tally.answers.entry(flight.op.kind()).or_default();
        match got {
            Effect::Changed => counts.0 += 1,
            Effect::Ignored => counts.1 += 1,
            Effect::Purged(n) => {
                counts.0 += 1;
                self.tally.purged += n;
            }
        }
    }

    /// The sequence the index of the member that has applied the most gave `job`, just
    /// applied: the order it was submitted in (a member behind may still hold an earlier job
    /// of that id, since purged).
    fn sequence(&self, job: &str) -> u64 {
        self.sim
            .members
            .iter()
            .filter_map(|m| m.running.as_ref())
            .max_by_key(|r| r.index.applied().unwrap().0)
            .and_then(|r| r.index.job(job, false).unwrap())
            .map(|view| view.record.sequence)
            .unwrap_or_else(|| panic!("seed {}: {job}, just applied, is not held", self.seed))
    }

    /// The index of a leader whose term began after `term` and that has committed an entry of
    /// its own term and applied everything committed: where every command proposed in `term`
    /// or before is decided.
    fn deciding_index(&self, term: u64) -> Option<Index> {
        let r = self
            .sim
            .members
            .iter()
            .filter_map(|m| m.running.as_ref())
            .find(|r| r.node.raft().state == StateRole::Leader)?;
        let raft = r.node.raft();
        let committed = raft.raft_log.committed;
        let own = raft.raft_log.term(committed).ok() == Some(raft.term);
        let applied = r.index.applied().unwrap().0 == committed;
        (raft.term > term && own && applied).then(|| r.index.clone())
    }

    /// Decides every undecided command a leader can now decide, reading its index.
    fn decide(&mut self) {
        let seed = self.seed;
        let jobs: Vec<String> = self.undecided.keys().cloned().collect();
        for job in jobs {
            let term = self.undecided[&job].term;
            let Some(index) = self.deciding_index(term) else {
                continue;
            };
            let undecided = self.undecided.remove(&job).unwrap();
            let before = self.model.jobs.get(&job).cloned();
            let mut with = self.model.clone();
            with.apply(&undecided.op);
            let after = with.jobs.get(&job).cloned();
            let held = index.job(&job, true).unwrap();
            let is = |model: &Option<super::model::Job>| match (model, &held) {
                (Some(m), Some(view)) => m.matches(view),
                (None, None) => true,
                _ => false,
            };
            if before == after {
                assert!(
                    is(&before),
                    "seed {seed}: {job} is {held:?}, the model {before:?}"
                );
                self.tally.undecided_either += 1;
            } else if is(&after) {
                self.model = with;
                if let (Op::Submit { .. }, Some(view)) = (&undecided.op, &held) {
                    self.model.sequenced(&job, view.record.sequence);
                }
                self.tally.undecided_applied += 1;
            } else if is(&before) {
                self.tally.undecided_dropped += 1;
            } else {
                panic!(
                    "seed {seed}: after {:?}, whose answer was lost, {job} is {held:?}: the model \
                     has it {before:?} without the command, {after:?} with it",
                    undecided.op
                );
            }
        }
        if let Some(undecided) = self.purge_undecided.as_ref()
            && let Some(index) = self.deciding_index(undecided.term)
        {
            let undecided = self.purge_undecided.take().unwrap();
            let mut with = self.model.clone();
            with.apply(&undecided.op);
            let holds = |model: &Model| {
                self.named.iter().all(|job| {
                    let held = index.job(job, true).unwrap();
                    match (model.jobs.get(job), &held) {
                        (Some(m), Some(view)) => m.matches(view),
                        (None, None) => true,
                        _ => false,
                    }
                })
            };
            if holds(&with) {
                self.tally.purged += (self.model.jobs.len() - with.jobs.len()) as u64;
                self.model = with;
                self.tally.undecided_applied += 1;
            } else if holds(&self.model) {
                self.tally.undecided_dropped += 1;
            } else {
                panic!(
                    "seed {seed}: after {:?}, whose answer was lost, the index is neither \
                     purged nor not",
                    undecided.op
                );
            }
        }
    }

    /// One step: maybe a command, maybe a fault, a turn of every member, the answers taken.
    fn step(&mut self, step: usize) {
        let tick = step.is_multiple_of(2);
        for _ in 0..2 {
            if self.sim.rng.chance(45)
                && let Some(op) = self.next_op(step)
            {
                self.propose(op);
            }
        }
        self.sim.isolate_now_and_then();
        // One crash in three keeps the member down until the log has passed it: it comes back
        // through a snapshot.
        if self
            .sim
            .crash_now_and_then(step >= self.down_until, |_| true)
            && self.sim.rng.chance(33)
        {
            self.down_until = step + 800;
        }
        #[cfg(feature = "failpoints")]
        if self.sim.fired.len() as u64 == self.armed && self.sim.rng.chance(1) {
            let point = POINTS[self.sim.rng.below(POINTS.len() as u64) as usize];
            symcluster_master::failpoints::arm(point, "1*panic").unwrap();
            self.armed += 1;
        }
        self.sim.turn(tick);
        self.answers();
        self.decide();
    }
}

/// Runs seed `seed` for `steps` steps of load and faults, heals, and checks every member's
/// index against the model.
pub fn run(seed: u64, steps: usize, alone: &std::sync::RwLockWriteGuard<'static, ()>) -> Tally {
    let mut sim = JobSim {
        seed,
        sim: Sim::armed(seed, alone),
        model: Model::default(),
        jobs: Vec::new(),
        flights: BTreeMap::new(),
        undecided: BTreeMap::new(),
        purge: None,
        purge_undecided: None,
        named: BTreeSet::new(),
        next_result: 0,
        tally: Tally::default(),
        down_until: 0,
        #[cfg(feature = "failpoints")]
        armed: 0,
    };
    for step in 0..steps {
        sim.step(step);
    }
    // Heal: no new command, every point disarmed, everyone up and connected; run until every
    // answer came or was decided and the group agrees.
    #[cfg(feature = "failpoints")]
    for point in POINTS {
        symcluster_master::failpoints::disarm(point);
    }
    sim.sim.isolated.clear();
    let mut healed = false;
    for _ in 0..4000 {
        for m in &mut sim.sim.members {
            if m.running.is_none() {
                sim.sim.fired.extend(m.try_start());
            }
        }
        sim.sim.turn(true);
        sim.answers();
        sim.decide();
        if sim.flights.is_empty()
            && sim.purge.is_none()
            && sim.undecided.is_empty()
            && sim.purge_undecided.is_none()
            && sim.sim.agreed()
        {
            healed = true;
            break;
        }
    }
    assert!(
        healed,
        "seed {seed}: not healed: {} in flight, {} undecided, agreed {}",
        sim.flights.len(),
        sim.undecided.len(),
        sim.sim.agreed()
    );
    for m in &sim.sim.members {
        let index = &m.running.as_ref().unwrap().index;
        for job in &sim.named {
            let held = index.job(job, true).unwrap();
            let want = sim.model.jobs.get(job);
            let same = match (want, &held) {
                (Some(want), Some(view)) => want.matches(view),
                (None, None) => true,
                _ => false,
            };
            assert!(
                same,
                "seed {seed}: member {} holds {job} as {held:?}, the model as {want:?}",
                m.id
            );
        }
    }
    let mut tally = sim.tally;
    for point in &sim.sim.fired {
        *tally.fired.entry(point.clone()).or_default() += 1;
    }
    tally.snapshots = sim.sim.stats.snapshots;
    tally.crashes = sim.sim.stats.crashes + sim.sim.fired.len() as u64;
    tally
}

/// Over many seeds (`SIM_JOB_SEEDS`, 50 by default): every answer is the model's, every lost
/// one is decided by the index, and every member ends holding every job as the model does.
/// Each kind of command was both made and refused (as stale, or for a job in another state);
/// lost answers were met; with the `failpoints` feature, members crashed at every point.
#[test]
fn the_job_state_machine_keeps_to_its_model_through_crashes_snapshots_and_lost_answers() {
    let alone = FAILPOINTS.write().unwrap_or_else(|e| e.into_inner());
    let seeds: u64 = std::env::var("SIM_JOB_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    // A failpoint's panic is the member's crash: not printed as a failure.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .unwrap_or("");
        if !message.starts_with("failpoint ") {
            default_hook(info);
        }
    }));
    let mut total = Tally::default();
    for seed in 1..=seeds {
        let tally = run(seed, 4000, &alone);
        for (kind, (changed, ignored)) in tally.answers {
            let sum = total.answers.entry(kind).or_default();
            sum.0 += changed;
            sum.1 += ignored;
        }
        total.undecided_applied += tally.undecided_applied;
        total.undecided_dropped += tally.undecided_dropped;
        total.undecided_either += tally.undecided_either;
        total.purged += tally.purged;
        for (point, n) in tally.fired {
            *total.fired.entry(point).or_default() += n;
        }
        total.snapshots += tally.snapshots;
        total.crashes += tally.crashes;
    }
    let _ = std::panic::take_hook();
    eprintln!("{seeds} seeds: {total:?}");
    for kind in [
        "submit",
        "lease",
        "requeue",
        "complete",
        "fail",
        "resymbolicate",
    ] {
        let (changed, ignored) = total.answers.get(kind).copied().unwrap_or_default();
        assert!(changed > 0 && ignored > 0, "{kind}: {total:?}");
    }
    assert!(total.purged > 0, "{total:?}");
    assert!(
        total.undecided_applied + total.undecided_dropped + total.undecided_either > 0,
        "{total:?}"
    );
    // A third of the crashes keep a member down until it needs a snapshot; not each one's
    // leader compacts in time.
    assert!(
        total.snapshots >= seeds / 3 && total.crashes >= seeds,
        "{total:?}"
    );
    #[cfg(feature = "failpoints")]
    for point in POINTS {
        assert!(total.fired.contains_key(point), "{point}: {total:?}");
    }
}

//! The linearizability search over one job's calls: the job record as a sequential
//! specification, and the search that decides whether some order of the calls, each taking
//! effect at one instant between its invocation and its answer, keeps to it.
//!
//! Linearizability is local (Herlihy and Wing, 1990, theorem 1): a history is linearizable when
//! each object's is, so the search runs job by job, and a run's tens of thousands of calls never
//! meet in one search. The search is the Wing-Gong algorithm with Lowe's memoization, as
//! porcupine implements it (Horn and Kroening, "Faster linearizability checking via
//! P-compositionality", 2015; porcupine's `checkSingle`): walk the calls and answers in time
//! order, take the first call whose effect the model allows from the state so far, and back
//! up at an answer whose call has not taken effect; a (calls taken, state) pair met before is
//! not searched again. Stateright's `LinearizabilityTester` was tried first (the crate the
//! issue names): it has no memoization, and on a lost job read by eight clients at once it
//! tried every order: 100 ms for 9 calls, and 17 were not decided in five minutes, where this search takes
//! microseconds (the test `a_lost_job_read_by_many_clients_at_once_is_decided_at_once`). No
//! crate with porcupine's algorithm is kept well enough to depend on, so it is here.
//!
//! The model, [`JobRecord`]: a job is absent, then open (QUEUED or RUNNING, back and forth as
//! leases are granted and expire: workers move it between client calls, so a read may see
//! either), then ended for good (COMPLETED or FAILED, one result). A submit creates it when it
//! is absent (`created`) and changes nothing otherwise; an unreadable report's job is stored
//! FAILED at once. A read sees it as it is. The result an ended job may have is the one its
//! report gives ([`DEMO_FRAME`] for the demo crash, FAILED for an unreadable report).
//!
//! Outcomes, as Knossos and porcupine treat them: a call that surely took no effect (`Failed`)
//! is left out; a read whose answer is unknown says nothing and is left out; a submit whose
//! answer is unknown may or may not have taken effect, at any time after its invocation: its
//! answer is placed after everything else, so it may take effect anywhere from its invocation
//! on, or last of all, which no call sees. The job's end state, read from the healed cluster,
//! is one more read, invoked after every answered call was answered.

use std::collections::HashSet;
use std::time::Duration;

use symcluster_client::api::JobState;

use super::history::{Call, DEMO_FRAME, Observed, Op, Outcome, Payload};

/// What a job is, between calls, in the model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum JobRecord {
    /// No submit has taken effect.
    Absent,
    /// Submitted, not ended: QUEUED or RUNNING.
    Open(Payload),
    /// Ended for good; the end a read saw (`None` until one did: an unreadable report's job
    /// ends at its submit, before anyone reads its error).
    Ended(Payload, Option<Observed>),
}

/// A call's answer, as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A submit's: `SubmitResponse.created` and `same_report`.
    Submitted {
        /// Whether this submit says it created the job.
        created: bool,
        /// Whether the stored report is the one it sent.
        same_report: bool,
    },
    /// A read found the job as it shows.
    Found(Observed),
    /// A read was answered NOT_FOUND.
    Absent,
    /// A submit whose answer is unknown: any answer it could have had.
    Unknown,
}

impl Answer {
    /// The answer the search gives `call` that had `outcome`; `None` for a call it leaves out
    /// (refused for good, or a read with no answer: see the module).
    pub fn of(call: &Call, outcome: &Outcome) -> Option<Answer> {
        Some(match outcome {
            Outcome::Submitted {
                created,
                same_report,
            } => Answer::Submitted {
                created: *created,
                same_report: *same_report,
            },
            Outcome::Found(seen) => Answer::Found(seen.clone()),
            Outcome::Absent => Answer::Absent,
            Outcome::Failed(_) => return None,
            Outcome::Unknown(_) if *call == Call::Get => return None,
            Outcome::Unknown(_) => Answer::Unknown,
        })
    }
}

/// Whether `seen`, an ended job, ended as a job with `payload`'s report must.
pub fn right_end(payload: Payload, seen: &Observed) -> bool {
    match payload {
        Payload::Demo => seen.state == JobState::Completed && seen.end == DEMO_FRAME,
        Payload::Unreadable => seen.state == JobState::Failed && seen.end.starts_with("FAILED: "),
    }
}

impl JobRecord {
    /// The record after `call`, answered `answer`, took effect on this one; `None` when the
    /// model does not allow that answer from here. A read changes nothing, except that one
    /// that sees the job ended fixes its end.
    pub fn step(&self, call: &Call, answer: &Answer) -> Option<JobRecord> {
        match (call, answer, self) {
            // Created by this call; or by the attempt of it whose answer a failover lost: the
            // client library sent it again, and the master answered the retry "already there,
            // the same report" (`SubmitResponse.same_report`, as the API documents). The
            // master keeps no report of a job stored FAILED at once, so of an unreadable
            // report's retry it cannot tell, and answers `same_report` false.
            (Call::Submit(payload), answer, JobRecord::Absent)
                if match answer {
                    Answer::Submitted { created: true, .. } | Answer::Unknown => true,
                    Answer::Submitted {
                        created: false,
                        same_report,
                    } => *same_report || *payload == Payload::Unreadable,
                    _ => false,
                } =>
            {
                Some(match payload {
                    Payload::Unreadable => JobRecord::Ended(*payload, None),
                    Payload::Demo => JobRecord::Open(*payload),
                })
            }
            (
                Call::Submit(_),
                Answer::Submitted { created: false, .. } | Answer::Unknown,
                record,
            ) if *record != JobRecord::Absent => Some(record.clone()),
            (Call::Get, Answer::Absent, JobRecord::Absent) => Some(JobRecord::Absent),
            (Call::Get, Answer::Found(seen), JobRecord::Open(payload)) => {
                if !seen.finished() {
                    Some(self.clone())
                } else if right_end(*payload, seen) {
                    Some(JobRecord::Ended(*payload, Some(seen.clone())))
                } else {
                    None
                }
            }
            (Call::Get, Answer::Found(seen), JobRecord::Ended(payload, None)) => (seen.finished()
                && right_end(*payload, seen))
            .then(|| JobRecord::Ended(*payload, Some(seen.clone()))),
            (Call::Get, Answer::Found(seen), JobRecord::Ended(_, Some(end))) => {
                (seen == end).then(|| self.clone())
            }
            _ => None,
        }
    }
}

/// One call of the search: what it asked and was answered.
struct Entry {
    call: Call,
    answer: Answer,
}

/// A node of the search's list of invocations and answers, in time order: entry `op`'s
/// invocation (`answer_node`: its answer's node) or its answer.
#[derive(Clone, Copy)]
struct Node {
    op: usize,
    /// For an invocation, the node of its answer; `None` for an answer.
    answer_node: Option<usize>,
    prev: usize,
    next: usize,
}

/// Whether one job's `ops` (every call that named it, any order) and its end state `end` (read
/// from the healed cluster; `None`: absent) have a linearization against [`JobRecord`].
pub fn linearizable(ops: &[&Op], end: Option<&Observed>) -> bool {
    let mut entries: Vec<Entry> = Vec::new();
    // (time, 0 invocation / 1 answer, entry): at one instant an invocation goes first, as
    // `Op::precedes` orders only an answer strictly before an invocation.
    let mut events: Vec<(Duration, u8, usize)> = Vec::new();
    // The end state was read after every call of the run was invoked and answered.
    let mut last = Duration::ZERO;
    for op in ops {
        let Some(answer) = Answer::of(&op.call, &op.outcome) else {
            continue;
        };
        let id = entries.len();
        events.push((op.invoked, 0, id));
        last = last.max(op.invoked);
        if answer != Answer::Unknown {
            events.push((op.answered, 1, id));
            last = last.max(op.answered);
        }
        entries.push(Entry {
            call: op.call.clone(),
            answer,
        });
    }
    let end_read = entries.len();
    entries.push(Entry {
        call: Call::Get,
        answer: end.map_or(Answer::Absent, |seen| Answer::Found(seen.clone())),
    });
    let after = last + Duration::from_nanos(1);
    events.push((after, 0, end_read));
    events.push((after + Duration::from_nanos(1), 1, end_read));
    events.sort_by_key(|&(at, kind, id)| (at, kind, id));
    // Unknown submits' answers: after everything, in entry order.
    for (id, entry) in entries.iter().enumerate() {
        if entry.answer == Answer::Unknown {
            events.push((Duration::MAX, 1, id));
        }
    }
    search(&entries, &events)
}

/// Porcupine's `checkSingle` over `events` (time order; each entry's invocation before its
/// answer), from [`JobRecord::Absent`].
fn search(entries: &[Entry], events: &[(Duration, u8, usize)]) -> bool {
    // Node 0 is the list's head; event i is node i + 1.
    let mut nodes: Vec<Node> = Vec::with_capacity(events.len() + 1);
    nodes.push(Node {
        op: usize::MAX,
        answer_node: None,
        prev: 0,
        next: 1,
    });
    let mut answer_at = vec![0; entries.len()];
    for (i, &(_, kind, id)) in events.iter().enumerate() {
        if kind == 1 {
            answer_at[id] = i + 1;
        }
    }
    for (i, &(_, kind, id)) in events.iter().enumerate() {
        nodes.push(Node {
            op: id,
            answer_node: (kind == 0).then(|| answer_at[id]),
            prev: i,
            next: i + 2,
        });
    }
    let end = nodes.len();
    let unlink = |nodes: &mut Vec<Node>, n: usize| {
        let Node { prev, next, .. } = nodes[n];
        nodes[prev].next = next;
        if next != end {
            nodes[next].prev = prev;
        }
    };
    let relink = |nodes: &mut Vec<Node>, n: usize| {
        let Node { prev, next, .. } = nodes[n];
        nodes[prev].next = n;
        if next != end {
            nodes[next].prev = n;
        }
    };
    let words = entries.len().div_ceil(64);
    let mut taken = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, JobRecord)> = HashSet::new();
    let mut state = JobRecord::Absent;
    // The calls taken so far: (invocation node, state before it).
    let mut stack: Vec<(usize, JobRecord)> = Vec::new();
    let mut at = nodes[0].next;
    while nodes[0].next != end {
        // An invocation to try; or an answer whose call has not taken effect (the list's end
        // cannot come first: every invocation's answer follows it), where the last call taken
        // is undone.
        let invocation = nodes.get(at).and_then(|node| node.answer_node);
        if let Some(answer) = invocation {
            let op = nodes[at].op;
            let entry = &entries[op];
            if let Some(next_state) = state.step(&entry.call, &entry.answer) {
                let mut with = taken.clone();
                with[op / 64] |= 1 << (op % 64);
                if seen.insert((with.clone(), next_state.clone())) {
                    stack.push((at, std::mem::replace(&mut state, next_state)));
                    taken = with;
                    unlink(&mut nodes, at);
                    unlink(&mut nodes, answer);
                    at = nodes[0].next;
                    continue;
                }
            }
            at = nodes[at].next;
            continue;
        }
        let Some((call, before)) = stack.pop() else {
            return false;
        };
        let op = nodes[call].op;
        taken[op / 64] &= !(1 << (op % 64));
        state = before;
        let answer = nodes[call].answer_node.unwrap_or(end);
        relink(&mut nodes, answer);
        relink(&mut nodes, call);
        at = nodes[call].next;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::history::samples::{op, seen};

    fn done() -> Observed {
        seen(JobState::Completed, DEMO_FRAME)
    }

    fn queued() -> Outcome {
        Outcome::Found(seen(JobState::Queued, ""))
    }

    fn submit(client: usize, invoked: u64, answered: u64, outcome: Outcome) -> Op {
        op(
            client,
            Call::Submit(Payload::Demo),
            invoked,
            answered,
            outcome,
        )
    }

    fn created(created: bool) -> Outcome {
        Outcome::Submitted {
            created,
            same_report: true,
        }
    }

    fn read(client: usize, invoked: u64, answered: u64, outcome: Outcome) -> Op {
        op(client, Call::Get, invoked, answered, outcome)
    }

    fn check(ops: &[Op], end: Option<Observed>) -> bool {
        linearizable(&ops.iter().collect::<Vec<_>>(), end.as_ref())
    }

    #[test]
    fn concurrent_calls_may_take_effect_in_any_order_that_keeps_real_time() {
        let ops = [
            // Invoked before the submit, answered after it was: absent or found, either.
            read(1, 0, 30, queued()),
            read(2, 5, 40, Outcome::Absent),
            submit(0, 10, 20, created(true)),
            // Running, then queued again (a lease expired), then done.
            read(1, 50, 51, Outcome::Found(seen(JobState::Running, ""))),
            read(2, 52, 53, queued()),
            submit(0, 54, 55, created(false)),
            read(1, 60, 61, Outcome::Found(done())),
            read(2, 62, 63, Outcome::Found(done())),
        ];
        assert!(check(&ops, Some(done())));
    }

    #[test]
    fn an_acknowledged_submit_that_is_gone_at_the_end_was_lost() {
        let ops = [submit(0, 0, 10, created(true))];
        assert!(!check(&ops, None));
        // Its answer lost: it may never have taken effect.
        let ops = [submit(0, 0, 10, Outcome::Unknown("cut".into()))];
        assert!(check(&ops, None));
        // Refused: it did not.
        let ops = [submit(0, 0, 10, Outcome::Failed("invalid".into()))];
        assert!(check(&ops, None));
    }

    #[test]
    fn not_found_after_the_job_was_seen_is_a_stale_read() {
        let ops = [
            submit(0, 0, 10, created(true)),
            read(1, 11, 12, Outcome::Absent),
        ];
        assert!(!check(&ops, Some(done())));
        // Overlapping the submit, it is not.
        let ops = [
            submit(0, 0, 10, created(true)),
            read(1, 9, 12, Outcome::Absent),
        ];
        assert!(check(&ops, Some(done())));
    }

    #[test]
    fn a_job_that_ends_twice_otherwise_had_two_results() {
        let other = seen(JobState::Completed, "main main.c:1");
        let ops = [
            submit(0, 0, 10, created(true)),
            read(1, 20, 21, Outcome::Found(done())),
            read(2, 30, 31, Outcome::Found(seen(JobState::Queued, ""))),
        ];
        assert!(!check(&ops, Some(done())));
        let ops = [
            submit(0, 0, 10, created(true)),
            read(1, 20, 21, Outcome::Found(done())),
        ];
        assert!(!check(&ops, Some(other)));
        // Another revision's end is another result too.
        let again = Observed {
            revision: 2,
            ..done()
        };
        assert!(!check(&ops, Some(again)));
    }

    /// What the pairwise checks in `check` cannot see: a submit answered "already there" before
    /// the submit that created the job was invoked, and a read that saw the job then.
    #[test]
    fn a_job_seen_before_the_submit_that_created_it_breaks_real_time() {
        let ops = [
            submit(0, 0, 1, created(false)),
            read(1, 2, 3, queued()),
            submit(2, 10, 11, created(true)),
        ];
        assert!(!check(&ops, Some(done())));
        // Had the creating submit been invoked first, all is well.
        let ops = [
            submit(2, 0, 11, created(true)),
            submit(0, 1, 2, created(false)),
            read(1, 3, 4, queued()),
        ];
        assert!(check(&ops, Some(done())));
    }

    /// The first nemesis run with a full disk found this: the leader appended a new job's
    /// submit and exited 74 before answering; the client library sent it again to the new
    /// leader, which answered "not created, the same report". The call did create the job.
    #[test]
    fn a_submit_retried_after_a_failover_may_have_created_the_job_itself() {
        let retried = |same_report| Outcome::Submitted {
            created: false,
            same_report,
        };
        let ops = [submit(0, 0, 1_400, retried(true))];
        assert!(check(&ops, Some(done())));
        // Another report under the id: someone else created it, and no one did here.
        let ops = [submit(0, 0, 1_400, retried(false))];
        assert!(!check(&ops, Some(done())));
        // Unless the report was unreadable: the master keeps none of such a job's report, so
        // it cannot tell (found in the second run).
        let failed = seen(JobState::Failed, "FAILED: not a crash report");
        let ops = [op(
            0,
            Call::Submit(Payload::Unreadable),
            0,
            1_400,
            retried(false),
        )];
        assert!(check(&ops, Some(failed)));
    }

    /// An unknown submit may take effect late, after later calls of its own client: those
    /// count as another process's, so they need not follow it.
    #[test]
    fn an_unknown_submit_may_take_effect_after_its_clients_next_calls() {
        let ops = [
            submit(0, 0, 100, Outcome::Unknown("no answer".into())),
            read(0, 101, 102, Outcome::Absent),
            read(1, 200, 201, queued()),
        ];
        assert!(check(&ops, Some(done())));
        // But not before its invocation.
        let ops = [
            read(1, 0, 1, queued()),
            submit(0, 5, 100, Outcome::Unknown("no answer".into())),
        ];
        assert!(!check(&ops, Some(done())));
    }

    /// Stateright's search did not decide 17 such calls in five minutes; here, 65; a
    /// (calls taken, state) pair is searched once.
    #[test]
    fn a_lost_job_read_by_many_clients_at_once_is_decided_at_once() {
        let mut ops = vec![submit(99, 0, 1, created(true))];
        for client in 0..8 {
            for round in 0..8 {
                let at = 10 + round * 100 + client as u64;
                ops.push(read(client, at, at + 90, queued()));
            }
        }
        assert!(!check(&ops, None));
        assert!(check(&ops, Some(done())));
    }

    /// Every order that keeps real time, tried one by one: the definition, for small histories.
    /// `calls`: (invoked, answered, call, answer), an unknown submit's `answered` ignored.
    fn brute_force(
        calls: &[(u64, u64, Call, Answer)],
        left: &mut Vec<bool>,
        state: &JobRecord,
    ) -> bool {
        let must = |i: usize| calls[i].3 != Answer::Unknown;
        if !(0..calls.len()).any(|i| left[i] && must(i)) {
            return true;
        }
        for i in 0..calls.len() {
            // Next only if no call left was answered before it was invoked.
            let blocked =
                (0..calls.len()).any(|j| left[j] && must(j) && j != i && calls[j].1 < calls[i].0);
            if !left[i] || blocked {
                continue;
            }
            if let Some(next) = state.step(&calls[i].2, &calls[i].3) {
                left[i] = false;
                let found = brute_force(calls, left, &next);
                left[i] = true;
                if found {
                    return true;
                }
            }
        }
        false
    }

    /// 3,000 random histories of up to six calls by three clients: the search and the
    /// definition agree on every one.
    #[test]
    fn the_search_agrees_with_trying_every_order() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(54);
        let (mut yes, mut no) = (0, 0);
        for _ in 0..3_000 {
            let mut free = [0u64; 3];
            let mut ops = Vec::new();
            for _ in 0..rng.random_range(1..=6) {
                let client = rng.random_range(0..3);
                let invoked = free[client] + rng.random_range(0..20);
                let answered = invoked + rng.random_range(1..30);
                free[client] = answered + 1;
                let (call, outcome) = match rng.random_range(0..7) {
                    0 => (Call::Submit(Payload::Demo), created(true)),
                    1 => (Call::Submit(Payload::Demo), created(false)),
                    2 => (Call::Submit(Payload::Demo), Outcome::Unknown("lost".into())),
                    3 => (Call::Get, Outcome::Absent),
                    4 => (Call::Get, queued()),
                    5 => (Call::Get, Outcome::Found(done())),
                    _ => (
                        Call::Get,
                        Outcome::Found(seen(JobState::Completed, "main main.c:1")),
                    ),
                };
                ops.push(op(client, call, invoked, answered, outcome));
            }
            let end = match rng.random_range(0..3) {
                0 => None,
                1 => Some(done()),
                _ => Some(seen(JobState::Running, "")),
            };
            let last = ops.iter().map(|o| o.answered.max(o.invoked)).max().unwrap();
            let mut calls: Vec<(u64, u64, Call, Answer)> = ops
                .iter()
                .map(|o| {
                    let answer = Answer::of(&o.call, &o.outcome).unwrap();
                    (
                        o.invoked.as_millis() as u64,
                        o.answered.as_millis() as u64,
                        o.call.clone(),
                        answer,
                    )
                })
                .collect();
            let last = last.as_millis() as u64;
            calls.push((
                last + 1,
                last + 2,
                Call::Get,
                end.clone().map_or(Answer::Absent, Answer::Found),
            ));
            let expected = brute_force(&calls, &mut vec![true; calls.len()], &JobRecord::Absent);
            assert_eq!(check(&ops, end), expected, "{ops:#?}");
            if expected { yes += 1 } else { no += 1 }
        }
        // Both verdicts were put to the test.
        assert!(yes > 300 && no > 300, "{yes} linearizable, {no} not");
    }

    #[test]
    fn an_unreadable_report_ends_failed_at_its_submit() {
        let failed = seen(JobState::Failed, "FAILED: not a crash report");
        let unreadable =
            |answered, outcome| op(0, Call::Submit(Payload::Unreadable), 0, answered, outcome);
        let ops = [
            unreadable(10, created(true)),
            read(1, 11, 12, Outcome::Found(failed.clone())),
        ];
        assert!(check(&ops, Some(failed.clone())));
        let ops = [unreadable(10, created(true)), read(1, 11, 12, queued())];
        assert!(!check(&ops, Some(failed)));
    }
}

//! The checker of a nemesis run's history: what a linearizable job index must never show.
//!
//! Each job is a register whose value is absent, then QUEUED / RUNNING (a lease expiry may
//! take it back from RUNNING to QUEUED), then COMPLETED or FAILED for good (nothing in a
//! nemesis run re-symbolicates). Submits are idempotent by job id. Job by job, the verdict is
//! the linearizability search of [`super::linearizable`] against that model (**not
//! linearizable**: no order of the job's calls keeps to it); beside it, the consequences of
//! linearizability that name what went wrong, each in real-time order (op A precedes op B
//! when A was answered before B was invoked), and what a search cannot decide:
//!
//! - **lost**: a submit was acknowledged, and the job is absent at the end;
//! - **created twice**: two submits of one id both answered `created`;
//! - **stale read**: a read answered NOT_FOUND after a submit of the job was acknowledged, or
//!   after an earlier read had found it;
//! - **read from the future**: a read found a job no submit of which had been invoked yet;
//! - **went back**: a read after one that saw the job finished saw it unfinished, or finished
//!   otherwise (another state, revision or result);
//! - **wrong result**: a finished job's result is not what its report gives
//!   ([`super::history::DEMO_FRAME`] for the demo crash, FAILED for an unreadable report), or
//!   the end state differs from a finished read;
//! - **unfinished**: a job still QUEUED or RUNNING once the cluster was healed and given time
//!   (linearizable, but a promise broken: every acknowledged job ends).

use std::collections::BTreeMap;

use super::history::{Call, DEMO_FRAME, Observed, Op, Outcome, Payload};
use super::linearizable::linearizable;

/// One violation: the job and what was seen, with the ops' times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    /// The job's id.
    pub job: String,
    /// The kind (`lost`, `stale read`, ...; see the module's list).
    pub kind: &'static str,
    /// What was seen, one line.
    pub detail: String,
}

/// How each job ended, read from the leader once the cluster was healed: `None` for absent.
pub type EndStates = BTreeMap<String, Option<Observed>>;

/// Every anomaly of `ops` (all calls of the run) against the end states `ends` (every job any
/// op named), job by job in id order.
pub fn check(ops: &[Op], ends: &EndStates) -> Vec<Anomaly> {
    let mut by_job: BTreeMap<&str, Vec<&Op>> = BTreeMap::new();
    for op in ops {
        by_job.entry(op.job.as_str()).or_default().push(op);
    }
    let mut anomalies = Vec::new();
    for (job, ops) in by_job {
        let end = ends.get(job).cloned().flatten();
        check_job(job, &ops, end.as_ref(), &mut anomalies);
        if !linearizable(&ops, end.as_ref()) {
            anomalies.push(Anomaly {
                job: job.to_owned(),
                kind: "not linearizable",
                detail: format!(
                    "no order of its {} calls and the end state ({}) keeps to the job model: {}",
                    ops.len(),
                    end.as_ref()
                        .map_or("absent".to_owned(), |e| format!("{:?} {}", e.state, e.end)),
                    calls(&ops)
                ),
            });
        }
    }
    anomalies
}

/// At most [`SHOWN_CALLS`] of `ops`, in invocation order, one line: `client call [invoked-answered
/// ms] outcome; ...`.
fn calls(ops: &[&Op]) -> String {
    let mut ordered = ops.to_vec();
    ordered.sort_by_key(|op| op.invoked);
    let mut shown: Vec<String> = ordered
        .iter()
        .take(SHOWN_CALLS)
        .map(|op| {
            let outcome = match &op.outcome {
                Outcome::Found(seen) => {
                    format!("found {:?} rev {} {}", seen.state, seen.revision, seen.end)
                }
                other => format!("{other:?}"),
            };
            format!(
                "c{} {:?} [{}-{} ms] {}",
                op.client,
                op.call,
                op.invoked.as_millis(),
                op.answered.as_millis(),
                outcome.trim_end()
            )
        })
        .collect();
    if ordered.len() > SHOWN_CALLS {
        shown.push(format!("and {} more", ordered.len() - SHOWN_CALLS));
    }
    shown.join("; ")
}

/// How many of a job's calls a "not linearizable" anomaly shows.
const SHOWN_CALLS: usize = 16;

fn check_job(job: &str, ops: &[&Op], end: Option<&Observed>, out: &mut Vec<Anomaly>) {
    let mut push = |kind: &'static str, detail: String| {
        out.push(Anomaly {
            job: job.to_owned(),
            kind,
            detail,
        })
    };
    let submits: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| matches!(op.call, Call::Submit(_)))
        .collect();
    let payload = submits.iter().find_map(|op| match op.call {
        Call::Submit(payload) => Some(payload),
        Call::Get => None,
    });
    let acknowledged: Vec<&Op> = submits
        .iter()
        .copied()
        .filter(|op| matches!(op.outcome, Outcome::Submitted { .. }))
        .collect();
    let created = submits
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Submitted { created: true, .. }))
        .count();
    if created > 1 {
        push(
            "created twice",
            format!("{created} submits were answered created"),
        );
    }
    if let Some(first) = acknowledged.first()
        && end.is_none()
    {
        push(
            "lost",
            format!(
                "the submit answered at {:?} was acknowledged; the job is absent at the end",
                first.answered
            ),
        );
    }
    let reads: Vec<&Op> = ops
        .iter()
        .copied()
        .filter(|op| op.call == Call::Get)
        .collect();
    for read in &reads {
        match &read.outcome {
            Outcome::Absent => {
                if let Some(ack) = acknowledged.iter().find(|ack| ack.precedes(read)) {
                    push(
                        "stale read",
                        format!(
                            "NOT_FOUND by the read invoked at {:?} (client {}), after the submit \
                             acknowledged at {:?} (client {})",
                            read.invoked, read.client, ack.answered, ack.client
                        ),
                    );
                } else if let Some(seen) = reads
                    .iter()
                    .find(|r| matches!(r.outcome, Outcome::Found(_)) && r.precedes(read))
                {
                    push(
                        "stale read",
                        format!(
                            "NOT_FOUND by the read invoked at {:?} (client {}), after a read \
                             answered at {:?} found it",
                            read.invoked, read.client, seen.answered
                        ),
                    );
                }
            }
            Outcome::Found(seen) => {
                if !submits.iter().any(|s| s.invoked < read.answered) {
                    push(
                        "read from the future",
                        format!(
                            "found ({:?}) by the read answered at {:?}, before any submit of it",
                            seen.state, read.answered
                        ),
                    );
                }
                check_finished(seen, payload, "a read", &mut push);
            }
            _ => {}
        }
    }
    // Finished is for good: every read after one that saw the job finished sees the same.
    for earlier in &reads {
        let Outcome::Found(first) = &earlier.outcome else {
            continue;
        };
        if !first.finished() {
            continue;
        }
        for later in reads.iter().filter(|r| earlier.precedes(r)) {
            if let Outcome::Found(then) = &later.outcome
                && then != first
            {
                push(
                    "went back",
                    format!(
                        "the read answered at {:?} saw {:?} rev {} ({}); the read invoked at \
                         {:?} saw {:?} rev {} ({})",
                        earlier.answered,
                        first.state,
                        first.revision,
                        first.end,
                        later.invoked,
                        then.state,
                        then.revision,
                        then.end
                    ),
                );
                break;
            }
        }
        if let Some(end) = end
            && end != first
        {
            push(
                "wrong result",
                format!(
                    "a read saw {:?} ({}), the end state is {:?} ({})",
                    first.state, first.end, end.state, end.end
                ),
            );
        }
    }
    if let Some(end) = end {
        if !end.finished() {
            push(
                "unfinished",
                format!("{:?} once the cluster was healed", end.state),
            );
        }
        check_finished(end, payload, "the end state", &mut push);
    }
}

/// A finished job's result must be its report's: [`DEMO_FRAME`] for the demo crash
/// (completed), FAILED for an unreadable report.
fn check_finished(
    seen: &Observed,
    payload: Option<Payload>,
    by: &str,
    push: &mut impl FnMut(&'static str, String),
) {
    if !seen.finished() {
        return;
    }
    let right = match payload {
        Some(Payload::Demo) => seen.end == DEMO_FRAME,
        Some(Payload::Unreadable) => seen.end.starts_with("FAILED: "),
        None => true,
    };
    if !right {
        push(
            "wrong result",
            format!(
                "{by} saw {:?}: {} (a {:?} report)",
                seen.state,
                seen.end,
                payload.unwrap_or(Payload::Unreadable)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use symcluster_client::api::JobState;

    use super::*;
    use crate::nemesis::history::samples::{op, seen};

    fn demo_done() -> Observed {
        seen(JobState::Completed, DEMO_FRAME)
    }

    fn ends(end: Option<Observed>) -> EndStates {
        [("j".to_owned(), end)].into()
    }

    fn submit(invoked: u64, answered: u64, created: bool) -> Op {
        op(
            0,
            Call::Submit(Payload::Demo),
            invoked,
            answered,
            Outcome::Submitted {
                created,
                same_report: true,
            },
        )
    }

    fn read(invoked: u64, answered: u64, outcome: Outcome) -> Op {
        op(1, Call::Get, invoked, answered, outcome)
    }

    fn kinds(anomalies: &[Anomaly]) -> Vec<&'static str> {
        anomalies.iter().map(|a| a.kind).collect()
    }

    #[test]
    fn a_history_that_keeps_to_the_model_has_no_anomaly() {
        let ops = vec![
            // A read concurrent with the submit may see it absent or queued.
            read(5, 12, Outcome::Absent),
            submit(10, 20, true),
            op(
                2,
                Call::Get,
                11,
                19,
                Outcome::Found(seen(JobState::Queued, "")),
            ),
            read(30, 31, Outcome::Found(seen(JobState::Running, ""))),
            // A lease expiry takes a running job back to QUEUED.
            read(32, 33, Outcome::Found(seen(JobState::Queued, ""))),
            submit(40, 41, false),
            read(50, 51, Outcome::Found(demo_done())),
            read(60, 61, Outcome::Found(demo_done())),
            // An unknown submit, and a read the cluster could not answer, say nothing.
            op(
                0,
                Call::Submit(Payload::Demo),
                62,
                90,
                Outcome::Unknown("timeout".into()),
            ),
            read(63, 64, Outcome::Unknown("unavailable".into())),
        ];
        assert_eq!(check(&ops, &ends(Some(demo_done()))), Vec::new());
    }

    #[test]
    fn an_acknowledged_submit_absent_at_the_end_is_lost() {
        let ops = vec![submit(0, 1, true)];
        assert_eq!(
            kinds(&check(&ops, &ends(None))),
            vec!["lost", "not linearizable"]
        );
        // An unknown one may be absent.
        let ops = vec![op(
            0,
            Call::Submit(Payload::Demo),
            0,
            1,
            Outcome::Unknown("deadline".into()),
        )];
        assert_eq!(check(&ops, &ends(None)), Vec::new());
    }

    #[test]
    fn two_creating_submits_of_one_id_are_a_duplicate() {
        let ops = vec![submit(0, 1, true), submit(2, 3, true)];
        assert_eq!(
            kinds(&check(&ops, &ends(Some(demo_done())))),
            vec!["created twice", "not linearizable"]
        );
    }

    #[test]
    fn not_found_after_an_acknowledged_submit_or_a_found_read_is_stale() {
        // After the acknowledgement (a new leader that had not applied it yet).
        let ops = vec![submit(0, 10, true), read(11, 12, Outcome::Absent)];
        let found = check(&ops, &ends(Some(demo_done())));
        assert_eq!(kinds(&found), vec!["stale read", "not linearizable"]);
        assert!(
            found[0]
                .detail
                .contains("after the submit acknowledged at 10ms"),
            "{found:?}"
        );
        // After another read found it, while the submit's answer was lost.
        let ops = vec![
            op(
                0,
                Call::Submit(Payload::Demo),
                0,
                100,
                Outcome::Unknown("cut".into()),
            ),
            read(10, 11, Outcome::Found(seen(JobState::Queued, ""))),
            read(12, 13, Outcome::Absent),
        ];
        assert_eq!(
            kinds(&check(&ops, &ends(Some(demo_done())))),
            vec!["stale read", "not linearizable"]
        );
    }

    #[test]
    fn a_job_found_before_its_submit_was_invoked_is_from_the_future() {
        let ops = vec![
            read(0, 1, Outcome::Found(seen(JobState::Queued, ""))),
            submit(5, 6, true),
        ];
        assert_eq!(
            kinds(&check(&ops, &ends(Some(demo_done())))),
            vec!["read from the future", "not linearizable"]
        );
    }

    #[test]
    fn a_finished_job_that_reads_unfinished_or_otherwise_later_went_back() {
        let ops = vec![
            submit(0, 1, true),
            read(2, 3, Outcome::Found(demo_done())),
            read(4, 5, Outcome::Found(seen(JobState::Running, ""))),
        ];
        assert_eq!(
            kinds(&check(&ops, &ends(Some(demo_done())))),
            vec!["went back", "not linearizable"]
        );
        // Concurrent reads are not ordered: no anomaly.
        let ops = vec![
            submit(0, 1, true),
            read(2, 10, Outcome::Found(demo_done())),
            op(
                2,
                Call::Get,
                4,
                5,
                Outcome::Found(seen(JobState::Running, "")),
            ),
        ];
        assert_eq!(check(&ops, &ends(Some(demo_done()))), Vec::new());
    }

    #[test]
    fn a_result_other_than_the_reports_or_an_unfinished_end_is_flagged() {
        let wrong = seen(JobState::Completed, "main main.c:1");
        let ops = vec![submit(0, 1, true)];
        assert_eq!(
            kinds(&check(&ops, &ends(Some(wrong)))),
            vec!["wrong result", "not linearizable"]
        );
        assert_eq!(
            kinds(&check(&ops, &ends(Some(seen(JobState::Queued, ""))))),
            vec!["unfinished"]
        );
        let unreadable = vec![op(
            0,
            Call::Submit(Payload::Unreadable),
            0,
            1,
            Outcome::Submitted {
                created: true,
                same_report: true,
            },
        )];
        assert_eq!(
            check(
                &unreadable,
                &ends(Some(seen(JobState::Failed, "FAILED: not a crash report")))
            ),
            Vec::new()
        );
    }
}

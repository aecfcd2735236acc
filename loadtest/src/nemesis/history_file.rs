//! A nemesis run's history as a file of JSON lines, so that a run that failed can be checked
//! again (`symcluster-loadtest nemesis --check FILE`) and run again with its seed.
//!
//! The lines, in this order (times in nanoseconds since the run's start):
//!
//! - `{"run": {"seed": S, "masters": M, "workers": W, "clients": C, "seconds": N, "faults":
//!   ["kill", ...]}}`: what ran;
//! - one per call: `{"process": 0, "op": "submit" | "get", "payload": "demo" | "unreadable"
//!   (submits), "job": "c0-3", "invoke_ns": 1, "complete_ns": 2, "outcome": "ok" | "fail" |
//!   "unknown", "value": V}`, where V is, for an `ok` submit, `{"created": true, "same_report":
//!   true}`; for an `ok`
//!   read, `{"found": {"state": "COMPLETED", "revision": 1, "end": "crash_write_null
//!   crash.c:23"}}` or `{"found": null}` (NOT_FOUND); else the error, a string;
//! - one per fault event: `{"event": "Kill master 2 for 900 ms", "at_ns": 3}`;
//! - one per job read at the end: `{"end": "c0-3", "found": {...} | null}`.

use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use symcluster_client::api::JobState;

use super::check::EndStates;
use super::history::{Call, Event, Observed, Op, Outcome, Payload};

/// What a history file holds.
#[derive(Debug, Default)]
pub struct HistoryFile {
    /// The run's options, as written (`{"seed": ..., ...}`).
    pub run: Value,
    /// Every call.
    pub ops: Vec<Op>,
    /// The faults injected and healed.
    pub events: Vec<Event>,
    /// How each job ended.
    pub ends: EndStates,
}

fn observed_json(seen: Option<&Observed>) -> Value {
    match seen {
        Some(seen) => json!({
            "state": seen.state.as_str_name().trim_start_matches("JOB_STATE_"),
            "revision": seen.revision,
            "end": seen.end,
        }),
        None => Value::Null,
    }
}

fn observed_of(value: &Value) -> anyhow::Result<Option<Observed>> {
    if value.is_null() {
        return Ok(None);
    }
    let state = value["state"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("a found job without a state: {value}"))?;
    let state = JobState::from_str_name(&format!("JOB_STATE_{state}"))
        .ok_or_else(|| anyhow::anyhow!("unknown job state {state:?}"))?;
    Ok(Some(Observed {
        state,
        revision: value["revision"].as_u64().unwrap_or(0) as u32,
        end: value["end"].as_str().unwrap_or_default().to_owned(),
    }))
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// Writes `file` to `path` (replacing it). Errors: the file could not be written.
pub fn write(path: &Path, file: &HistoryFile) -> anyhow::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{}", json!({ "run": file.run }))?;
    for op in &file.ops {
        let (name, payload) = match op.call {
            Call::Submit(Payload::Demo) => ("submit", Some("demo")),
            Call::Submit(Payload::Unreadable) => ("submit", Some("unreadable")),
            Call::Get => ("get", None),
        };
        let (outcome, value) = match &op.outcome {
            Outcome::Submitted {
                created,
                same_report,
            } => (
                "ok",
                json!({ "created": created, "same_report": same_report }),
            ),
            Outcome::Found(seen) => ("ok", json!({ "found": observed_json(Some(seen)) })),
            Outcome::Absent => ("ok", json!({ "found": null })),
            Outcome::Failed(e) => ("fail", json!(e)),
            Outcome::Unknown(e) => ("unknown", json!(e)),
        };
        let mut line = json!({
            "process": op.client,
            "op": name,
            "job": op.job,
            "invoke_ns": nanos(op.invoked),
            "complete_ns": nanos(op.answered),
            "outcome": outcome,
            "value": value,
        });
        if let Some(payload) = payload {
            line["payload"] = json!(payload);
        }
        writeln!(out, "{line}")?;
    }
    for event in &file.events {
        writeln!(
            out,
            "{}",
            json!({ "event": event.what, "at_ns": nanos(event.at) })
        )?;
    }
    for (job, end) in &file.ends {
        writeln!(
            out,
            "{}",
            json!({ "end": job, "found": observed_json(end.as_ref()) })
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Reads a file [`write`] wrote. Errors: it cannot be read, or a line is not one of the
/// module's (with its 1-based line number).
pub fn read(path: &Path) -> anyhow::Result<HistoryFile> {
    let mut file = HistoryFile::default();
    let input = std::io::BufReader::new(std::fs::File::open(path)?);
    for (at, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed = (|| -> anyhow::Result<()> {
            let v: Value = serde_json::from_str(&line)?;
            if let Some(run) = v.get("run") {
                file.run = run.clone();
            } else if let Some(what) = v.get("event") {
                file.events.push(Event {
                    at: Duration::from_nanos(v["at_ns"].as_u64().unwrap_or(0)),
                    what: what.as_str().unwrap_or_default().to_owned(),
                });
            } else if let Some(job) = v.get("end") {
                let job = job.as_str().unwrap_or_default().to_owned();
                file.ends.insert(job, observed_of(&v["found"])?);
            } else {
                file.ops.push(op_of(&v)?);
            }
            Ok(())
        })();
        parsed.map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), at + 1))?;
    }
    Ok(file)
}

fn op_of(v: &Value) -> anyhow::Result<Op> {
    let call = match (v["op"].as_str(), v["payload"].as_str()) {
        (Some("submit"), Some("demo")) => Call::Submit(Payload::Demo),
        (Some("submit"), Some("unreadable")) => Call::Submit(Payload::Unreadable),
        (Some("get"), _) => Call::Get,
        _ => anyhow::bail!("not a call, an event or an end: {v}"),
    };
    let value = &v["value"];
    let error = || value.as_str().unwrap_or_default().to_owned();
    let outcome = match (v["outcome"].as_str(), &call) {
        (Some("ok"), Call::Submit(_)) => Outcome::Submitted {
            created: value["created"].as_bool().unwrap_or(false),
            same_report: value["same_report"].as_bool().unwrap_or(false),
        },
        (Some("ok"), Call::Get) => match observed_of(&value["found"])? {
            Some(seen) => Outcome::Found(seen),
            None => Outcome::Absent,
        },
        (Some("fail"), _) => Outcome::Failed(error()),
        (Some("unknown"), _) => Outcome::Unknown(error()),
        (other, _) => anyhow::bail!("unknown outcome {other:?}"),
    };
    Ok(Op {
        client: v["process"].as_u64().unwrap_or(0) as usize,
        job: v["job"].as_str().unwrap_or_default().to_owned(),
        call,
        invoked: Duration::from_nanos(v["invoke_ns"].as_u64().unwrap_or(0)),
        answered: Duration::from_nanos(v["complete_ns"].as_u64().unwrap_or(0)),
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemesis::check;
    use crate::nemesis::history::DEMO_FRAME;

    /// A history written and read back is the same, and checks the same: here a stale read.
    #[test]
    fn a_history_read_back_is_the_one_written_and_checks_the_same() {
        let op = |client, call, invoked, answered, outcome| Op {
            client,
            job: "c0-0".into(),
            call,
            invoked: Duration::from_nanos(invoked),
            answered: Duration::from_nanos(answered),
            outcome,
        };
        let done = Observed {
            state: JobState::Completed,
            revision: 1,
            end: DEMO_FRAME.into(),
        };
        let written = HistoryFile {
            run: json!({ "seed": 7, "masters": 3 }),
            ops: vec![
                op(
                    0,
                    Call::Submit(Payload::Demo),
                    10,
                    20,
                    Outcome::Submitted {
                        created: true,
                        same_report: true,
                    },
                ),
                op(1, Call::Get, 30, 40, Outcome::Absent),
                op(1, Call::Get, 50, 60, Outcome::Found(done.clone())),
                op(
                    2,
                    Call::Submit(Payload::Unreadable),
                    61,
                    70,
                    Outcome::Unknown("no answer in 10s".into()),
                ),
                op(
                    2,
                    Call::Get,
                    71,
                    72,
                    Outcome::Failed("invalid argument".into()),
                ),
            ],
            events: vec![Event {
                at: Duration::from_nanos(25),
                what: "Kill master 2 for 900 ms".into(),
            }],
            ends: [("c0-0".to_owned(), Some(done)), ("c2-0".to_owned(), None)].into(),
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.jsonl");
        write(&path, &written).unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.run, written.run);
        assert_eq!(format!("{:?}", back.ops), format!("{:?}", written.ops));
        assert_eq!(
            format!("{:?}", back.events),
            format!("{:?}", written.events)
        );
        assert_eq!(back.ends, written.ends);
        let kinds: Vec<_> = check::check(&back.ops, &back.ends)
            .iter()
            .map(|a| a.kind)
            .collect();
        assert_eq!(kinds, vec!["stale read", "not linearizable"]);
        // A line that is none of the module's is refused with its number.
        std::fs::write(&path, "{\"run\": {}}\n{\"op\": \"delete\"}\n").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(
            error.ends_with("history.jsonl:2: not a call, an event or an end: {\"op\":\"delete\"}"),
            "{error}"
        );
    }
}

//! Building, encoding and decoding [`Command`]s (the data of Raft log entries).
//!
//! Each constructor stamps [`SCHEMA_VERSION`]; times are passed in (the leader's clock, read once
//! when the command is made), never read while applying.

use prost::Message;
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{Command, SCHEMA_VERSION};

/// Milliseconds since the Unix epoch, from this machine's clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn command(kind: pb::command::Kind) -> Command {
    Command {
        version: SCHEMA_VERSION,
        kind: Some(kind),
    }
}

/// A new job.
pub fn submit(
    job_id: &str,
    kind: v1::JobKind,
    spec: Vec<u8>,
    routing_key: &str,
    at_ms: u64,
) -> Command {
    command(pb::command::Kind::Submit(pb::Submit {
        job_id: job_id.to_owned(),
        kind: kind as i32,
        spec,
        routing_key: routing_key.to_owned(),
        at_ms,
        unreadable: String::new(),
    }))
}

/// A job whose report cannot be read at all: stored FAILED with `error` (one line), never
/// queued.
pub fn submit_unreadable(
    job_id: &str,
    kind: v1::JobKind,
    spec: Vec<u8>,
    error: &str,
    at_ms: u64,
) -> Command {
    let mut cmd = submit(job_id, kind, spec, "", at_ms);
    if let Some(pb::command::Kind::Submit(submit)) = &mut cmd.kind {
        submit.unreadable = error.to_owned();
    }
    cmd
}

/// Attempt `attempt` of a job runs on `worker_id`, which registered with the token named
/// `token` (only that token ends the attempt).
pub fn lease(job_id: &str, worker_id: &str, token: &str, attempt: u32, at_ms: u64) -> Command {
    command(pb::command::Kind::Lease(pb::Lease {
        job_id: job_id.to_owned(),
        worker_id: worker_id.to_owned(),
        attempt,
        at_ms,
        token: token.to_owned(),
    }))
}

/// Attempt `attempt` ended without a result; the job goes back to the queue.
pub fn requeue(job_id: &str, attempt: u32, reason: &str, at_ms: u64) -> Command {
    command(pb::command::Kind::Requeue(pb::Requeue {
        job_id: job_id.to_owned(),
        attempt,
        reason: reason.to_owned(),
        at_ms,
        unstarted: false,
    }))
}

/// Attempt `attempt` never started (its lease was handed back unstarted, or never reached its
/// worker); the job goes back to the queue and the attempt does not count against
/// `max_attempts` (`JobRecord.uncounted_attempts`).
pub fn requeue_unstarted(job_id: &str, attempt: u32, reason: &str, at_ms: u64) -> Command {
    command(pb::command::Kind::Requeue(pb::Requeue {
        job_id: job_id.to_owned(),
        attempt,
        reason: reason.to_owned(),
        at_ms,
        unstarted: true,
    }))
}

/// A job's result (compressed here, once, for the log and every index) and crash group.
pub fn complete(
    job_id: &str,
    attempt: u32,
    worker_id: &str,
    result_json: Vec<u8>,
    group: Option<v1::CrashGroupKey>,
    at_ms: u64,
) -> Command {
    complete_zstd(
        job_id,
        attempt,
        worker_id,
        super::compress(&result_json),
        group,
        at_ms,
    )
}

/// A job's result as the worker compressed it (checked with
/// [`check_result_zstd`](super::check_result_zstd)), and its crash group.
pub fn complete_zstd(
    job_id: &str,
    attempt: u32,
    worker_id: &str,
    result_zstd: Vec<u8>,
    group: Option<v1::CrashGroupKey>,
    at_ms: u64,
) -> Command {
    command(pb::command::Kind::Complete(pb::Complete {
        job_id: job_id.to_owned(),
        attempt,
        worker_id: worker_id.to_owned(),
        result_json: Vec::new(),
        at_ms,
        group,
        result_zstd,
        missing: Vec::new(),
        call_tree: Vec::new(),
        keep_spec: true,
        revision: 0,
        facets: None,
    }))
}

/// A job fails for good.
pub fn fail(job_id: &str, attempt: u32, error: &str, at_ms: u64) -> Command {
    command(pb::command::Kind::Fail(pb::Fail {
        job_id: job_id.to_owned(),
        attempt,
        error: error.to_owned(),
        at_ms,
        missing: Vec::new(),
        keep_spec: true,
        revision: 0,
    }))
}

/// `command` (a `Complete` or `Fail`) recording the files the job lacked: they make it
/// eligible for [`resymbolicate`] when they arrive. Other commands are returned as they are.
pub fn with_missing(mut command: Command, missing: Vec<v1::MissingFile>) -> Command {
    match &mut command.kind {
        Some(pb::command::Kind::Complete(c)) => c.missing = missing,
        Some(pb::command::Kind::Fail(c)) => c.missing = missing,
        _ => {}
    }
    command
}

/// `command` (a `Complete` or `Fail`) naming the job's `revision` whose attempt it ends: one
/// of another revision is stale when it applies (`index/apply.rs`). Other commands are
/// returned as they are.
pub fn with_revision(mut command: Command, revision: u32) -> Command {
    match &mut command.kind {
        Some(pb::command::Kind::Complete(c)) => c.revision = revision,
        Some(pb::command::Kind::Fail(c)) => c.revision = revision,
        _ => {}
    }
    command
}

/// `command` (a `Complete`) carrying the job's named call tree (hang reports), which its
/// crash group sums. Other commands are returned as they are.
pub fn with_call_tree(mut command: Command, call_tree: Vec<v1::CallTreeNode>) -> Command {
    if let Some(pb::command::Kind::Complete(c)) = &mut command.kind {
        c.call_tree = call_tree;
    }
    command
}

/// `command` (a `Complete`) carrying where the job's report came from, which its crash group
/// counts ([`super::facets`]). Other commands are returned as they are.
pub fn with_facets(mut command: Command, facets: Option<v1::ReportFacets>) -> Command {
    if let Some(pb::command::Kind::Complete(c)) = &mut command.kind {
        c.facets = facets;
    }
    command
}

/// A finished job that lacked a file which has now arrived is queued again (`reason`: one
/// line, e.g. which file arrived).
pub fn resymbolicate(job_id: &str, reason: &str, at_ms: u64) -> Command {
    command(pb::command::Kind::Resymbolicate(pb::Resymbolicate {
        job_id: job_id.to_owned(),
        reason: reason.to_owned(),
        at_ms,
    }))
}

/// Deletes jobs that finished before `finished_before_ms`, at most `max_jobs` of them (the
/// oldest first; 0: all).
pub fn purge(finished_before_ms: u64, at_ms: u64, max_jobs: u64) -> Command {
    command(pb::command::Kind::Purge(pb::Purge {
        finished_before_ms,
        at_ms,
        max_jobs,
    }))
}

/// Members of the group the leader saw take part ([`super::members`]).
pub fn members_seen(member_ids: Vec<u64>) -> Command {
    command(pb::command::Kind::MembersSeen(pb::MembersSeen {
        member_ids,
    }))
}

/// The bytes of a log entry.
pub fn encode(command: &Command) -> Vec<u8> {
    command.encode_to_vec()
}

/// A log entry's command. Fields unknown to this version are skipped (prost), fields missing
/// from an older writer take their defaults.
pub fn decode(bytes: &[u8]) -> Result<Command, prost::DecodeError> {
    Command::decode(bytes)
}

//! The gRPC services: thin adapters from the API to the [`Scheduler`] and the index.
//!
//! Errors become `tonic::Status` here and only here: invalid requests are `INVALID_ARGUMENT`,
//! unknown ids `NOT_FOUND`, an unwritable index `UNAVAILABLE`. A call that needs the leader
//! (submits, everything a worker calls) on a master that is not the leader is `UNAVAILABLE` with
//! the leader's address in the `symcluster-leader` response metadata (empty while no leader is
//! elected): the client library follows it. A job that fails is not a transport error: it is a
//! job in state FAILED with its error.

mod admin;
mod ingest;
pub mod members;
mod page_token;
mod submit;
mod submit_stream;
mod upload_ticket;
pub mod uploads;
mod watch;
mod worker_api;

pub use admin::AdminService;
pub use ingest::IngestService;
pub use uploads::{UploadBucket, UploadsService};
pub use worker_api::WorkerApiService;

use symcluster_proto::v1;
use tonic::Status;

use crate::index::{IndexError, JobView};
use crate::raft::ProposeError;
use crate::scheduler::{ScheduleError, Scheduler};

/// Response metadata naming the leader's `http://host:port`.
pub const LEADER_METADATA: &str = "symcluster-leader";

/// `UNAVAILABLE` naming the leader (metadata and message).
pub fn not_leader(leader: Option<String>) -> Status {
    let mut status = Status::unavailable(
        ProposeError::NotLeader {
            leader: leader.clone(),
        }
        .to_string(),
    );
    if let Ok(value) = leader.unwrap_or_default().parse() {
        status.metadata_mut().insert(LEADER_METADATA, value);
    }
    status
}

/// `Ok` on the leader, the redirect otherwise.
pub fn require_leader(scheduler: &Scheduler) -> Result<(), Status> {
    let raft = scheduler.raft();
    if raft.is_leader() {
        Ok(())
    } else {
        Err(not_leader(raft.leader_address()))
    }
}

/// `Ok` once this master may answer a read from its index as the group's state
/// ([`crate::raft::RaftHandle::read_barrier`]: a quorum confirmed it still leads, and it applied
/// everything committed before the call); the redirect when it does not lead or stops leading
/// first. A leader cut off from its followers answers UNAVAILABLE rather than a stale read.
/// UNAVAILABLE when no quorum confirmed it within [`READ_CONFIRM_TIMEOUT`].
pub async fn require_leader_read(scheduler: &Scheduler) -> Result<(), Status> {
    require_leader(scheduler)?;
    match tokio::time::timeout(READ_CONFIRM_TIMEOUT, scheduler.raft().read_barrier()).await {
        Ok(confirmed) => confirmed.map_err(propose_status),
        Err(_) => Err(Status::unavailable(format!(
            "no quorum of masters confirmed this leader within {} ms: retry, or ask another \
             master",
            READ_CONFIRM_TIMEOUT.as_millis()
        ))),
    }
}

/// How long a read waits for a quorum to confirm the leader ([`require_leader_read`]): longer
/// than the two election timeouts within which a leader that cannot reach a quorum steps down
/// (its reads then fail with the redirect), so that it is reached only when something else
/// went wrong.
pub const READ_CONFIRM_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn index_status(e: IndexError) -> Status {
    if let IndexError::Decompress { .. } = e {
        // One job's stored result is unreadable: not a reason to try another master.
        tracing::error!(error = %e, "stored result does not decompress");
        return Status::data_loss(e.to_string());
    }
    tracing::error!(error = %e, "index store failure");
    Status::unavailable(e.to_string())
}

/// Response metadata of a RESOURCE_EXHAUSTED answer: how long to wait before trying again, ms
/// (gRPC's retry pushback, gRFC A6).
pub const RETRY_PUSHBACK_METADATA: &str = symcluster_client::retry::PUSHBACK_METADATA;

/// RESOURCE_EXHAUSTED with `message`, telling the caller to retry after `retry_after_ms`
/// ([`RETRY_PUSHBACK_METADATA`]).
pub fn exhausted(message: String, retry_after_ms: u64) -> Status {
    let mut status = Status::resource_exhausted(message);
    status.metadata_mut().insert(
        RETRY_PUSHBACK_METADATA,
        retry_after_ms
            .to_string()
            .parse()
            .expect("digits are ASCII"),
    );
    status
}

/// The status of a proposal that was not applied.
pub fn propose_status(e: ProposeError) -> Status {
    match e {
        ProposeError::NotLeader { leader } => not_leader(leader),
        e @ ProposeError::Storage(_) => Status::unavailable(e.to_string()),
        e @ ProposeError::Membership(_) => Status::failed_precondition(e.to_string()),
        ProposeError::Overloaded { retry_after_ms } => exhausted(
            ProposeError::Overloaded { retry_after_ms }.to_string(),
            retry_after_ms,
        ),
    }
}

fn schedule_status(e: ScheduleError) -> Status {
    match e {
        ScheduleError::Propose(e) => propose_status(e),
        ScheduleError::Index(e) => index_status(e),
    }
}

/// The API view of a stored job (`result_json` or `result_zstd` filled when the view holds it):
/// its project and the client's id apart, as clients name them.
pub fn job_to_proto(job: JobView) -> v1::Job {
    let r = job.record;
    let (project, job_id) = crate::index::keys::split(&r.job_id);
    v1::Job {
        project: project.to_owned(),
        job_id: job_id.to_owned(),
        kind: r.kind,
        state: r.state,
        attempts: r.attempts,
        submitted_at_ms: r.submitted_at_ms,
        finished_at_ms: r.finished_at_ms,
        result_json: job.result_json.unwrap_or_default(),
        result_zstd: job.result_zstd.unwrap_or_default(),
        error: r.error,
        worker_id: r.worker_id,
        fingerprint: r.fingerprint,
        revision: r.revision.max(1),
        resymbolicated_at_ms: r.resymbolicated_at_ms,
        missing: r.missing,
        spec: None,
    }
}

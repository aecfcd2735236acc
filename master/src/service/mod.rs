//! The gRPC services: thin adapters from the API to the [`Scheduler`].
//!
//! Errors become `tonic::Status` here and only here: invalid requests are `INVALID_ARGUMENT`,
//! unknown ids `NOT_FOUND`, an unwritable index `UNAVAILABLE`. A job that fails is not a
//! transport error: it is a job in state FAILED with its error.

mod admin;
mod ingest;
mod worker_api;

pub use admin::AdminService;
pub use ingest::IngestService;
pub use worker_api::WorkerApiService;

use symcluster_proto::v1;
use tonic::{Request, Status};

use crate::state::{JobKind, JobRecord, JobState};
use crate::store::StoreError;

/// Checks `authorization: Bearer <token>` on every call.
#[derive(Clone)]
pub struct BearerAuth {
    expected: String,
}

impl BearerAuth {
    /// Accepts requests carrying `token`.
    pub fn new(token: &str) -> Self {
        BearerAuth {
            expected: format!("Bearer {token}"),
        }
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        match request.metadata().get("authorization").map(|v| v.to_str()) {
            Some(Ok(value)) if constant_time_eq(value.as_bytes(), self.expected.as_bytes()) => {
                Ok(request)
            }
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "missing `authorization: Bearer <token>` metadata",
            )),
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn store_status(e: StoreError) -> Status {
    tracing::error!(error = %e, "index store failure");
    Status::unavailable(e.to_string())
}

/// The API view of a stored job (`with_result`: include `result_json`).
pub fn job_to_proto(job: &JobRecord, with_result: bool) -> v1::Job {
    v1::Job {
        job_id: job.job_id.clone(),
        kind: match job.kind {
            JobKind::Native => v1::JobKind::Native,
            JobKind::Js => v1::JobKind::Js,
        } as i32,
        state: state_to_proto(job.state) as i32,
        attempts: job.attempts,
        submitted_at_ms: job.submitted_at_ms,
        finished_at_ms: job.finished_at_ms,
        result_json: match (&job.result_json, with_result) {
            (Some(r), true) => r.as_ref().clone(),
            _ => Vec::new(),
        },
        error: job.error.clone().unwrap_or_default(),
        worker_id: job.worker_id.clone().unwrap_or_default(),
        fingerprint: job.fingerprint.clone().unwrap_or_default(),
    }
}

fn state_to_proto(state: JobState) -> v1::JobState {
    match state {
        JobState::Queued => v1::JobState::Queued,
        JobState::Running => v1::JobState::Running,
        JobState::Completed => v1::JobState::Completed,
        JobState::Failed => v1::JobState::Failed,
    }
}

fn state_from_proto(state: i32) -> Option<JobState> {
    match v1::JobState::try_from(state).ok()? {
        v1::JobState::Unspecified => None,
        v1::JobState::Queued => Some(JobState::Queued),
        v1::JobState::Running => Some(JobState::Running),
        v1::JobState::Completed => Some(JobState::Completed),
        v1::JobState::Failed => Some(JobState::Failed),
    }
}

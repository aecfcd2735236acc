//! `symcluster.v1.Ingest`: submit, read, watch and list jobs; list crash groups.

use std::pin::Pin;
use std::sync::Arc;

use prost::Message;
use symcluster_proto::v1::{self, ingest_server::Ingest};
use tokio::sync::broadcast::error::RecvError;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use super::{job_to_proto, state_from_proto, store_status};
use crate::routing::{Checked, check};
use crate::scheduler::{Scheduler, SubmitError};

/// The ingestion service.
pub struct IngestService {
    scheduler: Arc<Scheduler>,
}

impl IngestService {
    /// Serves `scheduler`.
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        IngestService { scheduler }
    }
}

type JobStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::Job, Status>> + Send>>;

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn submit(
        &self,
        request: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        let spec = request
            .into_inner()
            .job
            .ok_or_else(|| Status::invalid_argument("missing `job`"))?;
        let checked = check(&spec).map_err(Status::invalid_argument)?;
        let scheduler = self.scheduler.clone();
        let encoded = spec.encode_to_vec();
        let job_id = spec.job_id.clone();
        // The log write is blocking I/O.
        let outcome = tokio::task::spawn_blocking(move || match checked {
            Checked::Runnable { kind, routing_key } => {
                scheduler.submit(job_id, kind, encoded, routing_key)
            }
            Checked::Unreadable { kind, error } => {
                scheduler.submit_failed(job_id, kind, encoded, error)
            }
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?;
        match outcome {
            Ok((job, created)) => {
                crate::metrics::JOBS_SUBMITTED.inc_by(u64::from(created));
                Ok(Response::new(v1::SubmitResponse {
                    job: Some(job_to_proto(&job, true)),
                    created,
                }))
            }
            Err(SubmitError::Invalid(e)) => Err(Status::invalid_argument(e)),
            Err(SubmitError::Store(e)) => Err(store_status(e)),
        }
    }

    async fn get_job(
        &self,
        request: Request<v1::GetJobRequest>,
    ) -> Result<Response<v1::Job>, Status> {
        let id = request.into_inner().job_id;
        match self.scheduler.state().job(&id) {
            Some(job) => Ok(Response::new(job_to_proto(&job, true))),
            None => Err(Status::not_found(format!("no job {id:?}"))),
        }
    }

    type WatchJobStream = JobStream;

    async fn watch_job(
        &self,
        request: Request<v1::GetJobRequest>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let id = request.into_inner().job_id;
        // Subscribe before reading, so no change between the two is missed.
        let mut changes = self.scheduler.subscribe();
        let state = self.scheduler.state().clone();
        let first = state
            .job(&id)
            .ok_or_else(|| Status::not_found(format!("no job {id:?}")))?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut last = first.state;
            if tx.send(Ok(job_to_proto(&first, true))).await.is_err() || last.is_terminal() {
                return;
            }
            loop {
                match changes.recv().await {
                    Ok(changed) if changed != id => continue,
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                }
                let Some(job) = state.job(&id) else { return };
                if job.state == last && !job.state.is_terminal() {
                    continue;
                }
                last = job.state;
                if tx.send(Ok(job_to_proto(&job, true))).await.is_err() || last.is_terminal() {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn list_jobs(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let r = request.into_inner();
        let limit = match r.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let jobs = self
            .scheduler
            .state()
            .list_jobs(state_from_proto(r.state), limit)
            .iter()
            .map(|j| job_to_proto(j, false))
            .collect();
        Ok(Response::new(v1::ListJobsResponse { jobs }))
    }

    async fn list_groups(
        &self,
        request: Request<v1::ListGroupsRequest>,
    ) -> Result<Response<v1::ListGroupsResponse>, Status> {
        let limit = match request.into_inner().limit {
            0 => 20,
            n => n.min(1000) as usize,
        };
        let groups = self
            .scheduler
            .state()
            .groups(limit)
            .into_iter()
            .map(|g| v1::CrashGroup {
                fingerprint: g.fingerprint,
                title: g.title,
                count: g.count,
                first_seen_ms: g.first_seen_ms,
                last_seen_ms: g.last_seen_ms,
                key_stack: g.key_stack,
                last_job_id: g.last_job_id,
            })
            .collect();
        Ok(Response::new(v1::ListGroupsResponse { groups }))
    }
}

//! `symcluster.v1.WorkerApi`: register, lease stream, complete, fail, heartbeat, drain,
//! deregister. Leader only: workers follow the leader.

use std::pin::Pin;
use std::sync::Arc;

use symcluster_proto::v1::{self, worker_api_server::WorkerApi};
use symcluster_telemetry::trace_context;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::Instrument as _;

use super::{require_leader, schedule_status};
use crate::auth::{self, Caller, Role};
use crate::scheduler::{Completion, Scheduler};

/// The worker-facing service.
#[derive(Clone)]
pub struct WorkerApiService {
    scheduler: Arc<Scheduler>,
}

impl WorkerApiService {
    /// Serves `scheduler`.
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        WorkerApiService { scheduler }
    }
}

type LeaseStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::Lease, Status>> + Send>>;

fn worker_id(id: &str) -> Result<&str, Status> {
    if id.is_empty() || id.len() > 128 {
        Err(Status::invalid_argument("worker_id must be 1 to 128 bytes"))
    } else {
        Ok(id)
    }
}

/// A plain result must be one JSON object, at most the result limit: INVALID_ARGUMENT otherwise.
fn check_result_json(json: &[u8]) -> Result<(), Status> {
    if json.len() > symcluster_proto::result::MAX_RESULT_BYTES {
        return Err(Status::invalid_argument(format!(
            "the result is {} bytes; at most {} are accepted",
            json.len(),
            symcluster_proto::result::MAX_RESULT_BYTES
        )));
    }
    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(json)
        .map(|_| ())
        .map_err(|e| Status::invalid_argument(format!("result_json is not a JSON object: {e}")))
}

impl WorkerApiService {
    /// The caller may act as worker `id`: an admin token, or the token that registered it here.
    /// A worker not registered on this master (e.g. just after a failover, before it registers
    /// again) is checked by its lease alone: a completion or failure still needs the job's
    /// current lease and attempt.
    fn act_as<T>(&self, request: &Request<T>, id: &str) -> Result<(), Status> {
        let caller = auth::require(request, auth::WORKER_ROLES, "the WorkerApi service")?;
        self.caller_acts_as(&caller, id)
    }

    /// [`WorkerApiService::act_as`] for a caller already admitted.
    fn caller_acts_as(&self, caller: &Caller, id: &str) -> Result<(), Status> {
        match self.scheduler.worker_owner(id) {
            Some(owner) if owner != caller.name && caller.role != Role::Admin => {
                Err(Status::permission_denied(format!(
                    "worker {id:?} was registered by token {owner:?}, not {:?}",
                    caller.name
                )))
            }
            _ => Ok(()),
        }
    }

    /// Whether `caller` may end attempt `attempt` of `job_id` as `worker_id`, when that is the
    /// current lease: the lease records the name of the token its worker registered with, in
    /// the replicated index, so that after a failover (when the new leader has not seen the
    /// worker register yet) no other worker token ends it. PERMISSION_DENIED otherwise; admin
    /// tokens may. A request naming another lease is left to the scheduler (not accepted).
    fn caller_holds(
        &self,
        caller: &Caller,
        job_id: &str,
        worker_id: &str,
        attempt: u32,
    ) -> Result<(), Status> {
        match self.scheduler.lease_token(job_id, worker_id, attempt) {
            Some(token) if *token != *caller.name && caller.role != Role::Admin => {
                Err(Status::permission_denied(format!(
                    "job {job_id:?} is leased to token {token:?}, not {:?}",
                    caller.name
                )))
            }
            _ => Ok(()),
        }
    }

    async fn complete_job_in_span(
        &self,
        request: Request<v1::CompleteJobRequest>,
    ) -> Result<Response<v1::CompleteJobResponse>, Status> {
        require_leader(&self.scheduler)?;
        let caller = auth::require(&request, auth::WORKER_ROLES, "the WorkerApi service")?;
        let accepted = self.complete(&caller, request.into_inner()).await?;
        Ok(Response::new(v1::CompleteJobResponse { accepted }))
    }

    /// Checks and commits one completion by `caller` (`CompleteJob`, or one outcome of
    /// `ReportOutcomes`); whether it was accepted.
    async fn complete(&self, caller: &Caller, r: v1::CompleteJobRequest) -> Result<bool, Status> {
        self.caller_acts_as(caller, &r.worker_id)?;
        self.caller_holds(caller, &r.job_id, &r.worker_id, r.attempt)?;
        worker_id(&r.worker_id)?;
        if r.call_tree.len() > MAX_CALL_TREE_NODES {
            return Err(Status::invalid_argument(format!(
                "call_tree has {} nodes; at most {MAX_CALL_TREE_NODES}",
                r.call_tree.len()
            )));
        }
        // Workers compress their results; an older worker's JSON is checked and compressed
        // here. A compressed result is checked by its frame header only (decompressing and
        // parsing every result would cost the leader ~0.15 ms per job).
        let result_zstd = if r.result_zstd.is_empty() {
            check_result_json(&r.result_json)?;
            crate::index::compress(&r.result_json)
        } else {
            crate::index::check_result_zstd(&r.result_zstd).map_err(Status::invalid_argument)?;
            r.result_zstd
        };
        let accepted = self
            .scheduler
            .complete(
                &r.worker_id,
                &r.job_id,
                r.attempt,
                Completion {
                    result_zstd,
                    group: r.group,
                    missing: r.missing,
                    call_tree: r.call_tree,
                    // A worker from before facets, or a report that names none: the job
                    // still counts in its group's days.
                    facets: Some(crate::index::facets::bounded(r.facets.unwrap_or_default())),
                },
            )
            .await
            .map_err(schedule_status)?;
        if accepted {
            crate::metrics::JOBS_COMPLETED.inc();
        }
        tracing::debug!(job_id = %r.job_id, attempt = r.attempt, worker_id = %r.worker_id, accepted, "job completed");
        Ok(accepted)
    }

    async fn fail_job_in_span(
        &self,
        request: Request<v1::FailJobRequest>,
    ) -> Result<Response<v1::FailJobResponse>, Status> {
        require_leader(&self.scheduler)?;
        let caller = auth::require(&request, auth::WORKER_ROLES, "the WorkerApi service")?;
        let accepted = self.fail(&caller, request.into_inner()).await?;
        Ok(Response::new(v1::FailJobResponse { accepted }))
    }

    /// Checks and commits one failed attempt reported by `caller` (`FailJob`, or one outcome
    /// of `ReportOutcomes`); whether it was accepted.
    async fn fail(&self, caller: &Caller, r: v1::FailJobRequest) -> Result<bool, Status> {
        self.caller_acts_as(caller, &r.worker_id)?;
        self.caller_holds(caller, &r.job_id, &r.worker_id, r.attempt)?;
        worker_id(&r.worker_id)?;
        let accepted = self
            .scheduler
            .fail(
                &r.worker_id,
                &r.job_id,
                r.attempt,
                &r.error,
                r.retryable,
                r.missing,
            )
            .await
            .map_err(schedule_status)?;
        tracing::debug!(job_id = %r.job_id, attempt = r.attempt, worker_id = %r.worker_id,
            retryable = r.retryable, error = %r.error, accepted, "job failed");
        Ok(accepted)
    }

    /// One outcome of a `ReportOutcomes` call, in the span the unary call would have
    /// (`complete_job` or `fail_job`, a child of the worker's run).
    async fn outcome(&self, caller: &Caller, request: v1::OutcomeRequest) -> Result<bool, Status> {
        // Checked per outcome, as each unary call is: a master that stopped leading since the
        // call opened ends it with the leader's address.
        require_leader(&self.scheduler)?;
        match request.outcome {
            Some(v1::outcome_request::Outcome::Complete(r)) => {
                let span = complete_span(&r, &request.traceparent);
                self.complete(caller, r).instrument(span).await
            }
            Some(v1::outcome_request::Outcome::Fail(r)) => {
                let span = fail_span(&r, &request.traceparent);
                self.fail(caller, r).instrument(span).await
            }
            None => Err(Status::invalid_argument(
                "an outcome needs `complete` or `fail`",
            )),
        }
    }
}

/// The span of one completion (`CompleteJob` or an outcome of `ReportOutcomes`), a child of the
/// worker's run when `traceparent` (W3C) names it.
fn complete_span(r: &v1::CompleteJobRequest, traceparent: &str) -> tracing::Span {
    let span = tracing::info_span!("complete_job", job_id = %r.job_id, attempt = r.attempt,
        worker_id = %r.worker_id);
    trace_context::set_parent(&span, traceparent);
    span
}

/// The span of one failed attempt (`FailJob` or an outcome of `ReportOutcomes`): see
/// [`complete_span`].
fn fail_span(r: &v1::FailJobRequest, traceparent: &str) -> tracing::Span {
    let span = tracing::info_span!("fail_job", job_id = %r.job_id, attempt = r.attempt,
        worker_id = %r.worker_id);
    trace_context::set_parent(&span, traceparent);
    span
}

/// Outcomes of one `ReportOutcomes` call being committed at once; past it, the call's requests
/// wait (HTTP/2 flow control holds the worker back). A worker has at most its slots plus its
/// prefetch (at most 4 per slot) outstanding.
const MAX_OUTCOMES_IN_FLIGHT: usize = 256;

type OutcomeStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::OutcomeResponse, Status>> + Send>>;

impl WorkerApiService {
    /// Serves one `ReportOutcomes` call: a task per outcome (each waits for its commit), its
    /// answer sent when it is done. A failover status (this master no longer leads) ends the
    /// call with that status; any other error is that outcome's answer.
    fn report_outcomes(
        self,
        caller: Caller,
        mut requests: tonic::Streaming<v1::OutcomeRequest>,
    ) -> OutcomeStream {
        let (tx, rx) = tokio::sync::mpsc::channel(MAX_OUTCOMES_IN_FLIGHT);
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_OUTCOMES_IN_FLIGHT));
        tokio::spawn(async move {
            loop {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let request = tokio::select! {
                    request = requests.message() => request,
                    () = tx.closed() => return,
                };
                let request = match request {
                    Ok(Some(request)) => request,
                    Ok(None) => return,
                    Err(status) => {
                        tracing::debug!(error = %status, "outcome stream ended by the worker");
                        return;
                    }
                };
                let (service, caller, tx) = (self.clone(), caller.clone(), tx.clone());
                tokio::spawn(async move {
                    let id = request.id;
                    // In a task of its own, so that a panic answers INTERNAL (as a unary call's
                    // would) instead of leaving the worker waiting for this answer.
                    let outcome =
                        tokio::spawn(async move { service.outcome(&caller, request).await })
                            .await
                            .unwrap_or_else(|e| {
                                Err(Status::internal(format!("the outcome's task failed: {e}")))
                            });
                    let answer = match outcome {
                        Ok(accepted) => Ok(v1::OutcomeResponse {
                            id,
                            accepted,
                            code: 0,
                            message: String::new(),
                        }),
                        // This master no longer leads (or cannot commit): the call ends.
                        Err(status) if status.code() == tonic::Code::Unavailable => Err(status),
                        Err(status) => Ok(v1::OutcomeResponse {
                            id,
                            accepted: false,
                            code: status.code() as i32,
                            message: status.message().to_owned(),
                        }),
                    };
                    let _ = tx.send(answer).await;
                    drop(permit);
                });
            }
        });
        Box::pin(ReceiverStream::new(rx))
    }
}

/// Most nodes a completion's call tree may have.
pub use symcluster_proto::result::MAX_CALL_TREE_NODES;

#[tonic::async_trait]
impl WorkerApi for WorkerApiService {
    async fn register(
        &self,
        request: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        require_leader(&self.scheduler)?;
        let caller = auth::require(&request, auth::WORKER_ROLES, "the WorkerApi service")?;
        let r = request.into_inner();
        let id = worker_id(&r.worker_id)?;
        if r.slots == 0 {
            return Err(Status::invalid_argument("slots must be at least 1"));
        }
        self.scheduler
            .register(
                id,
                r.slots,
                r.prefetch,
                caller.name.clone(),
                caller.role == Role::Admin,
            )
            .map_err(|owner| {
                Status::permission_denied(format!(
                    "worker {id:?} is registered by token {owner:?}, not {:?}",
                    caller.name
                ))
            })?;
        tracing::info!(
            worker = id,
            slots = r.slots,
            prefetch = r.prefetch,
            "worker registered"
        );
        let config = self.scheduler.config();
        Ok(Response::new(v1::RegisterResponse {
            lease_ms: config.lease_ms,
            heartbeat_ms: config.heartbeat_ms,
        }))
    }

    type LeaseJobsStream = LeaseStream;

    async fn lease_jobs(
        &self,
        request: Request<v1::LeaseJobsRequest>,
    ) -> Result<Response<Self::LeaseJobsStream>, Status> {
        require_leader(&self.scheduler)?;
        self.act_as(&request, &request.get_ref().worker_id)?;
        let r = request.into_inner();
        let id = worker_id(&r.worker_id)?;
        let rx = self
            .scheduler
            .open_lease_stream(id)
            .ok_or_else(|| Status::failed_precondition("unknown worker: register first"))?;
        // The stored spec is decoded here, on this stream's task.
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|lease| Ok(lease.into_lease())),
        )))
    }

    async fn complete_job(
        &self,
        request: Request<v1::CompleteJobRequest>,
    ) -> Result<Response<v1::CompleteJobResponse>, Status> {
        let r = request.get_ref();
        let span = complete_span(r, trace_context::from_metadata(request.metadata()));
        self.complete_job_in_span(request).instrument(span).await
    }

    async fn fail_job(
        &self,
        request: Request<v1::FailJobRequest>,
    ) -> Result<Response<v1::FailJobResponse>, Status> {
        let r = request.get_ref();
        let span = fail_span(r, trace_context::from_metadata(request.metadata()));
        self.fail_job_in_span(request).instrument(span).await
    }

    type ReportOutcomesStream = OutcomeStream;

    async fn report_outcomes(
        &self,
        request: Request<tonic::Streaming<v1::OutcomeRequest>>,
    ) -> Result<Response<Self::ReportOutcomesStream>, Status> {
        require_leader(&self.scheduler)?;
        let caller = auth::require(&request, auth::WORKER_ROLES, "the WorkerApi service")?;
        Ok(Response::new(
            self.clone().report_outcomes(caller, request.into_inner()),
        ))
    }

    async fn heartbeat(
        &self,
        request: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        require_leader(&self.scheduler)?;
        self.act_as(&request, &request.get_ref().worker_id)?;
        let r = request.into_inner();
        let known = self.scheduler.heartbeat(
            worker_id(&r.worker_id)?,
            &r.running_job_ids,
            r.running,
            r.cache,
        );
        Ok(Response::new(v1::HeartbeatResponse { known }))
    }

    async fn drain(
        &self,
        request: Request<v1::DrainRequest>,
    ) -> Result<Response<v1::DrainResponse>, Status> {
        require_leader(&self.scheduler)?;
        self.act_as(&request, &request.get_ref().worker_id)?;
        let id = worker_id(&request.get_ref().worker_id)?;
        let leased = self
            .scheduler
            .drain(id)
            .ok_or_else(|| Status::failed_precondition("unknown worker: register first"))?;
        tracing::info!(worker = id, leased, "worker draining");
        Ok(Response::new(v1::DrainResponse { leased }))
    }

    async fn deregister(
        &self,
        request: Request<v1::DeregisterRequest>,
    ) -> Result<Response<v1::DeregisterResponse>, Status> {
        require_leader(&self.scheduler)?;
        self.act_as(&request, &request.get_ref().worker_id)?;
        let r = request.into_inner();
        let id = worker_id(&r.worker_id)?;
        // Only a registered worker (checked against the token that registered it) is ended:
        // right after a failover no worker is known, and another token must not hand back a
        // worker's jobs. The worker registers again and retries.
        if self.scheduler.worker_owner(id).is_none() {
            return Err(Status::failed_precondition(
                "unknown worker: register first",
            ));
        }
        let reason = if r.reason.is_empty() {
            format!("worker {id} left")
        } else {
            format!(
                "worker {id} left: {}",
                r.reason.chars().take(200).collect::<String>()
            )
        };
        let unstarted: std::collections::HashSet<String> = r.unstarted.iter().cloned().collect();
        let requeued = self
            .scheduler
            .deregister(id, &reason, &unstarted)
            .await
            .map_err(schedule_status)?;
        tracing::info!(worker = id, requeued, "worker deregistered");
        Ok(Response::new(v1::DeregisterResponse { requeued }))
    }
}

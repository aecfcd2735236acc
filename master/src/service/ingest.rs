//! `symcluster.v1.Ingest`: submit, read, watch and list jobs; list crash groups.
//!
//! Submits need the leader. Reads are served from this master's copy of the index on the
//! leader; a follower redirects them too, so that a client always reads what it wrote.

use std::pin::Pin;
use std::sync::Arc;

use prost::Message;
use symcluster_proto::v1::{self, ingest_server::Ingest};
use symcluster_telemetry::trace_context;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument as _;

use super::{index_status, job_to_proto, require_leader, schedule_status, submit_stream};
use crate::auth;
use crate::index::{JobState, JobView, ResultForm, is_terminal, keys};
use crate::scheduler::Scheduler;
use symcluster_admission::{Checked, check};

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

/// Most file keys one `FilesUploaded` call may name (`symctl upload` sends one call per
/// upload; a big dSYM folder has a few thousand slices).
pub const MAX_UPLOADED_KEYS: usize = 100_000;

type JobStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::Job, Status>> + Send>>;

impl IngestService {
    /// The spec job `key` was submitted with, named as its client names it (`job`'s id and
    /// project); `None` when the index has none (a report that could not be read at all is
    /// stored as its error only).
    fn stored_spec(&self, key: &str, job: &v1::Job) -> Result<Option<v1::JobSpec>, Status> {
        let Some(bytes) = self.scheduler.index().spec(key).map_err(index_status)? else {
            return Ok(None);
        };
        let mut spec = v1::JobSpec::decode(bytes.as_slice()).map_err(|e| {
            Status::data_loss(format!("the stored spec of {key:?} is corrupt: {e}"))
        })?;
        spec.job_id.clone_from(&job.job_id);
        spec.project.clone_from(&job.project);
        Ok(Some(spec))
    }
}

#[tonic::async_trait]
impl Ingest for IngestService {
    async fn submit(
        &self,
        request: Request<v1::SubmitRequest>,
    ) -> Result<Response<v1::SubmitResponse>, Status> {
        require_leader(&self.scheduler)?;
        let caller = caller(&request)?;
        let span = submit_span();
        trace_context::set_parent(&span, trace_context::from_metadata(request.metadata()));
        let spec = request
            .into_inner()
            .job
            .ok_or_else(|| Status::invalid_argument("missing `job`"))?;
        submit_spec(&self.scheduler, spec, &caller)
            .instrument(span)
            .await
            .map(Response::new)
    }

    async fn get_job(
        &self,
        request: Request<v1::GetJobRequest>,
    ) -> Result<Response<v1::Job>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "reading jobs")?;
        require_leader(&self.scheduler)?;
        let request = request.into_inner();
        let id = request.job_id;
        let key = keys::job_key(&caller.project_for(&request.project)?, &id);
        match self
            .scheduler
            .index()
            .job_with(&key, result_form(request.result_zstd))
            .map_err(index_status)?
        {
            Some(job) => {
                let mut job = job_to_proto(job);
                if request.spec {
                    job.spec = self.stored_spec(&key, &job)?;
                }
                Ok(Response::new(job))
            }
            None => Err(Status::not_found(format!("no job {id:?}"))),
        }
    }

    type WatchJobStream = JobStream;

    async fn watch_job(
        &self,
        request: Request<v1::GetJobRequest>,
    ) -> Result<Response<Self::WatchJobStream>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "reading jobs")?;
        require_leader(&self.scheduler)?;
        let request = request.into_inner();
        let form = result_form(request.result_zstd);
        let id = keys::job_key(&caller.project_for(&request.project)?, &request.job_id);
        let scheduler = self.scheduler.clone();
        if !scheduler.index().contains(&id).map_err(index_status)? {
            return Err(Status::not_found(format!("no job {:?}", request.job_id)));
        }
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let change = tokio::select! {
                    change = next_change(&scheduler, &id, last, Until::AnyChange, form) => change,
                    _ = tx.closed() => return,
                };
                let job = match change {
                    Ok(Some(job)) => job,
                    Ok(None) => return,
                    Err(status) => {
                        let _ = tx.send(Err(status)).await;
                        return;
                    }
                };
                let state = job.state();
                last = Some(state);
                if tx.send(Ok(job_to_proto(job))).await.is_err() || is_terminal(state) {
                    return;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    type SubmitStreamStream = submit_stream::ResponseStream;

    async fn submit_stream(
        &self,
        request: Request<Streaming<v1::SubmitStreamRequest>>,
    ) -> Result<Response<Self::SubmitStreamStream>, Status> {
        require_leader(&self.scheduler)?;
        let caller = caller(&request)?;
        Ok(Response::new(submit_stream::serve(
            self.scheduler.clone(),
            request.into_inner(),
            caller,
        )))
    }

    async fn list_jobs(
        &self,
        request: Request<v1::ListJobsRequest>,
    ) -> Result<Response<v1::ListJobsResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "listing jobs")?;
        require_leader(&self.scheduler)?;
        let r = request.into_inner();
        let sees = caller.listing(&r.project)?;
        let limit = match r.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let state = match v1::JobState::try_from(r.state).unwrap_or_default() {
            v1::JobState::Unspecified => None,
            s => Some(s),
        };
        let jobs = self
            .scheduler
            .index()
            .list_jobs(state, limit, sees)
            .map_err(index_status)?
            .into_iter()
            .map(|record| {
                job_to_proto(crate::index::JobView {
                    record,
                    result_json: None,
                    result_zstd: None,
                })
            })
            .collect();
        Ok(Response::new(v1::ListJobsResponse { jobs }))
    }

    async fn list_groups(
        &self,
        request: Request<v1::ListGroupsRequest>,
    ) -> Result<Response<v1::ListGroupsResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "listing crash groups")?;
        require_leader(&self.scheduler)?;
        let r = request.into_inner();
        let limit = match r.limit {
            0 => 20,
            n => n.min(1000) as usize,
        };
        let sees = caller.listing(&r.project)?;
        let kind = match r.kind.as_str() {
            "" => None,
            kind @ ("crash" | "hang" | "jank" | "cpu" | "oom") => Some(kind),
            other => {
                return Err(Status::invalid_argument(format!(
                    "kind {other:?} is not one of crash, hang, jank, cpu, oom"
                )));
            }
        };
        let mut groups = self
            .scheduler
            .index()
            .groups(limit, kind, sees)
            .map_err(index_status)?;
        for group in &mut groups {
            // Groups made before kinds were recorded say what they are.
            group.kind = crate::index::group_kind(group).to_owned();
        }
        if !r.call_trees {
            for group in &mut groups {
                group.call_tree.clear();
            }
        }
        Ok(Response::new(v1::ListGroupsResponse { groups }))
    }

    async fn list_missing(
        &self,
        request: Request<v1::ListMissingRequest>,
    ) -> Result<Response<v1::ListMissingResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "listing missing files")?;
        require_leader(&self.scheduler)?;
        let r = request.into_inner();
        let limit = match r.limit {
            0 => 100,
            n => n.min(1000) as usize,
        };
        let sees = caller.listing(&r.project)?;
        let missing = self
            .scheduler
            .index()
            .missing_files(limit, sees)
            .map_err(index_status)?;
        Ok(Response::new(v1::ListMissingResponse { missing }))
    }

    async fn files_uploaded(
        &self,
        request: Request<v1::FilesUploadedRequest>,
    ) -> Result<Response<v1::FilesUploadedResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "announcing uploads")?;
        require_leader(&self.scheduler)?;
        let r = request.into_inner();
        if r.keys.len() > MAX_UPLOADED_KEYS {
            return Err(Status::invalid_argument(format!(
                "{} keys in one call; at most {MAX_UPLOADED_KEYS}",
                r.keys.len()
            )));
        }
        let project = if r.shared {
            // Shared files concern every project's jobs: only a token of every project.
            if caller.projects.is_some() {
                return Err(Status::permission_denied(format!(
                    "token {:?} serves some projects only; announcing shared files needs an \
                     admin token",
                    caller.name
                )));
            }
            None
        } else {
            Some(caller.project_for(&r.project)?)
        };
        let requeued = self
            .scheduler
            .files_uploaded(project.as_deref(), &r.keys)
            .await
            .map_err(schedule_status)?;
        crate::metrics::JOBS_RESYMBOLICATED.inc_by(requeued);
        if requeued > 0 {
            tracing::info!(requeued, project = ?project, "files arrived: jobs queued again");
        }
        Ok(Response::new(v1::FilesUploadedResponse { requeued }))
    }
}

/// [`check`]s `spec`; a native report without a routing key (decompressing and reading up to
/// 16 MiB) is read on the blocking pool, so that it never holds up the async threads that
/// serve every other request. The spec is handed back; `Err` (INTERNAL) only when the reading
/// task itself ended abnormally.
async fn check_off_runtime(
    spec: v1::JobSpec,
) -> Result<(Result<Checked, String>, v1::JobSpec), Status> {
    let reads_report = matches!(
        &spec.payload,
        Some(v1::job_spec::Payload::Native(native)) if native.routing_key.is_empty()
    );
    if !reads_report {
        return Ok((check(&spec), spec));
    }
    // As many reads at once as there are cores: more would only add blocking-pool threads
    // (each with its own allocator heap: the leader's RSS went from 160 to 287 MiB without
    // this bound under the load test).
    // The permit goes into the blocking task, so that a caller who gives up (a short deadline,
    // a reset stream) does not free a place while its read still runs.
    static READERS: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
        std::sync::LazyLock::new(|| {
            std::sync::Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get()),
            ))
        });
    let Ok(permit) = READERS.clone().acquire_owned().await else {
        return Ok((check(&spec), spec));
    };
    tokio::task::spawn_blocking(move || {
        let checked = check(&spec);
        drop(permit);
        (checked, spec)
    })
    .await
    .map_err(|e| Status::internal(format!("the report reader stopped: {e}")))
}

/// The span a submit runs in: `submit_job`, its `job_id` (the index key) recorded by
/// [`submit_spec`] once known.
pub(super) fn submit_span() -> tracing::Span {
    tracing::info_span!("submit_job", job_id = tracing::field::Empty)
}

/// Checks and submits `spec` on this master (the leader) for `caller` (in a [`submit_span`]):
/// the answer `Submit` gives. The job goes to the project the spec names (or the caller's, see
/// [`auth::Caller::project_for`]) under its index key ([`keys`]): the stored spec carries that
/// key as its `job_id`, which is the id workers complete it by, and the resolved `project`. A
/// caller that may not read (a `device` token) gets the job without its result.
pub(super) async fn submit_spec(
    scheduler: &Scheduler,
    mut spec: v1::JobSpec,
    caller: &auth::Caller,
) -> Result<v1::SubmitResponse, Status> {
    let (checked, returned) = check_off_runtime(spec).await?;
    spec = returned;
    let checked = checked.map_err(Status::invalid_argument)?;
    spec.project = caller.project_for(&spec.project)?;
    spec.job_id = keys::job_key(&spec.project, &spec.job_id);
    tracing::Span::current().record("job_id", spec.job_id.as_str());
    let encoded = spec.encode_to_vec();
    let key = spec.job_id.as_str();
    let outcome = match checked {
        Checked::Runnable { kind, routing_key } => {
            scheduler.submit(key, kind, encoded, &routing_key).await
        }
        Checked::Unreadable { kind, error } => {
            scheduler.submit_failed(key, kind, encoded, &error).await
        }
    };
    let (job, created) = outcome.map_err(schedule_status)?;
    crate::metrics::JOBS_SUBMITTED.inc_by(u64::from(created));
    tracing::debug!(job_id = %job.record.job_id, created, "job submitted");
    let mut job = job_to_proto(job);
    if !may_read(caller) {
        // A resubmitted id must not hand a device the stored result of a finished job.
        job.result_json.clear();
    }
    Ok(v1::SubmitResponse {
        job: Some(job),
        created,
    })
}

/// Whether `caller` may read jobs and results (not a `device` token).
pub(super) fn may_read(caller: &auth::Caller) -> bool {
    auth::READ_ROLES.contains(&caller.role)
}

/// The caller an interceptor admitted (UNAUTHENTICATED for a request none did).
fn caller<T>(request: &Request<T>) -> Result<auth::Caller, Status> {
    request
        .extensions()
        .get::<auth::Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the call was not authenticated"))
}

/// How to answer results: compressed when the caller asked for `result_zstd`.
pub(super) fn result_form(zstd: bool) -> ResultForm {
    if zstd {
        ResultForm::Zstd
    } else {
        ResultForm::Json
    }
}

/// Which changes [`next_change`] returns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// Any state other than the last one seen (`WatchJob` streams every state).
    AnyChange,
    /// A finished state only, COMPLETED or FAILED (a `SubmitStream` answers only that).
    Finished,
}

/// Waits until job `id` is in a state other than `last` that `until` asks for and returns it
/// then (with its result in `form` when finished); `None` when the job is gone (purged).
///
/// One index read per wake-up: the record, and in the same read transaction the result when
/// the job is finished.
pub(super) async fn next_change(
    scheduler: &Scheduler,
    id: &str,
    last: Option<JobState>,
    until: Until,
    form: ResultForm,
) -> Result<Option<JobView>, Status> {
    let watch = scheduler.watchers().watch(id);
    loop {
        // Armed before the read: a change applied between the read and the wait still wakes
        // this loop (`notify_waiters` keeps no permit for a later waiter).
        let notified = watch.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(job) = scheduler
            .index()
            .job_with_result_when_finished(id, form)
            .map_err(index_status)?
        else {
            return Ok(None);
        };
        let state = job.state();
        if last != Some(state) && (until == Until::AnyChange || is_terminal(state)) {
            return Ok(Some(job));
        }
        notified.await;
    }
}

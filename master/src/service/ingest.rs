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

use super::submit::{submit_span, submit_spec};
use super::watch::{Until, next_change, result_form};
use super::{
    index_status, job_to_proto, page_token, require_leader, require_leader_read, schedule_status,
    submit_stream,
};
use crate::auth;
use crate::index::listing::{GroupCursor, GroupFilter, JobCursor, MissingCursor};
use crate::index::{is_terminal, keys};
use crate::scheduler::Scheduler;

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
        require_leader_read(&self.scheduler).await?;
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
        require_leader_read(&self.scheduler).await?;
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
        require_leader_read(&self.scheduler).await?;
        let r = request.into_inner();
        let sees = caller.listing(&r.project)?;
        let size = page_token::page_size(r.page_size, r.limit, 100, 1000);
        let state = match v1::JobState::try_from(r.state).unwrap_or_default() {
            v1::JobState::Unspecified => None,
            s => Some(s),
        };
        let filter = format!("{};{}", r.state, r.project);
        let after: Option<JobCursor> = page_token::decode(&r.page_token, "jobs", &filter)?;
        drop(sees);
        let index = self.scheduler.index().clone();
        let project = r.project;
        let page = off_runtime(move || {
            let sees = caller.listing(&project)?;
            index
                .list_jobs_page(state, size, after, sees)
                .map_err(index_status)
        })
        .await?;
        let jobs = page
            .items
            .into_iter()
            .map(|record| {
                job_to_proto(crate::index::JobView {
                    record,
                    result_json: None,
                    result_zstd: None,
                })
            })
            .collect();
        let next_page_token = page
            .next
            .map(|c| page_token::encode("jobs", &filter, &c))
            .unwrap_or_default();
        Ok(Response::new(v1::ListJobsResponse {
            jobs,
            next_page_token,
        }))
    }

    async fn list_groups(
        &self,
        request: Request<v1::ListGroupsRequest>,
    ) -> Result<Response<v1::ListGroupsResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "listing crash groups")?;
        require_leader_read(&self.scheduler).await?;
        let r = request.into_inner();
        // A group's tree holds up to 2,000 nodes: fewer groups per page with trees keep an
        // answer within clients' 4 MiB message limit. The deprecated `limit` keeps its old
        // maximum: older clients (`symctl groups --tree` before pages) read one answer only.
        let max = if r.call_trees && r.page_size > 0 {
            50
        } else {
            1000
        };
        let size = page_token::page_size(r.page_size, r.limit, 20, max);
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
        drop(sees);
        let filter = format!(
            "{};{};{};{}",
            r.project, r.kind, r.call_trees, r.fingerprint_prefix
        );
        let after: Option<GroupCursor> = page_token::decode(&r.page_token, "groups", &filter)?;
        let kind = kind.map(str::to_owned);
        let index = self.scheduler.index().clone();
        let page = off_runtime(move || {
            let sees = caller.listing(&r.project)?;
            let filter = GroupFilter {
                kind: kind.as_deref(),
                fingerprint_prefix: &r.fingerprint_prefix,
                with_trees: r.call_trees,
                with_facets: r.facets,
            };
            index
                .groups_page(size, filter, after.as_ref(), sees)
                .map_err(index_status)
        })
        .await?;
        let next_page_token = page
            .next
            .map(|c| page_token::encode("groups", &filter, &c))
            .unwrap_or_default();
        Ok(Response::new(v1::ListGroupsResponse {
            groups: page.items,
            next_page_token,
        }))
    }

    async fn list_missing(
        &self,
        request: Request<v1::ListMissingRequest>,
    ) -> Result<Response<v1::ListMissingResponse>, Status> {
        let caller = auth::require(&request, auth::READ_ROLES, "listing missing files")?;
        require_leader_read(&self.scheduler).await?;
        let r = request.into_inner();
        let size = page_token::page_size(r.page_size, r.limit, 100, 1000);
        let sees = caller.listing(&r.project)?;
        drop(sees);
        let after: Option<MissingCursor> =
            page_token::decode(&r.page_token, "missing", &r.project)?;
        let index = self.scheduler.index().clone();
        let filter = r.project.clone();
        let page = off_runtime(move || {
            let sees = caller.listing(&r.project)?;
            index
                .missing_files_page(size, after.as_ref(), sees)
                .map_err(index_status)
        })
        .await?;
        let next_page_token = page
            .next
            .map(|c| page_token::encode("missing", &filter, &c))
            .unwrap_or_default();
        Ok(Response::new(v1::ListMissingResponse {
            missing: page.items,
            next_page_token,
        }))
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

/// The caller an interceptor admitted (UNAUTHENTICATED for a request none did).
fn caller<T>(request: &Request<T>) -> Result<auth::Caller, Status> {
    request
        .extensions()
        .get::<auth::Caller>()
        .cloned()
        .ok_or_else(|| Status::unauthenticated("the call was not authenticated"))
}

/// Runs `read` (a scan of the index) on the blocking pool, so that a long listing never holds
/// one of the runtime's threads. INTERNAL when the task did not finish.
async fn off_runtime<T: Send + 'static>(
    read: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(read)
        .await
        .map_err(|e| Status::internal(format!("the index reader stopped: {e}")))?
}

//! `Ingest/SubmitStream`: many submits over one call.
//!
//! One task reads the requests; each job gets a task of its own that submits it (the same path
//! as `Submit`), answers `accepted` (or `refused`) once the submit is committed, and, when the
//! request asks to watch, answers `finished` when the job is COMPLETED or FAILED. Jobs run
//! concurrently, so answers come in commit and finish order. When this master is no longer the
//! leader, the stream ends with the redirect (`UNAVAILABLE`, leader in the metadata); when the
//! client goes away, every task of the stream stops.

use std::pin::Pin;
use std::sync::Arc;

use symcluster_proto::v1::{self, submit_stream_response::Event};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use tracing::Instrument as _;

use super::submit::{may_read, submit_span, submit_spec};
use super::watch::{Until, next_change, result_form};
use super::{job_to_proto, not_leader};
use crate::auth::Caller;
use crate::index::{is_terminal, keys};
use crate::scheduler::Scheduler;

/// The answers of one `SubmitStream` call.
pub type ResponseStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<v1::SubmitStreamResponse, Status>> + Send>>;

/// Answers buffered for a slow reader before job tasks wait.
const ANSWER_BUFFER: usize = 256;

/// Jobs of one stream not answered yet (submitting, or watched until they finish). When full,
/// the next request is read only once one of them is answered, so HTTP/2 flow control holds the
/// client back and one stream cannot fill the leader's memory.
pub const MAX_JOBS_PER_STREAM: usize = 1024;

/// Serves `requests` from `scheduler`: the stream of answers. Jobs go to their projects as
/// `Submit` puts them (`caller`'s projects only). For a caller that may not read (a `device`
/// token) a job asking to be watched is refused with PERMISSION_DENIED, and answers carry no
/// result. Each job takes one call from the `caller`'s rate limit; a job over it is refused
/// with RESOURCE_EXHAUSTED.
pub fn serve(
    scheduler: Arc<Scheduler>,
    requests: Streaming<v1::SubmitStreamRequest>,
    caller: Caller,
) -> ResponseStream {
    let (tx, rx) = mpsc::channel(ANSWER_BUFFER);
    tokio::spawn(read_requests(scheduler, requests, tx, caller));
    Box::pin(ReceiverStream::new(rx))
}

type Answers = mpsc::Sender<Result<v1::SubmitStreamResponse, Status>>;

async fn read_requests(
    scheduler: Arc<Scheduler>,
    mut requests: Streaming<v1::SubmitStreamRequest>,
    tx: Answers,
    caller: Caller,
) {
    // Dropped (aborting every job task) when the client goes away or the stream ends in error.
    let mut jobs = JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_JOBS_PER_STREAM));
    let mut leadership = scheduler.leadership();
    // Ends the stream with the redirect when this master stops leading (e.g. a leader cut off
    // in a minority steps down): the client resubmits what was not finished to the new leader.
    let deposed = async move {
        while leadership.changed().await.is_ok() {
            if !*leadership.borrow_and_update() {
                return;
            }
        }
        std::future::pending::<()>().await
    };
    tokio::pin!(deposed);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            _ = tx.closed() => return,
        };
        let Ok(slot) = slot else { return };
        tokio::select! {
            request = requests.message() => match request {
                Ok(Some(request)) => {
                    if let Err(status) = caller.take() {
                        let id = request.job.map(|j| j.job_id).unwrap_or_default();
                        if tx.send(Ok(refused(id, status))).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    let job = one_job(scheduler.clone(), request, tx.clone(), caller.clone());
                    jobs.spawn(async move {
                        job.await;
                        drop(slot);
                    });
                }
                // The client sent everything: answer what is in flight, then end.
                Ok(None) => break,
                Err(status) => {
                    let _ = tx.send(Err(status)).await;
                    return;
                }
            },
            Some(_) = jobs.join_next(), if !jobs.is_empty() => {}
            _ = &mut deposed => {
                let _ = tx.send(Err(not_leader(scheduler.raft().leader_address()))).await;
                return;
            }
            _ = tx.closed() => return,
        }
    }
    tokio::select! {
        _ = async { while jobs.join_next().await.is_some() {} } => {}
        _ = tx.closed() => {}
    }
}

/// Submits one job and answers for it; a lost leadership ends the whole stream.
async fn one_job(
    scheduler: Arc<Scheduler>,
    request: v1::SubmitStreamRequest,
    tx: Answers,
    caller: Caller,
) {
    let Some(spec) = request.job else {
        let _ = tx
            .send(Ok(refused(
                String::new(),
                Status::invalid_argument("missing `job`"),
            )))
            .await;
        return;
    };
    let job_id = spec.job_id.clone();
    if request.watch && !may_read(&caller) {
        let denied = Status::permission_denied(
            "this token may submit but not read: send the job without `watch`",
        );
        let _ = tx.send(Ok(refused(job_id, denied))).await;
        return;
    }
    let submitted = submit_spec(&scheduler, spec, &caller).instrument(submit_span());
    let accepted = match submitted.await {
        Ok(accepted) => accepted,
        Err(status) => {
            let _ = tx.send(failure(job_id, status)).await;
            return;
        }
    };
    let state = accepted
        .job
        .as_ref()
        .and_then(|j| v1::JobState::try_from(j.state).ok());
    // The index key the job was stored under (its project is known once accepted).
    let key = keys::job_key(
        accepted.job.as_ref().map_or("", |j| j.project.as_str()),
        &job_id,
    );
    let answer = |event| v1::SubmitStreamResponse { event: Some(event) };
    if tx
        .send(Ok(answer(Event::Accepted(accepted))))
        .await
        .is_err()
        || !request.watch
    {
        return;
    }
    // Watch from the state the submit answered with (an existing job may be finished already).
    let last = state.filter(|s| !is_terminal(*s));
    let form = result_form(request.result_zstd);
    let answer_finished = match next_change(&scheduler, &key, last, Until::Finished, form).await {
        Ok(Some(job)) => Ok(answer(Event::Finished(job_to_proto(job)))),
        Ok(None) => {
            let gone = Status::not_found(format!("job {job_id:?} was purged"));
            Ok(refused(job_id, gone))
        }
        Err(status) => failure(job_id, status),
    };
    let _ = tx.send(answer_finished).await;
}

/// The answer to a job that failed with `status`: `UNAVAILABLE` (not the leader any more, or the
/// index cannot be written) ends the whole stream, and the client resubmits elsewhere (or later)
/// whatever was not finished; any other status concerns this job only (e.g. `INVALID_ARGUMENT`,
/// or `DATA_LOSS` for a stored result that does not decompress) and is answered `refused`.
fn failure(job_id: String, status: Status) -> Result<v1::SubmitStreamResponse, Status> {
    if status.code() == Code::Unavailable {
        Err(status)
    } else {
        Ok(refused(job_id, status))
    }
}

fn refused(job_id: String, status: Status) -> v1::SubmitStreamResponse {
    v1::SubmitStreamResponse {
        event: Some(Event::Refused(v1::SubmitRefused {
            job_id,
            code: status.code() as i32,
            message: status.message().to_owned(),
            retry_after_ms: status
                .metadata()
                .get(super::RETRY_PUSHBACK_METADATA)
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(0),
        })),
    }
}

//! [`SubmitStream`]: many jobs over one `Ingest/SubmitStream` call, following the leader.
//!
//! One task owns the call. Every job is kept (spec included) until the master has answered all
//! it was asked for: `accepted`, and `finished` when watched. When the call breaks (the leader
//! died, stepped down, or the network cut it), the task finds the leader again and resubmits
//! every job still kept; submits are idempotent by job id, so a job accepted before the failover
//! is not created twice, and its `finished` answer comes from the new leader.

use std::collections::HashMap;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tonic::Status;

use crate::{
    Client, ClientError, FAILOVER_TIMEOUT, MAX_REQUEST_BYTES, api, is_failover, leader_hint,
};
use api::submit_stream_response::Event;

/// A handle on a stream of submits; cheap to clone, usable from many tasks at once. The stream
/// ends when every handle is dropped and every job kept has been answered.
#[derive(Clone)]
pub struct SubmitStream {
    jobs: mpsc::UnboundedSender<Job>,
    /// The client's project, given to specs that name none.
    project: String,
}

/// A job the master accepted; [`Submitted::finished`] waits for its end when it was watched.
pub struct Submitted {
    /// What `Submit` would have answered: the job as stored, and whether this submit created it.
    pub response: api::SubmitResponse,
    finished: Option<oneshot::Receiver<Result<api::Job, ClientError>>>,
}

impl Submitted {
    /// The job once COMPLETED or FAILED, with its result. `WatchEnded` when it was submitted
    /// without `watch`, or the stream's task stopped.
    pub async fn finished(self) -> Result<api::Job, ClientError> {
        let id = self
            .response
            .job
            .as_ref()
            .map(|j| j.job_id.clone())
            .unwrap_or_default();
        match self.finished {
            // The result comes compressed; it is decompressed here, in the caller's task.
            Some(rx) => rx
                .await
                .unwrap_or(Err(ClientError::WatchEnded(id)))
                .and_then(crate::with_result_json),
            None => Err(ClientError::WatchEnded(id)),
        }
    }
}

struct Job {
    spec: api::JobSpec,
    watch: bool,
    accepted: oneshot::Sender<Result<api::SubmitResponse, ClientError>>,
    finished: Option<oneshot::Sender<Result<api::Job, ClientError>>>,
}

impl SubmitStream {
    /// Starts the stream's task on the current tokio runtime.
    pub(crate) fn start(client: Client) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let project = client.project().to_owned();
        tokio::spawn(drive(client, rx));
        SubmitStream { jobs: tx, project }
    }

    /// Submits `job` and waits until the master has committed it (or refused it: its status, as
    /// `Submit` would answer). With `watch`, [`Submitted::finished`] then waits for its end.
    /// Follows the leader through failovers for up to [`FAILOVER_TIMEOUT`].
    pub async fn submit(
        &self,
        mut job: api::JobSpec,
        watch: bool,
    ) -> Result<Submitted, ClientError> {
        if job.project.is_empty() {
            job.project.clone_from(&self.project);
        }
        let id = job.job_id.clone();
        if let Some(api::job_spec::Payload::Native(native)) = &job.payload
            && let Err(e) = crate::report::checked_len(native)
        {
            return Err(ClientError::Status(Status::invalid_argument(format!(
                "job {id:?}: {e}"
            ))));
        }
        let request_bytes = prost::Message::encoded_len(&job) + 8;
        if request_bytes > MAX_REQUEST_BYTES {
            return Err(ClientError::Status(Status::out_of_range(format!(
                "job {id:?} is {request_bytes} bytes; a master reads at most {MAX_REQUEST_BYTES}"
            ))));
        }
        let (accepted_tx, accepted_rx) = oneshot::channel();
        let (finished_tx, finished_rx) = if watch {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let stopped = || ClientError::Status(Status::cancelled("the submit stream stopped"));
        self.jobs
            .send(Job {
                spec: job,
                watch,
                accepted: accepted_tx,
                finished: finished_tx,
            })
            .map_err(|_| stopped())?;
        let response = accepted_rx.await.map_err(|_| stopped())??;
        debug_assert_eq!(
            response.job.as_ref().map(|j| j.job_id.as_str()),
            Some(id.as_str())
        );
        Ok(Submitted {
            response,
            finished: finished_rx,
        })
    }
}

/// Jobs the master has not answered fully, by id (several submits of one id share its answers).
#[derive(Default)]
struct Kept {
    by_id: HashMap<String, Vec<Job>>,
}

impl Kept {
    /// Keeps `job` until the master answers it. Answers name jobs by id, so a job whose id is
    /// in flight for another project on this stream is refused here (INVALID_ARGUMENT): send
    /// it once that one is answered, or on a stream of its own.
    fn keep(&mut self, job: Job) -> Option<api::SubmitStreamRequest> {
        let jobs = self.by_id.entry(job.spec.job_id.clone()).or_default();
        if let Some(other) = jobs.iter().find(|j| j.spec.project != job.spec.project) {
            let status = Status::invalid_argument(format!(
                "job {:?} is in flight on this stream for project {:?}; one id serves one \
                 project at a time per stream",
                job.spec.job_id, other.spec.project
            ));
            let _ = job.accepted.send(Err(ClientError::Status(status.clone())));
            if let Some(tx) = job.finished {
                let _ = tx.send(Err(ClientError::Status(status)));
            }
            return None;
        }
        let request = Self::request(&job);
        jobs.push(job);
        Some(request)
    }

    fn request(job: &Job) -> api::SubmitStreamRequest {
        api::SubmitStreamRequest {
            job: Some(job.spec.clone()),
            watch: job.watch,
            result_zstd: true,
        }
    }

    fn answer(&mut self, event: Event) {
        match event {
            Event::Accepted(response) => {
                let id = response
                    .job
                    .as_ref()
                    .map(|j| j.job_id.clone())
                    .unwrap_or_default();
                let Some(jobs) = self.by_id.get_mut(&id) else {
                    return;
                };
                for job in jobs.iter_mut() {
                    let (tx, _) = oneshot::channel();
                    let accepted = std::mem::replace(&mut job.accepted, tx);
                    let _ = accepted.send(Ok(response.clone()));
                }
                jobs.retain(|j| j.finished.is_some());
                if jobs.is_empty() {
                    self.by_id.remove(&id);
                }
            }
            Event::Finished(finished) => {
                for job in self.by_id.remove(&finished.job_id).unwrap_or_default() {
                    if let Some(tx) = job.finished {
                        let _ = tx.send(Ok(finished.clone()));
                    }
                }
            }
            Event::Refused(refused) => {
                let mut status = Status::new(refused.code.into(), refused.message);
                if refused.retry_after_ms > 0 {
                    // As `Submit` would carry it, for `retry::pushback`.
                    status.metadata_mut().insert(
                        crate::retry::PUSHBACK_METADATA,
                        refused.retry_after_ms.into(),
                    );
                }
                for job in self.by_id.remove(&refused.job_id).unwrap_or_default() {
                    let _ = job.accepted.send(Err(ClientError::Status(status.clone())));
                    if let Some(tx) = job.finished {
                        let _ = tx.send(Err(ClientError::Status(status.clone())));
                    }
                }
            }
        }
    }

    fn fail_all(&mut self, status: &Status) {
        for (_, jobs) in self.by_id.drain() {
            for job in jobs {
                let _ = job.accepted.send(Err(ClientError::Status(status.clone())));
                if let Some(tx) = job.finished {
                    let _ = tx.send(Err(ClientError::Status(status.clone())));
                }
            }
        }
    }
}

async fn drive(client: Client, mut incoming: mpsc::UnboundedReceiver<Job>) {
    let mut kept = Kept::default();
    let mut handles_open = true;
    // Set at the first failure of a run of failures: failover gives up after FAILOVER_TIMEOUT.
    let mut failing_since: Option<Instant> = None;
    loop {
        if kept.by_id.is_empty() {
            if !handles_open {
                return;
            }
            match incoming.recv().await {
                Some(job) => {
                    kept.keep(job);
                    continue;
                }
                None => return,
            }
        }
        let (requests, requests_rx) = mpsc::unbounded_channel();
        for job in kept.by_id.values().flatten() {
            let _ = requests.send(Kept::request(job));
        }
        let status = match client
            .ingest()
            .submit_stream(UnboundedReceiverStream::new(requests_rx))
            .await
        {
            Ok(response) => {
                let mut answers = response.into_inner();
                loop {
                    tokio::select! {
                        job = incoming.recv(), if handles_open => match job {
                            Some(job) => {
                                if let Some(request) = kept.keep(job) {
                                    let _ = requests.send(request);
                                }
                            }
                            None => {
                                handles_open = false;
                                if kept.by_id.is_empty() {
                                    return;
                                }
                            }
                        },
                        answer = answers.message() => match answer {
                            Ok(Some(answer)) => {
                                failing_since = None;
                                if let Some(event) = answer.event {
                                    kept.answer(event);
                                }
                                if kept.by_id.is_empty() && !handles_open {
                                    return;
                                }
                            }
                            Ok(None) => break Status::unavailable("the submit stream ended"),
                            Err(status) => break status,
                        },
                    }
                }
            }
            Err(status) => status,
        };
        let since = *failing_since.get_or_insert_with(Instant::now);
        if !is_failover(&status) || since.elapsed() >= FAILOVER_TIMEOUT {
            kept.fail_all(&status);
            failing_since = None;
            continue;
        }
        if client
            .reconnect(leader_hint(&status).as_deref())
            .await
            .is_err()
        {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

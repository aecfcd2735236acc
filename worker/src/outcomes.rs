//! The session's `ReportOutcomes` call: every job's completion or failure goes to the leader over
//! one long-lived gRPC stream instead of a `CompleteJob`/`FailJob` call per job (no HTTP/2
//! stream, headers and trailers per job, on the worker and on the leader).
//!
//! One task owns the call. [`Outcomes::report`] hands it an outcome and waits for the answer
//! with the same id; answers come in commit order. When the call cannot be opened or ends (the
//! master stopped leading, a cut connection, a master without `ReportOutcomes`), every outcome
//! waiting on it gets the call's status, and the next outcome opens a new call. The caller then
//! reports that outcome by its unary call, which follows the leader through a failover
//! (`Client::on_leader`): outcomes are idempotent on the master (a job completes once).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use symcluster_client::Client;
use symcluster_proto::v1 as api;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;

/// Outcomes handed to the call's task and not yet sent (the jobs of one worker: its slots and
/// prefetch, at most a few dozen).
const QUEUE: usize = 256;

type Answer = Result<api::OutcomeResponse, Status>;

struct Pending {
    request: api::OutcomeRequest,
    answer: oneshot::Sender<Answer>,
}

/// A handle on the session's `ReportOutcomes` call; cheap to clone. The call's task ends when
/// the last handle is dropped and every outcome sent has its answer.
#[derive(Clone)]
pub struct Outcomes {
    queue: mpsc::Sender<Pending>,
    next_id: Arc<AtomicU64>,
}

impl Outcomes {
    /// Starts the task that owns the call (opened at the first outcome) on `client`'s master.
    pub fn start(client: &Client) -> Self {
        let (queue, pending) = mpsc::channel(QUEUE);
        tokio::spawn(run(client.clone(), pending));
        Outcomes {
            queue,
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Sends `outcome` (its `id` is set here) and waits for its answer: the master's
    /// `OutcomeResponse` (whose `code` may still refuse this outcome), or the status that ended
    /// the call before it was answered.
    pub async fn report(&self, mut outcome: api::OutcomeRequest) -> Answer {
        outcome.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        let pending = Pending {
            request: outcome,
            answer,
        };
        if self.queue.send(pending).await.is_err() {
            return Err(Status::unavailable("the outcome stream's task has ended"));
        }
        answered
            .await
            .unwrap_or_else(|_| Err(Status::unavailable("the outcome stream ended")))
    }
}

/// One call at a time, opened when an outcome waits and none is open.
async fn run(client: Client, mut pending: mpsc::Receiver<Pending>) {
    while let Some(first) = pending.recv().await {
        let (requests, stream) = mpsc::channel(QUEUE);
        let mut waiting: HashMap<u64, oneshot::Sender<Answer>> = HashMap::new();
        waiting.insert(first.request.id, first.answer);
        // The channel has room: nothing was sent on it yet.
        let _ = requests.try_send(first.request);
        let mut requests = Some(requests);
        let mut responses = match client
            .worker_api()
            .report_outcomes(ReceiverStream::new(stream))
            .await
        {
            Ok(call) => call.into_inner(),
            Err(status) => {
                answer_all(&mut waiting, &status);
                continue;
            }
        };
        let ended = loop {
            tokio::select! {
                next = pending.recv(), if requests.is_some() => match (next, &requests) {
                    (Some(p), Some(requests)) => {
                        let id = p.request.id;
                        if requests.send(p.request).await.is_ok() {
                            waiting.insert(id, p.answer);
                        } else {
                            let _ = p.answer.send(Err(Status::unavailable("the outcome stream ended")));
                            break Status::unavailable("the outcome stream ended");
                        }
                    }
                    // Every handle is gone: end the requests and read the answers left.
                    _ => requests = None,
                },
                response = responses.message() => match response {
                    Ok(Some(response)) => {
                        if let Some(answer) = waiting.remove(&response.id) {
                            let _ = answer.send(Ok(response));
                        }
                        if requests.is_none() && waiting.is_empty() {
                            return;
                        }
                    }
                    Ok(None) => break Status::unavailable("the master ended the outcome stream"),
                    Err(status) => break status,
                },
            }
        };
        tracing::debug!(error = %ended, waiting = waiting.len(), "outcome stream ended");
        answer_all(&mut waiting, &ended);
        if requests.is_none() {
            return;
        }
    }
}

fn answer_all(waiting: &mut HashMap<u64, oneshot::Sender<Answer>>, status: &Status) {
    for (_, answer) in waiting.drain() {
        let _ = answer.send(Err(status.clone()));
    }
}

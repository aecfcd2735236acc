//! What the clients of a nemesis run did and saw: one [`Op`] per call, with the times it was
//! invoked and answered, as Jepsen and etcd's robustness tests record a history (invoke, then
//! ok / fail / info), and the faults the nemesis injected between them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use symcluster_client::{ClientError, api};

/// Which report a submit carried, so the checker knows how the job must end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Payload {
    /// `examples/ios-demo/DemoApp.crash`, whose dSYM the run uploaded: it must complete, its
    /// crashed thread's first DemoApp frame at [`DEMO_FRAME`].
    Demo,
    /// Bytes that are no crash report: the master stores the job FAILED at once.
    Unreadable,
}

/// The first DemoApp frame of the demo crash's crashed thread, symbolicated: `function
/// file:line` (1-based line).
pub const DEMO_FRAME: &str = "crash_write_null crash.c:23";

/// What one call asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `Ingest/Submit` of a job with this report.
    Submit(Payload),
    /// `Ingest/GetJob`.
    Get,
}

/// What a call was answered, as far as the history can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A submit was acknowledged; `created`: this call created the job.
    Submitted {
        /// `SubmitResponse.created`: false also when the client library sent the call again
        /// after a failover and its first attempt had created the job.
        created: bool,
        /// `SubmitResponse.same_report`: the stored job's report is the one sent.
        same_report: bool,
    },
    /// A read found the job.
    Found(Observed),
    /// A read was answered NOT_FOUND.
    Absent,
    /// The call surely took no effect (an answer such as INVALID_ARGUMENT).
    Failed(String),
    /// The call may or may not have taken effect (a timeout, UNAVAILABLE, a cut connection):
    /// Jepsen's `info`.
    Unknown(String),
}

/// A job as one read saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Observed {
    /// `Job.state`.
    pub state: api::JobState,
    /// `Job.revision`.
    pub revision: u32,
    /// For a finished job: [`DEMO_FRAME`]'s form of its result's first DemoApp frame (or
    /// `no DemoApp frame`), or `FAILED: <error>`; empty while it runs.
    pub end: String,
}

impl Observed {
    /// Whether the job had ended (COMPLETED or FAILED).
    pub fn finished(&self) -> bool {
        matches!(self.state, api::JobState::Completed | api::JobState::Failed)
    }

    /// What `job` shows (its result JSON decompressed, as [`symcluster_client::Client::job`]
    /// gives it).
    pub fn of(job: &api::Job) -> Observed {
        let state = api::JobState::try_from(job.state).unwrap_or(api::JobState::Unspecified);
        let end = match state {
            api::JobState::Completed => demo_frame(&job.result_json),
            api::JobState::Failed => format!("FAILED: {}", job.error),
            _ => String::new(),
        };
        Observed {
            state,
            revision: job.revision,
            end,
        }
    }
}

/// `function file:line` of the first frame in image `DemoApp` of the crashed thread of a
/// native result (`symcluster.v1` result JSON); `no DemoApp frame` when there is none.
fn demo_frame(result_json: &[u8]) -> String {
    let result: serde_json::Value = serde_json::from_slice(result_json).unwrap_or_default();
    let frame = result["threads"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["crashed"] == true)
        .flat_map(|t| t["frames"].as_array().into_iter().flatten())
        .find(|f| f["image"] == "DemoApp");
    match frame {
        Some(f) => format!(
            "{} {}:{}",
            f["function"].as_str().unwrap_or("?"),
            f["filename"].as_str().unwrap_or("?"),
            f["lineno"].as_u64().unwrap_or(0)
        ),
        None => "no DemoApp frame".to_owned(),
    }
}

/// One call of one client: what it asked of which job, when it was invoked and answered
/// (since the run's start), and the answer.
#[derive(Debug, Clone)]
pub struct Op {
    /// The client (0-based) that made it; a client makes one call at a time.
    pub client: usize,
    /// The job's id.
    pub job: String,
    /// What it asked.
    pub call: Call,
    /// When it was invoked.
    pub invoked: Duration,
    /// When its answer came (or it was given up).
    pub answered: Duration,
    /// The answer.
    pub outcome: Outcome,
}

impl Op {
    /// Whether this op was answered before `other` was invoked (real-time order, which a
    /// linearizable system must keep).
    pub fn precedes(&self, other: &Op) -> bool {
        self.answered < other.invoked
    }
}

/// Classifies a failed call: a status that says the call was refused as it stood is
/// [`Outcome::Failed`]; a timeout, a lost connection or no leader is [`Outcome::Unknown`].
pub fn outcome_of_error(error: &ClientError) -> Outcome {
    use tonic::Code;
    match error {
        ClientError::Status(status) => match status.code() {
            Code::InvalidArgument
            | Code::PermissionDenied
            | Code::Unauthenticated
            | Code::FailedPrecondition
            | Code::AlreadyExists
            | Code::ResourceExhausted => Outcome::Failed(error.to_string()),
            _ => Outcome::Unknown(error.to_string()),
        },
        _ => Outcome::Unknown(error.to_string()),
    }
}

/// A fault the nemesis injected or healed, at a time since the run's start.
#[derive(Debug, Clone)]
pub struct Event {
    /// When.
    pub at: Duration,
    /// What, e.g. `kill master 2 (leader)`, `restart master 2`.
    pub what: String,
}

/// The history being recorded: shared by the clients and the nemesis.
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    events: Mutex<Vec<Event>>,
}

impl Recorder {
    /// A recorder whose times count from now.
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Now, since the start.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    /// Records a call answered now that was invoked at `invoked`.
    pub fn op(&self, client: usize, job: &str, call: Call, invoked: Duration, outcome: Outcome) {
        let op = Op {
            client,
            job: job.to_owned(),
            call,
            invoked,
            answered: self.now(),
            outcome,
        };
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).push(op);
    }

    /// Records a fault (or its healing) now.
    pub fn event(&self, what: String) {
        let event = Event {
            at: self.now(),
            what,
        };
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event);
    }

    /// The calls recorded so far, in the order they were answered.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The faults recorded so far.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// Calls and reads for the checkers' tests: job `j`, times in ms.
#[cfg(test)]
pub mod samples {
    use super::*;
    use symcluster_client::api::JobState;

    /// A call of job `j` by `client`, invoked and answered at these ms.
    pub fn op(client: usize, call: Call, invoked: u64, answered: u64, outcome: Outcome) -> Op {
        Op {
            client,
            job: "j".into(),
            call,
            invoked: Duration::from_millis(invoked),
            answered: Duration::from_millis(answered),
            outcome,
        }
    }

    /// A job as read, revision 1.
    pub fn seen(state: JobState, end: &str) -> Observed {
        Observed {
            state,
            revision: 1,
            end: end.into(),
        }
    }
}

//! The client library ingestion services (and workers, and `symctl`) link to talk to a
//! symcluster master.
//!
//! Deliberately light: only the generated API (`symcluster-proto`) and tonic; no engine, no
//! storage. [`Client::connect`] finds the leader among the masters given, opens one HTTP/2
//! channel to it, and attaches the bearer token to every call; the client's own calls follow the
//! leader through failovers.
//!
//! ```no_run
//! # async fn demo() -> Result<(), symcluster_client::ClientError> {
//! let mut client =
//!     symcluster_client::Client::connect("http://10.0.0.1:7700,http://10.0.0.2:7700", "secret").await?;
//! let report = std::fs::read("DemoApp.crash").unwrap();
//! client.submit_native("job-1", report).await?;
//! let job = client.wait("job-1").await?; // COMPLETED or FAILED
//! println!("{}", String::from_utf8_lossy(&job.result_json));
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

pub mod retry;
mod submit_stream;
mod tls;
mod uploads;

pub use submit_stream::{SubmitStream, Submitted};
pub use tls::{Tls, install_crypto_provider};

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// Largest answer the client reads, bytes: a job with a result of the master's largest
/// (64 MiB of JSON) and its other fields.
pub const MAX_RESPONSE_BYTES: usize = (64 << 20) + (1 << 20);

/// Largest request a master reads, bytes (a report of at most 16 MiB and the rest of its
/// `JobSpec`); [`SubmitStream`] refuses a larger job itself, so that it does not break the stream
/// the other jobs share.
pub const MAX_REQUEST_BYTES: usize = (16 << 20) + (1 << 20);

/// The generated gRPC clients and message types (`package symcluster.v1`).
pub use symcluster_proto::v1 as api;

/// How a native report travels (plain or zstd) and its size limit.
pub use symcluster_proto::report;

/// What a project name may be, and the default project.
pub use symcluster_proto::project;

/// How a missing debug file, source map or mapping file is named (`MissingFile.key`).
pub use symcluster_proto::missing;

/// Limits of what a completion carries (result size, call tree nodes).
pub use symcluster_proto::result as result_limits;

/// The spec of native job `job_id` with `report` compressed into `report_zstd` (zstd level 1,
/// ~0.2 ms for a 123 KB report: the ingestion service spends it so that the masters store and
/// replicate ~6x fewer bytes). INVALID_ARGUMENT when `report` is empty or larger than
/// [`report::MAX_REPORT_BYTES`].
pub fn native_spec(job_id: &str, report: &[u8]) -> Result<api::JobSpec, ClientError> {
    if report.is_empty() {
        return Err(ClientError::Status(Status::invalid_argument(
            "the report is empty",
        )));
    }
    if report.len() > report::MAX_REPORT_BYTES {
        return Err(ClientError::Status(Status::invalid_argument(
            report::ReportError::TooLarge(report.len() as u64).to_string(),
        )));
    }
    Ok(api::JobSpec {
        job_id: job_id.to_owned(),
        payload: Some(api::job_spec::Payload::Native(report::compressed_job(
            report,
        ))),
        project: String::new(),
    })
}

use api::{
    admin_client::AdminClient, ingest_client::IngestClient, worker_api_client::WorkerApiClient,
};

/// Errors of the client.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint URL is invalid or the connection failed.
    #[error("cannot connect to {endpoint}: {message}")]
    Connect {
        /// The endpoint given.
        endpoint: String,
        /// Why.
        message: String,
    },
    /// The token cannot be sent as metadata (non-ASCII).
    #[error("the token must be printable ASCII")]
    BadToken,
    /// The master answered with an error status.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(#[from] Status),
    /// A watch stream ended before the job finished.
    #[error("the master closed the watch of job {0} before it finished")]
    WatchEnded(String),
}

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct BearerToken(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

impl BearerToken {
    /// `authorization: Bearer <token>`; fails when the token is not printable ASCII.
    pub fn new(token: &str) -> Result<Self, ClientError> {
        format!("Bearer {token}")
            .parse()
            .map(BearerToken)
            .map_err(|_| ClientError::BadToken)
    }
}

/// A channel with the bearer token attached.
pub type AuthChannel = InterceptedService<Channel, BearerToken>;

/// Response metadata in which a master that is not the leader names the leader.
pub const LEADER_METADATA: &str = "symcluster-leader";

/// How long a call keeps following the leader through a failover before it gives up.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_secs(20);

/// A connection to the leader of a group of masters.
///
/// Cloning is cheap and clones share the connection: when one clone follows a new leader, all
/// do. Calls made through [`Client`]'s own methods follow the leader on their own: on
/// `UNAVAILABLE` (a master that is not the leader, or one that is gone) they reconnect to the
/// leader and try again, for up to [`FAILOVER_TIMEOUT`]. Calls made through the raw clients
/// ([`Client::ingest`], [`Client::worker_api`], [`Client::admin`]) do not; call
/// [`Client::reconnect`] after such a failure.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The project of submits that name none, and of reads ([`Client::with_project`]).
    project: String,
}

struct Inner {
    endpoints: Vec<String>,
    token: BearerToken,
    tls: Tls,
    current: RwLock<(String, Channel)>,
}

impl Client {
    /// Connects to the leader of the masters at `endpoints`: one `http://host:port`, or several
    /// separated by commas (any member works: a member that is not the leader names it). Waits
    /// up to [`FAILOVER_TIMEOUT`] while masters answer but no leader is elected; fails at once
    /// (`Connect`) when no master answers, and with the master's status for a refused call
    /// (a wrong token: `UNAUTHENTICATED`).
    pub async fn connect(endpoints: &str, token: &str) -> Result<Self, ClientError> {
        Self::connect_with(endpoints, token, Tls::default()).await
    }

    /// [`Client::connect`] with TLS settings for `https://` masters (see [`Tls`]).
    pub async fn connect_with(endpoints: &str, token: &str, tls: Tls) -> Result<Self, ClientError> {
        let endpoints: Vec<String> = endpoints
            .split(',')
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect();
        if endpoints.is_empty() {
            return Err(ClientError::Connect {
                endpoint: String::new(),
                message: "no master address given".into(),
            });
        }
        let token = BearerToken::new(token)?;
        let (endpoint, channel) = find_leader(&endpoints, &token, &tls, None).await?;
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                token,
                tls,
                current: RwLock::new((endpoint, channel)),
            }),
            project: String::new(),
        })
    }

    /// This client for `project`: its submits that name no project go there, and
    /// [`Client::job`] and [`Client::wait`] read that project's jobs. Without it (empty) the
    /// master picks the token's project when the token serves exactly one, else `default`
    /// (see [`api::JobSpec::project`]). Shares the connection.
    pub fn with_project(mut self, project: &str) -> Self {
        project.clone_into(&mut self.project);
        self
    }

    /// The project set by [`Client::with_project`] (empty: the master's choice).
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The master this client talks to now (the leader when it was last asked).
    pub fn endpoint(&self) -> String {
        self.read().0.clone()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (String, Channel)> {
        self.inner.current.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Finds the leader again (after a failed call): `hint`, when given, is tried first.
    pub async fn reconnect(&self, hint: Option<&str>) -> Result<(), ClientError> {
        let found = find_leader(
            &self.inner.endpoints,
            &self.inner.token,
            &self.inner.tls,
            hint,
        )
        .await?;
        *self
            .inner
            .current
            .write()
            .unwrap_or_else(|e| e.into_inner()) = found;
        Ok(())
    }

    fn auth(&self) -> AuthChannel {
        InterceptedService::new(self.read().1.clone(), self.inner.token.clone())
    }

    /// The ingestion API (no leader following; see [`Client`]).
    pub fn ingest(&self) -> IngestClient<AuthChannel> {
        IngestClient::new(self.auth()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The worker API (no leader following; see [`Client`]).
    pub fn worker_api(&self) -> WorkerApiClient<AuthChannel> {
        WorkerApiClient::new(self.auth()).max_decoding_message_size(MAX_RESPONSE_BYTES)
    }

    /// The admin API (no leader following; see [`Client`]).
    pub fn admin(&self) -> AdminClient<AuthChannel> {
        AdminClient::new(self.auth())
    }

    /// Runs `call` on the leader, following it through failovers (see [`Client`]).
    pub async fn on_leader<T, F, Fut>(&self, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(AuthChannel) -> Fut,
        Fut: std::future::Future<Output = Result<T, Status>>,
    {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            match call(self.auth()).await {
                Ok(value) => return Ok(value),
                Err(status) if is_failover(&status) && Instant::now() < deadline => {
                    let hint = leader_hint(&status);
                    if self.reconnect(hint.as_deref()).await.is_err() {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Err(status) => return Err(status.into()),
            }
        }
    }

    /// Submits a native crash report (any format the engine reads) as job `job_id`, compressed
    /// on the way ([`native_spec`]). Idempotent by id: returns the job as stored and whether
    /// this call created it. A report over [`report::MAX_REPORT_BYTES`] is refused here with
    /// INVALID_ARGUMENT, as the master would.
    pub async fn submit_native(
        &mut self,
        job_id: &str,
        report: Vec<u8>,
    ) -> Result<api::SubmitResponse, ClientError> {
        self.submit(native_spec(job_id, &report)?).await
    }

    /// Submits a JS stack as job `job_id`; see [`api::JsJob`] for how its map is found.
    pub async fn submit_js(
        &mut self,
        job_id: &str,
        js: api::JsJob,
    ) -> Result<api::SubmitResponse, ClientError> {
        self.submit(api::JobSpec {
            job_id: job_id.to_owned(),
            payload: Some(api::job_spec::Payload::Js(js)),
            project: String::new(),
        })
        .await
    }

    /// Submits a Java/Kotlin trace as job `job_id`; see [`api::JvmJob`] for how its mapping
    /// file is found.
    pub async fn submit_jvm(
        &mut self,
        job_id: &str,
        jvm: api::JvmJob,
    ) -> Result<api::SubmitResponse, ClientError> {
        self.submit(api::JobSpec {
            job_id: job_id.to_owned(),
            payload: Some(api::job_spec::Payload::Jvm(jvm)),
            project: String::new(),
        })
        .await
    }

    /// Submits a Sentry event whose frames cross JavaScript, Java and native (a React Native
    /// crash on Android) as job `job_id`; see [`api::CombinedJob`] for how its files are found.
    pub async fn submit_combined(
        &mut self,
        job_id: &str,
        event: Vec<u8>,
    ) -> Result<api::SubmitResponse, ClientError> {
        self.submit(api::JobSpec {
            job_id: job_id.to_owned(),
            payload: Some(api::job_spec::Payload::Combined(api::CombinedJob { event })),
            project: String::new(),
        })
        .await
    }

    /// Submits any job spec (on the leader; retried through a failover, which is safe because
    /// submits are idempotent by job id). A spec with no project gets this client's
    /// ([`Client::with_project`]).
    pub async fn submit(
        &mut self,
        mut job: api::JobSpec,
    ) -> Result<api::SubmitResponse, ClientError> {
        if job.project.is_empty() {
            job.project.clone_from(&self.project);
        }
        let request = api::SubmitRequest { job: Some(job) };
        self.on_leader(|channel| {
            let request = request.clone();
            async move {
                IngestClient::new(channel)
                    .max_decoding_message_size(MAX_RESPONSE_BYTES)
                    .submit(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
    }

    /// Opens a stream of submits (`Ingest/SubmitStream`): the way to send many jobs without a
    /// call per job. Needs a tokio runtime (it starts a task). See [`SubmitStream`].
    pub fn submit_stream(&self) -> SubmitStream {
        SubmitStream::start(self.clone())
    }

    /// Reads a job.
    pub async fn job(&mut self, job_id: &str) -> Result<api::Job, ClientError> {
        self.get_job(job_id, false).await
    }

    /// Reads a job with its spec as submitted (`Job.spec`: the report, compressed as sent, or
    /// the JS stack), to render the result in the report's own format.
    pub async fn job_with_spec(&mut self, job_id: &str) -> Result<api::Job, ClientError> {
        self.get_job(job_id, true).await
    }

    async fn get_job(&mut self, job_id: &str, spec: bool) -> Result<api::Job, ClientError> {
        let request = api::GetJobRequest {
            job_id: job_id.to_owned(),
            result_zstd: true,
            project: self.project.clone(),
            spec,
        };
        self.on_leader(|channel| {
            let request = request.clone();
            async move {
                IngestClient::new(channel)
                    .max_decoding_message_size(MAX_RESPONSE_BYTES)
                    .get_job(request)
                    .await
                    .map(|r| r.into_inner())
            }
        })
        .await
        .and_then(with_result_json)
    }

    /// Watches a job until it is COMPLETED or FAILED, and returns it then. Follows the leader
    /// through failovers; right after one, a job the new leader has not applied yet reads as
    /// not found for a moment, so NOT_FOUND is retried then.
    pub async fn wait(&mut self, job_id: &str) -> Result<api::Job, ClientError> {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        let mut failed_over = false;
        loop {
            let status = match self.watch_once(job_id).await {
                Ok(Some(job)) => return Ok(job),
                Ok(None) => Status::unavailable("the watch stream ended"),
                Err(status) => status,
            };
            let retry =
                is_failover(&status) || (failed_over && status.code() == tonic::Code::NotFound);
            if !retry || Instant::now() >= deadline {
                return Err(if status.message() == "the watch stream ended" {
                    ClientError::WatchEnded(job_id.to_owned())
                } else {
                    status.into()
                });
            }
            failed_over = true;
            let hint = leader_hint(&status);
            if self.reconnect(hint.as_deref()).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            } else if status.code() == tonic::Code::NotFound {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    async fn watch_once(&self, job_id: &str) -> Result<Option<api::Job>, Status> {
        let mut stream = self
            .ingest()
            .watch_job(api::GetJobRequest {
                spec: false,
                job_id: job_id.to_owned(),
                result_zstd: true,
                project: self.project.clone(),
            })
            .await?
            .into_inner();
        while let Some(job) = stream.message().await? {
            let state = api::JobState::try_from(job.state).unwrap_or_default();
            if matches!(state, api::JobState::Completed | api::JobState::Failed) {
                // Read the stream to its end (the master ends it right after this message).
                // Dropping it early resets the HTTP/2 stream while the trailers are on their
                // way, and h2 closes a connection after 1,024 such resets with
                // ENHANCE_YOUR_CALM (RESOURCE_EXHAUSTED for every call on it).
                let _ = stream.trailers().await;
                return with_result_json(job)
                    .map(Some)
                    .map_err(|e| Status::data_loss(e.to_string()));
            }
        }
        Ok(None)
    }
}

/// `job` with a compressed result (`result_zstd`, which the client asks for to spare the
/// master's CPU and the network ~6x) decompressed into `result_json`, as callers read it.
/// DATA_LOSS when the frame does not decompress.
pub(crate) fn with_result_json(mut job: api::Job) -> Result<api::Job, ClientError> {
    if !job.result_zstd.is_empty() {
        job.result_json = symcluster_proto::result::decompress(&job.result_zstd).map_err(|e| {
            ClientError::Status(Status::data_loss(format!("job {}: {e}", job.job_id)))
        })?;
        job.result_zstd = Vec::new();
    }
    Ok(job)
}

/// Whether a call's failure means "try the leader again": the master is not the leader, or it
/// cannot be reached.
pub fn is_failover(status: &Status) -> bool {
    is_failover_code(status.code())
}

/// [`is_failover`] for a bare code (an answer of a stream that carries its code in a field,
/// such as `OutcomeResponse.code`).
pub fn is_failover_code(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    )
}

/// The leader a master named in a failed call's metadata.
pub fn leader_hint(status: &Status) -> Option<String> {
    status
        .metadata()
        .get(LEADER_METADATA)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

async fn open(endpoint: &str, tls: &Tls) -> Result<Channel, ClientError> {
    let connect_error = |message: String| ClientError::Connect {
        endpoint: endpoint.to_owned(),
        message,
    };
    let plain =
        Endpoint::from_shared(endpoint.to_owned()).map_err(|e| connect_error(e.to_string()))?;
    tls.apply(plain, endpoint)?
        .connect_timeout(Duration::from_secs(2))
        // A master cut off by the network is noticed within seconds, not at TCP's timeout.
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(2))
        .keep_alive_while_idle(true)
        .tcp_nodelay(true)
        .max_frame_size(symcluster_proto::HTTP2_MAX_FRAME_BYTES)
        .connect()
        .await
        .map_err(|e| connect_error(format!("{e}: {}", source_chain(&e))))
}

/// Asks `endpoint` who leads: `Ok(Some(channel))` when it is the leader, `Ok(None)` with the
/// leader's address in `hint`.
async fn ask(
    endpoint: &str,
    token: &BearerToken,
    tls: &Tls,
    hint: &mut Option<String>,
) -> Result<Option<Channel>, ClientError> {
    let channel = open(endpoint, tls).await?;
    let mut admin = AdminClient::new(InterceptedService::new(channel.clone(), token.clone()));
    let mut request = Request::new(api::ClusterStatusRequest {});
    request.set_timeout(Duration::from_secs(3));
    let status = admin.cluster_status(request).await?.into_inner();
    if status.from_leader {
        return Ok(Some(channel));
    }
    *hint = Some(status.leader).filter(|l| !l.is_empty());
    Ok(None)
}

/// Whether the client follows a leader hint (a master's answer naming the leader, in a failed
/// call's metadata or `ClusterStatus`) to `hint`, presenting its token there: when `hint` is
/// one of `endpoints`, or an `http://` or `https://` address with a host whose scheme is that
/// of every configured endpoint (a master added to the group later is followed, but a hint
/// never takes the token from TLS to plaintext, nor anywhere but a master's URL). Another hint
/// is ignored: the client asks its configured masters instead.
pub fn may_follow(endpoints: &[String], hint: &str) -> bool {
    if endpoints.iter().any(|e| e == hint) {
        return true;
    }
    let scheme = |address: &str| {
        address
            .parse::<tonic::codegen::http::Uri>()
            .ok()
            .filter(|uri| uri.host().is_some_and(|h| !h.is_empty()))
            .and_then(|uri| uri.scheme_str().map(str::to_owned))
            // Lowercase only, as `Tls::apply` reads it.
            .filter(|s| s == "http" || s == "https")
    };
    let Some(wanted) = scheme(hint) else {
        return false;
    };
    !endpoints.is_empty()
        && endpoints
            .iter()
            .all(|e| scheme(e).as_deref() == Some(wanted.as_str()))
}

/// Finds the leader among `endpoints` (trying `hint` first), waiting while none is elected.
/// Hints are followed only as [`may_follow`] allows.
async fn find_leader(
    endpoints: &[String],
    token: &BearerToken,
    tls: &Tls,
    hint: Option<&str>,
) -> Result<(String, Channel), ClientError> {
    let deadline = Instant::now() + FAILOVER_TIMEOUT;
    let mut next_hint = hint.filter(|h| may_follow(endpoints, h)).map(str::to_owned);
    let mut last_error = None;
    loop {
        let mut candidates: Vec<String> = next_hint.take().into_iter().collect();
        candidates.extend(endpoints.iter().cloned());
        let mut answered = false;
        for endpoint in candidates {
            let mut leader = None;
            match ask(&endpoint, token, tls, &mut leader).await {
                Ok(Some(channel)) => return Ok((endpoint, channel)),
                Ok(None) => {
                    answered = true;
                    if let Some(leader) = leader.filter(|l| may_follow(endpoints, l)) {
                        let mut again = None;
                        if let Ok(Some(channel)) = ask(&leader, token, tls, &mut again).await {
                            return Ok((leader, channel));
                        }
                    }
                }
                // A wrong token or another non-transient answer is final.
                Err(ClientError::Status(s)) if !is_failover(&s) => {
                    return Err(ClientError::Status(s));
                }
                Err(e) => last_error = Some(e),
            }
        }
        // Wait through an election only while some master answers: when none does, say so now.
        if !answered || Instant::now() >= deadline {
            return Err(last_error.unwrap_or_else(|| ClientError::Connect {
                endpoint: endpoints.join(","),
                message: "no leader elected among these masters".into(),
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}

#[cfg(test)]
mod tests {
    use super::may_follow;

    #[test]
    fn a_leader_hint_is_followed_only_to_a_master_of_the_same_scheme() {
        let tls = vec![
            "https://m1.example:7700".to_owned(),
            "https://m2.example:7700".to_owned(),
        ];
        assert!(may_follow(&tls, "https://m2.example:7700"));
        // A master added later, over TLS like the others (its certificate is checked).
        assert!(may_follow(&tls, "https://m4.example:7700"));
        // Never from TLS to plaintext, nor to something that is not a master's URL.
        assert!(!may_follow(&tls, "http://m4.example:7700"));
        assert!(!may_follow(&tls, "HTTP://m4.example:7700"));
        assert!(!may_follow(&tls, "m4.example:7700"));
        assert!(!may_follow(&tls, "unix:///tmp/socket"));
        assert!(!may_follow(&tls, "https://"));
        assert!(!may_follow(&tls, ""));
        let plain = vec!["http://10.0.0.1:7700".to_owned()];
        assert!(may_follow(&plain, "http://10.0.0.5:7700"));
        assert!(!may_follow(&plain, "ftp://10.0.0.5:7700"));
        // Mixed configured schemes: only the configured masters themselves.
        let mixed = vec![
            "http://10.0.0.1:7700".to_owned(),
            "https://m2.example:7700".to_owned(),
        ];
        assert!(may_follow(&mixed, "https://m2.example:7700"));
        assert!(!may_follow(&mixed, "https://m3.example:7700"));
        assert!(!may_follow(&mixed, "http://10.0.0.3:7700"));
    }
}

//! The client library ingestion services (and workers, and `symctl`) link to talk to a
//! symcluster master.
//!
//! Deliberately light: only the generated API (`symcluster-proto`) and tonic; no engine, no
//! storage. [`Client::connect`] opens one HTTP/2 channel and attaches the bearer token to every
//! call.
//!
//! ```no_run
//! # async fn demo() -> Result<(), symcluster_client::ClientError> {
//! let mut client = symcluster_client::Client::connect("http://127.0.0.1:7700", "secret").await?;
//! let report = std::fs::read("DemoApp.crash").unwrap();
//! client.submit_native("job-1", report).await?;
//! let job = client.wait("job-1").await?; // COMPLETED or FAILED
//! println!("{}", String::from_utf8_lossy(&job.result_json));
//! # Ok(()) }
//! ```

#![deny(missing_docs)]

use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

/// The generated gRPC clients and message types (`package symcluster.v1`).
pub use symcluster_proto::v1 as api;

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

/// A channel with the bearer token attached.
pub type AuthChannel = InterceptedService<Channel, BearerToken>;

/// A connection to a master.
#[derive(Clone)]
pub struct Client {
    channel: Channel,
    token: BearerToken,
}

impl Client {
    /// Connects to `endpoint` (`http://host:port`) with `token`.
    pub async fn connect(endpoint: &str, token: &str) -> Result<Self, ClientError> {
        let connect_error = |message: String| ClientError::Connect {
            endpoint: endpoint.to_owned(),
            message,
        };
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| connect_error(e.to_string()))?
            .connect_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| connect_error(format!("{e}: {}", source_chain(&e))))?;
        let token = format!("Bearer {token}")
            .parse()
            .map_err(|_| ClientError::BadToken)?;
        Ok(Client {
            channel,
            token: BearerToken(token),
        })
    }

    fn auth(&self) -> AuthChannel {
        InterceptedService::new(self.channel.clone(), self.token.clone())
    }

    /// The ingestion API.
    pub fn ingest(&self) -> IngestClient<AuthChannel> {
        IngestClient::new(self.auth()).max_decoding_message_size(64 << 20)
    }

    /// The worker API.
    pub fn worker_api(&self) -> WorkerApiClient<AuthChannel> {
        WorkerApiClient::new(self.auth()).max_decoding_message_size(64 << 20)
    }

    /// The admin API.
    pub fn admin(&self) -> AdminClient<AuthChannel> {
        AdminClient::new(self.auth())
    }

    /// Submits a native crash report (any format the engine reads) as job `job_id`.
    /// Idempotent by id: returns the job as stored and whether this call created it.
    pub async fn submit_native(
        &mut self,
        job_id: &str,
        report: Vec<u8>,
    ) -> Result<api::SubmitResponse, ClientError> {
        self.submit(api::JobSpec {
            job_id: job_id.to_owned(),
            payload: Some(api::job_spec::Payload::Native(api::NativeJob { report })),
        })
        .await
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
        })
        .await
    }

    /// Submits any job spec.
    pub async fn submit(&mut self, job: api::JobSpec) -> Result<api::SubmitResponse, ClientError> {
        Ok(self
            .ingest()
            .submit(api::SubmitRequest { job: Some(job) })
            .await?
            .into_inner())
    }

    /// Reads a job.
    pub async fn job(&mut self, job_id: &str) -> Result<api::Job, ClientError> {
        Ok(self
            .ingest()
            .get_job(api::GetJobRequest {
                job_id: job_id.to_owned(),
            })
            .await?
            .into_inner())
    }

    /// Watches a job until it is COMPLETED or FAILED, and returns it then.
    pub async fn wait(&mut self, job_id: &str) -> Result<api::Job, ClientError> {
        let mut stream = self
            .ingest()
            .watch_job(api::GetJobRequest {
                job_id: job_id.to_owned(),
            })
            .await?
            .into_inner();
        while let Some(job) = stream.message().await? {
            let state = api::JobState::try_from(job.state).unwrap_or_default();
            if matches!(state, api::JobState::Completed | api::JobState::Failed) {
                return Ok(job);
            }
        }
        Err(ClientError::WatchEnded(job_id.to_owned()))
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

//! Where debug files and source maps come from: an S3 bucket (`aws-sdk-s3`, any S3-compatible
//! server) or a local directory with the same layout ([`crate::layout`]).
//!
//! A fetch distinguishes "not there" (`Ok(None)`, cacheable as a miss) from "could not ask"
//! (`Err`, never cached: the next job tries again). S3 requests are retried with exponential
//! backoff by the SDK's standard retry mode, each attempt bounded by a timeout, so a dead S3
//! costs a job at most `attempts × timeout` plus backoff, never a hang.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_s3::config::{retry::RetryConfig, timeout::TimeoutConfig, BehaviorVersion, Region};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::config::WorkerConfig;

/// Why a fetch failed (the source could not be asked, or answered with an error).
#[derive(Debug, Clone, thiserror::Error)]
#[error("fetching {key} failed: {message}")]
pub struct FetchError {
    /// The object key.
    pub key: String,
    /// What went wrong (one line).
    pub message: String,
}

/// A source of files by key.
#[derive(Debug, Clone)]
pub enum Source {
    /// An S3 bucket.
    S3 {
        /// The client (endpoint, region, credentials, retries, timeouts configured).
        client: aws_sdk_s3::Client,
        /// The bucket.
        bucket: String,
    },
    /// A local directory.
    Dir(PathBuf),
}

impl Source {
    /// The source `config` describes: `--source-dir`, or the S3 bucket. Credentials come from the
    /// usual AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, profiles).
    pub async fn from_config(config: &WorkerConfig) -> anyhow::Result<Self> {
        if let Some(dir) = &config.source_dir {
            return Ok(Source::Dir(dir.clone()));
        }
        let Some(bucket) = &config.s3_bucket else {
            anyhow::bail!("no debug file source: give --s3-bucket or --source-dir");
        };
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(config.s3_region.clone()))
            .load()
            .await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(true)
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(config.s3_attempts.max(1))
                    .with_initial_backoff(Duration::from_millis(100)),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_millis(config.s3_timeout_ms))
                    .operation_attempt_timeout(Duration::from_millis(config.s3_timeout_ms))
                    .build(),
            );
        if let Some(endpoint) = &config.s3_endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        Ok(Source::S3 {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: bucket.clone(),
        })
    }

    /// Fetches `key`: `Ok(None)` when it does not exist.
    pub async fn fetch(&self, key: &str) -> Result<Option<Vec<u8>>, FetchError> {
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        match self {
            Source::Dir(dir) => match tokio::fs::read(dir.join(key)).await {
                Ok(bytes) => Ok(Some(bytes)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(fail(e.to_string())),
            },
            Source::S3 { client, bucket } => {
                let response = client.get_object().bucket(bucket).key(key).send().await;
                match response {
                    Ok(object) => {
                        let body = object
                            .body
                            .collect()
                            .await
                            .map_err(|e| fail(format!("reading the body: {e}")))?;
                        Ok(Some(body.into_bytes().to_vec()))
                    }
                    Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => Ok(None),
                    Err(e) => Err(fail(describe_sdk_error(&e))),
                }
            }
        }
    }
}

fn describe_sdk_error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug + 'static>(
    e: &SdkError<E, R>,
) -> String {
    match e {
        SdkError::ServiceError(s) => format!(
            "{}: {}",
            s.err().code().unwrap_or("error"),
            s.err().message().unwrap_or("no message")
        ),
        SdkError::TimeoutError(_) => "timed out".into(),
        SdkError::DispatchFailure(d) => format!("cannot reach S3 ({d:?})")
            .chars()
            .take(200)
            .collect(),
        other => {
            let mut text = other.to_string();
            let mut cur = std::error::Error::source(other);
            while let Some(s) = cur {
                text.push_str(": ");
                text.push_str(&s.to_string());
                cur = s.source();
            }
            text
        }
    }
}

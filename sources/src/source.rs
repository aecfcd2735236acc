//! Where debug files and source maps come from (and where `symctl upload` puts them): an S3
//! bucket (`aws-sdk-s3`, any S3-compatible server) or a local directory with the same layout
//! ([`crate::layout`]).
//!
//! A fetch distinguishes "not there" (`Ok(None)`, cacheable as a miss) from "could not ask"
//! (`Err`, never cached: the next job tries again). S3 requests are retried with exponential
//! backoff by the SDK's standard retry mode, each attempt bounded by a timeout, so a dead S3
//! costs a job at most `attempts × timeout` plus backoff, never a hang.
//!
//! Every method first refuses a key with an empty, `.` or `..` segment
//! ([`crate::layout::check_key`]): a key never names a file outside the directory, or an object
//! outside the prefix it was built under.

use std::path::PathBuf;
use std::time::Duration;

use aws_sdk_s3::config::{BehaviorVersion, Region, retry::RetryConfig, timeout::TimeoutConfig};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_http_client::tls;

/// Why a fetch failed (the source could not be asked, or answered with an error).
#[derive(Debug, Clone, thiserror::Error)]
#[error("fetching {key} failed: {message}")]
pub struct FetchError {
    /// The object key.
    pub key: String,
    /// What went wrong (one line).
    pub message: String,
}

/// What [`Source::put_body`] stores: bytes in memory, or a file streamed from disk.
enum Body<'a> {
    Bytes(Vec<u8>),
    File(&'a std::path::Path),
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

/// How to reach an S3 bucket.
#[derive(Debug, Clone)]
pub struct S3Settings {
    /// The bucket.
    pub bucket: String,
    /// Endpoint URL of an S3-compatible server (`None`: AWS).
    pub endpoint: Option<String>,
    /// Region (must match the server's, for signing).
    pub region: String,
    /// Attempts per request.
    pub attempts: u32,
    /// Per-attempt timeout, ms.
    pub timeout_ms: u64,
}

impl Source {
    /// An S3 source. Credentials come from the usual AWS environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, profiles); requests use path-style addressing.
    pub async fn s3(config: &S3Settings) -> Self {
        // HTTPS through rustls with ring (trusting the platform's roots), for S3 and for the
        // credential providers alike.
        let https = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let shared = aws_config::defaults(BehaviorVersion::latest())
            .http_client(https)
            .region(Region::new(config.region.clone()))
            .load()
            .await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(true)
            // Checksums only where an operation requires one: with the default (a CRC trailer
            // on every upload, in aws-chunked encoding), S3-compatible servers such as Garage
            // refuse bodies streamed from a file ("Invalid payload signature").
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(config.attempts.max(1))
                    .with_initial_backoff(Duration::from_millis(100)),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_millis(config.timeout_ms))
                    .operation_attempt_timeout(Duration::from_millis(config.timeout_ms))
                    .build(),
            );
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        Source::S3 {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: config.bucket.clone(),
        }
    }

    /// Whether `key` exists (an upload skips what is already there).
    pub async fn exists(&self, key: &str) -> Result<bool, FetchError> {
        checked(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        match self {
            Source::Dir(dir) => Ok(tokio::fs::try_exists(dir.join(key))
                .await
                .map_err(|e| fail(e.to_string()))?),
            Source::S3 { client, bucket } => {
                match client.head_object().bucket(bucket).key(key).send().await {
                    Ok(_) => Ok(true),
                    Err(SdkError::ServiceError(e)) if e.err().is_not_found() => Ok(false),
                    Err(e) => Err(fail(describe_sdk_error(&e))),
                }
            }
        }
    }

    /// A tag that changes whenever the object at `key` is replaced, usable in a key (letters,
    /// digits, `-`, `_`): S3's ETag and the size in bytes; for a directory, the file's size and
    /// modification time (ns). `Ok(None)` when there is no such object. One `HEAD` request.
    pub async fn version(&self, key: &str) -> Result<Option<String>, FetchError> {
        checked(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let tag = match self {
            Source::Dir(dir) => match tokio::fs::metadata(dir.join(key)).await {
                Ok(meta) => {
                    let modified = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos());
                    format!("{}-{modified}", meta.len())
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(fail(e.to_string())),
            },
            Source::S3 { client, bucket } => {
                match client.head_object().bucket(bucket).key(key).send().await {
                    Ok(head) => format!(
                        "{}-{}",
                        head.e_tag().unwrap_or_default(),
                        head.content_length().unwrap_or_default()
                    ),
                    Err(SdkError::ServiceError(e)) if e.err().is_not_found() => return Ok(None),
                    Err(e) => return Err(fail(describe_sdk_error(&e))),
                }
            }
        };
        Ok(Some(
            tag.chars()
                .filter(|c| *c != '"')
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect(),
        ))
    }

    /// Stores `bytes` under `key`.
    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), FetchError> {
        self.put_body(key, Body::Bytes(bytes)).await
    }

    /// Stores the file at `path` under `key`, streamed from disk (never whole in memory).
    pub async fn put_file(&self, key: &str, path: &std::path::Path) -> Result<(), FetchError> {
        self.put_body(key, Body::File(path)).await
    }

    async fn put_body(&self, key: &str, body: Body<'_>) -> Result<(), FetchError> {
        checked(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        match self {
            Source::Dir(dir) => {
                // Written beside the target and renamed over it: a reader (a worker that maps
                // the file) never sees it half written or cut short.
                let target = dir.join(key);
                let body = match body {
                    Body::Bytes(bytes) => Ok(bytes),
                    Body::File(path) => Err(path.to_owned()),
                };
                tokio::task::spawn_blocking(move || {
                    let parent = target.parent().unwrap_or(std::path::Path::new("."));
                    std::fs::create_dir_all(parent)?;
                    let mut file = tempfile::Builder::new()
                        .prefix(".tmp-")
                        .tempfile_in(parent)?;
                    match body {
                        Ok(bytes) => std::io::Write::write_all(&mut file, &bytes)?,
                        Err(path) => {
                            std::io::copy(&mut std::fs::File::open(path)?, &mut file)?;
                        }
                    }
                    file.persist(&target).map(|_| ()).map_err(|e| e.error)
                })
                .await
                .map_err(|e| fail(e.to_string()))?
                .map_err(|e| fail(e.to_string()))
            }
            Source::S3 { client, bucket } => {
                let body =
                    match body {
                        Body::Bytes(bytes) => bytes.into(),
                        Body::File(path) => aws_sdk_s3::primitives::ByteStream::from_path(path)
                            .await
                            .map_err(|e| fail(format!("reading {}: {e}", path.display())))?,
                    };
                client
                    .put_object()
                    .bucket(bucket)
                    .key(key)
                    .body(body)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| fail(describe_sdk_error(&e)))
            }
        }
    }

    /// Fetches `key`: `Ok(None)` when it does not exist.
    pub async fn fetch(&self, key: &str) -> Result<Option<Vec<u8>>, FetchError> {
        checked(key)?;
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

/// [`crate::layout::check_key`] as a [`FetchError`].
pub(crate) fn checked(key: &str) -> Result<(), FetchError> {
    crate::layout::check_key(key).map_err(|e| FetchError {
        key: key.to_owned(),
        message: e.to_string(),
    })
}

pub(crate) fn describe_sdk_error<
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug + 'static,
>(
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
        // The error and its causes on one line (the SDK's own chain formatter).
        other => aws_sdk_s3::error::DisplayErrorContext(other).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_directory_source_reads_nothing_outside_its_keys() {
        let dir = tempfile::tempdir().unwrap();
        let source = Source::Dir(dir.path().join("bucket"));
        source
            .put("projects/b/secret", b"b's".to_vec())
            .await
            .unwrap();
        source.put("projects/a/x", b"a's".to_vec()).await.unwrap();
        assert_eq!(
            source.fetch("projects/a/x").await.unwrap(),
            Some(b"a's".to_vec())
        );
        let climb = "projects/a/../b/secret";
        let refused = source.fetch(climb).await.unwrap_err();
        assert_eq!(
            refused.to_string(),
            "fetching projects/a/../b/secret failed: \
             the key \"projects/a/../b/secret\" has a \"..\" segment"
        );
        assert!(source.exists(climb).await.is_err());
        assert!(source.version(climb).await.is_err());
        assert!(
            source
                .put("projects/a/../../escaped", Vec::new())
                .await
                .is_err()
        );
        assert!(!dir.path().join("escaped").exists());
    }
}

//! Downloads of big objects (debug files of hundreds of MB to GBs) to a file, streamed: the
//! object never sits in memory whole, its time is bounded by its size, and a transfer cut off
//! half-way resumes where it stopped with a ranged GET (RFC 9110 §14.2 `Range: bytes=N-`,
//! guarded by `If-Match` on the first response's ETag so that a replaced object is never
//! stitched onto the old one's first half).
//!
//! The S3 client's own per-attempt timeout covers a request until its response headers; the
//! body is bounded here instead: no chunk for [`DownloadLimits::idle_timeout`] is a stall, and
//! the whole body must arrive by `idle_timeout + size / min_bytes_per_sec`, so a 2 GB dSYM is
//! given the time its size needs while a stalled transfer of any size ends quickly.

use std::time::{Duration, Instant};

use aws_sdk_s3::error::SdkError;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::source::{FetchError, Source, describe_sdk_error};

/// How a download's time is bounded, and how often it may resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DownloadLimits {
    /// A transfer that delivers no byte for this long is stalled: it is cut and resumed.
    pub idle_timeout: Duration,
    /// The slowest transfer rate tolerated, bytes per second: an object of `n` bytes must be
    /// whole within `idle_timeout + n / min_bytes_per_sec`, resumes included.
    pub min_bytes_per_sec: u64,
    /// At most this many resumes (ranged GETs after a cut transfer) per download.
    pub max_resumes: u32,
}

impl Default for DownloadLimits {
    /// 30 s without a byte, 1 MiB/s at the slowest (a 2 GB file: 35 minutes), 5 resumes.
    fn default() -> Self {
        DownloadLimits {
            idle_timeout: Duration::from_secs(30),
            min_bytes_per_sec: 1 << 20,
            max_resumes: 5,
        }
    }
}

impl DownloadLimits {
    /// The time a whole object of `size` bytes may take.
    pub fn allowed(&self, size: u64) -> Duration {
        self.idle_timeout
            + Duration::from_secs_f64(size as f64 / self.min_bytes_per_sec.max(1) as f64)
    }
}

/// Where a downloaded object is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    /// Its size in bytes.
    pub bytes: u64,
    /// How many times the transfer was cut and resumed with a ranged GET.
    pub resumes: u32,
}

impl Source {
    /// Downloads `key` into `file` (from its start; it is truncated to the object's size),
    /// streamed, bounded by `limits`, resumed with ranged GETs when the transfer is cut;
    /// `progress` is called with the length of each chunk written. `Ok(None)` when there is
    /// no such object.
    ///
    /// Errors: the object could not be asked for, the transfer stalled or was cut more than
    /// `limits.max_resumes` times, it did not end within [`DownloadLimits::allowed`] for its
    /// size, or `file` could not be written. The message says which, with the bytes received.
    pub async fn download_to(
        &self,
        key: &str,
        file: &mut tokio::fs::File,
        limits: &DownloadLimits,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<Option<Downloaded>, FetchError> {
        crate::source::checked(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let (client, bucket) = match self {
            Source::S3 { client, bucket } => (client, bucket),
            Source::Dir(dir) => {
                let mut from = match tokio::fs::File::open(dir.join(key)).await {
                    Ok(from) => from,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(fail(e.to_string())),
                };
                file.set_len(0).await.map_err(|e| fail(e.to_string()))?;
                let bytes = tokio::io::copy(&mut from, file)
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                progress(bytes);
                return Ok(Some(Downloaded { bytes, resumes: 0 }));
            }
        };
        let started = Instant::now();
        let mut written = 0u64;
        let mut resumes = 0u32;
        // The object's ETag and size, from the first response.
        let mut object: Option<(Option<String>, u64)> = None;
        let mut last_error = String::new();
        loop {
            if resumes > limits.max_resumes {
                return Err(fail(format!(
                    "cut {} times, {written} bytes received; last: {last_error}",
                    limits.max_resumes + 1
                )));
            }
            let deadline = object
                .as_ref()
                .map(|(_, size)| started + limits.allowed(*size));
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(fail(too_slow(written, object.map_or(0, |o| o.1), limits)));
            }
            let mut request = client.get_object().bucket(bucket).key(key);
            if let Some((etag, _)) = &object {
                request = request.range(format!("bytes={written}-"));
                if let Some(etag) = etag {
                    request = request.if_match(etag);
                }
            }
            // A resume's request is bounded by what is left of the object's time too.
            let sent = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(left, request.send()).await {
                        Ok(sent) => sent,
                        Err(_) => {
                            return Err(fail(too_slow(written, object.map_or(0, |o| o.1), limits)));
                        }
                    }
                }
                None => request.send().await,
            };
            let response = match sent {
                Ok(response) => response,
                Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => return Ok(None),
                Err(e) if e.raw_response().is_some_and(|r| r.status().as_u16() == 412) => {
                    // Replaced since the first response: start again from its first byte.
                    object = None;
                    written = 0;
                    resumes += 1;
                    last_error = "the object was replaced during the download".into();
                    continue;
                }
                Err(e) if object.is_none() => return Err(fail(describe_sdk_error(&e))),
                Err(e) => {
                    last_error = describe_sdk_error(&e);
                    resumes += 1;
                    tokio::time::sleep(backoff(resumes)).await;
                    continue;
                }
            };
            // A resume must continue at `written`: a server that ignored the range (a whole
            // body, `200`) or answered another one starts the file again from its first byte.
            let resumed_at = response
                .content_range()
                .and_then(|r| r.strip_prefix("bytes "))
                .and_then(|r| r.split_once('-'))
                .and_then(|(first, _)| first.parse::<u64>().ok());
            if object.is_some() && resumed_at != Some(written) {
                object = None;
                written = 0;
                if resumed_at.is_some() {
                    // Another range: ask for the whole object again.
                    resumes += 1;
                    last_error = "the server answered another range".into();
                    continue;
                }
            }
            if object.is_none() {
                let Some(size) = response
                    .content_length()
                    .and_then(|n| u64::try_from(n).ok())
                else {
                    return Err(fail("the response has no Content-Length".into()));
                };
                // Whole bodies only here: a ranged answer was dropped just above.
                object = Some((response.e_tag().map(str::to_owned), size));
                file.set_len(0).await.map_err(|e| fail(e.to_string()))?;
                file.seek(std::io::SeekFrom::Start(0))
                    .await
                    .map_err(|e| fail(e.to_string()))?;
            }
            let size = object.as_ref().map_or(0, |o| o.1);
            let deadline = started + limits.allowed(size);
            let mut body = response.body;
            let cut = loop {
                let wait = limits
                    .idle_timeout
                    .min(deadline.saturating_duration_since(Instant::now()));
                match tokio::time::timeout(wait, body.next()).await {
                    Ok(Some(Ok(chunk))) => {
                        if written + chunk.len() as u64 > size {
                            return Err(fail(format!(
                                "the server sent more than the object's {size} bytes"
                            )));
                        }
                        file.write_all(&chunk)
                            .await
                            .map_err(|e| fail(format!("writing the download: {e}")))?;
                        written += chunk.len() as u64;
                        progress(chunk.len() as u64);
                    }
                    Ok(None) => break None,
                    Ok(Some(Err(e))) => break Some(format!("reading the body: {e}")),
                    Err(_) if Instant::now() >= deadline => {
                        return Err(fail(too_slow(written, size, limits)));
                    }
                    Err(_) => {
                        break Some(format!(
                            "no byte for {} ms",
                            limits.idle_timeout.as_millis()
                        ));
                    }
                }
            };
            match cut {
                // Whole, even when the transfer was cut after its last byte.
                _ if written >= size => {
                    file.flush().await.map_err(|e| fail(e.to_string()))?;
                    return Ok(Some(Downloaded {
                        bytes: written,
                        resumes,
                    }));
                }
                None => last_error = format!("the body ended at {written} of {size} bytes"),
                Some(reason) => last_error = reason,
            }
            tracing::info!(key, written, size, reason = %last_error, "download cut; resuming");
            resumes += 1;
        }
    }
}

/// The message of a download that did not end in the time its size allows.
fn too_slow(written: u64, size: u64, limits: &DownloadLimits) -> String {
    format!(
        "not whole within {} ms ({written} of {size} bytes; the slowest rate allowed is {} bytes/s)",
        limits.allowed(size).as_millis(),
        limits.min_bytes_per_sec
    )
}

/// The wait before resume `n` (1-based) whose request failed: 200 ms doubling, at most 5 s.
fn backoff(n: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << n.min(5).saturating_sub(1)))
        .min(Duration::from_secs(5))
}

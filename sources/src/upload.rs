//! Uploads through presigned S3 requests: what the masters' `Uploads` service asks of the bucket
//! so that build machines upload with no bucket credentials (`symctl upload`).
//!
//! - A file of at most [`MULTIPART_THRESHOLD`] bytes goes in one presigned `PUT` that carries
//!   its SHA-256 (`x-amz-checksum-sha256`, which S3 verifies before it stores the object) and the
//!   same digest in hex as user metadata (`x-amz-meta-sha256`), both signed: the object is the
//!   file declared, or nothing.
//! - A larger one goes as a multipart upload (S3's `CreateMultipartUpload` with the `SHA256`
//!   checksum algorithm, `UploadPart` presigned per part with the part's SHA-256,
//!   `CompleteMultipartUpload`), cut every [`part_size`] bytes; the whole file's SHA-256 is the
//!   upload's metadata. An unfinished upload of the same content (its id recorded beside the
//!   key, [`upload_record_key`]) is resumed when its parts' sizes and checksums fit
//!   ([`Source::resumable_upload`]); one that does not fit is aborted.
//! - [`Source::stored`] reads what the bucket holds under a key (size and SHA-256), which makes
//!   a second upload of the same file send nothing.
//!
//! Checksums: SHA-256 (FIPS 180-4); S3 additional checksums as Amazon S3's "Checking object
//! integrity" documents them (base64 of the digest; a multipart object's is the digest of its
//! parts' digests, `-N`, which is why the whole file's digest is kept in metadata as well).

use std::time::Duration;

use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::presigning::{PresignedRequest, PresigningConfig};
use aws_sdk_s3::types::{ChecksumAlgorithm, ChecksumMode, CompletedMultipartUpload, CompletedPart};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::source::{checked, describe_sdk_error};
use crate::{FetchError, Source};

/// Files larger than this many bytes go as multipart uploads (64 MiB).
pub const MULTIPART_THRESHOLD: u64 = 64 << 20;

/// The smallest part, bytes (16 MiB; S3's minimum is 5 MiB).
pub const MIN_PART_SIZE: u64 = 16 << 20;

/// S3's largest number of parts in one upload.
pub const MAX_PARTS: u64 = 10_000;

/// The user-metadata name under which an uploaded object keeps the SHA-256 of its whole content
/// (hex, lowercase): `x-amz-meta-sha256`.
pub const SHA256_METADATA: &str = "sha256";

/// Bytes per part of a multipart upload of a file of `size` bytes: [`MIN_PART_SIZE`], or more so
/// that there are at most [`MAX_PARTS`] parts, rounded up to a whole MiB. Client and masters
/// both cut files with it, so that part checksums computed on the build machine match.
pub fn part_size(size: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    let needed = size.div_ceil(MAX_PARTS).div_ceil(MIB) * MIB;
    needed.max(MIN_PART_SIZE)
}

/// How many parts a file of `size` bytes has ([`part_size`]); at least 1.
pub fn part_count(size: u64) -> u64 {
    size.div_ceil(part_size(size)).max(1)
}

/// An HTTP request to make as it is: method, URL and the headers that were signed with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Presigned {
    /// `PUT`.
    pub method: String,
    /// The URL, its signature in the query.
    pub url: String,
    /// Headers to send exactly (name, value).
    pub headers: Vec<(String, String)>,
}

impl From<PresignedRequest> for Presigned {
    fn from(request: PresignedRequest) -> Self {
        Presigned {
            method: request.method().to_owned(),
            url: request.uri().to_owned(),
            headers: request
                .headers()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
        }
    }
}

/// What the bucket holds under a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Bytes.
    pub size: u64,
    /// SHA-256 of the whole object, when known: the `sha256` metadata an upload through the
    /// masters writes, or S3's own checksum of an object put in one request with a SHA-256.
    pub sha256: Option<[u8; 32]>,
}

/// A part already uploaded in an unfinished multipart upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedPart {
    /// 1-based.
    pub number: u32,
    /// Bytes.
    pub size: u64,
    /// S3's ETag.
    pub etag: String,
    /// S3's SHA-256 of the part (as S3 verified it), when it has one.
    pub sha256: Option<[u8; 32]>,
}

/// Base64 of a digest, as S3's `x-amz-checksum-*` headers carry it.
pub fn checksum_header(digest: &[u8; 32]) -> String {
    BASE64.encode(digest)
}

fn decode_digest(text: &str) -> Option<[u8; 32]> {
    BASE64.decode(text).ok()?.try_into().ok()
}

fn decode_hex_digest(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl Source {
    fn s3_only(&self, key: &str) -> Result<(&aws_sdk_s3::Client, &str), FetchError> {
        checked(key)?;
        match self {
            Source::S3 { client, bucket } => Ok((client, bucket)),
            Source::Dir(_) => Err(FetchError {
                key: key.to_owned(),
                message: "presigned uploads need an S3 bucket, not a directory".into(),
            }),
        }
    }

    /// What the bucket holds under `key` (one `HEAD`, checksums asked for); `Ok(None)` when
    /// nothing. For a directory source, the file's size only.
    pub async fn stored(&self, key: &str) -> Result<Option<Stored>, FetchError> {
        checked(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let (client, bucket) = match self {
            Source::Dir(dir) => {
                return match tokio::fs::metadata(dir.join(key)).await {
                    Ok(meta) => Ok(Some(Stored {
                        size: meta.len(),
                        sha256: None,
                    })),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(fail(e.to_string())),
                };
            }
            Source::S3 { client, bucket } => (client, bucket),
        };
        match client
            .head_object()
            .bucket(bucket)
            .key(key)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
        {
            Ok(head) => {
                let from_metadata = head
                    .metadata()
                    .and_then(|m| m.get(SHA256_METADATA))
                    .and_then(|v| decode_hex_digest(v));
                // A multipart object's checksum is of its parts (`…-N`): not the content's.
                let from_checksum = head
                    .checksum_sha256()
                    .filter(|c| !c.contains('-'))
                    .and_then(decode_digest);
                Ok(Some(Stored {
                    size: head.content_length().unwrap_or_default().max(0) as u64,
                    sha256: from_metadata.or(from_checksum),
                }))
            }
            Err(SdkError::ServiceError(e)) if e.err().is_not_found() => Ok(None),
            Err(e) => Err(fail(describe_sdk_error(&e))),
        }
    }

    /// A presigned `PUT` of `size` bytes whose SHA-256 is `sha256` to `key`, valid for
    /// `expires_in`: S3 refuses a body with another digest (`BadDigest`) and the request after
    /// its expiry (`AccessDenied`).
    pub async fn presign_put(
        &self,
        key: &str,
        size: u64,
        sha256: &[u8; 32],
        expires_in: Duration,
    ) -> Result<Presigned, FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let config = PresigningConfig::expires_in(expires_in).map_err(|e| fail(e.to_string()))?;
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .content_length(size as i64)
            .checksum_sha256(checksum_header(sha256))
            .metadata(SHA256_METADATA, hex(sha256))
            .presigned(config)
            .await
            .map(Presigned::from)
            .map_err(|e| fail(describe_sdk_error(&e)))
    }

    /// The unfinished multipart upload of `key` started for content whose SHA-256 is `sha256`
    /// ([`Self::create_upload`] records its id beside the key, [`upload_record_key`]), with the
    /// parts uploaded so far, when all of them fit a file of `size` bytes cut with `part_sha256`
    /// (each part's size per [`part_size`], and its checksum); `Ok(None)` when there is none. An
    /// upload recorded for this content whose parts do not fit is aborted.
    pub async fn resumable_upload(
        &self,
        key: &str,
        size: u64,
        sha256: &[u8; 32],
        part_sha256: &[[u8; 32]],
    ) -> Result<Option<(String, Vec<UploadedPart>)>, FetchError> {
        self.s3_only(key)?;
        let record = upload_record_key(key, sha256);
        let Some(upload_id) = self.fetch(&record).await? else {
            return Ok(None);
        };
        let Ok(upload_id) = String::from_utf8(upload_id) else {
            return Ok(None);
        };
        let parts = match self.uploaded_parts(key, &upload_id).await {
            Ok(parts) => parts,
            // Completed or aborted since: start again.
            Err(e) if is_no_such_upload(&e) => return Ok(None),
            Err(e) => return Err(e),
        };
        let fits = parts.iter().all(|part| {
            let index = part.number as usize - 1;
            index < part_sha256.len()
                && part.size == expected_part_size(size, part.number)
                && part.sha256 == Some(part_sha256[index])
        });
        if fits {
            return Ok(Some((upload_id, parts)));
        }
        self.abort_upload(key, &upload_id).await?;
        Ok(None)
    }

    /// Deletes the record of the multipart upload of `key` for content `sha256`
    /// ([`upload_record_key`]) once it is complete.
    pub async fn forget_upload(&self, key: &str, sha256: &[u8; 32]) -> Result<(), FetchError> {
        let record = upload_record_key(key, sha256);
        let (client, bucket) = self.s3_only(&record)?;
        client
            .delete_object()
            .bucket(bucket)
            .key(&record)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| FetchError {
                key: record.clone(),
                message: describe_sdk_error(&e),
            })
    }

    /// Aborts `upload_id` of `key` (its parts are deleted); one that is gone already is fine.
    pub async fn abort_upload(&self, key: &str, upload_id: &str) -> Result<(), FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        match client
            .abort_multipart_upload()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = FetchError {
                    key: key.to_owned(),
                    message: describe_sdk_error(&e),
                };
                if is_no_such_upload(&error) {
                    Ok(())
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Starts a multipart upload of `key` whose whole content's SHA-256 is `sha256` (kept as
    /// metadata), parts checksummed with SHA-256, and records its id beside the key
    /// ([`upload_record_key`]) so that an upload of the same content resumes it; its upload id.
    pub async fn create_upload(&self, key: &str, sha256: &[u8; 32]) -> Result<String, FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let created = client
            .create_multipart_upload()
            .bucket(bucket)
            .key(key)
            .checksum_algorithm(ChecksumAlgorithm::Sha256)
            .metadata(SHA256_METADATA, hex(sha256))
            .send()
            .await
            .map_err(|e| fail(describe_sdk_error(&e)))?;
        let upload_id = created
            .upload_id()
            .map(str::to_owned)
            .ok_or_else(|| fail("S3 answered no upload id".into()))?;
        self.put(
            &upload_record_key(key, sha256),
            upload_id.clone().into_bytes(),
        )
        .await?;
        Ok(upload_id)
    }

    /// A presigned `UploadPart` of part `number` (1-based, `size` bytes, SHA-256 `sha256`) of
    /// `upload_id`, valid for `expires_in`.
    pub async fn presign_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        size: u64,
        sha256: &[u8; 32],
        expires_in: Duration,
    ) -> Result<Presigned, FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        let fail = |message: String| FetchError {
            key: key.to_owned(),
            message,
        };
        let config = PresigningConfig::expires_in(expires_in).map_err(|e| fail(e.to_string()))?;
        client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number as i32)
            .content_length(size as i64)
            .checksum_sha256(checksum_header(sha256))
            .presigned(config)
            .await
            .map(Presigned::from)
            .map_err(|e| fail(describe_sdk_error(&e)))
    }

    /// Every part uploaded so far to `upload_id`, by number.
    pub async fn uploaded_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = client
                .list_parts()
                .bucket(bucket)
                .key(key)
                .upload_id(upload_id)
                .set_part_number_marker(marker.clone())
                .send()
                .await
                .map_err(|e| FetchError {
                    key: key.to_owned(),
                    message: describe_sdk_error(&e),
                })?;
            for part in page.parts() {
                let (Some(number), Some(etag)) = (part.part_number(), part.e_tag()) else {
                    continue;
                };
                parts.push(UploadedPart {
                    number: number.max(1) as u32,
                    size: part.size().unwrap_or_default().max(0) as u64,
                    etag: etag.to_owned(),
                    sha256: part.checksum_sha256().and_then(decode_digest),
                });
            }
            match (page.is_truncated(), page.next_part_number_marker()) {
                (Some(true), Some(next)) if marker.as_deref() != Some(next) => {
                    marker = Some(next.to_owned())
                }
                _ => break,
            }
        }
        parts.sort_by_key(|p| p.number);
        Ok(parts)
    }

    /// Completes `upload_id` of `key` with `parts` (every part, in order).
    pub async fn complete_upload(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[UploadedPart],
    ) -> Result<(), FetchError> {
        let (client, bucket) = self.s3_only(key)?;
        let completed = parts
            .iter()
            .map(|part| {
                CompletedPart::builder()
                    .part_number(part.number as i32)
                    .e_tag(&part.etag)
                    .set_checksum_sha256(part.sha256.as_ref().map(checksum_header))
                    .build()
            })
            .collect();
        client
            .complete_multipart_upload()
            .bucket(bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(completed))
                    .build(),
            )
            .send()
            .await
            .map(|_| ())
            .map_err(|e| FetchError {
                key: key.to_owned(),
                message: describe_sdk_error(&e),
            })
    }
}

/// Where the id of the multipart upload of `key` for content of SHA-256 `sha256` is recorded
/// while it is unfinished: beside the key (`<key>.upload-<sha256 hex>`), a few bytes no worker
/// reads. Deleted once the upload is confirmed.
pub fn upload_record_key(key: &str, sha256: &[u8; 32]) -> String {
    format!("{key}.upload-{}", hex(sha256))
}

/// Whether `error` is S3's `NoSuchUpload` (the multipart upload was completed or aborted).
pub fn is_no_such_upload(error: &FetchError) -> bool {
    error.message.starts_with("NoSuchUpload")
}

/// The size of part `number` (1-based) of a file of `size` bytes ([`part_size`]); 0 past its
/// end.
pub fn expected_part_size(size: u64, number: u32) -> u64 {
    let each = part_size(size);
    let start = (number as u64).saturating_sub(1) * each;
    size.saturating_sub(start).min(each)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_16_mib_until_ten_thousand_would_not_hold_the_file() {
        assert_eq!(part_size(100 << 20), 16 << 20);
        assert_eq!(part_count(100 << 20), 7);
        assert_eq!(expected_part_size(100 << 20, 7), 4 << 20);
        assert_eq!(expected_part_size(100 << 20, 8), 0);
        // 200 GiB: 10,000 parts of 16 MiB would hold 156 GiB only.
        let big = 200u64 << 30;
        assert_eq!(part_size(big), 21 << 20);
        assert!(part_count(big) <= MAX_PARTS);
        assert_eq!(part_count(0), 1);
    }

    #[test]
    fn digests_read_back_from_their_header_and_metadata_forms() {
        let digest = [7u8; 32];
        assert_eq!(decode_digest(&checksum_header(&digest)), Some(digest));
        assert_eq!(decode_hex_digest(&hex(&digest)), Some(digest));
        assert_eq!(decode_hex_digest("07"), None);
        assert_eq!(decode_digest("not base64!"), None);
    }
}

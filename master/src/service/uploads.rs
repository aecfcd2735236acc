//! `symcluster.v1.Uploads`: uploads of debug files and source maps by build machines that hold a
//! project's `upload` token and no bucket credentials.
//!
//! ```text
//! symctl ─PrepareUpload(files: kind, size, SHA-256[, part SHA-256s])─► any master
//!        ◄─ per file: present | presigned PUT | multipart parts to send, and a ticket
//!        ─PUT (bytes straight to S3; S3 checks each body's SHA-256)─► bucket
//!        ─ConfirmUpload(key, size, SHA-256, upload id, ticket; missing keys)─► leader:
//!          ticket checked (upload_ticket.rs), multipart completed, the object's size and
//!          SHA-256 checked ─► jobs that lacked the files queued again (FilesUploaded's way)
//! ```
//!
//! Keys are made here from what each file is ([`symcluster_sources::layout`]) under the prefix
//! of the caller's project (or `shared/` for an admin token), so a token writes into its
//! projects only. Nothing of an upload goes through Raft but the requeues it causes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use symcluster_proto::v1::{self, uploads_server::Uploads};
use symcluster_sources::upload::{self, Presigned, UploadedPart};
use symcluster_sources::{FetchError, Scope, Source, layout};
use tonic::{Request, Response, Status};

use super::upload_ticket::{Ticketed, Tickets, parts_digest};
use super::{require_leader, schedule_status};
use crate::auth;
use crate::index::command::now_ms;
use crate::scheduler::Scheduler;

/// Most files one `PrepareUpload` or `ConfirmUpload` names.
pub const MAX_UPLOAD_FILES: usize = 1_000;

/// Most keys a `ConfirmUpload` announces (each one looked up in the bucket).
const MAX_MISSING_KEYS: usize = 1_000;

/// Most parts one `PrepareUpload` presigns, across its files (the rest: prepared again).
pub const MAX_PRESIGNED_PARTS: usize = 1_000;

/// S3's largest object, bytes (5 TiB).
const MAX_OBJECT_BYTES: u64 = 5 << 40;

/// Bucket requests in flight for one call.
const CONCURRENT_REQUESTS: usize = 16;

/// The bucket uploads go to: its source and the operator's key prefix (`--s3-prefix`).
#[derive(Debug, Clone)]
pub struct UploadBucket {
    /// The S3 bucket.
    pub source: Source,
    /// `--s3-prefix`.
    pub base: String,
}

/// The uploads service.
pub struct UploadsService {
    scheduler: Arc<Scheduler>,
    bucket: Option<UploadBucket>,
    tickets: Tickets,
    expires_in: Duration,
}

impl UploadsService {
    /// Serves uploads into `bucket` (`None`: this master has none, every call is
    /// FAILED_PRECONDITION), presigned requests valid for `expires_in`, tickets keyed by
    /// `admin_token` ([`Tickets::new`]).
    pub fn new(
        scheduler: Arc<Scheduler>,
        bucket: Option<UploadBucket>,
        admin_token: &str,
        expires_in: Duration,
    ) -> Self {
        UploadsService {
            scheduler,
            bucket,
            tickets: Tickets::new(admin_token),
            expires_in,
        }
    }

    fn bucket(&self) -> Result<&UploadBucket, Status> {
        self.bucket.as_ref().ok_or_else(|| {
            Status::failed_precondition(
                "this master has no bucket (--s3-bucket): uploads through the cluster need one",
            )
        })
    }
}

/// The caller's scope for `project` / `shared`: the prefix its files go under and the project
/// jobs are looked up in (`None`: shared, every project's).
fn scope_of(
    caller: &auth::Caller,
    project: &str,
    shared: bool,
    base: &str,
) -> Result<(String, Option<String>), Status> {
    if shared {
        if caller.projects.is_some() {
            return Err(Status::permission_denied(format!(
                "token {:?} serves some projects only; uploading to the shared prefix needs an \
                 admin token",
                caller.name
            )));
        }
        return Ok((Scope::Shared.prefix(base), None));
    }
    let project = caller.project_for(project)?;
    Ok((Scope::Project(&project).prefix(base), Some(project)))
}

/// The object key of `file` under `prefix`; INVALID_ARGUMENT for a file that names none.
fn key_of(prefix: &str, file: &v1::UploadFile) -> Result<String, Status> {
    let invalid = |e: layout::InvalidKey| Status::invalid_argument(e.0);
    match &file.kind {
        Some(v1::upload_file::Kind::DebugId(id)) => {
            let id: layout::DebugId = id
                .parse()
                .map_err(|_| Status::invalid_argument(format!("{id:?} is not a debug id")))?;
            Ok(layout::debug_file_key(prefix, &id))
        }
        Some(v1::upload_file::Kind::SourceMap(map)) => {
            let (map_key, bundle_key) = if !map.debug_id.is_empty() {
                layout::sourcemap_keys_by_debug_id(prefix, &map.debug_id).map_err(invalid)?
            } else {
                layout::sourcemap_keys_by_release(prefix, &map.release, &map.dist, &map.bundle_name)
                    .map_err(invalid)?
            };
            Ok(if map.bundle { bundle_key } else { map_key })
        }
        Some(v1::upload_file::Kind::ProguardMappingId(id)) => {
            layout::proguard_key(prefix, id).map_err(invalid)
        }
        None => Err(Status::invalid_argument(
            "a file needs its kind: a debug id, a source map or a ProGuard mapping id",
        )),
    }
}

fn digest(bytes: &[u8], what: &str) -> Result<[u8; 32], Status> {
    bytes.try_into().map_err(|_| {
        Status::invalid_argument(format!(
            "{what} must be a SHA-256 of 32 bytes, not {}",
            bytes.len()
        ))
    })
}

/// A bucket failure: UNAVAILABLE (retried, on another master too) when S3 could not be reached
/// in time, FAILED_PRECONDITION when it answered with an error (credentials, bucket, presigning:
/// another try would get the same).
fn bucket_status(e: FetchError) -> Status {
    if e.message == "timed out" || e.message.starts_with("cannot reach S3") {
        Status::unavailable(format!("the bucket: {e}"))
    } else {
        Status::failed_precondition(format!("the bucket: {e}"))
    }
}

/// Takes up to `wanted` presigned parts from `budget`; how many it got.
fn take_parts(budget: &AtomicUsize, wanted: usize) -> usize {
    let mut taken = 0;
    let _ = budget.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
        taken = left.min(wanted);
        Some(left - taken)
    });
    taken
}

/// The object key the missing-file `key` (`MissingFile.key`: a debug id, `debug-id:<id>`,
/// `release:<release>/<dist>/<bundle>` or `proguard:<mapping id>`) names under `prefix`; `None`
/// for a key that names none.
fn object_of_missing(prefix: &str, key: &str) -> Option<String> {
    if let Some(id) = key.strip_prefix("proguard:") {
        return layout::proguard_key(prefix, id).ok();
    }
    if let Some(id) = key.strip_prefix("debug-id:") {
        return layout::sourcemap_keys_by_debug_id(prefix, id)
            .ok()
            .map(|k| k.0);
    }
    if let Some((release, dist, bundle)) = symcluster_proto::missing::split_release_key(key) {
        return layout::sourcemap_keys_by_release(prefix, &release, &dist, &bundle)
            .ok()
            .map(|k| k.0);
    }
    let id: layout::DebugId = key.parse().ok()?;
    Some(layout::debug_file_key(prefix, &id))
}

fn presigned(p: Presigned) -> v1::PresignedRequest {
    v1::PresignedRequest {
        url: p.url,
        headers: p
            .headers
            .into_iter()
            .map(|(name, value)| v1::Header { name, value })
            .collect(),
    }
}

impl UploadsService {
    /// What `file` (one of the request's) needs: present, a PUT, or parts.
    async fn prepare_one(
        &self,
        bucket: &UploadBucket,
        prefix: &str,
        file: v1::UploadFile,
        now: u64,
        budget: &AtomicUsize,
    ) -> Result<v1::PreparedFile, Status> {
        let key = key_of(prefix, &file)?;
        let sha256 = digest(&file.sha256, "sha256")?;
        if file.size > MAX_OBJECT_BYTES {
            return Err(Status::invalid_argument(format!(
                "{key}: {} bytes; S3 stores at most {MAX_OBJECT_BYTES}",
                file.size
            )));
        }
        let no_parts = parts_digest(&[]);
        let stored = bucket.source.stored(&key).await.map_err(bucket_status)?;
        if stored.is_some_and(|s| s.size == file.size && s.sha256 == Some(sha256)) {
            return Ok(v1::PreparedFile {
                key,
                action: Some(v1::prepared_file::Action::Present(true)),
                ticket: String::new(),
            });
        }
        if file.size <= upload::MULTIPART_THRESHOLD {
            let put = bucket
                .source
                .presign_put(&key, file.size, &sha256, self.expires_in)
                .await
                .map_err(bucket_status)?;
            let ticket = self.tickets.issue(
                &Ticketed {
                    key: &key,
                    size: file.size,
                    sha256: &sha256,
                    upload_id: "",
                    parts: &no_parts,
                },
                now,
            );
            return Ok(v1::PreparedFile {
                key,
                action: Some(v1::prepared_file::Action::Put(presigned(put))),
                ticket,
            });
        }
        let count = upload::part_count(file.size);
        if file.part_sha256.len() as u64 != count {
            return Err(Status::invalid_argument(format!(
                "{key}: a file of {} bytes goes in {count} parts of {} bytes: give {count} \
                 part_sha256, not {}",
                file.size,
                upload::part_size(file.size),
                file.part_sha256.len()
            )));
        }
        let parts = file
            .part_sha256
            .iter()
            .map(|p| digest(p, "part_sha256"))
            .collect::<Result<Vec<_>, _>>()?;
        let (upload_id, uploaded) = match bucket
            .source
            .resumable_upload(&key, file.size, &sha256, &parts)
            .await
            .map_err(bucket_status)?
        {
            Some(resumed) => resumed,
            None => (
                bucket
                    .source
                    .create_upload(&key, &sha256)
                    .await
                    .map_err(bucket_status)?,
                Vec::new(),
            ),
        };
        let present: std::collections::HashSet<u32> = uploaded.iter().map(|p| p.number).collect();
        let missing: Vec<(u32, &[u8; 32])> = parts
            .iter()
            .enumerate()
            .map(|(index, part)| (index as u32 + 1, part))
            .filter(|(number, _)| !present.contains(number))
            .collect();
        let granted = take_parts(budget, missing.len());
        let mut to_send = Vec::with_capacity(granted);
        for (number, part_digest) in missing.into_iter().take(granted) {
            let request = bucket
                .source
                .presign_part(
                    &key,
                    &upload_id,
                    number,
                    upload::expected_part_size(file.size, number),
                    part_digest,
                    self.expires_in,
                )
                .await
                .map_err(bucket_status)?;
            to_send.push(v1::PresignedPart {
                part_number: number,
                request: Some(presigned(request)),
            });
        }
        let ticket = self.tickets.issue(
            &Ticketed {
                key: &key,
                size: file.size,
                sha256: &sha256,
                upload_id: &upload_id,
                parts: &parts_digest(&parts),
            },
            now,
        );
        Ok(v1::PreparedFile {
            key,
            action: Some(v1::prepared_file::Action::Multipart(v1::MultipartUpload {
                upload_id,
                part_size: upload::part_size(file.size),
                parts: to_send,
                parts_present: present.len() as u32,
            })),
            ticket,
        })
    }

    /// Checks `file`'s ticket and object (completing its multipart upload first).
    async fn confirm_one(
        &self,
        bucket: &UploadBucket,
        prefix: &str,
        file: v1::ConfirmedFile,
        now: u64,
    ) -> Result<(), Status> {
        let key = &file.key;
        let refused = |why: String| Status::failed_precondition(format!("{key}: {why}"));
        if !key.starts_with(prefix) {
            return Err(Status::permission_denied(format!(
                "{key} is not under {prefix}, where this call's files go"
            )));
        }
        let sha256 = digest(&file.sha256, "sha256")?;
        let parts = file
            .part_sha256
            .iter()
            .map(|p| digest(p, "part_sha256"))
            .collect::<Result<Vec<_>, _>>()?;
        self.tickets
            .check(
                &file.ticket,
                &Ticketed {
                    key,
                    size: file.size,
                    sha256: &sha256,
                    upload_id: &file.upload_id,
                    parts: &parts_digest(&parts),
                },
                now,
            )
            .map_err(refused)?;
        if !file.upload_id.is_empty() {
            self.complete(bucket, &file, &parts).await?;
        }
        let checked = match bucket.source.stored(key).await.map_err(bucket_status)? {
            None => Err(refused(
                "the bucket holds no such object: it was not uploaded".into(),
            )),
            Some(stored) if stored.size != file.size => Err(refused(format!(
                "the bucket holds {} bytes where {} were declared",
                stored.size, file.size
            ))),
            Some(stored) => match stored.sha256 {
                Some(there) if there == sha256 => Ok(()),
                Some(there) => Err(refused(format!(
                    "the bucket holds other bytes than declared (SHA-256 {} there, {} declared)",
                    hex::encode(there),
                    hex::encode(sha256)
                ))),
                None => Err(refused(
                    "the bucket's object has no SHA-256 (another tool put it there): upload it \
                     again"
                        .into(),
                )),
            },
        };
        if checked.is_ok()
            && !file.upload_id.is_empty()
            && let Err(error) = bucket.source.forget_upload(key, &sha256).await
        {
            tracing::warn!(%error, "the record of a completed upload was not deleted");
        }
        checked
    }

    /// Completes `file`'s multipart upload when every part is there, each of the size the
    /// file's cut gives it and holding the bytes declared (S3 checked each against its SHA-256,
    /// here compared with `parts`). An upload already completed (a confirm sent again) is left
    /// to the object's check.
    async fn complete(
        &self,
        bucket: &UploadBucket,
        file: &v1::ConfirmedFile,
        parts: &[[u8; 32]],
    ) -> Result<(), Status> {
        let key = &file.key;
        let uploaded: Vec<UploadedPart> =
            match bucket.source.uploaded_parts(key, &file.upload_id).await {
                Ok(uploaded) => uploaded,
                // No such upload: completed by an earlier confirm, or aborted; the object says.
                Err(e) if upload::is_no_such_upload(&e) => return Ok(()),
                Err(e) => return Err(bucket_status(e)),
            };
        let count = upload::part_count(file.size);
        if parts.len() as u64 != count {
            return Err(Status::invalid_argument(format!(
                "{key}: {count} part_sha256 are due, not {}",
                parts.len()
            )));
        }
        let refused = |why: String| Status::failed_precondition(format!("{key}: {why}"));
        if uploaded.len() as u64 != count {
            return Err(refused(format!(
                "{} of {count} parts are uploaded",
                uploaded.len()
            )));
        }
        // Sorted by number and as many as due: part i must be number i + 1.
        for (index, part) in uploaded.iter().enumerate() {
            let number = index as u32 + 1;
            let due = upload::expected_part_size(file.size, number);
            if part.number != number {
                return Err(refused(format!(
                    "part {number} of {count} was not uploaded"
                )));
            }
            if part.size != due {
                return Err(refused(format!(
                    "part {number} holds {} bytes where {due} were due",
                    part.size
                )));
            }
            if part.sha256 != Some(parts[index]) {
                return Err(refused(format!(
                    "part {number} holds other bytes than declared{}",
                    if part.sha256.is_none() {
                        " (S3 kept no SHA-256 of it)"
                    } else {
                        ""
                    }
                )));
            }
        }
        match bucket
            .source
            .complete_upload(key, &file.upload_id, &uploaded)
            .await
        {
            Ok(()) => Ok(()),
            // Completed meanwhile (a retried request whose first attempt got through).
            Err(e) if upload::is_no_such_upload(&e) => Ok(()),
            Err(e) => Err(refused(format!(
                "the multipart upload did not complete: {}",
                e.message
            ))),
        }
    }
}

#[tonic::async_trait]
impl Uploads for UploadsService {
    async fn prepare_upload(
        &self,
        request: Request<v1::PrepareUploadRequest>,
    ) -> Result<Response<v1::PrepareUploadResponse>, Status> {
        let caller = auth::require(&request, auth::UPLOAD_ROLES, "uploading")?;
        let bucket = self.bucket()?;
        let r = request.into_inner();
        if r.files.len() > MAX_UPLOAD_FILES {
            return Err(Status::invalid_argument(format!(
                "{} files in one call; at most {MAX_UPLOAD_FILES}",
                r.files.len()
            )));
        }
        let (prefix, _) = scope_of(&caller, &r.project, r.shared, &bucket.base)?;
        let now = now_ms();
        let budget = AtomicUsize::new(MAX_PRESIGNED_PARTS);
        let files = futures::stream::iter(r.files)
            .map(|file| self.prepare_one(bucket, &prefix, file, now, &budget))
            .buffered(CONCURRENT_REQUESTS)
            .try_collect()
            .await?;
        Ok(Response::new(v1::PrepareUploadResponse {
            files,
            expires_at_ms: now + self.expires_in.as_millis() as u64,
            multipart_threshold: upload::MULTIPART_THRESHOLD,
        }))
    }

    async fn confirm_upload(
        &self,
        request: Request<v1::ConfirmUploadRequest>,
    ) -> Result<Response<v1::ConfirmUploadResponse>, Status> {
        let caller = auth::require(&request, auth::UPLOAD_ROLES, "uploading")?;
        let bucket = self.bucket()?;
        require_leader(&self.scheduler)?;
        let r = request.into_inner();
        if r.files.len() > MAX_UPLOAD_FILES || r.missing_keys.len() > MAX_MISSING_KEYS {
            return Err(Status::invalid_argument(format!(
                "{} files and {} keys in one call; at most {MAX_UPLOAD_FILES} and \
                 {MAX_MISSING_KEYS}",
                r.files.len(),
                r.missing_keys.len()
            )));
        }
        let (prefix, project) = scope_of(&caller, &r.project, r.shared, &bucket.base)?;
        let now = now_ms();
        let confirmed = r.files.len() as u32;
        futures::stream::iter(r.files)
            .map(|file| self.confirm_one(bucket, &prefix, file, now))
            .buffered(CONCURRENT_REQUESTS)
            .try_collect::<Vec<()>>()
            .await?;
        // Only files the bucket holds under the caller's prefix send jobs back to the queue.
        let held: Vec<String> = futures::stream::iter(r.missing_keys)
            .map(|key| {
                let prefix = &prefix;
                async move {
                    let Some(object) = object_of_missing(prefix, &key) else {
                        return Ok(None);
                    };
                    let stored = bucket.source.stored(&object).await.map_err(bucket_status)?;
                    Ok::<_, Status>(stored.map(|_| key))
                }
            })
            .buffered(CONCURRENT_REQUESTS)
            .try_filter_map(|key| async move { Ok(key) })
            .try_collect()
            .await?;
        let requeued = self
            .scheduler
            .files_uploaded(project.as_deref(), &held)
            .await
            .map_err(schedule_status)?;
        crate::metrics::JOBS_RESYMBOLICATED.inc_by(requeued);
        crate::metrics::UPLOADS_CONFIRMED.inc_by(confirmed as u64);
        tracing::info!(
            caller = %caller.name,
            project = ?project,
            confirmed,
            requeued,
            "upload confirmed"
        );
        Ok(Response::new(v1::ConfirmUploadResponse {
            requeued,
            confirmed,
        }))
    }

    async fn find_debug_file(
        &self,
        request: Request<v1::FindDebugFileRequest>,
    ) -> Result<Response<v1::FindDebugFileResponse>, Status> {
        let caller = auth::require(&request, auth::UPLOAD_ROLES, "finding debug files")?;
        let bucket = self.bucket()?;
        let r = request.into_inner();
        let project = caller.project_for(&r.project)?;
        let id: layout::DebugId = r
            .debug_id
            .parse()
            .map_err(|_| Status::invalid_argument(format!("{:?} is not a debug id", r.debug_id)))?;
        for scope in layout::native_scopes(&project) {
            let key = layout::debug_file_key(&scope.prefix(&bucket.base), &id);
            if let Some(stored) = bucket.source.stored(&key).await.map_err(bucket_status)? {
                return Ok(Response::new(v1::FindDebugFileResponse {
                    found: true,
                    key,
                    shared: scope == Scope::Shared,
                    size: stored.size,
                    sha256: stored.sha256.map(|d| d.to_vec()).unwrap_or_default(),
                }));
            }
        }
        Ok(Response::new(v1::FindDebugFileResponse::default()))
    }
}

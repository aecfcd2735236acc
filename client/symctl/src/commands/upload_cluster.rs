//! `symctl upload` through the cluster, the documented way: the build machine holds a project's
//! `upload` token and no bucket credentials.
//!
//! 1. Each file is hashed here (SHA-256 of the whole, and of each part of a file over the
//!    multipart threshold, cut as `symcluster_sources::upload::part_size` says).
//! 2. `Uploads/PrepareUpload` (≤ 1,000 files a call): the master answers, per file, that the
//!    bucket holds it already, or a presigned PUT, or the parts of a multipart upload still to
//!    send (an unfinished one resumes).
//! 3. The bytes go straight to S3, a few requests at once, streamed from disk; S3 refuses a
//!    body whose SHA-256 is not the one declared.
//! 4. `Uploads/ConfirmUpload`: the leader checks each object and queues again the finished
//!    jobs that lacked one of the files.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use symcluster_client::{Client, api};
use symcluster_sources::upload::{MULTIPART_THRESHOLD, expected_part_size, part_size};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::cli::NotifyArgs;

/// Files per `PrepareUpload`/`ConfirmUpload` call (the API's maximum).
const FILES_PER_CALL: usize = 1_000;

/// Keys per `ConfirmUpload` call (the API's maximum).
const KEYS_PER_CALL: usize = 100_000;

/// PUT requests in flight at once.
const CONCURRENT_PUTS: usize = 4;

/// One file to upload, and what it is.
#[derive(Debug, Clone)]
pub struct FileToUpload {
    /// Where it is on this machine.
    pub path: PathBuf,
    /// What it is (which names its key).
    pub kind: api::upload_file::Kind,
    /// How it is shown (e.g. `<debug id> arm64 <path>`).
    pub label: String,
}

/// A file's size and SHA-256s (whole, and per part when it goes in parts).
#[derive(Debug, Clone)]
struct Digests {
    size: u64,
    sha256: [u8; 32],
    parts: Vec<[u8; 32]>,
}

/// Reads `path` once: its size, SHA-256, and part SHA-256s when it is over the threshold.
fn digest_file(path: &Path) -> std::io::Result<Digests> {
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let each = (size > MULTIPART_THRESHOLD).then(|| part_size(size));
    let (mut whole, mut part) = (Sha256::new(), Sha256::new());
    let (mut parts, mut in_part, mut read_total) = (Vec::new(), 0u64, 0u64);
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        read_total += n as u64;
        let mut chunk = &buffer[..n];
        whole.update(chunk);
        if let Some(each) = each {
            while !chunk.is_empty() {
                let take = chunk.len().min((each - in_part) as usize);
                part.update(&chunk[..take]);
                in_part += take as u64;
                chunk = &chunk[take..];
                if in_part == each {
                    parts.push(std::mem::take(&mut part).finalize().into());
                    in_part = 0;
                }
            }
        }
    }
    if read_total != size {
        return Err(std::io::Error::other(format!(
            "{} changed while it was read ({size} bytes, then {read_total})",
            path.display()
        )));
    }
    if each.is_some() && in_part > 0 {
        parts.push(part.finalize().into());
    }
    Ok(Digests {
        size,
        sha256: whole.finalize().into(),
        parts,
    })
}

/// What S3 said when it refused a request: its error code and message, from the XML body.
fn s3_refusal(body: &str) -> String {
    let field = |name: &str| {
        let open = format!("<{name}>");
        let start = body.find(&open)? + open.len();
        let end = body[start..].find(&format!("</{name}>"))? + start;
        Some(body[start..end].to_owned())
    };
    match (field("Code"), field("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        _ => body.chars().take(200).collect(),
    }
}

/// PUTs `len` bytes of `path` from `offset` as `request` says, counting them on `bar`.
async fn put(
    http: &reqwest::Client,
    request: &api::PresignedRequest,
    path: &Path,
    offset: u64,
    len: u64,
    bar: &ProgressBar,
) -> anyhow::Result<()> {
    let mut file = tokio::fs::File::open(path)
        .await
        .with_context(|| format!("cannot read {}", path.display()))?;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let counted = bar.clone();
    let body = tokio_util::io::ReaderStream::with_capacity(file.take(len), 256 << 10).inspect(
        move |chunk| {
            if let Ok(chunk) = chunk {
                counted.inc(chunk.len() as u64);
            }
        },
    );
    let mut builder = http
        .put(&request.url)
        .header(reqwest::header::CONTENT_LENGTH, len)
        .body(reqwest::Body::wrap_stream(body));
    for header in &request.headers {
        if !header.name.eq_ignore_ascii_case("content-length") {
            builder = builder.header(&header.name, &header.value);
        }
    }
    let response = builder
        .send()
        .await
        .with_context(|| format!("{}: cannot reach S3", path.display()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let body = response.text().await.unwrap_or_default();
    let refusal = s3_refusal(&body);
    // AWS: 403 "Request has expired"; Garage: 400 "Date is too old".
    let expired = status == reqwest::StatusCode::FORBIDDEN
        || refusal.contains("expired")
        || refusal.contains("too old");
    anyhow::bail!(
        "{}: S3 refused the upload ({status}, {refusal}){}",
        path.display(),
        if expired {
            "; if the presigned request expired, run the upload again: what is in the bucket \
             stays, and a file sent in parts resumes"
        } else {
            ""
        }
    )
}

/// Uploads `files` into `project` (empty: the token's) or the shared prefix through the masters
/// `args` names, then announces `missing_keys` (what jobs lacking these files name) with the
/// confirm. Prints one line per file and a summary with the bytes sent.
pub async fn upload(
    args: &NotifyArgs,
    project: &str,
    shared: bool,
    files: Vec<FileToUpload>,
    missing_keys: Vec<String>,
) -> anyhow::Result<()> {
    let Some(token) = &args.token else {
        anyhow::bail!(
            "give a token (--token or SYMCLUSTER_TOKEN; an upload token of the project): uploads \
             go through the masters. With bucket credentials, --s3-bucket uploads straight to it"
        );
    };
    let master = args.master.as_deref().unwrap_or("http://127.0.0.1:7700");
    let tls = symcluster_client::Tls::from_files(args.tls_ca.as_deref(), None, None)?;
    let client = Client::connect_with(master, token, tls).await?;
    let http = reqwest::Client::builder()
        .build()
        .context("cannot set up HTTPS")?;

    // Hash each path once (a universal binary is one file for several debug ids).
    let mut digests: HashMap<PathBuf, Digests> = HashMap::new();
    for file in &files {
        if !digests.contains_key(&file.path) {
            let path = file.path.clone();
            let digest = tokio::task::spawn_blocking(move || digest_file(&path))
                .await?
                .with_context(|| format!("cannot read {}", file.path.display()))?;
            digests.insert(file.path.clone(), digest);
        }
    }

    let (mut sent_files, mut present, mut sent_bytes, mut requeued) = (0u64, 0u64, 0u64, 0u64);
    let chunks: Vec<Vec<FileToUpload>> = files
        .chunks(FILES_PER_CALL)
        .map(<[FileToUpload]>::to_vec)
        .collect();
    for (round, chunk) in chunks.iter().enumerate() {
        let request = api::PrepareUploadRequest {
            project: project.to_owned(),
            shared,
            files: chunk
                .iter()
                .map(|f| {
                    let d = &digests[&f.path];
                    api::UploadFile {
                        kind: Some(f.kind.clone()),
                        size: d.size,
                        sha256: d.sha256.to_vec(),
                        part_sha256: d.parts.iter().map(|p| p.to_vec()).collect(),
                    }
                })
                .collect(),
        };
        let prepared = client
            .prepare_upload(request)
            .await
            .context("the masters did not prepare the upload")?;
        if prepared.files.len() != chunk.len() {
            anyhow::bail!(
                "the master answered {} files for {}",
                prepared.files.len(),
                chunk.len()
            );
        }
        // Every PUT of this call: (file, request, offset, length).
        let mut puts = Vec::new();
        let mut confirmed = Vec::new();
        for (file, answer) in chunk.iter().zip(&prepared.files) {
            let d = &digests[&file.path];
            let confirm = |upload_id: &str| api::ConfirmedFile {
                key: answer.key.clone(),
                ticket: answer.ticket.clone(),
                size: d.size,
                sha256: d.sha256.to_vec(),
                upload_id: upload_id.to_owned(),
            };
            let how = match &answer.action {
                Some(api::prepared_file::Action::Present(_)) => {
                    present += 1;
                    "already there".to_owned()
                }
                Some(api::prepared_file::Action::Put(request)) => {
                    puts.push((file.path.clone(), request.clone(), 0, d.size));
                    confirmed.push(confirm(""));
                    sent_files += 1;
                    "uploaded".to_owned()
                }
                Some(api::prepared_file::Action::Multipart(multipart)) => {
                    for part in &multipart.parts {
                        let Some(request) = &part.request else {
                            anyhow::bail!(
                                "the master sent part {} without a request",
                                part.part_number
                            );
                        };
                        let offset =
                            (part.part_number as u64).saturating_sub(1) * multipart.part_size;
                        puts.push((
                            file.path.clone(),
                            request.clone(),
                            offset,
                            expected_part_size(d.size, part.part_number),
                        ));
                    }
                    confirmed.push(confirm(&multipart.upload_id));
                    sent_files += 1;
                    if multipart.parts_present > 0 {
                        format!(
                            "uploaded in parts, resumed ({} of {} parts were there)",
                            multipart.parts_present,
                            multipart.parts_present as usize + multipart.parts.len()
                        )
                    } else {
                        format!("uploaded in {} parts", multipart.parts.len())
                    }
                }
                None => anyhow::bail!("the master said nothing of {}", answer.key),
            };
            println!("{} -> {} ({how})", file.label, answer.key);
        }
        let total: u64 = puts.iter().map(|p| p.3).sum();
        let bar = ProgressBar::new(total).with_style(
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec}")
                .expect("valid template"),
        );
        futures::stream::iter(puts.iter())
            .map(|(path, request, offset, len)| put(&http, request, path, *offset, *len, &bar))
            .buffer_unordered(CONCURRENT_PUTS)
            .try_collect::<Vec<()>>()
            .await?;
        bar.finish_and_clear();
        sent_bytes += total;
        // The keys go with the last confirm (in calls of at most the API's maximum).
        let key_batches: Vec<&[String]> = if round + 1 == chunks.len() {
            missing_keys.chunks(KEYS_PER_CALL).collect()
        } else {
            Vec::new()
        };
        for i in 0..key_batches.len().max(1) {
            let request = api::ConfirmUploadRequest {
                project: project.to_owned(),
                shared,
                files: if i == 0 {
                    confirmed.clone()
                } else {
                    Vec::new()
                },
                missing_keys: key_batches.get(i).map(|k| k.to_vec()).unwrap_or_default(),
            };
            let answer = client
                .confirm_upload(request)
                .await
                .context("the upload was not confirmed")?;
            requeued += answer.requeued;
        }
    }
    println!(
        "{sent_files} uploaded, {present} already there; {} sent",
        indicatif::HumanBytes(sent_bytes)
    );
    match requeued {
        0 => {}
        1 => println!("1 job that lacked these files is being symbolicated again"),
        n => println!("{n} jobs that lacked these files are being symbolicated again"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_threshold_is_hashed_whole_and_per_part() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let size = MULTIPART_THRESHOLD + (3 << 20);
        let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let d = digest_file(&path).unwrap();
        assert_eq!(d.size, size);
        assert_eq!(d.sha256, <[u8; 32]>::from(Sha256::digest(&bytes)));
        let each = part_size(size) as usize;
        let expected: Vec<[u8; 32]> = bytes
            .chunks(each)
            .map(|c| Sha256::digest(c).into())
            .collect();
        assert_eq!(d.parts.len(), 5);
        assert_eq!(d.parts, expected);

        let small = dir.path().join("small");
        std::fs::write(&small, b"abc").unwrap();
        let d = digest_file(&small).unwrap();
        assert_eq!((d.size, d.parts.len()), (3, 0));
    }

    #[test]
    fn s3_refusals_are_read_from_their_xml() {
        let body = "<?xml version=\"1.0\"?><Error><Code>AccessDenied</Code>\
                    <Message>Request has expired</Message></Error>";
        assert_eq!(s3_refusal(body), "AccessDenied: Request has expired");
        assert_eq!(s3_refusal("plain"), "plain");
    }
}

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
use futures::StreamExt;
use indicatif::ProgressBar;
use sha2::{Digest, Sha256};
use symcluster_client::{Client, api};
use symcluster_sources::upload::{MULTIPART_THRESHOLD, expected_part_size, part_size};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::cli::NotifyArgs;

/// Files per `PrepareUpload`/`ConfirmUpload` call (the API's maximum).
const FILES_PER_CALL: usize = 1_000;

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
    /// What jobs lacking it name it (`MissingFile.key`: the debug id, or the source map's key).
    pub missing_key: String,
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

/// Whether a PUT failed because its presigned request expired (AWS: 403 "Request has
/// expired"; Garage: 400 "Date is too old"): prepared again, it resumes.
fn expired(error: &anyhow::Error) -> bool {
    let text = error.to_string();
    text.contains("expired") || text.contains("too old") || text.contains("403 Forbidden")
}

/// Uploads `files` into `project` (empty: the token's) or the shared prefix through the masters
/// `args` names, in calls of at most 1,000 files; each call's confirm announces its files'
/// missing keys (`FileToUpload::missing_key`). Prints a line per file once it is in, and a
/// summary with the bytes sent. A file whose presigned requests expire, or whose parts come in
/// several answers, is prepared again (its upload resumes); a round that sends nothing fails.
pub async fn upload(
    args: &NotifyArgs,
    project: &str,
    shared: bool,
    files: Vec<FileToUpload>,
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

    let mut totals = Totals::default();
    for chunk in files.chunks(FILES_PER_CALL) {
        let result = upload_chunk(
            &client,
            &http,
            project,
            shared,
            chunk,
            &digests,
            &mut totals,
        )
        .await;
        // What is in goes to the leader even when a file failed: its jobs run again.
        let confirmed = confirm_chunk(&client, project, shared, chunk, &totals).await;
        result?;
        totals.requeued += confirmed?;
        totals.confirm.clear();
        totals.done.clear();
    }
    println!(
        "{} uploaded, {} already there; {} sent",
        totals.uploaded,
        totals.present,
        indicatif::HumanBytes(totals.sent_bytes)
    );
    match totals.requeued {
        0 => {}
        1 => println!("1 job that lacked these files is being symbolicated again"),
        n => println!("{n} jobs that lacked these files are being symbolicated again"),
    }
    Ok(())
}

/// What an upload did so far, and what the current call's confirm will carry.
#[derive(Default)]
struct Totals {
    uploaded: u64,
    present: u64,
    sent_bytes: u64,
    requeued: u64,
    /// The current call's files (by index) whose bytes are all in.
    done: std::collections::HashSet<usize>,
    /// The current call's files to confirm, by index.
    confirm: HashMap<usize, api::ConfirmedFile>,
}

/// One PUT: the file (index in its call), the request, the byte range.
struct Put {
    file: usize,
    request: api::PresignedRequest,
    offset: u64,
    len: u64,
}

/// Prepares and sends `chunk` until every file is in, or a request fails for another reason
/// than its expiry, or a round sends nothing.
async fn upload_chunk(
    client: &Client,
    http: &reqwest::Client,
    project: &str,
    shared: bool,
    chunk: &[FileToUpload],
    digests: &HashMap<PathBuf, Digests>,
    totals: &mut Totals,
) -> anyhow::Result<()> {
    let mut pending: Vec<usize> = (0..chunk.len()).collect();
    while !pending.is_empty() {
        let request = api::PrepareUploadRequest {
            project: project.to_owned(),
            shared,
            files: pending
                .iter()
                .map(|&i| {
                    let d = &digests[&chunk[i].path];
                    api::UploadFile {
                        kind: Some(chunk[i].kind.clone()),
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
        if prepared.files.len() != pending.len() {
            anyhow::bail!(
                "the master answered {} files for {}",
                prepared.files.len(),
                pending.len()
            );
        }
        let mut puts = Vec::new();
        let mut again = Vec::new();
        let mut notes: HashMap<usize, String> = HashMap::new();
        for (&i, answer) in pending.iter().zip(&prepared.files) {
            let d = &digests[&chunk[i].path];
            let confirm = |upload_id: &str| api::ConfirmedFile {
                key: answer.key.clone(),
                ticket: answer.ticket.clone(),
                size: d.size,
                sha256: d.sha256.to_vec(),
                upload_id: upload_id.to_owned(),
                part_sha256: if upload_id.is_empty() {
                    Vec::new()
                } else {
                    d.parts.iter().map(|p| p.to_vec()).collect()
                },
            };
            match &answer.action {
                Some(api::prepared_file::Action::Present(_)) => {
                    totals.present += 1;
                    totals.done.insert(i);
                    println!("{} -> {} (already there)", chunk[i].label, answer.key);
                    continue;
                }
                Some(api::prepared_file::Action::Put(request)) => {
                    puts.push(Put {
                        file: i,
                        request: request.clone(),
                        offset: 0,
                        len: d.size,
                    });
                    totals.confirm.insert(i, confirm(""));
                    notes.insert(i, "uploaded".into());
                }
                Some(api::prepared_file::Action::Multipart(multipart)) => {
                    for part in &multipart.parts {
                        let Some(request) = &part.request else {
                            anyhow::bail!(
                                "the master sent part {} without a request",
                                part.part_number
                            );
                        };
                        puts.push(Put {
                            file: i,
                            request: request.clone(),
                            offset: (part.part_number as u64).saturating_sub(1)
                                * multipart.part_size,
                            len: expected_part_size(d.size, part.part_number),
                        });
                    }
                    totals.confirm.insert(i, confirm(&multipart.upload_id));
                    let total = d.parts.len();
                    let given = multipart.parts_present as usize + multipart.parts.len();
                    if given < total {
                        // More parts in the next answer.
                        again.push(i);
                    }
                    notes.insert(
                        i,
                        if multipart.parts_present > 0 {
                            format!(
                                "uploaded in {total} parts, resumed ({} of {total} were there)",
                                multipart.parts_present
                            )
                        } else {
                            format!("uploaded in {total} parts")
                        },
                    );
                }
                None => anyhow::bail!("the master said nothing of {}", answer.key),
            }
        }
        let total: u64 = puts.iter().map(|p| p.len).sum();
        let bar = super::progress_bar(total, "{bar:40} {bytes}/{total_bytes} {bytes_per_sec}");
        let results: Vec<(usize, u64, anyhow::Result<()>)> = futures::stream::iter(puts.iter())
            .map(|p| async {
                let path = &chunk[p.file].path;
                (
                    p.file,
                    p.len,
                    put(http, &p.request, path, p.offset, p.len, &bar).await,
                )
            })
            .buffer_unordered(CONCURRENT_PUTS)
            .collect()
            .await;
        bar.finish_and_clear();
        let mut failed: HashMap<usize, anyhow::Error> = HashMap::new();
        let mut sent_now = 0;
        for (file, len, result) in results {
            match result {
                Ok(()) => sent_now += len,
                Err(e) => {
                    failed.entry(file).or_insert(e);
                }
            }
        }
        totals.sent_bytes += sent_now;
        if let Some((_, error)) = failed.iter().find(|(_, e)| !expired(e)) {
            return Err(anyhow::anyhow!("{error:#}"));
        }
        if !failed.is_empty() && sent_now == 0 {
            let error = failed.into_values().next().expect("not empty");
            return Err(error.context("the presigned requests expired before a byte was sent"));
        }
        for (&i, note) in &notes {
            if !failed.contains_key(&i) && !again.contains(&i) {
                totals.uploaded += 1;
                totals.done.insert(i);
                println!("{} -> {} ({note})", chunk[i].label, totals.confirm[&i].key);
            }
        }
        pending = again;
        pending.extend(failed.into_keys());
        pending.sort_unstable();
        pending.dedup();
    }
    Ok(())
}

/// Confirms the files of `chunk` that are in, with their missing keys; the jobs queued again.
async fn confirm_chunk(
    client: &Client,
    project: &str,
    shared: bool,
    chunk: &[FileToUpload],
    totals: &Totals,
) -> anyhow::Result<u64> {
    if totals.done.is_empty() {
        return Ok(0);
    }
    let mut keys: Vec<String> = totals
        .done
        .iter()
        .map(|&i| chunk[i].missing_key.clone())
        .collect();
    keys.sort();
    keys.dedup();
    let request = api::ConfirmUploadRequest {
        project: project.to_owned(),
        shared,
        files: totals
            .done
            .iter()
            .filter_map(|i| totals.confirm.get(i).cloned())
            .collect(),
        missing_keys: keys,
    };
    let answer = client
        .confirm_upload(request)
        .await
        .context("the upload was not confirmed")?;
    Ok(answer.requeued)
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

//! Sending pending reports to the cluster on the next launch.
//!
//! Every report (`crash-*.json`, `hang-*.json`, `jank-*.json`, `cpu-*.json`, `oom-*.json`,
//! `launch-*.json`) in the report directory is submitted as a native job (the job id is
//! `<prefix>-<install id>-<file name>`, so a retry after a lost acknowledgement is idempotent,
//! and two devices never choose the same id: [`install_id`]; a report is deleted only when the
//! master says it holds this very report, `SubmitResponse.same_report`, and one whose id holds
//! another report is sent again under `<job id>-<content id>`),
//! its image list cut to the images its frames are in ([`crate::used_images`]), and deleted
//! only once the master acknowledged it. Errors another try can fix (masters out of
//! reach or electing, a deadline, a rate limit: [`symcluster_client::retry::is_retryable`]) are
//! retried with the clients' one policy (exponential backoff with jitter, afresh after a report
//! went through); whatever is still unsent stays on disk for the next launch. A report the
//! master refuses for good (`INVALID_ARGUMENT`, e.g. larger than 16 MiB; `OUT_OF_RANGE`, larger
//! than a request may be) would be refused again on every launch: it is deleted and listed in
//! [`SendSummary::refused`] with the master's reason. Other refusals (a token the master does
//! not take) are not retried in this pass, but the reports stay for a later launch (an app
//! update may bring a new token). Leftover `.inprogress` files of processes that did not crash
//! are empty and removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use backon::BackoffBuilder as _;
use symcluster_client::{Client, ClientError, api, retry};

/// What a send pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SendSummary {
    /// The job ids of the reports the master holds now (and that were deleted here).
    pub sent: Vec<String>,
    /// Reports still on disk (with the last error).
    pub kept: Vec<(String, String)>,
    /// Reports the master refused for good, deleted (job id, the master's status and message).
    pub refused: Vec<(String, String)>,
}

/// The file in the report directory that holds this install's id.
pub const INSTALL_ID_FILE: &str = "install-id";

/// The most bytes of the app's prefix a job id takes (job ids are at most 128 bytes).
const MAX_PREFIX_BYTES: usize = 40;

/// This install's id: a random UUID (v4, 32 lowercase hex digits) made the first time and kept
/// in `dir`/[`INSTALL_ID_FILE`], so that job ids made on two devices from the same file name
/// (`crash-<launch ms>-<pid>.json`) differ. Errors: the directory's, when the id cannot be read
/// or written (a file that does not hold 32 hex digits is replaced).
pub fn install_id(dir: &Path) -> std::io::Result<String> {
    let path = dir.join(INSTALL_ID_FILE);
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(id.to_ascii_lowercase());
        }
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    // Written whole under a name of its own, then linked into place only if no id is there
    // yet: a crash half way leaves no half id, and of two processes making one at once (the
    // app and an extension sharing the directory) both end with the id linked first.
    let partial = dir.join(format!("{INSTALL_ID_FILE}.{id}.tmp"));
    std::fs::write(&partial, &id)?;
    let linked = std::fs::hard_link(&partial, &path);
    let _ = std::fs::remove_file(&partial);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let kept = std::fs::read_to_string(&path)?;
            let kept = kept.trim();
            if kept.len() == 32 && kept.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(kept.to_ascii_lowercase())
            } else {
                // A damaged id: replaced.
                std::fs::write(&path, &id)?;
                Ok(id)
            }
        }
        Err(e) => Err(e),
    }
}

/// The job id of report file `name` sent by install `install` of app `prefix` (cut to
/// [`MAX_PREFIX_BYTES`] at a character boundary).
pub fn job_id(prefix: &str, install: &str, name: &str) -> String {
    let mut end = prefix.len().min(MAX_PREFIX_BYTES);
    while !prefix.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}-{install}-{name}", &prefix[..end])
}

/// The id a report is sent again under when `job_id` holds another report: `job_id` and the
/// first 16 hex digits of the SHA-256 of `report` (the same report gets the same id: a retry
/// stays idempotent).
fn content_job_id(job_id: &str, report: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(report);
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("{job_id}-{hex}")
}

/// What becomes of a report whose submit failed.
enum Fate {
    /// Tried again in this pass ([`retry::is_retryable`]).
    Retry,
    /// Deleted: the master refuses this report itself, and would on every launch.
    Refused,
    /// Kept on disk, not tried again in this pass (e.g. a token the master does not take).
    Later,
}

impl Fate {
    fn of(error: &ClientError) -> Fate {
        match error {
            ClientError::Status(status)
                if matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::OutOfRange
                ) =>
            {
                Fate::Refused
            }
            e if retry::is_retryable(e) => Fate::Retry,
            _ => Fate::Later,
        }
    }
}

/// The report kinds the SDK writes, each file named `<kind>-<ms>-<pid>.json`.
pub const REPORT_KINDS: [&str; 6] = ["crash", "hang", "jank", "cpu", "oom", "launch"];

/// Reports waiting in `dir`, oldest first.
pub fn pending(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            REPORT_KINDS
                .iter()
                .any(|kind| name.strip_prefix(kind).is_some_and(|r| r.starts_with('-')))
                && name.ends_with(".json")
        })
        .collect();
    // By the stamp in `<kind>-<ms>-<pid>.json`, then by name.
    files.sort_by_cached_key(|p| {
        let name = p
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        let stamp = name
            .split('-')
            .nth(1)
            .and_then(|ms| ms.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        (stamp, name)
    });
    files
}

/// Removes empty `.inprogress` files left by processes that ended without crashing (never the
/// current process's own).
pub fn clean_stale(dir: &Path) {
    let own = format!("-{}.inprogress", std::process::id());
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
            .to_owned();
        if name.ends_with(".inprogress")
            && !name.ends_with(&own)
            && entry.metadata().is_ok_and(|m| m.len() == 0)
        {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// What is sent of report file `name` read from disk ([`crate::used_images`]): a `crash`,
/// `hang`, `jank` or `cpu` report cut to the images its frames are in (unless every image is to
/// be sent), its result listing those; a `launch` report whole, its result listing every image
/// (it has no frame: its image list is what it tells); any other as written.
fn outgoing(name: &str, report: Vec<u8>) -> (Vec<u8>, api::Modules) {
    let kind = name.split('-').next().unwrap_or("");
    if kind == "launch" {
        return (report, api::Modules::All);
    }
    if crate::used_images::send_all() || !crate::used_images::CUT_KINDS.contains(&kind) {
        return (report, api::Modules::Referenced);
    }
    let cut = crate::used_images::referenced_only(&report).unwrap_or(report);
    (cut, api::Modules::Referenced)
}

/// Submits `report` as native job `job_id` whose result lists `modules`, compressed on the way
/// ([`symcluster_client::native_spec`]: INVALID_ARGUMENT for an empty report or one over 16 MiB,
/// as the master would answer).
async fn submit(
    client: &mut Client,
    job_id: &str,
    (report, modules): (&[u8], api::Modules),
) -> Result<api::SubmitResponse, ClientError> {
    let mut spec = symcluster_client::native_spec(job_id, report)?;
    if let Some(api::job_spec::Payload::Native(native)) = &mut spec.payload {
        native.set_modules(modules);
    }
    client.submit(spec).await
}

/// Submits `report` as `job_id`, or, when that id holds another report (the master answers
/// `created = false` and `same_report = false`: another device chose the id, an SDK before
/// install ids did, or the master cannot tell), as its [`content_job_id`]. That id names this
/// report's content, so the master holds the report under it once it answers at all (created
/// now, or by an earlier try whose answer was lost). The id the master holds the report under.
async fn submit_held(
    client: &mut Client,
    job_id: String,
    (report, modules): (Vec<u8>, api::Modules),
) -> Result<String, ClientError> {
    let answer = submit(client, &job_id, (&report, modules)).await?;
    if answer.created || answer.same_report {
        return Ok(job_id);
    }
    let again = content_job_id(&job_id, &report);
    submit(client, &again, (&report, modules)).await?;
    Ok(again)
}

/// Sends every pending report in `dir` to the leader of the masters at `endpoint` (one
/// `http://host:port`, or several comma-separated), in `attempts` passes at most over the
/// reports a retryable error kept (backoff from 200 ms, doubling to 10 s, with jitter, afresh
/// after a pass that sent something). Job ids are [`job_id`]`(job_prefix, install id, file
/// name)`; without an install id (a directory it cannot be written to) nothing is sent and every
/// report is kept with the reason.
pub async fn send_pending(
    dir: &Path,
    endpoint: &str,
    token: &str,
    job_prefix: &str,
    attempts: u32,
) -> SendSummary {
    clean_stale(dir);
    let mut summary = SendSummary::default();
    let mut files = pending(dir);
    let install = match install_id(dir) {
        Ok(id) => id,
        Err(e) => {
            let reason = format!("no install id in {}: {e}", dir.display());
            summary.kept = files
                .iter()
                .map(|f| (f.display().to_string(), reason.clone()))
                .collect();
            return summary;
        }
    };
    let mut kept_for_later = Vec::new();
    let policy = retry::backoff(Duration::from_secs(10));
    let mut delays = policy.build();
    let mut last_error = String::new();
    let mut pushback: Option<Duration> = None;
    for attempt in 0..attempts.max(1) {
        if files.is_empty() {
            break;
        }
        if attempt > 0 {
            let delay = delays.next().unwrap_or(Duration::from_secs(10));
            // A master over its budget says how long to wait (`grpc-retry-pushback-ms`).
            tokio::time::sleep(retry::at_least_asked(delay, pushback)).await;
            pushback = None;
        }
        let mut client = match Client::connect(endpoint, token).await {
            Ok(client) => client,
            Err(e) => {
                last_error = e.to_string();
                if !retry::is_retryable(&e) {
                    break;
                }
                continue;
            }
        };
        let sent_before = summary.sent.len();
        let mut still = Vec::new();
        let mut queue = files.into_iter();
        while let Some(file) = queue.next() {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("report")
                .to_owned();
            let job_id = job_id(job_prefix, &install, &name);
            let result = match std::fs::read(&file) {
                Ok(bytes) => submit_held(&mut client, job_id.clone(), outgoing(&name, bytes))
                    .await
                    .map_err(|e| {
                        if let Some(asked) = retry::pushback(&e) {
                            pushback = Some(pushback.map_or(asked, |p| p.max(asked)));
                        }
                        (e.to_string(), Fate::of(&e))
                    }),
                // Unreadable now (e.g. still being written): kept for a later launch.
                Err(e) => Err((e.to_string(), Fate::Later)),
            };
            match result {
                Ok(sent_as) => {
                    let _ = std::fs::remove_file(&file);
                    summary.sent.push(sent_as);
                }
                Err((e, Fate::Refused)) => {
                    let _ = std::fs::remove_file(&file);
                    summary.refused.push((job_id, e));
                }
                Err((e, Fate::Retry)) => {
                    last_error = e;
                    still.push(file);
                    if pushback.is_some() {
                        // Told to wait: the rest waits too, for the next pass.
                        still.extend(queue.by_ref());
                    }
                }
                Err((e, Fate::Later)) => kept_for_later.push((file.display().to_string(), e)),
            }
        }
        files = still;
        if summary.sent.len() > sent_before {
            // Progress: the masters are back; the next wait starts short again.
            delays = policy.build();
        }
    }
    summary.kept = files
        .iter()
        .map(|f| (f.display().to_string(), last_error.clone()))
        .chain(kept_for_later)
        .collect();
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_reports_are_every_kind_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "launch-1700000000300-7.json",
            "crash-1700000000200-7.json",
            "oom-1700000000100-6.json",
            "hang-1700000000400-7.tmp",
            "crash-1700000000500-7.inprogress",
            "run-state.json",
            "report-limits",
            "cpu-1700000000250-7.json",
        ] {
            std::fs::write(dir.path().join(name), b"{}").unwrap();
        }
        let names: Vec<String> = pending(dir.path())
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "oom-1700000000100-6.json",
                "crash-1700000000200-7.json",
                "cpu-1700000000250-7.json",
                "launch-1700000000300-7.json",
            ]
        );
    }
}

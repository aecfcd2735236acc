//! Sending pending reports to the cluster on the next launch.
//!
//! Every `crash-*.json` and `hang-*.json` in the report directory is submitted as a native job
//! (the job id is `<prefix>-<file name>`, so a retry after a lost acknowledgement is idempotent)
//! and deleted only once the master acknowledged it. Unreachable masters are retried with
//! exponential backoff; whatever is still unsent stays on disk for the next launch. A report the
//! master refuses for good (`INVALID_ARGUMENT`, e.g. larger than 16 MiB; `OUT_OF_RANGE`, larger
//! than a request may be) would be refused again on every launch: it is deleted and listed in
//! [`SendSummary::refused`] with the master's reason. Leftover `.inprogress` files of processes
//! that did not crash are empty and removed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use symcluster_client::{Client, ClientError};

/// What a send pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SendSummary {
    /// Reports the master acknowledged (and that were deleted).
    pub sent: Vec<String>,
    /// Reports still on disk (with the last error).
    pub kept: Vec<(String, String)>,
    /// Reports the master refused for good, deleted (job id, the master's status and message).
    pub refused: Vec<(String, String)>,
}

/// Whether the master's answer means the report itself will never be accepted.
fn refused_for_good(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Status(status)
            if matches!(status.code(), tonic::Code::InvalidArgument | tonic::Code::OutOfRange)
    )
}

/// Reports waiting in `dir`, oldest first.
pub fn pending(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            (name.starts_with("crash-") || name.starts_with("hang-")) && name.ends_with(".json")
        })
        .collect();
    files.sort();
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

/// Sends every pending report in `dir` to the leader of the masters at `endpoint` (one `http://host:port`, or several comma-separated), `attempts` times at most
/// (backoff 200 ms, doubling). Job ids are `<job_prefix>-<file name>`.
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
    let mut backoff = Duration::from_millis(200);
    let mut last_error = String::new();
    for attempt in 0..attempts.max(1) {
        if files.is_empty() {
            break;
        }
        if attempt > 0 {
            tokio::time::sleep(backoff).await;
            backoff *= 2;
        }
        let mut client = match Client::connect(endpoint, token).await {
            Ok(client) => client,
            Err(e) => {
                last_error = e.to_string();
                continue;
            }
        };
        let mut still = Vec::new();
        for file in files {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("report")
                .to_owned();
            let job_id = format!("{job_prefix}-{name}");
            let result = match std::fs::read(&file) {
                Ok(bytes) => client.submit_native(&job_id, bytes).await.map_err(|e| {
                    let refused = refused_for_good(&e);
                    (e.to_string(), refused)
                }),
                Err(e) => Err((e.to_string(), false)),
            };
            match result {
                Ok(_) => {
                    let _ = std::fs::remove_file(&file);
                    summary.sent.push(job_id);
                }
                Err((e, true)) => {
                    let _ = std::fs::remove_file(&file);
                    summary.refused.push((job_id, e));
                }
                Err((e, false)) => {
                    last_error = e;
                    still.push(file);
                }
            }
        }
        files = still;
    }
    summary.kept = files
        .iter()
        .map(|f| (f.display().to_string(), last_error.clone()))
        .collect();
    summary
}

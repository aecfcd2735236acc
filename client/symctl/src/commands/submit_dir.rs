//! `symctl submit DIR`: every report (or JS stack, or JVM trace) in a folder, over one `SubmitStream`, with
//! a progress bar and a summary line.
//!
//! Each file's job id is the folder's name and the file's path in it (`reports/a/crash.ips`;
//! `--job-id` replaces the folder's name as the prefix), so submitting the same folder again
//! makes no new job: those count as duplicates. The summary
//! line on stdout reads `submitted N, duplicates N, refused N` (with `--wait`, also
//! `completed N, failed N`); every refusal is printed on stderr with its reason, and symctl
//! exits 1 when any file was refused (or, with `--wait`, any job failed).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use symcluster_client::{Client, api};
use tokio::sync::Semaphore;

use crate::cli::SubmitArgs;

/// Submits at once, at most.
const IN_FLIGHT: usize = 32;

/// How one file ended.
enum Outcome {
    /// The master took it: `created` (false: the job existed), and with `--wait` how it ended
    /// (`Err`: failed, with the error).
    Taken {
        created: bool,
        finished: Option<Result<(), String>>,
    },
    /// The master (or symctl) refused it.
    Refused(String),
}

/// The files of `dir`, recursively, in path order (hidden files skipped).
fn files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'))
    {
        let entry = entry.with_context(|| format!("cannot read {}", dir.display()))?;
        if entry.file_type().is_file() {
            files.push(entry.into_path());
        }
    }
    Ok(files)
}

/// The spec of one file: a JS, JVM, combined or native job, as `args` says.
pub(super) fn spec(
    args: &SubmitArgs,
    job_id: String,
    data: Vec<u8>,
) -> Result<api::JobSpec, String> {
    if args.combined {
        Ok(api::JobSpec {
            job_id,
            payload: Some(api::job_spec::Payload::Combined(api::CombinedJob {
                event: data,
            })),
            project: String::new(),
        })
    } else if args.jvm {
        Ok(api::JobSpec {
            job_id,
            payload: Some(api::job_spec::Payload::Jvm(api::JvmJob {
                trace: data,
                mapping_id: args.mapping_id.clone().unwrap_or_default(),
            })),
            project: String::new(),
        })
    } else if args.js {
        Ok(api::JobSpec {
            job_id,
            payload: Some(api::job_spec::Payload::Js(api::JsJob {
                stack: data,
                debug_id: args.debug_id.clone().unwrap_or_default(),
                release: args.release.clone().unwrap_or_default(),
                dist: args.dist.clone(),
                bundle: args.bundle_name.clone().unwrap_or_default(),
            })),
            project: String::new(),
        })
    } else {
        super::native_spec(&job_id, &data, args.modules)
    }
}

async fn one(
    client: Client,
    stream: symcluster_client::SubmitStream,
    spec: api::JobSpec,
    wait: bool,
) -> Outcome {
    let job_id = spec.job_id.clone();
    let submitted = match stream.submit(spec, false).await {
        Ok(submitted) => submitted,
        Err(e) => return Outcome::Refused(e.to_string()),
    };
    let created = submitted.response.created;
    if !wait {
        return Outcome::Taken {
            created,
            finished: None,
        };
    }
    let project = submitted
        .response
        .job
        .map(|j| j.project)
        .unwrap_or_default();
    let finished = match client.with_project(&project).wait(&job_id).await {
        Ok(job) if job.state == api::JobState::Completed as i32 => Ok(()),
        Ok(job) => Err(job.error),
        Err(e) => Err(e.to_string()),
    };
    Outcome::Taken {
        created,
        finished: Some(finished),
    }
}

/// Runs `symctl submit DIR` (module docs).
pub async fn run(args: SubmitArgs, client: Client) -> anyhow::Result<()> {
    let dir = args.file.clone();
    let files = files(&dir)?;
    if files.is_empty() {
        anyhow::bail!("{} holds no file to submit", dir.display());
    }
    // Default: the folder's own name, so that two folders' `crash.ips` are two jobs.
    let prefix = args.job_id.clone().unwrap_or_else(|| {
        let name = std::fs::canonicalize(&dir)
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        if name.is_empty() {
            name
        } else {
            format!("{name}/")
        }
    });
    let bar = super::progress_bar(files.len() as u64, "{bar:40} {pos}/{len} {msg}");
    let stream = client.submit_stream();
    let permits = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    let args = Arc::new(args);
    for path in files {
        let relative = path
            .strip_prefix(&dir)
            .unwrap_or(&path)
            .to_string_lossy()
            .into_owned();
        let job_id = format!("{prefix}{relative}");
        let permit = permits.clone().acquire_owned().await?;
        let (client, stream, args) = (client.clone(), stream.clone(), args.clone());
        tasks.spawn(async move {
            let outcome = match std::fs::read(&path) {
                Err(e) => Outcome::Refused(format!("cannot read it: {e}")),
                Ok(data) => match spec(&args, job_id.clone(), data) {
                    Err(reason) => Outcome::Refused(reason),
                    Ok(spec) => one(client, stream, spec, args.wait).await,
                },
            };
            drop(permit);
            (relative, outcome)
        });
    }
    let (mut submitted, mut duplicates, mut refused, mut completed, mut failed) = (0, 0, 0, 0, 0);
    while let Some(done) = tasks.join_next().await {
        let (file, outcome) = done?;
        bar.inc(1);
        match outcome {
            Outcome::Taken { created, finished } => {
                if created {
                    submitted += 1;
                } else {
                    duplicates += 1;
                }
                match finished {
                    Some(Ok(())) => completed += 1,
                    Some(Err(reason)) => {
                        failed += 1;
                        bar.suspend(|| eprintln!("symctl: {file}: failed: {reason}"));
                    }
                    None => {}
                }
            }
            Outcome::Refused(reason) => {
                refused += 1;
                bar.suspend(|| eprintln!("symctl: {file}: refused: {reason}"));
            }
        }
    }
    bar.finish_and_clear();
    let mut summary = format!("submitted {submitted}, duplicates {duplicates}, refused {refused}");
    if args.wait {
        summary.push_str(&format!(", completed {completed}, failed {failed}"));
    }
    println!("{summary}");
    if refused > 0 || failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

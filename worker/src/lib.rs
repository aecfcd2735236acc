//! The symcluster worker: leases jobs from a master and runs them with `symcluster-engine`, up
//! to one job per slot (CPU cores by default), fetching debug files and source maps from S3 or a
//! directory through disk and memory caches.
//!
//! - [`config`]: flags and environment;
//! - where files live in the bucket, and S3 or a directory to read them from: the
//!   `symcluster-sources` crate (shared with `symctl upload`);
//! - [`disk_cache`]: byte-budgeted LRU disk cache;
//! - [`caches`]: memory (`moka`) over disk over source, with single-flight and negative caching;
//! - [`runner`]: one job, start to end;
//! - [`run`]: the connection to the master: register, lease stream, heartbeats, results.

#![deny(missing_docs)]

pub mod caches;
pub mod config;
pub mod disk_cache;
pub mod grouping;
pub mod runner;

/// The engine the worker runs (re-exported for embedding).
pub use symcluster_engine as engine;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use symcluster_client::{Client, api};
use tokio::sync::Semaphore;

use caches::Caches;
use config::WorkerConfig;
use disk_cache::DiskCache;
use runner::Outcome;
use symcluster_sources::{S3Settings, Source};

/// The source `config` describes: `--source-dir`, or the S3 bucket.
async fn source(config: &WorkerConfig) -> anyhow::Result<Source> {
    if let Some(dir) = &config.source_dir {
        return Ok(Source::Dir(dir.clone()));
    }
    let Some(bucket) = &config.bucket.s3_bucket else {
        anyhow::bail!("no debug file source: give --s3-bucket or --source-dir");
    };
    Ok(Source::s3(&S3Settings {
        bucket: bucket.clone(),
        endpoint: config.bucket.s3_endpoint.clone(),
        region: config.bucket.s3_region.clone(),
        attempts: config.s3_attempts,
        timeout_ms: config.s3_timeout_ms,
    })
    .await)
}

/// Runs a worker until the process ends: connects (and reconnects) to the master, registers,
/// and runs the jobs it leases.
pub async fn run(config: WorkerConfig) -> anyhow::Result<()> {
    let slots = config
        .slots
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32));
    let worker_id = config.worker_id.clone().unwrap_or_else(default_worker_id);
    let source = source(&config).await?;
    let disk = DiskCache::open(&config.cache_dir, config.disk_cache_bytes)?;
    let caches = Arc::new(Caches::new(
        source,
        config.bucket.s3_prefix.clone(),
        disk,
        config.memory_cache_bytes,
        Duration::from_secs(config.negative_cache_secs),
    ));
    let running: Arc<Mutex<HashSet<String>>> = Arc::default();
    let slots_sem = Arc::new(Semaphore::new(slots as usize));
    tracing::info!(worker = %worker_id, slots, master = %config.master, "worker starting");

    let mut backoff = Duration::from_millis(200);
    loop {
        match session(&config, &worker_id, slots, &caches, &running, &slots_sem).await {
            Ok(()) => tracing::warn!("lease stream ended; reconnecting"),
            Err(e) => tracing::warn!(error = %e, "master session failed; reconnecting"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// One connection to the master: register, heartbeat, take leases until the stream ends.
async fn session(
    config: &WorkerConfig,
    worker_id: &str,
    slots: u32,
    caches: &Arc<Caches>,
    running: &Arc<Mutex<HashSet<String>>>,
    slots_sem: &Arc<Semaphore>,
) -> anyhow::Result<()> {
    let tls = symcluster_client::Tls::from_files(
        config.tls_ca.as_deref(),
        config.tls_cert.as_deref(),
        config.tls_key.as_deref(),
    )?;
    let client = Client::connect_with(&config.master, &config.token, tls).await?;
    let registration = client
        .worker_api()
        .register(api::RegisterRequest {
            worker_id: worker_id.to_owned(),
            slots,
        })
        .await?
        .into_inner();

    let heartbeat = {
        let client = client.clone();
        let worker_id = worker_id.to_owned();
        let running = running.clone();
        let caches = caches.clone();
        let every = Duration::from_millis(registration.heartbeat_ms.max(100));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let running_job_ids: Vec<String> = running
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .cloned()
                    .collect();
                let request = api::HeartbeatRequest {
                    worker_id: worker_id.clone(),
                    running_job_ids,
                    cache: Some(api::CacheStats {
                        hits: caches.counters.hits.load(Ordering::Relaxed),
                        misses: caches.counters.misses.load(Ordering::Relaxed),
                        memory_bytes: caches.memory_bytes(),
                        disk_bytes: caches.disk_bytes(),
                    }),
                };
                match client.worker_api().heartbeat(request).await {
                    Ok(r) if !r.get_ref().known => {
                        tracing::warn!("master forgot this worker; re-registering");
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                }
            }
        })
    };

    let mut leases = client
        .worker_api()
        .lease_jobs(api::LeaseJobsRequest {
            worker_id: worker_id.to_owned(),
        })
        .await?
        .into_inner();
    let result = loop {
        if heartbeat.is_finished() {
            break Ok(());
        }
        let lease = match leases.message().await {
            Ok(Some(lease)) => lease,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e.into()),
        };
        let Some(spec) = lease.job else { continue };
        let permit = slots_sem.clone().acquire_owned().await?;
        let job_id = spec.job_id.clone();
        running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(job_id.clone());
        let (client, caches, running) = (client.clone(), caches.clone(), running.clone());
        let worker_id = worker_id.to_owned();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let outcome = runner::run(spec, &caches, lease.recheck_missing).await;
            tracing::info!(job = %job_id, attempt = lease.attempt, ms = started.elapsed().as_millis() as u64,
                ok = matches!(outcome, Outcome::Completed { .. }), "job finished");
            report(&client, &worker_id, &job_id, lease.attempt, outcome).await;
            running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&job_id);
            drop(permit);
        });
    };
    heartbeat.abort();
    result
}

/// Sends a job's outcome to the leader, following it through a failover and retrying briefly
/// on transport errors. If it never arrives, the lease expires and the job runs again: nothing
/// is lost.
async fn report(client: &Client, worker_id: &str, job_id: &str, attempt: u32, outcome: Outcome) {
    let sent = match &outcome {
        Outcome::Completed {
            result_zstd,
            group,
            missing,
            call_tree,
        } => {
            let request = api::CompleteJobRequest {
                worker_id: worker_id.to_owned(),
                job_id: job_id.to_owned(),
                attempt,
                result_json: Vec::new(),
                group: group.clone(),
                result_zstd: result_zstd.clone(),
                missing: missing.clone(),
                call_tree: call_tree.clone(),
            };
            client
                .on_leader(|channel| {
                    let request = request.clone();
                    async move {
                        api::worker_api_client::WorkerApiClient::new(channel)
                            .complete_job(request)
                            .await
                            .map(|_| ())
                    }
                })
                .await
        }
        Outcome::Failed {
            error,
            retryable,
            missing,
        } => {
            let request = api::FailJobRequest {
                worker_id: worker_id.to_owned(),
                job_id: job_id.to_owned(),
                attempt,
                error: error.clone(),
                retryable: *retryable,
                missing: missing.clone(),
            };
            client
                .on_leader(|channel| {
                    let request = request.clone();
                    async move {
                        api::worker_api_client::WorkerApiClient::new(channel)
                            .fail_job(request)
                            .await
                            .map(|_| ())
                    }
                })
                .await
        }
    };
    if let Err(e) = sent {
        tracing::warn!(job = job_id, error = %e, "reporting the outcome failed; the lease will expire");
    }
}

fn default_worker_id() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "worker".into());
    format!("{host}-{}", std::process::id())
}

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
//! - [`metrics`]: Prometheus `/metrics` and the `/ready` probe;
//! - [`session`]: one connection to the master: register, lease stream, heartbeats, results,
//!   and the drain that ends the worker;
//! - `outcomes`: the session's `ReportOutcomes` call, which carries every job's outcome (the
//!   unary `CompleteJob`/`FailJob` when it cannot);
//! - [`shutdown`]: SIGTERM/SIGINT as a drain request (a second signal cuts the drain short);
//! - [`run`]: reconnects sessions until the worker has drained.

#![deny(missing_docs)]

pub mod caches;
mod combined;
pub mod config;
pub mod debug_file;
pub mod disk_cache;
pub mod first_answer;
pub mod grouping;
pub mod metrics;
mod outcomes;
mod reconnect;
pub mod runner;
pub mod scrape;
pub mod session;
pub mod shutdown;

/// The engine the worker runs (re-exported for embedding).
pub use symcluster_engine as engine;

use std::sync::Arc;
use std::time::Duration;

use caches::Caches;
use config::WorkerConfig;
use disk_cache::DiskCache;
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

/// Runs a worker until a shutdown signal (SIGTERM or SIGINT) has been handled: connects (and
/// reconnects) to the master, registers, and runs the jobs it leases; then drains
/// ([`session`]): no new leases, running jobs finish within `--drain-timeout`, the rest go back
/// to the queue, and the worker deregisters.
pub async fn run(config: WorkerConfig) -> anyhow::Result<()> {
    run_until(config, shutdown::Shutdown::on_signals()?).await
}

/// `--prefetch` when not given, per slot (measured in `loadtest/README.md`: 3 masters, one
/// 2-slot worker, 323 reports/s with none, 424 with 2 per slot, 446 with 4).
pub const DEFAULT_PREFETCH_PER_SLOT: u32 = 2;

/// [`run`], stopping when `shutdown` says so (a test or an embedding program drives it).
pub async fn run_until(
    config: WorkerConfig,
    mut shutdown: shutdown::Shutdown,
) -> anyhow::Result<()> {
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
        caches::CacheSettings {
            memory_bytes: config.memory_cache_bytes,
            negative_ttl: Duration::from_secs(config.negative_cache_secs),
            max_conversions: config.max_conversions(),
            share_symcaches: config.share_symcaches,
            download: config.download_limits(),
            partial_symcaches: config.partial_symcaches,
        },
    ));
    let prefetch = config
        .prefetch
        .unwrap_or(slots.saturating_mul(DEFAULT_PREFETCH_PER_SLOT));
    let jobs = session::Jobs::new(slots, prefetch);
    let ready = Arc::new(metrics::Readiness::default());
    // Bound here, so that a port in use stops the worker at once.
    let metrics_listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.metrics_listen))?;
    tokio::spawn(scrape::serve(
        metrics_listener,
        caches.clone(),
        jobs.clone(),
        ready.clone(),
    ));
    tracing::info!(worker = %worker_id, slots, prefetch, master = %config.master, metrics = %config.metrics_listen, "worker starting");

    let mut reconnect = reconnect::Reconnect::new();
    loop {
        // A session drains the worker itself when a shutdown comes while it is connected.
        let began = std::time::Instant::now();
        let ended = session::run(
            &config,
            &worker_id,
            &caches,
            &jobs,
            &ready,
            shutdown.clone(),
        )
        .await;
        match ended {
            Ok(session::End::Drained) => return Ok(()),
            Ok(session::End::StreamClosed) => {
                tracing::warn!("lease stream ended; reconnecting");
                reconnect.registered(began.elapsed());
            }
            Ok(session::End::Lost(e)) => {
                tracing::warn!(error = %e, "master session lost; reconnecting");
                reconnect.registered(began.elapsed());
            }
            Err(e) => tracing::warn!(error = %e, "cannot reach the master; retrying"),
        }
        if shutdown.is_requested() {
            // Stopping while not connected: the jobs left are drained without a lease stream.
            session::drain_disconnected(&config, &worker_id, &jobs, &shutdown).await;
            return Ok(());
        }
        let wait = reconnect.next_wait();
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = shutdown.requested() => {}
        }
    }
}

fn default_worker_id() -> String {
    let host = gethostname::gethostname()
        .into_string()
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "worker".into());
    format!("{host}-{}", std::process::id())
}

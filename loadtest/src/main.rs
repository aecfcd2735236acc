//! `symcluster-loadtest`: throughput and latency of the whole path (submit → lease → fetch from
//! S3 → symbolicate → index → watch), on real local clusters, and the cache hit rate that
//! affinity routing gives against random routing.
//!
//! For each worker count and routing mode it starts a fresh cluster (Garage, master, workers as
//! processes), uploads the CrashProbe dSYMs (release and debug builds), then submits `--jobs`
//! CrashProbe reports with `--concurrency` clients at once, each waiting for its result. It
//! prints reports/s, p50/p99 latency (submit to result), and the workers' cache hit rate.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions, repo};
use tokio::sync::Semaphore;

/// Load test options.
#[derive(Debug, Parser)]
#[command(name = "symcluster-loadtest", about)]
struct Args {
    /// Worker counts to measure.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2])]
    workers: Vec<usize>,
    /// Routing modes to measure.
    #[arg(long, value_delimiter = ',', default_values = ["affinity", "random"])]
    routing: Vec<String>,
    /// Reports per run.
    #[arg(long, default_value_t = 400)]
    jobs: usize,
    /// Clients submitting at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Slots per worker.
    #[arg(long, default_value_t = 2)]
    slots: u32,
    /// Memory cache per worker, bytes (small, so that routing matters).
    #[arg(long, default_value_t = 6 << 20)]
    memory_cache_bytes: u64,
    /// Disk cache per worker, bytes.
    #[arg(long, default_value_t = 1 << 30)]
    disk_cache_bytes: u64,
    /// The shared fixtures folder.
    #[arg(long, default_value_os_t = repo().join("../shared/fixtures"))]
    fixtures: std::path::PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut reports = Vec::new();
    for build in ["release", "debug"] {
        for entry in std::fs::read_dir(args.fixtures.join("crashprobe").join(build).join("arm64"))?
        {
            reports.push(std::fs::read(entry?.path())?);
        }
    }
    let reports = Arc::new(reports);
    println!(
        "{} jobs per run, {} clients, CrashProbe reports ({} distinct), {} slots per worker",
        args.jobs,
        args.concurrency,
        reports.len(),
        args.slots
    );
    println!(
        "| workers | routing | reports/s | p50 ms | p99 ms | cache hit rate | affine leases |"
    );
    println!("|---|---|---|---|---|---|---|");
    for &workers in &args.workers {
        for routing in &args.routing {
            let routing: &'static str = if routing == "random" {
                "random"
            } else {
                "affinity"
            };
            let line = run(&args, workers, routing, reports.clone()).await?;
            println!("{line}");
        }
    }
    Ok(())
}

async fn run(
    args: &Args,
    workers: usize,
    routing: &'static str,
    reports: Arc<Vec<Vec<u8>>>,
) -> anyhow::Result<String> {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            routing,
            ..MasterOptions::default()
        },
    )
    .await;
    for _ in 0..workers {
        cluster
            .add_worker_with(WorkerOptions {
                slots: args.slots,
                memory_cache_bytes: args.memory_cache_bytes,
                disk_cache_bytes: args.disk_cache_bytes,
            })
            .await;
    }
    let crashprobe = args.fixtures.join("crashprobe");
    let out = cluster.symctl(&[
        "upload",
        "dsym",
        &crashprobe.join("release/dSYMs").display().to_string(),
        &crashprobe.join("debug/dSYMs").display().to_string(),
    ]);
    anyhow::ensure!(
        out.status.success(),
        "upload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let client = cluster.client().await;
    let gate = Arc::new(Semaphore::new(args.concurrency));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.jobs);
    for i in 0..args.jobs {
        let permit = gate.clone().acquire_owned().await?;
        let mut client = client.clone();
        let report = reports[i % reports.len()].clone();
        tasks.push(tokio::spawn(async move {
            let t = Instant::now();
            let id = format!("load-{i}");
            client.submit_native(&id, report).await?;
            let job = tokio::time::timeout(Duration::from_secs(120), client.wait(&id)).await??;
            drop(permit);
            anyhow::ensure!(job.error.is_empty(), "job {id} failed: {}", job.error);
            Ok::<Duration, anyhow::Error>(t.elapsed())
        }));
    }
    let mut latency = Histogram::<u64>::new(3)?;
    for task in tasks {
        latency.record(task.await??.as_micros() as u64)?;
    }
    let elapsed = started.elapsed();
    // Let the workers' next heartbeat carry their final cache counters.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let status = cluster.status().await;
    let (hits, misses) = status
        .workers
        .iter()
        .fold((0, 0), |(h, m), w| (h + w.cache_hits, m + w.cache_misses));
    Ok(format!(
        "| {workers} | {routing} | {:.1} | {:.1} | {:.1} | {:.1}% ({hits} hits, {misses} misses) | {:.0}% |",
        args.jobs as f64 / elapsed.as_secs_f64(),
        latency.value_at_quantile(0.5) as f64 / 1000.0,
        latency.value_at_quantile(0.99) as f64 / 1000.0,
        100.0 * hits as f64 / (hits + misses).max(1) as f64,
        100.0 * status.affine_leases as f64 / status.total_leases.max(1) as f64,
    ))
}

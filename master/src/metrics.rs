//! Prometheus metrics, served over HTTP at `/metrics`.

use std::net::SocketAddr;
use std::sync::{Arc, LazyLock};

use prometheus::{Encoder, IntCounter, IntGauge, Registry, TextEncoder};

use crate::scheduler::Scheduler;

/// The master's registry.
pub static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::new);

fn counter(name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    REGISTRY
        .register(Box::new(c.clone()))
        .expect("unique metric");
    c
}

fn gauge(name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    REGISTRY
        .register(Box::new(g.clone()))
        .expect("unique metric");
    g
}

/// Jobs created by `Submit`.
pub static JOBS_SUBMITTED: LazyLock<IntCounter> =
    LazyLock::new(|| counter("symcluster_jobs_submitted_total", "Jobs created by Submit"));
/// Jobs completed.
pub static JOBS_COMPLETED: LazyLock<IntCounter> =
    LazyLock::new(|| counter("symcluster_jobs_completed_total", "Jobs completed"));
static QUEUE_DEPTH: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_queue_depth", "Jobs waiting for a slot"));
static JOBS_RUNNING: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_jobs_running", "Jobs leased to workers"));
static JOBS_FAILED: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_jobs_failed", "Jobs failed for good"));
static WORKERS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_workers_connected",
        "Workers with an open lease stream",
    )
});
static LEASES: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_leases_total", "Leases granted since start"));
static AFFINE_LEASES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_affine_leases_total",
        "Leases given to the job's preferred worker",
    )
});

/// Serves `/metrics` on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, scheduler: Arc<Scheduler>) -> anyhow::Result<()> {
    LazyLock::force(&JOBS_SUBMITTED);
    LazyLock::force(&JOBS_COMPLETED);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let scheduler = scheduler.clone();
            async move {
                let status = scheduler.status();
                QUEUE_DEPTH.set(status.queue_depth as i64);
                JOBS_RUNNING.set(status.jobs_running as i64);
                JOBS_FAILED.set(status.jobs_failed as i64);
                WORKERS.set(status.workers.iter().filter(|w| w.connected).count() as i64);
                LEASES.set(status.total_leases as i64);
                AFFINE_LEASES.set(status.affine_leases as i64);
                let mut out = Vec::new();
                let _ = TextEncoder::new().encode(&REGISTRY.gather(), &mut out);
                (
                    [("content-type", "text/plain; version=0.0.4")],
                    String::from_utf8_lossy(&out).into_owned(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await?;
    Ok(())
}

//! The master's `/metrics` endpoint: at each scrape, the gauges that describe the scheduler
//! and the index now are set from them ([`crate::metrics`] holds the metrics; it depends on
//! nothing of the master's).

use std::net::SocketAddr;
use std::sync::Arc;

use crate::metrics::{
    JOBS_FAILED, JOBS_RUNNING, KINDS, MISSING_FILE_JOBS, MISSING_FILES, QUEUE_DEPTH,
    QUEUE_OLDEST_AGE, REGISTRY, WORKER_SLOTS, WORKERS, WORKERS_DRAINING, register_all,
};
use crate::scheduler::Scheduler;

/// Serves `/metrics` on `addr` until the process ends. Errors: `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, scheduler: Arc<Scheduler>) -> anyhow::Result<()> {
    register_all();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let scheduler = scheduler.clone();
            async move {
                let Ok(status) = scheduler.status() else {
                    return (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        [("content-type", "text/plain".to_owned())],
                        b"index unreadable\n".to_vec(),
                    );
                };
                let queue = scheduler.queue_stats();
                for (kind, label) in KINDS {
                    let (depth, oldest_ms) = queue.queued.get(&kind).copied().unwrap_or_default();
                    QUEUE_DEPTH.with_label_values(&[label]).set(depth as i64);
                    QUEUE_OLDEST_AGE
                        .with_label_values(&[label])
                        .set(oldest_ms as f64 / 1000.0);
                }
                WORKER_SLOTS
                    .with_label_values(&["busy"])
                    .set(queue.busy_slots as i64);
                WORKER_SLOTS
                    .with_label_values(&["free"])
                    .set(queue.free_slots as i64);
                WORKERS_DRAINING.set(queue.draining_workers as i64);
                JOBS_RUNNING.set(status.jobs_running as i64);
                JOBS_FAILED.set(status.jobs_failed as i64);
                WORKERS.set(status.workers.iter().filter(|w| w.connected).count() as i64);
                if let Ok(missing) = scheduler.index().missing_files(usize::MAX, |_| true) {
                    MISSING_FILES.set(missing.len() as i64);
                    MISSING_FILE_JOBS.set(missing.iter().map(|m| m.jobs).sum::<u64>() as i64);
                }
                symcluster_telemetry::exposition(&REGISTRY)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    symcluster_telemetry::serve(listener, app).await;
    Ok(())
}

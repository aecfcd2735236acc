//! The master's `/metrics` endpoint and its probes (`/live`, `/ready`): at each scrape, the gauges that describe the scheduler
//! now are set from it ([`crate::metrics`] holds the metrics; it depends on nothing of the
//! master's). The missing-files gauges read the whole missing-files index: they are counted
//! in the background every [`MISSING_REFRESH`], on the blocking pool, never by a scrape (a
//! scraper, or anyone who can reach the port, cannot make the master scan it at will).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::metrics::{
    JOBS_FAILED, JOBS_RUNNING, KINDS, MISSING_FILE_JOBS, MISSING_FILES, QUEUE_DEPTH,
    QUEUE_OLDEST_AGE, REGISTRY, WORKER_SLOTS, WORKERS, WORKERS_DRAINING, register_all,
};
use crate::scheduler::Scheduler;

/// How often the missing-files gauges (`symcluster_missing_files`,
/// `symcluster_missing_file_jobs`) are counted again.
pub const MISSING_REFRESH: Duration = Duration::from_secs(10);

/// Counts the missing files every [`MISSING_REFRESH`] (the first time at once) into their
/// gauges, off the runtime's threads; an unreadable index leaves them as they were.
async fn refresh_missing(scheduler: Arc<Scheduler>) {
    let mut every = tokio::time::interval(MISSING_REFRESH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let index = scheduler.index().clone();
        let counted = tokio::task::spawn_blocking(move || {
            index
                .missing_files(usize::MAX, |_| true)
                .map(|missing| (missing.len(), missing.iter().map(|m| m.jobs).sum::<u64>()))
        })
        .await;
        match counted {
            Ok(Ok((files, jobs))) => {
                MISSING_FILES.set(files as i64);
                MISSING_FILE_JOBS.set(jobs as i64);
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "missing files not counted"),
            Err(e) => tracing::warn!(error = %e, "missing files not counted"),
        }
    }
}

/// Serves `/metrics`, `/live` and `/ready` (this master knows the leader and reads its index)
/// on `addr` until the process ends. Errors: `addr` cannot be bound.
pub async fn serve(addr: SocketAddr, scheduler: Arc<Scheduler>) -> anyhow::Result<()> {
    register_all();
    tokio::spawn(refresh_missing(scheduler.clone()));
    let ready = scheduler.clone();
    let app = axum::Router::new().merge(symcluster_telemetry::probes(move || {
        if ready.raft().leader_address().is_none() {
            return Err("no leader known (an election, or cut off from the group)".to_owned());
        }
        ready
            .index()
            .applied()
            .map(|_| ())
            .map_err(|e| format!("the index is unreadable: {e}"))
    }));
    let app = app.route(
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
                symcluster_telemetry::exposition(&REGISTRY)
            }
        }),
    );
    #[cfg(feature = "failpoints")]
    let app = app.merge(failpoint_routes());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    symcluster_telemetry::serve(listener, app).await;
    Ok(())
}

/// A build with the `failpoints` feature only ([`crate::failpoints`]): `GET /fail` lists the
/// armed points (`name=actions` lines), `PUT /fail/NAME` arms one with the body's actions
/// (200; 400 with the reason for an unknown point or a malformed action), `DELETE /fail/NAME`
/// disarms it (200).
#[cfg(feature = "failpoints")]
fn failpoint_routes() -> axum::Router {
    use axum::extract::Path;
    use axum::http::StatusCode;
    use axum::routing::get;

    axum::Router::new()
        .route(
            "/fail",
            get(|| async {
                let mut armed = fail::list();
                armed.sort();
                armed
                    .into_iter()
                    .map(|(name, actions)| format!("{name}={actions}\n"))
                    .collect::<String>()
            }),
        )
        .route(
            "/fail/{name}",
            axum::routing::put(|Path(name): Path<String>, actions: String| async move {
                match crate::failpoints::arm(&name, actions.trim()) {
                    Ok(()) => (StatusCode::OK, String::new()),
                    Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")),
                }
            })
            .delete(|Path(name): Path<String>| async move {
                crate::failpoints::disarm(&name);
                StatusCode::OK
            }),
        )
}

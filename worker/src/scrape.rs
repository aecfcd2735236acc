//! The worker's `/metrics` endpoint and its probes (`/live`, `/ready`): at each scrape, the gauges of its slots and
//! caches are set from them ([`crate::metrics`] holds the metrics and depends on nothing of the
//! worker's).

use std::sync::Arc;

use crate::caches::Caches;
use crate::metrics::{CACHE_BUDGET_BYTES, CACHE_BYTES, REGISTRY, Readiness, SLOTS, register_all};
use crate::session::Jobs;

/// Serves `/metrics`, `/live` and `/ready` on `listener` until the process ends.
pub async fn serve(
    listener: tokio::net::TcpListener,
    caches: Arc<Caches>,
    jobs: Jobs,
    ready: Arc<Readiness>,
) {
    register_all();
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let (caches, jobs) = (caches.clone(), jobs.clone());
                async move {
                    let busy = i64::from(jobs.busy_slots());
                    let slots = i64::from(jobs.slots());
                    SLOTS.with_label_values(&["busy"]).set(busy);
                    SLOTS
                        .with_label_values(&["free"])
                        .set((slots - busy).max(0));
                    CACHE_BYTES
                        .with_label_values(&["memory"])
                        .set(caches.memory_bytes() as i64);
                    CACHE_BYTES
                        .with_label_values(&["disk"])
                        .set(caches.disk_bytes() as i64);
                    let (memory_budget, disk_budget) = caches.budgets();
                    CACHE_BUDGET_BYTES
                        .with_label_values(&["memory"])
                        .set(memory_budget as i64);
                    CACHE_BUDGET_BYTES
                        .with_label_values(&["disk"])
                        .set(disk_budget as i64);
                    symcluster_telemetry::exposition(&REGISTRY)
                }
            }),
        )
        .merge(symcluster_telemetry::probes(move || {
            if ready.get() {
                Ok(())
            } else {
                Err("not connected to the leader, or draining".to_owned())
            }
        }));
    symcluster_telemetry::serve(listener, app).await;
}

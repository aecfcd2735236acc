//! The symcluster master: accepts jobs over gRPC, keeps the durable job/result index, and
//! schedules native and JS jobs onto workers with leases and cache-affinity routing.
//!
//! - [`state`]: the index as a deterministic state machine over commands (Raft-ready);
//! - [`store`]: the durable command log (`redb`);
//! - [`scheduler`]: queue, workers, leases, rendezvous routing; the only writer of the index;
//! - [`routing`]: request checks and routing keys;
//! - [`grouping`]: crash-group fingerprints;
//! - [`service`]: the gRPC services (Ingest, WorkerApi, Admin), auth and status mapping;
//! - [`metrics`]: Prometheus metrics over HTTP.

#![deny(missing_docs)]

pub mod config;
pub mod grouping;
pub mod metrics;
pub mod routing;
pub mod scheduler;
pub mod service;
pub mod state;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use symcluster_proto::v1::{
    admin_server::AdminServer, ingest_server::IngestServer, worker_api_server::WorkerApiServer,
};
use tonic::service::interceptor::InterceptedService;

use config::MasterConfig;
use scheduler::{Scheduler, SchedulerConfig};
use service::{AdminService, BearerAuth, IngestService, WorkerApiService};
use store::CommandLog;

/// Runs a master until `shutdown` resolves.
///
/// Opens (or creates) the index in `config.data_dir`, replays it, and serves gRPC on
/// `config.listen` and metrics on `config.metrics_listen`.
pub async fn run(
    config: MasterConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)?;
    let log = CommandLog::open(&config.data_dir.join("index.redb"))?;
    let replayed = log.len();
    let scheduler = Arc::new(Scheduler::open(
        log,
        SchedulerConfig {
            routing: config.routing,
            lease_ms: config.lease_ms,
            heartbeat_ms: config.heartbeat_ms,
            max_attempts: config.max_attempts.max(1),
        },
    )?);
    tracing::info!(entries = replayed, listen = %config.listen, "index replayed; serving");

    let expiry = scheduler.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let s = expiry.clone();
            match tokio::task::spawn_blocking(move || s.expire_leases()).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::warn!(expired = n, "leases expired; jobs requeued"),
                Ok(Err(e)) => tracing::error!(error = %e, "lease expiry failed"),
                Err(e) => tracing::error!(error = %e, "lease expiry task failed"),
            }
        }
    });
    let metrics = scheduler.clone();
    let metrics_addr = config.metrics_listen;
    tokio::spawn(async move {
        if let Err(e) = metrics::serve(metrics_addr, metrics).await {
            tracing::error!(error = %e, "metrics endpoint failed");
        }
    });

    let (health_reporter, health) = tonic_health::server::health_reporter();
    health_reporter
        .set_serving::<IngestServer<IngestService>>()
        .await;
    health_reporter
        .set_serving::<WorkerApiServer<WorkerApiService>>()
        .await;
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(symcluster_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;

    let auth = BearerAuth::new(&config.token);
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(reflection)
        .add_service(InterceptedService::new(
            IngestServer::new(IngestService::new(scheduler.clone())),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            WorkerApiServer::new(WorkerApiService::new(scheduler.clone())),
            auth.clone(),
        ))
        .add_service(InterceptedService::new(
            AdminServer::new(AdminService::new(scheduler, config.master_id.clone())),
            auth,
        ))
        .serve_with_shutdown(config.listen, shutdown)
        .await?;
    Ok(())
}

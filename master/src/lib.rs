//! The symcluster master: accepts jobs over gRPC, keeps the job/result index replicated across
//! a group of masters with Raft, and (on the leader) schedules native and JS jobs onto workers
//! with leases and cache-affinity routing.
//!
//! - [`index`]: jobs, results and crash groups in `redb` tables, changed only by applying
//!   committed commands (deterministic);
//! - [`raft`]: the Raft member (raft-rs): node thread, durable log, transport, snapshots;
//! - [`restore`]: a new master's index seeded from a backup (`--restore`);
//! - [`scheduler`]: queue, leases, placement and the worker registry, on the leader;
//! - request checks and routing keys live in `symcluster-admission` (`master/admission/`);
//! - [`service`]: the gRPC services (Ingest, Uploads, WorkerApi, Admin, and the masters'
//!   Peer), auth, leader redirects;
//! - [`metrics`]: the Prometheus metrics (statics only); [`scrape`]: `/metrics`, `/live` and
//!   `/ready` over HTTP.

#![deny(missing_docs)]

pub mod auth;
pub mod config;
pub mod connections;
pub mod failpoints;
pub mod index;
pub mod metrics;
pub mod missing_check;
pub mod open_files;
pub mod raft;
pub mod replica;
pub mod restore;
pub mod scheduler;
pub mod scrape;
pub mod service;

use std::sync::Arc;
use std::time::Duration;

use symcluster_proto::cluster::v1::peer_server::PeerServer;
use symcluster_proto::v1::{
    admin_server::AdminServer, ingest_server::IngestServer, uploads_server::UploadsServer,
    worker_api_server::WorkerApiServer,
};
use tonic::service::interceptor::InterceptedService;

use config::MasterConfig;
use index::Index;
use raft::RaftConfig;
use raft::transport::{MAX_MESSAGE_BYTES, PeerService};
use scheduler::{Scheduler, SchedulerConfig};
use service::{AdminService, IngestService, UploadsService, WorkerApiService};

/// Largest `Ingest` request, bytes: a report or JS stack of
/// [`symcluster_admission::MAX_PAYLOAD_BYTES`] (16 MiB) and the rest of its `JobSpec`. A larger message is
/// refused with `OUT_OF_RANGE` before it is read.
pub const MAX_INGEST_MESSAGE_BYTES: usize = symcluster_admission::MAX_PAYLOAD_BYTES + (1 << 20);

/// How long a stopping master (SIGTERM) waits for open calls to end before it stops anyway.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Largest `WorkerApi` request, bytes: a result of [`index::MAX_RESULT_BYTES`] (64 MiB of JSON,
/// when a worker sends it uncompressed) and the rest of its `CompleteJobRequest`.
pub const MAX_WORKER_MESSAGE_BYTES: usize = index::MAX_RESULT_BYTES as usize + (1 << 20);

/// Jobs one `Purge` deletes at most (`--result-retention`), so that applying it stays short on
/// every master; a full batch is followed by the next one at once.
pub const PURGE_BATCH_JOBS: u64 = 1000;

/// Runs a master until `shutdown` resolves.
///
/// Opens (or creates) `config.data_dir/master.redb` (the index) and `config.data_dir/raft-log/`
/// (Raft's log segments), starts this
/// master's Raft member, and serves gRPC (clients, workers and the other masters) on
/// `config.listen` and metrics on `config.metrics_listen`.
pub async fn run(
    config: MasterConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config.check().map_err(anyhow::Error::msg)?;
    let members = config.members().map_err(anyhow::Error::msg)?;
    let tls = if config.tls() {
        symcluster_client::Tls::from_files(
            config.tls_ca.as_deref(),
            config.tls_cert.as_deref(),
            config.tls_key.as_deref(),
        )
        .map_err(anyhow::Error::msg)?
    } else {
        symcluster_client::Tls::default()
    };
    // A master whose data dir is empty starts a group, joins one, or is refused (a member that
    // lost its disk): see `raft::join`.
    let empty =
        !config.data_dir.join("master.redb").exists() && !config.data_dir.join("raft-log").exists();
    // A master to be restored from a backup asks too: the others must hold the same backup or
    // nothing yet. Nothing is written into the data dir before these checks pass.
    let backup = match &config.restore {
        Some(file) => Some((file, restore::sha256(file)?)),
        None => None,
    };
    if empty && members.len() > 1 {
        let checked = match &backup {
            None => {
                raft::join::check_empty_start(config.id, config.join, &members, &config.token, &tls)
                    .await
            }
            Some((_, sha256)) => {
                raft::join::check_restore_start(config.id, sha256, &members, &config.token, &tls)
                    .await
            }
        };
        checked.map_err(anyhow::Error::msg)?;
    }
    std::fs::create_dir_all(&config.data_dir)?;
    let index = Index::open_file(&config.data_dir.join("master.redb"))?;
    if let Some((file, sha256)) = &backup {
        restore::seed(&index, &config.data_dir, file, sha256)?;
    }
    let raft_config = RaftConfig {
        id: config.id,
        members: members.clone(),
        election_tick: config.election_ticks.max(3),
        heartbeat_tick: (config.election_ticks / 5).max(1),
        join: config.join,
        token: config
            .peer_token
            .clone()
            .unwrap_or_else(|| config.token.clone()),
        tls,
        snapshot_dir: config.data_dir.join("snapshots"),
        snapshot_chunk_bytes: config.raft_snapshot_chunk,
        log_retain_bytes: config.raft_log_retain,
        peer_port: config.peer_listen.map(|a| a.port()),
    };
    let (raft_handle, inputs) = raft::channel(&raft_config);
    let scheduler = Arc::new(Scheduler::new(
        index.clone(),
        raft_handle.clone(),
        SchedulerConfig {
            routing: config.routing,
            lease_ms: config.lease_ms,
            heartbeat_ms: config.heartbeat_ms,
            max_attempts: config.max_attempts.max(1),
        },
    )?);
    let (applied, _) = index.applied()?;
    let log_dir = config.data_dir.join("raft-log");
    raft::storage::move_old_log(index.database(), &log_dir)?;
    let node = raft::start(
        &raft_config,
        Arc::new(replica::IndexMachine::new(index, scheduler.clone())),
        &log_dir,
        &raft_handle,
        inputs,
        tokio::runtime::Handle::current(),
    )?;
    tracing::info!(id = config.id, members = ?members, applied, listen = %config.listen, "master starting");

    let expiry = scheduler.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        loop {
            tick.tick().await;
            let n = expiry.expire_leases();
            if n > 0 {
                tracing::warn!(expired = n, "leases expired; jobs requeued");
            }
        }
    });
    if !config.result_retention.is_zero() {
        let purger = scheduler.clone();
        let retention = config.result_retention;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tick.tick().await;
                let now = index::command::now_ms();
                let cut = now.saturating_sub(retention.as_millis() as u64);
                // Batch after batch while they come full, each one short to apply.
                while purger.raft().is_leader() {
                    let purge = index::command::purge(cut, now, PURGE_BATCH_JOBS);
                    match purger.raft().propose(purge).await {
                        Ok(index::apply::Applied::Purged(n)) if n == PURGE_BATCH_JOBS => {}
                        Ok(_) => break,
                        Err(error) => {
                            tracing::warn!(%error, "purge not committed; tried again in a minute");
                            break;
                        }
                    }
                }
            }
        });
    }
    let upload_bucket = match &config.bucket.s3_bucket {
        Some(bucket) => Some(service::UploadBucket {
            source: symcluster_sources::Source::s3(&symcluster_sources::S3Settings {
                bucket: bucket.clone(),
                endpoint: config.bucket.s3_endpoint.clone(),
                region: config.bucket.s3_region.clone(),
                attempts: 2,
                // Completing a multipart upload of gigabytes takes S3 a while.
                timeout_ms: 120_000,
            })
            .await,
            base: config.bucket.s3_prefix.clone(),
        }),
        None => None,
    };
    if let Some(bucket) = upload_bucket
        .as_ref()
        .filter(|_| !config.missing_check_interval.is_zero())
    {
        // Its own client: short timeouts, so that a dead S3 costs a look seconds, not minutes.
        let source = symcluster_sources::Source::s3(&symcluster_sources::S3Settings {
            bucket: config.bucket.s3_bucket.clone().unwrap_or_default(),
            endpoint: config.bucket.s3_endpoint.clone(),
            region: config.bucket.s3_region.clone(),
            attempts: 2,
            timeout_ms: 5_000,
        })
        .await;
        tokio::spawn(missing_check::run(
            scheduler.clone(),
            source,
            bucket.base.clone(),
            config.missing_check_interval,
        ));
    }
    let metrics = scheduler.clone();
    let metrics_addr = config.metrics_listen;
    tokio::spawn(async move {
        if let Err(e) = scrape::serve(metrics_addr, metrics).await {
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

    let devices = config.device_budgets();
    let auth = auth::Auth::new(
        &config.token,
        config.peer_token.as_deref(),
        config.tokens_file.clone(),
        devices,
    )
    .map_err(anyhow::Error::msg)?;
    let peer_roles = if config.peer_token.is_some() {
        auth::PEER_ROLES
    } else {
        if members.len() > 1 {
            tracing::warn!(
                "no --peer-token: the masters' Raft transport admits admin tokens; give every master the same --peer-token to keep them out"
            );
        }
        auth::ADMIN_OR_PEER_ROLES
    };
    let reloader = auth.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hangup) = signal(SignalKind::hangup()) else {
            return;
        };
        while hangup.recv().await.is_some() {
            match reloader.reload() {
                Ok(tokens) => tracing::info!(tokens, "tokens file reloaded"),
                Err(error) => {
                    tracing::error!(%error, "tokens file not reloaded; the previous tokens stay")
                }
            }
        }
    });
    // Set once a stopping leader has handed leadership over: the peer listener (which that
    // hand-over needs) and the grace period wait for it.
    let (stopping_tx, stopping_rx) = tokio::sync::watch::channel(false);
    let stepping_down = (raft_handle.clone(), scheduler.leadership());
    let peer = PeerServer::new(PeerService::new(
        raft_handle.inbox(),
        raft_handle.members.clone(),
        raft_config.snapshot_dir.clone(),
        config.tls_client_ca.is_some(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let peer = InterceptedService::new(
        peer,
        auth.interceptor("the masters' Raft transport", peer_roles)
            .with_client_cert(config.tls_client_ca.is_some()),
    );
    // With `--peer-listen`, the Raft transport has its own listener and server.
    let (peer_on_listen, peer_served) = match config.peer_listen {
        None => (Some(peer), None),
        Some(address) => {
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|e| anyhow::anyhow!("cannot listen on {address} (--peer-listen): {e}"))?;
            let mut server = tonic::transport::Server::builder()
                .max_concurrent_streams(config.max_streams_per_connection)
                .max_frame_size(symcluster_proto::HTTP2_MAX_FRAME_BYTES);
            if config.tls() {
                server = server.tls_config(server_tls(&config, true)?)?;
            }
            let mut stopped = stopping_rx.clone();
            let served = server
                .layer(crate::metrics::GRPC.clone())
                .layer(tower_http::trace::TraceLayer::new_for_grpc())
                .add_service(peer)
                .serve_with_incoming_shutdown(
                    connections::incoming(listener, config.max_connections),
                    async move {
                        let _ = stopped.wait_for(|stopped| *stopped).await;
                    },
                );
            tracing::info!(peer_listen = %address, "Raft transport on its own listener");
            (None, Some(served))
        }
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    let mut server = tonic::transport::Server::builder()
        .max_concurrent_streams(config.max_streams_per_connection)
        .max_frame_size(symcluster_proto::HTTP2_MAX_FRAME_BYTES);
    if config.tls() {
        server = server.tls_config(server_tls(&config, false)?)?;
    }
    let served = server
        // Per-RPC metrics (`symcluster_grpc_server_*`), then a `grpc` span per request
        // (method, path; the status and latency when it ends), at debug level:
        // `RUST_LOG=info,tower_http=debug` shows every call.
        .layer(crate::metrics::GRPC.clone())
        .layer(tower_http::trace::TraceLayer::new_for_grpc())
        .add_service(health)
        .add_service(reflection)
        .add_service(InterceptedService::new(
            // Device calls are gated before their bodies are read (the interceptor runs first).
            auth::budget::DeviceGate::new(
                // tonic's default 4 MiB would refuse reports the API accepts (up to 16 MiB).
                IngestServer::new(IngestService::new(scheduler.clone()))
                    .max_decoding_message_size(MAX_INGEST_MESSAGE_BYTES),
                &devices,
            ),
            auth.interceptor("the Ingest service", auth::INGEST_ROLES),
        ))
        .add_service(InterceptedService::new(
            WorkerApiServer::new(WorkerApiService::new(scheduler.clone()))
                .max_decoding_message_size(MAX_WORKER_MESSAGE_BYTES),
            auth.interceptor("the WorkerApi service", auth::WORKER_ROLES)
                .with_client_cert(config.tls_client_ca.is_some()),
        ))
        .add_service(InterceptedService::new(
            UploadsServer::new(UploadsService::new(
                scheduler.clone(),
                upload_bucket,
                &config.token,
                config.upload_url_expiry,
            )),
            auth.interceptor("the Uploads service", auth::UPLOAD_ROLES),
        ))
        .add_service(InterceptedService::new(
            // Any role may ask where the leader is: a device's calls are gated as on Ingest.
            auth::budget::DeviceGate::new(
                AdminServer::new(AdminService::new(
                    scheduler,
                    config.raft_snapshot_chunk,
                    config.tls(),
                )),
                &devices,
            ),
            auth.interceptor("the Admin service", auth::ALL_ROLES),
        ))
        .add_optional_service(peer_on_listen)
        .serve_with_incoming_shutdown(
            connections::incoming(listener, config.max_connections),
            async move {
                shutdown.await;
                step_down(stepping_down.0, stepping_down.1).await;
                let _ = stopping_tx.send(true);
            },
        );
    let served = async move {
        match peer_served {
            Some(peer_served) => tokio::try_join!(served, peer_served).map(|_| ()),
            None => served.await,
        }
    };
    // A graceful stop waits for the calls in flight, but some never end by themselves (other
    // masters' Raft streams, workers' lease streams, watches): give them SHUTDOWN_GRACE, then
    // stop anyway.
    let served = tokio::select! {
        served = served => served,
        _ = async {
            let mut stopping = stopping_rx;
            let _ = stopping.wait_for(|stopped| *stopped).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::info!(grace = ?SHUTDOWN_GRACE, "calls still open after the grace period; stopping");
            Ok(())
        }
    };
    raft_handle.stop();
    let _ = node.join();
    served?;
    Ok(())
}

/// How long a stopping leader waits for another master to take over before it stops anyway
/// (the others then elect a leader after their election timeout).
pub const STEP_DOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// A stopping master that leads a group of several hands leadership over first, so that
/// clients and workers move to the new leader at once instead of after an election timeout.
async fn step_down(raft: replica::RaftHandle, mut leading: tokio::sync::watch::Receiver<bool>) {
    if raft.members.len() < 2 || !*leading.borrow() {
        return;
    }
    raft.step_down();
    match tokio::time::timeout(STEP_DOWN_TIMEOUT, leading.wait_for(|leads| !leads)).await {
        Ok(_) => tracing::info!(leader = ?raft.leader_address(), "stepped down"),
        Err(_) => tracing::warn!(
            timeout = ?STEP_DOWN_TIMEOUT,
            "no follower took over leadership in time; stopping anyway"
        ),
    }
}

/// The server's TLS settings: its certificate and key, and, with `--tls-client-ca`, client
/// certificates checked against that CA when presented (required by the worker API and the
/// Raft transport, see [`auth::Interceptor::with_client_cert`]); `require_client_cert`: the
/// TLS handshake itself refuses a client without one (the peer listener).
fn server_tls(
    config: &MasterConfig,
    require_client_cert: bool,
) -> anyhow::Result<tonic::transport::ServerTlsConfig> {
    use anyhow::Context as _;
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let read = |path: &std::path::Path| {
        std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))
    };
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        anyhow::bail!("TLS needs both --tls-cert and --tls-key");
    };
    symcluster_client::install_crypto_provider();
    let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(read(cert)?, read(key)?));
    if let Some(ca) = &config.tls_client_ca {
        tls = tls
            .client_ca_root(Certificate::from_pem(read(ca)?))
            .client_auth_optional(!require_client_cert);
    }
    Ok(tls)
}

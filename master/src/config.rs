//! The master's configuration: flags, each with an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// symcluster master: job intake, scheduling and the result index.
#[derive(Debug, Clone, Parser)]
#[command(name = "symcluster-master", version, about)]
pub struct MasterConfig {
    /// gRPC address (Ingest, WorkerApi, Admin, health, reflection).
    #[arg(
        long,
        env = "SYMCLUSTER_MASTER_LISTEN",
        default_value = "127.0.0.1:7700"
    )]
    pub listen: SocketAddr,

    /// HTTP address of the Prometheus `/metrics` endpoint.
    #[arg(
        long,
        env = "SYMCLUSTER_METRICS_LISTEN",
        default_value = "127.0.0.1:7701"
    )]
    pub metrics_listen: SocketAddr,

    /// Directory of the durable index (`index.redb`).
    #[arg(long, env = "SYMCLUSTER_DATA_DIR", default_value = "symcluster-data")]
    pub data_dir: PathBuf,

    /// Bearer token every client and worker must present.
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: String,

    /// Lease duration without a heartbeat, in milliseconds.
    #[arg(long, env = "SYMCLUSTER_LEASE_MS", default_value_t = 30_000)]
    pub lease_ms: u64,

    /// Heartbeat interval asked of workers, in milliseconds.
    #[arg(long, env = "SYMCLUSTER_HEARTBEAT_MS", default_value_t = 5_000)]
    pub heartbeat_ms: u64,

    /// Attempts before a job fails for good.
    #[arg(long, env = "SYMCLUSTER_MAX_ATTEMPTS", default_value_t = 3)]
    pub max_attempts: u32,

    /// How jobs pick workers: `affinity` (rendezvous hashing on the job's debug id or map key,
    /// falling back to the least-loaded worker) or `random` (for comparison in load tests).
    #[arg(long, env = "SYMCLUSTER_ROUTING", value_enum, default_value_t = crate::scheduler::Routing::Affinity)]
    pub routing: crate::scheduler::Routing,

    /// This master's id (reported as the leader).
    #[arg(long, env = "SYMCLUSTER_MASTER_ID", default_value = "master-1")]
    pub master_id: String,
}

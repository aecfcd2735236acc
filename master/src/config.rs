//! The master's configuration: flags, each with an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

/// symcluster master: job intake, scheduling and the result index.
#[derive(Debug, Clone, Parser)]
#[command(name = "symcluster-master", version, about)]
pub struct MasterConfig {
    /// Log output (`--log-format text|json`).
    #[command(flatten)]
    pub log: symcluster_telemetry::LogArgs,
    /// Span export to an OpenTelemetry collector (`--otlp-endpoint`).
    #[command(flatten)]
    pub trace: symcluster_telemetry::TraceArgs,

    /// gRPC address (Ingest, Uploads, WorkerApi, Admin, health, reflection; the masters' Peer
    /// too unless `--peer-listen` gives it its own).
    #[arg(
        long,
        env = "SYMCLUSTER_MASTER_LISTEN",
        default_value = "127.0.0.1:7700"
    )]
    pub listen: SocketAddr,

    /// Address of the masters' Raft transport (the `symcluster.cluster.v1.Peer` service), apart
    /// from `--listen` (as etcd separates peer and client URLs): with it, `--listen` no longer
    /// serves `Peer`, so that a firewall or NetworkPolicy can open the peer port to the masters
    /// only; with `--tls-client-ca`, it refuses a connection without a client certificate
    /// signed by that CA (mutual TLS). Every master of a group uses the same peer port: a
    /// master dials the others at the host of their `--peers` address with this port.
    #[arg(long, env = "SYMCLUSTER_PEER_LISTEN", value_name = "ADDR")]
    pub peer_listen: Option<SocketAddr>,

    /// HTTP address of the Prometheus `/metrics` endpoint and the probes `/live` and `/ready`
    /// (ready: this master knows the group's leader and can read its index).
    #[arg(
        long,
        env = "SYMCLUSTER_METRICS_LISTEN",
        default_value = "127.0.0.1:7701"
    )]
    pub metrics_listen: SocketAddr,

    /// Directory of this master's state: the index (`master.redb`), the Raft log (`raft-log/`)
    /// and snapshots being received (`snapshots/`).
    #[arg(long, env = "SYMCLUSTER_DATA_DIR", default_value = "symcluster-data")]
    pub data_dir: PathBuf,

    /// The cluster's admin token: every call is allowed with it, and the masters present it to
    /// each other. Alone, it is the only token (the local quick start); `--tokens-file` adds
    /// tokens with narrower roles.
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: String,

    /// A TOML file of named tokens with roles (`device`, `ingest`, `worker`, `admin`), stored
    /// as SHA-256 hashes; reloaded on SIGHUP (see `docs/operator-guide.md`, "Tokens and roles").
    #[arg(long, env = "SYMCLUSTER_TOKENS_FILE")]
    pub tokens_file: Option<PathBuf>,

    /// The token masters present to each other's Raft transport (`Peer`), of role `peer`: with
    /// it, admin tokens no longer reach the transport (an admin token could otherwise step a
    /// master's Raft, or send it a snapshot that replaces its index). The same on every master.
    /// Without it, masters present `--token` as earlier versions did.
    #[arg(long, env = "SYMCLUSTER_PEER_TOKEN", hide_env_values = true)]
    pub peer_token: Option<String>,

    /// Largest report or JS stack a `device` token may submit, decompressed (`2MiB`); its
    /// requests are cut off past it plus 64 KiB while they are read (ingest tokens: 16 MiB).
    #[arg(long, env = "SYMCLUSTER_DEVICE_MAX_REPORT", value_name = "BYTES", value_parser = symcluster_telemetry::flags::bytes_usize, default_value = "2MiB")]
    pub device_max_report: usize,

    /// Calls (and streamed jobs) per second of each `device` token whose entry in the tokens
    /// file gives no `rate`, on each master (burst: twice as many).
    #[arg(
        long,
        env = "SYMCLUSTER_DEVICE_RATE",
        value_name = "PER_SECOND",
        default_value_t = 100.0
    )]
    pub device_rate: f64,

    /// Calls (and streamed jobs) per second of all the `device` tokens of one project together,
    /// on each master (burst: twice as many): a project whose app ships several device tokens
    /// still cannot take more than this from the other projects.
    #[arg(
        long,
        env = "SYMCLUSTER_DEVICE_PROJECT_RATE",
        value_name = "PER_SECOND",
        default_value_t = 1000.0
    )]
    pub device_project_rate: f64,

    /// Bytes of submitted jobs per second of each `device` token whose entry gives no
    /// `bytes_per_second`, on each master (`16MiB`; burst: four seconds' worth).
    #[arg(long, env = "SYMCLUSTER_DEVICE_BYTES_PER_SECOND", value_name = "BYTES", value_parser = symcluster_telemetry::flags::bytes, default_value = "16MiB")]
    pub device_bytes_per_second: u64,

    /// Device calls one master serves at once, all device tokens together; more are refused
    /// with RESOURCE_EXHAUSTED before their reports are read.
    #[arg(
        long,
        env = "SYMCLUSTER_DEVICE_MAX_IN_FLIGHT",
        value_name = "CALLS",
        default_value_t = 16
    )]
    pub device_max_in_flight: usize,

    /// gRPC connections one master holds at once (clients, workers, devices, other masters); a
    /// connection past it is closed as soon as it is accepted.
    #[arg(
        long,
        env = "SYMCLUSTER_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = 4096
    )]
    pub max_connections: usize,

    /// Concurrent HTTP/2 streams (calls) per connection.
    #[arg(
        long,
        env = "SYMCLUSTER_MAX_STREAMS_PER_CONNECTION",
        value_name = "N",
        default_value_t = 128
    )]
    pub max_streams_per_connection: u32,

    /// How long a lease lasts without a heartbeat (`30s`, `2m`; a bare number is milliseconds,
    /// as the former `--lease-ms` took). Held in milliseconds.
    #[arg(long = "lease", alias = "lease-ms", env = "SYMCLUSTER_LEASE_MS", value_name = "DURATION",
        value_parser = symcluster_telemetry::flags::millis, default_value = "30s")]
    pub lease_ms: u64,

    /// How often workers are asked to send a heartbeat (`5s`; a bare number is milliseconds, as
    /// the former `--heartbeat-ms` took). Held in milliseconds.
    #[arg(long = "heartbeat", alias = "heartbeat-ms", env = "SYMCLUSTER_HEARTBEAT_MS",
        value_name = "DURATION", value_parser = symcluster_telemetry::flags::millis,
        default_value = "5s")]
    pub heartbeat_ms: u64,

    /// Attempts before a job fails for good, per revision (a job run again for a file that
    /// arrived has as many again). A lease a draining worker hands back before the job started
    /// there, or one the leader could not send on the worker's lease stream, does not count.
    #[arg(long, env = "SYMCLUSTER_MAX_ATTEMPTS", default_value_t = 3)]
    pub max_attempts: u32,

    /// How jobs pick workers: `affinity` (rendezvous hashing on the job's debug id or map key,
    /// falling back to the least-loaded worker) or `random` (for comparison in load tests).
    #[arg(long, env = "SYMCLUSTER_ROUTING", value_enum, default_value_t = crate::scheduler::Routing::Affinity)]
    pub routing: crate::scheduler::Routing,

    /// This master's Raft member id (1-based; one of `--peers`' ids).
    #[arg(long, env = "SYMCLUSTER_MASTER_ID", default_value_t = 1)]
    pub id: u64,

    /// Every member of the master group, this one included: `1=host:port,2=host:port,...`
    /// (their gRPC addresses; Raft travels on the same port, or on `--peer-listen`'s port).
    /// Without it, this master is a
    /// group of one, reachable at `--listen`. A new group's first membership; afterwards the
    /// group's own (changed by `symctl admin members`) is used, and `--peers` only needs to
    /// reach it.
    #[arg(long, env = "SYMCLUSTER_PEERS", value_parser = parse_peer, value_delimiter = ',')]
    pub peers: Vec<(u64, String)>,

    /// This master joins an existing group as a new member: with an empty `--data-dir`, it
    /// starts with no membership and waits for the leader to send it the index once an
    /// operator runs `symctl admin members add ID ADDRESS` (before or after). `--peers` then
    /// names the group's current members and this one. Ignored once the data dir holds the
    /// group's state (a restart).
    #[arg(long, env = "SYMCLUSTER_JOIN")]
    pub join: bool,

    /// Raft election timeout, in ticks of 100 ms (randomized up to twice that).
    #[arg(long, env = "SYMCLUSTER_ELECTION_TICKS", default_value_t = 10)]
    pub election_ticks: usize,

    /// Seeds this master's index from a backup (`symctl admin backup FILE`) before it starts:
    /// only into an empty `--data-dir` (a master that holds an index refuses to start with it).
    /// Restore every member of a new group from the same file, or restore a group of one.
    #[arg(long, env = "SYMCLUSTER_RESTORE", value_name = "FILE")]
    pub restore: Option<PathBuf>,

    /// Bytes of Raft log each master keeps (`1GiB`, `256MiB`): a follower down for less than
    /// that much traffic (a rolling restart) catches up from the log; one further behind gets a
    /// snapshot of the index. The log is on disk; memory holds 32 bytes per entry and the
    /// newest 64 MiB.
    #[arg(long, env = "SYMCLUSTER_RAFT_LOG_RETAIN", value_name = "BYTES", value_parser = symcluster_telemetry::flags::bytes, default_value = "1GiB")]
    pub raft_log_retain: u64,

    /// Bytes per chunk of an index snapshot streamed to a follower that fell behind (`4MiB`,
    /// `64KiB`, or a number of bytes). A transfer holds about four chunks in the leader's
    /// memory, whatever the index's size.
    #[arg(long, env = "SYMCLUSTER_RAFT_SNAPSHOT_CHUNK", value_name = "BYTES", value_parser = symcluster_telemetry::flags::bytes_usize, default_value = "4MiB")]
    pub raft_snapshot_chunk: usize,

    /// PEM certificate chain of this master: with `--tls-key`, gRPC is served over TLS only
    /// (rustls, TLS 1.2/1.3), and `--peers` given without a scheme are `https://`.
    #[arg(long, env = "SYMCLUSTER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SYMCLUSTER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// PEM CA certificate(s) that signed the other masters' certificates (default: the public
    /// roots).
    #[arg(long, env = "SYMCLUSTER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// PEM CA certificate(s) for client certificates: with it, workers and the other masters
    /// must present a certificate signed by it (mutual TLS); devices and ingestion services
    /// need none. Needs `--tls-cert`.
    #[arg(long, env = "SYMCLUSTER_TLS_CLIENT_CA", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,

    /// How long finished jobs and their results are kept (`7d`, `12h`, `30m`; `0` keeps them
    /// forever). Purged through the replicated log, so every master deletes the same jobs.
    #[arg(long, env = "SYMCLUSTER_RESULT_RETENTION", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "7d")]
    pub result_retention: std::time::Duration,

    /// The bucket the workers read (optional): with it, the leader looks there every
    /// `--missing-check-interval` for files that finished jobs lack, so that uploads made by
    /// other tools than `symctl upload` also symbolicate those jobs again.
    #[command(flatten)]
    pub bucket: symcluster_sources::BucketArgs,

    /// How often the leader looks in the bucket for missing files (`5m`, `30s`; `0`: never);
    /// with `--s3-bucket` only.
    #[arg(long, env = "SYMCLUSTER_MISSING_CHECK_INTERVAL", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "5m")]
    pub missing_check_interval: std::time::Duration,

    /// How long the presigned S3 requests the `Uploads` service hands build machines stay valid
    /// (`15m`, `1h`); an upload cut by their expiry is prepared again and resumes. With
    /// `--s3-bucket` only; the masters sign them with the S3 credentials of their environment.
    #[arg(long, env = "SYMCLUSTER_UPLOAD_URL_EXPIRY", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "15m")]
    pub upload_url_expiry: std::time::Duration,
}

impl MasterConfig {
    /// Checks what clap cannot: budgets that would silently mean none, a peer token that would
    /// be the admin token. The error names the flag.
    pub fn check(&self) -> Result<(), String> {
        if !(self.device_rate.is_finite() && self.device_rate > 0.0) {
            return Err("--device-rate must be a positive number of calls per second".into());
        }
        if !(self.device_project_rate.is_finite() && self.device_project_rate > 0.0) {
            return Err(
                "--device-project-rate must be a positive number of calls per second".into(),
            );
        }
        if self.device_bytes_per_second == 0 || self.device_max_in_flight == 0 {
            return Err(
                "--device-bytes-per-second and --device-max-in-flight must be at least 1".into(),
            );
        }
        if self.upload_url_expiry.is_zero()
            || self.upload_url_expiry > std::time::Duration::from_secs(7 * 24 * 3600)
        {
            return Err(
                "--upload-url-expiry must be between 1s and 7d (S3's longest presigned request)"
                    .into(),
            );
        }
        if self.peer_token.as_deref() == Some(self.token.as_str()) {
            return Err("--peer-token must differ from --token (the admin token)".into());
        }
        Ok(())
    }

    /// The budgets of device tokens (`--device-*`).
    pub fn device_budgets(&self) -> crate::auth::budget::DeviceBudgets {
        crate::auth::budget::DeviceBudgets {
            max_report_bytes: self.device_max_report,
            rate: self.device_rate,
            project_rate: self.device_project_rate,
            bytes_per_second: self.device_bytes_per_second,
            max_in_flight: self.device_max_in_flight,
        }
    }

    /// Whether gRPC is served over TLS (`--tls-cert` and `--tls-key`).
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// The group's members: id → `http://host:port` (`https://` with TLS, unless a peer was
    /// given with its scheme).
    pub fn members(&self) -> Result<std::collections::BTreeMap<u64, String>, String> {
        let scheme = if self.tls() { "https" } else { "http" };
        let mut members = std::collections::BTreeMap::new();
        if self.peers.is_empty() {
            members.insert(self.id, format!("{scheme}://{}", self.listen));
        } else {
            for (id, address) in &self.peers {
                if members
                    .insert(*id, with_scheme(address, self.tls()))
                    .is_some()
                {
                    return Err(format!("--peers names member {id} twice"));
                }
            }
        }
        if !members.contains_key(&self.id) {
            return Err(format!("--id {} is not one of --peers", self.id));
        }
        Ok(members)
    }
}

/// A master's gRPC address with its scheme: `host:port` → `http://host:port`
/// (`https://` when the masters serve TLS); an address with a scheme as it is.
pub fn with_scheme(address: &str, tls: bool) -> String {
    let address = address.trim();
    if address.contains("://") {
        address.to_owned()
    } else {
        format!("{}://{address}", if tls { "https" } else { "http" })
    }
}

/// `N=host:port` → `(N, "host:port")` (a scheme, when given, is kept).
fn parse_peer(s: &str) -> Result<(u64, String), String> {
    let (id, address) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected ID=HOST:PORT"))?;
    let id: u64 = id
        .trim()
        .parse()
        .ok()
        .filter(|&id| id > 0)
        .ok_or_else(|| format!("{s:?}: the member id must be a number from 1"))?;
    let address = address.trim();
    if address.is_empty() {
        return Err(format!("{s:?}: missing HOST:PORT"));
    }
    // Without a scheme, `members` adds `http://` or `https://` (with TLS).
    Ok((id, address.to_owned()))
}

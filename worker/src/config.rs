//! The worker's configuration: flags, each with an environment variable.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
pub use symcluster_sources::BucketArgs;

/// symcluster worker: runs symbolication jobs leased from a master.
#[derive(Debug, Clone, Parser)]
#[command(name = "symcluster-worker", version, about)]
pub struct WorkerConfig {
    /// Log output (`--log-format text|json`).
    #[command(flatten)]
    pub log: symcluster_telemetry::LogArgs,
    /// Span export to an OpenTelemetry collector (`--otlp-endpoint`).
    #[command(flatten)]
    pub trace: symcluster_telemetry::TraceArgs,

    /// The masters' gRPC endpoints, comma-separated (any member of the group: the worker
    /// finds the leader and follows it).
    #[arg(
        long,
        env = "SYMCLUSTER_MASTER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub master: String,

    /// Bearer token for the master.
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: String,

    /// PEM CA certificate(s) that signed the masters' certificates, for `https://` masters
    /// (default: the public roots).
    #[arg(long, env = "SYMCLUSTER_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// PEM client certificate chain presented to the masters (when they require one:
    /// `--tls-client-ca` on the master); with `--tls-key`.
    #[arg(long, env = "SYMCLUSTER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of `--tls-cert`.
    #[arg(long, env = "SYMCLUSTER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// This worker's id (default: hostname-pid).
    #[arg(long, env = "SYMCLUSTER_WORKER_ID")]
    pub worker_id: Option<String>,

    /// Jobs run at once (default: the number of CPU cores).
    #[arg(long, env = "SYMCLUSTER_SLOTS")]
    pub slots: Option<u32>,

    /// Leases held beyond `--slots`, waiting for a slot: a slot that frees starts its next job
    /// at once, not one lease commit on the master later, and the master commits leases and
    /// outcomes in bigger batches (default: 2 per slot; 0 for none). The master takes at most
    /// 4 per slot. Their leases are renewed by heartbeats like running jobs', and a drain hands
    /// them back unstarted.
    #[arg(long, env = "SYMCLUSTER_PREFETCH")]
    pub prefetch: Option<u32>,

    /// Directory of the disk cache.
    #[arg(long, env = "SYMCLUSTER_CACHE_DIR", default_value = "symcluster-cache")]
    pub cache_dir: PathBuf,

    /// Disk cache budget (`10GiB`, `500MB`; a bare number is bytes), never exceeded: least
    /// recently used files go first. Held in bytes.
    #[arg(long = "disk-cache", alias = "disk-cache-bytes", env = "SYMCLUSTER_DISK_CACHE_BYTES",
        value_name = "SIZE", value_parser = symcluster_telemetry::flags::bytes,
        default_value = "10GiB")]
    pub disk_cache_bytes: u64,

    /// Memory cache budget for parsed SymCaches (half), prepared source maps and prepared
    /// ProGuard mappings (3/16 each) and minidumps' unwind information (1/8) (`2GiB`; a bare
    /// number is bytes). Held in bytes.
    #[arg(long = "memory-cache", alias = "memory-cache-bytes", env = "SYMCLUSTER_MEMORY_CACHE_BYTES",
        value_name = "SIZE", value_parser = symcluster_telemetry::flags::bytes,
        default_value = "2GiB")]
    pub memory_cache_bytes: u64,

    /// Debug files converted to SymCaches at once; each conversion holds its debug file on disk
    /// (in `--cache-dir`, outside `--disk-cache`; memory-mapped, its pages released as it goes)
    /// and builds its SymCache's tables in memory (about 1.2 times the debug file's size: 435
    /// MiB for a 360 MB dSYM; the SymCache itself is written to disk as it is serialized).
    /// Plan memory for that times N, plus `--memory-cache`. Default: one per 2 GiB of
    /// `--memory-cache`, at least one.
    #[arg(long, env = "SYMCLUSTER_MAX_CONVERSIONS", value_name = "N")]
    pub max_conversions: Option<usize>,

    /// Share SymCaches through the bucket: before converting a debug file, download the SymCache
    /// another worker derived from it (`…/symcache-v<format>-<ETag>-<size>` beside the
    /// `debuginfo`), and after converting one, upload it. Needs write access to the bucket;
    /// `false` with read-only credentials.
    #[arg(long, env = "SYMCLUSTER_SHARE_SYMCACHES", value_name = "BOOL",
        default_value_t = true, action = clap::ArgAction::Set)]
    pub share_symcaches: bool,

    /// How long a "not found" is remembered (`60s`, `5m`; a bare number is seconds, as the
    /// former `--negative-cache-secs` took). Held in seconds.
    #[arg(long = "negative-cache", alias = "negative-cache-secs",
        env = "SYMCLUSTER_NEGATIVE_CACHE_SECS", value_name = "DURATION",
        value_parser = symcluster_telemetry::flags::secs, default_value = "60s")]
    pub negative_cache_secs: u64,

    /// Debug files from a local directory instead of S3 (same layout as the bucket).
    #[arg(long, env = "SYMCLUSTER_SOURCE_DIR", conflicts_with = "s3_bucket")]
    pub source_dir: Option<PathBuf>,

    /// The bucket (shared with `symctl upload`).
    #[command(flatten)]
    pub bucket: BucketArgs,

    /// Attempts per S3 request (with exponential backoff) before a fetch fails.
    #[arg(long, env = "SYMCLUSTER_S3_ATTEMPTS", default_value_t = 3)]
    pub s3_attempts: u32,

    /// Timeout of one S3 request attempt (`5s`; a bare number is milliseconds, as the former
    /// `--s3-timeout-ms` took). Held in milliseconds.
    #[arg(long = "s3-timeout", alias = "s3-timeout-ms", env = "SYMCLUSTER_S3_TIMEOUT_MS",
        value_name = "DURATION", value_parser = symcluster_telemetry::flags::millis,
        default_value = "5s")]
    pub s3_timeout_ms: u64,

    /// Answer a job whose debug file is being converted from a partial SymCache of the
    /// functions its own addresses fall in (the same frames, in a fraction of the
    /// time), while the whole conversion goes on in the background for later jobs. `false`:
    /// the job waits for the conversion.
    #[arg(long, env = "SYMCLUSTER_PARTIAL_SYMCACHES", value_name = "BOOL",
        default_value_t = true, action = clap::ArgAction::Set)]
    pub partial_symcaches: bool,

    /// A debug file download that receives no byte for this long is cut and resumed where it
    /// stopped with a ranged GET, at most 5 times (`30s`; a bare number is milliseconds).
    /// Held in milliseconds.
    #[arg(long, env = "SYMCLUSTER_DOWNLOAD_STALL", value_name = "DURATION",
        value_parser = symcluster_telemetry::flags::millis, default_value = "30s")]
    pub download_stall_ms: u64,

    /// The slowest debug file download tolerated, per second (`1MiB`; a bare number is
    /// bytes): a file of `n` bytes must arrive within `--download-stall` plus `n` divided by
    /// this rate (a 2 GB dSYM: 35 minutes at the default), so big files get the time their
    /// size needs. Held in bytes per second.
    #[arg(long, env = "SYMCLUSTER_DOWNLOAD_MIN_RATE", value_name = "SIZE",
        value_parser = symcluster_telemetry::flags::bytes, default_value = "1MiB")]
    pub download_min_rate: u64,

    /// HTTP address of the Prometheus `/metrics` endpoint and the `/ready` probe
    /// (`SYMCLUSTER_WORKER_METRICS_LISTEN`, its former variable, is still read, with a warning).
    #[arg(
        long,
        env = "SYMCLUSTER_METRICS_LISTEN",
        default_value = "127.0.0.1:7702"
    )]
    pub metrics_listen: std::net::SocketAddr,

    /// On SIGTERM/SIGINT, how long running jobs may take to finish before the worker hands
    /// them back to the master and exits (`30s`, `2m`, `0`: humantime's syntax). Keep it below
    /// the orchestrator's kill grace period (Kubernetes' `terminationGracePeriodSeconds`).
    #[arg(long, env = "SYMCLUSTER_DRAIN_TIMEOUT", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "30s")]
    pub drain_timeout: std::time::Duration,
}

impl WorkerConfig {
    /// How debug file downloads are bounded (`--download-stall`, `--download-min-rate`).
    pub fn download_limits(&self) -> symcluster_sources::DownloadLimits {
        symcluster_sources::DownloadLimits {
            idle_timeout: Duration::from_millis(self.download_stall_ms),
            min_bytes_per_sec: self.download_min_rate.max(1),
            ..symcluster_sources::DownloadLimits::default()
        }
    }

    /// `--max-conversions`, or its default: one per 2 GiB of the memory cache, at least one.
    pub fn max_conversions(&self) -> usize {
        self.max_conversions
            .unwrap_or((self.memory_cache_bytes / (2 << 30)) as usize)
            .max(1)
    }
}

//! Prometheus metrics, served over HTTP at `/metrics`.

use std::sync::LazyLock;

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};
use symcluster_proto::v1::JobKind;

/// The master's registry.
pub static REGISTRY: LazyLock<Registry> =
    LazyLock::new(|| symcluster_telemetry::service_registry("master", env!("CARGO_PKG_VERSION")));

fn counter(name: &str, help: &str) -> IntCounter {
    let c = IntCounter::new(name, help).expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, c)
}

fn gauge(name: &str, help: &str) -> IntGauge {
    let g = IntGauge::new(name, help).expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, g)
}

fn histogram(name: &str, help: &str, buckets: Vec<f64>) -> Histogram {
    let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
        .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, h)
}

/// Raft: current term.
pub static RAFT_TERM: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_raft_term", "Current Raft term"));
/// Raft: 1 while this master is the group's leader, else 0 (`sum` over the masters is 1 in a
/// healthy group; 0 during an election or without a quorum).
pub static RAFT_LEADER: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_raft_leader",
        "1 while this master is the Raft group's leader, else 0",
    )
});
/// Raft: highest committed log index.
pub static RAFT_COMMIT_INDEX: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_raft_commit_index",
        "Highest log index known committed",
    )
});
/// Raft: highest applied log index.
pub static RAFT_APPLIED_INDEX: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_raft_applied_index",
        "Highest log index applied to the index",
    )
});
/// Raft: leader changes seen.
pub static RAFT_LEADER_CHANGES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_raft_leader_changes_total",
        "Leader changes seen by this master",
    )
});
/// Raft: commands proposed here.
pub static RAFT_PROPOSALS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_raft_proposals_total",
        "Commands proposed by this master",
    )
});
/// Calls refused to keep the master within its budgets, by reason: `raft_uncommitted` (the
/// leader's uncommitted log is full), `device_rate`, `device_bytes`, `device_in_flight`,
/// `device_report_size` (a device token's budgets), `connections` (the connection cap).
pub static REFUSED: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = IntCounterVec::new(
        prometheus::Opts::new(
            "symcluster_refused_total",
            "Calls and connections refused to keep this master within its budgets, by reason",
        ),
        &["reason"],
    )
    .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, c)
});
/// The reasons of [`REFUSED`].
pub const REFUSED_REASONS: [&str; 6] = [
    "raft_uncommitted",
    "device_rate",
    "device_bytes",
    "device_in_flight",
    "device_report_size",
    "connections",
];
/// Raft: log entries written per fsynced append.
pub static RAFT_ENTRIES_PER_FSYNC: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "symcluster_raft_entries_per_fsync",
        "Log entries appended per fsynced append to the raft log (group commit)",
        vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0],
    )
});
/// Raft: duration of fsynced appends to the log.
pub static RAFT_FSYNC_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "symcluster_raft_fsync_seconds",
        "Duration of one fsynced append to the raft log (entries + HardState)",
        prometheus::exponential_buckets(0.0001, 2.0, 16).expect("valid buckets"),
    )
});
/// Raft: the index's write transactions (applying committed entries), fsynced at a checkpoint
/// and not in between.
pub static RAFT_WRITES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = IntCounterVec::new(
        prometheus::Opts::new(
            "symcluster_raft_write_transactions_total",
            "Write transactions applying committed entries to the index, by durability (fsync: a checkpoint)",
        ),
        &["durability"],
    )
    .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, c)
});
/// Raft: bytes of log entries this master keeps (compacted past `--raft-log-retain`).
pub static RAFT_LOG_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_raft_log_bytes",
        "Bytes of Raft log entries kept (on disk; compacted once past --raft-log-retain)",
    )
});
/// Raft: the index of the oldest entry this master's log still holds. A follower whose log
/// ends before it can only catch up from a snapshot of the index.
pub static RAFT_LOG_FIRST_INDEX: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_raft_log_first_index",
        "Index of the oldest Raft log entry kept: a follower whose log ends before it needs a snapshot",
    )
});
/// Raft: snapshots streamed to a follower (`sent`) or from the leader (`received`), by
/// outcome (`ok`: received whole and handed to Raft; `failed`).
pub static RAFT_SNAPSHOTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = IntCounterVec::new(
        prometheus::Opts::new(
            "symcluster_raft_snapshots_total",
            "Index snapshots streamed between masters, by direction (sent, received) and outcome (ok, failed)",
        ),
        &["direction", "outcome"],
    )
    .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, c)
});
/// Raft: bytes of snapshot streams, sent (counted once the follower received them whole) and
/// received (as they arrive).
pub static RAFT_SNAPSHOT_BYTES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    let c = IntCounterVec::new(
        prometheus::Opts::new(
            "symcluster_raft_snapshot_bytes_total",
            "Bytes of index snapshot streams, by direction (sent: delivered whole; received: as they arrive)",
        ),
        &["direction"],
    )
    .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, c)
});
/// Raft: proposal to applied, on the proposer.
pub static RAFT_COMMIT_SECONDS: LazyLock<Histogram> = LazyLock::new(|| {
    histogram(
        "symcluster_raft_commit_seconds",
        "Time from proposing a command to applying it, on the proposing master",
        prometheus::exponential_buckets(0.0001, 2.0, 16).expect("valid buckets"),
    )
});

/// Jobs created by `Submit`.
pub static JOBS_SUBMITTED: LazyLock<IntCounter> =
    LazyLock::new(|| counter("symcluster_jobs_submitted_total", "Jobs created by Submit"));
/// Jobs completed.
pub static JOBS_COMPLETED: LazyLock<IntCounter> =
    LazyLock::new(|| counter("symcluster_jobs_completed_total", "Jobs completed"));
/// Jobs that failed for good (no attempt left, a permanent error, or unreadable at submit),
/// counted by the leader when the failure is applied: `rate()` of it beside
/// `symcluster_jobs_completed_total` is the failure ratio. Each failure of a revision counts
/// (a job run again for a late file that fails again counts twice), and a master that restarts
/// as leader counts the failures it replays from its log again: a rate, not an exact tally.
pub static JOBS_FAILED_TOTAL: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_jobs_failed_total",
        "Jobs failed for good, counted by the leader",
    )
});
/// Per-RPC metrics of the master's gRPC server (`symcluster_grpc_server_*`), one layer for the
/// process.
pub static GRPC: LazyLock<symcluster_telemetry::GrpcMetricsLayer> = LazyLock::new(|| {
    use symcluster_telemetry::grpc_metrics::methods_in;
    // The methods the master serves: its own services (the masters' Peer included), health
    // and reflection. Any other path is counted as `unknown`.
    let mut methods = methods_in(symcluster_proto::FILE_DESCRIPTOR_SET)
        .expect("the embedded descriptor set decodes");
    methods.extend(
        methods_in(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .expect("the embedded descriptor set decodes"),
    );
    methods.push("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo".to_owned());
    symcluster_telemetry::GrpcMetricsLayer::new(&REGISTRY, methods)
});
fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, g)
}

/// The job kinds, as `kind` label values.
pub const KINDS: [(JobKind, &str); 4] = [
    (JobKind::Native, "native"),
    (JobKind::Js, "js"),
    (JobKind::Jvm, "jvm"),
    (JobKind::Combined, "combined"),
];

/// Jobs waiting for a slot, by kind (set at each scrape).
pub static QUEUE_DEPTH: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "symcluster_queue_depth",
        "Jobs waiting for a worker slot, by kind (the leader's count; 0 on followers)",
        &["kind"],
    )
});
/// Age of the oldest queued job by kind, seconds (set at each scrape).
pub static QUEUE_OLDEST_AGE: LazyLock<GaugeVec> = LazyLock::new(|| {
    let g = GaugeVec::new(
        Opts::new(
            "symcluster_queue_oldest_age_seconds",
            "Age of the oldest queued job by kind, since it was submitted or queued again for a \
             file that arrived (0 when none is queued)",
        ),
        &["kind"],
    )
    .expect("valid metric");
    symcluster_telemetry::register(&REGISTRY, g)
});
/// Slots of the connected workers, busy or free (set at each scrape).
pub static WORKER_SLOTS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "symcluster_cluster_slots",
        "Job slots of the connected workers that take leases (draining ones excluded), busy or \
         free, as the leader sees them; busy counts every lease held, those waiting in a \
         worker's prefetch too",
        &["state"],
    )
});
/// Workers draining (set at each scrape).
pub static WORKERS_DRAINING: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_workers_draining",
        "Workers stopping: they finish or hand back their jobs and get no new ones",
    )
});
/// Jobs leased (set at each scrape).
pub static JOBS_RUNNING: LazyLock<IntGauge> =
    LazyLock::new(|| gauge("symcluster_jobs_running", "Jobs leased to workers"));
/// Jobs failed for good (set at each scrape).
pub static JOBS_FAILED: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_jobs_failed",
        "Failed jobs the index holds now (purged ones leave it; see symcluster_jobs_failed_total)",
    )
});
/// Workers with an open lease stream (set at each scrape).
pub static WORKERS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_workers_connected",
        "Workers with an open lease stream",
    )
});
/// Leases granted by this master while it led.
pub static LEASES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_leases_total",
        "Leases granted by this master while it led",
    )
});
/// Of those, leases given to the job's preferred (cache-affine) worker.
pub static AFFINE_LEASES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_affine_leases_total",
        "Leases given to the job's preferred worker by this master while it led",
    )
});

/// Files finished jobs lack (counted every `scrape::MISSING_REFRESH`).
pub static MISSING_FILES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_missing_files",
        "Debug files and source maps (per project) that finished jobs lack",
    )
});
/// Finished jobs lacking a file, once per file (counted every `scrape::MISSING_REFRESH`).
pub static MISSING_FILE_JOBS: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "symcluster_missing_file_jobs",
        "Finished jobs lacking a file, counted once per file they lack",
    )
});
/// Jobs queued again because a file they lacked arrived.
pub static JOBS_RESYMBOLICATED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_jobs_resymbolicated_total",
        "Jobs queued again because a file they lacked arrived",
    )
});
/// Files uploaded through presigned requests and confirmed (`Uploads/ConfirmUpload`).
pub static UPLOADS_CONFIRMED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "symcluster_uploads_confirmed_total",
        "Files uploaded through presigned requests, checked and confirmed",
    )
});

/// Registers every metric that is only set now and then, so that a scrape shows it (at 0)
/// from the start.
pub fn register_all() {
    LazyLock::force(&JOBS_SUBMITTED);
    LazyLock::force(&JOBS_COMPLETED);
    LazyLock::force(&JOBS_FAILED_TOTAL);
    LazyLock::force(&RAFT_LEADER);
    LazyLock::force(&JOBS_RESYMBOLICATED);
    LazyLock::force(&UPLOADS_CONFIRMED);
    for h in [
        &RAFT_ENTRIES_PER_FSYNC,
        &RAFT_FSYNC_SECONDS,
        &RAFT_COMMIT_SECONDS,
    ] {
        LazyLock::force(h);
    }
    LazyLock::force(&RAFT_LEADER_CHANGES);
    LazyLock::force(&LEASES);
    LazyLock::force(&AFFINE_LEASES);
    LazyLock::force(&RAFT_PROPOSALS);
    for reason in REFUSED_REASONS {
        REFUSED.with_label_values(&[reason]);
    }
    for durability in ["fsync", "none"] {
        RAFT_WRITES.with_label_values(&[durability]);
    }
    for direction in ["sent", "received"] {
        RAFT_SNAPSHOT_BYTES.with_label_values(&[direction]);
        for outcome in ["ok", "failed"] {
            RAFT_SNAPSHOTS.with_label_values(&[direction, outcome]);
        }
    }
}

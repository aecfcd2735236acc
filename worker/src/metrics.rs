//! The worker's Prometheus metrics at `/metrics` and its readiness at `/ready`, over HTTP on
//! `--metrics-listen`.
//!
//! `/ready` answers 200 while the worker has an open lease stream to the leader and is not
//! draining, 503 otherwise: what an orchestrator's readiness probe asks.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// The worker's registry.
pub static REGISTRY: LazyLock<Registry> =
    LazyLock::new(|| symcluster_telemetry::service_registry("worker", env!("CARGO_PKG_VERSION")));

fn register<C: prometheus::core::Collector + Clone + 'static>(c: C) -> C {
    symcluster_telemetry::register(&REGISTRY, c)
}

/// Jobs run to their end here, by kind (`native`, `js`) and outcome (`completed`, `failed`).
pub static JOBS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "symcluster_worker_jobs_total",
                "Jobs run by this worker, by kind and outcome",
            ),
            &["kind", "outcome"],
        )
        .expect("valid metric"),
    )
});

/// Seconds from lease to outcome of one job (fetching, converting and symbolicating), by kind.
pub static JOB_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new(
                "symcluster_worker_job_seconds",
                "Time to run one job (fetch, convert, symbolicate), by kind",
            )
            .buckets(prometheus::exponential_buckets(0.0005, 2.0, 16).expect("valid buckets")),
            &["kind"],
        )
        .expect("valid metric"),
    )
});

/// Job slots, busy or free (set at each scrape).
pub static SLOTS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "symcluster_worker_slots",
                "This worker's job slots, busy or free",
            ),
            &["state"],
        )
        .expect("valid metric"),
    )
});

static CACHE_LOOKUPS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "symcluster_worker_cache_lookups_total",
                "Debug file and source map lookups since start, by the layer that answered \
                 (`memory`, `negative`, `disk`, `shared`: a SymCache another worker put in the \
                 bucket, or `source`: the original was fetched) and result (`hit` for the \
                 caches, `miss` for the source)",
            ),
            &["layer", "result"],
        )
        .expect("valid metric"),
    )
});

/// Counts one cache lookup answered by `layer` (`memory`, `negative`, `disk`, `source`).
pub(crate) fn cache_lookup(layer: &'static str, hit: bool) {
    CACHE_LOOKUPS
        .with_label_values(&[layer, if hit { "hit" } else { "miss" }])
        .inc();
}

static STEP_SECONDS: LazyLock<HistogramVec> = LazyLock::new(|| {
    register(
        HistogramVec::new(
            HistogramOpts::new(
                "symcluster_worker_step_seconds",
                "Time of one step of a job, by step (`fetch`: one object from the bucket; \
                 `convert`: a debug file to a SymCache or a source map to its cache; \
                 `symbolicate`: the whole report or stack) and kind (`native`, `js`)",
            )
            .buckets(prometheus::exponential_buckets(0.0001, 2.0, 20).expect("valid buckets")),
            &["step", "kind"],
        )
        .expect("valid metric"),
    )
});

/// Records one `step` (`fetch`, `convert`, `stackwalk`, `symbolicate`) of a `kind` job that took
/// `took`.
pub(crate) fn step(step: &'static str, kind: &'static str, took: std::time::Duration) {
    STEP_SECONDS
        .with_label_values(&[step, kind])
        .observe(took.as_secs_f64());
}

static DOWNLOADED_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "symcluster_worker_downloaded_bytes_total",
            "Bytes of debug files, source maps and bundles downloaded from the bucket",
        )
        .expect("valid metric"),
    )
});

/// Counts `bytes` downloaded from the bucket.
pub(crate) fn downloaded(bytes: usize) {
    DOWNLOADED_BYTES.inc_by(bytes as u64);
}

static PARTIAL_SYMCACHES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "symcluster_worker_partial_symcaches_total",
            "Jobs answered from a partial SymCache of their own addresses while the debug file's \
             conversion went on",
        )
        .expect("valid metric"),
    )
});

/// Counts one image of a job answered from a partial SymCache.
pub(crate) fn partial_symcache() {
    PARTIAL_SYMCACHES.inc();
}

static DISK_CACHE_EVICTIONS: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "symcluster_worker_disk_cache_evictions_total",
            "Disk cache entries removed (least recently used first) to make room for others",
        )
        .expect("valid metric"),
    )
});

static DISK_CACHE_EVICTED_BYTES: LazyLock<IntCounter> = LazyLock::new(|| {
    register(
        IntCounter::new(
            "symcluster_worker_disk_cache_evicted_bytes_total",
            "Bytes of the disk cache entries evicted to make room for others",
        )
        .expect("valid metric"),
    )
});

/// Counts one disk cache entry of `bytes` evicted to make room for another.
pub(crate) fn disk_cache_evicted(bytes: u64) {
    DISK_CACHE_EVICTIONS.inc();
    DISK_CACHE_EVICTED_BYTES.inc_by(bytes);
}

static DOWNLOAD_BYTES_IN_FLIGHT: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new(
            "symcluster_worker_download_bytes_in_flight",
            "Bytes received so far by the debug file downloads under way (streamed to disk)",
        )
        .expect("valid metric"),
    )
});

/// One streamed download under way: the bytes it received count in
/// `symcluster_worker_download_bytes_in_flight` until it ends, and in
/// `symcluster_worker_downloaded_bytes_total` as they arrive.
pub(crate) struct Downloading {
    received: std::sync::atomic::AtomicU64,
}

impl Downloading {
    pub(crate) fn start() -> Self {
        Downloading {
            received: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Counts `bytes` more received.
    pub(crate) fn received(&self, bytes: u64) {
        self.received
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        DOWNLOAD_BYTES_IN_FLIGHT.add(bytes as i64);
        DOWNLOADED_BYTES.inc_by(bytes);
    }
}

impl Drop for Downloading {
    fn drop(&mut self) {
        let received = self.received.load(std::sync::atomic::Ordering::Relaxed);
        DOWNLOAD_BYTES_IN_FLIGHT.sub(received as i64);
    }
}

static CONVERSIONS_IN_FLIGHT: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new(
            "symcluster_worker_conversions_in_flight",
            "Debug files and source maps being converted now (each holds the original and \
             its cache)",
        )
        .expect("valid metric"),
    )
});

/// One conversion under way: counted in `symcluster_worker_conversions_in_flight` while it
/// lives, and its time recorded as a `convert` step when it ends.
pub(crate) struct Converting {
    kind: &'static str,
    started: std::time::Instant,
}

impl Converting {
    /// Starts counting a conversion for a `kind` job.
    pub(crate) fn start(kind: &'static str) -> Self {
        CONVERSIONS_IN_FLIGHT.inc();
        Converting {
            kind,
            started: std::time::Instant::now(),
        }
    }
}

impl Drop for Converting {
    fn drop(&mut self) {
        CONVERSIONS_IN_FLIGHT.dec();
        step("convert", self.kind, self.started.elapsed());
    }
}

/// Bytes held by the memory and disk caches (set at each scrape).
pub static CACHE_BYTES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "symcluster_worker_cache_bytes",
                "Bytes held by the memory and disk caches",
            ),
            &["layer"],
        )
        .expect("valid metric"),
    )
});

/// The memory and disk caches' budgets in bytes (`--memory-cache`, `--disk-cache`; set at each
/// scrape): what `symcluster_worker_cache_bytes` is bounded by.
pub static CACHE_BUDGET_BYTES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "symcluster_worker_cache_budget_bytes",
                "The memory and disk caches' budgets",
            ),
            &["layer"],
        )
        .expect("valid metric"),
    )
});

static READY: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new(
            "symcluster_worker_ready",
            "1 while the worker has a lease stream open and is not draining",
        )
        .expect("valid metric"),
    )
});

/// The job kind label of a lease's spec.
pub fn kind_label(spec: &symcluster_proto::v1::JobSpec) -> &'static str {
    match spec.payload {
        Some(symcluster_proto::v1::job_spec::Payload::Js(_)) => "js",
        Some(symcluster_proto::v1::job_spec::Payload::Jvm(_)) => "jvm",
        Some(symcluster_proto::v1::job_spec::Payload::Combined(_)) => "combined",
        _ => "native",
    }
}

/// Whether the worker takes leases now (set by the session, read by `/ready`).
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    /// Sets it.
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
        READY.set(i64::from(ready));
    }

    /// Reads it.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Registers every metric that is only set now and then, so that a scrape shows it from the
/// start.
pub fn register_all() {
    LazyLock::force(&JOBS);
    LazyLock::force(&JOB_SECONDS);
    LazyLock::force(&READY);
    LazyLock::force(&CACHE_LOOKUPS);
    LazyLock::force(&STEP_SECONDS);
    LazyLock::force(&DOWNLOADED_BYTES);
    LazyLock::force(&CONVERSIONS_IN_FLIGHT);
    LazyLock::force(&DOWNLOAD_BYTES_IN_FLIGHT);
    LazyLock::force(&PARTIAL_SYMCACHES);
    LazyLock::force(&DISK_CACHE_EVICTIONS);
    LazyLock::force(&DISK_CACHE_EVICTED_BYTES);
}

//! Prometheus metrics of the bridge, served at `/metrics` (`--metrics-listen`).

use std::net::SocketAddr;
use std::sync::LazyLock;

use prometheus::{Histogram, HistogramOpts, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The bridge's registry.
pub static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    symcluster_telemetry::service_registry("kafka-bridge", env!("CARGO_PKG_VERSION"))
});

fn register<C: prometheus::core::Collector + Clone + 'static>(c: C) -> C {
    symcluster_telemetry::register(&REGISTRY, c)
}

/// Input messages by outcome: `submitted` (a new job), `duplicate` (a redelivered message whose
/// job exists), `dead_letter` (published to the dead-letter topic).
pub static MESSAGES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "symcluster_bridge_messages_total",
                "Input messages handled, by outcome",
            ),
            &["outcome"],
        )
        .expect("valid metric"),
    )
});

/// Results published to the output topic, by job status (`completed`, `failed`).
pub static RESULTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register(
        IntCounterVec::new(
            Opts::new(
                "symcluster_bridge_results_published_total",
                "Results published to the output topic, by job status",
            ),
            &["status"],
        )
        .expect("valid metric"),
    )
});

/// Messages taken and not yet done (result published or dead-lettered).
pub static IN_FLIGHT: LazyLock<IntGauge> = LazyLock::new(|| {
    register(
        IntGauge::new(
            "symcluster_bridge_in_flight",
            "Input messages taken whose result is not published yet",
        )
        .expect("valid metric"),
    )
});

/// Consumer lag per assigned partition: the high watermark minus the group's committed offset.
pub static LAG: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register(
        IntGaugeVec::new(
            Opts::new(
                "symcluster_bridge_consumer_lag",
                "Messages of the input partition not yet committed by this bridge's group",
            ),
            &["topic", "partition"],
        )
        .expect("valid metric"),
    )
});

/// Seconds from taking a message to publishing its result.
pub static LATENCY: LazyLock<Histogram> = LazyLock::new(|| {
    register(
        Histogram::with_opts(
            HistogramOpts::new(
                "symcluster_bridge_result_seconds",
                "Time from taking an input message to publishing its result",
            )
            .buckets(prometheus::exponential_buckets(0.005, 2.0, 14).expect("valid buckets")),
        )
        .expect("valid metric"),
    )
});

/// Whether the Kafka group's coordinator answered the bridge's last look (every 5 s): read by
/// `/ready`. The master accepted the bridge's token before `/ready` is served at all.
pub static KAFKA_REACHABLE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Serves `/metrics`, `/live` and `/ready` (200 while Kafka answers) on `addr` until the
/// process ends.
pub async fn serve(addr: SocketAddr) -> anyhow::Result<()> {
    LazyLock::force(&MESSAGES);
    LazyLock::force(&RESULTS);
    LazyLock::force(&IN_FLIGHT);
    LazyLock::force(&LAG);
    LazyLock::force(&LATENCY);
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(|| async { symcluster_telemetry::exposition(&REGISTRY) }),
        )
        .merge(symcluster_telemetry::probes(|| {
            if KAFKA_REACHABLE.load(std::sync::atomic::Ordering::Relaxed) {
                Ok(())
            } else {
                Err("the Kafka group's coordinator did not answer the last look".to_owned())
            }
        }));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    symcluster_telemetry::serve(listener, app).await;
    Ok(())
}

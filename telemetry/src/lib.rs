//! What every symcluster binary shares to be run and observed: log and trace set-up
//! ([`init_logs`], [`init_service`], [`LogArgs`], [`TraceArgs`]; spans exported to an OpenTelemetry collector with the `otlp`
//! feature), W3C trace context across processes ([`trace_context`]), flag values in human
//! units ([`flags`]), the Prometheus text endpoint ([`register`], [`exposition`],
//! [`serve`]), per-RPC metrics of gRPC servers ([`GrpcMetricsLayer`]) and the HTTP probes
//! `/live` and `/ready` ([`probes`]).

#![deny(missing_docs)]

pub mod flags;
pub mod grpc_metrics;
mod logs;
#[cfg(feature = "otlp")]
mod otlp;
pub mod trace_context;

pub use grpc_metrics::GrpcMetricsLayer;
pub use logs::{LogArgs, LogFormat, Telemetry, TraceArgs, init_logs, init_logs_with, init_service};

use prometheus::{Encoder, Registry, TextEncoder};

/// Registers `collector` in `registry` and returns it. Panics on a name registered twice: a
/// programming error, found by the first scrape of any test.
pub fn register<C: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    collector: C,
) -> C {
    registry
        .register(Box::new(collector.clone()))
        .expect("unique metric");
    collector
}

/// The registry of one service's metrics, holding already what every service exposes: the
/// `process_*` metrics of the running process (CPU seconds, resident and virtual memory in
/// bytes, open and maximum file descriptors, start time in seconds since the Unix epoch: the
/// prometheus crate's `ProcessCollector`, read from `/proc/self` at each scrape; Linux only)
/// and `symcluster_build_info{service, version}`, always 1 (join it on `instance` to label any
/// other metric with the version that made it).
pub fn service_registry(service: &str, version: &str) -> Registry {
    let registry = Registry::new();
    #[cfg(target_os = "linux")]
    registry
        .register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("unique metric");
    let info = prometheus::IntGaugeVec::new(
        prometheus::Opts::new(
            "symcluster_build_info",
            "The service and version of this process (always 1)",
        ),
        &["service", "version"],
    )
    .expect("valid metric");
    info.with_label_values(&[service, version]).set(1);
    register(&registry, info);
    registry
}

/// An HTTP response: status, content type, body.
pub type Response = (axum::http::StatusCode, [(&'static str, String); 1], Vec<u8>);

/// `registry` in the Prometheus text format (0.0.4), with its content type; 500 with the
/// reason when it cannot be encoded.
pub fn exposition(registry: &Registry) -> Response {
    let encoder = TextEncoder::new();
    let mut out = Vec::new();
    match encoder.encode(&registry.gather(), &mut out) {
        Ok(()) => (
            axum::http::StatusCode::OK,
            [("content-type", encoder.format_type().to_owned())],
            out,
        ),
        Err(e) => (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain".to_owned())],
            format!("cannot encode the metrics: {e}\n").into_bytes(),
        ),
    }
}

/// Serves `router` on `listener` until the process ends; a failure is logged.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) {
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "metrics endpoint failed");
    }
}

/// The HTTP probes every service serves beside `/metrics`, in plain HTTP so that Kubernetes'
/// `httpGet` probes work whatever the gRPC port speaks (TLS included):
///
/// - `GET /live`: 200 `live` while the process serves HTTP (a wedged runtime does not answer);
/// - `GET /ready`: 200 `ready` when `ready()` gives `Ok`, else 503 with its reason (one line).
///
/// `ready` runs on the runtime at each probe: it must only read state (no I/O).
pub fn probes<F>(ready: F) -> axum::Router
where
    F: Fn() -> Result<(), String> + Clone + Send + Sync + 'static,
{
    axum::Router::new()
        .route("/live", axum::routing::get(|| async { "live\n" }))
        .route(
            "/ready",
            axum::routing::get(move || {
                let ready = ready.clone();
                async move {
                    match ready() {
                        Ok(()) => (axum::http::StatusCode::OK, "ready\n".to_owned()),
                        Err(reason) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("not ready: {reason}\n"),
                        ),
                    }
                }
            }),
        )
}

//! What every symcluster binary shares to be run and observed: log and trace set-up
//! ([`init_logs`], [`init_service`], [`LogArgs`], [`TraceArgs`]; spans exported to an OpenTelemetry collector with the `otlp`
//! feature), W3C trace context across processes ([`trace_context`]), flag values in human
//! units ([`flags`]), and the Prometheus text endpoint ([`register`], [`exposition`],
//! [`serve`]).

#![deny(missing_docs)]

pub mod flags;
mod logs;
#[cfg(feature = "otlp")]
mod otlp;
pub mod trace_context;

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

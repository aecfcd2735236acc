//! What every symcluster service shares to be observed: log set-up ([`init_logs`]) and the
//! Prometheus text endpoint ([`register`], [`exposition`], [`serve`]).

#![deny(missing_docs)]

use prometheus::{Encoder, Registry, TextEncoder};

/// Logs to stderr, filtered by `RUST_LOG` (default `info`; `tracing_subscriber`'s
/// `EnvFilter` syntax, e.g. `info,symcluster_master=debug`).
pub fn init_logs() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
}

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

//! What every symcluster binary shares to be run and observed: log set-up ([`init_logs`],
//! [`LogArgs`]), flag values in human units ([`flags`]), and the Prometheus text endpoint
//! ([`register`], [`exposition`], [`serve`]).

#![deny(missing_docs)]

pub mod flags;

use prometheus::{Encoder, Registry, TextEncoder};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, the spans with their fields
    /// (`job{job_id=default/crash-1 attempt=1}:`), the target, the message and its fields.
    #[default]
    Text,
    /// One JSON object per line, for log pipelines (Loki, Elasticsearch, CloudWatch): `timestamp`
    /// (RFC 3339), `level`, `target`, the event's fields at the top level (`message`, …), `span`
    /// (the innermost span: its `name` and fields) and `spans` (every open span, outermost
    /// first), so that a job is followed by its `job_id` across processes.
    Json,
}

/// The log flags every binary takes (`#[command(flatten)]`).
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// Log line format on stderr: `text` or `json`. What is logged is chosen by `RUST_LOG`
    /// (default `info`; e.g. `info,symcluster_master=debug` adds each job's submit, lease and
    /// completion).
    #[arg(
        long,
        global = true,
        value_enum,
        env = "SYMCLUSTER_LOG_FORMAT",
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`; `tracing_subscriber`'s
/// `EnvFilter` syntax, e.g. `info,symcluster_master=debug`).
pub fn init_logs(format: LogFormat) {
    init_logs_with(format, "info");
}

/// [`init_logs`] with another filter when `RUST_LOG` is unset (`"warn"` for command-line
/// tools, whose output is their result).
pub fn init_logs_with(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
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

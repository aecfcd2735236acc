//! Log lines on stderr (text or JSON) and, for the services, spans exported to an
//! OpenTelemetry collector.

use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

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

/// The trace flags of the services (master, worker, Kafka bridge; `#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// OpenTelemetry collector to export spans to over OTLP/gRPC, e.g.
    /// `http://otel-collector:4317` (Jaeger, Tempo and the OpenTelemetry Collector take it).
    /// Spans carry `job_id`, `attempt`, `worker_id` and `debug_id`; a job's lease on the master,
    /// its run on the worker and its completion on the master form one trace. Off when unset.
    /// The service name is the binary's unless `OTEL_SERVICE_NAME` says otherwise; batching
    /// follows the standard `OTEL_BSP_*` variables (spans leave at most every 5 s by default).
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// What [`init_service`] set up that must be ended before the process exits: the span
/// exporter, whose last batch [`Telemetry::shutdown`] sends. Dropping it sends nothing.
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
#[derive(Debug, Default)]
pub struct Telemetry {
    #[cfg(feature = "otlp")]
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans not yet exported and stops the exporter; gives up after 5 s (a collector
    /// out of reach must not hold up a stopping service). Call it from the Tokio runtime.
    pub async fn shutdown(self) {
        #[cfg(feature = "otlp")]
        if let Some(provider) = self.provider {
            // The exporter's shutdown blocks until its batch task (on this runtime) answers:
            // block a thread of the blocking pool, not one of the runtime's.
            let stopped = tokio::task::spawn_blocking(move || provider.shutdown());
            match tokio::time::timeout(std::time::Duration::from_secs(5), stopped).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("OpenTelemetry export did not stop cleanly: {e}"),
                Ok(Err(e)) => eprintln!("OpenTelemetry export did not stop cleanly: {e}"),
                Err(_) => eprintln!("OpenTelemetry export did not stop within 5 s"),
            }
        }
    }
}

/// Logs to stderr in `format`, filtered by `RUST_LOG` (default `info`; `tracing_subscriber`'s
/// `EnvFilter` syntax, e.g. `info,symcluster_master=debug`). For command-line tools; the
/// services use [`init_service`].
pub fn init_logs(format: LogFormat) {
    init_logs_with(format, "info");
}

/// [`init_logs`] with another filter when `RUST_LOG` is unset (`"warn"` for command-line
/// tools, whose output is their result).
pub fn init_logs_with(format: LogFormat, default_filter: &str) {
    let _ = Registry::default()
        .with(log_layer(format))
        .with(filter(default_filter))
        .try_init();
}

/// Logs as [`init_logs`] does and, when `trace.otlp_endpoint` is set, exports the same spans
/// (those `RUST_LOG` lets through) to that collector as `service` (e.g. `symcluster-master`).
/// Must be called on a Tokio runtime (the exporter's batches are sent from a task).
///
/// # Errors
/// An endpoint that is not a URL, or an endpoint given to a binary built without the `otlp`
/// feature.
pub fn init_service(log: &LogArgs, trace: &TraceArgs, service: &str) -> anyhow::Result<Telemetry> {
    let mut telemetry = Telemetry::default();
    let mut layers: Vec<Box<dyn Layer<Registry> + Send + Sync>> = vec![log_layer(log.log_format)];
    if let Some(endpoint) = trace.otlp_endpoint.as_deref().filter(|e| !e.is_empty()) {
        layers.push(export_layer(&mut telemetry, endpoint, service)?);
    }
    let _ = Registry::default()
        .with(layers)
        .with(filter("info"))
        .try_init();
    Ok(telemetry)
}

#[cfg(feature = "otlp")]
fn export_layer(
    telemetry: &mut Telemetry,
    endpoint: &str,
    service: &str,
) -> anyhow::Result<Box<dyn Layer<Registry> + Send + Sync>> {
    let (provider, layer) = crate::otlp::layer(endpoint, service)?;
    telemetry.provider = Some(provider);
    Ok(layer)
}

#[cfg(not(feature = "otlp"))]
fn export_layer(
    _: &mut Telemetry,
    endpoint: &str,
    _: &str,
) -> anyhow::Result<Box<dyn Layer<Registry> + Send + Sync>> {
    anyhow::bail!(
        "--otlp-endpoint {endpoint}: this binary was built without OpenTelemetry export \
         (cargo feature `otlp`)"
    )
}

/// Libraries whose warnings describe the input, not the service (rust-minidump's stack walker
/// warns about each odd stream of a dump): errors only, unless `RUST_LOG` says otherwise.
const QUIET_LIBRARIES: &str =
    "minidump=error,minidump_processor=error,minidump_unwind=error,breakpad_symbols=error";

fn filter(default_filter: &str) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| format!("{default_filter},{QUIET_LIBRARIES}").into())
}

fn log_layer(format: LogFormat) -> Box<dyn Layer<Registry> + Send + Sync> {
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .boxed(),
    }
}

//! Span export to an OpenTelemetry collector over OTLP/gRPC (the `otlp` feature).

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::{Layer, Registry};

/// The tracer provider exporting to `endpoint` as `service`, and the `tracing` layer that
/// feeds it. Batches are sent from a task on the current Tokio runtime: the tonic exporter
/// needs its reactor (the SDK's default batch thread has none).
pub(crate) fn layer(
    endpoint: &str,
    service: &str,
) -> anyhow::Result<(SdkTracerProvider, Box<dyn Layer<Registry> + Send + Sync>)> {
    tokio::runtime::Handle::try_current().context("OpenTelemetry export needs a Tokio runtime")?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .with_context(|| format!("--otlp-endpoint {endpoint}"))?;
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    // `OTEL_SERVICE_NAME` (read by the resource's environment detector) names the service
    // when set; the binary's name otherwise.
    let mut resource = opentelemetry_sdk::Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service.to_owned());
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("symcluster");
    // Not the exporter's own HTTP/2 and gRPC client spans and events: under `RUST_LOG=debug`
    // each export would make more spans to export.
    let not_the_exporter = Targets::new()
        .with_default(LevelFilter::TRACE)
        .with_target("h2", LevelFilter::OFF)
        .with_target("hyper", LevelFilter::OFF)
        .with_target("tonic", LevelFilter::OFF)
        .with_target("opentelemetry", LevelFilter::OFF);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(not_the_exporter)
        .boxed();
    Ok((provider, layer))
}

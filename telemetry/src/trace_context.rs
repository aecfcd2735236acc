//! A span's place in a distributed trace, carried between processes as a W3C `traceparent`
//! value (<https://www.w3.org/TR/trace-context/>: `00-<32 hex trace id>-<16 hex span id>-<2 hex
//! flags>`): in gRPC request metadata under [`METADATA_KEY`], or in a message field (a lease).
//!
//! Without the `otlp` feature, or when no collector is configured, spans have no trace
//! context: [`traceparent`] is empty and [`set_parent`] does nothing.

/// The gRPC metadata key (and HTTP header) of the W3C trace context.
pub const METADATA_KEY: &str = "traceparent";

/// `span`'s trace context as a `traceparent` value; empty when spans are not exported.
pub fn traceparent(span: &tracing::Span) -> String {
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::propagation::TextMapPropagator as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let mut carrier = std::collections::HashMap::new();
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(&span.context(), &mut carrier);
        carrier.remove(METADATA_KEY).unwrap_or_default()
    }
    #[cfg(not(feature = "otlp"))]
    {
        let _ = span;
        String::new()
    }
}

/// Makes `span` a child of the remote span `traceparent` names (another process's). An empty
/// or malformed value leaves `span` where it is (a root, or under its local parent).
pub fn set_parent(span: &tracing::Span, traceparent: &str) {
    if traceparent.is_empty() {
        return;
    }
    #[cfg(feature = "otlp")]
    {
        use opentelemetry::propagation::TextMapPropagator as _;
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let carrier =
            std::collections::HashMap::from([(METADATA_KEY.to_owned(), traceparent.to_owned())]);
        let context =
            opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&carrier);
        if context.span().span_context().is_valid() {
            // Fails only when the span is disabled or already started elsewhere: nothing to do.
            let _ = span.set_parent(context);
        }
    }
    #[cfg(not(feature = "otlp"))]
    let _ = span;
}

/// The `traceparent` of a gRPC request's metadata; empty when absent or not ASCII.
pub fn from_metadata(metadata: &tonic::metadata::MetadataMap) -> &str {
    metadata
        .get(METADATA_KEY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

/// `request` carrying `span`'s trace context in its metadata (unchanged when spans are not
/// exported).
pub fn with_parent<T>(mut request: tonic::Request<T>, span: &tracing::Span) -> tonic::Request<T> {
    let traceparent = traceparent(span);
    if !traceparent.is_empty()
        && let Ok(value) = traceparent.parse()
    {
        request.metadata_mut().insert(METADATA_KEY, value);
    }
    request
}

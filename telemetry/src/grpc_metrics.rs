//! Per-RPC metrics of a gRPC server, as a tower layer ([`GrpcMetricsLayer`]) put in front of
//! every service of a `tonic` server:
//!
//! - `symcluster_grpc_server_started_total{service, method}`: calls received;
//! - `symcluster_grpc_server_handled_total{service, method, code}`: calls ended, by gRPC status
//!   name (`OK`, `UNAVAILABLE`, ...; `CANCELLED` when the caller went away before the end);
//! - `symcluster_grpc_server_handling_seconds{service, method}`: seconds from the request's
//!   headers to the end of the response (its trailers), histogram.
//!
//! The same three series as go-grpc-prometheus (`grpc_server_started_total`,
//! `grpc_server_handled_total`, `grpc_server_handling_seconds`), under the project's prefix.
//! A call's status is read where gRPC puts it (gRPC over HTTP/2, "Responses"): the
//! `grpc-status` header of a trailers-only response, else the `grpc-status` trailer. A
//! streaming call is counted when it ends, so a lease stream held for an hour is one observation
//! of an hour. `service` is the full service name (`symcluster.v1.Ingest`), `method` the
//! method's. Only the methods the server serves get their own series (the layer is given them,
//! [`methods_in`] reads them from a file descriptor set); any other path, which anyone can send
//! before a token is checked, is counted as service and method `unknown`, so that callers
//! cannot grow the number of series.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame};
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The layer: registers the three metrics in a registry once, then wraps each server service.
#[derive(Clone)]
pub struct GrpcMetricsLayer {
    metrics: Metrics,
}

#[derive(Clone)]
struct Metrics {
    /// The served methods' paths (`/pkg.Service/Method`).
    known: Arc<HashSet<String>>,
    started: IntCounterVec,
    handled: IntCounterVec,
    seconds: HistogramVec,
}

impl GrpcMetricsLayer {
    /// Registers the metrics in `registry`, with series for the methods of `methods` (their
    /// paths, `/pkg.Service/Method`) and `unknown` for any other. Panics when they are already
    /// there (a programming error: one layer per registry).
    pub fn new(registry: &Registry, methods: impl IntoIterator<Item = String>) -> Self {
        let started = IntCounterVec::new(
            Opts::new(
                "symcluster_grpc_server_started_total",
                "gRPC calls received, by service and method",
            ),
            &["service", "method"],
        )
        .expect("valid metric");
        let handled = IntCounterVec::new(
            Opts::new(
                "symcluster_grpc_server_handled_total",
                "gRPC calls ended, by service, method and gRPC status name",
            ),
            &["service", "method", "code"],
        )
        .expect("valid metric");
        let seconds = HistogramVec::new(
            HistogramOpts::new(
                "symcluster_grpc_server_handling_seconds",
                "Seconds from a gRPC call's request headers to the end of its response",
            )
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0,
            ]),
            &["service", "method"],
        )
        .expect("valid metric");
        Self {
            metrics: Metrics {
                known: Arc::new(methods.into_iter().collect()),
                started: crate::register(registry, started),
                handled: crate::register(registry, handled),
                seconds: crate::register(registry, seconds),
            },
        }
    }
}

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> Self::Service {
        GrpcMetrics {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`GrpcMetricsLayer`] wraps around a server's services.
#[derive(Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
    metrics: Metrics,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Body,
{
    type Response = http::Response<MetricsBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let path = request.uri().path();
        let (service, method) = if self.metrics.known.contains(path) {
            service_and_method(path)
        } else {
            ("unknown".to_owned(), "unknown".to_owned())
        };
        self.metrics
            .started
            .with_label_values(&[&service, &method])
            .inc();
        let mut call = Call {
            metrics: self.metrics.clone(),
            service,
            method,
            start: Instant::now(),
            ended: false,
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            match response.await {
                Ok(response) => {
                    // A trailers-only response (an error before any message) carries its
                    // status in the headers.
                    let status = response
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .map(code_name);
                    if let Some(code) = status {
                        call.end(code);
                    }
                    Ok(response.map(|body| MetricsBody { inner: body, call }))
                }
                Err(error) => {
                    // The transport's own failure: no gRPC status reached the caller.
                    call.end("UNKNOWN");
                    Err(error)
                }
            }
        })
    }
}

/// One call being measured: counted once, when its status is known or when it is dropped.
struct Call {
    metrics: Metrics,
    service: String,
    method: String,
    start: Instant,
    ended: bool,
}

impl Call {
    fn end(&mut self, code: &str) {
        if self.ended {
            return;
        }
        self.ended = true;
        let labels = [self.service.as_str(), self.method.as_str()];
        self.metrics
            .handled
            .with_label_values(&[labels[0], labels[1], code])
            .inc();
        self.metrics
            .seconds
            .with_label_values(&labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        // The response was dropped before its end: the caller cancelled, or the server stopped.
        self.end("CANCELLED");
    }
}

pin_project_lite::pin_project! {
    /// A response body that ends its call's measurement at its trailers (or its end).
    pub struct MetricsBody<B> {
        #[pin]
        inner: B,
        call: Call,
    }
}

impl<B: Body> Body for MetricsBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let mut inner = this.inner;
        let polled = inner.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    let code = trailers
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .map_or("OK", code_name);
                    this.call.end(code);
                } else if inner.is_end_stream() {
                    // The last frame, and no trailers will come: hyper polls no further.
                    this.call.end("OK");
                }
            }
            Poll::Ready(Some(Err(_))) => this.call.end("UNKNOWN"),
            // A body that ends without trailers: tonic always sends them, so this is a
            // response of another kind; the call did not fail.
            Poll::Ready(None) => this.call.end("OK"),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The paths (`/pkg.Service/Method`) of every method of every service in an encoded
/// `google.protobuf.FileDescriptorSet` (what `tonic::include_file_descriptor_set!` embeds).
/// Errors: the bytes are not a file descriptor set.
pub fn methods_in(file_descriptor_set: &[u8]) -> Result<Vec<String>, prost::DecodeError> {
    let set = <prost_types::FileDescriptorSet as prost::Message>::decode(file_descriptor_set)?;
    let mut paths = Vec::new();
    for file in &set.file {
        let package = file.package();
        for service in &file.service {
            let service_name = if package.is_empty() {
                service.name().to_owned()
            } else {
                format!("{package}.{}", service.name())
            };
            for method in &service.method {
                paths.push(format!("/{service_name}/{}", method.name()));
            }
        }
    }
    Ok(paths)
}

/// `/pkg.Service/Method` → (`pkg.Service`, `Method`); anything else → (`unknown`, `unknown`).
fn service_and_method(path: &str) -> (String, String) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    match (parts.next(), parts.next()) {
        (Some(service), Some(method))
            if !service.is_empty() && !method.is_empty() && !method.contains('/') =>
        {
            (service.to_owned(), method.to_owned())
        }
        _ => ("unknown".to_owned(), "unknown".to_owned()),
    }
}

/// A `grpc-status` value (a decimal code) → its name in the gRPC spec ("Status codes and their
/// use in gRPC"); a value outside 0–16 → `UNKNOWN`.
fn code_name(value: &str) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    value
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|code| NAMES.get(code).copied())
        .unwrap_or("UNKNOWN")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_service_and_method() {
        assert_eq!(
            service_and_method("/symcluster.v1.Ingest/Submit"),
            ("symcluster.v1.Ingest".to_owned(), "Submit".to_owned())
        );
        for odd in ["/", "", "/x", "/a/b/c", "//m"] {
            assert_eq!(
                service_and_method(odd),
                ("unknown".to_owned(), "unknown".to_owned()),
                "{odd:?}"
            );
        }
    }

    #[test]
    fn methods_are_read_from_a_descriptor_set() {
        use prost::Message as _;
        let set = prost_types::FileDescriptorSet {
            file: vec![prost_types::FileDescriptorProto {
                package: Some("a.v1".into()),
                service: vec![prost_types::ServiceDescriptorProto {
                    name: Some("Jobs".into()),
                    method: vec![
                        prost_types::MethodDescriptorProto {
                            name: Some("Get".into()),
                            ..Default::default()
                        },
                        prost_types::MethodDescriptorProto {
                            name: Some("Watch".into()),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        assert_eq!(
            methods_in(&set.encode_to_vec()).unwrap(),
            ["/a.v1.Jobs/Get", "/a.v1.Jobs/Watch"]
        );
        assert!(methods_in(b"\xff\xff").is_err());
    }

    #[test]
    fn status_codes_have_their_spec_names() {
        assert_eq!(code_name("0"), "OK");
        assert_eq!(code_name("14"), "UNAVAILABLE");
        assert_eq!(code_name("16"), "UNAUTHENTICATED");
        assert_eq!(code_name("17"), "UNKNOWN");
        assert_eq!(code_name("x"), "UNKNOWN");
    }
}

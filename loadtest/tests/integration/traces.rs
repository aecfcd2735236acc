//! Operators' view: spans exported over OTLP/gRPC (`--otlp-endpoint`) to a collector, here a
//! real OTLP trace service on a loopback socket that keeps what it receives. A job's lease on
//! the master, its run on the worker and its completion on the master form one trace.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions};

use crate::support::one_crashprobe_job;

/// One received span: the service that sent it, its ids (hex) and attributes.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: Vec<(String, String)>,
}

impl Span {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The collector: every span of every export request, in arrival order.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Span>>>);

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        other => format!("{other:?}"),
    }
}

fn pairs(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut kept = self.0.lock().unwrap();
        for resource_spans in request.into_inner().resource_spans {
            let resource = pairs(
                &resource_spans
                    .resource
                    .map(|r| r.attributes)
                    .unwrap_or_default(),
            );
            let service = resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    kept.push(Span {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex::encode(span.trace_id),
                        span_id: hex::encode(span.span_id),
                        parent_span_id: hex::encode(span.parent_span_id),
                        attributes: pairs(&span.attributes),
                    });
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Serves the collector on a loopback port until the test ends (the runtime's end stops it).
async fn start_collector() -> (Collector, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    (collector, address)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_one_trace_across_master_and_worker() {
    let (collector, address) = start_collector().await;
    // Batches leave every 100 ms instead of every 5 s.
    let env = vec![
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
            format!("http://{address}"),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY".to_owned(), "100".to_owned()),
    ];
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            env: env.clone(),
            ..Default::default()
        },
    )
    .await;
    cluster
        .add_worker_with(WorkerOptions {
            env,
            ..Default::default()
        })
        .await;
    let found = one_crashprobe_job(&cluster, "traced").await;
    let key = "default/traced";

    // Wait for the last span of each process to end: the master's completion, the worker's
    // run, and the conversions, which end after the run (it was answered from partial
    // SymCaches); each process queues its spans as they end, so the earlier ones came before.
    let deadline = Instant::now() + Duration::from_secs(30);
    let spans = loop {
        let spans = collector.0.lock().unwrap().clone();
        if ["complete_job", "job"].iter().all(|name| {
            spans
                .iter()
                .any(|s| s.name == *name && s.attribute("job_id") == Some(key))
        }) && spans.iter().filter(|s| s.name == "convert").count() >= found.len()
        {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "no complete_job and job spans within 30 s; received: {spans:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let one = |service: &str, name: &str| -> &Span {
        let found: Vec<&Span> = spans
            .iter()
            .filter(|s| s.service == service && s.name == name)
            .filter(|s| s.attribute("job_id").is_none_or(|id| id == key))
            .collect();
        assert_eq!(found.len(), 1, "{service} {name}: {spans:#?}");
        found[0]
    };

    let submit = one("symcluster-master", "submit_job");
    assert_eq!(submit.attribute("job_id"), Some(key));
    let lease = one("symcluster-master", "lease");
    assert_eq!(lease.attribute("attempt"), Some("1"));
    assert_eq!(lease.attribute("worker_id"), Some("worker-0"));
    let run = one("symcluster-worker", "job");
    assert_eq!(run.attribute("job_id"), Some(key));
    assert_eq!(run.attribute("attempt"), Some("1"));
    let complete = one("symcluster-master", "complete_job");
    assert_eq!(complete.attribute("worker_id"), Some("worker-0"));

    // One trace: lease → job (worker) → complete_job (master).
    assert_eq!(run.trace_id, lease.trace_id);
    assert_eq!(run.parent_span_id, lease.span_id);
    assert_eq!(complete.trace_id, lease.trace_id);
    assert_eq!(complete.parent_span_id, run.span_id);
    assert_ne!(lease.trace_id, "0".repeat(32));

    // Inside the run (at the default `info`; `debug` adds a `debug_file` span around each
    // debug file's lookup): every debug file fetched from the bucket, each one found converted
    // to a SymCache once (after the run ended), a partial SymCache of each for the run, and
    // the symbolication.
    let children = |parent: &Span, name: &str| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.parent_span_id == parent.span_id && s.name == name)
            .cloned()
            .collect()
    };
    let fetched = children(run, "fetch");
    for id in &found {
        assert!(
            fetched
                .iter()
                .any(|s| s.attribute("debug_id") == Some(id.as_str())),
            "no fetch of {id}: {fetched:#?}"
        );
    }
    let converted: std::collections::BTreeSet<String> = children(run, "convert")
        .iter()
        .map(|s| {
            assert!(
                s.attribute("bytes").unwrap().parse::<u64>().unwrap() > 0,
                "{s:?}"
            );
            s.attribute("debug_id").unwrap().to_owned()
        })
        .collect();
    assert_eq!(converted, found);
    // The job itself was answered from a partial SymCache of each.
    let partial: std::collections::BTreeSet<String> = children(run, "partial")
        .iter()
        .map(|s| s.attribute("debug_id").unwrap().to_owned())
        .collect();
    assert_eq!(partial, found);
    assert_eq!(children(run, "symbolicate").len(), 1);
}

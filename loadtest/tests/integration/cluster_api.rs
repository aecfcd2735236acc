//! The API around the jobs: auth on every call, health checking and reflection for probes and
//! grpcurl, metrics, cluster status.

use symcluster_client::{Client, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions};

use crate::support::http_get;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_health_metrics_and_status() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;

    // No token, or a wrong one: refused.
    let channel = tonic::transport::Endpoint::from_shared(cluster.endpoint.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let e = api::ingest_client::IngestClient::new(channel.clone())
        .get_job(api::GetJobRequest {
            spec: false,
            job_id: "x".into(),
            result_zstd: false,
            project: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);
    assert_eq!(
        e.message(),
        "missing `authorization: Bearer <token>` metadata"
    );
    // A wrong token is refused at once (connecting asks the master who leads).
    match Client::connect(&cluster.endpoint, "wrong-token")
        .await
        .err()
        .expect("a wrong token is refused")
    {
        symcluster_client::ClientError::Status(s) => {
            assert_eq!(
                (s.code(), s.message()),
                (tonic::Code::Unauthenticated, "invalid bearer token")
            );
        }
        other => panic!("expected a status, got {other}"),
    }

    // With the token: an unknown job is NOT_FOUND.
    let mut client = cluster.client().await;
    let e = client.job("nope").await.unwrap_err();
    assert!(e.to_string().contains("no job \"nope\""), "{e}");

    // Health checking needs no token (Kubernetes probes).
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "symcluster.v1.Ingest".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serving.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );

    // Status: one worker with 2 slots, connected.
    let status = cluster.status().await;
    assert_eq!(status.leader, cluster.masters[0].endpoint());
    assert!(status.from_leader);
    assert_eq!(status.masters.len(), 1);
    assert_eq!(
        (status.masters[0].id, status.masters[0].role.as_str()),
        (1, "leader")
    );
    assert_eq!(status.workers.len(), 1);
    assert_eq!(
        (status.workers[0].slots, status.workers[0].connected),
        (2, true)
    );

    // Prometheus metrics over HTTP.
    let metrics = http_get(&cluster.metrics, "/metrics").await;
    assert!(
        metrics.contains("symcluster_workers_connected 1"),
        "{metrics}"
    );
    for line in [
        "symcluster_queue_depth{kind=\"native\"} 0",
        "symcluster_queue_depth{kind=\"js\"} 0",
        "symcluster_queue_oldest_age_seconds{kind=\"native\"} 0",
        "symcluster_cluster_slots{state=\"busy\"} 0",
        "symcluster_cluster_slots{state=\"free\"} 2",
        "symcluster_workers_draining 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// `symctl submit DIR`: every file of a folder, a summary line, refusals with their reason;
/// the same folder again makes no new job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symctl_submits_a_folder() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    crate::support::upload_dsyms(
        &cluster,
        &[crate::support::fixture("crashprobe/release/dSYMs")],
    );
    let dir = cluster.dir.path().join("reports");
    std::fs::create_dir_all(dir.join("more")).unwrap();
    let reports = crate::support::fixture("crashprobe/release/arm64");
    for (name, to) in [
        ("Call abort().json", "abort.json"),
        ("Dereference a NULL pointer.json", "null.json"),
        ("Call __builtin_trap().json", "more/trap.json"),
    ] {
        std::fs::copy(reports.join(name), dir.join(to)).unwrap();
    }
    std::fs::write(dir.join("empty.json"), b"").unwrap();
    let dir_arg = dir.display().to_string();

    let first = cluster.symctl(&["submit", &dir_arg]);
    assert_eq!(first.status.code(), Some(1), "a file was refused");
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        "submitted 3, duplicates 0, refused 1\n"
    );
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(
        stderr.contains("empty.json: refused: ") && stderr.contains("the report is empty"),
        "{stderr}"
    );

    std::fs::remove_file(dir.join("empty.json")).unwrap();
    let again = cluster.symctl(&["submit", "--wait", &dir_arg]);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "submitted 0, duplicates 3, refused 0, completed 3, failed 0\n"
    );
    // Job ids are the folder's name and the paths in it.
    let mut client = cluster.client().await;
    let job = client.job("reports/more/trap.json").await.unwrap();
    assert_eq!(job.state, api::JobState::Completed as i32);

    // `submit --wait` of a report that is no report: printed FAILED with its error, exit 1.
    let garbage = cluster.dir.path().join("garbage.txt");
    std::fs::write(&garbage, b"this is not a crash report").unwrap();
    let failed = cluster.symctl(&[
        "submit",
        "--wait",
        "--job-id",
        "garbage",
        &garbage.display().to_string(),
    ]);
    assert_eq!(failed.status.code(), Some(1));
    let printed: serde_json::Value = serde_json::from_slice(&failed.stdout).unwrap();
    assert_eq!(printed["state"], "failed");
    assert!(printed["error"].is_string(), "{printed}");
    // The leader counted it among the jobs failed for good (a counter, beside completed).
    let text = http_get(&cluster.metrics, "/metrics").await;
    assert_eq!(
        crate::support::metric_value(&text, "symcluster_jobs_failed_total", &[]),
        Some(1.0),
        "{text}"
    );
}

/// Every metric the Grafana dashboard queries exists in the master's and the worker's
/// `/metrics` (the bridge's are checked by the Kafka test); the worker's `/ready` says ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_queries_metrics_that_exist() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    crate::support::upload_dsyms(
        &cluster,
        &[crate::support::fixture("crashprobe/release/dSYMs")],
    );
    let report = std::fs::read(crate::support::fixture(
        "crashprobe/release/arm64/Call abort().json",
    ))
    .unwrap();
    let mut client = cluster.client().await;
    client.submit_native("one", report).await.unwrap();
    let job = crate::support::wait(&mut client, "one").await;
    let found = crate::support::result(&job)["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "found")
        .count() as f64;

    let worker = &cluster.worker_metrics[0];
    // The job was answered from partial SymCaches; its conversions end after it, one by one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = http_get(worker, "/metrics").await;
        let done =
            crate::support::metric_value(&text, "symcluster_worker_conversions_in_flight", &[])
                == Some(0.0)
                && crate::support::metric_value(
                    &text,
                    "symcluster_worker_step_seconds",
                    &[("step", "convert"), ("kind", "native")],
                )
                .is_some_and(|n| n == found);
        if done {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(http_get(worker, "/ready").await, "ready\n");
    // Every service says what it is and what it costs: build info, the process's own metrics.
    let version = env!("CARGO_PKG_VERSION");
    for (endpoint, service) in [(&cluster.metrics, "master"), (worker, "worker")] {
        let text = http_get(endpoint, "/metrics").await;
        let info =
            format!("symcluster_build_info{{service=\"{service}\",version=\"{version}\"}} 1");
        assert!(text.lines().any(|l| l == info), "{info} in:\n{text}");
        // (CPU in whole seconds, as the prometheus crate counts it: 0 for a young process.)
        assert!(crate::support::metric_value(&text, "process_cpu_seconds_total", &[]).is_some());
        for name in ["process_resident_memory_bytes", "process_open_fds"] {
            let value = crate::support::metric_value(&text, name, &[])
                .unwrap_or_else(|| panic!("{name} in:\n{text}"));
            assert!(value > 0.0, "{name} = {value}");
        }
    }
    // Per-RPC metrics of the master's gRPC server, after real calls: the submit above, and a
    // job that does not exist.
    let missing = client.job("no-such-job").await.unwrap_err();
    assert!(
        matches!(&missing, symcluster_client::ClientError::Status(s) if s.code() == tonic::Code::NotFound),
        "{missing:?}"
    );
    // A method the master does not serve: counted as `unknown`, not under its own name (anyone
    // may send any path, before a token is checked).
    let channel = tonic::transport::Endpoint::from_shared(cluster.masters[0].endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let bogus = grpc
        .unary::<(), (), _>(
            tonic::Request::new(()),
            tonic::codegen::http::uri::PathAndQuery::from_static("/symcluster.v1.Ingest/Bogus"),
            tonic_prost::ProstCodec::default(),
        )
        .await
        .unwrap_err();
    assert_ne!(bogus.code(), tonic::Code::Ok);
    let text = http_get(&cluster.metrics, "/metrics").await;
    assert_eq!(
        crate::support::metric_value(
            &text,
            "symcluster_grpc_server_started_total",
            &[("service", "unknown"), ("method", "unknown")]
        ),
        Some(1.0),
        "{text}"
    );
    assert!(!text.contains("Bogus"), "{text}");
    let rpc = |name: &str, method: &str, code: Option<&str>| {
        let mut labels = vec![("service", "symcluster.v1.Ingest"), ("method", method)];
        labels.extend(code.map(|code| ("code", code)));
        crate::support::metric_value(&text, name, &labels)
    };
    assert_eq!(
        rpc("symcluster_grpc_server_handled_total", "Submit", Some("OK")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        rpc("symcluster_grpc_server_started_total", "Submit", None),
        Some(1.0)
    );
    assert_eq!(
        rpc(
            "symcluster_grpc_server_handled_total",
            "GetJob",
            Some("NOT_FOUND")
        ),
        Some(1.0),
        "{text}"
    );
    // A group of one: this master leads.
    assert_eq!(
        crate::support::metric_value(&text, "symcluster_raft_leader", &[]),
        Some(1.0),
        "{text}"
    );
    // (A histogram's value here is its count of observations.)
    assert_eq!(
        rpc("symcluster_grpc_server_handling_seconds", "Submit", None),
        Some(1.0)
    );
    let exposition = format!(
        "{}\n{}",
        http_get(&cluster.metrics, "/metrics").await,
        http_get(worker, "/metrics").await
    );
    let wanted = crate::support::dashboard_metrics();
    assert!(wanted.len() > 20, "{wanted:?}");
    let absent = crate::support::absent_metrics(
        wanted
            .iter()
            .filter(|n| !n.starts_with("symcluster_bridge_")),
        &exposition,
    );
    assert!(absent.is_empty(), "not exported: {absent:?}\n{exposition}");
    assert!(
        exposition
            .lines()
            .any(|l| l == "symcluster_worker_jobs_total{kind=\"native\",outcome=\"completed\"} 1"),
        "{exposition}"
    );

    // Both endpoints read by a Prometheus text-format parser: names follow the conventions
    // (`_total` counters, `_seconds` and `_bytes` are what they say), with the right types.
    for endpoint in [&cluster.metrics, worker] {
        let text = http_get(endpoint, "/metrics").await;
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .unwrap_or_else(|e| panic!("{endpoint}: {e}"));
        assert!(
            scrape.samples.len() > 5,
            "{endpoint}: {}",
            scrape.samples.len()
        );
        let histograms: std::collections::HashSet<&str> = scrape
            .samples
            .iter()
            .filter(|s| matches!(s.value, prometheus_parse::Value::Histogram(_)))
            .map(|s| s.metric.as_str())
            .collect();
        for sample in &scrape.samples {
            let name = sample.metric.as_str();
            // Ours, or the process metrics every Prometheus client names the same.
            assert!(
                name.starts_with("symcluster_") || name.starts_with("process_"),
                "{name}"
            );
            // A histogram's `_sum` and `_count` series belong to it.
            if ["_sum", "_count"].iter().any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|family| histograms.contains(family))
            }) {
                continue;
            }
            assert!(
                scrape.docs.contains_key(name)
                    || scrape.docs.contains_key(name.trim_end_matches("_total")),
                "{name} has no HELP"
            );
            match &sample.value {
                prometheus_parse::Value::Counter(_) => {
                    assert!(name.ends_with("_total"), "counter {name} without _total")
                }
                prometheus_parse::Value::Gauge(_) => {
                    assert!(
                        !name.ends_with("_total"),
                        "gauge {name} named like a counter"
                    )
                }
                prometheus_parse::Value::Histogram(_) => {}
                other => panic!("{name}: unexpected type {other:?}"),
            }
            // Durations in seconds: histograms of events, or a gauge of a current age
            // (`symcluster_queue_oldest_age_seconds`).
            if name.ends_with("_seconds") {
                assert!(
                    matches!(
                        sample.value,
                        prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Gauge(_)
                    ),
                    "{name} is neither a histogram nor a gauge"
                );
            }
        }
        let typed = |name: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name)
                .map(|s| std::mem::discriminant(&s.value))
        };
        let counter = Some(std::mem::discriminant(&prometheus_parse::Value::Counter(
            0.0,
        )));
        let gauge = Some(std::mem::discriminant(&prometheus_parse::Value::Gauge(0.0)));
        let histogram = Some(std::mem::discriminant(&prometheus_parse::Value::Histogram(
            Vec::new(),
        )));
        if endpoint == &cluster.metrics {
            assert_eq!(typed("symcluster_leases_total"), counter);
            assert_eq!(typed("symcluster_raft_write_transactions_total"), counter);
            assert_eq!(typed("symcluster_queue_depth"), gauge);
            assert_eq!(typed("symcluster_raft_fsync_seconds"), histogram);
        } else {
            assert_eq!(typed("symcluster_worker_jobs_total"), counter);
            assert_eq!(typed("symcluster_worker_job_seconds"), histogram);
            assert_eq!(typed("symcluster_worker_cache_bytes"), gauge);
            assert_eq!(typed("symcluster_worker_cache_lookups_total"), counter);
            assert_eq!(typed("symcluster_worker_step_seconds"), histogram);
            assert_eq!(typed("symcluster_worker_downloaded_bytes_total"), counter);
            assert_eq!(typed("symcluster_worker_conversions_in_flight"), gauge);
            // After one job on a fresh worker: every lookup went to the bucket, the files found
            // were downloaded and converted, and no conversion is left running.
            let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
                let sample = scrape
                    .samples
                    .iter()
                    .find(|s| {
                        s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
                    })
                    .unwrap_or_else(|| panic!("no {name} {labels:?}"));
                match &sample.value {
                    prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => *v,
                    prometheus_parse::Value::Histogram(buckets) => {
                        buckets.last().map_or(0.0, |b| b.count)
                    }
                    other => panic!("{name}: {other:?}"),
                }
            };
            assert!(
                value(
                    "symcluster_worker_cache_lookups_total",
                    &[("layer", "source"), ("result", "miss")]
                ) > 0.0
            );
            assert!(value("symcluster_worker_downloaded_bytes_total", &[]) > 0.0);
            assert_eq!(value("symcluster_worker_conversions_in_flight", &[]), 0.0);
            for step in ["fetch", "convert", "symbolicate"] {
                assert!(
                    value(
                        "symcluster_worker_step_seconds",
                        &[("step", step), ("kind", "native")]
                    ) >= 1.0,
                    "{step}"
                );
            }
        }
    }
}

/// Sizes and durations take human units (`10GiB`, `30s`; a bare number keeps the old flag's
/// unit); a bad unit is a usage error (exit 2) naming the flag, the value and the units.
#[test]
fn flags_take_human_units_and_refuse_bad_ones() {
    use symcluster_loadtest::cluster::bin;
    // Every value is parsed before `--help` is acted on: exit 0 means all were taken.
    for (binary, args) in [
        (
            "symcluster-worker",
            &[
                "--disk-cache",
                "10GiB",
                "--memory-cache",
                "512MiB",
                "--negative-cache",
                "30s",
                "--s3-timeout",
                "5000",
                "--drain-timeout",
                "1m",
            ][..],
        ),
        (
            "symcluster-master",
            &[
                "--lease",
                "30s",
                "--heartbeat",
                "5000",
                "--result-retention",
                "7d",
            ][..],
        ),
        (
            "symcluster-kafka-bridge",
            &["--max-message-size", "900KB", "--commit-interval", "500ms"][..],
        ),
    ] {
        let out = std::process::Command::new(bin(binary))
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{binary}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The former spellings and environment variables are still read (environment values are
    // checked only when the binary would run, not with --help: a bad one stops it at once).
    let old = std::process::Command::new(bin("symcluster-master"))
        .args(["--lease-ms", "30000", "--heartbeat-ms", "5000", "--help"])
        .output()
        .unwrap();
    assert_eq!(
        old.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&old.stderr)
    );
    let env = std::process::Command::new(bin("symcluster-worker"))
        .env("SYMCLUSTER_DISK_CACHE_BYTES", "10XB")
        .output()
        .unwrap();
    assert_eq!(env.status.code(), Some(2), "the old variable is read");
    assert!(
        String::from_utf8_lossy(&env.stderr)
            .contains("invalid value '10XB' for '--disk-cache <SIZE>'")
    );
    for (binary, flag, value, shown) in [
        (
            "symcluster-worker",
            "--disk-cache",
            "10XB",
            "--disk-cache <SIZE>",
        ),
        (
            "symcluster-master",
            "--lease",
            "30 parsecs",
            "--lease <DURATION>",
        ),
        ("symcluster-master", "--lease", "30", "--lease <DURATION>"),
    ] {
        let out = std::process::Command::new(bin(binary))
            .args([flag, value, "--help"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if value == "30" {
            // A bare number is the old flag's unit (milliseconds): taken.
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            continue;
        }
        assert_eq!(
            out.status.code(),
            Some(2),
            "{binary} {flag} {value}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{shown}'")),
            "{stderr}"
        );
        assert!(stderr.contains("write a number and a unit"), "{stderr}");
    }
}

/// A collector address that is not a URL stops a service at start, with the flag and the
/// reason, before it serves anything.
#[test]
fn a_bad_otlp_endpoint_stops_the_service_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(symcluster_loadtest::cluster::bin("symcluster-master"))
        .args(["--token", "t", "--otlp-endpoint", "not a url", "--data-dir"])
        .arg(dir.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--otlp-endpoint not a url"), "{stderr}");
    assert!(stderr.contains("invalid endpoint"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

/// `symctl --help` documents the exit statuses; `symctl completions SHELL` and `symctl man`
/// print what shells and `man` read; a bad `--output` is a usage error.
#[test]
fn symctl_documents_itself() {
    use symcluster_loadtest::cluster::bin;
    let run = |args: &[&str]| {
        std::process::Command::new(bin("symctl"))
            .args(args)
            .output()
            .unwrap()
    };
    let help = String::from_utf8(run(&["--help"]).stdout).unwrap();
    for line in [
        "Exit status:",
        "  0  done",
        "  1  failed",
        "  2  usage error",
    ] {
        assert!(help.contains(line), "{help}");
    }
    let bash = run(&["completions", "bash"]);
    assert!(bash.status.success());
    let bash = String::from_utf8(bash.stdout).unwrap();
    assert!(
        bash.contains("_symctl()") && bash.contains("complete -F _symctl"),
        "{bash}"
    );
    for sub in ["submit", "groups", "missing", "status"] {
        assert!(bash.contains(sub), "{sub}");
    }
    let man = run(&["man"]);
    assert!(man.status.success());
    let man = String::from_utf8(man.stdout).unwrap();
    assert!(man.contains(".TH symctl 1"), "{man}");
    assert!(man.contains("Exit status:"), "{man}");
    let bad = run(&["groups", "--output", "yaml"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("invalid value 'yaml' for '--output <OUTPUT>'")
    );
}

/// The list calls page as AIP-158 says: every job once, newest first, a token bound to its
/// request's fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_jobs_pages_through_every_job_once_newest_first() {
    // No worker: the jobs stay queued.
    let cluster = Cluster::start(0, MasterOptions::default()).await;
    let mut client = cluster.client().await;
    let report =
        std::fs::read(symcluster_loadtest::cluster::repo().join("examples/ios-demo/DemoApp.crash"))
            .unwrap();
    let submitted: Vec<String> = (0..25).map(|i| format!("paged-{i:02}")).collect();
    for id in &submitted {
        client.submit_native(id, report.clone()).await.unwrap();
    }
    let mut ingest = client.ingest();
    let mut request = api::ListJobsRequest {
        page_size: 10,
        ..Default::default()
    };
    let (mut listed, mut sizes) = (Vec::new(), Vec::new());
    loop {
        let page = ingest
            .list_jobs(request.clone())
            .await
            .unwrap()
            .into_inner();
        sizes.push(page.jobs.len());
        listed.extend(page.jobs.into_iter().map(|j| j.job_id));
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    assert_eq!(sizes, [10, 10, 5]);
    let newest_first: Vec<String> = submitted.iter().rev().cloned().collect();
    assert_eq!(listed, newest_first);

    // A token sent with other fields, or one the master never made: INVALID_ARGUMENT.
    let first = ingest
        .list_jobs(api::ListJobsRequest {
            page_size: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let other_state = ingest
        .list_jobs(api::ListJobsRequest {
            page_size: 10,
            state: api::JobState::Completed as i32,
            page_token: first.next_page_token.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(other_state.code(), tonic::Code::InvalidArgument);
    assert!(
        other_state.message().contains("other fields"),
        "{other_state:?}"
    );
    let forged = ingest
        .list_groups(api::ListGroupsRequest {
            page_token: first.next_page_token,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        (forged.code(), forged.message()),
        (
            tonic::Code::InvalidArgument,
            "page_token is not a token this list gave"
        )
    );
}

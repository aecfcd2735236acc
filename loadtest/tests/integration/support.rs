//! Shared helpers: fixtures, uploads, waiting for jobs.

use std::path::PathBuf;
use std::time::Duration;

use symcluster_client::{Client, api};
use symcluster_loadtest::cluster::{Cluster, repo};

/// A path in the shared third-party fixtures.
pub fn fixture(rel: &str) -> PathBuf {
    std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/fixtures"))
        .join(rel)
}

/// Waits (bounded) until a job is completed or failed.
pub async fn wait(client: &mut Client, job_id: &str) -> api::Job {
    tokio::time::timeout(Duration::from_secs(90), client.wait(job_id))
        .await
        .unwrap_or_else(|_| panic!("job {job_id} did not finish within 90 s"))
        .expect("watch job")
}

/// The result JSON of a completed job.
pub fn result(job: &api::Job) -> serde_json::Value {
    assert_eq!(
        job.state,
        api::JobState::Completed as i32,
        "job {} not completed: {}",
        job.job_id,
        job.error
    );
    serde_json::from_slice(&job.result_json).expect("result JSON")
}

/// Uploads debug files with `symctl upload dsym`.
pub fn upload_dsyms(cluster: &Cluster, paths: &[PathBuf]) {
    let mut args = vec!["upload".to_owned(), "dsym".to_owned()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cluster.symctl(&args);
    assert!(
        out.status.success(),
        "symctl upload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The crashed thread's frames whose image is one of `images`:
/// `(function, filename, lineno)`.
pub fn app_frames(result: &serde_json::Value, images: &[&str]) -> Vec<(String, String, u64)> {
    crashed_frames_where(result, |f| images.iter().any(|i| f["image"] == *i))
}

/// Every frame of the crashed thread: `(function, filename, lineno)`.
pub fn crashed_frames(result: &serde_json::Value) -> Vec<(String, String, u64)> {
    crashed_frames_where(result, |_| true)
}

/// The crashed thread's frames, as JSON.
pub fn crashed_thread_frames(result: &serde_json::Value) -> &Vec<serde_json::Value> {
    let thread = result["threads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["crashed"] == true)
        .expect("crashed thread");
    thread["frames"].as_array().unwrap()
}

/// The crashed thread's frames that `keep`: `(function, filename, lineno)`.
fn crashed_frames_where(
    result: &serde_json::Value,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> Vec<(String, String, u64)> {
    crashed_thread_frames(result)
        .iter()
        .filter(|f| keep(f))
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["filename"].as_str().unwrap_or("").to_owned(),
                f["lineno"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// How many of a result's images were found (their debug file read).
pub fn found_images(result: &serde_json::Value) -> usize {
    result["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "found")
        .count()
}

/// Writes a ~40 MB source map with one generated line per module (a production bundle's shape).
pub fn big_map(dir: &std::path::Path) -> std::path::PathBuf {
    let mut builder = sourcemap::SourceMapBuilder::new(Some("big.bundle"));
    for module in 0..2500u32 {
        let source = format!("/app/src/module{module}.js");
        let id = builder.add_source(&source);
        let contents: String = (0..200)
            .map(|l| format!("  const value{l} = compute{module}(input{l}, options); // {l}\n"))
            .collect();
        builder.set_source_contents(id, Some(&contents));
        for t in 0..600u32 {
            builder.add(module, t * 7, t / 3, 2, Some(&source), None, false);
        }
    }
    let path = dir.join("big.bundle.map");
    let file = std::fs::File::create(&path).unwrap();
    builder
        .into_sourcemap()
        .to_writer(std::io::BufWriter::new(file))
        .unwrap();
    path
}

/// Three masters and one worker, with DemoApp's dSYM uploaded: the cluster, DemoApp's crash
/// report (its crashing frame is `crash_write_null` at crash.c:23) and the first leader.
pub async fn three_masters_with_demo() -> (Cluster, std::sync::Arc<Vec<u8>>, u64) {
    let cluster = Cluster::start(
        1,
        symcluster_loadtest::cluster::MasterOptions {
            masters: 3,
            ..Default::default()
        },
    )
    .await;
    upload_dsyms(&cluster, &[repo().join("examples/ios-demo/DemoApp.dSYM")]);
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let leader = cluster.wait_for_leader().await;
    (cluster, std::sync::Arc::new(report), leader)
}

/// The crash groups, most frequent first (at most `limit`), read from the leader.
pub async fn groups(client: &Client, limit: u32) -> Vec<api::CrashGroup> {
    client
        .ingest()
        .list_groups(api::ListGroupsRequest {
            page_size: limit,
            project: String::new(),
            call_trees: false,
            kind: String::new(),
            ..Default::default()
        })
        .await
        .expect("list groups")
        .into_inner()
        .groups
}

/// Every `symcluster_*` metric name the Grafana dashboard (`deploy/grafana/symcluster.json`)
/// queries, with a histogram's `_bucket`/`_sum`/`_count` suffix kept as written.
pub fn dashboard_metrics() -> std::collections::BTreeSet<String> {
    let text = std::fs::read_to_string(repo().join("deploy/grafana/symcluster.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut names = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(start) = rest.find("symcluster_") {
                let tail = &rest[start..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(tail.len());
                names.insert(tail[..end].to_owned());
                rest = &tail[end..];
            }
        }
    }
    names
}

/// The names of `names` that no sample line of the Prometheus text `exposition` has.
pub fn absent_metrics<'a>(
    names: impl IntoIterator<Item = &'a String>,
    exposition: &str,
) -> Vec<String> {
    names
        .into_iter()
        .filter(|name| {
            !exposition.lines().any(|line| {
                line.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
        })
        .cloned()
        .collect()
}

/// `GET path` over HTTP/1.0 from `addr`: the status code and the body.
pub async fn http_status(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    stream.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {out:?}"));
    (status, body.to_owned())
}

/// `GET path` over HTTP/1.0 from `addr`: the body (whatever the status).
pub async fn http_get(addr: &str, path: &str) -> String {
    http_status(addr, path).await.1
}

/// Uploads the CrashProbe release dSYMs (to the `default` project), submits its `Call abort()`
/// report as `job_id`, waits for it and returns the debug ids (lowercase UUIDs) of the modules
/// its result found: the files a worker must have fetched and converted. Fails the test when
/// the job does not complete.
pub async fn one_crashprobe_job(
    cluster: &Cluster,
    job_id: &str,
) -> std::collections::BTreeSet<String> {
    upload_dsyms(cluster, &[fixture("crashprobe/release/dSYMs")]);
    crashprobe_job(cluster, job_id).await
}

/// [`one_crashprobe_job`] without the upload (the dSYMs are in the bucket already).
pub async fn crashprobe_job(cluster: &Cluster, job_id: &str) -> std::collections::BTreeSet<String> {
    let report = std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap();
    let mut client = cluster.client().await;
    client.submit_native(job_id, report).await.unwrap();
    let job = wait(&mut client, job_id).await;
    assert_eq!(job.state, api::JobState::Completed as i32);
    let found: std::collections::BTreeSet<String> = result(&job)["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "found")
        .map(|m| m["debug_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(!found.is_empty());
    found
}

/// The value of the sample of `name` whose labels include `labels` in a Prometheus text
/// exposition (a histogram's count, a counter's or gauge's value); `None` when there is none.
pub fn metric_value(exposition: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let scrape = prometheus_parse::Scrape::parse(exposition.lines().map(|l| Ok(l.to_owned())))
        .expect("Prometheus text format");
    let sample = scrape
        .samples
        .into_iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))?;
    Some(match sample.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        prometheus_parse::Value::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
        other => panic!("{name}: {other:?}"),
    })
}

/// The stdout of a command that must have succeeded (its output in the failure message).
pub fn succeeded(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

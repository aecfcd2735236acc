//! A worker that must download and convert a job's debug files answers that job from partial
//! SymCaches of the job's own addresses, while the whole conversions go on in the background;
//! the next jobs use the converted SymCaches. Both answers are the same, frame for frame.

use std::time::{Duration, Instant};

use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions};

use crate::support::{fixture, http_get, metric_value, result, upload_dsyms, wait};

/// The worker's `(partial SymCaches, conversions)` so far.
async fn counts(cluster: &Cluster) -> (f64, f64) {
    let exposition = http_get(&cluster.worker_metrics[0], "/metrics").await;
    let partial = metric_value(
        &exposition,
        "symcluster_worker_partial_symcaches_total",
        &[],
    )
    .expect("the partial SymCache counter");
    let converted = metric_value(
        &exposition,
        "symcluster_worker_step_seconds",
        &[("step", "convert"), ("kind", "native")],
    )
    .unwrap_or(0.0);
    (partial, converted)
}

/// CrashProbe's `Call abort()` as job `job_id`: its result's threads and modules.
async fn run_job(cluster: &Cluster, job_id: &str) -> (serde_json::Value, serde_json::Value) {
    let report = std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap();
    let mut client = cluster.client().await;
    client.submit_native(job_id, report).await.unwrap();
    let job = wait(&mut client, job_id).await;
    let result = result(&job);
    (result["threads"].clone(), result["modules"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_worker_answers_from_partial_symcaches_then_from_the_converted_ones() {
    let mut cluster = Cluster::start(0, MasterOptions::default()).await;
    cluster.add_worker_with(WorkerOptions::default()).await;
    upload_dsyms(&cluster, &[fixture("crashprobe/release/dSYMs")]);
    let (cold_threads, modules) = run_job(&cluster, "cold").await;
    let found = modules
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] == "found")
        .count() as f64;
    assert!(found >= 2.0, "{modules}");
    // One partial SymCache per debug file the job found: each was downloaded for it.
    let (partial, _) = counts(&cluster).await;
    assert_eq!(partial, found);
    // The conversions end in the background.
    let deadline = Instant::now() + Duration::from_secs(60);
    while counts(&cluster).await.1 < found {
        assert!(Instant::now() < deadline, "the conversions did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (warm_threads, warm_modules) = run_job(&cluster, "warm").await;
    assert_eq!(warm_threads, cold_threads);
    assert_eq!(warm_modules, modules);
    // Answered from the converted SymCaches: no partial one more, no conversion more.
    assert_eq!(counts(&cluster).await, (found, found));
    let symbolicated = cold_threads
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["frames"].as_array().unwrap())
        .filter(|f| f["status"] == "symbolicated")
        .count();
    assert!(symbolicated >= 5, "{cold_threads}");
}

//! Operators' view: a job followed by its id through the JSON logs of the master and the
//! worker (`--log-format json`).

use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions};

use crate::support::one_crashprobe_job;

/// Every line of `log` as JSON: a line that is not JSON fails the test.
fn json_lines(log: &str, who: &str) -> Vec<serde_json::Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{who}: not JSON ({e}): {l}")))
        .collect()
}

/// The span named `name` among an event's open spans.
fn span<'a>(event: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    event["spans"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_followed_by_its_id_through_json_logs() {
    let json = vec!["--log-format".to_owned(), "json".to_owned()];
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            args: json.clone(),
            env: vec![("RUST_LOG".into(), "info,symcluster_master=debug".into())],
            ..Default::default()
        },
    )
    .await;
    cluster
        .add_worker_with(WorkerOptions {
            args: json,
            env: vec![("RUST_LOG".into(), "info,symcluster_worker=debug".into())],
            ..Default::default()
        })
        .await;
    let found = one_crashprobe_job(&cluster, "traced").await;
    let key = "default/traced";

    // The master: submitted, leased to the worker at attempt 1, completed last. (The lease is
    // made when the submit is applied, so it may be logged before the submit's answer.)
    // The watcher hears of the completion when it is applied, which may be just before the
    // completing call logs it: wait for that line.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let master = loop {
        let lines = json_lines(&cluster.master_logs_raw(), "master");
        if lines
            .iter()
            .any(|e| e["job_id"] == key && e["message"] == "job completed")
            || std::time::Instant::now() > deadline
        {
            break lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let about_job: Vec<&serde_json::Value> = master.iter().filter(|e| e["job_id"] == key).collect();
    let event = |message: &str| {
        let found: Vec<&&serde_json::Value> = about_job
            .iter()
            .filter(|e| e["message"] == message)
            .collect();
        assert_eq!(found.len(), 1, "{message}: {about_job:#?}");
        *found[0]
    };
    assert_eq!(about_job.len(), 3, "{about_job:#?}");
    assert_eq!(event("job submitted")["created"], true);
    assert_eq!(event("job leased")["attempt"], 1);
    assert_eq!(event("job leased")["worker_id"], "worker-0");
    assert_eq!(about_job[2]["message"], "job completed");
    assert_eq!(about_job[2]["accepted"], true);
    assert!(about_job.iter().all(|e| {
        e["level"] == "DEBUG"
            && e["target"]
                .as_str()
                .unwrap()
                .starts_with("symcluster_master")
            && e["timestamp"].is_string()
    }));

    // The worker: every event of the job carries the job's span, with the same id; the debug
    // file of the app image was fetched and converted inside its own span.
    // The conversions end after the job (answered from partial SymCaches): wait for them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let worker = loop {
        let lines = json_lines(&cluster.worker_log(0), "worker");
        let converted = lines
            .iter()
            .filter(|e| e["message"] == "SymCache converted")
            .count();
        if converted >= found.len() {
            break lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{converted} of {} debug files converted",
            found.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let in_job: Vec<&serde_json::Value> = worker
        .iter()
        .filter(|e| span(e, "job").is_some_and(|s| s["job_id"] == key))
        .collect();
    let job_span = span(in_job[0], "job").unwrap();
    assert_eq!(job_span["attempt"], 1);
    assert_eq!(job_span["worker_id"], "worker-0");
    let debug_ids = |message: &str| -> std::collections::BTreeSet<String> {
        in_job
            .iter()
            .filter(|e| e["message"] == message)
            .map(|e| {
                let id = span(e, "debug_file").expect("in the debug file's span")["debug_id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(e["bytes"].as_u64() > Some(0), "{e:#}");
                id
            })
            .collect()
    };
    assert_eq!(debug_ids("debug file fetched"), found);
    assert_eq!(debug_ids("SymCache converted"), found);
    let finished: Vec<_> = in_job
        .iter()
        .filter(|e| e["message"] == "job finished")
        .collect();
    assert_eq!(finished.len(), 1, "{in_job:#?}");
    assert_eq!(finished[0]["ok"], true);
}

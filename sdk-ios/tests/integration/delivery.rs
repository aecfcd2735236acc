//! Pending reports go to a real local cluster (Garage, master, worker) and come back symbolicated.

use std::os::unix::process::ExitStatusExt;

use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN};

use crate::support::{crasher, marker_line, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_report_is_sent_on_next_launch_and_symbolicated() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "null");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));

    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let upload = cluster.symctl(&["upload", "dsym", &crasher().display().to_string()]);
    assert!(
        upload.status.success(),
        "{}",
        String::from_utf8_lossy(&upload.stderr)
    );
    let report_name = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("crash-") && n.ends_with(".json"))
        .expect("a crash report");

    // The next launch sends it (the C API, as an app would call it).
    let sent = std::process::Command::new(crasher())
        .arg(dir.path())
        .args(["send", &cluster.endpoint, TOKEN])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sent.stdout).trim(), "1");
    assert!(
        !dir.path().join(&report_name).exists(),
        "the report is deleted once acknowledged"
    );

    let mut client = cluster.client().await;
    let job = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        client.wait(&format!("crasher-{report_name}")),
    )
    .await
    .unwrap()
    .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&job.result_json).unwrap();
    let frame = &result["threads"][0]["frames"][0];
    assert_eq!(frame["function"], "crash_null_deref");
    assert_eq!(frame["filename"], "crasher.c");
    assert_eq!(frame["lineno"], marker_line("null"));
}

#[test]
fn unsent_reports_stay_when_the_master_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), "null");
    let port = symcluster_loadtest::cluster::free_port();
    let sent = std::process::Command::new(crasher())
        .arg(dir.path())
        .args(["send", &format!("http://127.0.0.1:{port}"), TOKEN])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sent.stdout).trim(), "0");
    assert_eq!(
        symcluster_sdk::send::pending(dir.path()).len(),
        1,
        "nothing is lost offline"
    );
}

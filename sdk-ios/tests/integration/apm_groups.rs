//! APM reports through a real local cluster: a CPU hog, an out-of-memory exit, a jank and a
//! launch of the host test app, sent by the SDK, symbolicated, and grouped by kind
//! (`symctl groups --kind`).

use symcluster_client::api;

use crate::support::{cluster_with_crasher, killed_while_running, result_of, run, send};

async fn groups(client: &symcluster_client::Client, kind: &str) -> Vec<api::CrashGroup> {
    client
        .ingest()
        .list_groups(api::ListGroupsRequest {
            page_size: 100,
            project: String::new(),
            call_trees: false,
            kind: kind.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .groups
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_oom_jank_and_launch_reports_are_symbolicated_and_grouped_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    // A CPU hog, a jank, a run killed in the foreground (an OOM by the decision table, judged
    // at the next launch), and a launch.
    assert!(run(dir.path(), "cpu").status.success());
    assert!(run(dir.path(), "jank").status.success());
    killed_while_running(dir.path(), "1.2 (34)");
    assert!(run(dir.path(), "launch").status.success());

    let launch = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("launch-"))
        .expect("a launch report");

    let cluster = cluster_with_crasher().await;
    assert_eq!(send(dir.path(), &cluster.endpoint), "4");

    // Three groups (cpu, jank, oom); the launch is a metric, not a group.
    let client = cluster.client().await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while groups(&client, "").await.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not 3 groups within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let cpu = groups(&client, "cpu").await;
    assert_eq!(cpu.len(), 1);
    assert_eq!(cpu[0].kind, "cpu");
    assert!(
        cpu[0]
            .key_stack
            .iter()
            .any(|f| f.starts_with("spin_hog (crasher.c:")),
        "{:?}",
        cpu[0].key_stack
    );
    assert!(
        cpu[0].title.starts_with("CPU hog on thread hog in "),
        "{}",
        cpu[0].title
    );
    let jank = groups(&client, "jank").await;
    assert_eq!(jank.len(), 1);
    assert!(jank[0].key_stack[0].starts_with("busy_wait_ms"));
    assert_ne!(jank[0].fingerprint, cpu[0].fingerprint);
    assert_eq!(groups(&client, "hang").await.len(), 0);
    assert_eq!(groups(&client, "crash").await.len(), 0);

    // symctl: the OOM group, by app version and breadcrumb.
    let out = cluster.symctl(&["groups", "--kind", "oom", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed.len(), 1, "{printed:?}");
    assert_eq!(printed[0]["kind"], "oom");
    assert_eq!(
        printed[0]["title"],
        "Out of memory (foreground) in 1.2 (34) at Checkout"
    );
    assert_eq!(printed[0]["count"], 1);
    let bad = cluster.symctl(&["groups", "--kind", "launch"]);
    assert!(!bad.status.success(), "launch reports make no groups");

    // The launch job completed, with its duration carried into the result.
    let result = result_of(&cluster, &crate::support::job_of(dir.path(), &launch)).await;
    assert_eq!(result["kind"], "launch");
    assert!(result["details"]["launch"]["duration_ms"].as_u64().unwrap() >= 300);
}

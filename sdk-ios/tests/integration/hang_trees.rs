//! Hang reports as trees, through a real local cluster: two real hangs of the host test app,
//! sent by the SDK, symbolicated node by node, their trees summed in their crash group, and
//! printed by `symctl groups --tree`.

use crate::support::{cluster_with_crasher, report, run, send};
use symcluster_client::api;

fn samples(path: &std::path::Path) -> u64 {
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    json["samples"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hangs_sum_their_trees_in_their_group() {
    let cluster = cluster_with_crasher().await;

    // Two runs that hang, each sending its report at the next launch (the C API).
    let mut total = 0;
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let out = run(dir.path(), "hang");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        total += samples(&report(dir.path(), "hang"));
        assert_eq!(send(dir.path(), &cluster.endpoint), "1");
    }

    // Both complete into one group (the same key stack) whose tree has every sample.
    let client = cluster.client().await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let group = loop {
        let groups = client
            .ingest()
            .list_groups(api::ListGroupsRequest {
                page_size: 10,
                project: String::new(),
                call_trees: true,
                kind: String::new(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .groups;
        if let Some(g) = groups.into_iter().find(|g| g.count == 2) {
            break g;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no group of 2 hangs within 60 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(group.kind, "hang");
    let top: u64 = group
        .call_tree
        .iter()
        .filter(|n| n.parent == -1)
        .map(|n| n.hits)
        .sum();
    assert_eq!(top, total, "the group's tree holds both reports' samples");
    let busy: u64 = group
        .call_tree
        .iter()
        .filter(|n| n.name == "busy_wait_ms")
        .map(|n| n.hits)
        .sum();
    assert!(busy > 0 && busy <= total);

    // symctl: indented with hits, and folded stacks whose counts add up to every sample.
    let prefix = &group.fingerprint[..8];
    let text = cluster.symctl(&["groups", "--tree", prefix]);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with(&format!("{top}  "))),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.ends_with("block_main_thread")),
        "{text}"
    );
    let folded = cluster.symctl(&["groups", "--tree", prefix, "--format", "folded"]);
    let folded = String::from_utf8_lossy(&folded.stdout).into_owned();
    let counted: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(counted, total, "{folded}");
    assert!(
        folded
            .lines()
            .any(|l| l.contains(";block_main_thread;busy_wait_ms ")),
        "{folded}"
    );
}

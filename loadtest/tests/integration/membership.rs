//! Membership changes with real processes: a dead master replaced, the group grown from three
//! to five and shrunk back, all under load; a master whose disk was wiped refused under its old
//! id. The load is submits of unreadable reports (stored failed at once: one log entry each, no
//! worker needed), counted when acknowledged.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use symcluster_client::{Client, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions};
use tokio::task::JoinHandle;

use crate::replication::{admin, wait_for_equal_digests};

/// Submits from 4 tasks until stopped; each acknowledged submit is counted.
struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    tasks: Vec<JoinHandle<Result<(), String>>>,
}

impl Load {
    fn start(client: Client, prefix: &str) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let tasks = (0..4)
            .map(|task| {
                let (mut client, stop, acknowledged) =
                    (client.clone(), stop.clone(), acknowledged.clone());
                let prefix = prefix.to_owned();
                tokio::spawn(async move {
                    for i in (task..).step_by(4) {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        // The client follows failovers and resubmits (submits are idempotent).
                        client
                            .submit_native(&format!("{prefix}-{i}"), b"not a crash report".to_vec())
                            .await
                            .map_err(|e| format!("submit {prefix}-{i}: {e}"))?;
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        Load {
            stop,
            acknowledged,
            tasks,
        }
    }

    /// Waits until `more` further submits were acknowledged (bounded).
    async fn go_on(&self, more: u64, cluster: &Cluster) {
        let target = self.acknowledged.load(Ordering::Relaxed) + more;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.acknowledged.load(Ordering::Relaxed) < target {
            assert!(
                Instant::now() < deadline && !self.tasks.iter().any(JoinHandle::is_finished),
                "the load stalled at {} acknowledged submits:\n{}",
                self.acknowledged.load(Ordering::Relaxed),
                cluster.master_logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the load; how many submits were acknowledged (every task must have ended well).
    async fn stop(self, cluster: &Cluster) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            if let Err(e) = task.await.unwrap() {
                panic!("{e}\n{}", cluster.master_logs());
            }
        }
        self.acknowledged.load(Ordering::Relaxed)
    }
}

/// `symctl admin members ARGS...` (asserted to succeed); its standard output.
fn members(cluster: &Cluster, args: &[&str]) -> String {
    let mut all = vec!["admin", "members"];
    all.extend_from_slice(args);
    let out = tokio::task::block_in_place(|| cluster.symctl(&all));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "symctl {all:?} failed: {stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cluster.master_logs()
    );
    stdout
}

/// The members as the leader lists them: `(id, role)`, by id.
fn roles(cluster: &Cluster) -> Vec<(u64, String)> {
    let json: serde_json::Value =
        serde_json::from_str(&members(cluster, &["--output", "json"])).unwrap();
    json["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["id"].as_u64().unwrap(),
                m["role"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Checks that every running master holds the same index (digest of every table) and that it
/// holds exactly `jobs` jobs: every acknowledged submit, once.
async fn assert_same_index_with(cluster: &Cluster, jobs: u64) {
    let digests = wait_for_equal_digests(cluster).await;
    assert!(!digests.is_empty());
    for digest in &digests {
        assert_eq!(
            digest.jobs, jobs,
            "master {} holds {} jobs, {jobs} were acknowledged",
            digest.master_id, digest.jobs
        );
    }
}

fn voters(ids: &[u64]) -> Vec<(u64, String)> {
    ids.iter().map(|id| (*id, "voter".to_owned())).collect()
}

/// A follower is SIGKILLed and its data dir deleted (a lost node); `members remove` takes it out,
/// a new master started with `--join` is added with `members add --wait`: it receives the index
/// by snapshot, catches up, and is promoted to voter. Then the leader is killed: the group of
/// the two others (one of them the new member) elects a leader and goes on. Under load
/// throughout: every acknowledged submit is in every master's index once, the indexes are
/// equal, and a real crash report is symbolicated by the changed group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_is_replaced_under_load_and_a_leader_kill_afterwards_loses_nothing() {
    let mut cluster = Cluster::start(
        1,
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    let load = Load::start(cluster.client().await, "replace");
    load.go_on(300, &cluster).await;

    let leader = cluster.wait_for_leader().await;
    let lost = if leader == 3 { 2 } else { 3 };
    cluster.forget_master(lost);
    std::fs::remove_dir_all(cluster.master_data_dir(lost)).unwrap();
    members(&cluster, &["remove", &lost.to_string()]);
    load.go_on(200, &cluster).await;

    let new = cluster.join_master();
    assert_eq!(new, 4);
    let printed = members(
        &cluster,
        &["add", "4", &cluster.member_address(4), "--wait", "60s"],
    );
    assert!(printed.contains("voter"), "{printed}");
    let survivor = 5 - lost;
    let mut expected = voters(&[1, survivor, 4]);
    expected.sort();
    let mut listed = roles(&cluster);
    listed.sort();
    assert_eq!(listed, expected);
    load.go_on(300, &cluster).await;
    // It started from a snapshot (a member with an empty log always does: the snapshot
    // carries the membership).
    let metrics = crate::support::http_get(
        &format!("127.0.0.1:{}", cluster.masters[3].metrics_port),
        "/metrics",
    )
    .await;
    assert!(
        crate::support::metric_value(
            &metrics,
            "symcluster_raft_snapshots_total",
            &[("direction", "received"), ("outcome", "ok")]
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );

    // The new member is a voter like the others: the group survives losing its leader.
    cluster.kill_master(leader);
    let next = cluster.wait_for_leader().await;
    assert_ne!(next, leader);
    load.go_on(300, &cluster).await;
    let jobs = load.stop(&cluster).await;
    assert_same_index_with(&cluster, jobs).await;

    // The changed group still symbolicates.
    let frames = crate::support::one_crashprobe_job(&cluster, "after-replace").await;
    assert!(!frames.is_empty());
    // The new member served the snapshot's membership: it knows every address.
    let mut admin4 = admin(&cluster.member_address(4)).await.unwrap();
    let seen_by_4 = admin4
        .list_members(api::ListMembersRequest {})
        .await
        .unwrap()
        .into_inner();
    let mut ids: Vec<u64> = seen_by_4.members.iter().map(|m| m.id).collect();
    ids.sort_unstable();
    let mut want = vec![1, survivor, 4];
    want.sort_unstable();
    assert_eq!(ids, want);
}

/// Two masters join a group of three (5 voters), then two of the original three are removed in
/// one change (a joint configuration), the leader among them when it is one: under load,
/// nothing acknowledged is lost or counted twice, and the three left hold equal indexes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_grows_from_three_to_five_and_shrinks_back_under_load() {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    let load = Load::start(cluster.client().await, "grow");
    load.go_on(300, &cluster).await;
    for _ in 0..2 {
        let id = cluster.join_master();
        let address = cluster.member_address(id);
        members(
            &cluster,
            &["add", &id.to_string(), &address, "--wait", "60s"],
        );
        load.go_on(200, &cluster).await;
    }
    let mut listed = roles(&cluster);
    listed.sort();
    assert_eq!(listed, voters(&[1, 2, 3, 4, 5]));

    // Remove 1 and 2 (the leader too, when it is one of them: it hands leadership over).
    let leader = cluster.wait_for_leader().await;
    let removed = if leader <= 2 {
        [leader, 3 - leader]
    } else {
        [1, 2]
    };
    members(
        &cluster,
        &["remove", &removed[0].to_string(), &removed[1].to_string()],
    );
    // The joint configuration is left at once after it is applied.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut listed = roles(&cluster);
        listed.sort();
        if listed == voters(&[3, 4, 5]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "members after removal: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Asked again (as after a failover): nothing to do, and it says so without an error.
    members(
        &cluster,
        &["remove", &removed[0].to_string(), &removed[1].to_string()],
    );
    let mut listed = roles(&cluster);
    listed.sort();
    assert_eq!(listed, voters(&[3, 4, 5]));
    for id in removed {
        cluster.forget_master(id);
    }
    load.go_on(300, &cluster).await;
    let jobs = load.stop(&cluster).await;
    assert_same_index_with(&cluster, jobs).await;
}

/// A master whose data dir was emptied under an id the group saw take part is refused at start
/// with a message that says why and what to do; so is a master with a new id started without
/// `--join` next to a group that holds entries. The group goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_data_dir_was_wiped_is_refused_under_its_old_id() {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    let load = Load::start(cluster.client().await, "wiped");
    load.go_on(100, &cluster).await;
    // The leader records every member it saw answer an append.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let json: serde_json::Value =
            serde_json::from_str(&members(&cluster, &["--output", "json"])).unwrap();
        let seen = json["members"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["seen"].as_bool() == Some(true))
            .count();
        if seen == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "members not seen: {json}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let leader = cluster.wait_for_leader().await;
    let wiped = if leader == 1 { 2 } else { 1 };
    cluster.kill_master(wiped);
    std::fs::remove_dir_all(cluster.master_data_dir(wiped)).unwrap();
    cluster.start_master(wiped);
    let status = cluster
        .wait_master_exit(wiped, Duration::from_secs(20))
        .await;
    let log = std::fs::read_to_string(cluster.master_log_path(wiped)).unwrap_or_default();
    assert!(
        status.is_some_and(|s| !s.success()),
        "a wiped master started: {status:?}\n{log}"
    );
    assert!(
        log.contains(&format!(
            "member {wiped} has already taken part in the group"
        )) && log.contains(&format!("symctl admin members remove {wiped}")),
        "{log}"
    );
    // Nothing was written into the data dir it was refused on.
    assert!(!cluster.master_data_dir(wiped).join("master.redb").exists());

    // A new id without --join next to a group with entries: refused too.
    let new = cluster.join_master_without_join_flag();
    let status = cluster.wait_master_exit(new, Duration::from_secs(20)).await;
    let log = std::fs::read_to_string(cluster.master_log_path(new)).unwrap_or_default();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{log}");
    assert!(
        log.contains(&format!("that {new} is not in")) && log.contains("start it with --join"),
        "{log}"
    );
    load.go_on(100, &cluster).await;
    let jobs = load.stop(&cluster).await;
    cluster.forget_master(new);
    cluster.masters[wiped as usize - 1].proc = None;
    let mut admin_leader = admin(&cluster.member_address(cluster.wait_for_leader().await))
        .await
        .unwrap();
    let digest = admin_leader
        .index_digest(api::IndexDigestRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(digest.jobs, jobs);
}

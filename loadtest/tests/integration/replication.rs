//! The replicated index, with real processes: a master killed while a job runs, the leader of
//! three killed under load, a follower killed and brought back far behind.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN};
use tokio::sync::Mutex;

use crate::support::{app_frames, big_map, groups, result, three_masters_with_demo, wait};

/// Before the index was replicated, a job running when the master was SIGKILLed stayed RUNNING
/// forever after the restart. Now the restarted master gives it a fresh lease, and the worker's
/// completion (or a new attempt, after expiry) finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_running_when_the_master_is_killed_completes_after_the_restart() {
    let mut cluster = Cluster::start(1, MasterOptions::default()).await;
    let map = big_map(cluster.dir.path());
    let out = cluster.symctl(&[
        "upload",
        "sourcemap",
        "--map",
        &map.display().to_string(),
        "--debug-id",
        "00000000-0000-0000-0000-00000000b16b",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut client = cluster.client().await;
    client
        .submit_js(
            "running-at-kill",
            api::JsJob {
                stack: b"f@big.bundle:1:100\n".to_vec(),
                debug_id: "00000000-0000-0000-0000-00000000b16b".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.job("running-at-kill").await.unwrap().state != api::JobState::Running as i32 {
        assert!(Instant::now() < deadline, "the job was never leased");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cluster.restart_master().await;

    let mut client = cluster.client().await;
    let job = wait(&mut client, "running-at-kill").await;
    let result = result(&job);
    assert_eq!(result["frames"][0]["status"], "symbolicated");
    assert!((1..=2).contains(&job.attempts), "attempts {}", job.attempts);
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.queue_depth,
            status.jobs_running
        ),
        (1, 0, 0)
    );
}

/// Three masters, a worker, Garage. The leader is SIGKILLed after 30 acknowledged submits of
/// 90: every acknowledged job completes exactly once, with its exact frames, and crash-group
/// counts add up to the jobs (no job counted twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_under_load_loses_and_duplicates_nothing() {
    let (mut cluster, report, leader) = three_masters_with_demo().await;

    const JOBS: usize = 90;
    const KILL_AFTER: usize = 30;
    let acknowledged: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let client = cluster.client().await;
    let mut tasks = Vec::new();
    for task in 0..6 {
        let (client, report, acknowledged) = (client.clone(), report.clone(), acknowledged.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            for i in (task..JOBS).step_by(6) {
                let id = format!("load-{i}");
                // `created` may be false: a submit the killed leader committed but did not
                // answer is retried on the new leader, which finds the job (submits are
                // idempotent). Duplicates are checked below, by the completed and group counts.
                client
                    .submit_native(&id, report.as_ref().clone())
                    .await
                    .unwrap_or_else(|e| panic!("submit {id}: {e}"));
                acknowledged.lock().await.push((id, Instant::now()));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    while acknowledged.lock().await.len() < KILL_AFTER {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed_at = Instant::now();
    cluster.kill_master(leader);
    for task in tasks {
        task.await.unwrap();
    }
    let acknowledged = acknowledged.lock().await.clone();
    assert_eq!(acknowledged.len(), JOBS);
    let failover = acknowledged
        .iter()
        .filter(|(_, at)| *at > killed_at)
        .map(|(_, at)| *at - killed_at)
        .min()
        .expect("jobs acknowledged after the kill");
    eprintln!("failover: first submit acknowledged {failover:?} after the leader was killed");
    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, leader);

    let mut client = cluster.client().await;
    let mut ids = HashSet::new();
    for (id, _) in &acknowledged {
        let job = wait(&mut client, id).await;
        let result = result(&job);
        assert_eq!(
            app_frames(&result, &["DemoApp"])[0],
            ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
        );
        assert!(ids.insert(id.clone()));
    }
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.jobs_failed,
            status.queue_depth,
            status.jobs_running
        ),
        (JOBS as u64, 0, 0, 0)
    );
    let groups = groups(&client, 100).await;
    assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), JOBS as u64);
    // The killed master comes back as a follower and catches up.
    cluster.start_master(leader);
    let caught_up = wait_until_applied(&cluster, leader, JOBS as u64, |s| s.jobs_completed).await;
    assert!(
        caught_up,
        "master {leader} did not catch up:\n{}",
        cluster.master_logs()
    );
}

/// A follower is killed, the others go on for more than a log compaction's worth of entries,
/// and the follower restarts: the leader no longer has the entries it misses, so it catches up
/// from a snapshot of the index, and then holds the same jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_far_behind_catches_up_from_a_snapshot() {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    cluster.kill_master(follower);

    // Reports that cannot be read are stored failed at once: one log entry each, no worker
    // needed. 2,200 of them outrun a compaction (2,048 entries).
    const JOBS: usize = 2200;
    let client = cluster.client().await;
    let mut tasks = Vec::new();
    for task in 0..16 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            for i in (task..JOBS).step_by(16) {
                let response = client
                    .submit_native(&format!("bad-{i}"), b"not a crash report".to_vec())
                    .await
                    .unwrap();
                assert!(response.created);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let status = cluster.status().await;
    assert_eq!(status.jobs_failed, JOBS as u64);

    cluster.start_master(follower);
    let caught_up = wait_until_applied(&cluster, follower, JOBS as u64, |s| s.jobs_failed).await;
    assert!(
        caught_up,
        "master {follower} did not catch up:\n{}",
        cluster.master_logs()
    );
    let log = cluster.masters[follower as usize - 1]
        .proc
        .as_ref()
        .unwrap()
        .log();
    assert!(
        log.contains("restoring a snapshot from the leader"),
        "the follower caught up without a snapshot:\n{log}"
    );
}

/// Polls master `id`'s own view (its Admin status answers from its own index) until
/// `count(status) == expected`; bounded.
async fn wait_until_applied(
    cluster: &Cluster,
    id: u64,
    expected: u64,
    count: impl Fn(&api::ClusterStatusResponse) -> u64,
) -> bool {
    let endpoint = cluster.masters[id as usize - 1].endpoint();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(channel) = tonic::transport::Endpoint::from_shared(endpoint.clone())
            .unwrap()
            .connect()
            .await
        {
            let mut admin = api::admin_client::AdminClient::with_interceptor(
                channel,
                |mut r: tonic::Request<()>| {
                    r.metadata_mut()
                        .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
                    Ok(r)
                },
            );
            if let Ok(status) = admin.cluster_status(api::ClusterStatusRequest {}).await
                && count(status.get_ref()) == expected
            {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// SIGTERM, as an operator stops a master: the leader of three hands leadership to a follower,
/// then exits within seconds although
/// calls that never end by themselves are open on it (the other masters' Raft streams, the
/// worker's lease stream, a client's submit stream), and the other two go on without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_stopped_with_sigterm_exits_while_streams_are_open() {
    let (mut cluster, report, leader) = three_masters_with_demo().await;
    let client = cluster.client().await;
    let stream = client.submit_stream();
    let spec = |id: &str| symcluster_client::native_spec(id, &report).unwrap();
    let first = stream.submit(spec("before-stop"), true).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(60), first.finished())
        .await
        .expect("finished within 60 s")
        .unwrap();
    assert_eq!(first.state, api::JobState::Completed as i32);

    let status = cluster
        .stop_master(leader, Duration::from_secs(15))
        .await
        .unwrap_or_else(|| {
            panic!(
                "master {leader} still running 15 s after SIGTERM:\n{}",
                cluster.master_logs()
            )
        });
    assert!(status.success(), "exit status {status}");
    // It handed leadership over before it stopped (raft-rs leader transfer), instead of
    // leaving the others to notice its silence after an election timeout.
    let log = std::fs::read_to_string(cluster.dir.path().join(format!("master-{leader}.log")))
        .unwrap_or_default();
    assert!(
        log.contains("stepping down: handing leadership over") && log.contains("stepped down"),
        "{log}"
    );

    assert_ne!(cluster.wait_for_leader().await, leader);
    // The same stream goes on with the new leader.
    let after = stream.submit(spec("after-stop"), true).await.unwrap();
    let after = tokio::time::timeout(Duration::from_secs(60), after.finished())
        .await
        .expect("finished within 60 s")
        .unwrap();
    assert_eq!(
        app_frames(&result(&after), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
}

//! The replicated index, with real processes: a master killed while a job runs, the leader of
//! three killed under load, a follower killed and brought back far behind.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN};
use symcluster_loadtest::procstat;
use tokio::sync::Mutex;

use crate::support::{
    app_frames, big_map, fixture, groups, metric_value, result, three_masters_with_demo, wait,
};

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
        "--sourcemap",
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
/// counts add up to the jobs (no job counted twice). The killed master comes back and holds the
/// same index as the others.
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
    // The three indexes are equal, table by table: the old leader's (from its log), and the
    // others' (applied through a change of leader).
    let digests = wait_for_equal_digests(&cluster).await;
    assert_eq!((digests.len(), digests[0].jobs), (3, JOBS as u64));
}

/// A follower is killed, the others go on for more than the log keeps (`--raft-log-retain 1MiB`),
/// and the follower restarts: the leader no longer has the entries it misses, so it streams a
/// snapshot of its index in chunks (64 KiB here). The index (2,200 queued reports of about
/// 100 KiB each) is several times what the leader may hold for a transfer: the
/// leader's memory does not grow with it (before streaming, the whole index was one message,
/// copied several times on the leader). The follower ends with the same index as the others,
/// table by table, and the leader counts the bytes it streamed. A first transfer is cut half-way
/// (the follower SIGKILLed while the chunks arrive): the follower restarts on its old index and
/// the next transfer succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_far_behind_catches_up_from_a_streamed_snapshot_in_bounded_memory() {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            // A log kept to 1 MiB: the follower's entries are gone when it comes back.
            args: vec![
                "--raft-snapshot-chunk".into(),
                "64KiB".into(),
                "--raft-log-retain".into(),
                "1MiB".into(),
            ],
            ..MasterOptions::default()
        },
    )
    .await;
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|&id| id != leader).unwrap();
    cluster.kill_master(follower);

    // With no worker, jobs stay queued and keep their reports: one log entry each. Each is a real CrashProbe event with 64 KiB of
    // random letters in its `extra` (zstd cannot shrink them much; readers ignore the field).
    const JOBS: usize = 2200;
    const PADDING: usize = 64 << 10;
    let event: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap(),
    )
    .unwrap();
    let event = Arc::new(event);
    let client = cluster.client().await;
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, event) = (client.clone(), event.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ task as u64;
            for i in (task..JOBS).step_by(8) {
                let mut padding = String::with_capacity(PADDING);
                while padding.len() < PADDING {
                    // xorshift64: letters no compressor predicts.
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    padding.push(char::from(b'a' + (state % 26) as u8));
                }
                let mut event = (*event).clone();
                event["extra"] = serde_json::json!({ "padding": padding });
                let response = client
                    .submit_native(&format!("big-{i}"), serde_json::to_vec(&event).unwrap())
                    .await
                    .map_err(|e| format!("submit big-{i}: {e}"))?;
                assert!(response.created);
            }
            Ok::<(), String>(())
        }));
    }
    for task in tasks {
        if let Err(e) = task.await.unwrap() {
            panic!("{e}\n{}", cluster.master_logs());
        }
    }
    let status = cluster.status().await;
    assert_eq!(status.queue_depth, JOBS as u64);

    // The leader's memory while it streams the snapshot, sampled every 20 ms.
    let leader_pid = cluster.masters[leader as usize - 1].pid().unwrap();
    let rss_before = procstat::rss_mib(leader_pid);
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            let mut peak = 0f64;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                peak = peak.max(procstat::rss_mib(leader_pid));
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        })
    };
    // The first transfer, cut once a megabyte of it arrived.
    cluster.start_master(follower);
    let incoming = cluster.master_data_dir(follower).join("snapshots");
    let deadline = Instant::now() + Duration::from_secs(60);
    let arriving = || {
        std::fs::read_dir(&incoming)
            .into_iter()
            .flatten()
            .flatten()
            .any(|f| {
                f.file_name().to_string_lossy().ends_with(".part")
                    && f.metadata().is_ok_and(|m| m.len() > 1 << 20)
            })
    };
    while !arriving() {
        assert!(
            Instant::now() < deadline,
            "no snapshot arrives:\n{}",
            cluster.master_logs()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    cluster.kill_master(follower);
    cluster.start_master(follower);
    let caught_up = wait_until_applied(&cluster, follower, JOBS as u64, |s| s.queue_depth).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let rss_peak = sampler.join().unwrap();
    assert!(
        caught_up,
        "master {follower} did not catch up:\n{}",
        cluster.master_logs()
    );
    let metrics = async |id: u64| {
        let port = cluster.masters[id as usize - 1].metrics_port;
        procstat::http_get(&format!("127.0.0.1:{port}"), "/metrics")
            .await
            .unwrap()
    };
    let leader_metrics = metrics(leader).await;
    let sent_bytes = metric_value(
        &leader_metrics,
        "symcluster_raft_snapshot_bytes_total",
        &[("direction", "sent")],
    )
    .unwrap();
    let follower_metrics = metrics(follower).await;
    // The restarted process received one whole snapshot (the cut one was the killed process's).
    let count = snapshot_count;
    assert_eq!(
        count(&follower_metrics, "received", "ok"),
        1.0,
        "{follower_metrics}"
    );
    assert_eq!(
        count(&follower_metrics, "received", "failed"),
        0.0,
        "{follower_metrics}"
    );
    assert_eq!(
        count(&leader_metrics, "sent", "ok"),
        1.0,
        "{leader_metrics}"
    );
    assert!(
        count(&leader_metrics, "sent", "failed") >= 1.0,
        "{leader_metrics}"
    );
    let sent_mib = sent_bytes / f64::from(1 << 20);
    let growth = rss_peak - rss_before;
    println!(
        "snapshot: {sent_mib:.1} MiB streamed in 64 KiB chunks; leader RSS {rss_before:.0} MiB \
         before, {rss_peak:.0} MiB at most while sending (+{growth:.0} MiB)"
    );
    assert!(sent_mib > 100.0, "only {sent_mib:.1} MiB streamed");
    // The leader may read the index through redb's page cache (64 MiB) and holds a few chunks;
    // a whole-index message would be the index's size at least, several times over.
    assert!(
        growth < sent_mib / 2.0,
        "the leader grew by {growth:.0} MiB while streaming {sent_mib:.0} MiB"
    );
    // Every master holds the same index, table by table.
    let digests = wait_for_equal_digests(&cluster).await;
    assert_eq!(digests[0].jobs, JOBS as u64);
    let log = cluster.masters[follower as usize - 1]
        .proc
        .as_ref()
        .unwrap()
        .log();
    assert!(
        log.contains("snapshot restored"),
        "the follower caught up without a snapshot:\n{log}"
    );
}

/// A rolling restart: a follower stopped (SIGTERM) for 10 s while the leader takes submits
/// (more entries than the log kept before it was kept by size: 2,048), then started again. It
/// catches up from the leader's log, with no snapshot sent or received, and holds the same
/// index as the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_stopped_for_a_rolling_restart_catches_up_from_the_log() {
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
    let stopped = cluster.stop_master(follower, Duration::from_secs(10)).await;
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");

    // Unreadable reports are stored failed at once: one log entry each. For 10 s, and at least
    // 2,200 of them.
    let client = cluster.client().await;
    let down = Instant::now();
    let submitted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (client, submitted) = (client.clone(), submitted.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            for i in (task..).step_by(8) {
                if down.elapsed() >= Duration::from_secs(10)
                    && submitted.load(std::sync::atomic::Ordering::Relaxed) >= 2200
                {
                    break;
                }
                let response = client
                    .submit_native(&format!("bad-{i}"), b"not a crash report".to_vec())
                    .await
                    .unwrap();
                assert!(response.created);
                submitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let jobs = submitted.load(std::sync::atomic::Ordering::Relaxed) as u64;
    cluster.start_master(follower);
    assert!(
        wait_until_applied(&cluster, follower, jobs, |s| s.jobs_failed).await,
        "master {follower} did not catch up:\n{}",
        cluster.master_logs()
    );
    for (id, direction) in [(leader, "sent"), (follower, "received")] {
        let port = cluster.masters[id as usize - 1].metrics_port;
        let metrics = procstat::http_get(&format!("127.0.0.1:{port}"), "/metrics")
            .await
            .unwrap();
        for outcome in ["ok", "failed"] {
            let snapshots = snapshot_count(&metrics, direction, outcome);
            assert_eq!(snapshots, 0.0, "master {id}, {direction} {outcome}");
        }
    }
    println!("{jobs} entries while the follower was down: caught up from the log");
    let digests = wait_for_equal_digests(&cluster).await;
    assert_eq!(digests[0].jobs, jobs);
}

/// `symcluster_raft_snapshots_total{direction, outcome}` in a master's metrics (exposed from the
/// start, 0 included).
fn snapshot_count(metrics: &str, direction: &str, outcome: &str) -> f64 {
    metric_value(
        metrics,
        "symcluster_raft_snapshots_total",
        &[("direction", direction), ("outcome", outcome)],
    )
    .unwrap_or_else(|| panic!("no snapshot counter {direction} {outcome}:\n{metrics}"))
}

/// Every running master's [`api::IndexDigestResponse`], once they all answer the same applied
/// index and digest (polled, bounded); panics with what they answered otherwise.
pub(crate) async fn wait_for_equal_digests(cluster: &Cluster) -> Vec<api::IndexDigestResponse> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = Vec::new();
    while Instant::now() < deadline {
        last.clear();
        for master in cluster.masters.iter().filter(|m| m.proc.is_some()) {
            if let Some(mut admin) = admin(&master.endpoint()).await
                && let Ok(digest) = admin.index_digest(api::IndexDigestRequest {}).await
            {
                last.push(digest.into_inner());
            }
        }
        let running = cluster.masters.iter().filter(|m| m.proc.is_some()).count();
        if last.len() == running
            && last
                .iter()
                .all(|d| (d.applied_index, &d.sha256) == (last[0].applied_index, &last[0].sha256))
        {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the masters' indexes differ: {last:?}");
}

pub(crate) type AdminClient = api::admin_client::AdminClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        fn(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status>,
    >,
>;

/// An admin client of the master at `endpoint` (admin token), when it answers.
pub(crate) async fn admin(endpoint: &str) -> Option<AdminClient> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())
        .unwrap()
        .connect()
        .await
        .ok()?;
    fn bearer(mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        r.metadata_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        Ok(r)
    }
    Some(api::admin_client::AdminClient::with_interceptor(
        channel,
        bearer as fn(_) -> _,
    ))
}

/// Polls master `id`'s own view (its Admin status answers from its own index) until
/// `count(status) == expected`; bounded.
pub async fn wait_until_applied(
    cluster: &Cluster,
    id: u64,
    expected: u64,
    count: impl Fn(&api::ClusterStatusResponse) -> u64,
) -> bool {
    let endpoint = cluster.masters[id as usize - 1].endpoint();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(mut admin) = admin(&endpoint).await
            && let Ok(status) = admin.cluster_status(api::ClusterStatusRequest {}).await
            && count(status.get_ref()) == expected
        {
            return true;
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

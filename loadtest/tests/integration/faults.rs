//! Faults caused for real: a worker SIGKILLed mid-job, S3 stopped, the master restarted, a
//! leader's disk full.

use std::time::{Duration, Instant};

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::support::{app_frames, big_map, fixture, groups, result, upload_dsyms, wait};

/// A worker is killed while it runs a job; the job's lease expires and another worker completes
/// it, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_job_completes_once_elsewhere() {
    let mut cluster = Cluster::start(1, MasterOptions::default()).await;
    // A slow job: a 40 MB source map to download and prepare (hundreds of ms), so the kill
    // lands while the worker is on it.
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
            "slow",
            api::JsJob {
                stack: b"f@big.bundle:1:100\n".to_vec(),
                debug_id: "00000000-0000-0000-0000-00000000b16b".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // Kill worker-0 as soon as it holds the lease.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let job = client.job("slow").await.unwrap();
        if job.state == api::JobState::Running as i32 {
            assert_eq!(job.worker_id, "worker-0");
            break;
        }
        assert!(Instant::now() < deadline, "the job was never leased");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    cluster.kill_worker(0);
    let during = client.job("slow").await.unwrap();
    assert_ne!(
        during.state,
        api::JobState::Completed as i32,
        "finished before the kill"
    );

    cluster.add_worker(2).await;
    let job = wait(&mut client, "slow").await;
    let result = result(&job);
    assert_eq!(job.worker_id, "worker-1");
    assert_eq!(job.attempts, 2, "one expired lease, one completed attempt");
    assert_eq!(result["frames"][0]["status"], "symbolicated");
    // Completed once: the index holds one completion and the job is not queued again.
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

/// S3 stops: jobs still end, within the retry budget, with `fetching_failed` modules; once S3 is
/// back, the next job symbolicates (the failure was not cached).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_outage_gives_fetching_failed_then_recovers() {
    let mut cluster = Cluster::start(1, MasterOptions::default()).await;
    upload_dsyms(&cluster, &[repo().join("examples/ios-demo/DemoApp.dSYM")]);
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut client = cluster.client().await;

    cluster.garage.stop();
    let started = Instant::now();
    client
        .submit_native("during-outage", report.clone())
        .await
        .unwrap();
    let job = wait(&mut client, "during-outage").await;
    let elapsed = started.elapsed();
    let during = result(&job);
    let module = during["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["debug_id"] == "4c4c443b-5555-3144-a126-3cc30cf88fdb")
        .unwrap();
    assert_eq!(module["status"], "fetching_failed");
    assert!(
        module["error"]
            .as_str()
            .unwrap()
            .contains("4c/4c443b55553144a1263cc30cf88fdb/debuginfo")
    );
    assert_eq!(during["threads"][0]["frames"][0]["status"], "missing");
    eprintln!("job during the S3 outage ended in {elapsed:?}");

    cluster.garage.restart();
    client.submit_native("after-outage", report).await.unwrap();
    let after = result(&wait(&mut client, "after-outage").await);
    assert_eq!(
        app_frames(&after, &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
}

/// The index is durable: a master killed with SIGKILL comes back with every job and result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_restart_keeps_the_index() {
    let mut cluster = Cluster::start(1, MasterOptions::default()).await;
    upload_dsyms(&cluster, &[fixture("crashprobe/release/dSYMs")]);
    let report = std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap();
    let mut client = cluster.client().await;
    client.submit_native("durable", report).await.unwrap();
    let before = wait(&mut client, "durable").await;

    cluster.restart_master().await;
    let mut client = cluster.client().await;
    let after = client.job("durable").await.unwrap();
    assert_eq!(after.state, api::JobState::Completed as i32);
    assert_eq!(after.result_json, before.result_json);
    assert_eq!(after.fingerprint, before.fingerprint);
    let groups = groups(&client, 5).await;
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].count, 1);
}

/// A leader whose data directory fills up (a real `ENOSPC` from its own writes, on a small
/// `tmpfs`) exits with status 74 instead of staying up as a leader whose Raft member has stopped
/// (before, its thread ended and the process went on: a frozen index, submits refused with no
/// leader to go to). The other two elect a leader; the job acknowledged before completes there
/// with its exact frame, and so does every job submitted after the fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fills_up_exits_and_the_others_go_on() {
    let mut cluster = Cluster::start(
        1,
        MasterOptions {
            masters: 3,
            small_disks: Some(256 << 20),
            ..Default::default()
        },
    )
    .await;
    upload_dsyms(&cluster, &[repo().join("examples/ios-demo/DemoApp.dSYM")]);
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let leader = cluster.wait_for_leader().await;
    let mut client = cluster.client().await;
    client
        .submit_native("before-full", report.clone())
        .await
        .unwrap();
    let before = result(&wait(&mut client, "before-full").await);
    let crash_frame = ("crash_write_null".to_owned(), "crash.c".to_owned(), 23);
    assert_eq!(app_frames(&before, &["DemoApp"])[0], crash_frame);

    let filler = cluster.fill_master_disk(leader);
    eprintln!("master {leader}'s disk filled with {filler} bytes");
    // The leader's next write (this submit's log entry, or a command of its own before it)
    // fails: the process ends.
    let submitting = {
        let (mut client, report) = (client.clone(), report.clone());
        tokio::spawn(async move {
            let mut ids = Vec::new();
            for i in 0..3 {
                let id = format!("after-full-{i}");
                client
                    .submit_native(&id, report.clone())
                    .await
                    .unwrap_or_else(|e| panic!("submit {id}: {e}"));
                ids.push(id);
            }
            ids
        })
    };
    let status = cluster
        .wait_master_exit(leader, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| {
            panic!(
                "master {leader} still runs with a full disk; its log:\n{}",
                cluster.master_logs()
            )
        });
    assert_eq!(
        status.code(),
        Some(74),
        "master {leader} exited with {status}"
    );
    let log = std::fs::read_to_string(cluster.master_log_path(leader)).unwrap();
    assert!(
        log.contains("raft storage failed; this master exits")
            && log.contains("No space left on device"),
        "master {leader}'s log does not say why it stopped:\n{log}"
    );

    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, leader);
    let ids = tokio::time::timeout(Duration::from_secs(60), submitting)
        .await
        .expect("the submits after the fault were not acknowledged by the new leader")
        .unwrap();
    let mut client = cluster.client().await;
    for id in std::iter::once("before-full".to_owned()).chain(ids) {
        let job = wait(&mut client, &id).await;
        assert_eq!(job.state, api::JobState::Completed as i32, "{id}");
        assert_eq!(
            app_frames(&result(&job), &["DemoApp"])[0],
            crash_frame,
            "{id}"
        );
    }
}

/// A port found free can be taken before Garage binds it (another test's process took one in a
/// CI run): the start is tried again on other ports instead of failing the test.
#[test]
fn garage_starts_on_other_ports_when_its_port_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let mut picks = vec![taken_port];
    let garage = symcluster_loadtest::cluster::Garage::start_on(&dir.path().join("garage"), || {
        picks.pop().unwrap_or_else(|| {
            // The first free block after the taken port's try.
            loop {
                let p = symcluster_loadtest::cluster::free_port();
                if p < 65000
                    && (1..=3).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok())
                {
                    return p;
                }
            }
        })
    });
    assert_ne!(garage.port, taken_port);
    assert!(garage.pid().is_some());
    // It serves S3 on the port it reports.
    assert!(std::net::TcpStream::connect(("127.0.0.1", garage.port)).is_ok());
    drop(taken);
}

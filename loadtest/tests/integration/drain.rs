//! Graceful drain: a worker stopped with SIGTERM (a scale-down, a rolling update) loses no job
//! and makes none wait for its lease to expire.

use std::time::{Duration, Instant};

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions};

use crate::support::{fixture, result, upload_dsyms, wait};

/// Leases far longer than any of these tests: a job that waited for its lease to expire would
/// blow the time checks below.
const LEASE_MS: u64 = 120_000;

fn crashprobe_reports() -> Vec<(String, Vec<u8>)> {
    let dir = fixture("crashprobe/release/arm64");
    let mut reports: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("crashprobe reports")
        .map(|e| e.expect("entry").path())
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("report"))
        })
        .collect();
    reports.sort();
    reports
}

async fn cluster() -> Cluster {
    cluster_with(MasterOptions {
        lease_ms: LEASE_MS,
        ..MasterOptions::default()
    })
    .await
}

/// A master with `options`, no worker, and the CrashProbe dSYMs uploaded.
async fn cluster_with(options: MasterOptions) -> Cluster {
    let cluster = Cluster::start(0, options).await;
    let crashprobe = fixture("crashprobe");
    upload_dsyms(
        &cluster,
        &[
            crashprobe.join("release/dSYMs"),
            crashprobe.join("debug/dSYMs"),
        ],
    );
    cluster
}

async fn worker(cluster: &mut Cluster, drain_timeout: &str) -> usize {
    cluster
        .add_worker_with(WorkerOptions {
            // S3 may stall for the whole test (paused Garage): the fetch waits, it does not fail.
            s3_timeout_ms: 600_000,
            args: vec!["--drain-timeout".into(), drain_timeout.into()],
            ..WorkerOptions::default()
        })
        .await
}

/// Jobs stuck on a stalled S3 when their worker gets SIGTERM are handed back when the drain
/// timeout passes, and another worker completes them at once (no lease expiry); the stopped
/// worker exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_unfinished_jobs_back_at_once() {
    let mut cluster = cluster().await;
    let a = worker(&mut cluster, "1s").await;
    let reports = crashprobe_reports();
    let mut client = cluster.client().await;

    // S3 stalls: both of worker-0's jobs hang in their dSYM downloads.
    cluster.garage.pause();
    let ids = ["stuck-1", "stuck-2"];
    for (id, (_, report)) in ids.iter().zip(&reports) {
        client.submit_native(id, report.clone()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster.status().await.workers[0].busy < 2 {
        assert!(Instant::now() < deadline, "worker-0 never took both jobs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let b = worker(&mut cluster, "30s").await;

    let stopped_at = Instant::now();
    let exit = cluster.stop_worker(a, Duration::from_secs(20)).await;
    let exit = exit.expect("worker-0 did not exit within 20 s of SIGTERM");
    assert!(exit.success(), "worker-0 exited with {exit}");
    // Handed back, not expired: worker-0 is gone, and both jobs go to worker-1 (a lease is
    // granted by a commit right after the hand-back: waited for, bounded).
    let status = cluster.status().await;
    assert_eq!(
        status
            .workers
            .iter()
            .map(|w| w.worker_id.as_str())
            .collect::<Vec<_>>(),
        ["worker-1"],
        "worker-0 deregistered"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in ids {
        loop {
            let job = client.job(id).await.unwrap();
            if job.state == api::JobState::Running as i32 {
                assert_eq!(
                    (job.worker_id.as_str(), job.attempts),
                    ("worker-1", 2),
                    "{id}"
                );
                break;
            }
            assert_eq!(job.state, api::JobState::Queued as i32, "{id}: {job:?}");
            assert!(
                job.error.contains("worker worker-0 left"),
                "{id} was handed back: {}",
                job.error
            );
            assert!(Instant::now() < deadline, "{id} not leased again: {job:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    cluster.garage.resume();
    for id in ids {
        let job = wait(&mut client, id).await;
        let result = result(&job);
        assert_eq!(job.worker_id, "worker-1");
        let found = crate::support::found_images(&result);
        assert!(found > 0, "{id}: no dSYM found: {result}");
    }
    let elapsed = stopped_at.elapsed();
    assert!(
        elapsed < Duration::from_millis(LEASE_MS),
        "SIGTERM to completion took {elapsed:?}: as long as a lease"
    );
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.queue_depth,
            status.jobs_running
        ),
        (2, 0, 0)
    );
    assert_eq!(b, 1);
}

/// Under load, a worker stopped with SIGTERM finishes what it runs and leaves; the other
/// worker takes the rest: every submitted job completes, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_loses_nothing() {
    let mut cluster = cluster().await;
    let a = worker(&mut cluster, "30s").await;
    worker(&mut cluster, "30s").await;
    let reports = crashprobe_reports();
    let client = cluster.client().await;
    const JOBS: usize = 200;

    let started = Instant::now();
    let mut submitted = tokio::task::JoinSet::new();
    for i in 0..JOBS {
        let mut client = client.clone();
        let report = reports[i % reports.len()].1.clone();
        submitted.spawn(async move {
            let id = format!("load-{i}");
            client.submit_native(&id, report).await.unwrap();
            wait(&mut client, &id).await
        });
        // Stop worker-0 a quarter of the way in, while jobs run on both workers.
        if i == JOBS / 4 {
            let exit = cluster.stop_worker(a, Duration::from_secs(40)).await;
            let exit = exit.expect("worker-0 did not exit within 40 s of SIGTERM");
            assert!(exit.success(), "worker-0 exited with {exit}");
        }
    }
    let mut by_worker = std::collections::BTreeMap::<String, usize>::new();
    while let Some(job) = submitted.join_next().await {
        let job = job.expect("job task");
        assert_eq!(
            job.state,
            api::JobState::Completed as i32,
            "{}: {}",
            job.job_id,
            job.error
        );
        *by_worker.entry(job.worker_id.clone()).or_default() += 1;
    }
    assert!(
        started.elapsed() < Duration::from_millis(LEASE_MS),
        "no job waited for a lease to expire"
    );
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.queue_depth,
            status.jobs_running
        ),
        (JOBS as u64, 0, 0)
    );
    assert_eq!(by_worker.values().sum::<usize>(), JOBS);
    assert!(by_worker["worker-1"] > 0, "{by_worker:?}");
}

/// A worker with one slot and `--prefetch 1` holds two leases while its slot is busy (a
/// paused S3 holds the first job in its dSYM download); the master leases no third. The
/// waiting lease is renewed by heartbeats like the running one, before and during a drain
/// longer than a lease: SIGTERM hands both back when the drain ends, neither expired, the
/// waiting one named unstarted, so that its attempt does not count. With `--max-attempts 2`,
/// a second worker SIGKILLed holding all three jobs then fails for good only the job that had
/// started on the first worker (its second counted attempt); a third worker completes the
/// others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_lease_waits_for_a_slot_and_a_drain_hands_it_back_uncounted() {
    const SHORT_LEASE_MS: u64 = 1_500;
    let mut cluster = cluster_with(MasterOptions {
        lease_ms: SHORT_LEASE_MS,
        heartbeat_ms: 250,
        args: ["--max-attempts", "2"].map(String::from).to_vec(),
        ..MasterOptions::default()
    })
    .await;
    let a = cluster
        .add_worker_with(WorkerOptions {
            slots: 1,
            s3_timeout_ms: 600_000,
            args: ["--drain-timeout", "4s", "--prefetch", "1"]
                .map(String::from)
                .to_vec(),
            ..WorkerOptions::default()
        })
        .await;
    let reports = crashprobe_reports();
    let mut client = cluster.client().await;

    cluster.garage.pause();
    let ids = ["held-1", "held-2", "queued-3"];
    for (id, (_, report)) in ids.iter().zip(&reports) {
        client.submit_native(id, report.clone()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = cluster.status().await;
        let w = &status.workers[0];
        assert_eq!((w.slots, w.prefetch), (1, 1));
        if w.busy == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "worker-0 never held two leases: {w:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Three lease durations: a lease not renewed would have expired (and been granted again,
    // attempt 2) by now.
    tokio::time::sleep(Duration::from_millis(3 * SHORT_LEASE_MS)).await;
    // Heartbeats (every 250 ms) told the master which of the two runs.
    let status = cluster.status().await;
    assert_eq!(
        (
            status.workers[0].busy,
            status.workers[0].running,
            status.queue_depth
        ),
        (2, 1, 1)
    );
    for id in &ids[..2] {
        let job = client.job(id).await.unwrap();
        assert_eq!(
            (job.state, job.worker_id.as_str(), job.attempts),
            (api::JobState::Running as i32, "worker-0", 1),
            "{id}"
        );
    }
    let queued = client.job("queued-3").await.unwrap();
    assert_eq!(queued.state, api::JobState::Queued as i32, "{queued:?}");

    // The drain (4 s) outlasts two leases: an expired lease would be queued again with
    // "lease expired", not handed back by worker-0 leaving.
    let exit = cluster.stop_worker(a, Duration::from_secs(20)).await;
    let exit = exit.expect("worker-0 did not exit within 20 s of SIGTERM");
    assert!(exit.success(), "worker-0 exited with {exit}");
    // One of the two had the slot (in its download); the other waited, and worker-0 named it
    // unstarted.
    let (mut started, mut waited) = (Vec::new(), Vec::new());
    for id in &ids[..2] {
        let job = client.job(id).await.unwrap();
        assert_eq!(
            (job.state, job.attempts),
            (api::JobState::Queued as i32, 1),
            "{id}: {job:?}"
        );
        if job.error.starts_with("worker worker-0 left")
            && job
                .error
                .ends_with(" (it never started there: not counted)")
        {
            waited.push(*id);
        } else {
            assert!(
                job.error.starts_with("worker worker-0 left"),
                "{id} was handed back: {}",
                job.error
            );
            started.push(*id);
        }
    }
    assert_eq!(
        (started.len(), waited.len()),
        (1, 1),
        "{started:?} {waited:?}"
    );
    let (started, waited) = (started[0], waited[0]);

    // Worker-1 takes all three (S3 still paused) and dies holding them.
    let b = cluster
        .add_worker_with(WorkerOptions {
            slots: 2,
            s3_timeout_ms: 600_000,
            ..WorkerOptions::default()
        })
        .await;
    // Every lease applied (RUNNING on worker-1), so already on worker-1's lease stream: a
    // lease still being proposed when the worker dies would be requeued as never sent.
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in ids {
        loop {
            let job = client.job(id).await.unwrap();
            if (job.state, job.worker_id.as_str()) == (api::JobState::Running as i32, "worker-1") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "worker-1 never held {id}: {job:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    cluster.kill_worker(b);
    // Its leases expire: the job that started on worker-0 has used its 2 attempts.
    let job = wait(&mut client, started).await;
    assert_eq!(
        (job.state, job.attempts, job.error.as_str()),
        (
            api::JobState::Failed as i32,
            2,
            "lease expired on worker worker-1 (attempt 2 of 2)"
        ),
        "{started}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for id in [waited, "queued-3"] {
        loop {
            let job = client.job(id).await.unwrap();
            if job.state == api::JobState::Queued as i32 {
                assert_eq!(job.error, "lease expired on worker worker-1", "{id}");
                break;
            }
            assert_eq!(job.state, api::JobState::Running as i32, "{id}: {job:?}");
            assert!(Instant::now() < deadline, "{id} stayed on worker-1");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    cluster
        .add_worker_with(WorkerOptions {
            s3_timeout_ms: 600_000,
            ..WorkerOptions::default()
        })
        .await;
    cluster.garage.resume();
    for (id, attempts) in [(waited, 3), ("queued-3", 2)] {
        let job = wait(&mut client, id).await;
        assert_eq!(
            (job.state, job.worker_id.as_str(), job.attempts),
            (api::JobState::Completed as i32, "worker-2", attempts),
            "{id}: {}",
            job.error
        );
        assert!(!result(&job)["threads"].as_array().unwrap().is_empty());
    }
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.jobs_failed,
            status.queue_depth
        ),
        (2, 1, 0)
    );
}

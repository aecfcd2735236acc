//! The leader's wall clock stepped while a worker holds a lease, caused for real: the master
//! runs with libfaketime (Debian's `faketime`) preloaded, reading its offset from a file the
//! test rewrites, with the monotonic clock left alone, as an NTP step or a resumed VM moves
//! only the wall clock ([`MasterOptions::movable_clocks`]). The job's download is held by a
//! paused Garage, so the lease stays held and heartbeated while the clock moves.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use symcluster_client::{Client, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions, repo};

use crate::support::{app_frames, result, upload_dsyms, wait};

/// The lease length here: longer than a step takes to be seen (the clock file is re-read
/// every second) with the worker frozen, so that only the step can expire a lease in that time.
const LEASE_MS: u64 = 10_000;

/// The demo's crashing frame, which a completed job must hold.
const DEMO_FRAME: (&str, &str, u64) = ("crash_write_null", "crash.c", 23);

fn wall_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// One master whose wall clock a test can step, the demo dSYM uploaded, and a worker whose
/// downloads wait up to a minute.
async fn cluster_with_a_movable_clock() -> Cluster {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            movable_clocks: true,
            lease_ms: LEASE_MS,
            ..MasterOptions::default()
        },
    )
    .await;
    upload_dsyms(&cluster, &[repo().join("examples/ios-demo/DemoApp.dSYM")]);
    cluster
        .add_worker_with(WorkerOptions {
            s3_timeout_ms: 60_000,
            ..WorkerOptions::default()
        })
        .await;
    cluster
}

/// Submits the demo crash as `job` with Garage paused, and waits (bounded) until a worker
/// holds it: its download hangs, its lease is heartbeated.
async fn a_held_lease(cluster: &Cluster, client: &mut Client, job: &str) -> api::Job {
    cluster.garage.pause();
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    client.submit_native(job, report).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = client.job(job).await.unwrap();
        if seen.state == api::JobState::Running as i32 {
            return seen;
        }
        assert!(Instant::now() < deadline, "never leased: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Steps the master's wall clock to `offset` seconds from this machine's and waits (bounded)
/// until it shows: a report it stores at once (unreadable: FAILED on submit) carries the
/// master's time.
async fn step_the_clock(cluster: &Cluster, client: &mut Client, offset: i64) {
    cluster.step_master_clock(1, offset);
    let deadline = Instant::now() + Duration::from_secs(15);
    for probe in 0.. {
        let id = format!("clock-probe-{probe}");
        client
            .submit_native(&id, b"not a crash report".to_vec())
            .await
            .unwrap();
        let at = client.job(&id).await.unwrap().submitted_at_ms as i64;
        let skew_s = (at - wall_now_ms() as i64) / 1000;
        if (skew_s - offset).abs() < 60 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the master's clock never moved by {offset} s (skew {skew_s} s)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The master's wall clock jumps an hour ahead while a worker holds a lease. The worker is
/// frozen across the step (no heartbeat may renew the deadline on the new clock before the
/// leader's expiry pass, every 250 ms, looks at it), for less than the lease (10 s), then
/// continued. The lease does not expire: the job stays RUNNING in its first attempt, and once
/// the download goes on it ends COMPLETED, attempt 1, at the demo's exact frame. With
/// deadlines on the wall clock, the first expiry pass after the step requeued it (attempt 2: a
/// counted attempt burnt by a clock, the worker's first run thrown away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_jumping_ahead_expires_no_held_lease() {
    let cluster = cluster_with_a_movable_clock().await;
    let mut client = cluster.client().await;
    let held = a_held_lease(&cluster, &mut client, "held").await;
    assert_eq!(held.attempts, 1);

    cluster.pause_worker(0);
    step_the_clock(&cluster, &mut client, 3600).await;
    // Expiry passes with the new clock and no heartbeat: what must not happen has a second
    // (four passes) to happen in while the worker is frozen, then three more with it running.
    let stepped = Instant::now();
    let mut resumed = false;
    while stepped.elapsed() < Duration::from_secs(4) {
        if !resumed && stepped.elapsed() >= Duration::from_secs(1) {
            cluster.resume_worker(0);
            resumed = true;
        }
        let seen = client.job("held").await.unwrap();
        assert_eq!(
            (seen.state, seen.attempts),
            (api::JobState::Running as i32, 1),
            "the clock's step expired the lease: {seen:?}\n{}",
            cluster.master_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    cluster.garage.resume();
    let done = wait(&mut client, "held").await;
    assert_eq!(done.state, api::JobState::Completed as i32, "{done:?}");
    assert_eq!(done.attempts, 1);
    let (function, file, line) = &app_frames(&result(&done), &["DemoApp"])[0];
    assert_eq!((function.as_str(), file.as_str(), *line), DEMO_FRAME);
}

/// The master's wall clock goes an hour back while a worker holds a lease; the worker, frozen
/// before the step (so that no heartbeat renews its deadline on the new clock), is then
/// SIGKILLed. Its lease still expires after its length (10 s), not an hour later: another
/// worker, started once the first is dead, completes the job (bounded wait, far under the
/// hour), attempt 2, at the demo's exact frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_going_back_keeps_no_dead_workers_lease() {
    let mut cluster = cluster_with_a_movable_clock().await;
    let mut client = cluster.client().await;
    a_held_lease(&cluster, &mut client, "held").await;

    cluster.pause_worker(0);
    step_the_clock(&cluster, &mut client, -3600).await;
    cluster.kill_worker(0);
    cluster.garage.resume();
    cluster.add_worker(2).await;
    let done = tokio::time::timeout(Duration::from_secs(60), wait(&mut client, "held"))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the dead worker's lease did not expire within a minute\n{}",
                cluster.master_logs()
            )
        });
    assert_eq!(done.state, api::JobState::Completed as i32, "{done:?}");
    assert_eq!(done.attempts, 2);
    let (function, file, line) = &app_frames(&result(&done), &["DemoApp"])[0];
    assert_eq!((function.as_str(), file.as_str(), *line), DEMO_FRAME);
}

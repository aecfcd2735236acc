//! Crashes aimed where a SIGKILL cannot be aimed: the masters' failpoints
//! (`master/src/failpoints.rs`, armed with `return`: the process aborts at the point), and what
//! a master does at its next start.

use std::os::unix::process::ExitStatusExt as _;
use std::time::{Duration, Instant};

use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::replication::wait_for_equal_digests;

/// SIGABRT: how a master crashed at a failpoint ends.
const SIGABRT: i32 = 6;

/// A follower forced onto a snapshot (stopped while the leader's log, kept to 1 MiB, moved past
/// it) crashes inside the install at each of its two windows: after the first 64 KiB chunk of
/// the stream is written, then — at the next start, from a second transfer — after the index
/// holds the snapshot and before the Raft log is reset to start after it. Each crash is the
/// point's (SIGABRT, the point named on stderr). The third start, unarmed, comes up (a log
/// left with a stale entry at the snapshot's index would make raft-rs panic at every start)
/// and every master holds the same index, every job in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_crashes_inside_a_snapshot_install_installs_it_at_its_next_start() {
    let mut cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
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
    let commit = cluster
        .master_metric(leader, "symcluster_raft_commit_index")
        .await
        .expect("the leader's commit index") as u64;

    // With no worker, each job stays queued with its report: one log entry of a few KiB. Jobs
    // are submitted until the leader's log starts well past what the follower holds.
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut client = cluster.client().await;
    let mut submitted = 0u64;
    loop {
        for _ in 0..100 {
            let response = client
                .submit_native(&format!("job-{submitted}"), report.clone())
                .await
                .unwrap_or_else(|e| panic!("submit job-{submitted}: {e}"));
            assert!(response.created);
            submitted += 1;
        }
        let first = cluster
            .master_metric(leader, "symcluster_raft_log_first_index")
            .await
            .unwrap_or_default() as u64;
        if first > commit + 256 {
            break;
        }
        assert!(
            submitted < 20_000,
            "the leader's log still starts at {first} after {submitted} jobs"
        );
    }

    for point in ["snapshot_chunk_written", "snapshot_before_log_reset"] {
        let log_before = std::fs::read_to_string(cluster.master_log_path(follower)).unwrap();
        cluster.start_master_armed(follower, &format!("{point}=return"));
        let status = cluster
            .wait_master_exit(follower, Duration::from_secs(60))
            .await
            .unwrap_or_else(|| panic!("master {follower} did not reach {point} in 60 s"));
        let log = std::fs::read_to_string(cluster.master_log_path(follower)).unwrap();
        let this_start = &log[log_before.len()..];
        assert_eq!(status.signal(), Some(SIGABRT), "{status}: {this_start}");
        assert!(
            this_start.contains(&format!("failpoint {point}: crashing here")),
            "{this_start}"
        );
        cluster.kill_master(follower);
    }

    cluster.start_master(follower);
    let deadline = Instant::now() + Duration::from_secs(60);
    while cluster
        .master_metric(follower, "symcluster_raft_applied_index")
        .await
        .is_none_or(|applied| (applied as u64) < commit + 256)
    {
        assert!(
            cluster.master_exited(follower).is_none(),
            "master {follower} exited at its clean start:\n{}",
            cluster.master_logs()
        );
        assert!(
            Instant::now() < deadline,
            "master {follower} did not catch up:\n{}",
            cluster.master_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let digests = wait_for_equal_digests(&cluster).await;
    assert_eq!(digests[0].jobs, submitted);
}

/// `--restore` crashed at each of its steps. Before its one transaction commits: the data dir
/// holds an empty index and no log, and the same command, run again, restores the whole backup.
/// After the commit, before the Raft log starts: the index holds the backup, and the master
/// started without `--restore` comes up on it (the same command is refused, as over any index:
/// a restore never overwrites one). Either way the master ends with the backup's jobs and takes
/// new submits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_crashed_at_either_step_ends_with_the_whole_backup() {
    // A backup of 50 jobs (unreadable reports: stored failed at once, no worker needed).
    let source = Cluster::start(
        0,
        MasterOptions {
            masters: 1,
            ..MasterOptions::default()
        },
    )
    .await;
    let mut client = source.client().await;
    for i in 0..50 {
        client
            .submit_native(&format!("bad-{i}"), b"not a crash report".to_vec())
            .await
            .unwrap();
    }
    let file = source.dir.path().join("index.backup");
    let out = tokio::task::block_in_place(|| {
        source.symctl(&["admin", "backup", &file.display().to_string()])
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restore = vec!["--restore".to_owned(), file.display().to_string()];

    for (point, again) in [
        ("restore_before_commit", restore.clone()),
        ("restore_after_commit", Vec::new()),
    ] {
        let mut cluster = Cluster::prepare(MasterOptions {
            masters: 1,
            ..MasterOptions::default()
        });
        let spec = format!("{point}=return");
        cluster.start_master_with_env(1, &restore, &[("FAILPOINTS", spec.as_str())]);
        let status = cluster
            .wait_master_exit(1, Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("the restore did not reach {point}"));
        let log = std::fs::read_to_string(cluster.master_log_path(1)).unwrap();
        assert_eq!(status.signal(), Some(SIGABRT), "{status}: {log}");
        assert!(
            log.contains(&format!("failpoint {point}: crashing here")),
            "{log}"
        );
        if point == "restore_after_commit" {
            // The same command again is refused: the index is there.
            let before = log.len();
            cluster.start_master_with(1, &restore);
            let status = cluster
                .wait_master_exit(1, Duration::from_secs(30))
                .await
                .expect("a second --restore over the restored index is refused");
            let log = std::fs::read_to_string(cluster.master_log_path(1)).unwrap();
            assert!(!status.success(), "{}", &log[before..]);
            assert!(
                log[before..].contains("already holds an index"),
                "{}",
                &log[before..]
            );
        }
        cluster.start_master_with(1, &again);
        cluster.wait_for_leader().await;
        assert_eq!(cluster.status().await.jobs_failed, 50, "after {point}");
        let mut client = cluster.client().await;
        assert!(
            client
                .submit_native("after", b"not a crash report".to_vec())
                .await
                .unwrap()
                .created
        );
        assert_eq!(cluster.status().await.jobs_failed, 51, "after {point}");
    }
}

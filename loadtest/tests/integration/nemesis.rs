//! The nemesis run (`symcluster_loadtest::nemesis`) as a test: random client calls against
//! three masters and a worker while masters are killed, paused, partitioned from each other,
//! run out of disk, brought back through snapshots, given wrong wall clocks, slow disks and
//! crashes at an fsync, or replaced by new masters, the history checked.

use std::time::Duration;

use symcluster_loadtest::nemesis::{self, faults};

/// 45 s of four clients against three masters, a fault every 0.5-2 s, each kind at least once
/// (a master SIGKILLed and restarted, SIGSTOPped and continued, cut from the other masters in
/// one of the partition shapes while clients still reach it, or its disk filled: it exits 74
/// and is started again once the space is freed; the leader half the time; or a follower kept
/// down until the leader's log, kept to 1 MiB, no longer holds what it lacks, so that it comes
/// back through a streamed snapshot of the index (every other time crashing inside the install
/// first); or its wall clock stepped up to an hour ahead or behind; or each fsync of its log and
/// index delayed; or its process aborted right before or after one; or it is replaced by a new
/// master, added first or removed first, and the clients and the worker moved onto the new
/// masters): every job's
/// calls are linearizable against the job model, no job is lost or created twice, every
/// result is the report's, no master crashed, and every master holds the same index at the
/// end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_under_every_fault_kind_keep_every_promise_of_the_job_index() {
    let report = nemesis::run(&nemesis::Options {
        masters: 3,
        workers: 1,
        duration: Duration::from_secs(45),
        faults: faults::ALL.to_vec(),
        seed: 1,
        clients: 4,
    })
    .await
    .unwrap();
    println!("{report}");
    // The run did what it is for: every kind of fault injected, jobs submitted and read
    // through them, and the full disk met by the master it was for.
    for kind in [
        "Kill",
        "Pause",
        "Partition",
        "DiskFull",
        "Snapshot",
        "Clock",
        "SlowDisk",
        "FsyncCrash",
        "Membership",
    ] {
        assert!(
            report.events.iter().any(|e| e.what.starts_with(kind)),
            "no {kind}: {report}"
        );
    }
    assert!(
        report.events.iter().any(|e| e
            .what
            .contains("had exited (exit status: 74), started again")),
        "{report}"
    );
    // A crash at an fsync is one: the master aborted at the point it was armed at.
    assert!(
        report
            .events
            .iter()
            .any(|e| e.what.contains("had exited (signal: 6")),
        "{report}"
    );
    // A replacement was made whole: a new master in, the target out.
    assert!(
        report.events.iter().any(|e| e.what.starts_with("healed")
            && (e.what.contains("removed, replaced by master")
                || e.what.contains("(replaced by master"))),
        "{report}"
    );
    // Every forced snapshot was one: the follower installed a snapshot when it came back (a
    // round with no leader known at the kill forced nothing and says so).
    let snapshot_heals: Vec<&str> = report
        .events
        .iter()
        .map(|e| e.what.as_str())
        .filter(|what| what.starts_with("healed") && what.contains("the leader's log started"))
        .collect();
    assert!(!snapshot_heals.is_empty(), "{report}");
    assert!(
        snapshot_heals
            .iter()
            .all(|what| what.ends_with("; snapshot installed)")),
        "{report}"
    );
    assert!(report.acknowledged >= 20 && report.reads >= 20, "{report}");
    assert!(report.anomalies.is_empty(), "{report}");
}

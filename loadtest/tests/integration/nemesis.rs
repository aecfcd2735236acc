//! The nemesis run (`symcluster_loadtest::nemesis`) as a test: random client calls against
//! three masters and a worker while masters are killed, paused and partitioned from each
//! other, the history checked.

use std::time::Duration;

use symcluster_loadtest::nemesis::{self, faults::Fault};

/// 20 s of four clients against three masters, a fault every 0.5-2 s (a master SIGKILLed and
/// restarted, SIGSTOPped and continued, or cut from the other masters in one of the partition
/// shapes while clients still reach it; the leader half the time): the history shows no
/// lost or doubly created job, no stale read, no finished job going back, every result the
/// report's, and every master the same index at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_paused_and_partitioned_masters_keep_every_promise_of_the_job_index() {
    let report = nemesis::run(&nemesis::Options {
        masters: 3,
        workers: 1,
        duration: Duration::from_secs(20),
        faults: vec![Fault::Kill, Fault::Pause, Fault::Partition],
        seed: 1,
        clients: 4,
    })
    .await
    .unwrap();
    println!("{report}");
    // The run did what it is for: faults injected, jobs submitted and read through them.
    assert!(
        report.events.iter().any(|e| e.what.starts_with("Kill"))
            && report.events.iter().any(|e| e.what.starts_with("Pause"))
            && report
                .events
                .iter()
                .any(|e| e.what.starts_with("Partition")),
        "{report}"
    );
    assert!(report.acknowledged >= 20 && report.reads >= 20, "{report}");
    assert!(report.anomalies.is_empty(), "{report}");
}

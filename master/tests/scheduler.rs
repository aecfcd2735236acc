//! The scheduler over a real Raft member (a group of one: `raft::open` with no peers, its node
//! run on its thread) and a real index in a temporary directory: dispatch up to a worker's
//! capacity, lease expiry, drain and deregistration, and completions racing for one job. The
//! workers are the scheduler's callers, as `WorkerApi` calls it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use raft::prelude::Message;
use symcluster_master::index::{Index, JobState};
use symcluster_master::raft::{self as mraft, Outbound, RaftConfig};
use symcluster_master::replica::{IndexMachine, RaftHandle};
use symcluster_master::scheduler::{Completion, OutgoingLease, Scheduler, SchedulerConfig};
use symcluster_proto::v1;
use tokio::sync::mpsc;

/// A group of one sends nothing.
struct Alone;

impl Outbound for Alone {
    fn send(&mut self, _: Vec<Message>) {}
    fn set_members(&mut self, _: &BTreeMap<u64, String>) {}
}

struct Master {
    scheduler: Arc<Scheduler>,
    raft: RaftHandle,
    node: Option<std::thread::JoinHandle<Result<(), mraft::RaftError>>>,
    _dir: tempfile::TempDir,
}

impl Drop for Master {
    fn drop(&mut self) {
        self.raft.stop();
        if let Some(node) = self.node.take() {
            let _ = node.join();
        }
    }
}

/// A master of one with leases of `lease_ms`, once it leads.
async fn master(lease_ms: u64) -> Master {
    let dir = tempfile::tempdir().unwrap();
    let config = RaftConfig::alone(dir.path());
    let index = Index::open_file(&dir.path().join("master.redb")).unwrap();
    let (raft, inputs) = mraft::channel(&config);
    let scheduler = Arc::new(
        Scheduler::new(
            index.clone(),
            raft.clone(),
            SchedulerConfig {
                lease_ms,
                max_attempts: 3,
                ..SchedulerConfig::default()
            },
        )
        .unwrap(),
    );
    let node = mraft::open(
        &config,
        Arc::new(IndexMachine::new(index, scheduler.clone())),
        &dir.path().join("raft-log"),
        &raft,
        inputs,
        |_, _| Box::new(Alone),
    )
    .unwrap();
    let node = std::thread::spawn(move || node.run());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !raft.is_leader() {
        assert!(
            Instant::now() < deadline,
            "a group of one did not elect itself"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Master {
        scheduler,
        raft,
        node: Some(node),
        _dir: dir,
    }
}

impl Master {
    async fn submit(&self, id: &str) {
        let spec = v1::JobSpec {
            job_id: id.into(),
            project: "default".into(),
            ..Default::default()
        };
        let (_, created) = self
            .scheduler
            .submit(id, v1::JobKind::Native, spec.encode_to_vec(), "")
            .await
            .unwrap();
        assert!(created);
    }

    fn worker(&self, id: &str, slots: u32, prefetch: u32) -> mpsc::Receiver<OutgoingLease> {
        self.scheduler
            .register(id, slots, prefetch, Arc::from(id), false)
            .unwrap();
        self.scheduler.open_lease_stream(id).unwrap()
    }

    /// `(state, attempts, worker)` of job `id` in the index.
    fn job(&self, id: &str) -> (JobState, u32, String) {
        let record = self
            .scheduler
            .index()
            .job(id, false)
            .unwrap()
            .unwrap()
            .record;
        (
            JobState::try_from(record.state).unwrap(),
            record.attempts,
            record.worker_id,
        )
    }
}

/// The next lease on `stream` (bounded wait); `None` when the stream ended.
async fn next_lease(stream: &mut mpsc::Receiver<OutgoingLease>) -> Option<(String, u32)> {
    tokio::time::timeout(Duration::from_secs(10), stream.recv())
        .await
        .expect("no lease within 10 s")
        .map(|lease| {
            let lease = lease.into_lease();
            (lease.job.unwrap().job_id, lease.attempt)
        })
}

/// Whether a lease is waiting on `stream` now (after the proposals in flight were applied).
async fn no_lease_waiting(master: &Master, stream: &mut mpsc::Receiver<OutgoingLease>) -> bool {
    // A submit goes through the log after every lease proposed before it: once it is applied,
    // those leases were sent.
    master
        .submit(&format!("default/barrier-{}", rand_suffix()))
        .await;
    stream.try_recv().is_err()
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Polls `expire_leases` until it expires one (bounded).
async fn expire(m: &Master) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while m.scheduler.expire_leases() == 0 {
        assert!(Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn completion() -> Completion {
    Completion {
        result_zstd: zstd::encode_all(&b"{\"threads\":[]}"[..], 3).unwrap(),
        ..Completion::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gets_leases_up_to_its_capacity_and_its_next_when_it_completes_one() {
    let m = master(30_000).await;
    for i in 1..=3 {
        m.submit(&format!("default/j{i}")).await;
    }
    // One slot, no prefetch: one lease at a time.
    let mut leases = m.worker("w1", 1, 0);
    let (first, attempt) = next_lease(&mut leases).await.unwrap();
    assert_eq!((first.as_str(), attempt), ("default/j1", 1));
    assert_eq!(m.job(&first), (JobState::Running, 1, "w1".into()));
    assert!(no_lease_waiting(&m, &mut leases).await);
    assert!(
        m.scheduler
            .complete("w1", &first, 1, completion())
            .await
            .unwrap()
    );
    assert_eq!(m.job(&first).0, JobState::Completed);
    // Its slot is free: the next job in submission order.
    let (second, _) = next_lease(&mut leases).await.unwrap();
    assert_eq!(second, "default/j2");
    let stats = m.scheduler.queue_stats();
    assert_eq!((stats.busy_slots, stats.free_slots), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_goes_to_another_worker_and_the_late_completion_is_refused() {
    let m = master(200).await;
    m.submit("default/slow").await;
    let mut w1 = m.worker("w1", 1, 0);
    assert_eq!(
        next_lease(&mut w1).await.unwrap(),
        ("default/slow".into(), 1)
    );
    // w1 is cut off (it takes no new lease) and sends no heartbeat: the lease expires
    // (polled, bounded).
    m.scheduler.drain("w1").unwrap();
    expire(&m).await;
    let mut w2 = m.worker("w2", 1, 0);
    assert_eq!(
        next_lease(&mut w2).await.unwrap(),
        ("default/slow".into(), 2)
    );
    // w1 comes back with its result of attempt 1: refused, nothing changes.
    assert!(
        !m.scheduler
            .complete("w1", "default/slow", 1, completion())
            .await
            .unwrap()
    );
    assert_eq!(m.job("default/slow"), (JobState::Running, 2, "w2".into()));
    assert!(
        m.scheduler
            .complete("w2", "default/slow", 2, completion())
            .await
            .unwrap()
    );
    assert_eq!(m.job("default/slow"), (JobState::Completed, 2, "w2".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_worker_gets_no_more_leases_and_deregistering_requeues_what_it_holds() {
    let m = master(30_000).await;
    for i in 1..=3 {
        m.submit(&format!("default/d{i}")).await;
    }
    let mut w1 = m.worker("w1", 2, 0);
    let a = next_lease(&mut w1).await.unwrap().0;
    let b = next_lease(&mut w1).await.unwrap().0;
    assert_eq!(m.scheduler.drain("w1"), Some(2));
    // Its stream ends after what was sent; the third job waits for another worker.
    assert_eq!(next_lease(&mut w1).await, None);
    let mut w2 = m.worker("w2", 1, 0);
    assert_eq!(next_lease(&mut w2).await.unwrap().0, "default/d3");
    // w1 stops: `a` never started there (its attempt does not count), `b` did.
    let unstarted: HashSet<String> = [a.clone()].into_iter().collect();
    assert_eq!(
        m.scheduler
            .deregister("w1", "worker stopped", &unstarted)
            .await
            .unwrap(),
        2
    );
    for id in [&a, &b] {
        assert_eq!(m.job(id).0, JobState::Queued);
    }
    let record = |id: &str| m.scheduler.index().job(id, false).unwrap().unwrap().record;
    assert_eq!(record(&a).uncounted_attempts, 1);
    assert_eq!(record(&b).uncounted_attempts, 0);
    assert!(m.scheduler.worker_owner("w1").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_completing_the_same_job_at_once_complete_it_once() {
    let m = master(200).await;
    m.submit("default/race").await;
    let mut w1 = m.worker("w1", 1, 0);
    assert_eq!(next_lease(&mut w1).await.unwrap().1, 1);
    m.scheduler.drain("w1").unwrap();
    expire(&m).await;
    let mut w2 = m.worker("w2", 1, 0);
    assert_eq!(next_lease(&mut w2).await.unwrap().1, 2);
    // Both report at once: w1 for its expired attempt, w2 for the current one.
    let (one, two) = tokio::join!(
        m.scheduler.complete("w1", "default/race", 1, completion()),
        m.scheduler.complete("w2", "default/race", 2, completion()),
    );
    assert_eq!((one.unwrap(), two.unwrap()), (false, true));
    let counts = m.scheduler.index().counts().unwrap();
    assert_eq!((counts.completed, counts.running, counts.queued), (1, 0, 0));
    // A second completion of the current attempt changes nothing either.
    assert!(
        !m.scheduler
            .complete("w2", "default/race", 2, completion())
            .await
            .unwrap()
    );
}

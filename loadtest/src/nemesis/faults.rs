//! The faults a nemesis run injects into a real local cluster, one at a time, at seeded random
//! times: a master SIGKILLed and started again on its data dir (a crash and restart), or
//! SIGSTOPped and continued (a process that stalls: a long GC pause, a VM migrated, a disk that
//! hangs; its peers see a silent member and its connections stay open). The target is the
//! leader or another master with even odds; or a network partition between masters (each
//! master in a network namespace of its own, [`crate::network`]), which leaves every master
//! reachable by the clients and workers: the target cut off from every other master, the
//! target the only bridge between two halves that cannot reach each other, the target's sends
//! to the others dropped (one way), or with five masters a minority of two, the target among
//! them, cut from the majority; or a full disk: the target's data directory, on a small
//! filesystem of its own (a `tmpfs`, [`crate::small_disk`]), filled to the last byte, so that
//! its next write fails with `ENOSPC` and the master exits 74; healed, the space is freed and
//! the master, if it exited, started again; or a forced snapshot: a follower SIGKILLed and kept
//! down until the leader's log (kept to [`SHORT_LOG`] in such runs) no longer holds the entries
//! it lacks, so that it can only come back through a snapshot of the index streamed to it; the
//! heal waits (bounded) for it to install one and says whether it did; or a wall-clock step:
//! the target's wall clock set 1 minute to 1 hour ahead or behind (libfaketime, its monotonic
//! clock left alone), and set back to the machine's when healed; or a slow disk: every fsync
//! of the target's Raft log and every durable commit of its index delayed by 20 to 250 ms
//! (a `sleep` armed at the master's failpoints before each, until healed); or a crash at an
//! fsync: the target aborts right before or right after one such fsync (its failpoint armed
//! with `return`), and is started again when healed; or a membership change: the target
//! replaced by a new master, added first or removed first ([`super::membership`]).
//!
//! The two failpoint faults are fakes, and say so: this sandbox has no device-mapper (no
//! `dm-delay` under a data dir) and a SIGKILL cannot be aimed at the instant around an fsync.
//! A forced snapshot uses failpoints too: every other one crashes the follower inside the
//! install (after a chunk, or between the index's restore and the log's reset) before it is
//! started clean.

use std::time::Duration;

use std::os::unix::process::ExitStatusExt as _;

use rand::Rng;
use rand::rngs::StdRng;

use super::membership::{self, Change};
use crate::cluster::{Cluster, TOKEN};

/// A kind of fault (`--faults kill,pause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a master, start it again after a while.
    Kill,
    /// SIGSTOP a master, SIGCONT it after a while.
    Pause,
    /// Cut masters from each other (clients still reach every master), heal after a while.
    Partition,
    /// Fill a master's data directory to `ENOSPC`, free it after a while (and start the
    /// master again if it exited).
    DiskFull,
    /// SIGKILL a follower, start it again once the leader's log has been compacted past its
    /// last entry: it catches up from a streamed snapshot.
    Snapshot,
    /// Step a master's wall clock ahead or behind, step it back when healed.
    Clock,
    /// Delay every fsync of a master's log and index, stop delaying when healed.
    SlowDisk,
    /// Crash a master right before or after an fsync of its log or index, start it again
    /// when healed.
    FsyncCrash,
    /// Replace a master by a new one: add the new one, then remove the target when healed, or
    /// remove the target, then add the new one when healed.
    Membership,
}

/// Every fault kind, in the order a run's first rounds inject them.
pub const ALL: [Fault; 9] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Partition,
    Fault::DiskFull,
    Fault::Clock,
    Fault::SlowDisk,
    Fault::FsyncCrash,
    Fault::Membership,
    // Last: its heal waits for the log to pass the follower, and for the install.
    Fault::Snapshot,
];

/// The master's failpoints at its fsyncs ([`Fault::SlowDisk`] delays the first and third,
/// [`Fault::FsyncCrash`] crashes at one of the four): master/src/failpoints.rs.
pub const FSYNC_POINTS: [&str; 4] = [
    "log_fsync_before",
    "log_fsync_after",
    "index_commit_before",
    "index_commit_after",
];

/// The failpoints a forced snapshot crashes the follower at, every other time: after a chunk
/// of the stream is written, between the index's restore and the log's reset.
pub const SNAPSHOT_POINTS: [&str; 2] = ["snapshot_chunk_written", "snapshot_before_log_reset"];

/// SIGABRT: how a master crashed at a failpoint armed with `return` ends.
const SIGABRT: i32 = 6;

/// Each master's `--raft-log-retain` with [`Fault::Snapshot`] among a run's faults: a few
/// hundred of the run's entries, so that the log passes a stopped follower within seconds.
pub const SHORT_LOG: &str = "1MiB";

/// Entries past the leader's commit index when a follower was stopped that the leader's log
/// must also have dropped before the follower starts again: more than a follower can have
/// appended beyond that commit index (entries proposed but not yet committed).
const PAST_COMMIT: u64 = 256;

/// How long a heal waits for the log to pass a stopped follower, and then for it to install a
/// snapshot.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(30);

/// Each master's small filesystem with [`Fault::DiskFull`] among a run's faults, bytes: room for
/// what a run writes, so that only the fault fills it. A data directory holds every job's
/// report and result (about 4 KB a job with the demo crash: a 300 s run of 8 clients makes
/// about 150,000 jobs, 600 MB), and a master that joins (or one forced onto a snapshot) holds
/// the snapshot beside the index it restores from it: twice that. At 512 MiB, a 300 s run's
/// joining masters met ENOSPC by themselves (exit 74) while they installed the snapshot.
/// `tmpfs` takes memory only for the bytes written.
pub const SMALL_DISK_BYTES: u64 = 3 << 30;

impl Fault {
    /// Whether the cluster needs its masters in network namespaces for this fault
    /// ([`crate::cluster::MasterOptions::namespaces`]).
    pub fn needs_namespaces(self) -> bool {
        self == Fault::Partition
    }

    /// Whether the cluster needs each master's data directory on a small filesystem of its
    /// own ([`crate::cluster::MasterOptions::small_disks`]).
    pub fn needs_small_disks(self) -> bool {
        self == Fault::DiskFull
    }

    /// Whether the masters must keep a short log ([`SHORT_LOG`]) for this fault.
    pub fn needs_short_log(self) -> bool {
        self == Fault::Snapshot
    }

    /// Whether the masters' wall clocks must be movable
    /// ([`crate::cluster::MasterOptions::movable_clocks`]) for this fault.
    pub fn needs_movable_clocks(self) -> bool {
        self == Fault::Clock
    }

    /// Whether the masters must be a build with failpoints for this fault (see the module).
    pub fn needs_failpoints(self) -> bool {
        matches!(self, Fault::SlowDisk | Fault::FsyncCrash | Fault::Snapshot)
    }

    /// The name `--faults` takes.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Partition => "partition",
            Fault::DiskFull => "disk-full",
            Fault::Snapshot => "snapshot",
            Fault::Clock => "clock",
            Fault::SlowDisk => "slow-disk",
            Fault::FsyncCrash => "fsync-crash",
            Fault::Membership => "membership",
        }
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| {
            let names: Vec<&str> = ALL.iter().map(|f| f.name()).collect();
            format!("unknown fault {s:?}: {}", names.join(", "))
        })
    }
}

/// One injected fault, to be healed.
#[derive(Debug, Clone)]
pub struct Injected {
    /// What.
    pub fault: Fault,
    /// Which master.
    pub master: u64,
    /// How long before it is healed.
    pub lasts: Duration,
    /// What was done, when the fault kind does not say it all (a partition's shape and cuts).
    pub detail: String,
    /// [`Fault::Snapshot`]: the log index the leader's log must have dropped before the
    /// follower starts again.
    pub passed: Option<u64>,
    /// [`Fault::Snapshot`]: the failpoint the follower's first start crashes at, when this one
    /// crashes it inside the install.
    pub crash_at: Option<&'static str>,
    /// [`Fault::Membership`]: what the first half of the replacement did.
    pub change: Option<Change>,
}

/// The leader's member id now, asking each running master for at most 1 s; `None` when none
/// answers as leader. The id is the one the leader's answer gives itself, not the one of the
/// master asked: the client library follows the leader, so the answer may come from another.
pub async fn leader_now(cluster: &Cluster) -> Option<u64> {
    for m in cluster.masters.iter().filter(|m| m.proc.is_some()) {
        let ask = async {
            let client =
                symcluster_client::Client::connect_with(&m.endpoint(), TOKEN, cluster.tls())
                    .await
                    .ok()?;
            let status = client
                .admin()
                .cluster_status(symcluster_client::api::ClusterStatusRequest {})
                .await
                .ok()?;
            leader_in(status.get_ref())
        };
        if let Ok(Some(id)) = tokio::time::timeout(Duration::from_secs(1), ask).await {
            return Some(id);
        }
    }
    None
}

/// The leader's id in a ClusterStatus answer: the member the answering leader says is leader
/// (`None` when a follower answered, or the answer names none).
fn leader_in(status: &symcluster_client::api::ClusterStatusResponse) -> Option<u64> {
    if !status.from_leader {
        return None;
    }
    status
        .masters
        .iter()
        .find(|m| m.role == "leader")
        .map(|m| m.id)
}

/// Picks the `round`th fault (0-based) of a run among `faults`: the first rounds go through
/// every kind once, in `faults`' order, so that a short run injects each; later ones are
/// chosen by `rng`.
pub fn pick(faults: &[Fault], round: usize, rng: &mut StdRng) -> Fault {
    match faults.get(round) {
        Some(&fault) => fault,
        None => faults[rng.random_range(0..faults.len())],
    }
}

/// Injects `fault` into `cluster`, aimed at the leader `leader` or, with even odds or when
/// there is none, any master (a forced snapshot: a master other than the leader); described in
/// the returned value.
pub async fn inject(
    cluster: &mut Cluster,
    fault: Fault,
    leader: Option<u64>,
    rng: &mut StdRng,
) -> Injected {
    let members = cluster.members();
    // A forced snapshot needs the leader (the follower is one of the others, and the leader's
    // log is what must pass it): asked again for a while after an election.
    let mut leader = leader;
    if fault == Fault::Snapshot {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while leader.is_none() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
            leader = leader_now(cluster).await;
        }
    }
    let master = match (fault, leader) {
        (Fault::Snapshot, Some(leader)) => {
            let others: Vec<u64> = members.iter().copied().filter(|&m| m != leader).collect();
            others[rng.random_range(0..others.len())]
        }
        (_, Some(leader)) if rng.random_bool(0.5) && members.contains(&leader) => leader,
        _ => members[rng.random_range(0..members.len())],
    };
    let lasts = Duration::from_millis(rng.random_range(500..3_000));
    let mut passed = None;
    let mut crash_at = None;
    let mut change = None;
    let detail = match fault {
        Fault::Kill => {
            cluster.kill_master(master);
            String::new()
        }
        Fault::Pause => {
            cluster.pause_master(master);
            String::new()
        }
        Fault::Partition => {
            let shape = Partition::pick(master, &members, rng);
            for &(from, to) in &shape.cuts {
                cluster.partition_one_way(from, to);
            }
            shape.to_string()
        }
        Fault::DiskFull => {
            let filled = cluster.fill_master_disk(master);
            format!("{} MiB written to fill it", filled >> 20)
        }
        Fault::Clock => {
            let step = rng.random_range(60..=3_600) * if rng.random_bool(0.5) { 1 } else { -1 };
            cluster.step_master_clock(master, step);
            format!("wall clock {step:+} s")
        }
        Fault::SlowDisk => {
            let ms = rng.random_range(20..=250);
            let mut refused = Vec::new();
            for point in [FSYNC_POINTS[0], FSYNC_POINTS[2]] {
                if let Err(e) = cluster
                    .arm_failpoint(master, point, &format!("sleep({ms})"))
                    .await
                {
                    refused.push(e);
                }
            }
            if refused.is_empty() {
                format!("each fsync of its log and index {ms} ms late")
            } else {
                format!("not armed: {}", refused.join("; "))
            }
        }
        Fault::FsyncCrash => {
            let point = FSYNC_POINTS[rng.random_range(0..FSYNC_POINTS.len())];
            match cluster.arm_failpoint(master, point, "return").await {
                Ok(()) => format!("crashes at {point}"),
                Err(e) => format!("not armed: {e}"),
            }
        }
        Fault::Snapshot => {
            if rng.random_bool(0.5) {
                crash_at = Some(SNAPSHOT_POINTS[rng.random_range(0..SNAPSHOT_POINTS.len())]);
            }
            let commit = match leader {
                Some(leader) => {
                    cluster
                        .master_metric(leader, "symcluster_raft_commit_index")
                        .await
                }
                None => None,
            };
            cluster.kill_master(master);
            passed = commit.map(|c| c as u64 + PAST_COMMIT);
            let crash = crash_at.map_or(String::new(), |p| {
                format!("; its first start crashes at {p}")
            });
            match passed {
                Some(index) => {
                    format!("kept down until the leader's log starts after {index}{crash}")
                }
                None => "no leader known: not forced".into(),
            }
        }
        Fault::Membership => {
            let (made, detail) = membership::begin(cluster, master, rng.random_bool(0.5)).await;
            change = Some(made);
            detail
        }
    };
    Injected {
        fault,
        master,
        lasts,
        detail,
        passed,
        crash_at,
        change,
    }
}

/// Heals `injected`: starts the killed master again, continues the paused one, removes every
/// cut between masters, frees the full disk, or finishes a replacement (the target removed, or
/// the new master added: [`membership::finish`]); a forced snapshot first waits (at most
/// [`SNAPSHOT_WAIT`]) until the leader's log starts after [`Injected::passed`], then starts the
/// follower and waits as long for it to install a snapshot. What the heal saw, when there is
/// more to say than that it was healed.
pub async fn heal(cluster: &mut Cluster, injected: &Injected) -> Option<String> {
    match injected.fault {
        Fault::Kill => cluster.start_master(injected.master),
        Fault::Pause => cluster.resume_master(injected.master),
        Fault::Partition => cluster.heal_partitions(),
        Fault::DiskFull => cluster.free_master_disk(injected.master),
        Fault::Clock => cluster.step_master_clock(injected.master, 0),
        Fault::Snapshot => return Some(heal_snapshot(cluster, injected).await),
        Fault::Membership => {
            let change = injected.change.unwrap_or(Change::NotMade);
            return Some(membership::finish(cluster, injected.master, change).await);
        }
        Fault::SlowDisk => {
            for point in [FSYNC_POINTS[0], FSYNC_POINTS[2]] {
                if let Err(e) = cluster.disarm_failpoint(injected.master, point).await {
                    return Some(format!("not disarmed: {e}"));
                }
            }
        }
        Fault::FsyncCrash => {
            // A master that crashed at the point is started again by `restart_exited`; one
            // that never reached it is disarmed.
            if cluster.master_exited(injected.master).is_some() {
                return Some("it had crashed at the point".into());
            }
            for point in FSYNC_POINTS {
                if let Err(e) = cluster.disarm_failpoint(injected.master, point).await {
                    return Some(format!("the point not reached; not disarmed: {e}"));
                }
            }
            return Some("the point not reached".into());
        }
    }
    None
}

/// [`heal`] of a forced snapshot: what happened, `snapshot installed` when it worked (the
/// follower received a snapshot whole and handed it to Raft, and has applied past the entries
/// the leader's log had dropped).
async fn heal_snapshot(cluster: &mut Cluster, injected: &Injected) -> String {
    let Some(passed) = injected.passed else {
        cluster.start_master(injected.master);
        return "not forced: no leader known at the kill".into();
    };
    let deadline = tokio::time::Instant::now() + SNAPSHOT_WAIT;
    let mut first = None;
    while tokio::time::Instant::now() < deadline {
        if let Some(leader) = leader_now(cluster).await {
            first = cluster
                .master_metric(leader, "symcluster_raft_log_first_index")
                .await;
            if first.is_some_and(|f| f as u64 > passed) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let down = format!(
        "the leader's log started at {}",
        first.map_or("?".to_owned(), |f| f.to_string())
    );
    let crashed = match injected.crash_at {
        Some(point) => {
            cluster.start_master_armed(injected.master, &format!("{point}=return"));
            let status = cluster
                .wait_master_exit(injected.master, SNAPSHOT_WAIT)
                .await;
            if status.is_none() {
                // Not reached (the leader sent no snapshot in time): no crash to recover from.
                cluster.kill_master(injected.master);
            }
            match status {
                Some(s) if s.signal() == Some(SIGABRT) => format!("; crashed at {point}"),
                Some(s) => format!("; exited at its armed start ({s}), not at {point}"),
                None => format!("; {point} not reached within {SNAPSHOT_WAIT:?}"),
            }
        }
        None => String::new(),
    };
    let down = format!("{down}{crashed}");
    cluster.start_master(injected.master);
    let received = "symcluster_raft_snapshots_total{direction=\"received\",outcome=\"ok\"}";
    let deadline = tokio::time::Instant::now() + SNAPSHOT_WAIT;
    while tokio::time::Instant::now() < deadline {
        // The counter starts at 0 with the process: one means this start received one.
        let got = cluster.master_metric(injected.master, received).await;
        let applied = cluster
            .master_metric(injected.master, "symcluster_raft_applied_index")
            .await;
        // A crash between the index's restore and the log's reset left the snapshot installed
        // by the crashed start: this one finishes the reset and needs none.
        let installed_before = injected.crash_at == Some(SNAPSHOT_POINTS[1]);
        if (installed_before || got.is_some_and(|n| n >= 1.0))
            && applied.is_some_and(|a| a as u64 > passed)
        {
            return format!("{down}; snapshot installed");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    format!("{down}; no snapshot installed within {SNAPSHOT_WAIT:?}")
}

/// A master that exited by itself since the last look, and whether a fault explains it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exited {
    /// Which master.
    pub master: u64,
    /// Its exit status, as the shell shows it (`exit status: 74`).
    pub status: String,
    /// Whether it is what a master must do under `healed`, the fault just healed: exit 74
    /// (`EX_IOERR`) on its own full disk, SIGABRT at the fsync failpoint it was armed with.
    /// Any other exit is a crash.
    pub expected: bool,
}

/// Every master that exited by itself, each started again on its data directory, after
/// `healed` was healed.
pub fn restart_exited(cluster: &mut Cluster, healed: &Injected) -> Vec<Exited> {
    let mut exited = Vec::new();
    for master in cluster.members() {
        if let Some(status) = cluster.master_exited(master) {
            let expected = healed.master == master
                && match healed.fault {
                    Fault::DiskFull => status.code() == Some(74),
                    Fault::FsyncCrash => status.signal() == Some(SIGABRT),
                    _ => false,
                };
            exited.push(Exited {
                master,
                status: status.to_string(),
                expected,
            });
            cluster.start_master(master);
        }
    }
    exited
}

/// A partition's shape around its target, and the one-way cuts that make it: (master whose
/// sends are dropped, master they are for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// `isolated`, `bridge`, `one-way` or `minority`.
    pub shape: &'static str,
    /// The one-way cuts.
    pub cuts: Vec<(u64, u64)>,
}

impl Partition {
    /// A shape for `target` among the masters `members`, chosen by `rng`: `isolated` (cut both
    /// ways from every other master), `bridge` (the others split in two halves that cannot
    /// reach each other; the target reaches both), `one-way` (what the target sends to the
    /// others is dropped; it still hears them) and, with five masters or more, `minority` (the
    /// target and one other cut both ways from the rest).
    pub fn pick(target: u64, members: &[u64], rng: &mut StdRng) -> Self {
        let others: Vec<u64> = members.iter().copied().filter(|&m| m != target).collect();
        let shapes: &[&str] = if members.len() >= 5 {
            &["isolated", "bridge", "one-way", "minority"]
        } else {
            &["isolated", "bridge", "one-way"]
        };
        let shape = shapes[rng.random_range(0..shapes.len())];
        let both = |a: &[u64], b: &[u64]| {
            let mut cuts = Vec::new();
            for &x in a {
                for &y in b {
                    cuts.push((x, y));
                    cuts.push((y, x));
                }
            }
            cuts
        };
        let cuts = match shape {
            "isolated" => both(&[target], &others),
            "bridge" => {
                let (left, right) = others.split_at(others.len() / 2);
                both(left, right)
            }
            "one-way" => others.iter().map(|&o| (target, o)).collect(),
            _ => {
                let partner = others[rng.random_range(0..others.len())];
                let rest: Vec<u64> = others.iter().copied().filter(|&o| o != partner).collect();
                both(&[target, partner], &rest)
            }
        };
        Partition { shape, cuts }
    }
}

impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:", self.shape)?;
        for (from, to) in &self.cuts {
            write!(f, " {from}->{to}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use symcluster_client::api::{ClusterStatusResponse, MasterStatus};

    fn master(id: u64, role: &str) -> MasterStatus {
        MasterStatus {
            id,
            role: role.into(),
            ..MasterStatus::default()
        }
    }

    /// Each shape cuts what it says, around its target, and nothing else.
    #[test]
    fn partitions_cut_what_their_shape_says() {
        let mut seen = std::collections::BTreeMap::new();
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..200 {
            let p = Partition::pick(2, &[1, 2, 3], &mut rng);
            seen.insert(p.shape, p.cuts);
        }
        assert_eq!(seen["isolated"], vec![(2, 1), (1, 2), (2, 3), (3, 2)]);
        assert_eq!(seen["bridge"], vec![(1, 3), (3, 1)]);
        assert_eq!(seen["one-way"], vec![(2, 1), (2, 3)]);
        assert!(!seen.contains_key("minority"));
        let mut rng = StdRng::seed_from_u64(4);
        let minority = std::iter::repeat_with(|| Partition::pick(1, &[1, 2, 3, 4, 5], &mut rng))
            .find(|p| p.shape == "minority")
            .unwrap();
        // 1 and its partner against the three others, both ways: 2 × 3 × 2 cuts.
        assert_eq!(minority.cuts.len(), 12);
        let side: Vec<u64> = (1..=5)
            .filter(|&m| m == 1 || !minority.cuts.contains(&(1, m)))
            .collect();
        assert_eq!(side.len(), 2, "{minority}");
        assert!(
            minority
                .cuts
                .iter()
                .all(|(a, b)| side.contains(a) != side.contains(b)),
            "{minority}"
        );
        assert_eq!(minority.to_string().split(' ').next(), Some("minority:"));
    }

    /// Asked of master 1, answered by the leader, master 3: the leader is 3.
    #[test]
    fn the_leader_is_the_one_the_leaders_answer_names() {
        let status = ClusterStatusResponse {
            from_leader: true,
            masters: vec![
                master(1, "follower"),
                master(2, "follower"),
                master(3, "leader"),
            ],
            ..ClusterStatusResponse::default()
        };
        assert_eq!(leader_in(&status), Some(3));
        let from_follower = ClusterStatusResponse {
            from_leader: false,
            ..status
        };
        assert_eq!(leader_in(&from_follower), None);
    }
}

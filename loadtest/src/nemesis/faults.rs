//! The faults a nemesis run injects into a real local cluster, one at a time, at seeded random
//! times: a master SIGKILLed and started again on its data dir (a crash and restart), or
//! SIGSTOPped and continued (a process that stalls: a long GC pause, a VM migrated, a disk that
//! hangs; its peers see a silent member and its connections stay open). The target is the
//! leader or another master with even odds. Network partitions are the partition test's
//! (`tests/integration/partition.rs`, network namespaces), not yet the nemesis's.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

use crate::cluster::{Cluster, TOKEN};

/// A kind of fault (`--faults kill,pause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// SIGKILL a master, start it again after a while.
    Kill,
    /// SIGSTOP a master, SIGCONT it after a while.
    Pause,
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kill" => Ok(Fault::Kill),
            "pause" => Ok(Fault::Pause),
            other => Err(format!("unknown fault {other:?}: kill or pause")),
        }
    }
}

/// One injected fault, to be healed.
#[derive(Debug, Clone, Copy)]
pub struct Injected {
    /// What.
    pub fault: Fault,
    /// Which master.
    pub master: u64,
    /// How long before it is healed.
    pub lasts: Duration,
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

/// Picks a fault among `faults` and its target (the leader `leader` or, with even odds or
/// when there is none, any master of `masters`), and injects it into `cluster`; described in
/// the returned value.
pub fn inject(
    cluster: &mut Cluster,
    faults: &[Fault],
    leader: Option<u64>,
    rng: &mut StdRng,
) -> Injected {
    let fault = faults[rng.random_range(0..faults.len())];
    let masters = cluster.masters.len() as u64;
    let master = match leader {
        Some(leader) if rng.random_bool(0.5) => leader,
        _ => rng.random_range(1..=masters),
    };
    let lasts = Duration::from_millis(rng.random_range(500..3_000));
    match fault {
        Fault::Kill => cluster.kill_master(master),
        Fault::Pause => cluster.pause_master(master),
    }
    Injected {
        fault,
        master,
        lasts,
    }
}

/// Heals `injected`: starts the killed master again, or continues the paused one.
pub fn heal(cluster: &mut Cluster, injected: &Injected) {
    match injected.fault {
        Fault::Kill => cluster.start_master(injected.master),
        Fault::Pause => cluster.resume_master(injected.master),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use symcluster_client::api::{ClusterStatusResponse, MasterStatus};

    fn master(id: u64, role: &str) -> MasterStatus {
        MasterStatus {
            id,
            role: role.into(),
            ..MasterStatus::default()
        }
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

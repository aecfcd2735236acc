//! The nemesis's membership fault ([`super::faults::Fault::Membership`]): a master replaced
//! under load, as an operator replaces a lost or retired machine with `symctl admin members`
//! (docs/operator-guide.md), in one of two orders chosen by the run's seed:
//!
//! - **add, then remove**: a new master (the next id, an empty data dir) started with `--join`
//!   and added with `members add ID ADDRESS --wait 60s` (it receives the index as a snapshot
//!   and is promoted to voter); the group has one member more while the fault lasts; healed,
//!   the target is removed with `members remove ID` and stopped;
//! - **remove, then add**: the target removed and stopped first, the group one member short
//!   while the fault lasts; healed, the new master joins as above.
//!
//! The target may be the leader (removed, it hands leadership over). A change the group
//! refuses (`members remove` of a member whose peers are not up: fewer live voters than a
//! quorum) or that fails is read back from the leader's member list before anything else is
//! decided, so the test's view of the group ([`Cluster::members`]) stays the group's. After a
//! member is removed, the nemesis's clients and the workers are moved onto the new list of
//! masters (see [`super::run`]): an ingestion service's or worker's configured addresses are
//! an operator's to update, and after enough replacements none of the first ones would answer.

use std::time::Duration;

use symcluster_client::{Client, api};

use crate::cluster::{Cluster, TOKEN};

/// How long `members add --wait` waits for the new master to be a voter.
const ADD_WAIT: &str = "60s";

/// What the first half of a replacement did, for its heal to finish it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Master `.0` was added (a voter); the heal removes the target.
    Added(u64),
    /// The target was removed; the heal adds a new master.
    Removed,
    /// Nothing changed (the group refused, or the change failed): the heal does nothing.
    NotMade,
}

/// The first half of replacing `target`: adds a new master first when `add_first`, else removes
/// `target`. What was done, and the words for the run's events.
pub async fn begin(cluster: &mut Cluster, target: u64, add_first: bool) -> (Change, String) {
    if add_first {
        match add(cluster).await {
            Ok(new) => (
                Change::Added(new),
                format!("master {new} added; this one is removed when healed"),
            ),
            Err(why) => (Change::NotMade, why),
        }
    } else {
        match remove(cluster, target).await {
            Ok(()) => (
                Change::Removed,
                "removed; a new master is added when healed".into(),
            ),
            Err(why) => (Change::NotMade, why),
        }
    }
}

/// The second half of replacing `target` after [`begin`] did `change`: what it did.
pub async fn finish(cluster: &mut Cluster, target: u64, change: Change) -> String {
    match change {
        Change::Added(new) => match remove(cluster, target).await {
            Ok(()) => format!("removed, replaced by master {new}"),
            Err(why) => why,
        },
        Change::Removed => match add(cluster).await {
            Ok(new) => format!("replaced by master {new}"),
            Err(why) => why,
        },
        Change::NotMade => "nothing to finish".into(),
    }
}

/// Starts a new master with `--join` and adds it, waiting until it is a voter: its id, or why
/// it is not a member (then it is stopped and forgotten).
async fn add(cluster: &mut Cluster) -> Result<u64, String> {
    let new = cluster.join_master();
    let address = cluster.member_address(new);
    let id = new.to_string();
    let out = symctl(cluster, &["add", &id, &address, "--wait", ADD_WAIT]);
    if out.is_ok() {
        return Ok(new);
    }
    // Failed or unknown (the leader changed under the call): the group says whether it took it.
    match listed(cluster).await {
        Some(members) if members.contains(&new) => Ok(new),
        seen => {
            cluster.forget_master(new);
            Err(format!(
                "master {new} not added ({}; the group lists {seen:?})",
                out.unwrap_err()
            ))
        }
    }
}

/// Removes `target` and stops it, or says why it is still a member.
async fn remove(cluster: &mut Cluster, target: u64) -> Result<(), String> {
    let out = symctl(cluster, &["remove", &target.to_string()]);
    let gone = match &out {
        Ok(_) => true,
        Err(_) => listed(cluster)
            .await
            .is_some_and(|members| !members.contains(&target)),
    };
    if gone {
        cluster.forget_master(target);
        Ok(())
    } else {
        Err(format!("not removed ({})", out.unwrap_err()))
    }
}

/// `symctl admin members ARGS...`: its output, or its error output when it failed.
fn symctl(cluster: &Cluster, args: &[&str]) -> Result<String, String> {
    let mut all = vec!["admin", "members"];
    all.extend_from_slice(args);
    let out = tokio::task::block_in_place(|| cluster.symctl(&all));
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "symctl {}: {}",
            all.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The member ids the leader lists, asked for at most 20 s; `None` when no leader answered.
async fn listed(cluster: &Cluster) -> Option<Vec<u64>> {
    let ask = async {
        let client = Client::connect_with(&cluster.endpoint, TOKEN, cluster.tls())
            .await
            .ok()?;
        let members = client
            .on_leader(|channel| async move {
                api::admin_client::AdminClient::new(channel)
                    .list_members(api::ListMembersRequest {})
                    .await
                    .map(tonic::Response::into_inner)
            })
            .await
            .ok()?;
        Some(members.members.iter().map(|m| m.id).collect())
    };
    tokio::time::timeout(Duration::from_secs(20), ask)
        .await
        .ok()
        .flatten()
}

//! Membership changes of the master group, with raft-rs's joint consensus (`ConfChangeV2`).
//!
//! ```text
//! symctl admin members add 4 ADDR ─AddMember─► leader: checks (no change in progress, id free)
//!     ─► ConfChangeV2 [AddLearnerNode 4] (context: the address) ─► committed ─► applied on every
//!        master: raft-rs's ConfState + the index's `membership` record, one transaction
//!        (`index::members`); transport and peer service learn the address
//!     ─► the leader's append to 4 finds its log empty: 4 gets a snapshot (a member with an
//!        empty log always does: the log's first entry is compacted, `RaftStorage::maybe_compact`)
//!        which carries the membership ─► 4 catches up from the log
//!     ─► the leader, once 4's match index is within [`PROMOTE_WITHIN`] of its last index:
//!        ConfChangeV2 [AddNode 4] ─► 4 is a voter
//! symctl admin members remove 3 ─RemoveMember─► leader ─► ConfChangeV2 [RemoveNode 3]
//!     (several ids: one joint configuration, left automatically once applied)
//! ```
//!
//! The leader also records which members took part in the group (`MembersSeen`: their match
//! index passed 0): a master whose data dir is empty and whose id the group saw is refused at
//! start ([`super::join`]), since a voter that forgot its vote and log breaks Raft's safety.
//!
//! Addresses are the group's, not the flags': once a membership was written, `--peers` only
//! serves to reach the group the first time (a new group, or `--join`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use raft::prelude::{ConfChangeSingle, ConfChangeType, ConfChangeV2, ConfState};
use symcluster_proto::cluster::v1 as pb;

/// A learner is promoted once its match index is within this many entries of the leader's
/// last index (and it answered recently).
pub const PROMOTE_WITHIN: u64 = 1024;

/// Every member's gRPC address, as this master knows them now: shared by the node thread (which
/// changes it when a membership change is applied), the transport, the peer service (which
/// accepts messages from members only) and the admin API.
#[derive(Clone, Default)]
pub struct Members {
    inner: Arc<RwLock<BTreeMap<u64, String>>>,
}

impl Members {
    /// Members with these addresses (id → `http://host:port`).
    pub fn new(addresses: BTreeMap<u64, String>) -> Self {
        Members {
            inner: Arc::new(RwLock::new(addresses)),
        }
    }

    /// Every member's address, by id.
    pub fn addresses(&self) -> BTreeMap<u64, String> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Member `id`'s address.
    pub fn address(&self, id: u64) -> Option<String> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .cloned()
    }

    /// Whether `id` is a member.
    pub fn contains(&self, id: u64) -> bool {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&id)
    }

    /// How many members there are.
    pub fn len(&self) -> usize {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Replaces the addresses.
    pub fn set(&self, addresses: BTreeMap<u64, String>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = addresses;
    }
}

/// The addresses of `membership`'s members, and `known` for any id it does not give one for
/// (a joining master's `--peers`, before the group's membership reached it).
pub fn addresses(
    membership: Option<&pb::Membership>,
    known: &BTreeMap<u64, String>,
) -> BTreeMap<u64, String> {
    match membership {
        Some(m) if !m.members.is_empty() => m
            .members
            .iter()
            .map(|member| (member.id, member.address.clone()))
            .collect(),
        _ => known.clone(),
    }
}

/// A new group's membership: `addresses`' members, all voters.
pub fn bootstrap(addresses: &BTreeMap<u64, String>) -> pb::Membership {
    use prost011::Message as _;
    let conf_state = ConfState::from((
        addresses.keys().copied().collect::<Vec<u64>>(),
        Vec::<u64>::new(),
    ));
    pb::Membership {
        members: addresses
            .iter()
            .map(|(&id, address)| pb::MemberRecord {
                id,
                address: address.clone(),
                learner: false,
                seen: false,
            })
            .collect(),
        conf_state: conf_state.encode_to_vec(),
    }
}

/// raft-rs's `ConfState` of `membership` (`None`: none written, or unreadable).
pub fn conf_state(membership: &pb::Membership) -> Option<ConfState> {
    use prost011::Message as _;
    ConfState::decode(membership.conf_state.as_slice())
        .ok()
        .filter(|cs| !cs.voters.is_empty())
}

/// The membership after `change` was applied and gave `conf_state`: every id of `conf_state`
/// (voters, learners, outgoing voters), with its address from `before`, or from the change's
/// context for the member it adds ([`add_learner`]), or from `known`.
pub fn after_change(
    before: Option<&pb::Membership>,
    change: &ConfChangeV2,
    conf_state: &ConfState,
    known: &BTreeMap<u64, String>,
) -> pb::Membership {
    use prost011::Message as _;
    let added_address = String::from_utf8(change.context.clone()).unwrap_or_default();
    let added: Vec<u64> = change
        .changes
        .iter()
        .filter(|c| c.change_type() != ConfChangeType::RemoveNode)
        .map(|c| c.node_id)
        .collect();
    let mut ids: Vec<u64> = conf_state
        .voters
        .iter()
        .chain(&conf_state.learners)
        .chain(&conf_state.voters_outgoing)
        .chain(&conf_state.learners_next)
        .copied()
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let previous = |id: u64| before.and_then(|m| m.members.iter().find(|r| r.id == id));
    let members = ids
        .into_iter()
        .map(|id| {
            let address = previous(id)
                .map(|r| r.address.clone())
                .filter(|a| !a.is_empty())
                .or_else(|| {
                    (added.len() == 1 && added[0] == id && !added_address.is_empty())
                        .then(|| added_address.clone())
                })
                .or_else(|| known.get(&id).cloned())
                .unwrap_or_default();
            pb::MemberRecord {
                id,
                address,
                learner: conf_state.learners.contains(&id) && !conf_state.voters.contains(&id),
                seen: previous(id).is_some_and(|r| r.seen),
            }
        })
        .collect();
    pb::Membership {
        members,
        conf_state: conf_state.encode_to_vec(),
    }
}

fn single(node_id: u64, change_type: ConfChangeType) -> ConfChangeSingle {
    let mut change = ConfChangeSingle {
        node_id,
        ..ConfChangeSingle::default()
    };
    change.set_change_type(change_type);
    change
}

/// Adds `id` as a learner at `address` (carried in the change's context).
pub fn add_learner(id: u64, address: &str) -> ConfChangeV2 {
    ConfChangeV2 {
        changes: vec![single(id, ConfChangeType::AddLearnerNode)],
        context: address.as_bytes().to_vec(),
        ..ConfChangeV2::default()
    }
}

/// Makes learner `id` a voter.
pub fn promote(id: u64) -> ConfChangeV2 {
    ConfChangeV2 {
        changes: vec![single(id, ConfChangeType::AddNode)],
        ..ConfChangeV2::default()
    }
}

/// Removes `ids` (more than one voter: a joint configuration, left automatically).
pub fn remove(ids: &[u64]) -> ConfChangeV2 {
    ConfChangeV2 {
        changes: ids
            .iter()
            .map(|&id| single(id, ConfChangeType::RemoveNode))
            .collect(),
        ..ConfChangeV2::default()
    }
}

/// Leaves a joint configuration (the change raft-rs proposes itself when it may; a new leader
/// proposes it when the old one could not).
pub fn leave_joint() -> ConfChangeV2 {
    ConfChangeV2::default()
}

/// Why a membership change asked for is refused (checked on the leader before proposing).
pub fn check_add(conf_state: &ConfState, id: u64, address: &str) -> Result<(), String> {
    if id == 0 {
        return Err("member ids start at 1".into());
    }
    if conf_state.voters.contains(&id)
        || conf_state.learners.contains(&id)
        || conf_state.voters_outgoing.contains(&id)
    {
        return Err(format!("member {id} is already in the group"));
    }
    if !(address.starts_with("http://") || address.starts_with("https://"))
        || tonic::transport::Endpoint::from_shared(address.to_owned()).is_err()
    {
        return Err(format!(
            "{address:?} is not a gRPC address (http://host:port or https://host:port)"
        ));
    }
    Ok(())
}

/// Why removing `ids` is refused: an id not in the group, or no voter left.
pub fn check_remove(conf_state: &ConfState, ids: &[u64]) -> Result<(), String> {
    if ids.is_empty() {
        return Err("no member to remove".into());
    }
    for id in ids {
        if !conf_state.voters.contains(id) && !conf_state.learners.contains(id) {
            return Err(format!("member {id} is not in the group"));
        }
    }
    if conf_state.voters.iter().all(|v| ids.contains(v)) {
        return Err("that would leave the group without a voter".into());
    }
    Ok(())
}

/// Whether `conf_state` is a joint configuration (a change not finished).
pub fn is_joint(conf_state: &ConfState) -> bool {
    !conf_state.voters_outgoing.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> BTreeMap<u64, String> {
        (1..=3)
            .map(|id| (id, format!("http://127.0.0.1:700{id}")))
            .collect()
    }

    #[test]
    fn a_learner_added_takes_its_address_from_the_change_and_keeps_the_others() {
        let before = bootstrap(&known());
        let change = add_learner(4, "http://10.0.0.4:7700");
        let cs = ConfState::from((vec![1, 2, 3], vec![4]));
        let after = after_change(Some(&before), &change, &cs, &BTreeMap::new());
        let rows: Vec<(u64, &str, bool)> = after
            .members
            .iter()
            .map(|m| (m.id, m.address.as_str(), m.learner))
            .collect();
        assert_eq!(
            rows,
            vec![
                (1, "http://127.0.0.1:7001", false),
                (2, "http://127.0.0.1:7002", false),
                (3, "http://127.0.0.1:7003", false),
                (4, "http://10.0.0.4:7700", true),
            ]
        );
        assert_eq!(conf_state(&after), Some(cs));
    }

    #[test]
    fn a_promoted_learner_is_a_voter_and_a_removed_member_is_gone_with_seen_kept() {
        let mut before = bootstrap(&known());
        before.members[1].seen = true;
        let cs = ConfState::from((vec![2, 3, 4], Vec::<u64>::new()));
        let mut with_four = before.clone();
        with_four.members.push(pb::MemberRecord {
            id: 4,
            address: "http://10.0.0.4:7700".into(),
            learner: true,
            seen: true,
        });
        let after = after_change(Some(&with_four), &remove(&[1]), &cs, &BTreeMap::new());
        let rows: Vec<(u64, bool, bool)> = after
            .members
            .iter()
            .map(|m| (m.id, m.learner, m.seen))
            .collect();
        assert_eq!(
            rows,
            vec![(2, false, true), (3, false, false), (4, false, true)]
        );
    }

    #[test]
    fn changes_that_cannot_be_made_are_refused_with_the_reason() {
        let cs = ConfState::from((vec![1, 2, 3], vec![4]));
        assert_eq!(
            check_add(&cs, 2, "http://h:1"),
            Err("member 2 is already in the group".into())
        );
        assert_eq!(
            check_add(&cs, 4, "http://h:1"),
            Err("member 4 is already in the group".into())
        );
        assert!(
            check_add(&cs, 5, "h:1")
                .unwrap_err()
                .contains("not a gRPC address")
        );
        assert_eq!(check_add(&cs, 5, "http://h:1"), Ok(()));
        assert_eq!(
            check_remove(&cs, &[7]),
            Err("member 7 is not in the group".into())
        );
        assert_eq!(
            check_remove(&cs, &[1, 2, 3]),
            Err("that would leave the group without a voter".into())
        );
        assert_eq!(check_remove(&cs, &[1, 4]), Ok(()));
    }
}

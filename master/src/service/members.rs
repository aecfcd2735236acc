//! `Admin/ListMembers`, `Admin/AddMember`, `Admin/RemoveMember`: the master group's membership
//! as operators read and change it (`symctl admin members`); the changes themselves are made
//! by the Raft node ([`crate::raft::membership`]).

use symcluster_proto::v1;
use tonic::Status;

use crate::raft::{MemberChange, ProposeError, RaftStatus};
use crate::replica::RaftHandle;

/// The group's members as `raft` knows them now.
pub fn list(raft: &RaftHandle) -> v1::ListMembersResponse {
    view(&raft.status(), raft)
}

fn view(status: &RaftStatus, raft: &RaftHandle) -> v1::ListMembersResponse {
    let is_leader = status.role == raft::StateRole::Leader;
    let records = status
        .membership
        .as_ref()
        .map(|m| m.members.clone())
        .unwrap_or_default();
    // Before a membership reached it (a joining master), the addresses it was given.
    let records = if records.is_empty() {
        raft.members
            .addresses()
            .into_iter()
            .map(
                |(id, address)| symcluster_proto::cluster::v1::MemberRecord {
                    id,
                    address,
                    learner: false,
                    seen: false,
                },
            )
            .collect()
    } else {
        records
    };
    let members = records
        .into_iter()
        .map(|record| {
            let matched = if record.id == status.id {
                Some(status.last_index)
            } else {
                status
                    .progress
                    .iter()
                    .find(|(id, _)| *id == record.id)
                    .map(|(_, m)| *m)
            };
            let role = if status.outgoing.contains(&record.id) && !record.learner {
                "outgoing"
            } else if record.learner {
                "learner"
            } else {
                "voter"
            };
            v1::Member {
                id: record.id,
                address: record.address,
                role: role.into(),
                leader: record.id == status.leader_id,
                match_index: matched.unwrap_or(0),
                lag: if is_leader {
                    matched.map_or(0, |m| status.last_index.saturating_sub(m))
                } else {
                    0
                },
                last_contact_ms_ago: status
                    .last_contact_ms
                    .iter()
                    .find(|(id, _)| *id == record.id)
                    .map(|(_, ms)| *ms),
                seen: record.seen,
            }
        })
        .collect();
    v1::ListMembersResponse {
        members,
        leader_id: status.leader_id,
        term: status.term,
        commit_index: status.commit,
        answered_by: status.id,
        changing: status.changing,
        restored_from: None,
    }
}

/// Makes `change` through `raft`; the members after it. Errors: UNAVAILABLE (with the leader)
/// on a follower, or on a leader asked to remove itself (it hands leadership over);
/// FAILED_PRECONDITION with the reason a change cannot be made now.
pub async fn change(
    raft: &RaftHandle,
    change: MemberChange,
) -> Result<v1::ListMembersResponse, Status> {
    match raft.change_members(change).await {
        Ok(()) => Ok(list(raft)),
        Err(ProposeError::NotLeader { leader: None }) if raft.is_leader() => {
            Err(Status::unavailable(
                "this master leads the group and was asked to remove itself: it hands leadership to another member now; ask again",
            ))
        }
        Err(e) => Err(super::propose_status(e)),
    }
}

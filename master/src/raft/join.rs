//! What a master with an empty data dir may do: start a new group (every member starts empty),
//! join an existing group as a new member (`--join`), or nothing, when the group already saw
//! a member under its id (a master whose disk was lost or wiped: as a voter it would have
//! forgotten its term, its vote and its log, which breaks Raft's safety).
//!
//! Before its Raft member starts, such a master asks the other masters it knows
//! (`Admin/ListMembers`, with the admin token, [`ASK_TIMEOUT`] each, all at once) what group
//! they hold. Members that cannot be reached are not counted: when none answers, it starts (a
//! new group whose other members are not up yet). Beside a master restored from a backup
//! (`--restore`, which it says in its answer) it refuses unless it joins: empty members could
//! elect each other and overwrite the backup's jobs. A master to be restored asks too, and
//! refuses beside a group that was not restored from the same backup. One that runs but
//! answers an error (an earlier version without `ListMembers`, another token) makes it refuse:
//! it cannot tell. The residual risk — every other member down at the moment a wiped voter
//! starts — is written in `docs/operator-guide.md`, "Replace a dead master".

use std::collections::BTreeMap;
use std::time::Duration;

use symcluster_client::BearerToken;
use symcluster_proto::v1::{self, admin_client::AdminClient};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Endpoint;

/// How long a master waits for each other master's answer.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// Checks that master `id`, whose data dir is empty, may start: `join` when it joins an existing
/// group (`--join`), else as a member of a new one. `addresses`: the other masters it knows
/// (`--peers`). Errors: the reason it may not, with what to do, as one message.
pub async fn check_empty_start(
    id: u64,
    join: bool,
    addresses: &BTreeMap<u64, String>,
    token: &str,
    tls: &symcluster_client::Tls,
) -> Result<(), String> {
    check_answers(
        id,
        addresses,
        token,
        tls,
        "this master's data dir is empty",
        |peer, address, group| empty_start_refusal(id, join, peer, address, group),
    )
    .await
}

/// Checks that master `id`, whose data dir is empty, may be seeded from the backup whose
/// SHA-256 is `sha256` (`--restore`) beside the other masters it knows (`addresses`): each that
/// answers must have been restored from the same backup or hold no group yet. Errors: the
/// reason it may not, with what to do, as one message.
pub async fn check_restore_start(
    id: u64,
    sha256: &[u8; 32],
    addresses: &BTreeMap<u64, String>,
    token: &str,
    tls: &symcluster_client::Tls,
) -> Result<(), String> {
    check_answers(
        id,
        addresses,
        token,
        tls,
        "this master is to be restored from a backup",
        |peer, address, group| restore_start_refusal(sha256, peer, address, group),
    )
    .await
}

/// Asks every master of `addresses` but `id` at once ([`ASK_TIMEOUT`] each) and checks each
/// group answered with `refusal`; those that cannot be reached are not counted. One that runs
/// but answers an error (an earlier version without ListMembers, another token, TLS refused)
/// makes it refuse: it cannot tell whether starting is safe. `situation` opens that message.
async fn check_answers(
    id: u64,
    addresses: &BTreeMap<u64, String>,
    token: &str,
    tls: &symcluster_client::Tls,
    situation: &str,
    refusal: impl Fn(u64, &str, &v1::ListMembersResponse) -> Result<(), String>,
) -> Result<(), String> {
    let asks = addresses
        .iter()
        .filter(|(peer, _)| **peer != id)
        .map(|(&peer, address)| async move { (peer, address, ask(address, token, tls).await) });
    for (peer, address, answer) in futures::future::join_all(asks).await {
        match answer {
            Answer::Group(group) => refusal(peer, address, &group)?,
            Answer::Unreachable => {}
            Answer::Refused(status) => {
                return Err(format!(
                    "{situation} and master {peer} at {address} does not say what group it \
                     holds ({:?}: {}); a master with an empty data dir starts only when the \
                     other masters that run answer Admin/ListMembers (the same admin token, \
                     this version or later)",
                    status.code(),
                    status.message()
                ));
            }
        }
    }
    Ok(())
}

/// Why master `id` (empty data dir; `join`: `--join`) may not start, given the group `group`
/// that master `peer` at `address` answered; `Ok` when that answer does not stop it.
fn empty_start_refusal(
    id: u64,
    join: bool,
    peer: u64,
    address: &str,
    group: &v1::ListMembersResponse,
) -> Result<(), String> {
    let me = group.members.iter().find(|m| m.id == id);
    if me.is_some_and(|m| m.seen) {
        return Err(format!(
            "this master's data dir is empty, but member {id} has already taken part in the \
             group (master {peer} at {address} says so, term {}, commit index {}): a member \
             that lost its log and vote must not vote again. To replace it: `symctl admin \
             members remove {id}`, then start this master under a new id with --join and \
             `symctl admin members add NEW_ID ADDRESS` (docs/operator-guide.md: \"Replace a dead master\")",
            group.term, group.commit_index
        ));
    }
    // Empty members beside a restored one could elect each other and overwrite the backup's
    // jobs (they are a majority of three): they are restored from the same backup, or join.
    if let Some(restored) = group.restored_from.as_ref().filter(|_| !join) {
        return Err(format!(
            "this master's data dir is empty and master {peer} at {address} was restored from \
             a backup (SHA-256 {}, applied index {}, term {}): started empty beside it, this \
             master and other empty ones could form a group without the backup's jobs and \
             overwrite them. Start this master with --restore of the same backup, or let the \
             restored master run alone (--peers naming only itself) and add this one with \
             --join and `symctl admin members add {id} ADDRESS` (docs/operator-guide.md: \
             \"Restore from a backup\")",
            hex::encode(&restored.sha256),
            restored.applied_index,
            restored.applied_term
        ));
    }
    if !join && me.is_none() && group.commit_index > 0 {
        let ids: Vec<String> = group.members.iter().map(|m| m.id.to_string()).collect();
        return Err(format!(
            "this master's data dir is empty and master {peer} at {address} already holds a \
             group (members {}, commit index {}) that {id} is not in: to add this master, \
             start it with --join and run `symctl admin members add {id} ADDRESS`",
            ids.join(", "),
            group.commit_index
        ));
    }
    Ok(())
}

/// Why a master may not be seeded from the backup of SHA-256 `sha256`, given the group `group`
/// that master `peer` at `address` answered; `Ok` when that master was restored from the same
/// backup, or holds no group yet (an empty member waiting for the others: it catches up from
/// the restored ones).
fn restore_start_refusal(
    sha256: &[u8; 32],
    peer: u64,
    address: &str,
    group: &v1::ListMembersResponse,
) -> Result<(), String> {
    match &group.restored_from {
        Some(restored) if restored.sha256 == sha256 => Ok(()),
        Some(restored) => Err(format!(
            "this master is to be restored from the backup of SHA-256 {}, but master {peer} at \
             {address} was restored from another (SHA-256 {}, applied index {}): the members of \
             a new group are all restored from the same backup",
            hex::encode(sha256),
            hex::encode(&restored.sha256),
            restored.applied_index
        )),
        None if group.commit_index > 0 => Err(format!(
            "this master is to be restored from a backup, but master {peer} at {address} holds \
             a group that was not restored from it (term {}, commit index {}): beside it, the \
             backup's jobs and that group's log would conflict. Stop that group's masters and \
             start each with an empty --data-dir and --restore of this backup, or restore this \
             master alone (--peers naming only itself) and add the others with --join",
            group.term, group.commit_index
        )),
        None => Ok(()),
    }
}

/// What a master answered.
enum Answer {
    /// Its group.
    Group(v1::ListMembersResponse),
    /// Nothing: not running, not reachable, or not in time.
    Unreachable,
    /// An error status: it runs but did not say.
    Refused(tonic::Status),
}

/// `Admin/ListMembers` of the master at `address`.
async fn ask(address: &str, token: &str, tls: &symcluster_client::Tls) -> Answer {
    let refused = |message: String| Answer::Refused(tonic::Status::invalid_argument(message));
    let endpoint = match Endpoint::from_shared(address.to_owned()) {
        Ok(endpoint) => endpoint,
        Err(e) => return refused(format!("not an address: {e}")),
    };
    let endpoint = match tls.apply(endpoint, address) {
        Ok(endpoint) => endpoint.connect_timeout(ASK_TIMEOUT).timeout(ASK_TIMEOUT),
        Err(e) => return refused(format!("TLS settings: {e}")),
    };
    let Ok(token) = BearerToken::new(token) else {
        return refused("the admin token is not a valid header value".into());
    };
    let call = async {
        let Ok(channel) = endpoint.connect().await else {
            return Answer::Unreachable;
        };
        let mut client = AdminClient::new(InterceptedService::new(channel, token));
        match client.list_members(v1::ListMembersRequest {}).await {
            Ok(response) => Answer::Group(response.into_inner()),
            Err(status) if status.code() == tonic::Code::Unavailable => Answer::Unreachable,
            Err(status) if status.code() == tonic::Code::DeadlineExceeded => Answer::Unreachable,
            Err(status) => Answer::Refused(status),
        }
    };
    tokio::time::timeout(ASK_TIMEOUT, call)
        .await
        .unwrap_or(Answer::Unreachable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, seen: bool) -> v1::Member {
        v1::Member {
            id,
            seen,
            ..Default::default()
        }
    }

    /// Master 1's answer: a group of 1, 2 and 3 none of which the leader saw yet, at
    /// `commit_index`, restored from a backup of SHA-256 `[7; 32]` or not.
    fn group(commit_index: u64, restored: bool) -> v1::ListMembersResponse {
        v1::ListMembersResponse {
            members: vec![member(1, false), member(2, false), member(3, false)],
            term: 3,
            commit_index,
            restored_from: restored.then(|| v1::RestoredFrom {
                sha256: vec![7; 32],
                applied_index: 90,
                applied_term: 3,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_empty_member_beside_a_restored_one_is_refused_unless_it_joins() {
        // Before: master 2, empty, listed in --peers, started beside restored master 1 (commit
        // index 90, nobody seen yet) and could elect master 3 (empty too) over it.
        let refusal = empty_start_refusal(2, false, 1, "http://m1:7000", &group(90, true))
            .expect_err("an empty master beside a restored one");
        assert!(
            refusal.contains(&format!(
                "was restored from a backup (SHA-256 {}, applied index 90, term 3)",
                "07".repeat(32)
            )) && refusal.contains("--restore of the same backup")
                && refusal.contains("--join"),
            "{refusal}"
        );
        // Joining (after `symctl admin members add`) is how it grows a restored group.
        assert_eq!(
            empty_start_refusal(4, true, 1, "http://m1:7000", &group(90, true)),
            Ok(())
        );
        // A new group whose first members are up: an unseen member may start empty.
        assert_eq!(
            empty_start_refusal(3, false, 1, "http://m1:7000", &group(2, false)),
            Ok(())
        );
        // A wiped member is told that first, restored group or not.
        let mut wiped = group(90, true);
        wiped.members[1].seen = true;
        let refusal = empty_start_refusal(2, false, 1, "http://m1:7000", &wiped).unwrap_err();
        assert!(
            refusal.contains("member 2 has already taken part"),
            "{refusal}"
        );
    }

    #[test]
    fn a_master_is_restored_only_beside_the_same_backup_or_an_empty_member() {
        let same = [7u8; 32];
        assert_eq!(
            restore_start_refusal(&same, 1, "http://m1:7000", &group(90, true)),
            Ok(())
        );
        // An empty member that waits for the group (nothing committed, not restored).
        assert_eq!(
            restore_start_refusal(&same, 1, "http://m1:7000", &group(0, false)),
            Ok(())
        );
        let other = [9u8; 32];
        let refusal = restore_start_refusal(&other, 1, "http://m1:7000", &group(90, true))
            .expect_err("another backup");
        assert!(
            refusal.contains(&format!("the backup of SHA-256 {}", "09".repeat(32)))
                && refusal.contains(&format!("another (SHA-256 {}", "07".repeat(32))),
            "{refusal}"
        );
        // Empty masters started first formed a group of their own: restoring beside it would
        // put two histories in one group.
        let refusal = restore_start_refusal(&same, 1, "http://m1:7000", &group(5, false))
            .expect_err("a group not restored");
        assert!(
            refusal
                .contains("holds a group that was not restored from it (term 3, commit index 5)"),
            "{refusal}"
        );
    }
}

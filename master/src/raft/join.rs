//! What a master with an empty data dir may do: start a new group (every member starts empty),
//! join an existing group as a new member (`--join`), or nothing, when the group already saw
//! a member under its id (a master whose disk was lost or wiped: as a voter it would have
//! forgotten its term, its vote and its log, which breaks Raft's safety).
//!
//! Before its Raft member starts, such a master asks the other masters it knows
//! (`Admin/ListMembers`, with the admin token, [`ASK_TIMEOUT`] each, all at once) what group
//! they hold. Members that cannot be reached are not counted: when none answers, it starts (a
//! new group whose other members are not up yet). One that runs but answers an error (an
//! earlier version without `ListMembers`, another token) makes it refuse: it cannot tell. The residual risk — every other member down at
//! the moment a wiped voter starts — is written in `docs/operator-guide.md`, "Replace a dead master".

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
    let asks = addresses
        .iter()
        .filter(|(peer, _)| **peer != id)
        .map(|(&peer, address)| async move { (peer, ask(address, token, tls).await) });
    let answers = futures::future::join_all(asks).await;
    for (peer, answer) in answers {
        let address = addresses.get(&peer).cloned().unwrap_or_default();
        let group = match answer {
            Answer::Group(group) => group,
            Answer::Unreachable => continue,
            // It runs, but does not say: an earlier version (no ListMembers), another token,
            // TLS refused. Starting could let a wiped voter vote again: refuse.
            Answer::Refused(status) => {
                return Err(format!(
                    "this master's data dir is empty and master {peer} at {address} does not \
                     say whether member {id} took part in the group ({:?}: {}); a master with an \
                     empty data dir starts only when the other masters that run answer \
                     Admin/ListMembers (the same admin token, this version or later)",
                    status.code(),
                    status.message()
                ));
            }
        };
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
    }
    Ok(())
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

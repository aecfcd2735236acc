//! What a master with an empty data dir may do: start a new group (every member starts empty),
//! join an existing group as a new member (`--join`), or nothing, when the group already saw
//! a member under its id (a master whose disk was lost or wiped: as a voter it would have
//! forgotten its term, its vote and its log, which breaks Raft's safety).
//!
//! Before its Raft member starts, such a master asks the other masters it knows
//! (`Admin/ListMembers`, with the admin token, [`ASK_TIMEOUT`] each, all at once) what group
//! they hold. Members that do not answer are not counted: when none answers, it starts (a new
//! group whose other members are not up yet). The residual risk — every other member down at
//! the moment a wiped voter starts — is written in the README's "Replace a dead master".

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
        let Some(group) = answer else {
            continue;
        };
        let address = addresses.get(&peer).cloned().unwrap_or_default();
        let me = group.members.iter().find(|m| m.id == id);
        if me.is_some_and(|m| m.seen) {
            return Err(format!(
                "this master's data dir is empty, but member {id} has already taken part in the \
                 group (master {peer} at {address} says so, term {}, commit index {}): a member \
                 that lost its log and vote must not vote again. To replace it: `symctl admin \
                 members remove {id}`, then start this master under a new id with --join and \
                 `symctl admin members add NEW_ID ADDRESS` (README: \"Replace a dead master\")",
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

/// `Admin/ListMembers` of the master at `address`; `None` when it does not answer in time.
async fn ask(
    address: &str,
    token: &str,
    tls: &symcluster_client::Tls,
) -> Option<v1::ListMembersResponse> {
    let endpoint = Endpoint::from_shared(address.to_owned()).ok()?;
    let endpoint = tls
        .apply(endpoint, address)
        .ok()?
        .connect_timeout(ASK_TIMEOUT)
        .timeout(ASK_TIMEOUT);
    let call = async {
        let channel = endpoint.connect().await.ok()?;
        let token = BearerToken::new(token).ok()?;
        let mut client = AdminClient::new(InterceptedService::new(channel, token));
        client
            .list_members(v1::ListMembersRequest {})
            .await
            .ok()
            .map(tonic::Response::into_inner)
    };
    tokio::time::timeout(ASK_TIMEOUT, call).await.ok().flatten()
}

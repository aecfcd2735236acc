//! `symctl admin members [add ID ADDRESS | remove ID...]`: the master group's membership.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use symcluster_client::api;
use symcluster_client::api::admin_client::AdminClient;

use crate::cli::{MembersArgs, MembersChange, Output};

/// Lists the members, or makes the change and lists them after it (on the leader, followed
/// through failovers); `add --wait` then waits until the new member is a voter.
pub async fn run(args: MembersArgs) -> anyhow::Result<()> {
    let client = super::cluster::connect(&args.master).await?;
    let members = match &args.change {
        None => list(&client).await?,
        Some(MembersChange::Add { id, address, wait }) => {
            let added = client
                .on_leader(|channel| {
                    let request = api::AddMemberRequest {
                        id: *id,
                        address: address.clone(),
                    };
                    async move {
                        AdminClient::new(channel)
                            .add_member(request)
                            .await
                            .map(|response| response.into_inner())
                    }
                })
                .await
                .with_context(|| format!("member {id} was not added"))?;
            super::note(format!(
                "member {id} added as a learner; the leader promotes it once it caught up"
            ));
            match wait {
                Some(within) => wait_for_voter(&client, *id, *within).await?,
                None => added,
            }
        }
        Some(MembersChange::Remove { ids, force }) => {
            let removed = client
                .on_leader(|channel| {
                    let request = api::RemoveMemberRequest {
                        ids: ids.clone(),
                        force: *force,
                    };
                    async move {
                        AdminClient::new(channel)
                            .remove_member(request)
                            .await
                            .map(|response| response.into_inner())
                    }
                })
                .await
                .context("the members were not removed")?;
            super::note(format!("removed {ids:?}; stop those masters now"));
            removed
        }
    };
    print(&members, args.output)
}

/// The members, as the leader lists them.
async fn list(client: &symcluster_client::Client) -> anyhow::Result<api::ListMembersResponse> {
    client
        .on_leader(|channel| async move {
            AdminClient::new(channel)
                .list_members(api::ListMembersRequest {})
                .await
                .map(|response| response.into_inner())
        })
        .await
        .context("cannot list the members")
}

/// Polls the leader until member `id` is a voter; its last view after `within`, as an error.
async fn wait_for_voter(
    client: &symcluster_client::Client,
    id: u64,
    within: Duration,
) -> anyhow::Result<api::ListMembersResponse> {
    let deadline = Instant::now() + within;
    loop {
        let members = list(client).await?;
        let member = members.members.iter().find(|m| m.id == id);
        match member {
            Some(m) if m.role == "voter" => {
                super::note(format!("member {id} is a voter"));
                return Ok(members);
            }
            None => bail!("member {id} is no longer in the group"),
            Some(m) if Instant::now() >= deadline => bail!(
                "member {id} is still a {} after {within:?} (match index {}, {} entries behind)",
                m.role,
                m.match_index,
                m.lag
            ),
            Some(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn print(members: &api::ListMembersResponse, output: Output) -> anyhow::Result<()> {
    use super::output::{align_right, print_json, print_table, table};
    if output == Output::Json {
        let rows: Vec<serde_json::Value> = members
            .members
            .iter()
            .map(|m| {
                serde_json::json!({
                    "id": m.id, "address": m.address, "role": m.role, "leader": m.leader,
                    "match_index": m.match_index, "lag": m.lag,
                    "last_contact_ms_ago": m.last_contact_ms_ago, "seen": m.seen,
                })
            })
            .collect();
        return print_json(&serde_json::json!({
            "members": rows,
            "leader_id": members.leader_id,
            "term": members.term,
            "commit_index": members.commit_index,
            "answered_by": members.answered_by,
            "changing": members.changing,
            "restored_from": members.restored_from.as_ref().map(|r| serde_json::json!({
                "sha256": hex::encode(&r.sha256),
                "applied_index": r.applied_index,
                "applied_term": r.applied_term,
            })),
        }));
    }
    let mut rows = table(&[
        "ID",
        "ADDRESS",
        "ROLE",
        "LEADER",
        "MATCH",
        "LAG",
        "LAST CONTACT",
    ]);
    for m in &members.members {
        rows.add_row(vec![
            m.id.to_string(),
            m.address.clone(),
            m.role.clone(),
            if m.leader { "yes" } else { "" }.to_owned(),
            m.match_index.to_string(),
            m.lag.to_string(),
            m.last_contact_ms_ago
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
        ]);
    }
    align_right(&mut rows, &[0, 4, 5, 6]);
    print_table(&rows);
    println!(
        "term {}, commit index {}{}",
        members.term,
        members.commit_index,
        if members.changing {
            "; a membership change is in progress"
        } else {
            ""
        }
    );
    if let Some(restored) = &members.restored_from {
        println!(
            "master {} was restored from the backup of SHA-256 {} (applied index {}, term {})",
            members.answered_by,
            hex::encode(&restored.sha256),
            restored.applied_index,
            restored.applied_term
        );
    }
    Ok(())
}

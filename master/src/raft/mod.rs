//! Replication of the index across masters with Raft (raft-rs 0.7).
//!
//! - [`node`]: the one owner of `RawNode` and its storage, a thread fed by one channel;
//! - [`storage`]: raft-rs's `Storage` over the log, HardState and ConfState;
//! - [`segment_log`]: the log's append-only segment files;
//! - [`snapshot`]: snapshots of the index streamed to a follower in chunks, through a file;
//! - [`membership`]: adding, promoting and removing members (`ConfChangeV2`), the addresses;
//! - [`join`]: what a master with an empty data dir may do (start a group, join one, or not);
//! - [`transport`]: Raft messages between masters over tonic (`symcluster.cluster.v1.Peer`);
//! - [`logger`]: raft-rs's `slog` records into `tracing`.
//!
//! A command is [`RaftHandle::propose`]d on the leader, appended to the log, replicated to a
//! majority, committed, and applied to the index on every master in log order; the proposer's
//! future resolves with what applying it did. Only the leader accepts proposals; the others
//! answer [`ProposeError::NotLeader`] with the leader's address.

pub mod join;
pub mod logger;
pub mod membership;
pub mod node;
pub mod segment_log;
pub mod snapshot;
pub mod storage;
pub mod transport;

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, RwLock};

use raft::prelude::Message;
use raft::{RawNode, StateRole};
use tokio::sync::oneshot;

use crate::index::apply::Applied;
use crate::index::{Command, Index, IndexError};

/// What the node thread takes from its one channel.
pub enum Input {
    /// A command to append (leader only). `reply` receives what applying it did.
    Propose {
        /// The command (boxed: commands are large, the other inputs small).
        command: Box<Command>,
        /// Where to say what happened; `None` for fire-and-forget proposals.
        reply: Option<oneshot::Sender<Result<Applied, ProposeError>>>,
        /// Fire-and-forget commands proposed right after it, so that they share its Ready (one
        /// fsync, one message per follower): the next lease of the worker that completed it.
        then: Vec<Command>,
    },
    /// Raft messages from another master.
    Step(Vec<Message>),
    /// A peer could not be reached.
    Unreachable(u64),
    /// A snapshot was delivered to `peer` (or not).
    SnapshotSent {
        /// The peer.
        peer: u64,
        /// Whether it arrived.
        ok: bool,
    },
    /// Hands leadership to the most up-to-date follower (a stopping leader); ignored by a
    /// follower.
    StepDown,
    /// A membership change (leader only); `reply` once it is applied, or refused.
    ChangeMembers {
        /// The change.
        change: MemberChange,
        /// Where to say what happened.
        reply: oneshot::Sender<Result<(), ProposeError>>,
    },
    /// Ends the node thread.
    Stop,
}

/// A membership change asked for by an operator ([`membership`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberChange {
    /// A new member `id` at `address` (`http://host:port`): a learner, promoted by the leader
    /// once caught up.
    Add {
        /// Its member id.
        id: u64,
        /// Its gRPC address.
        address: String,
    },
    /// Members leaving the group (several: one joint configuration).
    Remove {
        /// Their ids.
        ids: Vec<u64>,
    },
}

/// Why a proposal was not applied.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProposeError {
    /// This master is not the leader (any more); `leader` is the leader's address when known.
    #[error("this master is not the leader{}", match .leader { Some(l) => format!("; the leader is {l}"), None => "; no leader is elected yet".into() })]
    NotLeader {
        /// The leader's `http://host:port`.
        leader: Option<String>,
    },
    /// The log cannot be written; this master stopped replicating.
    #[error("the replicated log cannot be written: {0}")]
    Storage(String),
    /// A membership change that cannot be made now (one in progress, an id taken or unknown).
    #[error("{0}")]
    Membership(String),
}

/// What the rest of the master learns from the node thread. Called on the node thread: keep
/// them short and never block on a proposal.
pub trait Hooks: Send + Sync {
    /// Commands applied to the index (in log order), with what each did. `is_leader`: whether
    /// this master leads now.
    fn applied(&self, changes: &[(Command, Applied)], is_leader: bool);
    /// This master became the leader (`true`) or stopped being it (`false`).
    fn role_changed(&self, is_leader: bool);
    /// The index was replaced by a snapshot from the leader.
    fn restored(&self);
}

/// The node's state as last published by the node thread.
#[derive(Debug, Clone)]
pub struct RaftStatus {
    /// This member's id.
    pub id: u64,
    /// Leader, follower, candidate or pre-candidate.
    pub role: StateRole,
    /// Current term.
    pub term: u64,
    /// The leader's member id (0: none known).
    pub leader_id: u64,
    /// The leader's gRPC address, when known.
    pub leader_address: Option<String>,
    /// Highest log index known committed.
    pub commit: u64,
    /// Highest log index applied to the index.
    pub applied: u64,
    /// Last log index held.
    pub last_index: u64,
    /// On the leader: each member's match index (`(id, matched)`).
    pub progress: Vec<(u64, u64)>,
    /// The group's membership as this master applied it (addresses, learners, seen), when
    /// one was written.
    pub membership: Option<symcluster_proto::cluster::v1::Membership>,
    /// Voters of the configuration being left (a joint configuration), else empty.
    pub outgoing: Vec<u64>,
    /// Milliseconds since this master last heard from each other member (`(id, ms)`), for
    /// the members heard from since it started.
    pub last_contact_ms: Vec<(u64, u64)>,
    /// A membership change is in progress (a learner not promoted, a joint configuration, a
    /// change not applied).
    pub changing: bool,
}

impl Default for RaftStatus {
    fn default() -> Self {
        RaftStatus {
            id: 0,
            role: StateRole::Follower,
            term: 0,
            leader_id: 0,
            leader_address: None,
            commit: 0,
            applied: 0,
            last_index: 0,
            progress: Vec::new(),
            membership: None,
            outgoing: Vec::new(),
            last_contact_ms: Vec::new(),
            changing: false,
        }
    }
}

/// How to reach the node thread.
#[derive(Clone)]
pub struct RaftHandle {
    inputs: Sender<Input>,
    status: Arc<RwLock<RaftStatus>>,
    /// Member id → gRPC address (`http://host:port`), this master included, as the group's
    /// membership gives them now.
    pub members: membership::Members,
    /// This member's id.
    pub id: u64,
}

impl RaftHandle {
    /// Proposes `command`; resolves once it is applied here (or refused).
    pub async fn propose(&self, command: Command) -> Result<Applied, ProposeError> {
        self.propose_then(command, Vec::new()).await
    }

    /// Proposes `command`, then `then` (fire and forget) in the same Ready; resolves once
    /// `command` is applied here (or refused).
    pub async fn propose_then(
        &self,
        command: Command,
        then: Vec<Command>,
    ) -> Result<Applied, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inputs
            .send(Input::Propose {
                command: Box::new(command),
                reply: Some(reply),
                then,
            })
            .map_err(|_| ProposeError::Storage("the raft node stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(ProposeError::Storage("the raft node stopped".into())))
    }

    /// Proposes `command` without waiting (lease grants, expiries): the scheduler learns the
    /// outcome when it is applied.
    pub fn propose_nowait(&self, command: Command) {
        let _ = self.inputs.send(Input::Propose {
            command: Box::new(command),
            reply: None,
            then: Vec::new(),
        });
    }

    /// The node's state, as last published.
    pub fn status(&self) -> RaftStatus {
        self.status
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether this master is the leader (as last published).
    pub fn is_leader(&self) -> bool {
        self.status().role == StateRole::Leader
    }

    /// The leader's address, when one is known.
    pub fn leader_address(&self) -> Option<String> {
        self.status().leader_address
    }

    /// A sender into the node's channel (for the transport's receiving side).
    pub fn inputs(&self) -> Sender<Input> {
        self.inputs.clone()
    }

    /// Asks the node to hand leadership to its most up-to-date follower (raft-rs leader
    /// transfer: the follower is caught up, then told to campaign at once). The outcome shows in
    /// [`Self::status`]; a transfer that does not finish within an election timeout is dropped.
    pub fn step_down(&self) {
        let _ = self.inputs.send(Input::StepDown);
    }

    /// Asks for a membership change (leader only); resolves once it is applied. Errors:
    /// [`ProposeError::NotLeader`] (also when the leader is asked to remove itself: it hands
    /// leadership over first), [`ProposeError::Membership`] with the reason.
    pub async fn change_members(&self, change: MemberChange) -> Result<(), ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inputs
            .send(Input::ChangeMembers { change, reply })
            .map_err(|_| ProposeError::Storage("the raft node stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(ProposeError::Storage("the raft node stopped".into())))
    }

    /// Stops the node thread.
    pub fn stop(&self) {
        let _ = self.inputs.send(Input::Stop);
    }
}

/// Settings of this master's Raft member.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This member's id (1-based).
    pub id: u64,
    /// Every member's id → gRPC address (`http://host:port`), this one included (`--peers`):
    /// a new group's first membership, or how a joining master reaches the group.
    pub members: BTreeMap<u64, String>,
    /// This master joins an existing group (`--join`): with an empty index it starts with no
    /// membership and waits for the leader's snapshot, instead of starting a group.
    pub join: bool,
    /// Ticks (of [`node::TICK`]) without a leader before an election.
    pub election_tick: usize,
    /// Ticks between leader heartbeats.
    pub heartbeat_tick: usize,
    /// Bearer token for the peer API.
    pub token: String,
    /// TLS to `https://` peers: the CA that signed their certificates, and this master's own
    /// certificate presented to them.
    pub tls: symcluster_client::Tls,
    /// Where received snapshots are written before they replace the index (emptied at start).
    pub snapshot_dir: std::path::PathBuf,
    /// Bytes per chunk of a snapshot sent to a follower: the leader holds about
    /// [`snapshot::CHUNKS_IN_FLIGHT`] + 2 chunks per transfer, whatever the index's size.
    pub snapshot_chunk_bytes: usize,
    /// Bytes of log kept before compaction ([`storage::RaftStorage::with_retention`]).
    pub log_retain_bytes: u64,
}

/// The node's channel, made before the node so that the scheduler can hold the handle.
pub fn channel(config: &RaftConfig) -> (RaftHandle, std::sync::mpsc::Receiver<Input>) {
    let (tx, rx) = std::sync::mpsc::channel();
    (
        RaftHandle {
            inputs: tx,
            status: Arc::new(RwLock::new(RaftStatus {
                id: config.id,
                ..RaftStatus::default()
            })),
            members: membership::Members::new(config.members.clone()),
            id: config.id,
        },
        rx,
    )
}

/// Largest append (MsgAppend) sent to a follower, bytes (at least one entry).
pub const MAX_APPEND_BYTES: u64 = 1 << 20;
/// Appends sent to a follower and not yet acknowledged, at most: with [`MAX_APPEND_BYTES`], what
/// a follower catching up from the log can hold in the leader's memory (16 MiB, and the copies
/// encoding makes).
pub const MAX_APPENDS_IN_FLIGHT: usize = 16;

/// The raft-rs settings of member `id` (election and heartbeat in ticks of [`node::TICK`];
/// `applied`, the last log index already in the index), as every master runs them and as the
/// Raft simulation test (`master/tests/raft_simulation.rs`) checks them: pre-vote and
/// check-quorum on; appends of at most [`MAX_APPEND_BYTES`], [`MAX_APPENDS_IN_FLIGHT`] in flight
/// per follower; at most 16 MiB of committed entries per Ready.
pub fn raft_settings(
    id: u64,
    election_tick: usize,
    heartbeat_tick: usize,
    applied: u64,
) -> raft::Config {
    raft::Config {
        id,
        election_tick,
        heartbeat_tick,
        applied,
        check_quorum: true,
        pre_vote: true,
        max_size_per_msg: MAX_APPEND_BYTES,
        max_inflight_msgs: MAX_APPENDS_IN_FLIGHT,
        max_committed_size_per_ready: 16 << 20,
        // A follower learns a new commit index from the next append or heartbeat, not from an
        // empty append sent to every follower at each commit: nothing waits on a follower's
        // apply (clients are answered by the leader; a follower applies late anyway), and a
        // commit without that broadcast costs the leader two messages out and two in fewer.
        skip_bcast_commit: true,
        ..raft::Config::default()
    }
}

/// How the node sends Raft messages to the other members: the tonic transport
/// ([`transport::Transport`]) in a master, a simulated network in the simulation test
/// (`master/tests/raft_simulation.rs`).
pub trait Outbound: Send {
    /// Queues `messages` for their members (`Message.to`). A `MsgSnapshot` takes its index from
    /// the [`snapshot::Outbox`]; its outcome is reported back as [`Input::SnapshotSent`].
    fn send(&mut self, messages: Vec<Message>);
    /// Follows a membership change: the members and their addresses now.
    fn set_members(&mut self, addresses: &BTreeMap<u64, String>);
}

/// Starts the node thread over `index`, with Raft's log in `log_dir`. A single-member group
/// elects itself at once.
pub fn start(
    config: &RaftConfig,
    index: Index,
    log_dir: &std::path::Path,
    handle: &RaftHandle,
    inputs: std::sync::mpsc::Receiver<Input>,
    hooks: Arc<dyn Hooks>,
    runtime: tokio::runtime::Handle,
) -> Result<std::thread::JoinHandle<()>, IndexError> {
    let node = open(
        config,
        index,
        log_dir,
        handle,
        inputs,
        hooks,
        |addresses, outbox| {
            Box::new(transport::Transport::start(
                config,
                addresses,
                handle.inputs(),
                outbox,
                &runtime,
            ))
        },
    )?;
    std::thread::Builder::new()
        .name(format!("raft-{}", config.id))
        .spawn(move || {
            // raft-rs panics on a storage error it cannot handle (an unreadable log segment): a
            // master whose Raft member is gone must not go on serving a stale index.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.run())).is_err() {
                tracing::error!("the raft node failed; this master exits");
                std::process::exit(70);
            }
        })
        .map_err(|e| IndexError::Corrupt(format!("cannot start the raft thread: {e}")))
}

/// The node over `index` and the log in `log_dir`, not started: [`start`] runs it on its
/// thread ([`node::Node::run`]); the simulation test drives it turn by turn
/// ([`node::Node::turn`]). `outbound` makes its sending side from the members' addresses and
/// the snapshot outbox. Errors: the snapshot directory cannot be emptied, the index or the log
/// cannot be read, raft-rs refuses the settings.
#[allow(clippy::type_complexity)]
pub fn open(
    config: &RaftConfig,
    index: Index,
    log_dir: &std::path::Path,
    handle: &RaftHandle,
    inputs: std::sync::mpsc::Receiver<Input>,
    hooks: Arc<dyn Hooks>,
    outbound: impl FnOnce(&BTreeMap<u64, String>, snapshot::Outbox) -> Box<dyn Outbound>,
) -> Result<node::Node, IndexError> {
    snapshot::clear_dir(&config.snapshot_dir).map_err(|e| {
        IndexError::Corrupt(format!(
            "cannot empty the snapshot directory {}: {e}",
            config.snapshot_dir.display()
        ))
    })?;
    // A new group's first membership is `--peers`; a joining master has none until the
    // leader's snapshot brings it.
    let (applied, _) = index.applied()?;
    if !config.join || applied > 0 {
        index.seed_membership(&membership::bootstrap(&config.members))?;
    }
    let current = index.membership()?;
    handle
        .members
        .set(membership::addresses(current.as_ref(), &config.members));
    let bootstrap = if config.join {
        raft::prelude::ConfState::default()
    } else {
        raft::prelude::ConfState::from((
            config.members.keys().copied().collect::<Vec<u64>>(),
            Vec::<u64>::new(),
        ))
    };
    let storage = storage::RaftStorage::open(index.clone(), log_dir, &bootstrap)?
        .with_retention(config.log_retain_bytes);
    let outbox = storage.outbox();
    let voters = raft::Storage::initial_state(&storage)
        .map(|state| state.conf_state.voters)
        .unwrap_or_default();
    let raft_config = raft_settings(
        config.id,
        config.election_tick,
        config.heartbeat_tick,
        applied,
    );
    raft_config
        .validate()
        .map_err(|e| IndexError::Corrupt(format!("raft configuration: {e}")))?;
    let logger = logger::logger(config.id);
    let mut raw = RawNode::new(&raft_config, storage, &logger)
        .map_err(|e| IndexError::Corrupt(format!("raft node: {e}")))?;
    if voters == [config.id] {
        // Nobody else to wait for.
        let _ = raw.campaign();
    }
    let transport = outbound(&handle.members.addresses(), outbox);
    Ok(node::Node::new(
        raw,
        index,
        applied,
        inputs,
        transport,
        hooks,
        handle.status.clone(),
        node::Membership {
            members: handle.members.clone(),
            known: config.members.clone(),
            current,
        },
        config.snapshot_dir.clone(),
    ))
}

//! Replication of the index across masters with Raft (raft-rs 0.7).
//!
//! - [`state_machine`]: what Raft replicates into (the master's index implements it, in `replica.rs`);
//!   commands are bytes here, snapshots a stream;
//! - [`error`]: Raft's own errors;
//! - [`node`]: the one owner of `RawNode` and its storage, a thread fed by one channel;
//! - [`storage`]: raft-rs's `Storage` over the log, HardState and ConfState;
//! - [`segment_log`]: the log's append-only segment files;
//! - [`snapshot`]: snapshots of the index streamed to a follower in chunks, through a file;
//! - [`membership`]: adding, promoting and removing members (`ConfChangeV2`), the addresses;
//! - [`join`]: what a master with an empty data dir may do (start a group, join one, or not);
//! - [`transport`]: Raft messages between masters over tonic (`symcluster.cluster.v1.Peer`);
//! - [`logger`]: raft-rs's `slog` records into `tracing`.
//!
//! A command (bytes) is [`RaftHandle::propose_bytes`]d on the leader, appended to the log,
//! replicated to a majority, committed, and applied to the [`StateMachine`] on every master in
//! log order; the proposer's future resolves with what applying it gave
//! ([`StateMachine::Output`]). Only the leader accepts proposals; the others answer
//! [`ProposeError::NotLeader`] with the leader's address.

pub mod error;
pub mod join;
pub mod logger;
pub mod membership;
pub mod next_segment;
pub mod node;
pub mod peer_identity;
pub mod segment_log;
pub mod snapshot;
pub mod state_machine;
pub mod storage;
pub mod transport;

use std::collections::BTreeMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, RwLock};

use raft::prelude::Message;
use raft::{RawNode, StateRole};
use tokio::sync::oneshot;

pub use error::RaftError;
pub use state_machine::StateMachine;

/// What the node thread takes from its one channel; `O`: what applying a command gives
/// ([`StateMachine::Output`]).
pub enum Input<O> {
    /// A command to append (leader only). `reply` receives what applying it did.
    Propose {
        /// The command, encoded by its proposer.
        command: Vec<u8>,
        /// Where to say what happened; `None` for fire-and-forget proposals.
        reply: Option<oneshot::Sender<Result<O, ProposeError>>>,
        /// Fire-and-forget commands proposed right after it, so that they share its Ready (one
        /// fsync, one message per follower): the next lease of the worker that completed it.
        then: Vec<Vec<u8>>,
        /// A caller's command (a submit) that waits while the leader holds
        /// [`MAX_UNCOMMITTED_BYTES`] not yet committed ([`ProposeError::Overloaded`]); the
        /// state machine's own commands (leases, attempts ending) are never refused so.
        bounded: bool,
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
    /// A linearizable read (leader only): `reply` once a quorum has confirmed this member
    /// still leads and it has applied everything committed before the read was asked; a
    /// [`ProposeError::NotLeader`] when it does not lead, or stops leading first.
    ReadIndex {
        /// Where to say when the read may be served.
        reply: oneshot::Sender<Result<(), ProposeError>>,
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

/// What the transport hands the node: Raft messages from other masters, and how its own
/// sends went.
#[derive(Debug)]
pub enum Network {
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
}

impl<O> From<Network> for Input<O> {
    fn from(n: Network) -> Self {
        match n {
            Network::Step(messages) => Input::Step(messages),
            Network::Unreachable(peer) => Input::Unreachable(peer),
            Network::SnapshotSent { peer, ok } => Input::SnapshotSent { peer, ok },
        }
    }
}

/// The node's channel as the transport sees it ([`Network`] inputs only), whatever the state
/// machine's output type.
#[derive(Clone)]
pub struct Inbox(Arc<dyn Fn(Network) -> Result<(), NodeStopped> + Send + Sync>);

/// The node thread is gone.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the raft node stopped")]
pub struct NodeStopped;

impl Inbox {
    /// Hands `input` to the node. Errors: the node stopped.
    pub fn send(&self, input: Network) -> Result<(), NodeStopped> {
        (self.0)(input)
    }
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
        /// Made even when the voters that stay and are up are fewer than a quorum (the group
        /// then stalls until enough of them are up); refused otherwise.
        force: bool,
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
    /// The leader already holds [`MAX_UNCOMMITTED_BYTES`] of entries not yet committed (the
    /// followers or the disk are behind the callers): nothing was proposed; try again after
    /// `retry_after_ms`.
    #[error(
        "the replicated log already holds {} MiB not yet committed; retry in {retry_after_ms} ms",
        MAX_UNCOMMITTED_BYTES >> 20
    )]
    Overloaded {
        /// How long to wait before proposing again, ms.
        retry_after_ms: u64,
    },
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

/// How to reach the node thread; `O`: what applying a command gives
/// ([`StateMachine::Output`]).
pub struct RaftHandle<O> {
    inputs: Sender<Input<O>>,
    status: Arc<RwLock<RaftStatus>>,
    /// Member id → gRPC address (`http://host:port`), this master included, as the group's
    /// membership gives them now.
    pub members: membership::Members,
    /// This member's id.
    pub id: u64,
}

impl<O> Clone for RaftHandle<O> {
    fn clone(&self) -> Self {
        RaftHandle {
            inputs: self.inputs.clone(),
            status: self.status.clone(),
            members: self.members.clone(),
            id: self.id,
        }
    }
}

impl<O: Send + 'static> RaftHandle<O> {
    /// Proposes the encoded `command`, then `then` (fire and forget) in the same Ready;
    /// resolves once `command` is applied here (or refused).
    pub async fn propose_bytes(
        &self,
        command: Vec<u8>,
        then: Vec<Vec<u8>>,
    ) -> Result<O, ProposeError> {
        self.send_proposal(command, then, false).await
    }

    /// [`Self::propose_bytes`] of a caller's command, refused with
    /// [`ProposeError::Overloaded`] while the leader holds [`MAX_UNCOMMITTED_BYTES`] not yet
    /// committed.
    pub async fn propose_bytes_bounded(&self, command: Vec<u8>) -> Result<O, ProposeError> {
        self.send_proposal(command, Vec::new(), true).await
    }

    async fn send_proposal(
        &self,
        command: Vec<u8>,
        then: Vec<Vec<u8>>,
        bounded: bool,
    ) -> Result<O, ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inputs
            .send(Input::Propose {
                command,
                reply: Some(reply),
                then,
                bounded,
            })
            .map_err(|_| ProposeError::Storage("the raft node stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(ProposeError::Storage("the raft node stopped".into())))
    }

    /// Waits until this member may serve a linearizable read from its state machine
    /// ([`Input::ReadIndex`]): a quorum confirmed it leads, and it applied everything
    /// committed before the call. Errors: [`ProposeError::NotLeader`] (with the leader's
    /// address when known) when it does not lead or stops leading first; `Storage` when the
    /// node stopped. Costs one heartbeat round to the followers, shared by every read asked
    /// within one turn of the node's loop.
    pub async fn read_barrier(&self) -> Result<(), ProposeError> {
        let (reply, rx) = oneshot::channel();
        self.inputs
            .send(Input::ReadIndex { reply })
            .map_err(|_| ProposeError::Storage("the raft node stopped".into()))?;
        rx.await
            .unwrap_or_else(|_| Err(ProposeError::Storage("the raft node stopped".into())))
    }

    /// Proposes the encoded `command` without waiting: the state machine learns the outcome
    /// when it is applied.
    pub fn propose_bytes_nowait(&self, command: Vec<u8>) {
        let _ = self.inputs.send(Input::Propose {
            command,
            reply: None,
            then: Vec::new(),
            bounded: false,
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

    /// A sender into the node's channel (the simulation test delivers every input by it).
    pub fn inputs(&self) -> Sender<Input<O>> {
        self.inputs.clone()
    }

    /// The node's channel for the transport ([`Network`] inputs).
    pub fn inbox(&self) -> Inbox {
        let inputs = std::sync::Mutex::new(self.inputs.clone());
        Inbox(Arc::new(move |input| {
            inputs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .send(input.into())
                .map_err(|_| NodeStopped)
        }))
    }

    /// Asks the node to hand leadership to its most up-to-date follower (raft-rs leader
    /// transfer: the follower is caught up, then told to campaign at once). The outcome shows in
    /// [`Self::status`]; a transfer that does not finish within an election timeout is dropped.
    pub fn step_down(&self) {
        let _ = self.inputs.send(Input::StepDown);
    }

    /// Asks for a membership change (leader only); resolves once it is applied, or at once
    /// when it was already made. While another change is in progress it waits up to 10 s for
    /// that one to be applied. Errors:
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
    /// The port of the other masters' Raft transport when it has its own listener
    /// (`--peer-listen`): a member at `https://host:7700` is then dialled at
    /// `https://host:<peer_port>`. `None`: on the members' own (gRPC) addresses.
    pub peer_port: Option<u16>,
}

impl RaftConfig {
    /// A group of one, member 1 at `http://127.0.0.1:1` (never dialled: it has no peer),
    /// with received snapshots in `<dir>/snapshots`, elections after 10 ticks, heartbeats every
    /// 2, 1 MiB snapshot chunks and 64 MiB of log kept: what the scheduler's tests run.
    pub fn alone(dir: &std::path::Path) -> Self {
        RaftConfig {
            id: 1,
            members: [(1, "http://127.0.0.1:1".to_owned())].into_iter().collect(),
            join: false,
            election_tick: 10,
            heartbeat_tick: 2,
            token: "t".into(),
            tls: symcluster_client::Tls::default(),
            snapshot_dir: dir.join("snapshots"),
            snapshot_chunk_bytes: 1 << 20,
            log_retain_bytes: 64 << 20,
            peer_port: None,
        }
    }
}

/// The node's channel, made before the node so that the scheduler can hold the handle.
#[allow(clippy::type_complexity)]
pub fn channel<O>(config: &RaftConfig) -> (RaftHandle<O>, std::sync::mpsc::Receiver<Input<O>>) {
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

/// Bytes of entries the leader holds proposed and not yet committed past which a caller's
/// command (a submit) is refused with [`ProposeError::Overloaded`] instead of growing the
/// leader's memory, the next Ready's write and every follower's (one is always accepted when
/// none is uncommitted). The size is raft-rs's own count (`Raft::uncommitted_size`); raft-rs
/// itself never drops a proposal for it, so the scheduler's own commands (leases, the end of
/// attempts), which carry no reports, always go through.
pub const MAX_UNCOMMITTED_BYTES: u64 = 64 << 20;

/// How long a caller refused with [`ProposeError::Overloaded`] is told to wait, ms: about the
/// time a Ready of [`MAX_UNCOMMITTED_BYTES`] takes to write, send and commit.
pub const OVERLOADED_RETRY_MS: u64 = 500;

/// The raft-rs settings of member `id` (election and heartbeat in ticks of [`node::TICK`];
/// `applied`, the last log index already in the index), as every master runs them and as the
/// Raft simulation test (`master/tests/raft_simulation.rs`) checks them: pre-vote and
/// check-quorum on; appends of at most [`MAX_APPEND_BYTES`], [`MAX_APPENDS_IN_FLIGHT`] in flight
/// per follower; at most 16 MiB of committed entries per Ready; the uncommitted bytes counted
/// for [`MAX_UNCOMMITTED_BYTES`].
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
        // Counted (raft-rs counts nothing under its "no limit"), never reached.
        max_uncommitted_size: u64::MAX - 1,
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

/// Starts the node thread over `machine`, with Raft's log in `log_dir`. A single-member group
/// elects itself at once.
pub fn start<S: StateMachine>(
    config: &RaftConfig,
    machine: Arc<S>,
    log_dir: &std::path::Path,
    handle: &RaftHandle<S::Output>,
    inputs: std::sync::mpsc::Receiver<Input<S::Output>>,
    runtime: tokio::runtime::Handle,
) -> Result<std::thread::JoinHandle<()>, RaftError> {
    let node = open(
        config,
        machine,
        log_dir,
        handle,
        inputs,
        |addresses, outbox| {
            Box::new(transport::Transport::start(
                config,
                addresses,
                handle.inbox(),
                outbox,
                &runtime,
            ))
        },
    )?;
    std::thread::Builder::new()
        .name(format!("raft-{}", config.id))
        .spawn(move || {
            // A master whose Raft member is gone must not go on serving a stale index under the
            // role it last had: it exits, its clients and workers fail over to the others at
            // once (their connections drop), and its supervisor restarts it, which replays what
            // is durable. raft-rs panics on a storage error it cannot handle (an unreadable log
            // segment); the node returns the errors it meets itself (a full disk, a failed
            // fsync or index commit).
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.run())) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "raft storage failed; this master exits");
                    std::process::exit(node::STORAGE_FAILED_EXIT);
                }
                Err(_) => {
                    tracing::error!("the raft node failed; this master exits");
                    std::process::exit(70);
                }
            }
        })
        .map_err(RaftError::Thread)
}

/// The node over `machine` and the log in `log_dir`, not started: [`start`] runs it on its
/// thread ([`node::Node::run`]); the simulation test drives it turn by turn
/// ([`node::Node::turn`]). `outbound` makes its sending side from the members' addresses and
/// the snapshot outbox. Errors: the snapshot directory cannot be emptied, the state machine or
/// the log cannot be read, raft-rs refuses the settings.
#[allow(clippy::type_complexity)]
pub fn open<S: StateMachine>(
    config: &RaftConfig,
    machine: Arc<S>,
    log_dir: &std::path::Path,
    handle: &RaftHandle<S::Output>,
    inputs: std::sync::mpsc::Receiver<Input<S::Output>>,
    outbound: impl FnOnce(&BTreeMap<u64, String>, snapshot::Outbox) -> Box<dyn Outbound>,
) -> Result<node::Node<S>, RaftError> {
    snapshot::clear_dir(&config.snapshot_dir).map_err(|source| RaftError::Io {
        what: format!(
            "cannot empty the snapshot directory {}",
            config.snapshot_dir.display()
        ),
        source,
    })?;
    // A new group's first membership is `--peers`; a joining master has none until the
    // leader's snapshot brings it.
    let (applied, _) = machine.applied().map_err(RaftError::StateMachine)?;
    if !config.join || applied > 0 {
        machine
            .seed_membership(&membership::bootstrap(&config.members))
            .map_err(RaftError::StateMachine)?;
    }
    let current = machine.membership().map_err(RaftError::StateMachine)?;
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
    let view: Arc<dyn state_machine::StateView> = machine.clone();
    let storage = storage::RaftStorage::open(view, log_dir, &bootstrap)?
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
    raft_config.validate()?;
    let logger = logger::logger(config.id);
    let mut raw = RawNode::new(&raft_config, storage, &logger)?;
    if voters == [config.id] {
        // Nobody else to wait for.
        let _ = raw.campaign();
    }
    let transport = outbound(&handle.members.addresses(), outbox);
    Ok(node::Node::new(
        raw,
        machine,
        applied,
        inputs,
        transport,
        handle.status.clone(),
        node::Membership {
            members: handle.members.clone(),
            known: config.members.clone(),
            current,
        },
        config.snapshot_dir.clone(),
    ))
}

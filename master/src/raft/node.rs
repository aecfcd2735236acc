//! The one owner of `RawNode` and its storage: a thread fed by one channel ([`Input`]), ticking
//! on a timer, handling each Ready in raft-rs's documented order (`examples/five_mem_node`,
//! with committed entries applied after the append, as its async-ready variant allows):
//! send messages → apply the snapshot → append entries and persist the HardState → send
//! persisted messages → advance → (light ready) commit, messages → apply the committed entries
//! of both → advance apply.
//!
//! Group commit: every input waiting in the channel is taken before the next Ready, so many
//! proposals share one Ready; its new entries and HardState are one append to the log's
//! segment files, fsynced when raft-rs says the Ready must be synced (new entries, a new term
//! or vote); a commit index alone is not written ([`Node::persist`]). The committed entries of
//! the Ready and of its light ready are one [`Batch`] for the [`StateMachine`] (the index: one
//! `redb` write transaction). It is made durable only at a checkpoint (every
//! [`CHECKPOINT_ENTRIES`] entries or [`CHECKPOINT_INTERVAL`]): what it loses in a crash is
//! replayed from the durable log, which compaction (by size, `--raft-log-retain`) keeps back to
//! the last checkpoint, and the applied index is stored in the same transaction as its effects.
//! A follower lets committed entries wait (at most one tick or [`MAX_DEFERRED`] entries) and
//! applies many appends' worth at once ([`Node::apply_or_defer`]);
//! `symcluster_raft_write_transactions_total{durability}` counts the state machine's write
//! transactions, checkpoints (`fsync`) and the others (`none`).
//!
//! The node knows nothing of what it replicates: commands are bytes, membership changes are
//! applied to raft-rs here and handed to the state machine as a [`MembershipChange`], and its
//! errors are [`RaftError`]s.

use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prost011::Message as _;
use raft::prelude::{
    ConfChange, ConfChangeSingle, ConfChangeV2, ConfState, Entry, EntryType, Message, Snapshot,
};
use raft::{RawNode, StateRole};
use tokio::sync::oneshot;

use super::error::RaftError;
use super::membership::{self, Members};
use super::snapshot;
use super::state_machine::{Applying, Batch, MembershipChange, StateMachine};
use super::storage::RaftStorage;
use super::{Input, MemberChange, Outbound, ProposeError, RaftStatus};
use crate::failpoints;
use crate::metrics;

/// How often the node ticks.
pub const TICK: Duration = Duration::from_millis(100);

/// The exit status of a master whose Raft log or index could not be written (`EX_IOERR` of
/// BSD's `sysexits.h`): [`Node::run`]'s error ends the process, so that it restarts instead
/// of serving a frozen index (a panic of the node exits 70, `EX_SOFTWARE`).
pub const STORAGE_FAILED_EXIT: i32 = 74;

struct Waiter<O> {
    reply: oneshot::Sender<Result<O, ProposeError>>,
    proposed: Instant,
}

/// What the node knows of the group's membership.
pub struct Membership {
    /// The addresses, shared with the transport's receiving side and the admin API.
    pub members: Members,
    /// `--peers`: how to reach members the group's membership gives no address for yet.
    pub known: BTreeMap<u64, String>,
    /// The membership as applied (`None`: none written yet, a joining master).
    pub current: Option<symcluster_proto::cluster::v1::Membership>,
}

/// A member seen by the leader is proposed as seen again after this long if the first
/// proposal was lost.
const SEEN_RETRY: Duration = Duration::from_secs(5);

/// A membership change asked while another was in progress may wait this long for it to be
/// applied before it is refused: long enough for the changes that end on their own (a new
/// leader's first entry, leaving a joint configuration), not for a learner's catch-up.
const CHANGE_WAIT: Duration = Duration::from_secs(10);

/// Linearizable reads on the leader (the Raft thesis's ReadIndex, §6.4; raft-rs's
/// `read_index` with `ReadOnlyOption::Safe`): a read is answered once a quorum has confirmed,
/// after it was asked, that this member still leads, and this member has applied everything
/// committed when it was asked. A leader cut off from its followers, which raft-rs's
/// check-quorum steps down only one to two election timeouts later, so answers no read from
/// its own index after the others may have elected a leader and committed without it.
#[derive(Default)]
struct Reads {
    /// Asked since the last turn.
    asked: Vec<ReadReply>,
    /// Handed to raft-rs, by request context.
    requested: HashMap<Vec<u8>, Vec<ReadReply>>,
    /// Confirmed by a quorum: answered once the read index is applied.
    confirmed: Vec<(u64, Vec<ReadReply>)>,
    /// The next request context.
    next: u64,
}

/// Where a read waiting for its read index is answered.
type ReadReply = oneshot::Sender<Result<(), ProposeError>>;

impl Reads {
    /// Every read still waiting, whatever its stage.
    fn drain(&mut self) -> Vec<ReadReply> {
        let mut all = std::mem::take(&mut self.asked);
        all.extend(self.requested.drain().flat_map(|(_, r)| r));
        all.extend(self.confirmed.drain(..).flat_map(|(_, r)| r));
        all
    }
}

/// A membership change waiting for the one in progress ([`Node::change_members`]).
struct ParkedChange {
    change: MemberChange,
    reply: oneshot::Sender<Result<(), ProposeError>>,
    /// When it is refused if still waiting.
    until: Instant,
}

/// The node thread's state, over the state machine `S`.
pub struct Node<S: StateMachine> {
    raw: RawNode<RaftStorage>,
    machine: Arc<S>,
    inputs: Receiver<Input<S::Output>>,
    transport: Box<dyn Outbound>,
    status: Arc<RwLock<RaftStatus>>,
    waiters: HashMap<u64, Waiter<S::Output>>,
    /// This member's id and a number of this start: the first bytes of its proposals'
    /// contexts.
    proposer: [u8; PROPOSER_BYTES],
    next_proposal: u64,
    role: StateRole,
    leader_id: u64,
    applied: u64,
    membership: Membership,
    /// raft-rs's configuration as last applied.
    conf_state: ConfState,
    /// Operators waiting for a membership change, by proposal id.
    member_waiters: HashMap<u64, oneshot::Sender<Result<(), ProposeError>>>,
    /// Membership changes asked while another was in progress, in the order asked: see
    /// [`Node::change_members`].
    parked_changes: Vec<ParkedChange>,
    /// Linearizable reads waiting for their read index ([`Input::ReadIndex`]).
    reads: Reads,
    /// When each other member was last heard from.
    last_contact: HashMap<u64, Instant>,
    /// Members proposed as seen (`MembersSeen`), and when.
    seen_proposed: HashMap<u64, Instant>,
    /// Committed entries a follower has not applied yet: see [`Node::apply_or_defer`].
    deferred: Vec<Entry>,
    /// The last applied index written durably to the index (a restart starts from there).
    durable_applied: u64,
    last_checkpoint: Instant,
    /// Where received snapshots wait to be restored ([`snapshot::ready_path`]).
    snapshot_dir: std::path::PathBuf,
}

/// Bytes of a proposal's context that name its proposer: member id and start nonce (u64
/// little-endian each); the proposal id follows.
const PROPOSER_BYTES: usize = 16;

/// At most this many committed entries wait on a follower to be applied together.
const MAX_DEFERRED: usize = 1024;

/// The state machine is written durably (fsynced) once this many log entries were applied
/// since the last durable write...
const CHECKPOINT_ENTRIES: u64 = 1024;
/// ...or once this long has passed since it.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

impl<S: StateMachine> Node<S> {
    /// A node over `raw` (whose storage reads `machine`), `applied` up to that log index.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        raw: RawNode<RaftStorage>,
        machine: Arc<S>,
        applied: u64,
        inputs: Receiver<Input<S::Output>>,
        transport: Box<dyn Outbound>,
        status: Arc<RwLock<RaftStatus>>,
        membership: Membership,
        snapshot_dir: std::path::PathBuf,
    ) -> Self {
        let conf_state = raw.raft.prs().conf().to_conf_state();
        // A proposal's context names this process's member and start (`PROPOSER_BYTES`), so
        // that a new leader never answers its own waiters with entries another member (or an
        // earlier run of this one) proposed under the same number.
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut proposer = [0u8; PROPOSER_BYTES];
        proposer[..8].copy_from_slice(&raw.raft.id.to_le_bytes());
        proposer[8..].copy_from_slice(&nonce.to_le_bytes());
        Node {
            raw,
            machine,
            inputs,
            transport,
            status,
            waiters: HashMap::new(),
            proposer,
            next_proposal: 1,
            role: StateRole::Follower,
            leader_id: 0,
            applied,
            membership,
            conf_state,
            member_waiters: HashMap::new(),
            parked_changes: Vec::new(),
            reads: Reads::default(),
            last_contact: HashMap::new(),
            seen_proposed: HashMap::new(),
            deferred: Vec::new(),
            durable_applied: applied,
            last_checkpoint: Instant::now(),
            snapshot_dir,
        }
    }

    /// Runs until [`Input::Stop`] or until every sender is gone: waits for an input or the next
    /// tick ([`TICK`]), then takes a [`Node::turn`].
    ///
    /// Errors: the log or the state machine cannot be written (a full disk, a failed fsync, an
    /// index that cannot commit). The member cannot go on without them, so the node stops at
    /// once, answers every proposal and membership change still waiting with
    /// [`ProposeError::Storage`], and hands the error to the caller, whose part it is to end
    /// the process ([`super::start`] exits with [`STORAGE_FAILED_EXIT`]): a thread that ended
    /// would leave the process serving a frozen index under the role it last had.
    pub fn run(mut self) -> Result<(), RaftError> {
        let mut last_tick = Instant::now();
        loop {
            match self
                .inputs
                .recv_timeout(TICK.saturating_sub(last_tick.elapsed()))
            {
                Ok(Input::Stop) => {
                    self.stop();
                    return Ok(());
                }
                Ok(input) => self.handle(input),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            let tick = last_tick.elapsed() >= TICK;
            if tick {
                last_tick = Instant::now();
            }
            match self.turn(tick) {
                Ok(true) => {}
                Ok(false) => {
                    self.stop();
                    return Ok(());
                }
                Err(e) => {
                    self.fail_waiters(ProposeError::Storage(e.to_string()));
                    return Err(e);
                }
            }
        }
    }

    /// One turn of the loop: takes every input waiting in the channel (group commit: many
    /// proposals share one Ready), ticks raft-rs when `tick` (and does the leader's membership
    /// duties), handles the Ready, applies the entries a follower let wait when `tick` (they
    /// wait at most one tick), and publishes the status. `Ok(false)` once [`Input::Stop`] was
    /// taken (the caller then stops); errors: the log or the state machine cannot be written.
    pub fn turn(&mut self, tick: bool) -> Result<bool, RaftError> {
        while let Ok(input) = self.inputs.try_recv() {
            if matches!(input, Input::Stop) {
                return Ok(false);
            }
            self.handle(input);
        }
        if tick {
            self.raw.tick();
            self.leader_duties();
        }
        // raft-rs drops a read asked of a leader that has not yet committed an entry of its
        // term: those wait here until it has.
        if !self.reads.asked.is_empty() && self.raw.raft.commit_to_current_term() {
            // Every read asked since the last turn shares one read index: one heartbeat round.
            let context = self.reads.next.to_le_bytes().to_vec();
            self.reads.next += 1;
            let asked = std::mem::take(&mut self.reads.asked);
            self.reads.requested.insert(context.clone(), asked);
            self.raw.read_index(context);
        }
        self.on_ready()?;
        self.answer_reads();
        if tick && !self.parked_changes.is_empty() {
            self.make_parked_changes();
        }
        if tick {
            self.apply_deferred()?;
        }
        self.publish_status();
        if tick {
            self.publish_membership();
        }
        Ok(true)
    }

    /// This member's raft-rs state (read-only; the simulation test checks it).
    pub fn raft(&self) -> &raft::Raft<RaftStorage> {
        &self.raw.raft
    }

    fn handle(&mut self, input: Input<S::Output>) {
        match input {
            Input::Propose {
                command,
                reply,
                then,
                bounded,
            } => {
                if bounded
                    && self.role == StateRole::Leader
                    && self.raw.raft.uncommitted_size() as u64 >= super::MAX_UNCOMMITTED_BYTES
                {
                    metrics::REFUSED
                        .with_label_values(&["raft_uncommitted"])
                        .inc();
                    if let Some(reply) = reply {
                        let _ = reply.send(Err(ProposeError::Overloaded {
                            retry_after_ms: super::OVERLOADED_RETRY_MS,
                        }));
                    }
                    return;
                }
                self.propose(command, reply);
                for command in then {
                    self.propose(command, None);
                }
            }
            Input::ReadIndex { reply } => {
                if self.role == StateRole::Leader {
                    self.reads.asked.push(reply);
                } else {
                    let _ = reply.send(Err(self.not_leader()));
                }
            }
            Input::StepDown => self.step_down(),
            Input::ChangeMembers { change, reply } => self.change_members(change, reply),
            Input::Step(messages) => {
                let now = Instant::now();
                for m in messages {
                    self.last_contact.insert(m.from, now);
                    // A joining member takes the group's state from a snapshot, never the log
                    // from its first entry: that log does not hold the group's first membership
                    // (it came from `--peers`), so replaying it would give a wrong one.
                    if self.membership.current.is_none()
                        && m.get_msg_type() == raft::prelude::MessageType::MsgAppend
                        && m.index == 0
                        && !m.entries.is_empty()
                    {
                        tracing::warn!(
                            from = m.from,
                            "the log from its first entry offered to a joining member; dropped"
                        );
                        continue;
                    }
                    // A streamed snapshot's message is handed over only with its file, by the
                    // snapshot receiver; one without it (a stray or replayed message) would make
                    // Raft install an index this master does not have.
                    if m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot
                        && m.get_snapshot().data.as_slice() == snapshot::MARKER
                        && !snapshot::is_ready(&self.snapshot_dir, &m)
                    {
                        tracing::warn!(
                            from = m.from,
                            "a snapshot message without its data; dropped"
                        );
                        continue;
                    }
                    let streamed = m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot
                        && m.get_snapshot().data.as_slice() == snapshot::MARKER;
                    if let Err(e) = self.raw.step(m) {
                        tracing::debug!(error = %e, "raft message dropped");
                    }
                    // A snapshot Raft did not take (stale, or behind what this master has)
                    // leaves its file: deleted now, not at the next restart.
                    if streamed && self.raw.raft.raft_log.unstable.snapshot.is_none() {
                        snapshot::remove_ready(&self.snapshot_dir);
                    }
                }
            }
            Input::Unreachable(peer) => self.raw.report_unreachable(peer),
            Input::SnapshotSent { peer, ok } => self.raw.report_snapshot(
                peer,
                if ok {
                    raft::SnapshotStatus::Finish
                } else {
                    raft::SnapshotStatus::Failure
                },
            ),
            Input::Stop => {}
        }
    }

    /// Leader transfer to the follower whose log matches furthest (the quickest to catch up).
    fn step_down(&mut self) {
        self.step_down_avoiding(&[]);
    }

    /// [`Node::step_down`] to a follower not in `avoid` (members being removed); whether a
    /// transfer started.
    fn step_down_avoiding(&mut self, avoid: &[u64]) -> bool {
        if self.role != StateRole::Leader {
            return false;
        }
        let me = self.raw.raft.id;
        let best = self
            .raw
            .raft
            .prs()
            .iter()
            // A follower that is down would stall the transfer until it times out; a learner
            // cannot lead.
            .filter(|(id, _)| {
                **id != me
                    && self.is_up(**id)
                    && self.conf_state.voters.contains(id)
                    && !avoid.contains(id)
            })
            .max_by_key(|(_, progress)| progress.matched)
            .map(|(id, _)| *id);
        if let Some(transferee) = best {
            tracing::info!(transferee, "stepping down: handing leadership over");
            self.raw.transfer_leader(transferee);
            return true;
        }
        false
    }

    /// Whether member `id` is up as this member (the leader) sees it: itself, or heard from
    /// within an election timeout. raft-rs's `recent_active` alone is not enough: it is false
    /// for every follower just after an election and after each quorum check, until the
    /// follower's next answer.
    pub fn is_up(&self, id: u64) -> bool {
        let window = TICK * self.raw.raft.election_timeout() as u32;
        id == self.raw.raft.id
            || self.raw.raft.prs().get(id).is_some_and(|p| p.recent_active)
            || self
                .last_contact
                .get(&id)
                .is_some_and(|at| at.elapsed() < window)
    }

    /// Why removing `ids` would stall the group, when it would: the voters that stay and are
    /// up ([`Node::is_up`]) are fewer than a quorum of the configuration after the change.
    fn stalls_without(&self, ids: &[u64]) -> Option<String> {
        let staying: Vec<u64> = self
            .conf_state
            .voters
            .iter()
            .copied()
            .filter(|v| !ids.contains(v))
            .collect();
        let up: Vec<u64> = staying.iter().copied().filter(|v| self.is_up(*v)).collect();
        let quorum = staying.len() / 2 + 1;
        (up.len() < quorum).then(|| {
            format!(
                "removing {ids:?} leaves {} voters up of the {} that stay ({up:?} of {staying:?}); \
                 the group needs {quorum} to commit anything, so it would stall. Bring a member \
                 up first, or remove with force",
                up.len(),
                staying.len()
            )
        })
    }

    fn propose(
        &mut self,
        command: Vec<u8>,
        reply: Option<oneshot::Sender<Result<S::Output, ProposeError>>>,
    ) {
        if self.role != StateRole::Leader {
            if let Some(reply) = reply {
                let _ = reply.send(Err(self.not_leader()));
            }
            return;
        }
        let id = self.next_proposal;
        self.next_proposal += 1;
        let context = if reply.is_some() {
            self.context(id)
        } else {
            Vec::new()
        };
        match self.raw.propose(context, command) {
            Ok(()) => {
                metrics::RAFT_PROPOSALS.inc();
                if let Some(reply) = reply {
                    self.waiters.insert(
                        id,
                        Waiter {
                            reply,
                            proposed: Instant::now(),
                        },
                    );
                }
            }
            Err(e) => {
                // raft-rs drops a leader's proposal only during a leadership transfer (its
                // `max_uncommitted_size` is never reached: `raft_settings`).
                tracing::warn!(error = %e, "proposal dropped");
                if let Some(reply) = reply {
                    let _ = reply.send(Err(self.not_leader()));
                }
            }
        }
    }

    /// The context of this member's proposal `id`: [`Node::proposer`], then `id`.
    fn context(&self, id: u64) -> Vec<u8> {
        let mut context = self.proposer.to_vec();
        context.extend_from_slice(&id.to_le_bytes());
        context
    }

    /// The proposal id in `context` when this member proposed it in this run.
    fn proposal_id(&self, context: &[u8]) -> Option<u64> {
        let (proposer, id) = context.split_at_checked(PROPOSER_BYTES)?;
        if proposer != self.proposer {
            return None;
        }
        Some(u64::from_le_bytes(id.try_into().ok()?))
    }

    fn not_leader(&self) -> ProposeError {
        ProposeError::NotLeader {
            leader: self.membership.members.address(self.leader_id),
        }
    }

    /// Proposes a membership change asked for by an operator, once checked. A change already
    /// made (asked again after a failover) is answered without a proposal. While another change
    /// (or a leadership transfer) is in progress it waits, up to [`CHANGE_WAIT`], and is made
    /// once that one is applied; one whose caller gave up meanwhile is dropped. raft-rs
    /// counts a change as pending on a leader just elected until it applied the entries before
    /// its term's first one, which an operator's retry after a leader hand-over meets.
    fn change_members(
        &mut self,
        change: MemberChange,
        reply: oneshot::Sender<Result<(), ProposeError>>,
    ) {
        self.parked_changes.push(ParkedChange {
            change,
            reply,
            until: Instant::now() + CHANGE_WAIT,
        });
        self.make_parked_changes();
    }

    /// Makes the waiting membership changes that can be made now, in the order asked, and
    /// refuses those that waited too long (at each tick and when one is asked).
    fn make_parked_changes(&mut self) {
        for parked in std::mem::take(&mut self.parked_changes) {
            // The operator gave up (the call ended): the change is not made.
            if parked.reply.is_closed() {
                continue;
            }
            if self.role != StateRole::Leader {
                let _ = parked.reply.send(Err(self.not_leader()));
                continue;
            }
            // While a change is pending, the configuration is not yet what it will be: a
            // change is "already made" only once nothing is pending. During a leadership
            // transfer raft-rs drops proposals: the change waits for it to end too.
            if self.raw.raft.has_pending_conf()
                || membership::is_joint(&self.conf_state)
                || self.raw.raft.lead_transferee.is_some()
            {
                if Instant::now() < parked.until {
                    self.parked_changes.push(parked);
                } else {
                    let _ = parked.reply.send(Err(ProposeError::Membership(
                        "a membership change is in progress; ask again once it is applied".into(),
                    )));
                }
                continue;
            }
            if self.already_made(&parked.change) {
                let _ = parked.reply.send(Ok(()));
                continue;
            }
            self.make_change(parked.change, parked.reply);
        }
    }

    /// Whether `change` is already what the applied configuration holds (asked when no change
    /// is pending): a member added at the same address (a learner still counts), or none of
    /// the members to remove left.
    fn already_made(&self, change: &MemberChange) -> bool {
        match change {
            MemberChange::Add { id, address } => {
                let cs = &self.conf_state;
                (cs.voters.contains(id) || cs.learners.contains(id))
                    && self.membership.current.as_ref().is_some_and(|m| {
                        m.members
                            .iter()
                            .any(|r| r.id == *id && r.address == *address)
                    })
            }
            MemberChange::Remove { ids, .. } => {
                let cs = &self.conf_state;
                !ids.is_empty()
                    && ids
                        .iter()
                        .all(|id| !cs.voters.contains(id) && !cs.learners.contains(id))
            }
        }
    }

    /// Proposes `change` (checked; no change in progress, not already made).
    fn make_change(
        &mut self,
        change: MemberChange,
        reply: oneshot::Sender<Result<(), ProposeError>>,
    ) {
        let change = match change {
            MemberChange::Remove { ids, force } => {
                let cs = &self.conf_state;
                let present: Vec<u64> = ids
                    .iter()
                    .copied()
                    .filter(|id| cs.voters.contains(id) || cs.learners.contains(id))
                    .collect();
                MemberChange::Remove {
                    ids: present,
                    force,
                }
            }
            add => add,
        };
        let checked = match &change {
            MemberChange::Add { id, address } => {
                membership::check_add(&self.conf_state, *id, address)
                    .map(|()| membership::add_learner(*id, address))
            }
            MemberChange::Remove { ids, force } => membership::check_remove(&self.conf_state, ids)
                .and_then(|()| match self.stalls_without(ids) {
                    Some(reason) if !force => Err(reason),
                    _ => Ok(membership::remove(ids)),
                }),
        };
        let change_v2 = match checked {
            Ok(cc) => cc,
            Err(reason) => {
                let _ = reply.send(Err(ProposeError::Membership(reason)));
                return;
            }
        };
        if matches!(&change, MemberChange::Remove { ids, .. } if ids.contains(&self.raw.raft.id)) {
            // A leader does not remove itself: it hands leadership to a member that stays,
            // and the new leader is asked.
            let handed_over = match &change {
                MemberChange::Remove { ids, .. } => self.step_down_avoiding(ids),
                MemberChange::Add { .. } => false,
            };
            let _ = reply.send(Err(if handed_over {
                ProposeError::NotLeader { leader: None }
            } else {
                ProposeError::Membership(
                    "this master leads the group and no member that stays is up to take \
                     leadership over; bring one up, then ask again"
                        .into(),
                )
            }));
            return;
        }
        let id = self.next_proposal;
        self.next_proposal += 1;
        match self.raw.propose_conf_change(self.context(id), change_v2) {
            Ok(()) => {
                tracing::info!(?change, "membership change proposed");
                self.member_waiters.insert(id, reply);
            }
            Err(e) => {
                let _ = reply.send(Err(ProposeError::Membership(format!(
                    "the membership change was not proposed: {e}"
                ))));
            }
        }
    }

    /// The leader's part in membership changes, once per tick: records the members it sees
    /// take part (`MembersSeen`), leaves a joint configuration a former leader could not leave,
    /// and promotes a learner that caught up.
    fn leader_duties(&mut self) {
        if self.role != StateRole::Leader {
            return;
        }
        let unseen: Vec<u64> = {
            let current = self.membership.current.as_ref();
            let mut ids: Vec<u64> = self
                .raw
                .raft
                .prs()
                .iter()
                .filter(|(id, progress)| {
                    progress.matched > 0
                        && current
                            .is_some_and(|m| m.members.iter().any(|r| r.id == **id && !r.seen))
                        && self
                            .seen_proposed
                            .get(id)
                            .is_none_or(|at| at.elapsed() >= SEEN_RETRY)
                })
                .map(|(id, _)| *id)
                .collect();
            ids.sort_unstable();
            ids
        };
        if !unseen.is_empty() {
            let now = Instant::now();
            for id in &unseen {
                self.seen_proposed.insert(*id, now);
            }
            let command = self.machine.members_seen(unseen);
            self.propose(command, None);
        }
        if self.raw.raft.has_pending_conf() {
            return;
        }
        if membership::is_joint(&self.conf_state) {
            if !self.conf_state.voters.contains(&self.raw.raft.id) {
                // Being removed: a member that stays leads and leaves it.
                let outgoing_only: Vec<u64> = self
                    .conf_state
                    .voters_outgoing
                    .iter()
                    .copied()
                    .filter(|v| !self.conf_state.voters.contains(v))
                    .collect();
                if self.raw.raft.lead_transferee.is_none() {
                    self.step_down_avoiding(&outgoing_only);
                }
                return;
            }
            tracing::info!("leaving the joint configuration a former leader entered");
            if let Err(e) = self
                .raw
                .propose_conf_change(Vec::new(), membership::leave_joint())
            {
                tracing::warn!(error = %e, "leaving the joint configuration was not proposed");
            }
            return;
        }
        let last = self.raw.raft.raft_log.last_index();
        let caught_up = self.conf_state.learners.iter().copied().find(|id| {
            self.raw.raft.prs().get(*id).is_some_and(|p| {
                p.recent_active && p.matched > 0 && p.matched + membership::PROMOTE_WITHIN >= last
            })
        });
        if let Some(id) = caught_up {
            tracing::info!(member = id, "learner caught up; promoting it to voter");
            if let Err(e) = self
                .raw
                .propose_conf_change(Vec::new(), membership::promote(id))
            {
                tracing::warn!(member = id, error = %e, "the promotion was not proposed");
            }
        }
    }

    /// Reads the membership back from the state machine after it changed, and follows it:
    /// the addresses the transport sends to and the peer service accepts.
    fn refresh_membership(&mut self) -> Result<(), RaftError> {
        let current = self.machine.membership().map_err(RaftError::StateMachine)?;
        let addresses = membership::addresses(current.as_ref(), &self.membership.known);
        if current.is_some() && !addresses.contains_key(&self.raw.raft.id) {
            tracing::warn!(
                id = self.raw.raft.id,
                "this master was removed from the group; stop it"
            );
        }
        self.transport.set_members(&addresses);
        self.membership.members.set(addresses);
        self.membership.current = current;
        self.publish_membership();
        Ok(())
    }

    fn fail_waiters(&mut self, error: ProposeError) {
        for (_, waiter) in self.waiters.drain() {
            let _ = waiter.reply.send(Err(error.clone()));
        }
        for (_, reply) in self.member_waiters.drain() {
            let _ = reply.send(Err(error.clone()));
        }
        for parked in self.parked_changes.drain(..) {
            let _ = parked.reply.send(Err(error.clone()));
        }
        for reply in self.reads.drain() {
            let _ = reply.send(Err(error.clone()));
        }
    }

    /// Answers the reads whose read index is applied here.
    fn answer_reads(&mut self) {
        let applied = self.applied;
        self.reads.confirmed.retain_mut(|(index, replies)| {
            if *index > applied {
                return true;
            }
            for reply in replies.drain(..) {
                let _ = reply.send(Ok(()));
            }
            false
        });
    }

    fn on_ready(&mut self) -> Result<(), RaftError> {
        if !self.raw.has_ready() {
            return Ok(());
        }
        let mut ready = self.raw.ready();

        // A new leader's first appends go out before it applies what waited (below).
        if !ready.messages().is_empty() {
            self.transport.send(ready.take_messages());
        }
        if let Some(ss) = ready.ss() {
            // A new leader schedules from the applied state: everything committed must be in
            // it. A write that fails here stops the node like any other.
            self.apply_deferred()?;
            self.role_changed(ss.raft_state, ss.leader_id);
        }
        if !ready.snapshot().is_empty() {
            self.restore(ready.snapshot().clone())?;
        }
        for state in ready.take_read_states() {
            if let Some(replies) = self.reads.requested.remove(&state.request_ctx) {
                self.reads.confirmed.push((state.index, replies));
            }
        }
        // What is committed is applied before what is new is written: raft-rs hands over only
        // entries this member has persisted (`RaftLog::next_entries_since` stops at
        // min(committed, persisted)), as its own examples apply them first. A leader whose
        // followers acknowledged the last append while it was writing answers those clients
        // now, not after the next append's write and fsync (one device round trip per round:
        // a job takes three rounds).
        self.apply_or_defer(ready.take_committed_entries())?;
        let entries = ready.take_entries();
        self.persist(&entries, ready.hs(), ready.must_sync())?;
        if !ready.persisted_messages().is_empty() {
            self.transport.send(ready.take_persisted_messages());
        }

        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            // Kept in memory only: see `Node::persist`.
            self.raw.mut_store().set_commit(commit);
        }
        if !light.messages().is_empty() {
            self.transport.send(light.take_messages());
        }
        // What this write committed (a group of one commits as it persists).
        self.apply_or_defer(light.take_committed_entries())?;
        self.raw.advance_apply();
        Ok(())
    }

    fn role_changed(&mut self, role: StateRole, leader_id: u64) {
        let was_leader = self.role == StateRole::Leader;
        self.role = role;
        if self.leader_id != leader_id {
            metrics::RAFT_LEADER_CHANGES.inc();
            tracing::info!(leader = leader_id, role = ?role, "leader changed");
        }
        self.leader_id = leader_id;
        let is_leader = role == StateRole::Leader;
        if was_leader && !is_leader {
            let error = self.not_leader();
            self.fail_waiters(error);
        }
        if is_leader && !was_leader {
            self.seen_proposed.clear();
        }
        if was_leader != is_leader {
            self.machine.role_changed(is_leader);
        }
    }

    fn restore(&mut self, snapshot: Snapshot) -> Result<(), RaftError> {
        let meta = snapshot.get_metadata();
        tracing::info!(
            index = meta.index,
            term = meta.term,
            streamed = snapshot.data.as_slice() == snapshot::MARKER,
            "restoring a snapshot from the leader"
        );
        // The snapshot holds everything up to its index, deferred entries included.
        self.deferred.clear();
        let started = Instant::now();
        if snapshot.data.as_slice() == snapshot::MARKER {
            snapshot::restore(&*self.machine, &self.snapshot_dir, meta)?;
        } else {
            // A leader before streamed snapshots sent the whole index in the message.
            self.machine
                .restore_message(&snapshot.data, meta.index, meta.term)
                .map_err(RaftError::StateMachine)?;
        }
        tracing::info!(
            index = meta.index,
            ms = started.elapsed().as_millis() as u64,
            "snapshot restored"
        );
        failpoints::point!(failpoints::SNAPSHOT_BEFORE_LOG_RESET);
        self.raw.mut_store().apply_snapshot(meta)?;
        self.conf_state = meta.get_conf_state().clone();
        self.refresh_membership()?;
        self.applied = meta.index;
        self.durable_applied = meta.index;
        Ok(())
    }

    /// Appends `entries` (and a new term or vote in `hard_state`) to the log, fsynced when
    /// raft-rs says the Ready must be synced. A HardState whose only change is the commit index
    /// is kept in memory, not written: a commit index can always be learnt again (from the
    /// leader, or by a new leader's first commit), and a restart starts from at least the
    /// index's applied index ([`RaftStorage::open`]).
    fn persist(
        &mut self,
        entries: &[Entry],
        hard_state: Option<&raft::prelude::HardState>,
        must_sync: bool,
    ) -> Result<(), RaftError> {
        let sync = must_sync || !entries.is_empty();
        let storage = self.raw.mut_store();
        if !sync {
            if let Some(hs) = hard_state {
                storage.set_commit(hs.commit);
            }
            return Ok(());
        }
        let started = Instant::now();
        storage.append(entries);
        if let Some(hs) = hard_state {
            storage.set_hard_state(hs);
        }
        storage.persist(true)?;
        metrics::RAFT_FSYNC_SECONDS.observe(started.elapsed().as_secs_f64());
        metrics::RAFT_ENTRIES_PER_FSYNC.observe(entries.len() as f64);
        Ok(())
    }

    /// Applies `committed` to the state machine now on the leader (clients wait for it). A follower
    /// lets them wait, at most [`TICK`] or [`MAX_DEFERRED`] entries, and applies many appends'
    /// worth in one write transaction: nothing waits on a follower's apply (clients are
    /// answered by the leader), the entries are durable in the log (a restart applies them
    /// again from there), and a follower that becomes leader applies them first
    /// ([`Node::on_ready`], before [`Node::role_changed`]).
    fn apply_or_defer(&mut self, committed: Vec<Entry>) -> Result<(), RaftError> {
        if committed.is_empty() {
            return Ok(());
        }
        // A membership change is applied at once: raft-rs counts entries handed over as applied
        // and must not campaign (a leader transfer) with a configuration it has not applied.
        let conf_change = committed
            .iter()
            .any(|e| e.get_entry_type() != EntryType::EntryNormal);
        self.deferred.extend(committed);
        if self.role == StateRole::Leader || conf_change || self.deferred.len() >= MAX_DEFERRED {
            return self.apply_deferred();
        }
        Ok(())
    }

    /// Applies what [`Node::apply_or_defer`] let wait.
    fn apply_deferred(&mut self) -> Result<(), RaftError> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut self.deferred);
        self.apply(&all)
    }

    /// Applies what waits and makes the state machine durable, then ends the thread (a restart
    /// then replays nothing).
    fn stop(&mut self) {
        if let Err(e) = self.apply_deferred() {
            tracing::warn!(error = %e, "applying deferred entries at stop failed");
        }
        match self.machine.sync() {
            Ok(()) => self.durable_applied = self.applied,
            Err(e) => tracing::warn!(error = %e, "the index's last durable write failed"),
        }
    }

    /// Applies `committed` to the state machine in one write transaction, durable only at a
    /// checkpoint ([`CHECKPOINT_ENTRIES`], [`CHECKPOINT_INTERVAL`]): between checkpoints the
    /// log holds what the state machine may lose, and compaction keeps it. Membership changes
    /// are applied to raft-rs here, and stored in the same transaction.
    fn apply(&mut self, committed: &[Entry]) -> Result<(), RaftError> {
        let committed: Vec<&Entry> = committed
            .iter()
            .filter(|e| e.index > self.applied)
            .collect();
        let Some(last) = committed.last() else {
            return Ok(());
        };
        let (last_index, last_term) = (last.index, last.term);
        // The first apply is durable at once: the log's first entry is then compacted
        // (`RaftStorage::maybe_compact`), so that a member joining with an empty log gets a
        // snapshot (which carries the membership) rather than the log from entry 1.
        let checkpoint = self.durable_applied == 0
            || last_index - self.durable_applied >= CHECKPOINT_ENTRIES
            || self.last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL;
        let mut entries = Vec::new();
        // Per entry of the batch: the proposal context of a command (`None`: a membership
        // change).
        let mut contexts: Vec<Option<&[u8]>> = Vec::new();
        // Membership changes applied: their proposal contexts and outcomes; the last
        // configuration.
        let mut member_replies = Vec::new();
        let mut conf_state = None;
        for entry in &committed {
            if entry.get_entry_type() == EntryType::EntryNormal {
                if !entry.data.is_empty() {
                    entries.push(Applying::Command {
                        index: entry.index,
                        data: &entry.data[..],
                        place: self.raw.store().data_place(entry.index),
                    });
                    contexts.push(Some(&entry.context[..]));
                }
                continue;
            }
            let outcome = self.apply_conf_change(entry);
            let reply = match outcome {
                Ok((cs, change)) => {
                    conf_state = Some(cs);
                    entries.push(Applying::Membership {
                        index: entry.index,
                        change,
                    });
                    contexts.push(None);
                    Ok(())
                }
                Err(reason) => Err(reason),
            };
            member_replies.push((entry.context.to_vec(), reply));
        }
        let outcome = self
            .machine
            .apply(Batch {
                entries,
                applied: (last_index, last_term),
                durable: checkpoint,
                is_leader: self.role == StateRole::Leader,
            })
            .map_err(RaftError::StateMachine)?;
        self.applied = last_index;
        let membership_touched = conf_state.is_some() || outcome.membership_changed;
        if let Some(cs) = conf_state {
            tracing::info!(voters = ?cs.voters, learners = ?cs.learners, outgoing = ?cs.voters_outgoing, "membership changed");
            self.raw.mut_store().set_conf_state(cs.clone());
            let me = self.raw.raft.id;
            let leaving = self.role == StateRole::Leader && !cs.voters.contains(&me);
            let outgoing_only: Vec<u64> = cs
                .voters_outgoing
                .iter()
                .copied()
                .filter(|v| !cs.voters.contains(v))
                .collect();
            self.conf_state = cs;
            if leaving {
                // A leader that is not in the configuration being entered (elected while a
                // joint configuration removed it) hands leadership to a member that stays.
                self.step_down_avoiding(&outgoing_only);
            }
        }
        if membership_touched {
            self.refresh_membership()?;
        }
        for (context, outcome) in member_replies {
            let Some(id) = self.proposal_id(&context) else {
                continue;
            };
            if let Some(reply) = self.member_waiters.remove(&id) {
                let _ = reply.send(outcome.map_err(ProposeError::Membership));
            }
        }
        metrics::RAFT_WRITES
            .with_label_values(&[if checkpoint { "fsync" } else { "none" }])
            .inc();
        if checkpoint {
            self.durable_applied = last_index;
            self.last_checkpoint = Instant::now();
        }
        // Never past a snapshot being sent: the follower continues from the log after it.
        let sending = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(_, p)| p.state == raft::ProgressState::Snapshot)
            .map(|(_, p)| p.pending_snapshot)
            .min()
            .unwrap_or(u64::MAX);
        self.raw.mut_store().maybe_compact(
            self.applied,
            self.durable_applied.min(sending),
            checkpoint,
        )?;
        for (context, output) in contexts.into_iter().zip(outcome.outputs) {
            let Some(id) = context.and_then(|c| self.proposal_id(c)) else {
                continue;
            };
            if let Some(waiter) = self.waiters.remove(&id) {
                metrics::RAFT_COMMIT_SECONDS.observe(waiter.proposed.elapsed().as_secs_f64());
                let _ = waiter.reply.send(output.ok_or_else(|| {
                    ProposeError::Storage("the command does not decode; it was skipped".into())
                }));
            }
        }
        Ok(())
    }

    /// Applies the membership change in `entry` to raft-rs: the new configuration and how to
    /// make the stored membership after it, or why raft-rs refused it (the same on every
    /// master; nothing changes).
    fn apply_conf_change(
        &mut self,
        entry: &Entry,
    ) -> Result<(ConfState, MembershipChange), String> {
        use prost011::Message as _;
        let change: Result<ConfChangeV2, String> = match entry.get_entry_type() {
            EntryType::EntryConfChangeV2 => {
                ConfChangeV2::decode(entry.data.as_slice()).map_err(|e| e.to_string())
            }
            // A version-1 change (never proposed here): one change, as raft-rs reads it.
            _ => ConfChange::decode(entry.data.as_slice())
                .map(|cc| ConfChangeV2 {
                    changes: vec![ConfChangeSingle {
                        change_type: cc.change_type,
                        node_id: cc.node_id,
                    }],
                    context: cc.context,
                    ..ConfChangeV2::default()
                })
                .map_err(|e| e.to_string()),
        };
        // raft-rs may append a second "leave the joint configuration" entry before the first
        // is applied (it checks when `advance` is called, before this apply): once the first
        // left it, the second has nothing to do, on every master alike.
        if let Ok(cc) = &change
            && cc.changes.is_empty()
            && !membership::is_joint(&self.raw.raft.prs().conf().to_conf_state())
        {
            tracing::debug!(
                index = entry.index,
                "a second request to leave the joint configuration; nothing to do"
            );
            return Err("not in a joint configuration".into());
        }
        let applied = change.and_then(|cc| {
            self.raw
                .apply_conf_change(&cc)
                .map(|cs| (cc, cs))
                .map_err(|e| e.to_string())
        });
        match applied {
            Ok((cc, cs)) => {
                let (after_cs, known) = (cs.clone(), self.membership.known.clone());
                let change: MembershipChange = Box::new(move |before| {
                    membership::after_change(before.as_ref(), &cc, &after_cs, &known)
                });
                Ok((cs, change))
            }
            Err(reason) => {
                tracing::warn!(index = entry.index, %reason, "membership change not applied");
                Err(format!("the membership change was not applied: {reason}"))
            }
        }
    }

    /// Publishes the membership view of [`RaftStatus`] (once per tick, and after a membership
    /// change): the membership, outgoing voters, whether a change is in progress, and how long
    /// ago each member was heard from.
    fn publish_membership(&mut self) {
        let mut last_contact_ms: Vec<(u64, u64)> = self
            .last_contact
            .iter()
            .map(|(id, at)| (*id, at.elapsed().as_millis() as u64))
            .collect();
        last_contact_ms.sort_unstable();
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        status.membership = self.membership.current.clone();
        status.outgoing = self.conf_state.voters_outgoing.clone();
        status.changing = self.raw.raft.has_pending_conf()
            || membership::is_joint(&self.conf_state)
            || !self.conf_state.learners.is_empty();
        status.last_contact_ms = last_contact_ms;
    }

    fn publish_status(&mut self) {
        let raft = self.raw.raft.clone_status();
        let mut status = self.status.write().unwrap_or_else(|e| e.into_inner());
        let kept = std::mem::replace(&mut *status, raft);
        status.applied = self.applied;
        status.leader_address = self.membership.members.address(self.leader_id);
        // The membership view is kept (moved, not copied): it changes at a tick or a
        // membership change only (`Node::publish_membership`).
        status.membership = kept.membership;
        status.outgoing = kept.outgoing;
        status.last_contact_ms = kept.last_contact_ms;
        status.changing = kept.changing;
        metrics::RAFT_TERM.set(status.term as i64);
        metrics::RAFT_LEADER.set(i64::from(status.role == StateRole::Leader));
        metrics::RAFT_COMMIT_INDEX.set(status.commit as i64);
        metrics::RAFT_APPLIED_INDEX.set(status.applied as i64);
        metrics::RAFT_LOG_BYTES.set(self.raw.store().retained_bytes() as i64);
        metrics::RAFT_LOG_FIRST_INDEX.set(self.raw.store().first_entry_index() as i64);
    }
}

/// Reads what [`RaftStatus`] shows from raft-rs's state.
trait CloneStatus {
    fn clone_status(&self) -> RaftStatus;
}

impl CloneStatus for raft::Raft<RaftStorage> {
    fn clone_status(&self) -> RaftStatus {
        let last_index = self.raft_log.last_index();
        let progress = if self.state == StateRole::Leader {
            self.prs().iter().map(|(id, p)| (*id, p.matched)).collect()
        } else {
            Vec::new()
        };
        RaftStatus {
            id: self.id,
            role: self.state,
            term: self.term,
            leader_id: self.leader_id,
            leader_address: None,
            commit: self.raft_log.committed,
            applied: 0,
            last_index,
            progress,
            ..RaftStatus::default()
        }
    }
}

/// Raft messages encoded for the wire (prost, raft-rs's `eraftpb`).
pub fn encode_message(m: &Message) -> Vec<u8> {
    m.encode_to_vec()
}

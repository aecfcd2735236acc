//! What Raft replicates into: the [`StateMachine`] trait. Raft's node, storage and transport
//! know nothing else of it: commands are bytes to them, and a snapshot is a stream of bytes
//! ([`SnapshotData`]). The master's index implements it (`replica.rs`); the simulation
//! test (`master/tests/raft_simulation.rs`) drives the real node over that same index.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};

use symcluster_proto::cluster::v1 as pb;

use super::error::StateMachineError;
use crate::open_files::OpenFiles;

/// Makes the group's membership after a change from the one before it (`None`: none stored).
pub type MembershipChange = Box<dyn FnOnce(Option<pb::Membership>) -> pb::Membership + Send>;

/// One committed entry, as the state machine applies it, in log order.
pub enum Applying<'a> {
    /// A command a leader proposed: its bytes as proposed.
    Command {
        /// The entry's log index.
        index: u64,
        /// The command.
        data: &'a [u8],
        /// Where `data` is in the log, durably written: the segment's sequence number and the
        /// byte offset in it (`None`: not known). The state machine may reference bytes of it
        /// there instead of copying them ([`StateView::log_segments_in_use`]).
        place: Option<(u64, u64)>,
    },
    /// A membership change raft-rs applied: `change` makes the group's membership after it
    /// from the stored one before it (as the batch's earlier entries left it), to be stored in
    /// the same transaction as the applied index.
    Membership {
        /// The entry's log index.
        index: u64,
        /// Makes the membership after the change.
        change: MembershipChange,
    },
}

/// Committed entries applied in one transaction.
pub struct Batch<'a> {
    /// The entries with an effect, in log order (empty entries and refused membership
    /// changes have none).
    pub entries: Vec<Applying<'a>>,
    /// The last entry of the batch (it may have no effect): the applied index and its term
    /// after the batch, stored with its effects.
    pub applied: (u64, u64),
    /// The transaction must be durable when it returns (a checkpoint); otherwise it may be
    /// lost in a crash (the log replays it).
    pub durable: bool,
    /// This member leads now.
    pub is_leader: bool,
}

/// What applying a [`Batch`] did.
#[derive(Debug)]
pub struct Outcome<O> {
    /// One per entry of [`Batch::entries`]: a command's output (`None` for a command that
    /// does not decode, skipped alike on every member, and for membership changes).
    pub outputs: Vec<Option<O>>,
    /// A command changed the stored membership (read it again: [`StateMachine::membership`]).
    pub membership_changed: bool,
}

/// A consistent copy of the state at one applied index, to stream to a follower or a backup.
pub trait SnapshotData: Send + 'static {
    /// The log index the copy reflects (the applied index).
    fn index(&self) -> u64;
    /// That entry's term.
    fn term(&self) -> u64;
    /// The group's membership at that index (`None` before a first one).
    fn membership(&self) -> Result<Option<pb::Membership>, StateMachineError>;
    /// Writes the copy into `out`, a stream [`StateMachine::restore_from`] reads.
    fn write_to(&self, out: &mut dyn Write) -> Result<(), StateMachineError>;
}

/// What Raft's storage reads of the state machine: where it stands, and snapshots for
/// followers (raft-rs asks the storage for them).
pub trait StateView: Send + Sync + 'static {
    /// The last applied log index and its term, as stored (0, 0 when empty).
    fn applied(&self) -> Result<(u64, u64), StateMachineError>;
    /// The group's membership as stored (`None` before a first one).
    fn membership(&self) -> Result<Option<pb::Membership>, StateMachineError>;
    /// A consistent copy of the state now.
    fn snapshot(&self) -> Result<Box<dyn SnapshotData>, StateMachineError>;
    /// The log's segment files, open for reading: where the bytes that
    /// [`Applying::Command::place`] names can be read. Called once, when the log opens.
    fn attach_log(&self, files: OpenFiles) {
        let _ = files;
    }
    /// The log segments (sequence numbers) holding bytes the state machine references, as of
    /// its last commit: the log keeps them until they are not (none by default).
    fn log_segments_in_use(&self) -> Result<BTreeSet<u64>, StateMachineError> {
        Ok(BTreeSet::new())
    }
}

/// The replicated state. Every member applies the same committed entries in the same order
/// and must reach the same state: `apply` is a pure function of the stored state and the
/// entries, whatever the batches. Methods take `&self`: Raft's storage takes snapshots while
/// the node applies.
pub trait StateMachine: StateView {
    /// What applying one command gives its proposer.
    type Output: Send + 'static;

    /// Stores `membership` unless one is stored (a new group's first).
    fn seed_membership(&self, membership: &pb::Membership) -> Result<(), StateMachineError>;
    /// The command that marks `member_ids` as seen taking part in the group (proposed by the
    /// leader; applied like any command, it changes the stored membership).
    fn members_seen(&self, member_ids: Vec<u64>) -> Vec<u8>;
    /// Applies `batch` in one transaction, with its applied index.
    fn apply(&self, batch: Batch<'_>) -> Result<Outcome<Self::Output>, StateMachineError>;
    /// Makes everything applied durable (at stop).
    fn sync(&self) -> Result<(), StateMachineError>;
    /// Replaces the state with the copy in `input` ([`SnapshotData::write_to`]), durably;
    /// returns the applied index and term it reflects.
    fn restore_from(&self, input: &mut dyn BufRead) -> Result<(u64, u64), StateMachineError>;
    /// Replaces the state with `data`, the whole copy a leader before streamed snapshots put
    /// in its snapshot message, at (`index`, `term`).
    fn restore_message(&self, data: &[u8], index: u64, term: u64) -> Result<(), StateMachineError>;
    /// This member became the leader (`true`) or stopped being it.
    fn role_changed(&self, is_leader: bool);
}

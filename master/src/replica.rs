//! The index as Raft's state machine: where Raft ([`crate::raft`], which knows nothing of jobs)
//! meets the job store ([`crate::index`]) and the scheduler's projection ([`Hooks`]).
//!
//! - [`IndexMachine`] implements [`StateMachine`]: a batch of committed entries is one `redb`
//!   write transaction ([`Applier`]), with the applied index; snapshots are the index's
//!   ([`SnapshotSource`]); after each batch (and after a restore) the scheduler hears what
//!   changed, in log order, with the records after each change.
//! - [`RaftHandle`] is Raft's handle with the index's commands in and [`Applied`] out.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::sync::Arc;

use redb::Durability;
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::cluster::v1::command::Kind;

use crate::failpoints;
use crate::index::apply::{Applied, Applier};
use crate::index::bodies::InLog;
use crate::index::body_tables;
use crate::index::snapshot::SnapshotSource;
use crate::index::{Command, Index, IndexError, command, db};
use crate::open_files::OpenFiles;
use crate::raft::ProposeError;
use crate::raft::error::StateMachineError;
use crate::raft::state_machine::{Applying, Batch, Outcome, SnapshotData, StateMachine, StateView};

/// Raft's handle as the master uses it: index commands in, what applying them did out.
pub type RaftHandle = crate::raft::RaftHandle<Applied>;

/// What the scheduler learns from the state machine. Called on the Raft thread: keep them
/// short and never block on a proposal.
pub trait Hooks: Send + Sync {
    /// Commands applied to the index (in log order), each with what it did (the job's record
    /// after the change). `is_leader`: whether this master leads now. A hook may take a
    /// lease's spec (`Applied::Changed::spec`) to send it; the rest is left as it was.
    fn applied(&self, changes: &mut [(Command, Applied)], is_leader: bool);
    /// This master became the leader (`true`) or stopped being it (`false`).
    fn role_changed(&self, is_leader: bool);
    /// The index was replaced by a snapshot from the leader.
    fn restored(&self);
}

/// The index, replicated: Raft's [`StateMachine`].
pub struct IndexMachine {
    index: Index,
    hooks: Arc<dyn Hooks>,
}

impl IndexMachine {
    /// The state machine over `index`, telling `hooks` (the scheduler) what changed.
    pub fn new(index: Index, hooks: Arc<dyn Hooks>) -> Self {
        IndexMachine { index, hooks }
    }
}

fn boxed(e: IndexError) -> StateMachineError {
    Box::new(e)
}

impl StateView for Index {
    fn applied(&self) -> Result<(u64, u64), StateMachineError> {
        Index::applied(self).map_err(boxed)
    }

    fn membership(&self) -> Result<Option<pb::Membership>, StateMachineError> {
        Index::membership(self).map_err(boxed)
    }

    fn snapshot(&self) -> Result<Box<dyn SnapshotData>, StateMachineError> {
        Ok(Box::new(self.snapshot_source().map_err(boxed)?))
    }

    fn attach_log(&self, files: OpenFiles) {
        self.bodies().attach_log(files);
    }

    fn log_segments_in_use(&self) -> Result<BTreeSet<u64>, StateMachineError> {
        Index::log_segments_in_use(self).map_err(boxed)
    }
}

impl SnapshotData for SnapshotSource {
    fn index(&self) -> u64 {
        self.index
    }

    fn term(&self) -> u64 {
        self.term
    }

    fn membership(&self) -> Result<Option<pb::Membership>, StateMachineError> {
        SnapshotSource::membership(self).map_err(boxed)
    }

    fn write_to(&self, mut out: &mut dyn Write) -> Result<(), StateMachineError> {
        SnapshotSource::write_to(self, &mut out)
            .map(|_| ())
            .map_err(boxed)
    }
}

impl StateView for IndexMachine {
    fn applied(&self) -> Result<(u64, u64), StateMachineError> {
        StateView::applied(&self.index)
    }

    fn membership(&self) -> Result<Option<pb::Membership>, StateMachineError> {
        StateView::membership(&self.index)
    }

    fn snapshot(&self) -> Result<Box<dyn SnapshotData>, StateMachineError> {
        StateView::snapshot(&self.index)
    }

    fn attach_log(&self, files: OpenFiles) {
        StateView::attach_log(&self.index, files);
    }

    fn log_segments_in_use(&self) -> Result<BTreeSet<u64>, StateMachineError> {
        StateView::log_segments_in_use(&self.index)
    }
}

impl StateMachine for IndexMachine {
    type Output = Applied;

    fn seed_membership(&self, membership: &pb::Membership) -> Result<(), StateMachineError> {
        self.index
            .seed_membership(membership)
            .map(|_| ())
            .map_err(boxed)
    }

    fn members_seen(&self, member_ids: Vec<u64>) -> Vec<u8> {
        command::encode(&command::members_seen(member_ids))
    }

    fn apply(&self, batch: Batch<'_>) -> Result<Outcome<Applied>, StateMachineError> {
        let (outcome, changes) = self.apply_in_one_transaction(batch).map_err(boxed)?;
        let Some((mut changes, positions, is_leader)) = changes else {
            return Ok(outcome);
        };
        self.hooks.applied(&mut changes, is_leader);
        let mut outcome = outcome;
        for ((_, applied), position) in changes.into_iter().zip(positions) {
            outcome.outputs[position] = Some(applied);
        }
        Ok(outcome)
    }

    fn sync(&self) -> Result<(), StateMachineError> {
        let txn = self
            .index
            .database()
            .begin_write()
            .map_err(db)
            .map_err(boxed)?;
        // A durable commit makes every earlier commit durable, and with it the body-file
        // references they hold: those bodies are made durable first (index/bodies.rs).
        body_tables::sync(self.index.bodies()).map_err(boxed)?;
        failpoints::point!(failpoints::INDEX_COMMIT_BEFORE);
        txn.commit().map_err(db).map_err(boxed)?;
        failpoints::point!(failpoints::INDEX_COMMIT_AFTER);
        body_tables::delete_retired(self.index.bodies());
        Ok(())
    }

    fn restore_from(&self, mut input: &mut dyn BufRead) -> Result<(u64, u64), StateMachineError> {
        let restored = self.index.restore_from(&mut input).map_err(boxed)?;
        self.hooks.restored();
        Ok(restored)
    }

    fn restore_message(&self, data: &[u8], index: u64, term: u64) -> Result<(), StateMachineError> {
        self.index.restore(data, index, term).map_err(boxed)?;
        self.hooks.restored();
        Ok(())
    }

    fn role_changed(&self, is_leader: bool) {
        self.hooks.role_changed(is_leader);
    }
}

/// The commands a batch applied, with what each did, where their outputs go, and whether this
/// master leads.
type Changes = (Vec<(Command, Applied)>, Vec<usize>, bool);

impl IndexMachine {
    /// Applies `batch` in one write transaction; the outputs of commands that changed
    /// something are left for the caller to fill once the hooks have seen them (no copy of a
    /// lease's spec).
    fn apply_in_one_transaction(
        &self,
        batch: Batch<'_>,
    ) -> Result<(Outcome<Applied>, Option<Changes>), IndexError> {
        let db_handle = self.index.database().clone();
        let mut txn = db_handle.begin_write().map_err(db)?;
        if !batch.durable {
            txn.set_durability(Durability::None)
                .map_err(|e| IndexError::Corrupt(e.to_string()))?;
        }
        let mut outputs: Vec<Option<Applied>> = Vec::with_capacity(batch.entries.len());
        let mut changes = Vec::new();
        let mut positions = Vec::new();
        let mut membership_changed = false;
        let bodies = self.index.bodies();
        let retired = {
            let mut applier = Applier::new(&txn, bodies)?.with_lease_specs(batch.is_leader);
            for entry in batch.entries {
                match entry {
                    Applying::Command { index, data, place } => match command::decode(data) {
                        Ok(cmd) => {
                            membership_changed |= matches!(cmd.kind, Some(Kind::MembersSeen(_)));
                            let entry = place.map(|(segment, offset)| InLog {
                                data,
                                segment,
                                offset,
                            });
                            let applied = applier.apply_from(&cmd, entry)?;
                            positions.push(outputs.len());
                            outputs.push(None);
                            changes.push((cmd, applied));
                        }
                        // A command this version cannot read is skipped the same way on every
                        // master (they run the same decoder).
                        Err(e) => {
                            tracing::error!(index, error = %e, "log entry does not decode; skipped");
                            outputs.push(None);
                        }
                    },
                    Applying::Membership { change, .. } => {
                        failpoints::point!(failpoints::MEMBERSHIP_BEFORE_APPLY);
                        let before = applier.membership()?;
                        applier.set_membership(&change(before))?;
                        outputs.push(None);
                    }
                }
            }
            applier.set_applied(batch.applied.0, batch.applied.1)?;
            applier.take_retired()
        };
        if batch.durable {
            // The bodies this commit references are durable before it is (index/bodies.rs).
            body_tables::sync(bodies)?;
            failpoints::point!(failpoints::INDEX_COMMIT_BEFORE);
        }
        txn.commit().map_err(db)?;
        if batch.durable {
            failpoints::point!(failpoints::INDEX_COMMIT_AFTER);
        }
        if !batch.durable {
            bodies.start_writeback();
        }
        bodies.retire(retired);
        if batch.durable {
            body_tables::delete_retired(bodies);
        }
        let outcome = Outcome {
            outputs,
            membership_changed,
        };
        let changes = (!changes.is_empty()).then_some((changes, positions, batch.is_leader));
        Ok((outcome, changes))
    }
}

impl crate::raft::RaftHandle<Applied> {
    /// Proposes `command`; resolves once it is applied here (or refused).
    pub async fn propose(&self, command: Command) -> Result<Applied, ProposeError> {
        self.propose_bytes(command::encode(&command), Vec::new())
            .await
    }

    /// Proposes a caller's `command` (a submit), refused with `ProposeError::Overloaded` while
    /// the leader holds `MAX_UNCOMMITTED_BYTES` not yet committed.
    pub async fn propose_bounded(&self, command: Command) -> Result<Applied, ProposeError> {
        self.propose_bytes_bounded(command::encode(&command)).await
    }

    /// Proposes `command`, then `then` (fire and forget) in the same Ready; resolves once
    /// `command` is applied here (or refused).
    pub async fn propose_then(
        &self,
        command: Command,
        then: Vec<Command>,
    ) -> Result<Applied, ProposeError> {
        let then = then.iter().map(command::encode).collect();
        self.propose_bytes(command::encode(&command), then).await
    }

    /// Proposes `command` without waiting (lease grants, expiries): the scheduler learns the
    /// outcome when it is applied.
    pub fn propose_nowait(&self, command: Command) {
        self.propose_bytes_nowait(command::encode(&command));
    }
}

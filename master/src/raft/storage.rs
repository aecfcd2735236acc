//! Raft's durable storage (raft-rs's `Storage` trait): the log, HardState and compaction point
//! in append-only segment files ([`super::segment_log`], `<data dir>/raft-log/`), beside the
//! index's `redb` file.
//!
//! The log is kept by size: its entries stay in the segment files until they pass the
//! retention (`--raft-log-retain`, [`DEFAULT_RETAIN_BYTES`]; and at most
//! [`MAX_RETAINED_ENTRIES`]), so that a follower restarted for a rolling update catches up from
//! the log. Compaction then drops the oldest applied entries down to three quarters of it (never
//! the last [`KEEP_AFTER_COMPACTION`] applied ones) and deletes the segments it passed. Memory
//! holds where each entry is ([`EntryAt`], 32 bytes) and the newest entries themselves, up to
//! [`TAIL_BYTES`], for the reads raft-rs makes on every step; older ones are read from their
//! segment when a follower needs them. The
//! index is written without fsync between its checkpoints, so compaction never passes the
//! index's last durable applied index: a restart replays the log from there. A follower that
//! needs an entry older than the compaction point receives a snapshot of the index instead
//! ([`Storage::snapshot`] takes a read transaction of the index and leaves it in the
//! [`Outbox`] for the follower's sending task, which streams it: [`super::snapshot`]).
//!
//! Writes are queued by [`RaftStorage::append`] and [`RaftStorage::set_hard_state`] and written
//! by [`RaftStorage::persist`]: one Ready is one write and at most one fsync. A master whose
//! log is still in the `redb` tables of earlier versions (`raft_log`, `raft_state`) moves it
//! into segments when it opens ([`RaftStorage::open`]).

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;

use prost011::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use super::error::RaftError;
use super::segment_log::{EntryAt, LogError, RECORD_OVERHEAD, SegmentLog};
use super::snapshot::{MARKER, Outbox};
use super::state_machine::StateView;

/// The log's table in the `redb` file of versions before segment files (log index → prost
/// `Entry`); read once to move the log, then deleted.
const OLD_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// `hard_state`, `conf_state`, `compacted` → prost messages, in the same older versions.
const OLD_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");

/// Bytes of log kept by default (`--raft-log-retain`): at 1,000 jobs/s of full CrashProbe
/// events (about 4 entries and 40 KB of log per job), some 25 s of traffic.
pub const DEFAULT_RETAIN_BYTES: u64 = 1 << 30;
/// Entries kept at most, whatever their bytes (their places cost 32 bytes each in memory).
pub const MAX_RETAINED_ENTRIES: usize = 4 << 20;
/// Applied entries kept after a compaction, for followers slightly behind.
pub const KEEP_AFTER_COMPACTION: u64 = 256;
/// Bytes of the newest entries kept in memory as well as on disk (decoded: raft-rs's reads of
/// them cost nothing). Older entries of the active segment are read from its copy in memory
/// ([`crate::open_files::Written`]), older ones still from their files.
pub const TAIL_BYTES: u64 = 4 << 20;

/// Raft's log, HardState and ConfState.
pub struct RaftStorage {
    log: SegmentLog,
    /// The state machine's applied index, membership and snapshots.
    state: std::sync::Arc<dyn StateView>,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry removed by compaction (or of the last snapshot).
    compacted: SnapshotMetadata,
    /// Where each entry after `compacted.index` is, in order.
    at: VecDeque<EntryAt>,
    /// Bytes of the records of `at`.
    retained_bytes: u64,
    /// Retention: compaction starts once `retained_bytes` passes it.
    retain_bytes: u64,
    /// The newest entries (a suffix of the log), also in memory.
    tail: VecDeque<Entry>,
    /// Bytes of the records of `tail`.
    tail_bytes: u64,
    /// `tail` holds at most this many bytes ([`TAIL_BYTES`]; at least one entry).
    tail_limit: u64,
    /// Snapshot sources taken for followers, for their sending tasks.
    outbox: Outbox,
}

fn log_segments_in_use(state: &dyn StateView) -> Result<BTreeSet<u64>, RaftError> {
    state.log_segments_in_use().map_err(RaftError::StateMachine)
}

fn decode_err(what: &'static str, source: prost011::DecodeError) -> RaftError {
    RaftError::Decode { what, source }
}

fn storage_err(e: impl Into<RaftError>) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e.into())))
}

/// A redb error of the earlier versions' log tables.
fn old_db(e: impl Into<redb::Error>) -> RaftError {
    RaftError::OldLog(Box::new(e.into()))
}

impl RaftStorage {
    /// Opens the log in `dir` beside the state machine `state`. The membership (raft-rs's
    /// `ConfState`) is the state machine's, as of its applied index
    /// ([`StateView::membership`]); one without (before membership changes) takes the log's,
    /// and a log without one `bootstrap` (empty for a master joining a group). Errors: the file
    /// system's, a corrupt log ([`RaftError::Log`]), the state machine's, a log that starts
    /// after the applied index ([`RaftError::Inconsistent`]).
    pub fn open(
        state: std::sync::Arc<dyn StateView>,
        dir: &Path,
        bootstrap: &ConfState,
    ) -> Result<Self, RaftError> {
        let (mut log, replayed) = SegmentLog::open(dir)?;
        // The index reads the bodies it references in the log through the log's open files;
        // kept segments it no longer references (a crash before their deletion) go now.
        state.attach_log(log.files());
        log.drop_unreferenced(&log_segments_in_use(&*state)?)?;
        let mut hard_state = replayed.hard_state.unwrap_or_default();
        // Entries are applied only once committed: the commit index is written only with a
        // new term, vote or entries (a commit alone stays in memory), so the stored one may be
        // behind the index's applied index, which is committed.
        let (applied, applied_term) = state.applied().map_err(RaftError::StateMachine)?;
        hard_state.commit = hard_state.commit.max(applied);
        let mut compacted = replayed.compacted.unwrap_or_default();
        let conf_state = match (
            state
                .membership()
                .map_err(RaftError::StateMachine)?
                .as_ref()
                .and_then(super::membership::conf_state),
            compacted.conf_state.as_ref(),
        ) {
            (Some(cs), _) => cs,
            (None, Some(cs)) if !cs.voters.is_empty() => cs.clone(),
            _ => bootstrap.clone(),
        };
        let mut at: VecDeque<EntryAt> = replayed.entries.into_values().collect();
        let last = compacted.index + at.len() as u64;
        // The log holds the index's last applied entry unless a snapshot was restored and a
        // crash came before the log's reset: the index is then ahead of the log, or the log
        // runs past the snapshot with an entry of another (older, never committed) term at its
        // index, which raft-rs would find in conflict with the leader's committed one. Log
        // Matching (Raft, section 5.3): an entry of the same index and term means the same
        // log up to it. `applied_term` 0 is an index from before terms were kept.
        let stale_at_applied = applied > compacted.index
            && applied <= last
            && applied_term != 0
            && at[(applied - compacted.index - 1) as usize].term != applied_term;
        if applied > last || stale_at_applied {
            // Finish the snapshot's reset now.
            tracing::warn!(
                applied,
                applied_term,
                last,
                "the index holds a snapshot the raft log does not know yet; the log starts after it"
            );
            compacted = SnapshotMetadata {
                index: applied,
                term: applied_term,
                ..SnapshotMetadata::default()
            };
            compacted.set_conf_state(conf_state.clone());
            hard_state.term = hard_state.term.max(applied_term);
            log.reset(&hard_state, &compacted)?;
            at.clear();
        }
        if applied < compacted.index {
            return Err(RaftError::Inconsistent(format!(
                "the index was applied up to {applied} but the raft log starts after {}: \
                 entries in between are lost",
                compacted.index
            )));
        }
        Ok(RaftStorage {
            log,
            state,
            hard_state,
            conf_state,
            compacted,
            retained_bytes: at.iter().map(|a| u64::from(a.len)).sum(),
            at,
            retain_bytes: DEFAULT_RETAIN_BYTES,
            tail: VecDeque::new(),
            tail_bytes: 0,
            tail_limit: TAIL_BYTES,
            outbox: Outbox::default(),
        })
    }

    /// Keeps `bytes` of log before compacting (default [`DEFAULT_RETAIN_BYTES`]).
    pub fn with_retention(mut self, bytes: u64) -> Self {
        self.retain_bytes = bytes;
        self
    }

    /// Keeps at most `bytes` of the newest entries in memory (tests: a small tail).
    #[cfg(test)]
    fn with_tail_bytes(mut self, bytes: u64) -> Self {
        self.tail_limit = bytes;
        self
    }

    /// Bytes of the entries the log holds.
    pub fn retained_bytes(&self) -> u64 {
        self.retained_bytes
    }

    /// Where [`raft::Storage::snapshot`] leaves the sources of snapshots for followers.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    /// The index of the oldest entry the log holds (one past the last compacted or
    /// snapshotted entry; the next entry's index when the log is empty).
    pub fn first_entry_index(&self) -> u64 {
        self.first()
    }

    fn first(&self) -> u64 {
        self.compacted.index + 1
    }

    fn last(&self) -> u64 {
        self.compacted.index + self.at.len() as u64
    }

    /// The first index held in [`Self::tail`].
    fn tail_first(&self) -> u64 {
        self.last() + 1 - self.tail.len() as u64
    }

    /// Where the data of entry `index` is in the log: its segment and byte offset in it
    /// (`None`: compacted, not in the log yet, or without data).
    pub fn data_place(&self, index: u64) -> Option<(u64, u64)> {
        let at = self.at.get(index.checked_sub(self.first())? as usize)?;
        (at.data != 0).then(|| (at.segment, at.offset + u64::from(at.data)))
    }

    /// Entries held (since the last compaction).
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// Queues `entries` (replacing any conflicting suffix) for [`Self::persist`].
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first_new) = entries.first().map(|e| e.index) else {
            return;
        };
        if first_new <= self.last() {
            let keep = first_new.saturating_sub(self.first()) as usize;
            for dropped in self.at.drain(keep..) {
                self.retained_bytes -= u64::from(dropped.len);
            }
            while self.tail.back().is_some_and(|e| e.index >= first_new) {
                self.tail.pop_back();
            }
            // The tail's bytes, recounted: rare (a new leader's conflicting suffix).
            let tail_first = (self.last() + 1).saturating_sub(self.tail.len() as u64);
            self.tail_bytes = self
                .at
                .iter()
                .skip((tail_first - self.first()) as usize)
                .map(|a| u64::from(a.len))
                .sum();
        }
        for entry in entries {
            let at = self.log.push_entry(entry);
            self.retained_bytes += u64::from(at.len);
            self.tail_bytes += u64::from(at.len);
            self.at.push_back(at);
            self.tail.push_back(entry.clone());
        }
        while self.tail_bytes > self.tail_limit && self.tail.len() > 1 {
            self.tail.pop_front();
            let first = self.tail_first() - 1;
            self.tail_bytes -= u64::from(self.at[(first - self.first()) as usize].len);
        }
    }

    /// Queues `hs` for [`Self::persist`].
    pub fn set_hard_state(&mut self, hs: &HardState) {
        self.log.push_hard_state(hs);
        self.hard_state = hs.clone();
    }

    /// Sets the commit index in memory (a LightReady's commit, or a Ready's HardState whose
    /// only change is the commit): written only with the next HardState that must be synced,
    /// or at the start of the next segment.
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Writes what was queued, fsynced when `sync`; starts a new segment when the active one
    /// is full.
    pub fn persist(&mut self, sync: bool) -> Result<(), RaftError> {
        self.log.flush(sync)?;
        if self.log.should_rotate() {
            self.log.rotate(&self.hard_state, &self.compacted)?;
        }
        Ok(())
    }

    /// Once the log holds more than its retention (bytes, or [`MAX_RETAINED_ENTRIES`]), drops
    /// its oldest entries down to three quarters of it, never past `applied -
    /// KEEP_AFTER_COMPACTION` nor `durable` (the index's last durable applied index: a restart
    /// replays from there); deletes the segments it passed, but keeps those that hold bodies
    /// the index references (`.bodies`, [`SegmentLog::remove_through`]) and deletes the kept
    /// ones it no longer does. Called after each apply; does anything only when `checkpoint`
    /// (the index has just committed durably, so that what it references is what a restart
    /// will find). Returns whether it compacted.
    ///
    /// The group's first entry is dropped as soon as the index holds it durably, whatever the
    /// retention: a member whose log is empty (a new member, `--join`) then always starts from
    /// a snapshot, which carries the group's membership, rather than from entry 1, which would
    /// replay the membership changes without the first membership (it came from `--peers`,
    /// not from the log).
    pub fn maybe_compact(
        &mut self,
        applied: u64,
        durable: u64,
        checkpoint: bool,
    ) -> Result<bool, RaftError> {
        if !checkpoint {
            return Ok(false);
        }
        if self.log.kept() > 0 {
            self.log
                .drop_unreferenced(&log_segments_in_use(&*self.state)?)?;
        }
        let first_entry = self.compacted.index == 0 && durable >= 1 && self.last() >= 1;
        if !first_entry
            && self.retained_bytes <= self.retain_bytes
            && self.at.len() <= MAX_RETAINED_ENTRIES
        {
            return Ok(false);
        }
        let limit = applied
            .saturating_sub(KEEP_AFTER_COMPACTION)
            .min(durable)
            .min(self.last());
        let (bytes_goal, count_goal) = (self.retain_bytes / 4 * 3, MAX_RETAINED_ENTRIES / 4 * 3);
        let mut to = self.compacted.index;
        let (mut bytes, mut count) = (self.retained_bytes, self.at.len());
        if first_entry {
            bytes -= u64::from(self.at[0].len);
            count -= 1;
            to = 1;
        }
        while to < limit && (bytes > bytes_goal || count > count_goal) {
            bytes -= u64::from(self.at[(to + 1 - self.first()) as usize].len);
            count -= 1;
            to += 1;
        }
        if to < self.first() {
            return Ok(false);
        }
        let term = self.at[(to - self.first()) as usize].term;
        let drop = (to + 1 - self.first()) as usize;
        // Before `at` shrinks: `last()` counts from the old compaction point until it moves.
        let tail_first = self.tail_first();
        self.at.drain(..drop);
        self.retained_bytes = bytes;
        if tail_first <= to {
            let gone = (to + 1 - tail_first) as usize;
            self.tail.drain(..gone.min(self.tail.len()));
            self.tail_bytes = self
                .at
                .iter()
                .skip(self.at.len() - self.tail.len())
                .map(|a| u64::from(a.len))
                .sum();
        }
        self.compacted.index = to;
        self.compacted.term = term;
        self.compacted.set_conf_state(self.conf_state.clone());
        self.log.push_compacted(&self.compacted);
        self.log.flush(true)?;
        self.log
            .remove_through(to, &log_segments_in_use(&*self.state)?)?;
        Ok(true)
    }

    /// The membership raft-rs gave after a membership change was applied (written to the
    /// index by the caller, in the same transaction as the applied index).
    pub fn set_conf_state(&mut self, conf_state: ConfState) {
        self.conf_state = conf_state;
    }

    /// Installs a snapshot's metadata: the log restarts after it (older segments deleted). The
    /// index itself is restored, durably, by the caller first ([`Index::restore`]).
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) -> Result<(), RaftError> {
        self.at.clear();
        self.tail.clear();
        self.retained_bytes = 0;
        self.tail_bytes = 0;
        self.compacted = meta.clone();
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.log.reset(&self.hard_state, &self.compacted)?;
        Ok(())
    }
}

/// Moves the log of an older version, kept in the index's `redb` database, into segment files
/// in `dir`: written into `dir` + `.new`, fsynced, renamed, then the old tables are deleted. A
/// crash before the rename leaves the old tables as they were (the move starts again); after
/// it, only the deletion is left to do. Called before [`RaftStorage::open`].
pub fn move_old_log(database: &Database, dir: &Path) -> Result<(), RaftError> {
    let read = database.begin_read().map_err(old_db)?;
    let has_old = match read.open_table(OLD_STATE) {
        Ok(_) => true,
        Err(redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(old_db(e)),
    };
    if !has_old {
        return Ok(());
    }
    if !dir.exists() {
        let staging = dir.with_extension("new");
        if staging.exists() {
            std::fs::remove_dir_all(&staging).map_err(|source| LogError::Io {
                path: staging.clone(),
                source,
            })?;
        }
        let (mut log, _) = SegmentLog::open(&staging)?;
        let state = read.open_table(OLD_STATE).map_err(old_db)?;
        let get = |key: &str| -> Result<Option<Vec<u8>>, RaftError> {
            Ok(state.get(key).map_err(old_db)?.map(|v| v.value().to_vec()))
        };
        let mut compacted = match get("compacted")? {
            Some(b) => {
                SnapshotMetadata::decode(b.as_slice()).map_err(|e| decode_err("compaction", e))?
            }
            None => SnapshotMetadata::default(),
        };
        if let Some(b) = get("conf_state")? {
            compacted.set_conf_state(
                ConfState::decode(b.as_slice()).map_err(|e| decode_err("conf state", e))?,
            );
        }
        log.push_compacted(&compacted);
        if let Some(b) = get("hard_state")? {
            log.push_hard_state(
                &HardState::decode(b.as_slice()).map_err(|e| decode_err("hard state", e))?,
            );
        }
        let mut moved = 0u64;
        if let Ok(table) = read.open_table(OLD_LOG) {
            for entry in table.iter().map_err(old_db)? {
                let (_, bytes) = entry.map_err(old_db)?;
                log.push_entry(&Entry::decode(bytes.value()).map_err(|e| decode_err("entry", e))?);
                moved += 1;
            }
        }
        log.flush(true)?;
        drop(log);
        std::fs::rename(&staging, dir).map_err(|source| LogError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        if let Some(parent) = dir.parent() {
            super::segment_log::sync_dir(parent)?;
        }
        tracing::info!(entries = moved, dir = %dir.display(), "raft log moved into segment files");
    }
    drop(read);
    let txn = database.begin_write().map_err(old_db)?;
    txn.delete_table(OLD_LOG).map_err(old_db)?;
    txn.delete_table(OLD_STATE).map_err(old_db)?;
    txn.commit().map_err(old_db)?;
    Ok(())
}
impl raft::Storage for RaftStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let max_size = max_size.into();
        let tail_first = self.tail_first();
        let mut out = Vec::new();
        if low < tail_first {
            // Older than the tail: read from the segments, no more than `max_size` (the
            // entries' encoded sizes, as raft-rs counts them; at least one).
            let from = (low - self.first()) as usize;
            let to = (high.min(tail_first) - self.first()) as usize;
            let mut bytes = 0u64;
            let mut end = from;
            while end < to {
                bytes += u64::from(self.at[end].len - RECORD_OVERHEAD);
                if end > from && max_size.is_some_and(|max| bytes > max) {
                    break;
                }
                end += 1;
            }
            let places: Vec<EntryAt> = self.at.range(from..end).copied().collect();
            out = self.log.read_entries(&places).map_err(storage_err)?;
            if end < to {
                raft::util::limit_size(&mut out, max_size);
                return Ok(out);
            }
        }
        if high > tail_first {
            let from = (low.max(tail_first) - tail_first) as usize;
            let to = (high - tail_first) as usize;
            out.extend(self.tail.range(from..to).cloned());
        }
        raft::util::limit_size(&mut out, max_size);
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx == self.compacted.index {
            return Ok(self.compacted.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if idx > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.at[(idx - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    /// A snapshot for follower `to`: its metadata is the index's applied index now; the index
    /// itself, as one read transaction sees it, waits in the [`Outbox`] for the follower's
    /// sending task; the snapshot's data is only [`MARKER`].
    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let source = self
            .state
            .snapshot()
            .map_err(RaftError::StateMachine)
            .map_err(storage_err)?;
        let (index, term) = (source.index(), source.term());
        if index < request_index || index == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        // The membership of the snapshot's own applied index.
        let conf_state = source
            .membership()
            .map_err(RaftError::StateMachine)
            .map_err(storage_err)?
            .as_ref()
            .and_then(super::membership::conf_state)
            .unwrap_or_else(|| self.conf_state.clone());
        self.outbox.put(to, source);
        let mut snapshot = Snapshot {
            data: MARKER.to_vec(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(conf_state);
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use raft::Storage;
    use redb::Database;

    use super::*;
    use crate::raft::segment_log::tests::entry;

    /// A state machine that holds only where it stands (and, when set, a membership).
    #[derive(Default)]
    struct TestState {
        applied: std::sync::Mutex<(u64, u64)>,
        membership: Option<symcluster_proto::cluster::v1::Membership>,
    }

    impl StateView for TestState {
        fn applied(&self) -> Result<(u64, u64), crate::raft::error::StateMachineError> {
            Ok(*self.applied.lock().unwrap())
        }

        fn membership(
            &self,
        ) -> Result<
            Option<symcluster_proto::cluster::v1::Membership>,
            crate::raft::error::StateMachineError,
        > {
            Ok(self.membership.clone())
        }

        fn snapshot(
            &self,
        ) -> Result<
            Box<dyn super::super::state_machine::SnapshotData>,
            crate::raft::error::StateMachineError,
        > {
            Err("no snapshots in this test".into())
        }
    }

    /// Stores that the state machine applied the log up to `index` (of `term`).
    fn set_applied(state: &TestState, index: u64, term: u64) {
        *state.applied.lock().unwrap() = (index, term);
    }

    fn open_with(dir: &Path, state: &Arc<TestState>) -> RaftStorage {
        RaftStorage::open(
            state.clone(),
            &dir.join("raft-log"),
            &ConfState::from((vec![1, 2, 3], vec![])),
        )
        .unwrap()
    }

    fn check_reopened(storage: &RaftStorage) {
        let state = storage.initial_state().unwrap();
        assert_eq!(
            (
                state.hard_state.term,
                state.hard_state.vote,
                state.hard_state.commit
            ),
            (2, 3, 2)
        );
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap()
            ),
            (1, 4)
        );
        let terms: Vec<u64> = (1..=4).map(|i| storage.term(i).unwrap()).collect();
        assert_eq!(terms, [1, 1, 2, 2]);
        let got = storage
            .entries(2, 5, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(got.iter().map(|e| e.index).collect::<Vec<_>>(), [2, 3, 4]);
    }

    #[test]
    fn the_log_and_hard_state_survive_reopen_and_conflicts_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let open = |dir: &Path| open_with(dir, &state);
        {
            let mut storage = open(dir.path());
            storage.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
            // A new leader overwrites 3 with its own entry of term 2.
            storage.append(&[entry(3, 2), entry(4, 2)]);
            storage.set_hard_state(&HardState {
                term: 2,
                vote: 3,
                commit: 2,
            });
            storage.persist(true).unwrap();
        }
        check_reopened(&open(dir.path()));
    }

    #[test]
    fn compaction_stops_at_the_durable_index_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let open = |dir: &Path| open_with(dir, &state);
        let last = 2148;
        {
            // 2,148 entries of about 120 bytes pass a retention of 100,000 bytes.
            let mut storage = open(dir.path()).with_retention(100_000);
            let entries: Vec<Entry> = (1..=last).map(|i| entry(i, 1)).collect();
            storage.append(&entries);
            storage.persist(true).unwrap();
            // Applied everywhere, but durable in the index only up to 500.
            set_applied(&state, 500, 1);
            assert!(storage.maybe_compact(last, 500, true).unwrap());
            assert_eq!(storage.first_index().unwrap(), 501);
        }
        let storage = open(dir.path());
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap()
            ),
            (501, last)
        );
        assert_eq!(storage.term(500).unwrap(), 1);
        drop(storage);
        // An index behind the log's start lost entries: refused, with both indexes named.
        set_applied(&state, 200, 1);
        let error = RaftStorage::open(
            state.clone(),
            &dir.path().join("raft-log"),
            &ConfState::from((vec![1], vec![])),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(
            error.contains("applied up to 200") && error.contains("starts after 500"),
            "{error}"
        );
    }

    #[test]
    fn the_log_is_kept_by_size_and_entries_not_in_memory_are_read_from_their_segments() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let open = |dir: &Path| open_with(dir, &state);
        let want =
            |range: std::ops::Range<u64>| -> Vec<Entry> { range.map(|i| entry(i, 1)).collect() };
        let retain = 64 << 10;
        let all = |storage: &RaftStorage, high, max: Option<u64>| {
            let first = storage.first_index().unwrap();
            storage
                .entries(first, high, max, GetEntriesContext::empty(false))
                .unwrap()
        };
        {
            // 8 KiB of the newest entries in memory, the rest read from the segments.
            let mut storage = open(dir.path())
                .with_retention(retain)
                .with_tail_bytes(8 << 10);
            storage.append(&want(1..3001));
            storage.persist(true).unwrap();
            assert_eq!(all(&storage, 3001, None), want(1..3001));
            set_applied(&state, 3000, 1);
            // Under the retention nothing is dropped; past it, the oldest go down to 3/4 of it.
            assert!(storage.maybe_compact(3000, 3000, true).unwrap());
            let kept = storage.retained_bytes();
            assert!(kept <= retain / 4 * 3 && kept > retain / 2, "{kept}");
            assert!(!storage.maybe_compact(3000, 3000, true).unwrap());
            let first = storage.first_index().unwrap();
            assert_eq!(all(&storage, 3001, None), want(first..3001));
            storage.append(&want(3001..3101));
            storage.persist(true).unwrap();
            assert_eq!(all(&storage, 3101, None), want(first..3101));
            // A new leader's conflicting suffix replaces the newest entries.
            storage.append(&[entry(3100, 2)]);
            storage.persist(true).unwrap();
            let mut expected = want(first..3100);
            expected.push(entry(3100, 2));
            assert_eq!(all(&storage, 3101, None), expected);
        }
        // Reopened: the entries are on disk only, and read from there.
        let mut storage = open(dir.path()).with_retention(retain);
        let (first, last) = (
            storage.first_index().unwrap(),
            storage.last_index().unwrap(),
        );
        assert!(first > 2000 && last == 3100, "{first}..{last}");
        let mut expected = want(first..3100);
        expected.push(entry(3100, 2));
        assert_eq!(all(&storage, 3101, None), expected);
        // New entries in memory too: a read spans the segments and memory.
        let newer: Vec<Entry> = (3101..3111).map(|i| entry(i, 2)).collect();
        storage.append(&newer);
        storage.persist(true).unwrap();
        expected.extend(newer);
        assert_eq!(all(&storage, 3111, None), expected);
        // A size limit holds however the entries are read (at least one entry).
        let limited = all(&storage, 3111, Some(1000));
        let sizes: Vec<u64> = expected
            .iter()
            .map(|e| prost011::Message::encoded_len(e) as u64)
            .collect();
        let fits = sizes
            .iter()
            .scan(0, |total, size| {
                *total += size;
                Some(*total)
            })
            .take_while(|total| *total <= 1000)
            .count()
            .max(1);
        assert_eq!(limited, expected[..fits]);
        assert_eq!(all(&storage, 3111, Some(0)), expected[..1]);
    }

    #[test]
    fn the_first_entry_is_compacted_once_durable_so_an_empty_follower_gets_a_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let mut storage = open_with(dir.path(), &state);
        storage.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        storage.persist(true).unwrap();
        // Nothing durable in the index yet: the log keeps entry 1.
        assert!(!storage.maybe_compact(3, 0, true).unwrap());
        assert_eq!(storage.first_index().unwrap(), 1);
        // Entry 1 durable: it goes, whatever the retention, and only it.
        set_applied(&state, 3, 1);
        assert!(storage.maybe_compact(3, 3, true).unwrap());
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap()
            ),
            (2, 3)
        );
        assert_eq!(
            storage.entries(1, 4, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        );
        assert!(!storage.maybe_compact(3, 3, true).unwrap());
    }

    #[test]
    fn the_membership_is_the_state_machine_s_when_it_holds_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut membership = crate::raft::membership::bootstrap(
            &[(1, "http://a:1".to_owned()), (4, "http://d:4".to_owned())]
                .into_iter()
                .collect(),
        );
        membership.members[1].learner = true;
        membership.conf_state = {
            use prost011::Message as _;
            ConfState::from((vec![1], vec![4])).encode_to_vec()
        };
        let state = Arc::new(TestState {
            membership: Some(membership),
            ..TestState::default()
        });
        let storage = RaftStorage::open(
            state,
            &dir.path().join("raft-log"),
            &ConfState::from((vec![1, 2, 3], vec![])),
        )
        .unwrap();
        let state = storage.initial_state().unwrap();
        assert_eq!(
            (state.conf_state.voters, state.conf_state.learners),
            (vec![1], vec![4])
        );
    }

    /// Writes `log`, then stores that the index was restored (durably) to a snapshot at 90 of
    /// term 3 and crashes before the log's reset; checks that opening finishes the reset.
    fn check_reset_finished_at_open(log: &[Entry]) {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let open = |dir: &Path| open_with(dir, &state);
        {
            let mut storage = open(dir.path());
            storage.append(log);
            storage.persist(true).unwrap();
            set_applied(&state, 90, 3);
        }
        let storage = open(dir.path());
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap(),
                storage.term(90).unwrap()
            ),
            (91, 90, 3)
        );
        let state = storage.initial_state().unwrap();
        assert_eq!((state.hard_state.commit, state.hard_state.term), (90, 3));
        assert_eq!(state.conf_state.voters, vec![1, 2, 3]);
        // The reset is on disk: the next open needs no repair.
        drop(storage);
        let storage = open(dir.path());
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap()
            ),
            (91, 90)
        );
    }

    #[test]
    fn a_crash_between_a_snapshot_restore_and_the_log_reset_is_finished_at_open() {
        check_reset_finished_at_open(&[entry(1, 1), entry(2, 1)]);
    }

    #[test]
    fn a_crash_between_a_snapshot_restore_and_the_log_reset_drops_a_longer_stale_log() {
        // Issue 54, item 2: the follower's log ran past the snapshot's index, with entries of
        // an older term (never committed) at and after it. Kept, entry 90 of term 1 would
        // conflict with the leader's committed entry 90 of term 3, and raft-rs panics on a
        // conflict at or below the commit index.
        let stale: Vec<Entry> = (1..=100).map(|i| entry(i, 1)).collect();
        check_reset_finished_at_open(&stale);
    }

    #[test]
    fn a_log_that_holds_the_applied_entry_of_its_term_is_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let state = Arc::new(TestState::default());
        let open = |dir: &Path| open_with(dir, &state);
        {
            let mut storage = open(dir.path());
            let entries: Vec<Entry> = (1..=100)
                .map(|i| entry(i, if i < 50 { 1 } else { 2 }))
                .collect();
            storage.append(&entries);
            storage.persist(true).unwrap();
            set_applied(&state, 90, 2);
        }
        let storage = open(dir.path());
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap(),
                storage.term(100).unwrap()
            ),
            (1, 100, 2)
        );
    }

    #[test]
    fn a_log_in_the_redb_tables_of_earlier_versions_is_moved_into_segments() {
        let dir = tempfile::tempdir().unwrap();
        {
            // What an earlier master left: its log and state in `master.redb`.
            let database = Database::create(dir.path().join("master.redb")).unwrap();
            let txn = database.begin_write().unwrap();
            {
                let mut log = txn.open_table(OLD_LOG).unwrap();
                for e in [entry(1, 1), entry(2, 1), entry(3, 2), entry(4, 2)] {
                    log.insert(e.index, e.encode_to_vec().as_slice()).unwrap();
                }
                let mut state = txn.open_table(OLD_STATE).unwrap();
                let hs = HardState {
                    term: 2,
                    vote: 3,
                    commit: 2,
                };
                state
                    .insert("hard_state", hs.encode_to_vec().as_slice())
                    .unwrap();
                let cs = ConfState::from((vec![1, 2, 3], Vec::<u64>::new()));
                state
                    .insert("conf_state", cs.encode_to_vec().as_slice())
                    .unwrap();
            }
            txn.commit().unwrap();
        }
        let state = Arc::new(TestState::default());
        let database = Database::open(dir.path().join("master.redb")).unwrap();
        move_old_log(&database, &dir.path().join("raft-log")).unwrap();
        check_reopened(&open_with(dir.path(), &state));
        // The old tables are gone; the next open reads the segments alone.
        move_old_log(&database, &dir.path().join("raft-log")).unwrap();
        check_reopened(&open_with(dir.path(), &state));
        let read = database.begin_read().unwrap();
        assert!(read.open_table(OLD_LOG).is_err() && read.open_table(OLD_STATE).is_err());
    }
}

//! Raft's durable storage (raft-rs's `Storage` trait): the log, HardState and compaction point
//! in append-only segment files ([`super::segment_log`], `<data dir>/raft-log/`), beside the
//! index's `redb` file.
//!
//! The log since the last compaction is also kept in memory for the reads raft-rs makes on
//! every step; compaction keeps it short ([`COMPACT_AT`] entries at most, down to
//! [`KEEP_AFTER_COMPACTION`] applied ones), so both the files and the memory stay bounded. The
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

use std::collections::VecDeque;
use std::path::Path;

use prost011::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use super::segment_log::{LogError, SegmentLog};
use super::snapshot::{MARKER, Outbox};
use crate::index::{Index, IndexError, db};

/// The log's table in the `redb` file of versions before segment files (log index → prost
/// `Entry`); read once to move the log, then deleted.
const OLD_LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
/// `hard_state`, `conf_state`, `compacted` → prost messages, in the same older versions.
const OLD_STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");

/// Log entries kept before a compaction.
pub const COMPACT_AT: usize = 2048;
/// Applied entries kept after a compaction, for followers slightly behind.
pub const KEEP_AFTER_COMPACTION: u64 = 256;

/// Raft's log, HardState and ConfState.
pub struct RaftStorage {
    log: SegmentLog,
    index: Index,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry removed by compaction (or of the last snapshot).
    compacted: SnapshotMetadata,
    /// The log after `compacted.index`, in order.
    entries: VecDeque<Entry>,
    /// Snapshot sources taken for followers, for their sending tasks.
    outbox: Outbox,
}

impl From<LogError> for IndexError {
    fn from(e: LogError) -> Self {
        IndexError::Log(Box::new(e))
    }
}

fn decode_err(what: &str, e: prost011::DecodeError) -> IndexError {
    IndexError::Corrupt(format!("raft {what} does not decode: {e}"))
}

fn storage_err(e: IndexError) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

impl RaftStorage {
    /// Opens the log in `dir` (moving an older version's log out of `index`'s database first);
    /// a new group starts with `voters`. Errors: the file system's, a corrupt log
    /// ([`IndexError::Log`]), the database's.
    pub fn open(index: Index, dir: &Path, voters: &[u64]) -> Result<Self, IndexError> {
        move_old_log(&index, dir)?;
        let (mut log, replayed) = SegmentLog::open(dir)?;
        let mut hard_state = replayed.hard_state.unwrap_or_default();
        // Entries are applied only once committed: the commit index is written only with a
        // new term, vote or entries (a commit alone stays in memory), so the stored one may be
        // behind the index's applied index, which is committed.
        let (applied, applied_term) = index.applied()?;
        hard_state.commit = hard_state.commit.max(applied);
        let mut compacted = replayed.compacted.unwrap_or_default();
        let conf_state = match compacted.conf_state.as_ref() {
            Some(cs) if !cs.voters.is_empty() => cs.clone(),
            _ => ConfState::from((voters.to_vec(), Vec::<u64>::new())),
        };
        let mut entries: VecDeque<Entry> = replayed.entries.into_values().collect();
        let last = compacted.index + entries.len() as u64;
        if applied > last {
            // Only a snapshot puts the index ahead of the log: a crash came between its
            // durable restore and the log's reset. Finish the reset now.
            tracing::warn!(
                applied,
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
            entries.clear();
        }
        if applied < compacted.index {
            return Err(IndexError::Corrupt(format!(
                "the index was applied up to {applied} but the raft log starts after {}: \
                 entries in between are lost",
                compacted.index
            )));
        }
        Ok(RaftStorage {
            log,
            index,
            hard_state,
            conf_state,
            compacted,
            entries,
            outbox: Outbox::default(),
        })
    }

    /// Where [`raft::Storage::snapshot`] leaves the sources of snapshots for followers.
    pub fn outbox(&self) -> Outbox {
        self.outbox.clone()
    }

    fn first(&self) -> u64 {
        self.compacted.index + 1
    }

    fn last(&self) -> u64 {
        self.compacted.index + self.entries.len() as u64
    }

    /// Entries held (since the last compaction).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queues `entries` (replacing any conflicting suffix) for [`Self::persist`].
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(first_new) = entries.first().map(|e| e.index) else {
            return;
        };
        if first_new <= self.last() {
            let keep = first_new.saturating_sub(self.first()) as usize;
            self.entries.truncate(keep);
        }
        for entry in entries {
            self.log.push_entry(entry);
            self.entries.push_back(entry.clone());
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
    pub fn persist(&mut self, sync: bool) -> Result<(), IndexError> {
        self.log.flush(sync)?;
        if self.log.should_rotate() {
            self.log.rotate(&self.hard_state, &self.compacted)?;
        }
        Ok(())
    }

    /// Drops entries up to `applied - KEEP_AFTER_COMPACTION` once more than [`COMPACT_AT`] are
    /// held, never past `durable` (the index's last durable applied index: a restart replays
    /// from there); deletes the segments it passed. Returns whether it compacted.
    pub fn maybe_compact(&mut self, applied: u64, durable: u64) -> Result<bool, IndexError> {
        if self.entries.len() < COMPACT_AT {
            return Ok(false);
        }
        let to = applied
            .saturating_sub(KEEP_AFTER_COMPACTION)
            .min(durable)
            .min(self.last());
        if to < self.first() {
            return Ok(false);
        }
        let term = self.entries[(to - self.first()) as usize].term;
        let drop = (to + 1 - self.first()) as usize;
        self.entries.drain(..drop);
        self.compacted.index = to;
        self.compacted.term = term;
        self.compacted.set_conf_state(self.conf_state.clone());
        self.log.push_compacted(&self.compacted);
        self.log.flush(true)?;
        self.log.remove_through(to)?;
        Ok(true)
    }

    /// Installs a snapshot's metadata: the log restarts after it (older segments deleted). The
    /// index itself is restored, durably, by the caller first ([`Index::restore`]).
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) -> Result<(), IndexError> {
        self.entries.clear();
        self.compacted = meta.clone();
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.log.reset(&self.hard_state, &self.compacted)?;
        Ok(())
    }
}

/// Moves the log of an older version, kept in `index`'s database, into segment files in
/// `dir`: written into `dir` + `.new`, fsynced, renamed, then the old tables are deleted. A
/// crash before the rename leaves the old tables as they were (the move starts again); after
/// it, only the deletion is left to do.
fn move_old_log(index: &Index, dir: &Path) -> Result<(), IndexError> {
    let database = index.database();
    let read = database.begin_read().map_err(db)?;
    let has_old = match read.open_table(OLD_STATE) {
        Ok(_) => true,
        Err(redb::TableError::TableDoesNotExist(_)) => false,
        Err(e) => return Err(db(e)),
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
        let state = read.open_table(OLD_STATE).map_err(db)?;
        let get = |key: &str| -> Result<Option<Vec<u8>>, IndexError> {
            Ok(state.get(key).map_err(db)?.map(|v| v.value().to_vec()))
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
            for entry in table.iter().map_err(db)? {
                let (_, bytes) = entry.map_err(db)?;
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
    let txn = database.begin_write().map_err(db)?;
    txn.delete_table(OLD_LOG).map_err(db)?;
    txn.delete_table(OLD_STATE).map_err(db)?;
    txn.commit().map_err(db)?;
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
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut out: Vec<Entry> = self.entries.range(from..to).cloned().collect();
        raft::util::limit_size(&mut out, max_size.into());
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
        Ok(self.entries[(idx - self.first()) as usize].term)
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
        let source = self.index.snapshot_source().map_err(storage_err)?;
        let (index, term) = (source.index, source.term);
        if index < request_index || index == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        self.outbox.put(to, source);
        let mut snapshot = Snapshot {
            data: MARKER.to_vec(),
            ..Snapshot::default()
        };
        let meta = snapshot.mut_metadata();
        meta.index = index;
        meta.term = term;
        meta.set_conf_state(self.conf_state.clone());
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use raft::Storage;
    use redb::Database;

    use super::*;
    use crate::raft::segment_log::tests::entry;

    /// Stores, durably, that the index applied the log up to `index` (of `term`).
    fn set_applied(database: &Database, index: u64, term: u64) {
        let txn = database.begin_write().unwrap();
        crate::index::apply::Applier::new(&txn)
            .unwrap()
            .set_applied(index, term)
            .unwrap();
        txn.commit().unwrap();
    }

    fn open(dir: &Path) -> RaftStorage {
        let index = Index::open(Index::open_database(&dir.join("master.redb")).unwrap()).unwrap();
        RaftStorage::open(index, &dir.join("raft-log"), &[1, 2, 3]).unwrap()
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
        let last = COMPACT_AT as u64 + 100;
        {
            let mut storage = open(dir.path());
            let entries: Vec<Entry> = (1..=last).map(|i| entry(i, 1)).collect();
            storage.append(&entries);
            storage.persist(true).unwrap();
            // Applied everywhere, but durable in the index only up to 500.
            set_applied(storage.index.database(), 500, 1);
            assert!(storage.maybe_compact(last, 500).unwrap());
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
        let database = Index::open_database(&dir.path().join("master.redb")).unwrap();
        set_applied(&database, 200, 1);
        let index = Index::open(database).unwrap();
        let error = RaftStorage::open(index, &dir.path().join("raft-log"), &[1])
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("applied up to 200") && error.contains("starts after 500"),
            "{error}"
        );
    }

    #[test]
    fn a_crash_between_a_snapshot_restore_and_the_log_reset_is_finished_at_open() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut storage = open(dir.path());
            storage.append(&[entry(1, 1), entry(2, 1)]);
            storage.persist(true).unwrap();
            // The index was restored (durably) to a snapshot at 90, term 3; then the crash.
            set_applied(storage.index.database(), 90, 3);
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
        assert_eq!(open(dir.path()).first_index().unwrap(), 91);
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
        check_reopened(&open(dir.path()));
        // The old tables are gone; the next open reads the segments alone.
        let storage = open(dir.path());
        check_reopened(&storage);
        let database = storage.index.database();
        let read = database.begin_read().unwrap();
        assert!(read.open_table(OLD_LOG).is_err() && read.open_table(OLD_STATE).is_err());
    }
}

//! Raft's durable storage (raft-rs's `Storage` trait) in the master's `redb` file.
//!
//! Tables: `raft_log` (log index → `eraftpb::Entry`, prost) and `raft_state` (`hard_state`,
//! `conf_state`, `compacted` → prost messages). The log since the last compaction is also kept in
//! memory for the reads raft-rs makes on every step; compaction keeps it short
//! ([`COMPACT_AT`] entries at most, down to [`KEEP_AFTER_COMPACTION`] applied ones), so both the
//! file and the memory stay bounded. A follower that needs an entry older than that receives a
//! snapshot of the index instead ([`Storage::snapshot`] builds it from the index tables).
//!
//! Writes happen in the caller's write transaction ([`RaftStorage::append`],
//! [`RaftStorage::set_hard_state`], [`RaftStorage::compact`]), so that one Ready is one
//! transaction and one fsync.

use std::collections::VecDeque;
use std::sync::Arc;

use prost011::Message as _;
use raft::prelude::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, StorageError};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction};

use crate::index::{Index, IndexError, db};

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("raft_log");
const STATE: TableDefinition<&str, &[u8]> = TableDefinition::new("raft_state");

/// Log entries kept before a compaction.
pub const COMPACT_AT: usize = 2048;
/// Applied entries kept after a compaction, for followers slightly behind.
pub const KEEP_AFTER_COMPACTION: u64 = 256;

/// Raft's log, HardState and ConfState.
pub struct RaftStorage {
    db: Arc<Database>,
    index: Index,
    hard_state: HardState,
    conf_state: ConfState,
    /// Index and term of the last entry removed by compaction (or of the last snapshot).
    compacted: SnapshotMetadata,
    /// The log after `compacted.index`, in order.
    entries: VecDeque<Entry>,
}

fn decode_err(what: &str, e: prost011::DecodeError) -> IndexError {
    IndexError::Corrupt(format!("raft {what} does not decode: {e}"))
}

fn storage_err(e: IndexError) -> raft::Error {
    raft::Error::Store(StorageError::Other(Box::new(e)))
}

impl RaftStorage {
    /// Opens Raft's tables in the index's database; a new group starts with `voters`.
    pub fn open(index: Index, voters: &[u64]) -> Result<Self, IndexError> {
        let database = index.database().clone();
        let txn = database.begin_write().map_err(db)?;
        txn.open_table(LOG).map_err(db)?;
        txn.open_table(STATE).map_err(db)?;
        txn.commit().map_err(db)?;
        let read = database.begin_read().map_err(db)?;
        let state = read.open_table(STATE).map_err(db)?;
        let get = |key: &str| -> Result<Option<Vec<u8>>, IndexError> {
            Ok(state.get(key).map_err(db)?.map(|v| v.value().to_vec()))
        };
        let mut hard_state = match get("hard_state")? {
            Some(b) => HardState::decode(b.as_slice()).map_err(|e| decode_err("hard state", e))?,
            None => HardState::default(),
        };
        // Entries are applied only once committed: a commit index stored before the last
        // apply (it travels without fsync) is at least the applied index.
        let (applied, _) = index.applied()?;
        hard_state.commit = hard_state.commit.max(applied);
        let conf_state = match get("conf_state")? {
            Some(b) => ConfState::decode(b.as_slice()).map_err(|e| decode_err("conf state", e))?,
            None => ConfState::from((voters.to_vec(), Vec::<u64>::new())),
        };
        let compacted = match get("compacted")? {
            Some(b) => {
                SnapshotMetadata::decode(b.as_slice()).map_err(|e| decode_err("compaction", e))?
            }
            None => SnapshotMetadata::default(),
        };
        let mut entries = VecDeque::new();
        for entry in read.open_table(LOG).map_err(db)?.iter().map_err(db)? {
            let (_, bytes) = entry.map_err(db)?;
            entries.push_back(Entry::decode(bytes.value()).map_err(|e| decode_err("entry", e))?);
        }
        Ok(RaftStorage {
            db: database,
            index,
            hard_state,
            conf_state,
            compacted,
            entries,
        })
    }

    fn first(&self) -> u64 {
        self.compacted.index + 1
    }

    fn last(&self) -> u64 {
        self.compacted.index + self.entries.len() as u64
    }

    /// The current HardState.
    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    /// Entries held (since the last compaction).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends `entries` (replacing any conflicting suffix) in `txn`.
    pub fn append(&mut self, txn: &WriteTransaction, entries: &[Entry]) -> Result<(), IndexError> {
        let Some(first_new) = entries.first().map(|e| e.index) else {
            return Ok(());
        };
        let mut log = txn.open_table(LOG).map_err(db)?;
        if first_new <= self.last() {
            for i in first_new.max(self.first())..=self.last() {
                log.remove(i).map_err(db)?;
            }
            let keep = first_new.saturating_sub(self.first()) as usize;
            self.entries.truncate(keep);
        }
        for entry in entries {
            log.insert(entry.index, entry.encode_to_vec().as_slice())
                .map_err(db)?;
            self.entries.push_back(entry.clone());
        }
        Ok(())
    }

    /// Stores `hs` in `txn`.
    pub fn set_hard_state(
        &mut self,
        txn: &WriteTransaction,
        hs: &HardState,
    ) -> Result<(), IndexError> {
        let mut state = txn.open_table(STATE).map_err(db)?;
        state
            .insert("hard_state", hs.encode_to_vec().as_slice())
            .map_err(db)?;
        self.hard_state = hs.clone();
        Ok(())
    }

    /// Sets the commit index in memory (a LightReady's commit; stored with the next HardState).
    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Drops entries up to `applied - KEEP_AFTER_COMPACTION` once more than [`COMPACT_AT`] are
    /// held; returns whether it did.
    pub fn maybe_compact(
        &mut self,
        txn: &WriteTransaction,
        applied: u64,
    ) -> Result<bool, IndexError> {
        if self.entries.len() < COMPACT_AT {
            return Ok(false);
        }
        let to = applied
            .saturating_sub(KEEP_AFTER_COMPACTION)
            .min(self.last());
        if to < self.first() {
            return Ok(false);
        }
        let term = self.entries[(to - self.first()) as usize].term;
        let mut log = txn.open_table(LOG).map_err(db)?;
        for i in self.first()..=to {
            log.remove(i).map_err(db)?;
        }
        let drop = (to + 1 - self.first()) as usize;
        self.entries.drain(..drop);
        self.compacted.index = to;
        self.compacted.term = term;
        self.compacted.set_conf_state(self.conf_state.clone());
        let mut state = txn.open_table(STATE).map_err(db)?;
        state
            .insert("compacted", self.compacted.encode_to_vec().as_slice())
            .map_err(db)?;
        Ok(true)
    }

    /// Installs a snapshot's metadata: the log restarts after it. The index itself is restored
    /// by the caller ([`Index::restore`]) in its own transaction.
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) -> Result<(), IndexError> {
        let txn = self.db.begin_write().map_err(db)?;
        txn.delete_table(LOG).map_err(db)?;
        txn.open_table(LOG).map_err(db)?;
        self.entries.clear();
        self.compacted = meta.clone();
        self.conf_state = meta.get_conf_state().clone();
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        {
            let mut state = txn.open_table(STATE).map_err(db)?;
            state
                .insert("compacted", self.compacted.encode_to_vec().as_slice())
                .map_err(db)?;
            state
                .insert("conf_state", self.conf_state.encode_to_vec().as_slice())
                .map_err(db)?;
            state
                .insert("hard_state", self.hard_state.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        txn.commit().map_err(db)?;
        Ok(())
    }
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

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let (data, index, term) = self.index.snapshot().map_err(storage_err)?;
        if index < request_index || index == 0 {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut snapshot = Snapshot {
            data,
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

    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8],
            ..Entry::default()
        }
    }

    #[test]
    fn the_log_and_hard_state_survive_reopen_and_conflicts_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        {
            let index = Index::open(Index::open_database(&path).unwrap()).unwrap();
            let mut storage = RaftStorage::open(index.clone(), &[1, 2, 3]).unwrap();
            let txn = index.database().begin_write().unwrap();
            storage
                .append(&txn, &[entry(1, 1), entry(2, 1), entry(3, 1)])
                .unwrap();
            // A new leader overwrites 3 with its own entry of term 2.
            storage.append(&txn, &[entry(3, 2), entry(4, 2)]).unwrap();
            let hs = HardState {
                term: 2,
                vote: 3,
                commit: 2,
            };
            storage.set_hard_state(&txn, &hs).unwrap();
            txn.commit().unwrap();
        }
        let index = Index::open(Index::open_database(&path).unwrap()).unwrap();
        let storage = RaftStorage::open(index, &[1, 2, 3]).unwrap();
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
}

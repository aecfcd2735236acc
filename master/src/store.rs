//! The durable command log, in an embedded `redb` database.
//!
//! Each [`Command`] is appended under the next index (u64) and committed before its effect is
//! acknowledged to a client, so a master that restarts replays the log and has every job and
//! result it acknowledged. Commands are encoded with bincode. The log is never compacted yet;
//! snapshots come with Raft (its log and snapshots will replace this store).

use std::path::Path;

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use crate::state::Command;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");

/// Errors of the log store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened or written.
    #[error("index store: {0}")]
    Db(String),
    /// A stored command does not decode (corrupt or from an incompatible version).
    #[error("index store: entry {index} does not decode: {message}")]
    Decode {
        /// Log index of the entry.
        index: u64,
        /// The decoder's message.
        message: String,
    },
}

fn db_err(e: impl std::fmt::Display) -> StoreError {
    StoreError::Db(e.to_string())
}

/// The append-only command log.
pub struct CommandLog {
    db: Database,
    next: u64,
}

impl CommandLog {
    /// Opens (or creates) the log at `path`, a file.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let db = Database::create(path).map_err(db_err)?;
        let txn = db.begin_write().map_err(db_err)?;
        txn.open_table(LOG).map_err(db_err)?;
        txn.commit().map_err(db_err)?;
        let next = {
            let read = db.begin_read().map_err(db_err)?;
            let table = read.open_table(LOG).map_err(db_err)?;
            table
                .last()
                .map_err(db_err)?
                .map(|(k, _)| k.value() + 1)
                .unwrap_or(0)
        };
        Ok(CommandLog { db, next })
    }

    /// Every stored command, in order.
    pub fn replay(&self) -> Result<Vec<Command>, StoreError> {
        let read = self.db.begin_read().map_err(db_err)?;
        let table = read.open_table(LOG).map_err(db_err)?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(db_err)? {
            let (k, v) = entry.map_err(db_err)?;
            let command = bincode::deserialize(v.value()).map_err(|e| StoreError::Decode {
                index: k.value(),
                message: e.to_string(),
            })?;
            out.push(command);
        }
        Ok(out)
    }

    /// Appends and commits `commands` in one durable transaction.
    pub fn append(&mut self, commands: &[Command]) -> Result<(), StoreError> {
        if commands.is_empty() {
            return Ok(());
        }
        let txn = self.db.begin_write().map_err(db_err)?;
        {
            let mut table = txn.open_table(LOG).map_err(db_err)?;
            for (i, command) in commands.iter().enumerate() {
                let bytes = bincode::serialize(command).map_err(db_err)?;
                table
                    .insert(self.next + i as u64, bytes.as_slice())
                    .map_err(db_err)?;
            }
        }
        txn.commit().map_err(db_err)?;
        self.next += commands.len() as u64;
        Ok(())
    }

    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.next
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::JobKind;

    #[test]
    fn survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.redb");
        let commands = vec![
            Command::Submit {
                job_id: "a".into(),
                kind: JobKind::Js,
                spec: vec![9; 10],
                routing_key: "r".into(),
                at_ms: 1,
            },
            Command::Fail {
                job_id: "a".into(),
                attempt: 0,
                error: "e".into(),
                at_ms: 2,
            },
        ];
        {
            let mut log = CommandLog::open(&path).unwrap();
            log.append(&commands[..1]).unwrap();
            log.append(&commands[1..]).unwrap();
        }
        let log = CommandLog::open(&path).unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log.replay().unwrap(), commands);
    }
}

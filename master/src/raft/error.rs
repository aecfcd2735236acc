//! Raft's own errors: the log's, the state machine's (as it reports them), and raft-rs's.

use super::segment_log::LogError;

/// An error a state machine reports to Raft ([`super::StateMachine`]): the node stops on it
/// and the master exits with its message ([`super::node::STORAGE_FAILED_EXIT`]).
pub type StateMachineError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why Raft cannot go on (open, append, apply, restore, start).
#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// The log's segment files cannot be read, written or trusted.
    #[error(transparent)]
    Log(#[from] Box<LogError>),
    /// A record of the log (an entry, the HardState, a ConfState) does not decode.
    #[error("raft {what} does not decode: {source}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// The decoder's error.
        source: prost011::DecodeError,
    },
    /// The state machine failed to apply, snapshot or restore.
    #[error("the replicated state: {0}")]
    StateMachine(StateMachineError),
    /// The log and the state machine do not fit together (entries lost between them, a
    /// snapshot of another entry than announced).
    #[error("{0}")]
    Inconsistent(String),
    /// A file or directory Raft keeps (the snapshot directory, a received snapshot) cannot be
    /// used.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The log of an earlier version, in the index's `redb` database, cannot be moved
    /// ([`super::storage::move_old_log`]).
    #[error("the earlier versions' raft log in the index database: {0}")]
    OldLog(Box<redb::Error>),
    /// raft-rs refused its settings or its storage.
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    /// The node's thread cannot be started.
    #[error("cannot start the raft thread: {0}")]
    Thread(std::io::Error),
}

impl From<LogError> for RaftError {
    fn from(e: LogError) -> Self {
        RaftError::Log(Box::new(e))
    }
}

impl RaftError {
    /// A state machine's error.
    pub fn state(e: impl Into<StateMachineError>) -> Self {
        RaftError::StateMachine(e.into())
    }
}

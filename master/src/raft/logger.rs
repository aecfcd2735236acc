//! raft-rs logs through `slog`; this drain hands its records to `tracing` (target `raft`), with
//! their key-value pairs, so the master has one log.

use std::fmt::Write as _;

use slog::{Drain, KV, Level, OwnedKVList, Record};

struct TracingDrain;

struct Fields(String);

impl slog::Serializer for Fields {
    fn emit_arguments(&mut self, key: slog::Key, val: &std::fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        // raft-rs logs every message at debug: format nothing that tracing would drop.
        let enabled = match record.level() {
            Level::Critical | Level::Error => {
                tracing::enabled!(target: "raft", tracing::Level::ERROR)
            }
            Level::Warning => tracing::enabled!(target: "raft", tracing::Level::WARN),
            Level::Info => tracing::enabled!(target: "raft", tracing::Level::INFO),
            Level::Debug | Level::Trace => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
        };
        if !enabled {
            return Ok(());
        }
        let mut fields = Fields(String::new());
        let _ = record.kv().serialize(record, &mut fields);
        let _ = values.serialize(record, &mut fields);
        let message = record.msg();
        match record.level() {
            Level::Critical | Level::Error => {
                tracing::error!(target: "raft", "{message}{}", fields.0)
            }
            Level::Warning => tracing::warn!(target: "raft", "{message}{}", fields.0),
            Level::Info => tracing::info!(target: "raft", "{message}{}", fields.0),
            Level::Debug | Level::Trace => tracing::debug!(target: "raft", "{message}{}", fields.0),
        }
        Ok(())
    }
}

/// The logger raft-rs gets for member `id`.
pub fn logger(id: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!("member" => id))
}

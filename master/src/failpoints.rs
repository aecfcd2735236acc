//! Failpoints: named places in the master where a test or the nemesis run can make it crash,
//! stall or fail, with the [`fail`] crate (TiKV's; actions as `fail::cfg` documents them).
//! They exist only in a build with the `failpoints` feature (`scripts/test.sh` builds the
//! tests' binaries so); in any other build [`point!`] compiles to nothing and nothing here is
//! reachable.
//!
//! A point is armed at start with `FAILPOINTS=name=actions;name=actions` ([`arm_from_env`]) or
//! while the master runs over its metrics port ([`crate::scrape`]: `PUT /fail/NAME` with the
//! actions as the body, `DELETE /fail/NAME`, `GET /fail`). The actions are `fail`'s:
//! `sleep(ms)` stalls the thread that reaches the point (a slow disk when put before an
//! fsync), `panic` panics there, `pause` holds it until the point is set again, `off` does
//! nothing, each with `p%` and `cnt*` prefixes. `return` is this master's own: the process
//! **crashes** at the point ([`crash`]: SIGABRT, no destructor runs, nothing buffered is
//! written), as a power cut or a SIGKILL there would leave it.

/// Before the Raft log's fsync of appended entries and hard state (`raft/segment_log.rs`).
pub const LOG_FSYNC_BEFORE: &str = "log_fsync_before";
/// After the Raft log's fsync, before the node goes on with what it made durable.
pub const LOG_FSYNC_AFTER: &str = "log_fsync_after";
/// Before a durable commit of the index (an applied batch, or a sync of the applied index;
/// `replica.rs`): the commit fsyncs the index file.
pub const INDEX_COMMIT_BEFORE: &str = "index_commit_before";
/// After a durable commit of the index, before the node learns it happened.
pub const INDEX_COMMIT_AFTER: &str = "index_commit_after";
/// On a follower, after a chunk of a streamed snapshot is written to its file, before the
/// next one is taken (`raft/snapshot.rs`): a transfer cut in the middle.
pub const SNAPSHOT_CHUNK_WRITTEN: &str = "snapshot_chunk_written";
/// On a follower installing a snapshot, after the index holds it (durably) and before the
/// Raft log is reset to start after it (`raft/node.rs`): the window `RaftStorage::open`
/// finishes at the next start.
pub const SNAPSHOT_BEFORE_LOG_RESET: &str = "snapshot_before_log_reset";
/// In `--restore`, after the backup's records are written, before the one transaction that
/// holds them (and deletes the backed-up group's membership) commits (`index/snapshot.rs`).
pub const RESTORE_BEFORE_COMMIT: &str = "restore_before_commit";
/// In `--restore`, after the restore committed, before the master starts its Raft log
/// (`restore.rs`).
pub const RESTORE_AFTER_COMMIT: &str = "restore_after_commit";
/// Before a committed membership change is applied to the index (`replica.rs`): the change
/// and the rest of its batch are not applied.
pub const MEMBERSHIP_BEFORE_APPLY: &str = "membership_before_apply";

/// Every point, for `GET /fail` and the tests that name one.
pub const ALL: [&str; 9] = [
    LOG_FSYNC_BEFORE,
    LOG_FSYNC_AFTER,
    INDEX_COMMIT_BEFORE,
    INDEX_COMMIT_AFTER,
    SNAPSHOT_CHUNK_WRITTEN,
    SNAPSHOT_BEFORE_LOG_RESET,
    RESTORE_BEFORE_COMMIT,
    RESTORE_AFTER_COMMIT,
    MEMBERSHIP_BEFORE_APPLY,
];

/// Evaluates the failpoint `$name` (one of this module's constants) here: whatever actions it
/// is armed with run, and `return` crashes the process ([`crash`]). Nothing without the
/// `failpoints` feature.
macro_rules! point {
    ($name:expr) => {
        fail::fail_point!($name, |_| $crate::failpoints::crash($name))
    };
}
pub(crate) use point;

/// The `return` action of every point: says which point on stderr, then aborts the process
/// (SIGABRT: no unwinding, no destructor, no buffered write reaches a file).
#[cfg(feature = "failpoints")]
pub fn crash(name: &str) -> ! {
    eprintln!("failpoint {name}: crashing here");
    std::process::abort()
}

/// Arms the points `FAILPOINTS` names (`name=actions;...`, `fail`'s syntax). Errors: a
/// malformed entry or action, or a name that is not one of [`ALL`] (a typo would otherwise
/// arm nothing, silently).
#[cfg(feature = "failpoints")]
pub fn arm_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var("FAILPOINTS") else {
        return Ok(());
    };
    for entry in spec.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, actions) = entry
            .split_once('=')
            .ok_or_else(|| format!("FAILPOINTS entry {entry:?} is not name=actions"))?;
        arm(name.trim(), actions.trim())?;
    }
    Ok(())
}

/// Arms the point `name` with `actions`. Errors: `name` is not one of [`ALL`], or `fail`
/// refuses the actions.
#[cfg(feature = "failpoints")]
pub fn arm(name: &str, actions: &str) -> Result<(), String> {
    if !ALL.contains(&name) {
        return Err(format!(
            "no failpoint {name:?}; the master has {}",
            ALL.join(", ")
        ));
    }
    fail::cfg(name, actions)?;
    tracing::warn!(failpoint = name, actions, "failpoint armed");
    Ok(())
}

/// Disarms the point `name` (a paused thread there goes on).
#[cfg(feature = "failpoints")]
pub fn disarm(name: &str) {
    fail::remove(name);
    tracing::warn!(failpoint = name, "failpoint disarmed");
}

#[cfg(all(test, feature = "failpoints"))]
mod tests {
    use super::*;

    #[test]
    fn only_the_masters_points_are_armed() {
        let e = arm("log_fsync_befor", "sleep(1)").unwrap_err();
        assert!(e.contains("no failpoint \"log_fsync_befor\""), "{e}");
        assert!(arm(RESTORE_AFTER_COMMIT, "not-an-action").is_err());
        arm(RESTORE_AFTER_COMMIT, "off").unwrap();
        assert!(
            fail::list()
                .iter()
                .any(|(n, a)| n == RESTORE_AFTER_COMMIT && a == "off")
        );
        disarm(RESTORE_AFTER_COMMIT);
        assert!(!fail::list().iter().any(|(n, _)| n == RESTORE_AFTER_COMMIT));
    }
}

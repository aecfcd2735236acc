//! `symcluster-master --restore FILE`: a new master's index seeded from a backup
//! (`symctl admin backup`, `Admin/Backup`), before Raft starts.
//!
//! The backup is the index as snapshot records (`index::snapshot`), at one applied log index.
//! Restored into an empty data directory, the index is ahead of the (empty) Raft log, and the
//! log then starts after the backup's applied index as it does after an installed snapshot
//! (`raft::storage::RaftStorage::open`). Every member of the new group is restored from the
//! same file (or a group of one is restored, then grown). The index records which file
//! (its SHA-256, [`sha256`]): masters that start beside it ask (`raft::join`).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::index::Index;

/// SHA-256 of the backup `file` (what `sha256sum` prints), read once in 1 MiB blocks. Errors:
/// the file cannot be read, naming it.
pub fn sha256(file: &Path) -> anyhow::Result<[u8; 32]> {
    let read = || -> io::Result<[u8; 32]> {
        let mut input = File::open(file)?;
        let mut hasher = Sha256::new();
        let mut block = vec![0u8; 1 << 20];
        loop {
            match input.read(&mut block)? {
                0 => return Ok(hasher.finalize().into()),
                n => hasher.update(&block[..n]),
            }
        }
    };
    read().map_err(|e| anyhow::anyhow!("cannot read the backup {}: {e}", file.display()))
}

/// Restores `index` (just opened in `data_dir`) from the backup `file`, whose SHA-256 is
/// `sha256` ([`sha256`]; recorded with it, [`Index::restored_from`]); returns the log index
/// and term it reflects. Errors: `data_dir` already holds an index or a Raft log (a restore
/// only seeds a new master: it never overwrites one), the file cannot be read, or it is not a
/// whole backup (cut, corrupt: the index is then left empty).
pub fn seed(
    index: &Index,
    data_dir: &Path,
    file: &Path,
    sha256: &[u8; 32],
) -> anyhow::Result<(u64, u64)> {
    let (applied, _) = index.applied()?;
    let log_dir = data_dir.join("raft-log");
    if applied > 0 || log_dir.exists() {
        anyhow::bail!(
            "--restore seeds a new master, but {} already holds an index (applied up to log \
             entry {applied}) or a raft log; start it with an empty --data-dir, or without \
             --restore",
            data_dir.display()
        );
    }
    let input = File::open(file)
        .map_err(|e| anyhow::anyhow!("cannot read the backup {}: {e}", file.display()))?;
    let (index_at, term) = index
        .restore_backup_from(&mut BufReader::with_capacity(1 << 20, input), sha256)
        .map_err(|e| anyhow::anyhow!("the backup {} does not restore: {e}", file.display()))?;
    tracing::info!(
        file = %file.display(),
        applied_index = index_at,
        applied_term = term,
        sha256 = %hex::encode(sha256),
        "index restored from a backup"
    );
    crate::failpoints::point!(crate::failpoints::RESTORE_AFTER_COMMIT);
    Ok((index_at, term))
}

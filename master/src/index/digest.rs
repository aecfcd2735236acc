//! A digest of every table of the index, to check that masters hold the same index: two masters
//! at the same applied index must have the same digest, whether they applied the log entry by
//! entry or restored a snapshot.

use redb::{
    Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition, TableHandle, Value,
};
use sha2::{Digest as _, Sha256};

use super::bodies::BodyReader;
use super::body_tables::{self, INLINE_RESULTS, INLINE_SPECS};
use super::{
    BY_SEQUENCE, GROUPS, Index, IndexError, JOBS, META, OPEN, RESULTS, SPECS, db, groups, meta,
    missing,
};

/// What [`Index::digest`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDigest {
    /// SHA-256 over every table: each table's name, then each key and value, each prefixed with
    /// its length (u64 little-endian), in key order. The applied index and term are left out,
    /// and so are counts of 0 in `index_meta` (as if absent). Specs and results are hashed as
    /// their bytes under the names they had before body files (`specs`, `results`), not as
    /// the references, which differ between masters; `body_files`, `log_bodies` and the body files'
    /// position in `index_meta` are left out.
    pub sha256: [u8; 32],
    /// The log entry the index reflects.
    pub applied_index: u64,
    /// Its term.
    pub applied_term: u64,
    /// Job records.
    pub jobs: u64,
}

fn put(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// Hashes table `definition` (absent: as empty) into `hasher`, skipping rows (key and value
/// bytes) `skip` returns true for; returns its rows hashed.
fn hash_table<K: Key + 'static, V: Value + 'static>(
    txn: &ReadTransaction,
    definition: TableDefinition<K, V>,
    hasher: &mut Sha256,
    skip: impl Fn(&[u8], &[u8]) -> bool,
) -> Result<u64, IndexError> {
    put(hasher, definition.name().as_bytes());
    let table = match txn.open_table(definition) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(db(e)),
    };
    let mut rows = 0;
    for row in table.iter().map_err(db)? {
        let (key, value) = row.map_err(db)?;
        let (key_value, value_value) = (key.value(), value.value());
        let (key_bytes, value_bytes) = (K::as_bytes(&key_value), V::as_bytes(&value_value));
        if skip(key_bytes.as_ref(), value_bytes.as_ref()) {
            continue;
        }
        put(hasher, key_bytes.as_ref());
        put(hasher, value_bytes.as_ref());
        rows += 1;
    }
    Ok(rows)
}

impl Index {
    /// The digest of every table, read in one read transaction (it reads the whole index:
    /// seconds per GB). Errors: the store's.
    pub fn digest(&self) -> Result<IndexDigest, IndexError> {
        let reader = self.bodies.reader();
        digest_of(&self.db.begin_read().map_err(db)?, &reader)
    }
}

impl super::snapshot::SnapshotSource {
    /// The digest of the index this source holds (the same read transaction).
    pub fn digest(&self) -> Result<IndexDigest, IndexError> {
        digest_of(&self.txn, &self.reader)
    }
}

/// Hashes the body-reference table `refs` as the table `legacy` of bytes it was before body
/// files: its name, then each key and body.
fn hash_bodies(
    txn: &ReadTransaction,
    refs: TableDefinition<&'static str, &'static [u8]>,
    legacy: TableDefinition<&'static str, &'static [u8]>,
    reader: &BodyReader,
    hasher: &mut Sha256,
) -> Result<(), IndexError> {
    put(hasher, legacy.name().as_bytes());
    let table = match txn.open_table(refs) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(()),
        Err(e) => return Err(db(e)),
    };
    for row in table.iter().map_err(db)? {
        let (key, value) = row.map_err(db)?;
        let body = body_tables::decode_ref(key.value(), value.value())?;
        let bytes = reader
            .read(body)
            .map_err(|e| IndexError::Corrupt(format!("the body of {}: {e}", key.value())))?;
        put(hasher, key.value().as_bytes());
        put(hasher, &bytes);
    }
    Ok(())
}

fn digest_of(txn: &ReadTransaction, reader: &BodyReader) -> Result<IndexDigest, IndexError> {
    let mut hasher = Sha256::new();
    let keep = |_: &[u8], _: &[u8]| false;
    let jobs = hash_table(txn, JOBS, &mut hasher, keep)?;
    hash_bodies(txn, SPECS, INLINE_SPECS, reader, &mut hasher)?;
    hash_bodies(txn, RESULTS, INLINE_RESULTS, reader, &mut hasher)?;
    hash_table(txn, BY_SEQUENCE, &mut hasher, keep)?;
    hash_table(txn, OPEN, &mut hasher, keep)?;
    hash_table(txn, GROUPS, &mut hasher, keep)?;
    hash_table(txn, groups::TREES, &mut hasher, keep)?;
    hash_table(txn, super::facets::FACETS, &mut hasher, keep)?;
    hash_table(txn, missing::SETS, &mut hasher, keep)?;
    hash_table(txn, missing::FILES, &mut hasher, keep)?;
    hash_table(txn, missing::JOBS, &mut hasher, keep)?;
    // The membership (`members`) is left out: a backup restored into a new group holds that
    // group's, and the same jobs.
    // A count of 0 reads as an absent one (a restored index writes every count; applying
    // writes one when it first changes).
    hash_table(txn, META, &mut hasher, |key, value| {
        key == meta::APPLIED_INDEX.as_bytes()
            || key == meta::APPLIED_TERM.as_bytes()
            || key == body_tables::ACTIVE_FILE.as_bytes()
            || key == body_tables::ACTIVE_END.as_bytes()
            || value.iter().all(|b| *b == 0)
    })?;
    let (applied_index, applied_term) = {
        let table = txn.open_table(META).map_err(db)?;
        let get = |key: &str| -> Result<u64, IndexError> {
            Ok(table.get(key).map_err(db)?.map_or(0, |v| v.value()))
        };
        (get(meta::APPLIED_INDEX)?, get(meta::APPLIED_TERM)?)
    };
    Ok(IndexDigest {
        sha256: hasher.finalize().into(),
        applied_index,
        applied_term,
        jobs,
    })
}

//! The index of finished jobs that lacked files (debug files, source maps), by file.
//!
//! A job lacks a *set* of files, and most jobs that lack any lack the same set as many others
//! (the same app build on the same OS version lacks the same system libraries). So the index
//! stores each distinct set once and a job as one row in its set:
//!
//! | table | key → value |
//! |---|---|
//! | `missing_sets` | set id → `MissingSet` (prost): the project and its files (key, image, arch) |
//! | `missing_files` | `<project>\0<file key>\0<set id>` → `()`: the sets that hold a file |
//! | `missing_jobs` | `<set id>\0<job key>` → `MissingJob` (prost; `at_ms`, `fingerprint`) |
//!
//! A set id is the first 16 bytes of the SHA-256 of the set's prost encoding (its files sorted
//! by key, one entry per key), in lowercase hex (32 characters). Recording a job costs one
//! lookup and one insert however many files it lacks (the layout before this one wrote a row
//! per file and job: a CrashProbe report lacking 9 system libraries wrote 9); only the first job
//! of a set also writes the set and its `missing_files` rows, and the last one to leave deletes
//! them.
//!
//! When two files of one job's list share a key, its set keeps the first in (key, image, arch)
//! order; when jobs finished at the same time lack a file, `ListMissing` shows the image and arch
//! of the set with the greatest id. Both are the same on every master.
//!
//! [`convert_rows`] replaces the previous layout (`missing`: `<project>\0<file key>\0<job id>` →
//! `MissingJob` with image and arch) when an index written before it opens.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use prost::Message;
use redb::{ReadableTable, Table, TableDefinition, TableHandle, WriteTransaction};
use sha2::{Digest, Sha256};
use symcluster_proto::cluster::v1 as pb;
use symcluster_proto::v1;

use super::{IndexError, db, keys};

/// Set id → `MissingSet`.
pub(crate) const SETS: TableDefinition<&str, &[u8]> = TableDefinition::new("missing_sets");
/// `<project>\0<file key>\0<set id>` → nothing.
pub(crate) const FILES: TableDefinition<&str, ()> = TableDefinition::new("missing_files");
/// `<set id>\0<job key>` → `MissingJob`.
pub(crate) const JOBS: TableDefinition<&str, &[u8]> = TableDefinition::new("missing_jobs");
/// The previous layout: one row per job and file (see the module docs).
pub(crate) const ROWS_BEFORE_SETS: TableDefinition<&str, &[u8]> = TableDefinition::new("missing");

/// A set's files in their stored order: sorted by key, one per key (the first in
/// (key, image, arch) order).
fn canonical(files: &[v1::MissingFile]) -> Vec<v1::MissingFile> {
    let mut files = files.to_vec();
    files.sort_by(|a, b| (&a.key, &a.image, &a.arch).cmp(&(&b.key, &b.image, &b.arch)));
    files.dedup_by(|later, first| later.key == first.key);
    files
}

/// The id of `set` (its files canonical): its prost encoding hashed, so that every field is
/// length-delimited and no two sets share an encoding.
fn set_id(set: &pb::MissingSet) -> String {
    hex::encode(&Sha256::digest(set.encode_to_vec())[..16])
}

/// The set of `files` in `job_key`'s project (files canonical) and its id; `None` when `files`
/// is empty (the job lacked nothing).
fn set_of(job_key: &str, files: &[v1::MissingFile]) -> Option<(pb::MissingSet, String)> {
    if files.is_empty() {
        return None;
    }
    let set = pb::MissingSet {
        project: keys::split(job_key).0.to_owned(),
        files: canonical(files),
    };
    let id = set_id(&set);
    Some((set, id))
}

fn file_row(project: &str, file_key: &str, set: &str) -> String {
    format!("{project}\0{file_key}\0{set}")
}

fn job_row(set: &str, job_key: &str) -> String {
    format!("{set}\0{job_key}")
}

fn decode_set(id: &str, bytes: &[u8]) -> Result<pb::MissingSet, IndexError> {
    pb::MissingSet::decode(bytes).map_err(|source| IndexError::Decode {
        what: format!("missing set {id}"),
        source,
    })
}

/// The keys of set `set`'s `missing_jobs` rows: `<set id>\0…`.
fn set_jobs(set: &str) -> std::ops::Range<String> {
    let prefix = format!("{set}\0");
    let end = prefix_end(&prefix);
    prefix..end
}

/// The first key after every key that starts with `prefix` (`prefix` ends in `\0`, so its last
/// byte can be raised to `\x01`).
fn prefix_end(prefix: &str) -> String {
    let mut end = prefix.to_owned();
    end.pop();
    end.push('\u{1}');
    end
}

/// The three tables, open in one write transaction.
pub(crate) struct MissingTables<'t> {
    sets: Table<'t, &'static str, &'static [u8]>,
    files: Table<'t, &'static str, ()>,
    jobs: Table<'t, &'static str, &'static [u8]>,
}

impl<'t> MissingTables<'t> {
    /// Opens (creates) the tables in `txn`.
    pub(crate) fn open(txn: &'t WriteTransaction) -> Result<Self, IndexError> {
        Ok(MissingTables {
            sets: txn.open_table(SETS).map_err(db)?,
            files: txn.open_table(FILES).map_err(db)?,
            jobs: txn.open_table(JOBS).map_err(db)?,
        })
    }

    /// Records that job `job_key` (finished at `at_ms`, in group `fingerprint`, empty for none)
    /// lacks `files`; nothing when `files` is empty.
    pub(crate) fn record(
        &mut self,
        job_key: &str,
        files: &[v1::MissingFile],
        at_ms: u64,
        fingerprint: &str,
    ) -> Result<(), IndexError> {
        let Some((value, set)) = set_of(job_key, files) else {
            return Ok(());
        };
        if self.sets.get(set.as_str()).map_err(db)?.is_none() {
            for file in &value.files {
                self.files
                    .insert(file_row(&value.project, &file.key, &set).as_str(), ())
                    .map_err(db)?;
            }
            self.sets
                .insert(set.as_str(), value.encode_to_vec().as_slice())
                .map_err(db)?;
        }
        let job = pb::MissingJob {
            at_ms,
            fingerprint: fingerprint.to_owned(),
            ..Default::default()
        };
        self.jobs
            .insert(
                job_row(&set, job_key).as_str(),
                job.encode_to_vec().as_slice(),
            )
            .map_err(db)?;
        Ok(())
    }

    /// Takes job `job_key`, recorded as lacking `files`, out; a set left with no job is
    /// deleted with its `missing_files` rows.
    pub(crate) fn unrecord(
        &mut self,
        job_key: &str,
        files: &[v1::MissingFile],
    ) -> Result<(), IndexError> {
        let Some((_, set)) = set_of(job_key, files) else {
            return Ok(());
        };
        self.jobs
            .remove(job_row(&set, job_key).as_str())
            .map_err(db)?;
        let rows = set_jobs(&set);
        if self
            .jobs
            .range(rows.start.as_str()..rows.end.as_str())
            .map_err(db)?
            .next()
            .is_some()
        {
            return Ok(());
        }
        // The last job left: the set goes, with the rows of the files it stored.
        let stored = match self.sets.remove(set.as_str()).map_err(db)? {
            Some(bytes) => decode_set(&set, bytes.value())?,
            None => return Ok(()),
        };
        for file in &stored.files {
            self.files
                .remove(file_row(&stored.project, &file.key, &set).as_str())
                .map_err(db)?;
        }
        Ok(())
    }
}

/// Replaces the previous layout (`missing`, if `txn` has that table) by the sets, rebuilt from
/// the job records' `missing` lists (at their `finished_at_ms`, in their group) as a restored
/// snapshot builds them, and deletes that table; how many jobs lack files. Whatever the set
/// tables held is dropped first: a master from before this layout that opened the index in
/// between wrote only the old table, so both could be stale.
pub(crate) fn convert_rows(txn: &WriteTransaction) -> Result<usize, IndexError> {
    let exists = txn
        .list_tables()
        .map_err(db)?
        .any(|t| t.name() == ROWS_BEFORE_SETS.name());
    if !exists {
        return Ok(0);
    }
    txn.delete_table(SETS).map_err(db)?;
    txn.delete_table(FILES).map_err(db)?;
    txn.delete_table(JOBS).map_err(db)?;
    let records = txn.open_table(super::JOBS).map_err(db)?;
    let mut tables = MissingTables::open(txn)?;
    let mut converted = 0;
    for entry in records.iter().map_err(db)? {
        let (key, bytes) = entry.map_err(db)?;
        let record = super::decode_record(key.value(), bytes.value())?;
        if record.missing.is_empty() {
            continue;
        }
        tables.record(
            key.value(),
            &record.missing,
            record.finished_at_ms,
            &record.fingerprint,
        )?;
        converted += 1;
    }
    drop(tables);
    drop(records);
    txn.delete_table(ROWS_BEFORE_SETS).map_err(db)?;
    Ok(converted)
}

/// The finished jobs (index keys) of `project` (of every project when `None`) that lack one of
/// the files `file_keys` name, each once: for one project, a range scan of `missing_files` per
/// key; for every project, one scan of it; then one range scan of `missing_jobs` per set.
pub(crate) fn jobs_lacking(
    read: &redb::ReadTransaction,
    project: Option<&str>,
    file_keys: &[String],
) -> Result<BTreeSet<String>, IndexError> {
    let files = read.open_table(FILES).map_err(db)?;
    let mut sets = BTreeSet::new();
    let mut add_set = |row: &str| {
        if let Some(set) = row.rsplit('\0').next() {
            sets.insert(set.to_owned());
        }
    };
    match project {
        Some(project) => {
            for file_key in file_keys {
                let prefix = format!("{project}\0{file_key}\0");
                let end = prefix_end(&prefix);
                for row in files.range(prefix.as_str()..end.as_str()).map_err(db)? {
                    add_set(row.map_err(db)?.0.value());
                }
            }
        }
        None => {
            let wanted: HashSet<&str> = file_keys.iter().map(String::as_str).collect();
            for row in files.iter().map_err(db)? {
                let (key, _) = row.map_err(db)?;
                let mut parts = key.value().splitn(3, '\0');
                if parts.nth(1).is_some_and(|file| wanted.contains(file)) {
                    add_set(key.value());
                }
            }
        }
    }
    let jobs_table = read.open_table(JOBS).map_err(db)?;
    let mut jobs = BTreeSet::new();
    for set in sets {
        let rows = set_jobs(&set);
        for row in jobs_table
            .range(rows.start.as_str()..rows.end.as_str())
            .map_err(db)?
        {
            let (key, _) = row.map_err(db)?;
            if let Some((_, job)) = key.value().split_once('\0') {
                jobs.insert(job.to_owned());
            }
        }
    }
    Ok(jobs)
}

/// The files finished jobs of the projects `sees` accepts lack: one entry per project and file
/// with its affected jobs, distinct crash groups, first and last time seen, and the image and
/// arch of the latest job; unsorted. Reads every set `sees` accepts and its jobs once.
pub(crate) fn files(
    read: &redb::ReadTransaction,
    sees: impl Fn(&str) -> bool,
) -> Result<Vec<v1::MissingEntry>, IndexError> {
    let sets = read.open_table(SETS).map_err(db)?;
    let jobs_table = read.open_table(JOBS).map_err(db)?;
    let mut found: BTreeMap<(String, String), (v1::MissingEntry, HashSet<String>)> =
        BTreeMap::new();
    for row in sets.iter().map_err(db)? {
        let (id, value) = row.map_err(db)?;
        let set = decode_set(id.value(), value.value())?;
        if !sees(&set.project) {
            continue;
        }
        // The set's jobs, once: how many, when, and their groups.
        let (mut count, mut first, mut last) = (0u64, u64::MAX, 0u64);
        let mut groups = HashSet::new();
        let rows = set_jobs(id.value());
        for job in jobs_table
            .range(rows.start.as_str()..rows.end.as_str())
            .map_err(db)?
        {
            let (key, value) = job.map_err(db)?;
            let job =
                pb::MissingJob::decode(value.value()).map_err(|source| IndexError::Decode {
                    what: format!("missing job {:?}", key.value()),
                    source,
                })?;
            count += 1;
            first = first.min(job.at_ms);
            last = last.max(job.at_ms);
            if !job.fingerprint.is_empty() {
                groups.insert(job.fingerprint);
            }
        }
        if count == 0 {
            continue;
        }
        for file in set.files {
            let (entry, entry_groups) = found
                .entry((set.project.clone(), file.key.clone()))
                .or_insert_with(|| {
                    (
                        v1::MissingEntry {
                            project: set.project.clone(),
                            key: file.key.clone(),
                            first_seen_ms: u64::MAX,
                            ..Default::default()
                        },
                        HashSet::new(),
                    )
                });
            entry.jobs += count;
            entry.first_seen_ms = entry.first_seen_ms.min(first);
            if last >= entry.last_seen_ms {
                entry.last_seen_ms = last;
                entry.image = file.image;
                entry.arch = file.arch;
            }
            entry_groups.extend(groups.iter().cloned());
        }
    }
    Ok(found
        .into_values()
        .map(|(mut entry, groups)| {
            entry.groups = groups.len() as u64;
            entry
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(key: &str, image: &str) -> v1::MissingFile {
        v1::MissingFile {
            key: key.into(),
            image: image.into(),
            arch: "arm64".into(),
        }
    }

    #[test]
    fn a_set_is_the_same_in_any_order_and_differs_by_project() {
        let id = |job: &str, files: &[v1::MissingFile]| set_of(job, files).unwrap().1;
        let a = [file("b", "B"), file("a", "A"), file("a", "A2")];
        let b = [file("a", "A"), file("b", "B")];
        assert_eq!(canonical(&a), canonical(&b));
        assert_eq!(canonical(&a).len(), 2);
        assert_eq!(id("demo/1", &a), id("demo/2", &b));
        assert_ne!(id("demo/1", &a), id("other/1", &a));
        assert_eq!(id("demo/1", &a).len(), 32);
        assert!(set_of("demo/1", &[]).is_none());
        // Fields are length-delimited: a NUL in an image name cannot forge another set.
        let forged = [v1::MissingFile {
            key: "a".into(),
            image: "A\0arm64\0b\0B".into(),
            arch: "arm64".into(),
        }];
        assert_ne!(id("demo/1", &forged), id("demo/1", &b));
    }

    #[test]
    fn jobs_that_lack_the_same_files_share_one_set_and_the_last_to_leave_deletes_it() {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        let dir = tempfile::tempdir().unwrap();
        let database = redb::Database::create(dir.path().join("m.redb")).unwrap();
        let txn = database.begin_write().unwrap();
        {
            let mut tables = MissingTables::open(&txn).unwrap();
            let both = [file("k1", "A"), file("k2", "B")];
            let reversed = [file("k2", "B"), file("k1", "A")];
            tables.record("demo/a", &both, 10, "g1").unwrap();
            tables.record("demo/b", &reversed, 20, "g2").unwrap();
            tables.record("demo/c", &[file("k1", "A")], 30, "").unwrap();
            tables
                .record("other/d", &[file("k1", "A")], 40, "g3")
                .unwrap();
        }
        txn.commit().unwrap();
        let read = database.begin_read().unwrap();
        assert_eq!(read.open_table(SETS).unwrap().len().unwrap(), 3);
        assert_eq!(read.open_table(JOBS).unwrap().len().unwrap(), 4);
        let lacking = |project: Option<&str>, key: &str| -> Vec<String> {
            let read = database.begin_read().unwrap();
            jobs_lacking(&read, project, &[key.to_owned()])
                .unwrap()
                .into_iter()
                .collect()
        };
        assert_eq!(lacking(Some("demo"), "k1"), ["demo/a", "demo/b", "demo/c"]);
        assert_eq!(lacking(Some("demo"), "k2"), ["demo/a", "demo/b"]);
        assert_eq!(
            lacking(None, "k1"),
            ["demo/a", "demo/b", "demo/c", "other/d"]
        );
        assert!(lacking(Some("demo"), "k3").is_empty());
        let mut entries = files(&read, |p| p == "demo").unwrap();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        let summary: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    e.key.as_str(),
                    e.image.as_str(),
                    e.jobs,
                    e.groups,
                    e.first_seen_ms,
                    e.last_seen_ms,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [("k1", "A", 3, 2, 10, 30), ("k2", "B", 2, 2, 10, 20)]
        );
        drop(read);

        let unrecord = |job: &str, files: &[v1::MissingFile]| {
            let txn = database.begin_write().unwrap();
            MissingTables::open(&txn)
                .unwrap()
                .unrecord(job, files)
                .unwrap();
            txn.commit().unwrap();
        };
        unrecord("demo/a", &[file("k1", "A"), file("k2", "B")]);
        // demo/b still lacks both: the set stays.
        assert_eq!(lacking(Some("demo"), "k2"), ["demo/b"]);
        unrecord("demo/b", &[file("k2", "B"), file("k1", "A")]);
        assert!(lacking(Some("demo"), "k2").is_empty());
        assert_eq!(lacking(Some("demo"), "k1"), ["demo/c"]);
        let read = database.begin_read().unwrap();
        assert_eq!(read.open_table(SETS).unwrap().len().unwrap(), 2);
        // Left: demo's and other's sets of k1.
        assert_eq!(read.open_table(FILES).unwrap().len().unwrap(), 2);
    }

    #[test]
    fn prefix_end_bounds_exactly_the_prefix() {
        let prefix = "demo\0key\0";
        let end = prefix_end(prefix);
        assert!(format!("{prefix}zzz").as_str() < end.as_str());
        assert!("demo\0key1\0x" > end.as_str());
        assert!("demo\0key" < prefix);
    }
}

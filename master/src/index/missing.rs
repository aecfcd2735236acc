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
//! A set id is the first 16 bytes of the SHA-256 of the project and the set's files, sorted by
//! key with one entry per key, in lowercase hex (32 characters). Recording a job costs one
//! lookup and one insert however many files it lacks (the layout before this one wrote a row
//! per file and job: a CrashProbe report lacking 9 system libraries wrote 9); the first job of
//! a set also writes the set and its `missing_files` rows, and the last one to leave deletes
//! them.
//!
//! [`convert_rows`] turns the previous layout (`missing`: `<project>\0<file key>\0<job id>` →
//! `MissingJob` with image and arch) into this one when an index written before it opens.

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

/// The id of the set of `files` (canonical) in `project`.
fn set_id(project: &str, files: &[v1::MissingFile]) -> String {
    let mut hash = Sha256::new();
    hash.update(project.as_bytes());
    for file in files {
        for part in [&file.key, &file.image, &file.arch] {
            hash.update([0u8]);
            hash.update(part.as_bytes());
        }
    }
    hex::encode(&hash.finalize()[..16])
}

/// The project of `job_key`, the canonical set of `files` and its id; `None` when `files` is
/// empty (the job lacked nothing).
fn set_of<'k>(
    job_key: &'k str,
    files: &[v1::MissingFile],
) -> Option<(&'k str, Vec<v1::MissingFile>, String)> {
    if files.is_empty() {
        return None;
    }
    let (project, _) = keys::split(job_key);
    let files = canonical(files);
    let set = set_id(project, &files);
    Some((project, files, set))
}

fn file_row(project: &str, file_key: &str, set: &str) -> String {
    format!("{project}\0{file_key}\0{set}")
}

fn job_row(set: &str, job_key: &str) -> String {
    format!("{set}\0{job_key}")
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
        let Some((project, files, set)) = set_of(job_key, files) else {
            return Ok(());
        };
        if self.sets.get(set.as_str()).map_err(db)?.is_none() {
            for file in &files {
                self.files
                    .insert(file_row(project, &file.key, &set).as_str(), ())
                    .map_err(db)?;
            }
            let value = pb::MissingSet {
                project: project.to_owned(),
                files,
            };
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
        let Some((project, files, set)) = set_of(job_key, files) else {
            return Ok(());
        };
        self.jobs
            .remove(job_row(&set, job_key).as_str())
            .map_err(db)?;
        let prefix = format!("{set}\0");
        let end = prefix_end(&prefix);
        let still_used = self
            .jobs
            .range(prefix.as_str()..end.as_str())
            .map_err(db)?
            .next()
            .is_some();
        if !still_used && self.sets.remove(set.as_str()).map_err(db)?.is_some() {
            for file in &files {
                self.files
                    .remove(file_row(project, &file.key, &set).as_str())
                    .map_err(db)?;
            }
        }
        Ok(())
    }
}

/// Rewrites the previous layout's rows (`missing`, if `txn` has that table) into the sets, and
/// deletes that table; how many jobs were converted. A job's set is its record's `missing`
/// list (its rows' files for a job without a record), its time and group its rows' `at_ms` and
/// `fingerprint`, so the result is what applying the same log with this layout writes.
pub(crate) fn convert_rows(txn: &WriteTransaction) -> Result<usize, IndexError> {
    let exists = txn
        .list_tables()
        .map_err(db)?
        .any(|t| t.name() == ROWS_BEFORE_SETS.name());
    if !exists {
        return Ok(0);
    }
    // Job key → (its files, at_ms, fingerprint).
    let mut by_job: BTreeMap<String, (Vec<v1::MissingFile>, u64, String)> = BTreeMap::new();
    {
        let rows = txn.open_table(ROWS_BEFORE_SETS).map_err(db)?;
        for row in rows.iter().map_err(db)? {
            let (key, value) = row.map_err(db)?;
            let Some((_, file_key, job_key)) = keys::split_missing(key.value()) else {
                continue;
            };
            let job =
                pb::MissingJob::decode(value.value()).map_err(|source| IndexError::Decode {
                    what: format!("missing entry {:?}", key.value()),
                    source,
                })?;
            let entry = by_job
                .entry(job_key)
                .or_insert_with(|| (Vec::new(), job.at_ms, job.fingerprint.clone()));
            entry.0.push(v1::MissingFile {
                key: file_key.to_owned(),
                image: job.image,
                arch: job.arch,
            });
        }
    }
    let converted = by_job.len();
    {
        // The files as the job's record lists them, when it does: that list is what the job is
        // taken out by later (`unrecord`), and a key listed twice there had one row here.
        let records = txn.open_table(super::JOBS).map_err(db)?;
        let mut tables = MissingTables::open(txn)?;
        for (job_key, (files, at_ms, fingerprint)) in &by_job {
            let record = match records.get(job_key.as_str()).map_err(db)? {
                Some(bytes) => Some(super::decode_record(job_key, bytes.value())?),
                None => None,
            };
            let files = match &record {
                Some(record) if !record.missing.is_empty() => &record.missing,
                _ => files,
            };
            tables.record(job_key, files, *at_ms, fingerprint)?;
        }
    }
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
        let prefix = format!("{set}\0");
        let end = prefix_end(&prefix);
        for row in jobs_table
            .range(prefix.as_str()..end.as_str())
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
        let set = pb::MissingSet::decode(value.value()).map_err(|source| IndexError::Decode {
            what: format!("missing set {}", id.value()),
            source,
        })?;
        if !sees(&set.project) {
            continue;
        }
        // The set's jobs, once: how many, when, and their groups.
        let (mut count, mut first, mut last) = (0u64, u64::MAX, 0u64);
        let mut groups = HashSet::new();
        let prefix = format!("{}\0", id.value());
        let end = prefix_end(&prefix);
        for job in jobs_table
            .range(prefix.as_str()..end.as_str())
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
        let a = canonical(&[file("b", "B"), file("a", "A"), file("a", "A2")]);
        let b = canonical(&[file("a", "A"), file("b", "B")]);
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert_eq!(set_id("demo", &a), set_id("demo", &b));
        assert_ne!(set_id("demo", &a), set_id("other", &a));
        assert_eq!(set_id("demo", &a).len(), 32);
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

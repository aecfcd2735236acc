//! The index's side of [`super::bodies`]: the `spec_refs` and `result_refs` tables hold a
//! [`BodyRef`] per job, `body_files` each file's live bytes, `log_bodies` the live bytes the
//! index references in each Raft log segment, and `index_meta` the active file and its end as
//! of each commit ([`BodyWriter::record`]). An index from before body files
//! held the bytes in `specs` and `results`; [`move_inline`] moves them out once, when it opens.

use std::collections::BTreeSet;

use redb::{ReadableTable, Table, TableDefinition, WriteTransaction};

use super::bodies::{Bodies, BodyReader, BodyRef, Home, InLog, Position};
use super::{IndexError, META, RESULTS, SPECS, db};

/// File number → live bytes (bodies some reference still names).
pub(crate) const BODY_FILES: TableDefinition<u32, u64> = TableDefinition::new("body_files");
/// Raft log segment (sequence number) → live bytes the index references in it: the log keeps
/// a segment while it has a row here (`raft/segment_log.rs`).
pub(crate) const LOG_BODIES: TableDefinition<u64, u64> = TableDefinition::new("log_bodies");
/// Before body files: job key → the encoded `JobSpec`.
pub(crate) const INLINE_SPECS: TableDefinition<&str, &[u8]> = TableDefinition::new("specs");
/// Before body files: job key → the zstd-compressed result.
pub(crate) const INLINE_RESULTS: TableDefinition<&str, &[u8]> = TableDefinition::new("results");

/// `index_meta` keys of the active body file and its end.
pub(crate) const ACTIVE_FILE: &str = "bodies_file";
pub(crate) const ACTIVE_END: &str = "bodies_end";

fn body_error(what: &str, e: std::io::Error) -> IndexError {
    IndexError::Corrupt(format!("{what}: {e}"))
}

/// [`Bodies::sync`], its error as the index's: call before every durable commit.
pub(crate) fn sync(bodies: &Bodies) -> Result<(), IndexError> {
    bodies
        .sync()
        .map_err(|e| body_error("syncing the body files", e))
}

/// [`Bodies::delete_retired`] after a durable commit; a failure is logged, not returned (the
/// commit stands, and the next start deletes what no commit references).
pub(crate) fn delete_retired(bodies: &Bodies) {
    if let Err(e) = bodies.delete_retired() {
        tracing::warn!(error = %e, "emptied body files not deleted (the next start deletes them)");
    }
}

/// A stored reference, decoded; a row of another length is a corrupt index.
pub(crate) fn decode_ref(key: &str, bytes: &[u8]) -> Result<BodyRef, IndexError> {
    BodyRef::decode(bytes)
        .ok_or_else(|| IndexError::Corrupt(format!("the body reference of {key} does not decode")))
}

/// The bytes of the body `refs` names for `key` (`None` when it names none), read through
/// `reader`. Errors: the store's; a body file that is gone or whose bytes fail their CRC.
pub(crate) fn read(
    refs: &impl ReadableTable<&'static str, &'static [u8]>,
    reader: &BodyReader,
    key: &str,
) -> Result<Option<Vec<u8>>, IndexError> {
    let Some(value) = refs.get(key).map_err(db)? else {
        return Ok(None);
    };
    let body = decode_ref(key, value.value())?;
    reader
        .read(body)
        .map(Some)
        .map_err(|e| body_error(&format!("the body of {key}"), e))
}

/// The position and live files the last commit of `txn`'s database recorded (what
/// [`Bodies::open`] needs).
pub(crate) fn recorded(txn: &WriteTransaction) -> Result<(Position, Vec<u32>), IndexError> {
    let meta = txn.open_table(META).map_err(db)?;
    let get = |key: &str| -> Result<u64, IndexError> {
        Ok(meta.get(key).map_err(db)?.map_or(0, |v| v.value()))
    };
    let position = Position {
        file: get(ACTIVE_FILE)? as u32,
        end: get(ACTIVE_END)?,
    };
    let live = txn.open_table(BODY_FILES).map_err(db)?;
    let mut files = Vec::new();
    for row in live.iter().map_err(db)? {
        files.push(row.map_err(db)?.0.value());
    }
    Ok((position, files))
}

/// The log segments `txn`'s database references bodies in, as of its last commit.
pub(crate) fn log_segments_in_use(
    table: &impl ReadableTable<u64, u64>,
) -> Result<BTreeSet<u64>, IndexError> {
    let mut segments = BTreeSet::new();
    for row in table.iter().map_err(db)? {
        segments.insert(row.map_err(db)?.0.value());
    }
    Ok(segments)
}

/// A file's live bytes after `delta` (`now`: its row, `None` for none). Errors: more removed
/// than it holds (a corrupt index; `what` names the file).
fn live_after(now: Option<u64>, delta: i64, what: impl Fn() -> String) -> Result<u64, IndexError> {
    let now = now.unwrap_or(0);
    now.checked_add_signed(delta).ok_or_else(|| {
        IndexError::Corrupt(format!(
            "{}: {now} live bytes, and a body of {} removed",
            what(),
            -delta
        ))
    })
}

/// Writes and frees bodies within one write transaction, keeping `body_files` and
/// `log_bodies` in step.
pub(crate) struct BodyWriter<'t> {
    bodies: &'t Bodies,
    live: Table<'t, u32, u64>,
    log_live: Table<'t, u64, u64>,
    /// Files whose last live body went in this transaction (not the active one).
    retired: Vec<u32>,
}

impl<'t> BodyWriter<'t> {
    /// Opens `body_files` in `txn`.
    pub(crate) fn open(txn: &'t WriteTransaction, bodies: &'t Bodies) -> Result<Self, IndexError> {
        Ok(BodyWriter {
            bodies,
            live: txn.open_table(BODY_FILES).map_err(db)?,
            log_live: txn.open_table(LOG_BODIES).map_err(db)?,
            retired: Vec::new(),
        })
    }

    fn add_live(&mut self, home: Home, delta: i64) -> Result<(), IndexError> {
        if delta == 0 {
            return Ok(());
        }
        match home {
            Home::Log(segment) => {
                // The log decides when a segment goes, from these rows at a durable commit.
                let now = self.log_live.get(segment).map_err(db)?.map(|v| v.value());
                match live_after(now, delta, || format!("raft log segment {segment}"))? {
                    0 => self.log_live.remove(segment).map(drop),
                    after => self.log_live.insert(segment, after).map(drop),
                }
                .map_err(db)
            }
            Home::File(file) => {
                let now = self.live.get(file).map_err(db)?.map(|v| v.value());
                match live_after(now, delta, || format!("body file {file}"))? {
                    0 => {
                        self.live.remove(file).map_err(db)?;
                        if file != self.bodies.position().file {
                            self.retired.push(file);
                        }
                    }
                    after => {
                        self.live.insert(file, after).map_err(db)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Stores `bytes` as `key`'s body in `refs`, freeing the body it replaces.
    pub(crate) fn put(
        &mut self,
        refs: &mut Table<'_, &'static str, &'static [u8]>,
        key: &str,
        bytes: &[u8],
    ) -> Result<(), IndexError> {
        self.put_from(refs, key, bytes, None)
    }

    /// [`BodyWriter::put`] of a body that came in log entry `entry`: referenced where the
    /// entry holds it, when it can be ([`Bodies::locate`]), else written to a body file.
    pub(crate) fn put_from(
        &mut self,
        refs: &mut Table<'_, &'static str, &'static [u8]>,
        key: &str,
        bytes: &[u8],
        entry: Option<InLog<'_>>,
    ) -> Result<(), IndexError> {
        self.remove(refs, key)?;
        if let Some(body) = self.bodies.locate(bytes, entry) {
            refs.insert(key, body.encode().as_slice()).map_err(db)?;
            return self.add_live(body.home, i64::from(body.len));
        }
        let before = self.bodies.position().file;
        let body = self
            .bodies
            .append(bytes)
            .map_err(|e| body_error(&format!("writing the body of {key}"), e))?;
        if body.home != Home::File(before) && self.live.get(before).map_err(db)?.is_none() {
            // The file it filled has no live body left.
            self.retired.push(before);
        }
        refs.insert(key, body.encode().as_slice()).map_err(db)?;
        self.add_live(body.home, i64::from(body.len))
    }

    /// Removes `key`'s body from `refs` (nothing when it has none).
    pub(crate) fn remove(
        &mut self,
        refs: &mut Table<'_, &'static str, &'static [u8]>,
        key: &str,
    ) -> Result<(), IndexError> {
        let Some(old) = refs.remove(key).map_err(db)? else {
            return Ok(());
        };
        let old = decode_ref(key, old.value())?;
        self.add_live(old.home, -i64::from(old.len))
    }

    /// The body of `key` in `refs` (read under the writer: no file is deleted meanwhile).
    pub(crate) fn read(
        &self,
        refs: &Table<'_, &'static str, &'static [u8]>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, IndexError> {
        read(refs, &self.bodies.reader(), key)
    }

    /// Records the active file and its end in `meta`, for [`Bodies::open`] after this commit.
    pub(crate) fn record(
        &mut self,
        meta: &mut Table<'_, &'static str, u64>,
    ) -> Result<(), IndexError> {
        let position = self.bodies.position();
        meta.insert(ACTIVE_FILE, u64::from(position.file))
            .map_err(db)?;
        meta.insert(ACTIVE_END, position.end).map_err(db)?;
        Ok(())
    }

    /// The files this transaction emptied so far: once it has committed, hand them to
    /// [`Bodies::retire`] (never before: an aborted transaction freed nothing).
    pub(crate) fn take_retired(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.retired)
    }

    /// Forgets every file's live bytes (a restore replaces every body): the files that were
    /// live are retired, and no log segment is referenced any more.
    pub(crate) fn clear(&mut self) -> Result<(), IndexError> {
        self.log_live.retain(|_, _| false).map_err(db)?;
        let mut files = Vec::new();
        for row in self.live.iter().map_err(db)? {
            files.push(row.map_err(db)?.0.value());
        }
        for file in files {
            self.live.remove(file).map_err(db)?;
            if file != self.bodies.position().file {
                self.retired.push(file);
            }
        }
        Ok(())
    }
}

/// Moves the bodies of an index from before body files (`specs`, `results`) into `bodies`,
/// in `txn`; returns how many moved. Nothing for an index without those tables. (It empties
/// no file: nothing to retire.)
pub(crate) fn move_inline(txn: &WriteTransaction, bodies: &Bodies) -> Result<u64, IndexError> {
    let mut moved = 0;
    let mut writer = BodyWriter::open(txn, bodies)?;
    for (inline, refs) in [(INLINE_SPECS, SPECS), (INLINE_RESULTS, RESULTS)] {
        match txn.open_table(inline) {
            Ok(table) => {
                let mut refs = txn.open_table(refs).map_err(db)?;
                for row in table.iter().map_err(db)? {
                    let (key, value) = row.map_err(db)?;
                    writer.put(&mut refs, key.value(), value.value())?;
                    moved += 1;
                }
            }
            Err(redb::TableError::TableDoesNotExist(_)) => continue,
            Err(e) => return Err(db(e)),
        }
        txn.delete_table(inline).map_err(db)?;
    }
    let mut meta = txn.open_table(META).map_err(db)?;
    writer.record(&mut meta)?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use redb::ReadableDatabase;
    use symcluster_proto::cluster::v1 as pb;
    use symcluster_proto::v1;

    use super::super::apply::Applier;
    use super::super::bodies::{FILE_BYTES, Home, InLog};
    use super::super::{Index, command};
    use super::*;

    /// Applies `commands` in one transaction, durable, as a master does at a checkpoint.
    fn apply(index: &Index, commands: &[pb::Command], at: u64) {
        let txn = index.database().begin_write().unwrap();
        let retired = {
            let mut applier = Applier::new(&txn, index.bodies()).unwrap();
            for c in commands {
                applier.apply(c).unwrap();
            }
            applier.set_applied(at, 1).unwrap();
            applier.take_retired()
        };
        index.bodies().sync().unwrap();
        txn.commit().unwrap();
        index.bodies().retire(retired);
        index.bodies().delete_retired().unwrap();
    }

    fn body_files(index_path: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(index_path.with_extension("bodies"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn live(index: &Index) -> Vec<(u32, u64)> {
        let read = index.database().begin_read().unwrap();
        let table = read.open_table(BODY_FILES).unwrap();
        table
            .iter()
            .unwrap()
            .map(|r| {
                let (k, v) = r.unwrap();
                (k.value(), v.value())
            })
            .collect()
    }

    #[test]
    fn bodies_live_in_files_and_a_file_goes_when_its_last_body_is_purged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        let index = Index::open_file(&path).unwrap();
        // Two specs of more than half a file each: b's opens file 1.
        let spec = |fill: u8| vec![fill; (FILE_BYTES / 2 + 1) as usize];
        let (a, b) = (spec(1), spec(2));
        apply(
            &index,
            &[
                command::submit("p/a", v1::JobKind::Native, a.clone(), "k", 1),
                command::submit("p/b", v1::JobKind::Native, b.clone(), "k", 2),
                command::lease("p/a", "w", "", 1, 3),
                command::complete("p/a", 1, "w", b"{\"a\":1}".to_vec(), None, 4),
            ],
            4,
        );
        assert_eq!(index.spec("p/a").unwrap().unwrap(), a);
        assert_eq!(index.spec("p/b").unwrap().unwrap(), b);
        let result = index.job("p/a", true).unwrap().unwrap().result_json;
        assert_eq!(result.as_deref(), Some(&b"{\"a\":1}"[..]));
        assert_eq!(body_files(&path), ["0000000000.body", "0000000001.body"]);
        let result_len = index
            .job_with("p/a", super::super::ResultForm::Zstd)
            .unwrap()
            .unwrap()
            .result_zstd
            .unwrap()
            .len() as u64;
        assert_eq!(
            live(&index),
            [(0, a.len() as u64), (1, b.len() as u64 + result_len)]
        );
        let digest = index.digest().unwrap();

        // Purging a empties file 0 (its spec was all it held): deleted after the commit.
        apply(&index, &[command::purge(5, 5, 0)], 5);
        assert_eq!(index.job("p/a", false).unwrap(), None);
        assert_eq!(body_files(&path), ["0000000001.body"]);
        assert_eq!(live(&index), [(1, b.len() as u64)]);
        assert_eq!(index.spec("p/b").unwrap().unwrap(), b);
        assert_ne!(index.digest().unwrap().sha256, digest.sha256);

        // Reopened, it reads the same.
        let before = index.digest().unwrap();
        drop(index);
        let index = Index::open_file(&path).unwrap();
        assert_eq!(index.spec("p/b").unwrap().unwrap(), b);
        assert_eq!(index.digest().unwrap(), before);
    }

    #[test]
    fn bodies_written_after_the_last_commit_are_cut_when_the_index_opens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        let index = Index::open_file(&path).unwrap();
        apply(
            &index,
            &[command::submit(
                "p/a",
                v1::JobKind::Native,
                vec![7; 100],
                "k",
                1,
            )],
            1,
        );
        // A transaction that wrote a body but never committed (a crash before its commit).
        {
            let txn = index.database().begin_write().unwrap();
            let mut applier = Applier::new(&txn, index.bodies()).unwrap();
            applier
                .apply(&command::submit(
                    "p/b",
                    v1::JobKind::Native,
                    vec![8; 50],
                    "k",
                    2,
                ))
                .unwrap();
            applier.set_applied(2, 1).unwrap();
            drop(applier);
            txn.abort().unwrap();
        }
        let file = path.with_extension("bodies").join("0000000000.body");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 150);
        drop(index);
        let index = Index::open_file(&path).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().len(), 100);
        assert_eq!(index.spec("p/a").unwrap().unwrap(), vec![7; 100]);
        assert_eq!(index.spec("p/b").unwrap(), None);
    }

    #[test]
    fn an_index_with_bodies_in_redb_moves_them_to_files_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.redb");
        let reference = dir.path().join("reference.redb");
        let commands = [
            command::submit("p/a", v1::JobKind::Native, vec![7; 100], "k", 1),
            command::lease("p/a", "w", "", 1, 2),
            command::complete("p/a", 1, "w", b"{}".to_vec(), None, 3),
        ];
        // The same jobs applied by this version ...
        let expected = {
            let index = Index::open_file(&reference).unwrap();
            apply(&index, &commands, 3);
            index.digest().unwrap()
        };
        // ... and by one that kept bodies in `specs` and `results`: moved, same digest.
        {
            let index = Index::open_file(&path).unwrap();
            apply(&index, &commands, 3);
            let txn = index.database().begin_write().unwrap();
            for (refs, inline) in [(SPECS, INLINE_SPECS), (RESULTS, INLINE_RESULTS)] {
                let mut refs = txn.open_table(refs).unwrap();
                let mut inline = txn.open_table(inline).unwrap();
                let row = refs.remove("p/a").unwrap().unwrap();
                let body = decode_ref("p/a", row.value()).unwrap();
                drop(row);
                let bytes = index.bodies().read(body).unwrap();
                inline.insert("p/a", bytes.as_slice()).unwrap();
            }
            txn.open_table(BODY_FILES).unwrap().remove(0).unwrap();
            txn.commit().unwrap();
        }
        let index = Index::open_file(&path).unwrap();
        assert_eq!(index.digest().unwrap(), expected);
        assert_eq!(index.spec("p/a").unwrap().unwrap(), vec![7; 100]);
        let read = index.database().begin_read().unwrap();
        assert!(
            read.open_table(INLINE_SPECS).is_err(),
            "the old table is gone"
        );
    }

    /// Writes each command's encoding into `segment` (a stand-in for a Raft log segment, file
    /// number `sequence`) as the log would, and applies it from there in one durable
    /// transaction.
    fn apply_from_log(
        index: &Index,
        segment: &std::fs::File,
        sequence: u64,
        commands: &[pb::Command],
        at: u64,
    ) {
        use std::os::unix::fs::FileExt;
        let txn = index.database().begin_write().unwrap();
        {
            let mut applier = Applier::new(&txn, index.bodies()).unwrap();
            for c in commands {
                let data = command::encode(c);
                let offset = segment.metadata().unwrap().len() + 9;
                segment.write_all_at(&[0; 9], offset - 9).unwrap();
                segment.write_all_at(&data, offset).unwrap();
                let entry = InLog {
                    data: &data,
                    segment: sequence,
                    offset,
                };
                applier.apply_from(c, Some(entry)).unwrap();
            }
            applier.set_applied(at, 1).unwrap();
        }
        index.bodies().sync().unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn bodies_in_the_log_are_read_from_it_and_hash_as_bodies_in_files_do() {
        let dir = tempfile::tempdir().unwrap();
        let report = vec![5u8; 20_000];
        let commands = [
            command::submit("p/a", v1::JobKind::Native, report.clone(), "k", 1),
            command::lease("p/a", "w", "", 1, 2),
            command::complete("p/a", 1, "w", b"{\"frames\":[]}".to_vec(), None, 3),
        ];
        let in_files = Index::open_file(&dir.path().join("files.redb")).unwrap();
        apply(&in_files, &commands, 3);

        let path = dir.path().join("log.redb");
        let segment_path = dir.path().join("00000000000000000009.log");
        let segment = std::sync::Arc::new(std::fs::File::create_new(&segment_path).unwrap());
        let files = crate::open_files::OpenFiles::default();
        files.insert(
            9,
            std::sync::Arc::new(std::fs::File::open(&segment_path).unwrap()),
        );
        let in_log = Index::open_file(&path).unwrap();
        in_log.bodies().attach_log(files.clone());
        apply_from_log(&in_log, &segment, 9, &commands, 3);

        // Both bodies are in the log, none in a body file; they read back as submitted.
        let read = in_log.database().begin_read().unwrap();
        for refs in [SPECS, RESULTS] {
            let table = read.open_table(refs).unwrap();
            let row = table.get("p/a").unwrap().unwrap();
            assert_eq!(decode_ref("p/a", row.value()).unwrap().home, Home::Log(9));
        }
        drop(read);
        assert_eq!(in_log.bodies().position().end, 0);
        assert_eq!(in_log.spec("p/a").unwrap().unwrap(), report);
        assert_eq!(
            in_log
                .job("p/a", true)
                .unwrap()
                .unwrap()
                .result_json
                .as_deref(),
            Some(&b"{\"frames\":[]}"[..])
        );
        assert_eq!(in_log.log_segments_in_use().unwrap(), [9].into());
        // The same index, whatever holds its bodies: masters compare digests.
        assert_eq!(in_log.digest().unwrap(), in_files.digest().unwrap());

        // A snapshot of it restores with every body in the restored index's own files.
        let mut stream = Vec::new();
        in_log
            .snapshot_source()
            .unwrap()
            .write_to(&mut stream)
            .unwrap();
        let restored = Index::open_file(&dir.path().join("restored.redb")).unwrap();
        restored.restore_from(&mut stream.as_slice()).unwrap();
        assert_eq!(restored.digest().unwrap(), in_files.digest().unwrap());
        assert!(restored.log_segments_in_use().unwrap().is_empty());

        // Purged, it references nothing in the log any more: the log may delete the segment.
        apply_from_log(&in_log, &segment, 9, &[command::purge(5, 5, 0)], 4);
        assert_eq!(in_log.job("p/a", false).unwrap(), None);
        assert!(in_log.log_segments_in_use().unwrap().is_empty());

        // A body in a segment the log no longer holds is an error naming it, not a panic.
        apply_from_log(
            &in_log,
            &segment,
            9,
            &[command::submit(
                "p/b",
                v1::JobKind::Native,
                report.clone(),
                "k",
                6,
            )],
            5,
        );
        files.remove(9);
        let error = in_log.spec("p/b").unwrap_err().to_string();
        assert!(
            error.contains("raft log segment 9: not open, but the index references a body in it"),
            "{error}"
        );
    }
}

//! Raft's log on disk as append-only segment files: `<data dir>/raft-log/<sequence>.log`.
//!
//! A segment is a sequence of records, each `len: u32 LE` (bytes of `kind` + payload),
//! `crc32: u32 LE` (CRC-32/ISO-HDLC of `kind` + payload, the `crc32fast` crate), `kind: u8`,
//! then the payload, a prost message of raft-rs's `eraftpb`:
//!
//! | kind | payload | replay |
//! |---|---|---|
//! | 1 | `Entry` | replaces the entry at its index and drops every later one (a new leader's conflicting suffix) |
//! | 2 | `HardState` | the last one wins |
//! | 3 | `SnapshotMetadata` | the log starts after its index (compaction) |
//! | 4 | `SnapshotMetadata` | every entry is dropped and the log starts after its index (an installed snapshot) |
//!
//! One Ready is one `write` of its records, fsynced (`fdatasync`) when raft-rs asks
//! ([`SegmentLog::flush`]): appending costs what the bytes cost, where a B-tree table rewrote
//! pages for each entry and again to remove it at compaction.
//!
//! Writes: the active segment is written with direct I/O (`O_DIRECT`), in whole 4 KiB blocks
//! from an in-memory copy of the segment ([`crate::open_files::Written`], which also serves
//! every read of it), so no page of the page cache is filled, copied or written back for an
//! append; the last block, part data and part zeros, is written again with the next Ready's
//! records (the same bytes where data was: a sector a crash tears holds either copy). A
//! segment made ahead ([`super::next_segment`]) is zeros to its end, so such a write changes
//! no size and allocates no block: replay ends a segment at zeros that run to the end of its
//! file, and a closed segment is cut to its last record before the next one starts. A
//! file system that refuses direct I/O gets the same writes through the page cache. A segment
//! grows to
//! [`SEGMENT_BYTES`], then the next one starts with the current HardState and compaction point
//! ([`SegmentLog::rotate`]); whole segments are deleted once compaction has passed all their
//! entries ([`SegmentLog::remove_through`], oldest first, so that a crash between two deletions
//! leaves a suffix of the segments). Only the last segment can end in a torn record (a crash
//! during an append that was never acknowledged): replay stops there and cuts the file. So does
//! a bad record in the last segment that holds a zeroed 512-byte sector (a page of an unsynced
//! write that a power loss left unwritten while later pages of it reached the disk: etcd's
//! `wal` checks for torn entries the same way; no fsync completed after such a write, so
//! nothing from it on was acknowledged). Any other bad record followed by more data is
//! corruption, reported, never cut.
//! The layout follows the write-ahead logs of etcd's `wal` package and tikv's raft-engine,
//! reduced to one Raft group.
//!
//! The log is also the home of the job bodies its entries carry (a report in a submit, a
//! result in a completion): the index references their bytes where the entry's record holds
//! them ([`EntryAt::data`]) instead of writing them a second time (`index/bodies.rs`). Every
//! segment is held open for those reads ([`SegmentLog::files`]). A segment that compaction
//! passed while the index still references bodies in it is not deleted but renamed
//! `<sequence>.bodies` ([`SegmentLog::remove_through`]): it is never replayed again, only read,
//! and goes once the index references nothing in it ([`SegmentLog::drop_unreferenced`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use prost011::Message as _;
use raft::prelude::{Entry, HardState, SnapshotMetadata};

use super::next_segment::{self, NextSegment};
use crate::failpoints;
use crate::open_files::OpenFiles;

/// A segment is closed and the next one started once it holds this many bytes.
pub const SEGMENT_BYTES: u64 = 64 << 20;

const KIND_ENTRY: u8 = 1;
const KIND_HARD_STATE: u8 = 2;
const KIND_COMPACTED: u8 = 3;
const KIND_RESET: u8 = 4;
/// Capacity the write buffer keeps after a flush, bytes; a larger Ready's buffer is freed.
const RETAINED_BUFFER_BYTES: usize = 1 << 20;
/// `len` + `crc32`.
const HEADER_BYTES: usize = 8;
/// What a record adds to its payload: the header and the kind byte.
pub const RECORD_OVERHEAD: u32 = HEADER_BYTES as u32 + 1;
/// A record longer than this is corruption, not data (raft-rs entries are bounded by the
/// proposal size, far below).
const MAX_RECORD_BYTES: u32 = 1 << 30;

/// Errors of the segment log: the file, and what was done to it.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A read, write, fsync or delete failed.
    #[error("raft log {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: io::Error,
    },
    /// A record before the last segment's tail does not check or decode.
    #[error("raft log {}: {what} at byte {offset}", path.display())]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the record starts.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> LogError + '_ {
    move |source| LogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where an entry's record is: read back with [`SegmentLog::read_entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryAt {
    /// The entry's term.
    pub term: u64,
    /// The segment's sequence number.
    pub segment: u64,
    /// Where the record starts in the segment, bytes.
    pub offset: u64,
    /// The record's length (header included), bytes.
    pub len: u32,
    /// Where the entry's `data` (the command's bytes) starts, bytes from the record's start;
    /// 0 for an entry without data.
    pub data: u32,
}

/// What replaying the segments found.
#[derive(Debug, Default)]
pub struct Replayed {
    /// The last HardState written.
    pub hard_state: Option<HardState>,
    /// The last compaction point (or installed snapshot).
    pub compacted: Option<SnapshotMetadata>,
    /// The entries after the compaction point, by index: where each is (the entries stay on
    /// disk).
    pub entries: BTreeMap<u64, EntryAt>,
}

struct Segment {
    sequence: u64,
    path: PathBuf,
    /// Highest entry index written into it (0: none).
    max_index: u64,
}

/// The open segment log (see the module documentation).
pub struct SegmentLog {
    dir: PathBuf,
    /// Closed segments, oldest first.
    closed: Vec<Segment>,
    active: Segment,
    /// The active segment, open for writes.
    file: SegmentFile,
    /// Where the active segment's last record ends (its file may go on in zeros).
    bytes: u64,
    next: NextSegment,
    /// Records not yet written.
    buffer: Vec<u8>,
    buffered_max_index: u64,
    /// Every segment, opened for reading (the kept ones too), for the index's body reads.
    files: OpenFiles,
    /// Segments compaction passed that hold bodies the index references: `.bodies` files.
    kept: BTreeSet<u64>,
}

/// The active segment's file, opened for direct writes where the file system takes them.
struct SegmentFile {
    file: File,
    path: PathBuf,
    direct: bool,
}

impl SegmentFile {
    /// Opens `path` (created when `create`, failing if it exists) for writes: direct I/O, or
    /// the page cache where the file system refuses it.
    fn open(path: &Path, create: bool) -> Result<Self, LogError> {
        if create {
            OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
        }
        let direct = next_segment::open_direct(path, false).map_err(io_err(path))?;
        let (file, direct) = match direct {
            Some(file) => (file, true),
            None => (Self::buffered(path)?, false),
        };
        Ok(SegmentFile {
            file,
            path: path.to_path_buf(),
            direct,
        })
    }

    fn buffered(path: &Path) -> Result<File, LogError> {
        OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(io_err(path))
    }

    /// Writes `blocks` at `offset`; a direct write the file system refuses (`EINVAL`: an
    /// alignment it wants larger) is made through the page cache, and so is every later one.
    fn write_at(&mut self, blocks: &[u8], offset: u64) -> Result<(), LogError> {
        match self.file.write_all_at(blocks, offset) {
            Err(e) if self.direct && e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::warn!(path = %self.path.display(), error = %e, "the raft log's direct writes are refused; written through the page cache");
                self.file = Self::buffered(&self.path)?;
                self.direct = false;
                self.file
                    .write_all_at(blocks, offset)
                    .map_err(io_err(&self.path))
            }
            other => other.map_err(io_err(&self.path)),
        }
    }
}

fn segment_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.log"))
}

fn kept_path(dir: &Path, sequence: u64) -> PathBuf {
    dir.join(format!("{sequence:020}.bodies"))
}

/// Where `entry`'s data starts in `payload`, its encoding (0 when it has none). prost writes
/// `data` (field 4) after `entry_type`, `term` and `index` and before `sync_log` (5) and
/// `context` (6), whatever the order the two take: the data ends where those two fields'
/// bytes begin. Checked against the bytes; a mismatch (an encoder that differs) is 0, and the
/// index then writes the bodies of the entry to its own files.
fn data_offset(entry: &Entry, payload: &[u8]) -> usize {
    if entry.data.is_empty() {
        return 0;
    }
    let varint_len = |n: usize| prost011::encoding::encoded_len_varint(n as u64);
    let context = if entry.context.is_empty() {
        0
    } else {
        1 + varint_len(entry.context.len()) + entry.context.len()
    };
    let sync_log = if entry.sync_log { 2 } else { 0 };
    let Some(start) = payload
        .len()
        .checked_sub(context + sync_log + entry.data.len())
    else {
        return 0;
    };
    if payload[start..start + entry.data.len()] == entry.data[..] {
        start
    } else {
        0
    }
}

/// [`data_offset`] from the record's start (0: no data).
fn data_at(entry: &Entry, payload: &[u8]) -> u32 {
    match data_offset(entry, payload) {
        0 => 0,
        at => (HEADER_BYTES + 1 + at) as u32,
    }
}

fn open_read(path: &Path) -> Result<Arc<File>, LogError> {
    File::open(path).map(Arc::new).map_err(io_err(path))
}

/// fsyncs directory `dir` (its entries: files created, renamed or deleted in it).
pub(super) fn sync_dir(dir: &Path) -> Result<(), LogError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

impl SegmentLog {
    /// Opens the log in `dir` (created when missing) and replays it. Errors: the file system's,
    /// and [`LogError::Corrupt`] for a bad record anywhere but at the end of the last segment.
    pub fn open(dir: &Path) -> Result<(Self, Replayed), LogError> {
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(io_err(dir))?;
            // The new directory's own entry must survive a power loss with what it will hold.
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
        }
        let mut sequences = Vec::new();
        let files = OpenFiles::default();
        let mut kept = BTreeSet::new();
        for entry in fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            let number = |suffix| {
                name.strip_suffix(suffix)
                    .and_then(|n| n.parse::<u64>().ok())
            };
            if let Some(sequence) = number(".log") {
                sequences.push(sequence);
            } else if let Some(sequence) = number(".bodies") {
                // Kept for its bodies only: read, never replayed.
                files.insert(sequence, open_read(&entry.path())?);
                kept.insert(sequence);
            }
        }
        sequences.sort_unstable();
        let mut replayed = Replayed::default();
        let mut closed = Vec::new();
        let count = sequences.len();
        let mut last_bytes = Vec::new();
        for (i, sequence) in sequences.into_iter().enumerate() {
            let path = segment_path(dir, sequence);
            let (max_index, bytes) =
                replay_segment(&path, sequence, i + 1 == count, &mut replayed)?;
            last_bytes = bytes;
            files.insert(sequence, open_read(&path)?);
            closed.push(Segment {
                sequence,
                path,
                max_index,
            });
        }
        // Entries left after the compaction point must follow it without a gap.
        let first = replayed
            .compacted
            .as_ref()
            .map_or(0, |c| c.index)
            .saturating_add(1);
        for (expected, index) in (first..).zip(replayed.entries.keys()) {
            if *index != expected {
                return Err(LogError::Corrupt {
                    path: dir.to_path_buf(),
                    offset: 0,
                    what: format!("entry {expected} is missing (the log jumps to {index})"),
                });
            }
        }
        let (active, file) = match closed.pop() {
            Some(last) => {
                let file = SegmentFile::open(&last.path, false)?;
                // Replay read it through the page cache; from now on it is read from memory.
                // SAFETY: a valid descriptor; advice only.
                unsafe {
                    libc::posix_fadvise(file.file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                (last, file)
            }
            None => {
                // After the kept segments: a sequence number is never used twice.
                let sequence = kept.last().map_or(1, |k| k + 1);
                let path = segment_path(dir, sequence);
                let file = create_segment(dir, &path)?;
                files.insert(sequence, open_read(&path)?);
                (
                    Segment {
                        sequence,
                        path,
                        max_index: 0,
                    },
                    file,
                )
            }
        };
        let bytes = last_bytes.len() as u64;
        files.written().start(active.sequence, &last_bytes);
        drop(last_bytes);
        let next = NextSegment::start(dir, SEGMENT_BYTES);
        if bytes >= next_segment::WANT_AFTER {
            next.want();
        }
        Ok((
            SegmentLog {
                dir: dir.to_path_buf(),
                closed,
                active,
                file,
                bytes,
                next,
                buffer: Vec::new(),
                buffered_max_index: 0,
                files,
                kept,
            },
            replayed,
        ))
    }

    /// Every segment, open for reading, as it changes: the index reads the bodies it
    /// references through it.
    pub fn files(&self) -> OpenFiles {
        self.files.clone()
    }

    /// Queues a record; returns where it will start in the active segment and its length.
    fn push(&mut self, kind: u8, payload: &impl prost011::Message) -> (u64, u32) {
        let offset = self.bytes + self.buffer.len() as u64;
        let len = 1 + payload.encoded_len();
        let start = self.buffer.len();
        self.buffer.extend_from_slice(&(len as u32).to_le_bytes());
        self.buffer.extend_from_slice(&[0; 4]);
        self.buffer.push(kind);
        payload
            .encode(&mut self.buffer)
            .expect("a Vec grows as needed");
        let crc = crc32fast::hash(&self.buffer[start + HEADER_BYTES..]);
        self.buffer[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
        (offset, (HEADER_BYTES + len) as u32)
    }

    /// Queues `entry` for the next [`Self::flush`]; returns where its record will be.
    pub fn push_entry(&mut self, entry: &Entry) -> EntryAt {
        let start = self.buffer.len();
        let (offset, len) = self.push(KIND_ENTRY, entry);
        self.buffered_max_index = self.buffered_max_index.max(entry.index);
        let payload = &self.buffer[start + HEADER_BYTES + 1..];
        EntryAt {
            term: entry.term,
            segment: self.active.sequence,
            offset,
            len,
            data: data_at(entry, payload),
        }
    }

    /// Reads the entries whose records are at `at` (written, flushed, in segments not deleted),
    /// in order: the active segment's from memory, the others' from their files. Errors: the file system's, and
    /// [`LogError::Corrupt`] for a record that does not check or decode.
    pub fn read_entries(&self, at: &[EntryAt]) -> Result<Vec<Entry>, LogError> {
        let mut out = Vec::with_capacity(at.len());
        let files = self.files.current();
        let mut bytes = Vec::new();
        for place in at {
            let path = segment_path(&self.dir, place.segment);
            bytes.resize(place.len as usize, 0);
            files
                .read_exact_at(place.segment, &mut bytes, place.offset)
                .map_err(io_err(&path))?;
            let bad = |what: String| LogError::Corrupt {
                path: path.clone(),
                offset: place.offset,
                what,
            };
            let (kind, payload, _) = read_record(&bytes).map_err(|what| bad(what.into()))?;
            if kind != KIND_ENTRY {
                return Err(bad(format!("record of kind {kind} where an entry was")));
            }
            out.push(
                Entry::decode(payload).map_err(|e| bad(format!("entry does not decode: {e}")))?,
            );
        }
        Ok(out)
    }

    /// Queues `hs` for the next [`Self::flush`].
    pub fn push_hard_state(&mut self, hs: &HardState) {
        self.push(KIND_HARD_STATE, hs);
    }

    /// Queues a compaction point (or an installed snapshot's metadata).
    pub fn push_compacted(&mut self, meta: &SnapshotMetadata) {
        self.push(KIND_COMPACTED, meta);
    }

    /// Writes what was queued in one `write` (whole blocks from the last one the segment's
    /// records reach into, zeros after them), then `fdatasync`s when `sync`. Errors: the file
    /// system's; the log must not be used after one (the node stops).
    pub fn flush(&mut self, sync: bool) -> Result<(), LogError> {
        if !self.buffer.is_empty() {
            let written = self.files.written();
            written.append(&self.buffer);
            let file = &mut self.file;
            written.write_blocks(self.bytes, |offset, blocks| file.write_at(blocks, offset))?;
            self.bytes += self.buffer.len() as u64;
            if self.bytes >= next_segment::WANT_AFTER {
                self.next.want();
            }
            self.buffer.clear();
            // One Ready of large entries must not keep its buffer's memory for good.
            self.buffer.shrink_to(RETAINED_BUFFER_BYTES);
            self.active.max_index = self.active.max_index.max(self.buffered_max_index);
            self.buffered_max_index = 0;
        }
        if sync {
            failpoints::point!(failpoints::LOG_FSYNC_BEFORE);
            self.file
                .file
                .sync_data()
                .map_err(io_err(&self.active.path))?;
            failpoints::point!(failpoints::LOG_FSYNC_AFTER);
        }
        Ok(())
    }

    /// Whether the active segment is full ([`SEGMENT_BYTES`]).
    pub fn should_rotate(&self) -> bool {
        self.bytes >= SEGMENT_BYTES
    }

    /// Closes the active segment (fsynced) and starts the next one with `hard_state` and
    /// `compacted` (fsynced), so that older segments are never needed for them.
    pub fn rotate(
        &mut self,
        hard_state: &HardState,
        compacted: &SnapshotMetadata,
    ) -> Result<(), LogError> {
        self.start_segment(hard_state, KIND_COMPACTED, compacted)
    }

    fn start_segment(
        &mut self,
        hard_state: &HardState,
        kind: u8,
        compacted: &SnapshotMetadata,
    ) -> Result<(), LogError> {
        self.flush(true)?;
        // A closed segment ends at its last record, not in zeros (replay takes zeros for the
        // end of the last segment only).
        let len = self
            .file
            .file
            .metadata()
            .map_err(io_err(&self.active.path))?
            .len();
        if len > self.bytes {
            self.file
                .file
                .set_len(self.bytes)
                .and_then(|()| self.file.file.sync_all())
                .map_err(io_err(&self.active.path))?;
        }
        let sequence = self.active.sequence + 1;
        let path = segment_path(&self.dir, sequence);
        let file = match self.next.take() {
            Some(file) => {
                let made = self.dir.join(next_segment::FILE_NAME);
                fs::rename(&made, &path).map_err(io_err(&made))?;
                sync_dir(&self.dir)?;
                SegmentFile {
                    file,
                    path: path.clone(),
                    direct: true,
                }
            }
            None => create_segment(&self.dir, &path)?,
        };
        self.files.insert(sequence, open_read(&path)?);
        self.files.written().start(sequence, &[]);
        let old = std::mem::replace(
            &mut self.active,
            Segment {
                sequence,
                path,
                max_index: 0,
            },
        );
        self.closed.push(old);
        self.file = file;
        self.bytes = 0;
        self.push_hard_state(hard_state);
        self.push(kind, compacted);
        self.flush(true)
    }

    /// Deletes the oldest closed segments while their entries are all at or below `index` (the
    /// compaction point, already written and fsynced); one that holds bodies the index
    /// references (`in_use`, by sequence, as of a durable commit of the index) is renamed
    /// `.bodies` instead and kept for reads. Stops at the first one still needed: a newer
    /// segment may have rewritten an older one's tail, and deleting it alone would bring that
    /// tail back at replay (a kept segment is not replayed).
    pub fn remove_through(&mut self, index: u64, in_use: &BTreeSet<u64>) -> Result<(), LogError> {
        let passed = self
            .closed
            .iter()
            .take_while(|segment| segment.max_index <= index)
            .count();
        for segment in self.closed.drain(..passed) {
            if in_use.contains(&segment.sequence) {
                let kept = kept_path(&self.dir, segment.sequence);
                fs::rename(&segment.path, &kept).map_err(io_err(&segment.path))?;
                self.kept.insert(segment.sequence);
            } else {
                fs::remove_file(&segment.path).map_err(io_err(&segment.path))?;
                self.files.remove(segment.sequence);
            }
        }
        if passed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Deletes the kept segments (`.bodies`) the index no longer references (`in_use`, as of
    /// a durable commit of the index).
    pub fn drop_unreferenced(&mut self, in_use: &BTreeSet<u64>) -> Result<(), LogError> {
        let gone: Vec<u64> = self.kept.difference(in_use).copied().collect();
        for sequence in &gone {
            let path = kept_path(&self.dir, *sequence);
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&path)(e)),
                _ => {}
            }
            self.kept.remove(sequence);
            self.files.remove(*sequence);
        }
        if !gone.is_empty() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Segments kept for their bodies only (`.bodies`).
    pub fn kept(&self) -> usize {
        self.kept.len()
    }

    /// Starts over from an installed snapshot: a new segment holding `hard_state` and a reset
    /// to `meta` (which drops every earlier entry at replay, so that segments a crash leaves
    /// undeleted change nothing), fsynced, then every older segment deleted, the kept ones too
    /// (the index restored before it holds every body in its own files).
    pub fn reset(
        &mut self,
        hard_state: &HardState,
        meta: &SnapshotMetadata,
    ) -> Result<(), LogError> {
        self.buffer.clear();
        self.buffered_max_index = 0;
        self.start_segment(hard_state, KIND_RESET, meta)?;
        self.remove_through(u64::MAX, &BTreeSet::new())?;
        self.drop_unreferenced(&BTreeSet::new())
    }

    /// Segment files on disk (the active one included).
    pub fn segments(&self) -> usize {
        self.closed.len() + 1
    }
}

fn create_segment(dir: &Path, path: &Path) -> Result<SegmentFile, LogError> {
    let file = SegmentFile::open(path, true)?;
    sync_dir(dir)?;
    Ok(file)
}

/// Replays one segment (number `sequence`) into `into`; returns its highest entry index and
/// its bytes up to its last record. Zeros to the end of the file end any segment (the rest of
/// the last block written, or of a segment made ahead). A torn or corrupt record ends the last
/// segment (`is_last`: the file is cut there) and is an error elsewhere.
fn replay_segment(
    path: &Path,
    sequence: u64,
    is_last: bool,
    into: &mut Replayed,
) -> Result<(u64, Vec<u8>), LogError> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(io_err(path))?;
    let mut offset = 0usize;
    let mut max_index = 0;
    while offset < bytes.len() {
        match read_record(&bytes[offset..]) {
            Ok((kind, payload, used)) => {
                let bad = |what: String| LogError::Corrupt {
                    path: path.to_path_buf(),
                    offset: offset as u64,
                    what,
                };
                match kind {
                    KIND_ENTRY => {
                        let entry = Entry::decode(payload)
                            .map_err(|e| bad(format!("entry does not decode: {e}")))?;
                        max_index = max_index.max(entry.index);
                        // A rewritten index drops the suffix it conflicts with.
                        into.entries.split_off(&entry.index);
                        into.entries.insert(
                            entry.index,
                            EntryAt {
                                term: entry.term,
                                segment: sequence,
                                offset: offset as u64,
                                len: used as u32,
                                data: data_at(&entry, payload),
                            },
                        );
                    }
                    KIND_HARD_STATE => {
                        into.hard_state = Some(
                            HardState::decode(payload)
                                .map_err(|e| bad(format!("hard state does not decode: {e}")))?,
                        );
                    }
                    KIND_COMPACTED | KIND_RESET => {
                        let meta = SnapshotMetadata::decode(payload)
                            .map_err(|e| bad(format!("compaction point does not decode: {e}")))?;
                        if kind == KIND_RESET {
                            into.entries.clear();
                        } else {
                            let Some(after) = meta.index.checked_add(1) else {
                                return Err(bad("compaction point out of range".into()));
                            };
                            into.entries = into.entries.split_off(&after);
                        }
                        into.compacted = Some(meta);
                    }
                    other => return Err(bad(format!("unknown record kind {other}"))),
                }
                offset += used;
            }
            // Zeros to the end: the rest of a direct write's last block, or of a segment made
            // ahead.
            Err(_) if bytes[offset..].iter().all(|b| *b == 0) => break,
            Err(what) if is_last && is_torn_tail(&bytes, offset) => {
                tracing::warn!(
                    path = %path.display(),
                    offset,
                    what,
                    "the raft log ends in an unfinished record (a crash during an append); cut there"
                );
                let file = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(io_err(path))?;
                file.set_len(offset as u64).map_err(io_err(path))?;
                file.sync_all().map_err(io_err(path))?;
                break;
            }
            Err(what) => {
                return Err(LogError::Corrupt {
                    path: path.to_path_buf(),
                    offset: offset as u64,
                    what: what.into(),
                });
            }
        }
    }
    bytes.truncate(offset);
    Ok((max_index, bytes))
}

/// The unit a disk writes whole or not at all, bytes (a page that a power loss did not write
/// reads as zeros, sector by sector).
const SECTOR_BYTES: usize = 512;

/// Whether a record that does not read at `offset` of the segment `bytes` is what a crash
/// during an append leaves: a record reaching the end of the file or followed by zeros only
/// (the rest of the block or of a segment made ahead: nothing was written after it), zeros to
/// the end (space the file system allocated before the data), a header in zeros to the end of
/// its sector, or a record that holds a zeroed sector (a page of the write lost in a power
/// loss while later pages reached the disk). A whole record with a bad checksum, no zeroed
/// sector and data after it is not.
fn is_torn_tail(bytes: &[u8], offset: usize) -> bool {
    let rest = &bytes[offset..];
    if rest.len() < HEADER_BYTES + 1 {
        return true;
    }
    let len = u32::from_le_bytes(rest[0..4].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_RECORD_BYTES {
        let sector_end = (offset + HEADER_BYTES)
            .next_multiple_of(SECTOR_BYTES)
            .min(bytes.len());
        return rest.iter().all(|b| *b == 0) || bytes[offset..sector_end].iter().all(|b| *b == 0);
    }
    let end = offset + HEADER_BYTES + len as usize;
    end >= bytes.len()
        || bytes[end..].iter().all(|b| *b == 0)
        || has_zeroed_sector(bytes, offset, end)
}

/// Whether a whole sector (aligned to the file's start) of `bytes[from..to]` is all zeros.
fn has_zeroed_sector(bytes: &[u8], from: usize, to: usize) -> bool {
    let mut start = from.next_multiple_of(SECTOR_BYTES);
    while start + SECTOR_BYTES <= to {
        if bytes[start..start + SECTOR_BYTES].iter().all(|b| *b == 0) {
            return true;
        }
        start += SECTOR_BYTES;
    }
    false
}

/// One record at the start of `bytes`: (kind, payload, bytes used), or why it is not whole.
fn read_record(bytes: &[u8]) -> Result<(u8, &[u8], usize), &'static str> {
    if bytes.len() < HEADER_BYTES + 1 {
        return Err("record header cut short");
    }
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_RECORD_BYTES {
        return Err("record length out of range");
    }
    let end = HEADER_BYTES + len as usize;
    if bytes.len() < end {
        return Err("record cut short");
    }
    let body = &bytes[HEADER_BYTES..end];
    if crc32fast::hash(body) != crc {
        return Err("record checksum mismatch");
    }
    Ok((body[0], &body[1..], end))
}

#[cfg(test)]
pub(super) mod tests {

    use super::*;

    /// A log entry of 100 bytes of data.
    pub(in crate::raft) fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8; 100],
            ..Entry::default()
        }
    }

    fn indexes(replayed: &Replayed) -> Vec<(u64, u64)> {
        replayed
            .entries
            .iter()
            .map(|(index, at)| (*index, at.term))
            .collect()
    }

    #[test]
    fn entries_hard_state_and_conflicts_replay_in_order() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
            assert!(replayed.entries.is_empty() && replayed.hard_state.is_none());
            for i in 1..=5 {
                log.push_entry(&entry(i, 1));
            }
            log.push_hard_state(&HardState {
                term: 1,
                vote: 1,
                commit: 3,
            });
            log.flush(true).unwrap();
            // A new leader replaces 4.. with its own entries of term 2.
            log.push_entry(&entry(4, 2));
            log.push_hard_state(&HardState {
                term: 2,
                vote: 2,
                commit: 4,
            });
            log.flush(true).unwrap();
        }
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&replayed), [(1, 1), (2, 1), (3, 1), (4, 2)]);
        // The entries are read back from where replay found them (4's record is the rewritten
        // one, after the hard state).
        let at: Vec<EntryAt> = replayed.entries.values().copied().collect();
        assert_eq!(
            log.read_entries(&at).unwrap(),
            [entry(1, 1), entry(2, 1), entry(3, 1), entry(4, 2)]
        );
        let hs = replayed.hard_state.unwrap();
        assert_eq!((hs.term, hs.vote, hs.commit), (2, 2, 4));
    }

    #[test]
    fn a_torn_tail_is_cut_and_appends_go_on_after_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            log.push_entry(&entry(1, 1));
            log.push_entry(&entry(2, 1));
            log.flush(true).unwrap();
        }
        // A crash in the middle of the third record's write, where the second one ends (the
        // file goes on in zeros to the end of its last block).
        let path = segment_path(dir.path(), 1);
        let whole = {
            let (log, _) = SegmentLog::open(dir.path()).unwrap();
            log.bytes
        };
        assert!(fs::metadata(&path).unwrap().len() > whole);
        let mut record = Vec::new();
        let (mut scratch, _) = SegmentLog::open(tempfile::tempdir().unwrap().path()).unwrap();
        scratch.push_entry(&entry(3, 1));
        record.extend_from_slice(&scratch.buffer);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&record[..record.len() / 2], whole)
            .unwrap();
        drop(file);
        {
            let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
            assert_eq!(indexes(&replayed), [(1, 1), (2, 1)]);
            assert_eq!(fs::metadata(&path).unwrap().len(), whole);
            log.push_entry(&entry(3, 1));
            log.flush(true).unwrap();
        }
        let (_, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&replayed), [(1, 1), (2, 1), (3, 1)]);
    }

    /// A power loss during one unsynced write of several records: one of its pages never
    /// reached the disk (zeros) while the pages after it did. Replay keeps what came before
    /// the record holding the zeroed page and cuts the rest, instead of refusing to start.
    #[test]
    fn a_zeroed_page_inside_the_last_write_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let big = |index: u64| Entry {
            index,
            term: 1,
            data: vec![0xab; 10_000],
            ..Entry::default()
        };
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            log.push_entry(&big(1));
            log.flush(true).unwrap();
            // One write of three records, never synced.
            for index in 2..=4 {
                log.push_entry(&big(index));
            }
            log.flush(false).unwrap();
        }
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        let (_, replayed) = SegmentLog::open(dir.path()).unwrap();
        let second = replayed.entries[&2].offset as usize;
        let third = replayed.entries[&3].offset as usize;
        // The page of the file inside the second record is lost; the third and fourth reached
        // the disk.
        let page = (second + HEADER_BYTES).next_multiple_of(4096);
        assert!(
            page + 4096 < third,
            "the page lies inside the second record"
        );
        bytes[page..page + 4096].fill(0);
        fs::write(&path, &bytes).unwrap();
        let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&replayed), [(1, 1)]);
        assert_eq!(
            fs::metadata(&path).unwrap().len(),
            second as u64,
            "cut there"
        );
        log.push_entry(&big(2));
        log.flush(true).unwrap();
        drop(log);
        let (_, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&replayed), [(1, 1), (2, 1)]);
    }

    #[test]
    fn a_bad_record_followed_by_more_in_the_last_segment_is_corruption_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            log.push_entry(&entry(1, 1));
            log.push_entry(&entry(2, 1));
            log.flush(true).unwrap();
        }
        let path = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&path).unwrap();
        bytes[HEADER_BYTES + 2] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let error = SegmentLog::open(dir.path()).err().unwrap().to_string();
        assert!(error.contains("checksum mismatch at byte 0"), "{error}");
        assert_eq!(fs::read(&path).unwrap(), bytes, "nothing was cut");
    }

    #[test]
    fn segments_are_deleted_oldest_first_only() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
        // Segment 1 holds 1..=5; segment 2 rewrites 3 (a new leader), segment 3 goes on.
        for i in 1..=5 {
            log.push_entry(&entry(i, 1));
        }
        log.rotate(&HardState::default(), &SnapshotMetadata::default())
            .unwrap();
        log.push_entry(&entry(3, 2));
        log.rotate(&HardState::default(), &SnapshotMetadata::default())
            .unwrap();
        log.push_entry(&entry(4, 2));
        log.flush(true).unwrap();
        // Compaction to 3 has passed segment 2 but not segment 1: neither may go alone.
        log.remove_through(3, &BTreeSet::new()).unwrap();
        assert_eq!(log.segments(), 3);
        log.remove_through(5, &BTreeSet::new()).unwrap();
        assert_eq!(log.segments(), 1);
    }

    #[test]
    fn a_bad_record_before_the_last_segment_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            log.push_entry(&entry(1, 1));
            log.rotate(&HardState::default(), &SnapshotMetadata::default())
                .unwrap();
            log.push_entry(&entry(2, 1));
            log.flush(true).unwrap();
        }
        let first = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&first).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        fs::write(&first, bytes).unwrap();
        let error = SegmentLog::open(dir.path()).err().unwrap().to_string();
        assert!(
            error.contains("00000000000000000001.log")
                && error.contains("checksum mismatch at byte 0"),
            "{error}"
        );
    }

    #[test]
    fn compaction_deletes_passed_segments_and_replay_starts_after_it() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            for i in 1..=3 {
                log.push_entry(&entry(i, 1));
            }
            log.rotate(&HardState::default(), &SnapshotMetadata::default())
                .unwrap();
            for i in 4..=6 {
                log.push_entry(&entry(i, 1));
            }
            log.flush(true).unwrap();
            assert_eq!(log.segments(), 2);
            let meta = SnapshotMetadata {
                index: 4,
                term: 1,
                ..SnapshotMetadata::default()
            };
            log.push_compacted(&meta);
            log.flush(true).unwrap();
            log.remove_through(4, &BTreeSet::new()).unwrap();
            assert_eq!(log.segments(), 1);
        }
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(log.segments(), 1);
        assert_eq!(replayed.compacted.as_ref().unwrap().index, 4);
        assert_eq!(indexes(&replayed), [(5, 1), (6, 1)]);
    }

    #[test]
    fn reset_keeps_only_the_snapshot_point_even_if_old_segments_survive_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let first = segment_path(dir.path(), 1);
        let kept_copy = dir.path().join("copy");
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            for i in 1..=3 {
                log.push_entry(&entry(i, 1));
            }
            log.flush(true).unwrap();
            fs::copy(&first, &kept_copy).unwrap();
            let meta = SnapshotMetadata {
                index: 90,
                term: 3,
                ..SnapshotMetadata::default()
            };
            let hs = HardState {
                term: 3,
                vote: 0,
                commit: 90,
            };
            log.reset(&hs, &meta).unwrap();
            log.push_entry(&entry(91, 3));
            log.flush(true).unwrap();
        }
        // A crash before the old segment's deletion reached the disk: it is back at replay.
        fs::rename(&kept_copy, &first).unwrap();
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(log.segments(), 2);
        assert_eq!(replayed.compacted.as_ref().unwrap().index, 90);
        assert_eq!(replayed.hard_state.as_ref().unwrap().commit, 90);
        assert_eq!(indexes(&replayed), [(91, 3)]);
    }

    /// The bytes at `at`'s data, read through the log's open files (the active segment's
    /// from memory), and checked against the segment's file.
    fn data_read(log: &SegmentLog, at: &EntryAt, len: usize) -> Vec<u8> {
        let mut bytes = vec![0u8; len];
        let offset = at.offset + u64::from(at.data);
        log.files()
            .current()
            .read_exact_at(at.segment, &mut bytes, offset)
            .unwrap();
        let mut on_disk = vec![0u8; len];
        log.files()
            .current()
            .file(at.segment)
            .unwrap()
            .read_exact_at(&mut on_disk, offset)
            .unwrap();
        assert_eq!(bytes, on_disk, "memory and the file agree");
        bytes
    }

    #[test]
    fn an_entrys_data_is_found_where_the_record_holds_it_when_written_and_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let with_context = Entry {
            context: b"proposal 7".to_vec(),
            sync_log: true,
            ..entry(2, 1)
        };
        let (written, empty) = {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            let a = log.push_entry(&entry(1, 1));
            let b = log.push_entry(&with_context);
            let empty = log.push_entry(&Entry {
                index: 3,
                term: 1,
                ..Entry::default()
            });
            log.flush(true).unwrap();
            assert_eq!(data_read(&log, &a, 100), entry(1, 1).data);
            assert_eq!(data_read(&log, &b, 100), with_context.data);
            ([a, b], empty)
        };
        assert_eq!(empty.data, 0, "no data, no place");
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(replayed.entries[&1], written[0]);
        assert_eq!(replayed.entries[&2], written[1]);
        assert_eq!(replayed.entries[&3].data, 0);
        assert_eq!(
            data_read(&log, &replayed.entries[&2], 100),
            with_context.data
        );
    }

    #[test]
    fn a_passed_segment_with_bodies_in_use_is_kept_unreplayed_until_they_go() {
        let dir = tempfile::tempdir().unwrap();
        let first_entry = {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            let at = log.push_entry(&entry(1, 1));
            log.push_entry(&entry(2, 1));
            log.rotate(&HardState::default(), &SnapshotMetadata::default())
                .unwrap();
            log.push_entry(&entry(3, 1));
            log.push_compacted(&SnapshotMetadata {
                index: 2,
                term: 1,
                ..SnapshotMetadata::default()
            });
            log.flush(true).unwrap();
            let held = log.files().current();
            log.remove_through(2, &BTreeSet::from([1])).unwrap();
            assert_eq!((log.segments(), log.kept()), (1, 1));
            assert!(kept_path(dir.path(), 1).exists() && !segment_path(dir.path(), 1).exists());
            assert_eq!(data_read(&log, &at, 100), entry(1, 1).data);
            assert!(Arc::ptr_eq(
                held.file(1).unwrap(),
                log.files().current().file(1).unwrap()
            ));
            at
        };
        // Reopened: the kept segment is read, not replayed (its entries are compacted).
        let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
        assert_eq!(indexes(&replayed), [(3, 1)]);
        assert_eq!((log.segments(), log.kept()), (1, 1));
        assert_eq!(data_read(&log, &first_entry, 100), entry(1, 1).data);
        // Still in use: kept; then no longer: deleted, while a reader that took it reads on.
        log.drop_unreferenced(&BTreeSet::from([1])).unwrap();
        assert_eq!(log.kept(), 1);
        let reader = log.files().current();
        log.drop_unreferenced(&BTreeSet::new()).unwrap();
        assert_eq!(log.kept(), 0);
        assert!(!kept_path(dir.path(), 1).exists());
        assert!(log.files().current().file(1).is_none());
        assert!(reader.file(1).is_some());
        // A segment passed with no bodies in use is deleted as before.
        log.rotate(&HardState::default(), &SnapshotMetadata::default())
            .unwrap();
        log.remove_through(3, &BTreeSet::new()).unwrap();
        let mut names: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["00000000000000000003.log"]);
    }

    /// An entry of `len` bytes of data.
    fn big(index: u64, len: usize) -> Entry {
        Entry {
            index,
            term: 1,
            data: vec![(index % 251) as u8; len],
            ..Entry::default()
        }
    }

    /// Made ahead once the active segment passed `WANT_AFTER`: waits until the file is made
    /// and synced (a condition, not a sleep).
    fn wait_for_next(log: &SegmentLog) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !log.next.is_ready() {
            assert!(std::time::Instant::now() < deadline, "no next segment made");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A segment made ahead becomes the next one at a rotation: its records are written over
    /// its zeros (the file keeps its length), replay ends at the last record and appends go on
    /// there; the closed segment was cut to its last record; every entry reads back the same
    /// from memory, from the files, and after reopening.
    #[test]
    fn a_segment_made_ahead_is_written_over_its_zeros_and_replayed_to_its_last_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut places = Vec::new();
        let first_end;
        {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            for index in 1..=12 {
                places.push(log.push_entry(&big(index, 100_000)));
            }
            log.flush(true).unwrap();
            first_end = log.bytes;
            assert!(first_end > next_segment::WANT_AFTER);
            wait_for_next(&log);
            log.rotate(&HardState::default(), &SnapshotMetadata::default())
                .unwrap();
            assert!(!dir.path().join(next_segment::FILE_NAME).exists(), "taken");
            for index in 13..=15 {
                places.push(log.push_entry(&big(index, 100_000)));
            }
            log.flush(true).unwrap();
            for (at, index) in places.iter().zip(1..) {
                assert_eq!(
                    data_read(&log, at, 100_000),
                    big(index, 1).data.repeat(100_000)
                );
            }
        }
        assert_eq!(
            fs::metadata(segment_path(dir.path(), 1)).unwrap().len(),
            first_end,
            "the closed segment is cut to its last record"
        );
        assert_eq!(
            fs::metadata(segment_path(dir.path(), 2)).unwrap().len(),
            SEGMENT_BYTES,
            "the made-ahead segment keeps its length"
        );
        let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
        let at: Vec<EntryAt> = replayed.entries.values().copied().collect();
        assert_eq!(at, places);
        log.push_entry(&big(16, 10));
        log.flush(true).unwrap();
        drop(log);
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        let at: Vec<EntryAt> = replayed.entries.values().copied().collect();
        let read = log.read_entries(&at).unwrap();
        assert_eq!(read.len(), 16);
        assert_eq!(read[15], big(16, 10));
        assert_eq!(read[0], big(1, 100_000));
    }

    /// A last segment that ends off a block boundary with no zeros after it (as a log written
    /// before direct writes left it) takes appends: its last block is written again whole.
    #[test]
    fn appends_go_on_after_a_segment_that_ends_inside_a_block() {
        let dir = tempfile::tempdir().unwrap();
        let end = {
            let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
            log.push_entry(&big(1, 777));
            log.flush(true).unwrap();
            log.bytes
        };
        assert_ne!(end % crate::open_files::BLOCK as u64, 0);
        let path = segment_path(dir.path(), 1);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(end).unwrap();
        drop(file);
        {
            let (mut log, replayed) = SegmentLog::open(dir.path()).unwrap();
            assert_eq!(replayed.entries.len(), 1);
            assert_eq!(log.bytes, end);
            log.push_entry(&big(2, 5000));
            log.flush(true).unwrap();
        }
        let (log, replayed) = SegmentLog::open(dir.path()).unwrap();
        let at: Vec<EntryAt> = replayed.entries.values().copied().collect();
        assert_eq!(log.read_entries(&at).unwrap(), [big(1, 777), big(2, 5000)]);
    }
}

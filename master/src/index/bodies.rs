//! Job bodies (encoded specs and compressed results) in append-only files beside the index's
//! `redb` file, referenced from the `specs` and `results` tables by a [`BodyRef`]: value
//! separation, as WiscKey (Lu et al., FAST '16) and Bitcask keep values out of the tree.
//! `ARCHITECTURE.md` ("Where a job's bodies live") has the measurements behind it.
//!
//! Files are `bodies/NNNNNNNNNN.body` (the file number, 0-based, ten digits), bodies back to
//! back with no framing: the reference holds each body's place, length and CRC-32. A file
//! takes bodies until it holds [`FILE_BYTES`]; the next body opens the next file. Writes go to
//! the page cache; [`Bodies::sync`] makes them durable and the index calls it before each
//! durable `redb` commit, which records the active file and its end ([`Bodies::position`]).
//! Opening ([`Bodies::open`]) cuts the active file back to what the last durable commit
//! records and deletes files it does not reference: what was written after that commit is
//! replayed from the Raft log, as the index's other effects are.
//!
//! A body that goes is subtracted from its file's live bytes (the `body_files` table, kept by
//! the index in the same transaction); a file with no live bytes is retired and deleted once a
//! durable commit holds that ([`Bodies::retire`], [`Bodies::delete_retired`]). Readers hold the files they may read open
//! ([`Bodies::reader`]), so a deletion after a read transaction began does not cut its reads.
//!
//! A body can also live in the Raft log, where the entry that brought it holds its bytes
//! ([`Home::Log`]): a master whose index is Raft's state machine writes a job's report and
//! result once, in the log, instead of once there and again here. The log's segment files
//! are attached when the log opens ([`Bodies::attach_log`]); the log keeps a segment while
//! the index references bodies in it (`log_bodies`, `raft/segment_log.rs`).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::open_files::{OpenFiles, Taken};

/// Bytes a body file takes before the next body opens a new one.
pub const FILE_BYTES: u64 = 64 << 20;

/// Bytes of a body [`Bodies::locate`] searches for before comparing the rest.
const PROBE_BYTES: usize = 64;

/// The file a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Home {
    /// A body file of the index (its number).
    File(u32),
    /// A segment of the Raft log (its sequence number), inside the record of the entry that
    /// brought the body.
    Log(u64),
}

/// Where one body is: its file, byte offset and length, and the CRC-32 (IEEE, `crc32fast`)
/// of its bytes. Stored as 20 bytes in a body file, 24 in the log ([`BodyRef::encode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRef {
    /// The file.
    pub home: Home,
    /// Byte offset in the file.
    pub offset: u64,
    /// Length, bytes.
    pub len: u32,
    /// CRC-32 of the bytes.
    pub crc: u32,
}

/// Bytes of an encoded [`BodyRef`] to a body file.
pub const REF_BYTES: usize = 20;
/// Bytes of an encoded [`BodyRef`] into the log.
pub const LOG_REF_BYTES: usize = 24;

impl BodyRef {
    /// Little-endian: the body file's number (4 bytes) or the log segment's sequence number
    /// (8), then offset (8), length (4), CRC (4); the length of the whole tells them apart.
    /// On the stack: a reference is encoded for every body applied.
    pub fn encode(&self) -> EncodedRef {
        let mut bytes = [0u8; LOG_REF_BYTES];
        let start = match self.home {
            Home::File(file) => {
                bytes[..4].copy_from_slice(&file.to_le_bytes());
                4
            }
            Home::Log(segment) => {
                bytes[..8].copy_from_slice(&segment.to_le_bytes());
                8
            }
        };
        bytes[start..start + 8].copy_from_slice(&self.offset.to_le_bytes());
        bytes[start + 8..start + 12].copy_from_slice(&self.len.to_le_bytes());
        bytes[start + 12..start + 16].copy_from_slice(&self.crc.to_le_bytes());
        EncodedRef {
            bytes,
            len: start + 16,
        }
    }

    /// The reference [`BodyRef::encode`] wrote; `None` for bytes of another length.
    pub fn decode(bytes: &[u8]) -> Option<BodyRef> {
        let (home, rest) = match bytes.len() {
            REF_BYTES => (
                Home::File(u32::from_le_bytes(bytes[..4].try_into().ok()?)),
                &bytes[4..],
            ),
            LOG_REF_BYTES => (
                Home::Log(u64::from_le_bytes(bytes[..8].try_into().ok()?)),
                &bytes[8..],
            ),
            _ => return None,
        };
        Some(BodyRef {
            home,
            offset: u64::from_le_bytes(rest[..8].try_into().ok()?),
            len: u32::from_le_bytes(rest[8..12].try_into().ok()?),
            crc: u32::from_le_bytes(rest[12..16].try_into().ok()?),
        })
    }
}

/// An encoded [`BodyRef`]: [`REF_BYTES`] or [`LOG_REF_BYTES`] bytes.
pub struct EncodedRef {
    bytes: [u8; LOG_REF_BYTES],
    len: usize,
}

impl EncodedRef {
    /// The encoded bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A command's bytes as its Raft log entry holds them, durably: a body found among them is
/// referenced there ([`Bodies::locate`]) rather than written again.
#[derive(Debug, Clone, Copy)]
pub struct InLog<'a> {
    /// The entry's data (the encoded command).
    pub data: &'a [u8],
    /// The segment's sequence number.
    pub segment: u64,
    /// Where `data` starts in the segment, bytes.
    pub offset: u64,
}

/// The active file and the end of what is written in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Position {
    /// The active file's number.
    pub file: u32,
    /// Bytes written to it.
    pub end: u64,
}

struct Active {
    position: Position,
    /// Where [`Bodies::start_writeback`] last got to in the active file.
    written_back: u64,
    file: Arc<File>,
    /// Files written since the last [`Bodies::sync`] (the active one included).
    unsynced: Vec<Arc<File>>,
    /// Every file, open, by number, for readers: shared with the readers taken since it last
    /// changed (a roll or a deletion copies it), so taking a reader copies nothing.
    open: Arc<HashMap<u32, Arc<File>>>,
    /// Files whose bodies are all gone, to delete after the next durable commit.
    retired: Vec<u32>,
}

/// The body files of one index.
pub struct Bodies {
    dir: PathBuf,
    active: Mutex<Active>,
    /// The Raft log's segments, once attached ([`Bodies::attach_log`]).
    log: OnceLock<OpenFiles>,
}

fn file_name(number: u32) -> String {
    format!("{number:010}.body")
}

fn number_of(name: &str) -> Option<u32> {
    let digits = name.strip_suffix(".body")?;
    (digits.len() == 10).then(|| digits.parse().ok()).flatten()
}

fn open_rw(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Bodies {
    /// Opens the body files in `dir` (created if absent) as the last durable commit left
    /// them: `position` is the active file and its end that commit records, `live` the files
    /// it references. The active file is cut back to `position.end`; files numbered above it,
    /// and files below it that are not `live`, are deleted. Errors: the file system's, an
    /// active file shorter than `position.end` and a `live` file that is missing (bodies the
    /// index references are gone).
    pub fn open(dir: &Path, position: Position, live: &[u32]) -> io::Result<Bodies> {
        std::fs::create_dir_all(dir)?;
        let mut open = HashMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Some(number) = entry.file_name().to_str().and_then(number_of) else {
                continue;
            };
            if number > position.file || (number < position.file && !live.contains(&number)) {
                std::fs::remove_file(entry.path())?;
            } else if number < position.file {
                // Held open from now on: a reader keeps what it took even once it is deleted.
                open.insert(number, Arc::new(File::open(entry.path())?));
            }
        }
        if let Some(gone) = live
            .iter()
            .find(|n| **n < position.file && !open.contains_key(n))
        {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{}: missing, but the index references bodies in it",
                    dir.join(file_name(*gone)).display()
                ),
            ));
        }
        let path = dir.join(file_name(position.file));
        let file = open_rw(&path)?;
        let len = file.metadata()?.len();
        if len < position.end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: {len} bytes, but the index references {} (bodies are missing)",
                    path.display(),
                    position.end
                ),
            ));
        }
        if len > position.end {
            file.set_len(position.end)?;
            file.sync_all()?;
        }
        sync_dir(dir)?;
        let file = Arc::new(file);
        open.insert(position.file, file.clone());
        Ok(Bodies {
            dir: dir.to_owned(),
            active: Mutex::new(Active {
                position,
                written_back: position.end,
                file,
                unsynced: Vec::new(),
                open: Arc::new(open),
                retired: Vec::new(),
            }),
            log: OnceLock::new(),
        })
    }

    /// Reads bodies in the Raft log through `files` (its segments) from now on, and lets
    /// [`Bodies::locate`] reference bodies there. A second call changes nothing.
    pub fn attach_log(&self, files: OpenFiles) {
        let _ = self.log.set(files);
    }

    /// Where `bytes` are in the log entry `entry` (`None`: no log attached, or not found in
    /// it; the body then goes to a body file). Found by substring search (`memchr::memmem`),
    /// so a command's encoding need not be known: any place holding the same bytes will do.
    /// The search looks for the body's first [`PROBE_BYTES`] and compares the rest where they
    /// are found: a searcher built for a whole 19 KB report cost a fifth of the Raft thread
    /// (`memmem::Finder::new` factorizes its needle).
    pub fn locate(&self, bytes: &[u8], entry: Option<InLog<'_>>) -> Option<BodyRef> {
        let entry = entry?;
        self.log.get()?;
        let len = u32::try_from(bytes.len()).ok()?;
        if len == 0 {
            return None;
        }
        let probe = &bytes[..bytes.len().min(PROBE_BYTES)];
        let at = memchr::memmem::find_iter(entry.data, probe)
            .find(|at| entry.data.get(*at..*at + bytes.len()) == Some(bytes))?;
        Some(BodyRef {
            home: Home::Log(entry.segment),
            offset: entry.offset + at as u64,
            len,
            crc: crc32fast::hash(bytes),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Active> {
        // A panic while holding the lock leaves the state whole (each step is one assignment).
        self.active.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `bytes` (at most 4 GiB − 1) and returns where they are. Errors: the file
    /// system's; a body too long for a reference.
    pub fn append(&self, bytes: &[u8]) -> io::Result<BodyRef> {
        let len = u32::try_from(bytes.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a body of 4 GiB or more"))?;
        let mut active = self.lock();
        if active.position.end > 0 && active.position.end + len as u64 > FILE_BYTES {
            let number = active.position.file + 1;
            let file = Arc::new(open_rw(&self.dir.join(file_name(number)))?);
            sync_dir(&self.dir)?;
            Arc::make_mut(&mut active.open).insert(number, file.clone());
            active.file = file;
            active.position = Position {
                file: number,
                end: 0,
            };
            active.written_back = 0;
        }
        let offset = active.position.end;
        active.file.write_all_at(bytes, offset)?;
        active.position.end += len as u64;
        if !active.unsynced.iter().any(|f| Arc::ptr_eq(f, &active.file)) {
            let file = active.file.clone();
            active.unsynced.push(file);
        }
        Ok(BodyRef {
            home: Home::File(active.position.file),
            offset,
            len,
            crc: crc32fast::hash(bytes),
        })
    }

    /// The active file and its end: what a commit records for [`Bodies::open`].
    pub fn position(&self) -> Position {
        self.lock().position
    }

    /// Starts writing back to the disk what was appended to the active file since the last
    /// call, without waiting and without making it durable (Linux `sync_file_range(2)` with
    /// `SYNC_FILE_RANGE_WRITE`; nothing elsewhere): the next [`Bodies::sync`] then has little
    /// left to flush, so the checkpoint that calls it stalls the applying thread less
    /// (RocksDB's `bytes_per_sync` does the same). Call it after each batch.
    pub fn start_writeback(&self) {
        let mut active = self.lock();
        let (from, to) = (active.written_back, active.position.end);
        if to <= from {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: sync_file_range on a descriptor this struct keeps open; it reads no
            // memory of ours. A failure only leaves the flush to `sync`.
            unsafe {
                libc::sync_file_range(
                    active.file.as_raw_fd(),
                    from as libc::off64_t,
                    (to - from) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
        active.written_back = to;
    }

    /// Makes every body appended so far durable (`fdatasync` of each file written since the
    /// last call). Errors: the file system's.
    pub fn sync(&self) -> io::Result<()> {
        let files = std::mem::take(&mut self.lock().unsynced);
        for (i, file) in files.iter().enumerate() {
            if let Err(e) = file.sync_data() {
                // Still to sync: the next call tries them again.
                self.lock().unsynced.extend(files[i..].iter().cloned());
                return Err(e);
            }
        }
        Ok(())
    }

    /// Marks files `numbers` for deletion: their bodies are all gone in a committed
    /// transaction. [`Bodies::delete_retired`] deletes them once a durable commit holds that.
    pub fn retire(&self, numbers: Vec<u32>) {
        if !numbers.is_empty() {
            self.lock().retired.extend(numbers);
        }
    }

    /// Deletes the retired files (call after a durable commit); the active file is never
    /// deleted. Readers that hold one keep reading it. Errors: the file system's (the files
    /// not deleted are deleted when the index next opens, as no commit references them).
    pub fn delete_retired(&self) -> io::Result<()> {
        let mut active = self.lock();
        let numbers = std::mem::take(&mut active.retired);
        for number in numbers {
            if number == active.position.file {
                continue;
            }
            Arc::make_mut(&mut active.open).remove(&number);
            match std::fs::remove_file(self.dir.join(file_name(number))) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    /// A reader over the files as they are now (it holds each open): take it before the read
    /// transaction whose references it reads, so that no file those references name is
    /// deleted under it.
    pub fn reader(&self) -> BodyReader {
        BodyReader {
            dir: self.dir.clone(),
            open: self.lock().open.clone(),
            log: self.log.get().map(OpenFiles::current),
        }
    }

    /// Reads one body (a reader of its own: for a reference taken under the writer's lock).
    pub fn read(&self, body: BodyRef) -> io::Result<Vec<u8>> {
        self.reader().read(body)
    }
}

/// The body files as they were when [`Bodies::reader`] took it (a file created since is
/// opened by name when read).
pub struct BodyReader {
    dir: PathBuf,
    open: Arc<HashMap<u32, Arc<File>>>,
    /// The log's segments as they were (`None`: no log attached).
    log: Option<Taken>,
}

impl BodyReader {
    /// The bytes `body` refers to. Errors: the file system's (a file that is gone is
    /// `NotFound`, a log segment too, and a body in the log of an index whose log is not
    /// open), and bytes whose CRC differs from the reference's (`InvalidData`).
    pub fn read(&self, body: BodyRef) -> io::Result<Vec<u8>> {
        if body.len == 0 {
            // An empty body is in no file (and keeps none alive).
            return Ok(Vec::new());
        }
        let mut bytes = vec![0u8; body.len as usize];
        let name = match body.home {
            Home::File(number) => {
                match self.open.get(&number) {
                    Some(file) => file.read_exact_at(&mut bytes, body.offset)?,
                    // Created after this reader was taken.
                    None => File::open(self.dir.join(file_name(number)))?
                        .read_exact_at(&mut bytes, body.offset)?,
                }
                file_name(number)
            }
            Home::Log(segment) => {
                let not_open = || {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "raft log segment {segment}: not open, but the index references a body in it"
                        ),
                    )
                };
                let log = self.log.as_ref().ok_or_else(not_open)?;
                match log.read_exact_at(segment, &mut bytes, body.offset) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(not_open()),
                    other => other?,
                }
                format!("raft log segment {segment}")
            }
        };
        if crc32fast::hash(&bytes) != body.crc {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "body file {name}: {} bytes at {} do not match their CRC",
                    body.len, body.offset
                ),
            ));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_body_reads_back_and_its_reference_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        let a = bodies.append(b"first body").unwrap();
        let b = bodies.append(b"second").unwrap();
        assert_eq!((a.home, a.offset, a.len), (Home::File(0), 0, 10));
        assert_eq!((b.home, b.offset, b.len), (Home::File(0), 10, 6));
        assert_eq!(b.encode().as_slice().len(), REF_BYTES);
        assert_eq!(BodyRef::decode(b.encode().as_slice()), Some(b));
        assert_eq!(BodyRef::decode(&b.encode().as_slice()[..19]), None);
        let in_log = BodyRef {
            home: Home::Log(7),
            ..b
        };
        assert_eq!(in_log.encode().as_slice().len(), LOG_REF_BYTES);
        assert_eq!(BodyRef::decode(in_log.encode().as_slice()), Some(in_log));
        assert_eq!(bodies.read(a).unwrap(), b"first body");
        assert_eq!(bodies.reader().read(b).unwrap(), b"second");
        assert_eq!(bodies.position(), Position { file: 0, end: 16 });
    }

    /// A body whose first bytes also appear earlier in the entry is found where it all is;
    /// one that is not there whole is not found.
    #[test]
    fn a_body_is_located_where_all_its_bytes_are_not_where_its_start_is() {
        let dir = tempfile::tempdir().unwrap();
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        bodies.attach_log(OpenFiles::default());
        let body: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        let mut data = b"header".to_vec();
        data.extend_from_slice(&body[..200]);
        data.extend_from_slice(b"--");
        let at = data.len();
        data.extend_from_slice(&body);
        data.extend_from_slice(b"trailer");
        let entry = InLog {
            data: &data,
            segment: 4,
            offset: 1000,
        };
        let found = bodies.locate(&body, Some(entry)).unwrap();
        assert_eq!(found.home, Home::Log(4));
        assert_eq!(found.offset, 1000 + at as u64);
        assert_eq!((found.len, found.crc), (300, crc32fast::hash(&body)));
        let mut longer = body.clone();
        longer.push(0);
        assert_eq!(bodies.locate(&longer, Some(entry)), None);
    }

    #[test]
    fn an_empty_body_reads_back_without_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        let empty = bodies.append(b"").unwrap();
        std::fs::remove_file(dir.path().join(file_name(0))).unwrap();
        assert_eq!(bodies.reader().read(empty).unwrap(), b"");
    }

    #[test]
    fn bytes_that_changed_on_disk_are_an_error_not_a_body() {
        let dir = tempfile::tempdir().unwrap();
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        let a = bodies.append(b"the report").unwrap();
        let file = open_rw(&dir.path().join(file_name(0))).unwrap();
        file.write_all_at(b"X", 3).unwrap();
        let error = bodies.read(a).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            error.to_string(),
            "body file 0000000000.body: 10 bytes at 0 do not match their CRC"
        );
    }

    #[test]
    fn a_full_file_rolls_over_and_opening_keeps_only_what_the_commit_references() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![7u8; (FILE_BYTES / 2 + 1) as usize];
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        let a = bodies.append(&big).unwrap();
        let b = bodies.append(&big).unwrap();
        assert_eq!(
            (a.home, b.home, b.offset),
            (Home::File(0), Home::File(1), 0)
        );
        let committed = bodies.position();
        bodies.sync().unwrap();
        // Written after the commit: cut on open.
        let c = bodies.append(b"not committed").unwrap();
        let d = bodies.append(&big).unwrap();
        assert_eq!((c.home, d.home), (Home::File(1), Home::File(2)));
        drop(bodies);
        let bodies = Bodies::open(dir.path(), committed, &[0, 1]).unwrap();
        assert_eq!(files(dir.path()), ["0000000000.body", "0000000001.body"]);
        assert_eq!(
            std::fs::metadata(dir.path().join(file_name(1)))
                .unwrap()
                .len(),
            big.len() as u64
        );
        assert_eq!(bodies.read(b).unwrap(), big);
        // Files from before the opening are held open by readers too.
        let reader = bodies.reader();
        std::fs::remove_file(dir.path().join(file_name(0))).unwrap();
        assert_eq!(reader.read(a).unwrap(), big);
        std::fs::write(dir.path().join(file_name(0)), &big).unwrap();
        // The next body goes where the cut one was.
        assert_eq!(bodies.append(b"again").unwrap().offset, big.len() as u64);
        drop(bodies);
        // A live file that is gone is an error, not an index with holes.
        std::fs::remove_file(dir.path().join(file_name(0))).unwrap();
        let error = Bodies::open(dir.path(), committed, &[0, 1]).err().unwrap();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(
            error
                .to_string()
                .ends_with("0000000000.body: missing, but the index references bodies in it"),
            "{error}"
        );
        std::fs::write(dir.path().join(file_name(0)), &big).unwrap();
        // File 0 no longer live: deleted on open.
        Bodies::open(dir.path(), committed, &[1]).unwrap();
        assert_eq!(files(dir.path()), ["0000000001.body"]);
    }

    #[test]
    fn an_active_file_shorter_than_the_index_says_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        bodies.append(b"12345").unwrap();
        drop(bodies);
        let error = Bodies::open(dir.path(), Position { file: 0, end: 9 }, &[0])
            .err()
            .unwrap();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
        assert!(
            error.to_string().ends_with(
                "0000000000.body: 5 bytes, but the index references 9 (bodies are missing)"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_deleted_file_stays_readable_to_a_reader_taken_before() {
        let dir = tempfile::tempdir().unwrap();
        let big = vec![1u8; FILE_BYTES as usize];
        let bodies = Bodies::open(dir.path(), Position::default(), &[]).unwrap();
        let a = bodies.append(&big).unwrap();
        bodies.append(b"in file 1").unwrap();
        let before = bodies.reader();
        bodies.retire(vec![0, 1]);
        assert_eq!(
            files(dir.path()).len(),
            2,
            "deleted only after a durable commit"
        );
        bodies.delete_retired().unwrap();
        assert_eq!(
            files(dir.path()),
            ["0000000001.body"],
            "the active file stays"
        );
        assert_eq!(before.read(a).unwrap().len(), big.len());
        assert_eq!(
            bodies.reader().read(a).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}

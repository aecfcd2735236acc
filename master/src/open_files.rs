//! Files held open for reading, by number, shared between the one writer that creates and
//! deletes them and the readers that must not lose a file in the middle of a read; and the
//! bytes of the one file being written, kept in memory ([`Written`]).
//!
//! The Raft log's segment files are one such set ([`crate::raft::segment_log`] keeps it): a
//! job's report and result are read from the log entry that brought them (the index's
//! references, `index/bodies.rs`). A reader takes the set as it is ([`OpenFiles::current`]):
//! taking it copies nothing, and a file deleted afterwards stays readable through the handle
//! the reader holds (a deleted file's blocks live until its last descriptor closes).
//!
//! The log writes its active segment with direct I/O (`O_DIRECT`: no page cache), so that
//! segment's bytes are read from memory, never through the page cache while it is written:
//! Linux keeps buffered reads and direct writes of one file coherent only by invalidating
//! cached pages after each write, and documents mixing the two as something to avoid
//! (`open(2)`, "O_DIRECT"). [`Written`] holds that copy: the writer appends to it and writes
//! whole blocks straight from it; a reader asking for bytes of that file gets them from there.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use aligned_vec::{AVec, ConstAlign};

/// The set as a reader took it: file number → open file.
pub type FileSet = Arc<HashMap<u64, Arc<File>>>;

/// The block size direct I/O is aligned to, bytes: offsets, lengths and buffer addresses of a
/// direct write are multiples of it (4 KiB: a multiple of the logical block size of the disks
/// Linux runs on, 512 or 4096; `statx(2)`'s `stx_dio_offset_align`).
pub const BLOCK: usize = 4096;

/// A shared, changing set of open files and the bytes of the one being written (see the
/// module documentation). Cloning shares it.
#[derive(Clone, Default)]
pub struct OpenFiles {
    files: Arc<Mutex<FileSet>>,
    written: Arc<Written>,
}

impl OpenFiles {
    fn lock(&self) -> MutexGuard<'_, FileSet> {
        // Each change is one assignment: a panic while holding the lock leaves the set whole.
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds (or replaces) file `number`.
    pub fn insert(&self, number: u64, file: Arc<File>) {
        Arc::make_mut(&mut self.lock()).insert(number, file);
    }

    /// Forgets file `number` (readers that took it keep their handle).
    pub fn remove(&self, number: u64) {
        let mut files = self.lock();
        if files.contains_key(&number) {
            Arc::make_mut(&mut files).remove(&number);
        }
    }

    /// Forgets every file.
    pub fn clear(&self) {
        *self.lock() = FileSet::default();
    }

    /// The files as they are now, and the file being written.
    pub fn current(&self) -> Taken {
        Taken {
            files: self.lock().clone(),
            written: self.written.clone(),
        }
    }

    /// The in-memory copy of the file being written (the writer's side).
    pub fn written(&self) -> &Written {
        &self.written
    }
}

/// The files as a reader took them ([`OpenFiles::current`]).
pub struct Taken {
    files: FileSet,
    written: Arc<Written>,
}

impl Taken {
    /// File `number`, if it was open.
    pub fn file(&self, number: u64) -> Option<&Arc<File>> {
        self.files.get(&number)
    }

    /// Fills `buf` with the bytes of file `number` at `offset`: from memory when that is the
    /// file being written and holds them, else from the file. Errors: `NotFound` for a file
    /// that was not open, and the file system's (`UnexpectedEof` past its end).
    pub fn read_exact_at(&self, number: u64, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.written.read_at(number, buf, offset) {
            return Ok(());
        }
        match self.files.get(&number) {
            Some(file) => file.read_exact_at(buf, offset),
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("file {number} is not open"),
            )),
        }
    }
}

/// The bytes of the one file being written, from its start to its end, in a buffer aligned to
/// [`BLOCK`] (so that whole blocks are written straight from it). One writer; readers read
/// under a shared lock. Memory: the file's length, kept (not freed) when the next file starts.
#[derive(Default)]
pub struct Written {
    inner: RwLock<WrittenBytes>,
}

struct WrittenBytes {
    /// The file these are the bytes of (`None`: no file is being written).
    number: Option<u64>,
    /// The file's bytes; past `end`, zeros up to the next block boundary after a write, or
    /// bytes of an earlier file.
    bytes: AVec<u8, ConstAlign<BLOCK>>,
    /// The file's length, bytes.
    end: usize,
}

impl Default for WrittenBytes {
    fn default() -> Self {
        WrittenBytes {
            number: None,
            bytes: AVec::new(BLOCK),
            end: 0,
        }
    }
}

impl Written {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, WrittenBytes> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, WrittenBytes> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// File `number` is the one being written from now on; it holds `bytes`.
    pub fn start(&self, number: u64, bytes: &[u8]) {
        let mut inner = self.write();
        inner.number = Some(number);
        inner.bytes.clear();
        inner.bytes.extend_from_slice(bytes);
        inner.end = bytes.len();
    }

    /// No file is being written from now on (reads go to the files).
    pub fn stop(&self) {
        self.write().number = None;
    }

    /// Appends `bytes` to the file's copy (the writer writes them with [`Self::write_blocks`]).
    pub fn append(&self, bytes: &[u8]) {
        let mut inner = self.write();
        let end = inner.end;
        inner.bytes.truncate(end);
        inner.bytes.extend_from_slice(bytes);
        inner.end = end + bytes.len();
    }

    /// Calls `write(offset, blocks)` with the whole blocks that hold the file's bytes from
    /// byte `from` to its end: `offset` is `from` rounded down to a [`BLOCK`], `blocks` a
    /// [`BLOCK`]-aligned buffer of a whole number of blocks, zeros past the end. Readers are
    /// not held up while `write` runs.
    pub fn write_blocks<R>(&self, from: u64, write: impl FnOnce(u64, &[u8]) -> R) -> R {
        {
            let mut inner = self.write();
            let end = inner.end;
            inner.bytes.truncate(end);
            inner.bytes.resize(end.next_multiple_of(BLOCK), 0);
        }
        let inner = self.read();
        let start = (from as usize / BLOCK * BLOCK).min(inner.bytes.len());
        write(start as u64, &inner.bytes[start..])
    }

    /// Copies the bytes of file `number` at `offset` into `buf` if this is that file and it
    /// holds them all.
    fn read_at(&self, number: u64, buf: &mut [u8], offset: u64) -> bool {
        let inner = self.read();
        let Ok(start) = usize::try_from(offset) else {
            return false;
        };
        if inner.number != Some(number) || start.saturating_add(buf.len()) > inner.end {
            return false;
        }
        buf.copy_from_slice(&inner.bytes[start..start + buf.len()]);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_reader_keeps_reading_a_file_removed_and_deleted_after_it_took_the_set() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"held")
            .unwrap();
        let files = OpenFiles::default();
        files.insert(1, Arc::new(File::open(&path).unwrap()));
        let taken = files.current();
        files.remove(1);
        std::fs::remove_file(&path).unwrap();
        assert!(files.current().file(1).is_none());
        let mut bytes = [0u8; 4];
        taken.read_exact_at(1, &mut bytes, 0).unwrap();
        assert_eq!(&bytes, b"held");
        let gone = files.current().read_exact_at(1, &mut bytes, 0).unwrap_err();
        assert_eq!(gone.kind(), std::io::ErrorKind::NotFound);
    }

    /// The file being written is read from memory while it is (whatever the file holds), and
    /// from the file once another one is written or none; whole zero-padded blocks are written
    /// from it.
    #[test]
    fn the_file_being_written_is_read_from_memory_and_written_in_whole_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("2.log");
        std::fs::write(&path, b"on disk, not what memory holds").unwrap();
        let files = OpenFiles::default();
        files.insert(2, Arc::new(File::open(&path).unwrap()));
        files.written().start(2, b"0123");
        files.written().append(b"456789");
        let taken = files.current();
        let mut bytes = [0u8; 6];
        taken.read_exact_at(2, &mut bytes, 4).unwrap();
        assert_eq!(&bytes, b"456789");
        let mut seen = Vec::new();
        files.written().write_blocks(5, |offset, blocks| {
            seen.push((offset, blocks.len(), blocks.as_ptr() as usize % BLOCK));
            assert_eq!(&blocks[..10], b"0123456789");
            assert!(blocks[10..].iter().all(|b| *b == 0));
        });
        assert_eq!(seen, [(0, BLOCK, 0)]);
        // Past the end held: the file.
        let mut past = [0u8; 4];
        taken.read_exact_at(2, &mut past, 9).unwrap();
        assert_eq!(&past, b"not ");
        // Appends after a padded write land at the end, not after the padding.
        files.written().append(&[7u8; BLOCK]);
        files.written().write_blocks(10, |offset, blocks| {
            assert_eq!(offset, 0);
            assert_eq!(blocks.len(), 2 * BLOCK);
            assert_eq!(&blocks[..10], b"0123456789");
            assert!(blocks[10..10 + BLOCK].iter().all(|b| *b == 7));
            assert!(blocks[10 + BLOCK..].iter().all(|b| *b == 0));
        });
        files.written().start(3, b"");
        taken.read_exact_at(2, &mut bytes, 0).unwrap();
        assert_eq!(&bytes, b"on dis");
    }
}

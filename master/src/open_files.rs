//! Files held open for reading, by number, shared between the one writer that creates and
//! deletes them and the readers that must not lose a file in the middle of a read.
//!
//! The Raft log's segment files are one such set ([`crate::raft::segment_log`] keeps it): a
//! job's report and result are read from the log entry that brought them (the index's
//! references, `index/bodies.rs`). A reader takes the set as it is ([`OpenFiles::current`]):
//! taking it copies nothing, and a file deleted afterwards stays readable through the handle
//! the reader holds (a deleted file's blocks live until its last descriptor closes).

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex, MutexGuard};

/// The set as a reader took it: file number → open file.
pub type FileSet = Arc<HashMap<u64, Arc<File>>>;

/// A shared, changing set of open files (see the module documentation). Cloning shares it.
#[derive(Clone, Default)]
pub struct OpenFiles {
    files: Arc<Mutex<FileSet>>,
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

    /// The files as they are now.
    pub fn current(&self) -> FileSet {
        self.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::FileExt;

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
        assert!(!files.current().contains_key(&1));
        let mut bytes = [0u8; 4];
        taken[&1].read_exact_at(&mut bytes, 0).unwrap();
        assert_eq!(&bytes, b"held");
    }
}

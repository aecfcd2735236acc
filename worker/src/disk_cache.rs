//! A disk cache with a byte budget and least-recently-used eviction.
//!
//! Files live under the cache directory by key (`symcache/v<version>/<debug id>`,
//! `download/<hash>`). The index of sizes and last use is kept in memory and rebuilt from the
//! directory (oldest modification first) at start. Before a file is added, the least recently
//! used files are removed until it fits, so the total never exceeds the budget; a file larger
//! than the whole budget is not stored. Writes go to a temporary file first and are renamed
//! into place, so a crash never leaves a half-written entry under its key.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The disk cache.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    budget: u64,
    index: Mutex<Index>,
    /// Signalled when a write settles, for writers waiting for the bytes it held.
    settled: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct Index {
    entries: HashMap<String, (u64, u64)>, // key -> (size, last use tick)
    by_use: BTreeMap<u64, String>,        // tick -> key
    /// Bytes of the entries, and of those being written ([`DiskCache::reserve`]).
    total: u64,
    tick: u64,
    evicted: Evictions,
}

impl Index {
    fn touch(&mut self, key: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some((_, last)) = self.entries.get_mut(key) {
            self.by_use.remove(last);
            *last = tick;
            self.by_use.insert(tick, key.to_owned());
        }
    }

    fn insert(&mut self, key: String, size: u64) {
        self.tick += 1;
        if let Some((old, last)) = self.entries.insert(key.clone(), (size, self.tick)) {
            self.total -= old;
            self.by_use.remove(&last);
        }
        self.total += size;
        self.by_use.insert(self.tick, key);
    }

    /// Removes `key`: its size, when it was there.
    fn remove(&mut self, key: &str) -> Option<u64> {
        let (size, last) = self.entries.remove(key)?;
        self.total -= size;
        self.by_use.remove(&last);
        Some(size)
    }
}

impl DiskCache {
    /// Opens the cache in `dir` (created if needed) with a budget of `budget` bytes, indexing
    /// the files already there and evicting down to the budget.
    pub fn open(dir: &Path, budget: u64) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        scan(dir, &mut found)?;
        found.sort_by_key(|(_, _, mtime)| *mtime);
        let mut index = Index::default();
        for (key, size, _) in found {
            index.insert(key, size);
        }
        let cache = DiskCache {
            dir: dir.to_owned(),
            budget,
            index: Mutex::new(index),
            settled: std::sync::Condvar::new(),
        };
        cache.evict_to(budget);
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads an entry, marking it used. `None` when absent (or unreadable: then it is dropped).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.read(key, |path| std::fs::read(path))
    }

    /// `read` of an entry's file, marking it used; `None` when absent, or when `read` fails
    /// (then the entry is dropped, unless it was stored again meanwhile).
    fn read<T>(&self, key: &str, read: impl FnOnce(&Path) -> std::io::Result<T>) -> Option<T> {
        let (_, seen) = *self.lock().entries.get(key)?;
        match read(&self.dir.join(key)) {
            Ok(value) => {
                self.lock().touch(key);
                Some(value)
            }
            Err(_) => {
                let mut index = self.lock();
                if index
                    .entries
                    .get(key)
                    .is_some_and(|&(_, tick)| tick == seen)
                {
                    index.remove(key);
                    let _ = std::fs::remove_file(self.dir.join(key));
                }
                None
            }
        }
    }

    /// Maps an entry into memory (read-only), marking it used: its pages are the file's, read
    /// as they are touched and dropped by the kernel under memory pressure, never copied into
    /// the heap. The map stays readable after the entry is evicted (the file is removed from
    /// the directory; its space is freed when the map is dropped). `None` when absent (or
    /// unreadable: then it is dropped).
    pub fn map(&self, key: &str) -> Option<symbolic_common::ByteView<'static>> {
        self.read(key, |path| symbolic_common::ByteView::open(path))
    }

    /// Stores `file` (made by [`Self::temporary_file`], written whole) as the entry `key`,
    /// without copying it: renamed into place, least recently used entries evicted first.
    /// Errors: the file is larger than the budget (it is removed), or it cannot be renamed.
    pub fn adopt(&self, key: &str, file: tempfile::NamedTempFile) -> std::io::Result<()> {
        let size = file.as_file().metadata()?.len();
        if !self.reserve(size) {
            return Err(std::io::Error::other(format!(
                "{size} bytes is more than the whole disk cache ({} bytes)",
                self.budget
            )));
        }
        self.settle(key, size, Some(file))
    }

    /// Removes an entry (one found unusable).
    pub fn remove(&self, key: &str) {
        let mut index = self.lock();
        if index.remove(key).is_some() {
            let _ = std::fs::remove_file(self.dir.join(key));
        }
    }

    /// The file of an entry, when it is stored.
    pub fn path(&self, key: &str) -> Option<PathBuf> {
        self.lock()
            .entries
            .contains_key(key)
            .then(|| self.dir.join(key))
    }

    /// Stores an entry, evicting least recently used ones first. Entries larger than the budget
    /// are not stored. I/O errors are logged and the entry is skipped (a cache is optional).
    pub fn put(&self, key: &str, bytes: &[u8]) {
        let size = bytes.len() as u64;
        if !self.reserve(size) {
            return;
        }
        let path = self.dir.join(key);
        let parent = path.parent().unwrap_or(&self.dir);
        // A temporary file in the same directory, renamed into place once whole: a reader never
        // sees half an entry, and one left by a crash is removed at the next open. The temporary
        // file removes itself when the write fails.
        let written = std::fs::create_dir_all(parent)
            .and_then(|()| {
                tempfile::Builder::new()
                    .prefix(TMP_PREFIX)
                    .tempfile_in(parent)
            })
            .and_then(|mut tmp| {
                std::io::Write::write_all(&mut tmp, bytes)?;
                Ok(tmp)
            });
        let stored = match written {
            Ok(tmp) => self.settle(key, size, Some(tmp)),
            Err(e) => {
                let _ = self.settle(key, size, None);
                Err(e)
            }
        };
        if let Err(e) = stored {
            tracing::warn!(key, error = %e, "disk cache write failed");
        }
    }

    /// Takes `size` bytes of the budget for an entry about to be written, evicting least
    /// recently used entries until they fit, all under the index's lock: writers at once never
    /// take more than the budget between them. `false` (nothing taken) when `size` is more
    /// than the whole budget.
    fn reserve(&self, size: u64) -> bool {
        if size > self.budget {
            return false;
        }
        let mut index = self.lock();
        while index.total + size > self.budget {
            let Some(key) = index.by_use.values().next().cloned() else {
                // Every byte is taken by writes under way: wait until one settles.
                index = self.settled.wait(index).unwrap_or_else(|e| e.into_inner());
                continue;
            };
            let _ = std::fs::remove_file(self.dir.join(&key));
            if let Some(evicted) = index.remove(&key) {
                index.evicted.entries += 1;
                index.evicted.bytes += evicted;
                crate::metrics::disk_cache_evicted(evicted);
            }
        }
        index.total += size;
        true
    }

    /// Ends a [`Self::reserve`] of `size` bytes: `file` (written whole) becomes the entry
    /// `key`, renamed into place under the index's lock (so that no eviction runs between the
    /// rename and the index), or, with no file or when the rename fails, the bytes are given
    /// back.
    fn settle(
        &self,
        key: &str,
        size: u64,
        file: Option<tempfile::NamedTempFile>,
    ) -> std::io::Result<()> {
        let path = self.dir.join(key);
        let parent_made = match (&file, path.parent()) {
            (Some(_), Some(parent)) => std::fs::create_dir_all(parent),
            _ => Ok(()),
        };
        let mut index = self.lock();
        index.total -= size;
        let stored = match file {
            Some(file) => parent_made
                .and_then(|()| file.persist(&path).map(|_| ()).map_err(|e| e.error))
                .map(|()| index.insert(key.to_owned(), size)),
            None => Ok(()),
        };
        drop(index);
        self.settled.notify_all();
        stored
    }

    /// Removes least recently used entries until the total is at most `limit` bytes (at open).
    fn evict_to(&self, limit: u64) {
        let mut index = self.lock();
        while index.total > limit {
            let Some(key) = index.by_use.values().next().cloned() else {
                break;
            };
            let _ = std::fs::remove_file(self.dir.join(&key));
            index.remove(&key);
        }
    }

    /// A new empty file in the cache's directory, outside the budget, removed when dropped (and
    /// at the next open when a crash left it): where a debug file is downloaded to be converted.
    pub fn temporary_file(&self) -> std::io::Result<tempfile::NamedTempFile> {
        tempfile::Builder::new()
            .prefix(TMP_PREFIX)
            .tempfile_in(&self.dir)
    }

    /// Bytes currently stored, with those of entries being written.
    pub fn total_bytes(&self) -> u64 {
        self.lock().total
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Entries evicted to make room for others since the cache was opened, and their bytes
    /// (those evicted at open, down to a smaller budget, do not count).
    pub fn evictions(&self) -> Evictions {
        self.lock().evicted
    }
}

/// Entries evicted to make room, and their bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Evictions {
    /// Entries removed.
    pub entries: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Names of temporary files being written (never keys: keys are hex digests and paths).
const TMP_PREFIX: &str = ".tmp-";

/// Every entry under `root`: key (path relative to `root`), size in bytes, last modified.
/// Temporary files a crash left are removed.
fn scan(root: &Path, out: &mut Vec<(String, u64, std::time::SystemTime)>) -> std::io::Result<()> {
    for entry in walkdir::WalkDir::new(root) {
        let entry = entry.map_err(std::io::Error::other)?;
        if !entry.file_type().is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy();
        // Also the `<key>.tmp<pid>` files of versions before tempfile.
        let older_tmp = entry
            .path()
            .extension()
            .is_some_and(|e| e.to_string_lossy().starts_with("tmp"));
        if name.starts_with(TMP_PREFIX) || older_tmp {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let meta = entry.metadata().map_err(std::io::Error::other)?;
        out.push((
            rel.to_string_lossy().into_owned(),
            meta.len(),
            meta.modified().unwrap_or(std::time::UNIX_EPOCH),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_exceeds_its_budget_and_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 100).unwrap();
        cache.put("a", &[1; 40]);
        cache.put("b", &[2; 40]);
        assert!(cache.get("a").is_some()); // a is now more recent than b
        cache.put("c", &[3; 40]); // needs 20 more bytes: b goes
        assert_eq!(cache.total_bytes(), 80);
        assert!(cache.get("b").is_none());
        assert_eq!(cache.get("a").unwrap(), vec![1; 40]);
        assert_eq!(cache.get("c").unwrap(), vec![3; 40]);
        cache.put("huge", &[0; 101]);
        assert!(cache.get("huge").is_none());
        assert!(cache.total_bytes() <= 100);
    }

    /// Puts and adoptions from many threads at once (a worker's job slots and background
    /// conversions): every entry's space is taken under one lock with its evictions, so the
    /// total never goes past the budget, and the directory holds exactly what is counted.
    #[test]
    fn concurrent_writes_never_exceed_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let cache = std::sync::Arc::new(DiskCache::open(dir.path(), 1000).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    let mut over = 0;
                    for i in 0..300 {
                        let size = 100 + (t * 37 + i * 11) % 300;
                        if i % 2 == 0 {
                            cache.put(&format!("p/{t}-{i}"), &vec![1; size]);
                        } else {
                            let mut file = cache.temporary_file().unwrap();
                            std::io::Write::write_all(&mut file, &vec![2; size]).unwrap();
                            cache.adopt(&format!("a/{t}-{i}"), file).unwrap();
                        }
                        if cache.total_bytes() > 1000 {
                            over += 1;
                        }
                    }
                    over
                })
            })
            .collect();
        let over: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(over, 0, "times the total was seen past the budget");
        let mut found = Vec::new();
        scan(dir.path(), &mut found).unwrap();
        let on_disk: u64 = found.iter().map(|(_, size, _)| size).sum();
        assert_eq!(on_disk, cache.total_bytes());
        assert!(on_disk <= 1000, "{on_disk} bytes on disk");
        let counts = cache.evictions();
        let written: u64 = (0..8usize)
            .flat_map(|t| (0..300usize).map(move |i| (100 + (t * 37 + i * 11) % 300) as u64))
            .sum();
        assert_eq!(counts.bytes, written - on_disk);
        assert_eq!(counts.entries, 2400 - found.len() as u64);
    }

    /// Writers replacing the same keys while others evict and remove: every entry the index
    /// counts is a file of its size in the directory. (The race a review found, an eviction
    /// between a rename and the index deleting the new file and leaving its entry counted, is
    /// closed by renaming under the index's lock; its window is too small for this test to
    /// have hit it on the code before, in three runs.)
    #[test]
    fn concurrent_writes_of_the_same_keys_keep_the_index_and_the_directory_equal() {
        let dir = tempfile::tempdir().unwrap();
        let cache = std::sync::Arc::new(DiskCache::open(dir.path(), 600).unwrap());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let cache = cache.clone();
                std::thread::spawn(move || {
                    for i in 0..300 {
                        let key = format!("k/{}", (t + i) % 12);
                        let size = 50 + (t * 13 + i * 7) % 100;
                        if i % 3 == 0 {
                            cache.remove(&key);
                        } else if i % 2 == 0 {
                            cache.put(&key, &vec![1; size]);
                        } else {
                            let mut file = cache.temporary_file().unwrap();
                            std::io::Write::write_all(&mut file, &vec![2; size]).unwrap();
                            cache.adopt(&key, file).unwrap();
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let mut found = Vec::new();
        scan(dir.path(), &mut found).unwrap();
        let mut on_disk: Vec<(String, u64)> = found
            .into_iter()
            .map(|(key, size, _)| (key, size))
            .collect();
        on_disk.sort();
        let index = cache.lock();
        let mut indexed: Vec<(String, u64)> = index
            .entries
            .iter()
            .map(|(key, (size, _))| (key.clone(), *size))
            .collect();
        indexed.sort();
        assert_eq!(indexed, on_disk);
        assert_eq!(
            index.total,
            on_disk.iter().map(|(_, size)| size).sum::<u64>()
        );
        assert!(index.total <= 600);
    }

    #[test]
    fn reopening_keeps_entries_within_a_smaller_budget() {
        let dir = tempfile::tempdir().unwrap();
        {
            let cache = DiskCache::open(dir.path(), 1000).unwrap();
            cache.put("x/one", &[1; 300]);
            cache.put("x/two", &[2; 300]);
        }
        let cache = DiskCache::open(dir.path(), 400).unwrap();
        assert_eq!(cache.total_bytes(), 300);
    }

    #[test]
    fn an_adopted_file_is_an_entry_mapped_whole_and_stays_readable_once_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), 100).unwrap();
        let mut file = cache.temporary_file().unwrap();
        std::io::Write::write_all(&mut file, &[7; 60]).unwrap();
        cache.adopt("s/one", file).unwrap();
        assert_eq!(cache.total_bytes(), 60);
        let mapped = cache.map("s/one").unwrap();
        assert_eq!(&mapped[..], &[7; 60][..]);
        // Evicted for another entry: the map still reads the bytes; the file is gone.
        cache.put("s/two", &[8; 50]);
        assert!(cache.map("s/one").is_none());
        assert!(!dir.path().join("s/one").exists());
        assert_eq!(&mapped[..], &[7; 60][..]);
        // Larger than the whole budget: refused, and the file removed.
        let mut big = cache.temporary_file().unwrap();
        std::io::Write::write_all(&mut big, &[9; 101]).unwrap();
        let path = big.path().to_owned();
        assert!(cache.adopt("s/big", big).is_err());
        assert!(!path.exists());
        assert_eq!(cache.total_bytes(), 50);
    }

    #[test]
    fn a_write_a_crash_cut_short_is_removed_at_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x").join(".tmp-abc123"), [9; 50]).unwrap();
        std::fs::write(dir.path().join("x").join("kept"), [1; 20]).unwrap();
        let cache = DiskCache::open(dir.path(), 1000).unwrap();
        assert_eq!(cache.total_bytes(), 20);
        assert!(!dir.path().join("x").join(".tmp-abc123").exists());
        assert_eq!(cache.get("x/kept").unwrap(), vec![1; 20]);
        // Entries are whole files: nothing else is left in the directory after a write.
        cache.put("x/new", &[2; 30]);
        let names: Vec<String> = std::fs::read_dir(dir.path().join("x"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["kept", "new"]);
    }
}

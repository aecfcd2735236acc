//! Zeros written ahead of the active segment's last record by a thread of their own, so that an
//! append overwrites blocks the file already has and its `fdatasync` flushes the data alone: no
//! change of the file's size, no block allocation, no journal commit for each Ready.
//!
//! Measured on the development machine (ext4 on a virtio disk, `fdatasync` after each 20 KB
//! write, 300 writes): appending, 0.41-0.65 ms wall and 0.09-0.13 ms CPU per write; over zeros
//! already on disk, 0.24-0.30 ms and 0.05-0.07 ms; over `fallocate`d space (unwritten extents,
//! converted at the first write, a journal commit again) 0.45-0.52 ms and 0.10-0.11 ms, so the
//! zeros are written, not reserved. etcd's `wal` preallocates its segments for the same reason
//! (`fileutil.Preallocate`, in a pipeline goroutine); RocksDB recycles its log files.
//!
//! The protocol, one mutex: before each write the log says where it ends ([`Zeroer::reserve`]);
//! the thread writes zeros only past that point, and holds the mutex while it writes, so zeros
//! never land on a record. It starts once the segment holds [`START_AFTER`] bytes (a small log,
//! as most tests make, writes no zeros) and keeps [`AHEAD`] bytes of zeros ahead, up to the
//! segment's size. A write error ends zeroing for that file (appends then extend the file, as
//! they did without it); it is logged, not fatal.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

/// A segment gets zeros ahead once it holds this many bytes.
pub const START_AFTER: u64 = 1 << 20;
/// Bytes of zeros kept ahead of the last record; written in one go when fewer than half are
/// left.
pub const AHEAD: u64 = 8 << 20;
/// One `pwrite` of zeros, bytes (the mutex is held for one).
const CHUNK: usize = 1 << 20;
static ZEROS: [u8; CHUNK] = [0; CHUNK];

/// The zeroing thread of one segment log (stopped and joined on drop).
pub struct Zeroer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    /// The segment being zeroed ahead (None: none, or zeroing failed for it).
    file: Option<File>,
    /// Where the segment's last record written (or being written) ends, bytes.
    data_end: u64,
    /// The file's length: zeros from the data end up to here.
    zeroed_end: u64,
    /// Zeros stop here (the segment's size).
    limit: u64,
    stop: bool,
}

impl State {
    /// Whether fewer than half of [`AHEAD`] bytes of zeros are left ahead of the data.
    fn wants_zeros(&self) -> bool {
        self.file.is_some()
            && self.data_end >= START_AFTER
            && self.zeroed_end < self.limit
            && self.zeroed_end < self.data_end + AHEAD / 2
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Zeroer {
    /// Starts the thread for no segment yet ([`Self::switch`] gives it one).
    pub fn start() -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                file: None,
                data_end: 0,
                zeroed_end: 0,
                limit: 0,
                stop: false,
            }),
            wake: Condvar::new(),
        });
        let thread = std::thread::Builder::new()
            .name("raft-log-zeros".into())
            .spawn({
                let shared = shared.clone();
                move || run(&shared)
            })
            .ok();
        if thread.is_none() {
            tracing::warn!("no thread for the raft log's zeros: appends extend the segment");
        }
        Zeroer { shared, thread }
    }

    /// Zeros ahead of segment `file` (its records end at `data_end`, its length is `len`, all
    /// zeros past the records; zeros stop at `limit`) from now on, none for the segment before
    /// (once this returns, nothing more is written to it). `None`: no segment.
    pub fn switch(&self, file: Option<&File>, data_end: u64, len: u64, limit: u64) {
        let mut state = lock(&self.shared);
        state.file = file.and_then(|f| {
            f.try_clone()
                .inspect_err(|e| tracing::warn!(error = %e, "raft log segment: no zeros ahead"))
                .ok()
        });
        state.data_end = data_end;
        state.zeroed_end = len.max(data_end);
        state.limit = limit;
        if state.wants_zeros() {
            self.shared.wake.notify_one();
        }
    }

    /// The log's next write ends at `end`: no zero is written below it from now on.
    pub fn reserve(&self, end: u64) {
        let mut state = lock(&self.shared);
        state.data_end = state.data_end.max(end);
        state.zeroed_end = state.zeroed_end.max(end);
        if state.wants_zeros() {
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Zeroer {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared) {
    let mut state = lock(shared);
    loop {
        if state.stop {
            return;
        }
        if !state.wants_zeros() {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        // Up to AHEAD past the data, one chunk per hold of the mutex.
        let target = (state.data_end + AHEAD).min(state.limit);
        while !state.stop && state.file.is_some() && state.zeroed_end < target {
            let start = state.zeroed_end.max(state.data_end);
            let len = (target - start).min(CHUNK as u64) as usize;
            let file = state.file.as_ref().expect("checked above");
            match file.write_all_at(&ZEROS[..len], start) {
                Ok(()) => state.zeroed_end = start + len as u64,
                Err(e) => {
                    tracing::warn!(error = %e, "raft log segment: zeros ahead not written; appends extend it");
                    state.file = None;
                }
            }
            // Let the log write between chunks.
            drop(state);
            state = lock(shared);
        }
        // The new length and blocks made durable here, not by the log's next fdatasync.
        let Some(file) = state.file.as_ref().and_then(|f| f.try_clone().ok()) else {
            continue;
        };
        drop(state);
        if let Err(e) = file.sync_data() {
            tracing::warn!(error = %e, "raft log segment: zeros ahead not synced");
        }
        state = lock(shared);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_follow_the_data_and_never_overwrite_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment");
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let zeroer = Zeroer::start();
        zeroer.switch(Some(&file), 0, 0, 64 << 20);
        // Below START_AFTER: nothing is zeroed.
        let record = vec![0xab_u8; 300_000];
        zeroer.reserve(record.len() as u64);
        file.write_all_at(&record, 0).unwrap();
        let mut end = record.len() as u64;
        // Past it: zeros follow, records keep landing where they were written.
        for _ in 0..10 {
            zeroer.reserve(end + record.len() as u64);
            file.write_all_at(&record, end).unwrap();
            end += record.len() as u64;
        }
        // Wait until the thread has zeroed at least half of AHEAD past the data (it zeroes
        // again whenever fewer are left): a condition, not a sleep.
        let want = end + AHEAD / 2;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::fs::metadata(&path).unwrap().len() < want {
            assert!(std::time::Instant::now() < deadline, "no zeros ahead");
            std::thread::yield_now();
        }
        drop(zeroer);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() as u64 >= want && bytes.len() as u64 <= end + AHEAD);
        assert!(bytes[..end as usize].iter().all(|b| *b == 0xab));
        assert!(bytes[end as usize..].iter().all(|b| *b == 0));
    }

    #[test]
    fn a_segment_switched_away_from_gets_no_more_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let open = |name: &str| {
            std::fs::OpenOptions::new()
                .create_new(true)
                .read(true)
                .write(true)
                .open(dir.path().join(name))
                .unwrap()
        };
        let (old, new) = (open("old"), open("new"));
        let zeroer = Zeroer::start();
        zeroer.switch(Some(&old), 0, 0, 64 << 20);
        zeroer.reserve(START_AFTER);
        zeroer.switch(Some(&new), 0, 0, 64 << 20);
        let old_len = old.metadata().unwrap().len();
        // Whatever was written before the switch stays; nothing after it.
        zeroer.reserve(START_AFTER);
        let want = START_AFTER + AHEAD;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while new.metadata().unwrap().len() < want {
            assert!(std::time::Instant::now() < deadline, "no zeros ahead");
            std::thread::yield_now();
        }
        drop(zeroer);
        assert_eq!(old.metadata().unwrap().len(), old_len);
    }
}

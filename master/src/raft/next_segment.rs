//! The Raft log's next segment made ahead by a thread of its own: a file of zeros as long as a
//! segment (`<log dir>/next.tmp`), written and synced before the log needs it, so that appends
//! to the segment it becomes overwrite blocks the file already has. A direct write of those
//! blocks then changes no file size and allocates no block: its `fdatasync` flushes the data
//! alone (`segment_log`, "Writes").
//!
//! Measured on the development machine (ext4 on a virtio disk, a 23 KB write and `fdatasync`
//! 2,000 times, three processes at once): appending through the page cache 0.066-0.069 ms CPU
//! per write, appending with `O_DIRECT` 0.051-0.065, `O_DIRECT` over zeros already written
//! 0.020-0.024. `fallocate` reserves unwritten extents, which the first write converts (a
//! metadata write again), so the zeros are written. etcd's `wal` makes its next segment ahead
//! the same way (`file_pipeline.go`); PostgreSQL fills a new WAL segment with zeros
//! (`wal_init_zero`).
//!
//! The thread makes one file at a time, when asked ([`NextSegment::want`], once the active
//! segment holds [`WANT_AFTER`] bytes, so that a small log, as most tests make, never gets
//! one), and the log takes it at its next rotation ([`NextSegment::take`]); without one ready
//! the log starts an empty file, as it did before. The zeros are paced (1 MiB every
//! [`CHUNK_EVERY`]) and written at the idle I/O priority: unpaced, three masters' 64 MiB of
//! zeros filled the disk's queue ahead of the log's `fdatasync`s, and the load test's p99 rose
//! from 26-32 to 36-41 ms. Nothing is made on a file system that
//! refuses direct I/O or is held in memory (`tmpfs`: no blocks to allocate, and the zeros would
//! take memory). A failure to make one is logged and ends the making; it is never fatal.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use aligned_vec::{AVec, ConstAlign};

use crate::open_files::BLOCK;

/// The name of the file being made or ready, in the log's directory.
pub const FILE_NAME: &str = "next.tmp";
/// The next segment is asked for once the active one holds this many bytes.
pub const WANT_AFTER: u64 = 1 << 20;
/// One write of zeros, bytes (the thread checks whether it must stop between two).
const CHUNK: usize = 1 << 20;
/// The time between two writes of zeros: 64 MiB/s at most, a segment in one second, where the
/// log fills one in about three under the load test.
const CHUNK_EVERY: std::time::Duration = std::time::Duration::from_millis(16);

/// Opens `path` for direct I/O (`O_DIRECT`), created if `create`; `Ok(None)` when the file
/// system refuses direct I/O (`EINVAL`).
pub fn open_direct(path: &Path, create: bool) -> io::Result<Option<File>> {
    match OpenOptions::new()
        .write(true)
        .create(create)
        .truncate(false)
        .custom_flags(libc::O_DIRECT)
        .open(path)
    {
        Ok(file) => Ok(Some(file)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `dir` is on a file system held in memory (`tmpfs`).
fn in_memory(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `path` is a NUL-terminated string and `stat` a zeroed struct statfs that
    // statfs(2) fills.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    let found = unsafe { libc::statfs(path.as_ptr(), &mut stat) } == 0;
    found && stat.f_type == libc::TMPFS_MAGIC
}

/// The thread that makes the next segment (stopped and joined on drop).
pub struct NextSegment {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    path: PathBuf,
    len: u64,
}

#[derive(Default)]
struct State {
    /// The log asked for a file and has not taken it.
    wanted: bool,
    /// A file made and synced, not yet taken.
    ready: Option<File>,
    /// Making files has ended (a failure, or a file system where they gain nothing).
    off: bool,
    stop: bool,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl NextSegment {
    /// Starts the thread for the log in `dir`, whose files are to be `len` bytes long; a file
    /// left by an earlier run is deleted (it may be cut short).
    pub fn start(dir: &Path, len: u64) -> Self {
        let path = dir.join(FILE_NAME);
        let _ = std::fs::remove_file(&path);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                off: in_memory(dir),
                ..State::default()
            }),
            wake: Condvar::new(),
            path,
            len,
        });
        let thread = std::thread::Builder::new()
            .name("raft-log-next".into())
            .spawn({
                let shared = shared.clone();
                move || run(&shared)
            })
            .inspect_err(
                |e| tracing::warn!(error = %e, "no thread to make the raft log's next segment"),
            )
            .ok();
        if thread.is_none() {
            lock(&shared).off = true;
        }
        NextSegment { shared, thread }
    }

    /// Asks for the next segment, if none is being made or ready.
    pub fn want(&self) {
        let mut state = lock(&self.shared);
        if !state.wanted && !state.off {
            state.wanted = true;
            self.shared.wake.notify_one();
        }
    }

    /// The file made, if one is ready: it is at [`FILE_NAME`] in the log's directory, opened
    /// for direct writes, synced; the caller renames it.
    pub fn take(&self) -> Option<File> {
        let mut state = lock(&self.shared);
        let file = state.ready.take()?;
        state.wanted = false;
        Some(file)
    }
}

#[cfg(test)]
impl NextSegment {
    /// Whether a file is made and not yet taken.
    pub(super) fn is_ready(&self) -> bool {
        lock(&self.shared).ready.is_some()
    }

    /// Whether making files has ended (or never started).
    fn is_off(&self) -> bool {
        lock(&self.shared).off
    }
}

impl Drop for NextSegment {
    fn drop(&mut self) {
        lock(&self.shared).stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Makes this thread's disk I/O the idle class's (`ioprio_set(2)`): the zeros wait for every
/// other request of the disk's scheduler, the log's appends and `fdatasync`s first. Best effort.
fn idle_io_priority() {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_IDLE: libc::c_long = 3;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    // SAFETY: ioprio_set takes three integers; 0 is the calling thread.
    let set = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0,
            IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT,
        )
    };
    if set != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "the raft log's next segment: no idle I/O priority");
    }
}

fn run(shared: &Shared) {
    idle_io_priority();
    let mut state = lock(shared);
    loop {
        if state.stop {
            return;
        }
        if state.off || !state.wanted || state.ready.is_some() {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        drop(state);
        let made = make(shared);
        state = lock(shared);
        match made {
            Ok(Some(file)) => state.ready = Some(file),
            // Stopped while making it.
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(
                    path = %shared.path.display(),
                    error = %e,
                    "the raft log's next segment could not be made ahead; new segments start empty"
                );
                let _ = std::fs::remove_file(&shared.path);
                state.off = true;
            }
        }
    }
}

/// Writes the file of zeros and syncs it; `Ok(None)` when told to stop meanwhile (the file is
/// deleted) or when the file system refuses direct I/O (making files ends).
fn make(shared: &Shared) -> io::Result<Option<File>> {
    let Some(file) = open_direct(&shared.path, true)? else {
        let _ = std::fs::remove_file(&shared.path);
        lock(shared).off = true;
        return Ok(None);
    };
    file.set_len(0)?;
    let mut zeros: AVec<u8, ConstAlign<BLOCK>> = AVec::new(BLOCK);
    zeros.resize(CHUNK, 0);
    let mut offset = 0;
    while offset < shared.len {
        if lock(shared).stop {
            drop(file);
            let _ = std::fs::remove_file(&shared.path);
            return Ok(None);
        }
        let len = (shared.len - offset).min(CHUNK as u64) as usize;
        file.write_all_at(&zeros[..len.next_multiple_of(BLOCK)], offset)?;
        offset += len.next_multiple_of(BLOCK) as u64;
        // Paced: at most BYTES_PER_SECOND, so that the zeros never fill the disk's queue.
        std::thread::sleep(CHUNK_EVERY);
    }
    file.sync_all()?;
    Ok(Some(file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asked for, a file of zeros of the segment's length appears and is handed over once;
    /// not asked for, none is made.
    #[test]
    fn a_file_of_zeros_is_made_when_asked_and_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let next = NextSegment::start(dir.path(), 3 << 20);
        assert!(next.take().is_none());
        assert!(!dir.path().join(FILE_NAME).exists(), "not asked for");
        next.want();
        // Made by the thread: wait for it (a condition, not a sleep).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let file = loop {
            if let Some(file) = next.take() {
                break file;
            }
            assert!(std::time::Instant::now() < deadline, "no file made");
            std::thread::yield_now();
        };
        assert_eq!(file.metadata().unwrap().len(), 3 << 20);
        let bytes = std::fs::read(dir.path().join(FILE_NAME)).unwrap();
        assert!(bytes.iter().all(|b| *b == 0));
        assert!(next.take().is_none(), "taken once");
    }

    #[test]
    fn nothing_is_made_in_memory() {
        let dir = tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm");
        assert!(in_memory(dir.path()));
        let next = NextSegment::start(dir.path(), 1 << 20);
        assert!(next.is_off(), "no file is made on tmpfs");
        next.want();
        assert!(next.take().is_none());
        drop(next);
        assert!(!dir.path().join(FILE_NAME).exists());
        // On the disk the tests' temporary files are on, files are made.
        let on_disk = tempfile::tempdir().unwrap();
        assert!(!in_memory(on_disk.path()));
        assert!(!NextSegment::start(on_disk.path(), 1 << 20).is_off());
    }
}

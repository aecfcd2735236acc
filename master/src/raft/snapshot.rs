//! Snapshots streamed between masters in chunks, never whole in memory.
//!
//! Raft's `MsgSnapshot` carries only [`MARKER`] as its data; the index itself travels beside it
//! on a `Peer/InstallSnapshot` call:
//!
//! 1. When raft-rs asks the leader's storage for a snapshot for a follower
//!    (`Storage::snapshot`), the storage takes the state machine's [`SnapshotData`] (for the
//!    index, one read transaction at its applied index) and leaves it in the [`Outbox`] under
//!    the follower's id; the snapshot's metadata is that applied index and its term.
//! 2. The follower's sending task ([`super::transport`]) takes the source and streams it
//!    ([`send`]): a thread writes the records ([`SnapshotData::write_to`]) into chunks of
//!    `chunk_bytes` (4 MiB by default), each with its CRC-32, into a channel of
//!    [`CHUNKS_IN_FLIGHT`]; the last chunk carries the SHA-256 and length of the whole stream.
//!    The leader's memory for a transfer is a few chunks, whatever the index's size.
//! 3. The follower ([`Receiver`]) writes the chunks to `snapshots/incoming-<leader>.part` in
//!    its data directory, checking offsets and checksums; once the whole stream checks, it
//!    fsyncs the file, renames it to `snapshots/<index>-<term>.snap` and only then hands the
//!    `MsgSnapshot` to its node. Anything else (a cut call, a bad checksum) deletes the part
//!    file and leaves the index as it was; the leader is told the transfer failed and raft-rs
//!    sends a new snapshot later.
//! 4. The follower's node, handling the Ready that holds the snapshot, restores the index from
//!    the file in one durable write transaction ([`StateMachine::restore_from`]), resets its log
//!    after the snapshot's index, and deletes the file.
//!
//! The layout follows what etcd and TiKV do (a small snapshot message in Raft, the data sent
//! beside it in chunks); the record format is the state machine's (the index's:
//! `index/snapshot.rs`).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};
use symcluster_proto::cluster::v1 as pb;
use tokio::sync::mpsc;

use super::error::RaftError;
use super::state_machine::{SnapshotData, StateMachine};
use crate::failpoints;
use crate::metrics;

/// The data of every `MsgSnapshot` a streaming leader sends: the index travels beside it.
/// (A leader before streamed snapshots put the whole `IndexSnapshot` message there.)
pub const MARKER: &[u8] = b"symcluster-snapshot-stream/1";

/// Chunks queued between the thread that reads the index and the call that sends them.
pub const CHUNKS_IN_FLIGHT: usize = 2;

/// A transfer whose receiver takes no chunk for this long is given up: the thread stops, drops
/// its read transaction, and the call ends without its last chunk (raft-rs sends a new snapshot
/// later; a backup fails).
pub const STALL: Duration = Duration::from_secs(30);

/// Snapshot sources taken for followers, by follower id, until their sending task takes them.
#[derive(Clone, Default)]
pub struct Outbox(Arc<Mutex<HashMap<u64, Box<dyn SnapshotData>>>>);

impl Outbox {
    /// Leaves `source` for follower `to` (replacing one not sent yet).
    pub fn put(&self, to: u64, source: Box<dyn SnapshotData>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(to, source);
    }

    /// Takes the source left for follower `to`.
    pub fn take(&self, to: u64) -> Option<Box<dyn SnapshotData>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&to)
    }
}

/// Where a complete, checked snapshot waits for the node: `<dir>/<index>-<term>.snap`.
pub fn ready_path(dir: &Path, index: u64, term: u64) -> PathBuf {
    dir.join(format!("{index:020}-{term}.snap"))
}

/// A part file of its own for each call (a retried transfer may overlap the one it replaces).
fn incoming_path(dir: &Path, from: u64) -> PathBuf {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    dir.join(format!("incoming-{from}-{call}.part"))
}

/// Deletes the received snapshots waiting in `dir` (one Raft did not install, or one restored).
pub fn remove_ready(dir: &Path) {
    let Ok(files) = fs::read_dir(dir) else {
        return;
    };
    for file in files.flatten() {
        if file.file_name().to_string_lossy().ends_with(".snap")
            && let Err(e) = fs::remove_file(file.path())
        {
            tracing::warn!(path = %file.path().display(), error = %e, "a snapshot file cannot be deleted");
        }
    }
}

/// Empties (or creates) the snapshot directory: what a previous run left there is either a cut
/// transfer or a snapshot that was restored or refused.
pub fn clear_dir(dir: &Path) -> io::Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir)?;
    }
    fs::create_dir_all(dir)
}

/// Whether the snapshot of `message` was received whole and waits in `dir` (a `MsgSnapshot`
/// with [`MARKER`] data that did not come with its stream is dropped).
pub fn is_ready(dir: &Path, message: &raft::prelude::Message) -> bool {
    let meta = message.get_snapshot().get_metadata();
    ready_path(dir, meta.index, meta.term).exists()
}

/// Restores `machine` from the received snapshot of `meta` in `dir`, then deletes the file.
/// Errors: the file is missing or unreadable, does not restore, or reflects another log
/// entry than `meta` says.
pub fn restore<S: StateMachine>(
    machine: &S,
    dir: &Path,
    meta: &raft::prelude::SnapshotMetadata,
) -> Result<(), RaftError> {
    let path = ready_path(dir, meta.index, meta.term);
    let file = File::open(&path).map_err(|source| RaftError::Io {
        what: format!("the snapshot {} cannot be read", path.display()),
        source,
    })?;
    let restored = machine
        .restore_from(&mut BufReader::with_capacity(1 << 20, file))
        .map_err(RaftError::StateMachine)?;
    if restored != (meta.index, meta.term) {
        return Err(RaftError::Inconsistent(format!(
            "the snapshot file reflects entry {} of term {}, not {} of term {}",
            restored.0, restored.1, meta.index, meta.term
        )));
    }
    // This one and any other that waited (a transfer Raft did not install).
    remove_ready(dir);
    Ok(())
}

/// Writes the stream into chunks sent on a channel (the sending thread's side).
struct ChunkWriter {
    tx: mpsc::Sender<pb::SnapshotChunk>,
    chunk_bytes: usize,
    buffer: Vec<u8>,
    offset: u64,
    sha256: Sha256,
    /// The first chunk's `from` and Raft message.
    first: Option<(u64, Vec<u8>)>,
}

impl ChunkWriter {
    fn send(&mut self, last: bool) -> io::Result<()> {
        let data = std::mem::replace(&mut self.buffer, Vec::with_capacity(self.chunk_bytes));
        self.sha256.update(&data);
        let (from, message) = self.first.take().unwrap_or_default();
        let chunk = pb::SnapshotChunk {
            from,
            message,
            offset: self.offset,
            crc32: crc32fast::hash(&data),
            last,
            sha256: if last {
                self.sha256.clone().finalize().to_vec()
            } else {
                Vec::new()
            },
            total_bytes: if last {
                self.offset + data.len() as u64
            } else {
                0
            },
            data,
        };
        self.offset += chunk.data.len() as u64;
        // Waits for room at most `STALL`: a receiver that stopped reading does not hold the
        // read transaction (and this thread) forever.
        let deadline = Instant::now() + STALL;
        let mut chunk = chunk;
        loop {
            match self.tx.try_send(chunk) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the snapshot call ended",
                    ));
                }
                Err(mpsc::error::TrySendError::Full(back)) => {
                    if Instant::now() >= deadline {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!("the receiver took no chunk for {} s", STALL.as_secs()),
                        ));
                    }
                    chunk = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let room = self.chunk_bytes - self.buffer.len();
        let n = room.min(bytes.len());
        self.buffer.extend_from_slice(&bytes[..n]);
        if self.buffer.len() == self.chunk_bytes {
            self.send(false)?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Streams `source` to a follower as `SnapshotChunk`s: the first carries `from` and the
/// encoded `MsgSnapshot`. A thread reads the index and fills chunks of `chunk_bytes` into a
/// channel of [`CHUNKS_IN_FLIGHT`]; it ends, dropping its read transaction, when the stream is
/// written, the receiving side is dropped, or no chunk was taken for [`STALL`] (the channel
/// then closes before the last chunk). Returns the chunks' receiving side.
pub fn send(
    source: Box<dyn SnapshotData>,
    from: u64,
    message: Vec<u8>,
    chunk_bytes: usize,
) -> io::Result<mpsc::Receiver<pb::SnapshotChunk>> {
    let (tx, rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let chunk_bytes = chunk_bytes.max(1);
    std::thread::Builder::new()
        .name("raft-snapshot".into())
        .spawn(move || {
            let mut writer = ChunkWriter {
                tx,
                chunk_bytes,
                buffer: Vec::with_capacity(chunk_bytes),
                offset: 0,
                sha256: Sha256::new(),
                first: Some((from, message)),
            };
            let written = source
                .write_to(&mut writer)
                .and_then(|()| writer.send(true).map_err(Into::into));
            if let Err(e) = written {
                tracing::debug!(error = %e, index = source.index(), "snapshot stream ended early");
            }
        })?;
    Ok(rx)
}

/// The receiving side of one `InstallSnapshot` call.
pub struct Receiver {
    dir: PathBuf,
    from: u64,
    part: PathBuf,
    file: io::BufWriter<File>,
    received: u64,
    sha256: Sha256,
    done: bool,
}

/// Why a received stream was refused.
fn refused(what: String) -> tonic::Status {
    tonic::Status::data_loss(what)
}

impl Receiver {
    /// Starts receiving a snapshot from member `from` into `dir`.
    pub fn start(dir: &Path, from: u64) -> Result<Self, tonic::Status> {
        let part = incoming_path(dir, from);
        let file = File::create(&part).map_err(|e| {
            tonic::Status::internal(format!("cannot create {}: {e}", part.display()))
        })?;
        Ok(Receiver {
            dir: dir.to_path_buf(),
            from,
            part,
            file: io::BufWriter::with_capacity(1 << 20, file),
            received: 0,
            sha256: Sha256::new(),
            done: false,
        })
    }

    /// Writes `chunk` after checking its place and CRC-32; on the last chunk, checks the whole
    /// stream and moves the file to [`ready_path`] for (`index`, `term`).
    pub fn chunk(
        &mut self,
        chunk: &pb::SnapshotChunk,
        index: u64,
        term: u64,
    ) -> Result<(), tonic::Status> {
        if self.done {
            return Err(refused("a chunk after the last one".into()));
        }
        if chunk.offset != self.received {
            return Err(refused(format!(
                "a chunk at byte {} where {} were received",
                chunk.offset, self.received
            )));
        }
        if crc32fast::hash(&chunk.data) != chunk.crc32 {
            return Err(refused(format!(
                "the chunk at byte {} fails its CRC-32",
                chunk.offset
            )));
        }
        let io = |e: io::Error| {
            tonic::Status::internal(format!("cannot write {}: {e}", self.part.display()))
        };
        self.file.write_all(&chunk.data).map_err(io)?;
        self.sha256.update(&chunk.data);
        self.received += chunk.data.len() as u64;
        metrics::RAFT_SNAPSHOT_BYTES
            .with_label_values(&["received"])
            .inc_by(chunk.data.len() as u64);
        if !chunk.last {
            failpoints::point!(failpoints::SNAPSHOT_CHUNK_WRITTEN);
            return Ok(());
        }
        self.done = true;
        if chunk.total_bytes != self.received
            || self.sha256.clone().finalize().as_slice() != chunk.sha256.as_slice()
        {
            return Err(refused(format!(
                "the snapshot stream of {} bytes fails its SHA-256 or length ({} said)",
                self.received, chunk.total_bytes
            )));
        }
        let io = |e: io::Error| {
            tonic::Status::internal(format!("cannot store {}: {e}", self.part.display()))
        };
        self.file.flush().map_err(io)?;
        self.file.get_ref().sync_all().map_err(io)?;
        let ready = ready_path(&self.dir, index, term);
        fs::rename(&self.part, &ready).map_err(io)?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io)?;
        tracing::info!(
            from = self.from,
            index,
            term,
            bytes = self.received,
            "snapshot received"
        );
        Ok(())
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.received
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        // A cut or refused transfer leaves nothing behind (the file was renamed when complete).
        let _ = fs::remove_file(&self.part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `data` cut into chunks of `size` as [`send`] cuts a stream.
    fn chunks(data: &[u8], size: usize) -> Vec<pb::SnapshotChunk> {
        let pieces: Vec<&[u8]> = data.chunks(size).collect();
        let mut offset = 0;
        pieces
            .iter()
            .enumerate()
            .map(|(i, piece)| {
                let last = i + 1 == pieces.len();
                let chunk = pb::SnapshotChunk {
                    offset,
                    data: piece.to_vec(),
                    crc32: crc32fast::hash(piece),
                    last,
                    sha256: if last {
                        Sha256::digest(data).to_vec()
                    } else {
                        Vec::new()
                    },
                    total_bytes: if last { data.len() as u64 } else { 0 },
                    ..Default::default()
                };
                offset += piece.len() as u64;
                chunk
            })
            .collect()
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_whole_stream_is_moved_into_place_and_a_bad_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();

        let mut receiver = Receiver::start(dir.path(), 2).unwrap();
        for chunk in chunks(&data, 4096) {
            receiver.chunk(&chunk, 90, 3).unwrap();
        }
        assert_eq!(receiver.received(), 10_000);
        drop(receiver);
        assert_eq!(files(dir.path()), ["00000000000000000090-3.snap"]);
        assert_eq!(fs::read(ready_path(dir.path(), 90, 3)).unwrap(), data);
        clear_dir(dir.path()).unwrap();

        // A chunk whose bytes changed on the way, a chunk out of place, a stream whose whole
        // does not check: refused as DATA_LOSS, and the part file is gone once the call ends.
        let mut flipped = chunks(&data, 4096);
        flipped[1].data[5] ^= 1;
        let mut skipped = chunks(&data, 4096);
        skipped.remove(1);
        let mut wrong_whole = chunks(&data, 4096);
        wrong_whole.last_mut().unwrap().sha256[0] ^= 1;
        for (what, stream) in [
            ("flipped", flipped),
            ("skipped", skipped),
            ("wrong whole", wrong_whole),
        ] {
            let mut receiver = Receiver::start(dir.path(), 2).unwrap();
            let refused = stream
                .iter()
                .map(|c| receiver.chunk(c, 90, 3))
                .find_map(Result::err)
                .unwrap_or_else(|| panic!("{what}: accepted"));
            assert_eq!(refused.code(), tonic::Code::DataLoss, "{what}: {refused}");
            drop(receiver);
            assert!(
                files(dir.path()).is_empty(),
                "{what}: {:?}",
                files(dir.path())
            );
        }
    }
}

//! Debug file downloads against a real S3 (Garage) that stalls half-way: the transfer is cut
//! when no byte comes, resumed where it stopped with a ranged GET, and bounded by the time its
//! size allows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use symcluster_loadtest::cluster::Garage;
use symcluster_sources::{DownloadLimits, Source};

/// `len` bytes no compressor shrinks (xorshift64).
fn incompressible(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// The object's size: far more than the loopback socket buffers hold, so that a pause after
/// the first 8 MiB leaves most of it unsent.
const SIZE: usize = 48 << 20;
const KEY: &str = "test/big-debug-file";

async fn garage_with_object(dir: &std::path::Path) -> (Garage, Source, Vec<u8>) {
    let garage = Garage::start(&dir.join("garage"));
    let bucket = garage.bucket().await;
    let bytes = incompressible(SIZE);
    bucket.put(KEY, bytes.clone()).await.unwrap();
    (garage, bucket, bytes)
}

/// Pauses Garage (SIGSTOP) the first time more than 8 MiB were received, and continues it
/// (SIGCONT) `paused_for` later from another thread, or when dropped (it must be dropped before
/// the Garage guard); counts every byte received.
struct Staller {
    pid: u32,
    paused_for: Duration,
    paused: AtomicBool,
    /// Set once Garage was continued.
    continued: Arc<AtomicBool>,
    received: AtomicU64,
    /// Wakes the thread that continues Garage (dropped: continue now), and that thread.
    waker: Mutex<Option<(mpsc::Sender<()>, std::thread::JoinHandle<()>)>>,
}

impl Staller {
    fn new(garage: &Garage, paused_for: Duration) -> Self {
        Staller {
            pid: garage.pid().expect("garage runs"),
            paused_for,
            paused: AtomicBool::new(false),
            continued: Arc::new(AtomicBool::new(false)),
            received: AtomicU64::new(0),
            waker: Mutex::new(None),
        }
    }

    fn progress(&self, bytes: u64) {
        let received = self.received.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if received > 8 << 20 && !self.paused.swap(true, Ordering::Relaxed) {
            // SAFETY: kill(2) on the test's Garage, which outlives this staller.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGSTOP) };
            let (pid, paused_for) = (self.pid, self.paused_for);
            let continued = self.continued.clone();
            let (wake, woken) = mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                let _ = woken.recv_timeout(paused_for);
                // SAFETY: as above.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGCONT) };
                continued.store(true, Ordering::Relaxed);
            });
            *self.waker.lock().unwrap() = Some((wake, thread));
        }
    }
}

impl Drop for Staller {
    fn drop(&mut self) {
        if let Some((wake, thread)) = self.waker.lock().unwrap().take() {
            drop(wake);
            let _ = thread.join();
        }
    }
}

/// S3 stops sending for 2 s after 8 MiB of a 48 MiB object: the download notices the stall
/// (no byte for 300 ms), asks for the rest with a ranged GET once S3 answers again, and ends
/// with the object's exact bytes, each byte received once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_cut_half_way_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let (garage, bucket, bytes) = garage_with_object(dir.path()).await;
    let staller = Staller::new(&garage, Duration::from_secs(2));
    let limits = DownloadLimits {
        idle_timeout: Duration::from_millis(300),
        min_bytes_per_sec: 1 << 20,
        max_resumes: 5,
    };
    let path = dir.path().join("download");
    let mut file = tokio::fs::File::create(&path).await.unwrap();
    let progress = |n: u64| staller.progress(n);
    let downloaded = bucket
        .download_to(KEY, &mut file, &limits, &progress)
        .await
        .unwrap()
        .expect("the object exists");
    drop(file);
    assert!(
        staller.paused.load(Ordering::Relaxed),
        "S3 was never paused"
    );
    assert!(
        staller.continued.load(Ordering::Relaxed),
        "ended while S3 was paused"
    );
    assert!(downloaded.resumes >= 1, "{downloaded:?}");
    assert_eq!(downloaded.bytes, SIZE as u64);
    // Resumed, not restarted: every byte came once.
    assert_eq!(staller.received.load(Ordering::Relaxed), SIZE as u64);
    assert!(
        std::fs::read(&path).unwrap() == bytes,
        "the downloaded bytes differ"
    );
}

/// A download that cannot end in the time its size allows (48 MiB at no less than 64 MiB/s,
/// plus 300 ms) fails with a message that says so while S3 is still paused (for 60 s): it does
/// not wait for S3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_slower_than_its_size_allows_fails_in_that_time() {
    let dir = tempfile::tempdir().unwrap();
    let (garage, bucket, _) = garage_with_object(dir.path()).await;
    let staller = Staller::new(&garage, Duration::from_secs(60));
    let limits = DownloadLimits {
        idle_timeout: Duration::from_millis(300),
        min_bytes_per_sec: 64 << 20,
        max_resumes: 100,
    };
    let mut file = tokio::fs::File::create(dir.path().join("download"))
        .await
        .unwrap();
    let progress = |n: u64| staller.progress(n);
    let error = bucket
        .download_to(KEY, &mut file, &limits, &progress)
        .await
        .expect_err("S3 is paused for longer than the download may take");
    assert!(
        staller.paused.load(Ordering::Relaxed),
        "S3 was never paused"
    );
    assert!(
        error.message.starts_with("not whole within 1050 ms (")
            && error.message.ends_with(&format!(
                " of {SIZE} bytes; the slowest rate allowed is {} bytes/s)",
                64 << 20
            )),
        "{error}"
    );
    // S3 is still paused: the deadline ended the download, not S3.
    assert!(!staller.continued.load(Ordering::Relaxed));
}

/// A file stored with `put_file` (streamed from disk, as a worker shares a SymCache) reads
/// back whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_put_from_disk_reads_back_whole() {
    let dir = tempfile::tempdir().unwrap();
    let garage = Garage::start(&dir.path().join("garage"));
    let bucket = garage.bucket().await;
    let bytes = incompressible(3 << 20);
    let path = dir.path().join("file");
    std::fs::write(&path, &bytes).unwrap();
    bucket.put_file("test/from-disk", &path).await.unwrap();
    assert!(bucket.fetch("test/from-disk").await.unwrap() == Some(bytes));
}

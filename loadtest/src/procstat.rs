//! What the load test reads about processes: CPU time and resident memory from `/proc`
//! (Linux), and a master's metrics over plain HTTP.

/// CPU time (user + system) of `pids` so far, in ms, from `/proc/PID/stat` fields 14 and 15
/// (clock ticks, `sysconf(_SC_CLK_TCK)` per second; proc(5)). Processes that are gone count 0.
pub fn cpu_ms(pids: &[u32]) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_s = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // The command name (field 2) may hold spaces: count fields after its `)`.
            let rest = &stat[stat.rfind(')')? + 2..];
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) * 1000 / ticks_per_s)
        })
        .sum()
}

/// Resident set size of `pid` in MiB (`VmRSS` of `/proc/PID/status`); 0 when unknown.
pub fn rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmRSS:")
}

/// Peak resident set size of `pid` since it started, in MiB (`VmHWM` of `/proc/PID/status`);
/// 0 when unknown.
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_mib(pid, "VmHWM:")
}

/// The `field` line of `/proc/PID/status` (a size in kB, proc(5)) in MiB; 0 when unknown.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with(field))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib / 1024.0)
        })
        .unwrap_or(0.0)
}

/// `GET path` over HTTP/1.0 from `addr` (`host:port`): the whole response, headers included.
pub async fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    stream.read_to_string(&mut out).await?;
    Ok(out)
}

/// What a worker's cache directory takes on disk at one moment ([`disk_use`]), in bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DiskUse {
    /// The disk cache's entries: what `--disk-cache` bounds.
    pub entries: u64,
    /// Temporary files (`.tmp-` names, and those removed but still mapped): debug files
    /// downloaded for a conversion, entries being written. Outside the budget.
    pub temporary: u64,
    /// Files removed from the directory (evicted) that the process still maps, so their space
    /// is not freed yet (from `/proc/PID/maps`, whole pages). Outside the budget; bounded by
    /// the memory cache that holds them.
    pub evicted_mapped: u64,
}

impl DiskUse {
    /// The largest of each field of `self` and `other`.
    pub fn max(self, other: DiskUse) -> DiskUse {
        DiskUse {
            entries: self.entries.max(other.entries),
            temporary: self.temporary.max(other.temporary),
            evicted_mapped: self.evicted_mapped.max(other.evicted_mapped),
        }
    }
}

/// The bytes under the cache directory `dir` of the worker `pid` (see [`DiskUse`]). Files
/// that vanish while the directory is walked are skipped.
pub fn disk_use(dir: &std::path::Path, pid: u32) -> DiskUse {
    let mut use_ = DiskUse::default();
    for entry in walkdir::WalkDir::new(dir).into_iter().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            use_.temporary += meta.len();
        } else {
            use_.entries += meta.len();
        }
    }
    // `start-end perms offset dev inode path`; a removed file's path ends in " (deleted)".
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut inodes = std::collections::HashMap::<(String, String, bool), u64>::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.splitn(6, ' ').collect();
        let [range, _, _, device, inode, path] = fields[..] else {
            continue;
        };
        let path = path.trim_start();
        if !path.starts_with(&*dir.to_string_lossy()) || !path.ends_with(" (deleted)") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        // A removed temporary file (a downloaded debug file still mapped) is temporary space.
        let temporary = path.contains("/.tmp-");
        *inodes
            .entry((device.to_owned(), inode.to_owned(), temporary))
            .or_default() += end - start;
    }
    for ((_, _, temporary), bytes) in inodes {
        if temporary {
            use_.temporary += bytes;
        } else {
            use_.evicted_mapped += bytes;
        }
    }
    use_
}

/// Watches cache directories ([`disk_use`]) from a thread of its own every `interval`, keeping
/// each field's peak, until [`DiskWatch::stop`]; dropped without it (a run that failed), the
/// thread stops at its next sample.
pub struct DiskWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<(DiskUse, u64)>>,
}

impl DiskWatch {
    /// Starts watching `watched`: each worker's cache directory and pid.
    pub fn start(watched: Vec<(std::path::PathBuf, u32)>, interval: std::time::Duration) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut peak, mut samples) = (DiskUse::default(), 0u64);
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                for (dir, pid) in &watched {
                    peak = peak.max(disk_use(dir, *pid));
                }
                samples += 1;
                std::thread::sleep(interval);
            }
            (peak, samples)
        });
        DiskWatch {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops watching: the peaks, and how many samples they were taken from.
    pub fn stop(mut self) -> (DiskUse, u64) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Bytes of disk that `path` (a file, or a directory and everything in it) takes: allocated
/// 512-byte blocks, as `du` counts them (a sparse or preallocated file counts what it holds on
/// disk). 0 for what cannot be read.
pub fn disk_bytes(path: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let children = std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| disk_bytes(&entry.path()))
                .sum::<u64>()
        })
        .unwrap_or(0);
    own + children
}

/// A master's Raft log directory on disk: what its records take, and what is made ahead.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogDisk {
    /// Bytes of the segments up to their last record: the active segment (the highest
    /// `.log`) up to its last non-zero byte, rounded up to 4 KiB; every other file as
    /// [`disk_bytes`] counts it.
    pub records: u64,
    /// Bytes written ahead as zeros: the next segment (`next.tmp`) and the active segment
    /// past its last record.
    pub ahead: u64,
}

/// [`LogDisk`] of the Raft log directory `dir` (zero for what cannot be read).
pub fn log_disk(dir: &std::path::Path) -> LogDisk {
    let mut out = LogDisk::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut active: Option<(String, std::path::PathBuf)> = None;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name == "next.tmp" {
            out.ahead += disk_bytes(&path);
            continue;
        }
        if name.ends_with(".log") && active.as_ref().is_none_or(|(a, _)| name > *a) {
            if let Some((_, previous)) = active.replace((name, path)) {
                out.records += disk_bytes(&previous);
            }
            continue;
        }
        out.records += disk_bytes(&path);
    }
    if let Some((_, path)) = active {
        let allocated = disk_bytes(&path);
        let used = std::fs::read(&path).map_or(0, |bytes| {
            bytes
                .iter()
                .rposition(|b| *b != 0)
                .map_or(0, |last| (last as u64 + 1).next_multiple_of(4096))
        });
        out.records += used.min(allocated);
        out.ahead += allocated.saturating_sub(used);
    }
    out
}

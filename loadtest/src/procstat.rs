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

//! `symcluster-loadtest body-store`: what keeping each job's report and result in the object
//! store, instead of in the Raft log and every master's index, would cost per job: the S3
//! requests a job would add, measured against a real Garage on this machine.
//!
//! It starts one Garage (as the load runs do), then, `concurrency` requests at a time:
//!
//! 1. `PUT` `jobs` report bodies (the CrashProbe events, zstd level 1 as the client sends them,
//!    each made distinct by an 8-byte suffix so that nothing is deduplicated), under
//!    content-addressed keys (`projects/load/reports/<SHA-256>`);
//! 2. `GET` each of them back;
//! 3. `PUT` and `GET` `jobs` result bodies of `result_bytes` each (what a result of the
//!    referenced images takes compressed; incompressible bytes, as compressed data is).
//!
//! Each row gives the requests per second, p50 and p99 latency (ms, submit to answer), and the
//! CPU per request of the client (this process: what a master or worker making the request
//! would spend, SHA-256 and signing included) and of Garage (ms, from `/proc/PID/stat`), so the
//! cost of a body by reference can be set beside the cost of a body through the log.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use sha2::Digest;
use symcluster_sources::source::{S3Settings, Source};

use crate::cluster::Garage;
use crate::procstat;

/// One measured kind of request.
struct Row {
    op: &'static str,
    bytes: usize,
    per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    client_ms: f64,
    garage_ms: f64,
}

/// CPU time of this process so far (user + system), ms (`getrusage(RUSAGE_SELF)`).
fn self_cpu_ms() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

/// Runs `jobs` requests `concurrency` at a time; `request(i)` is request `i`.
async fn measure<F, Fut>(
    op: &'static str,
    bytes: usize,
    jobs: usize,
    concurrency: usize,
    garage_pid: u32,
    request: F,
) -> anyhow::Result<Row>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let request = Arc::new(request);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (client0, garage0, start) = (
        self_cpu_ms(),
        procstat::cpu_ms(&[garage_pid]),
        Instant::now(),
    );
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (request, next) = (request.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = hdrhistogram::Histogram::<u64>::new(3)?;
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= jobs {
                    return anyhow::Ok(latencies);
                }
                let at = Instant::now();
                request(i).await?;
                latencies.record(at.elapsed().as_micros() as u64)?;
            }
        }));
    }
    let mut latencies = hdrhistogram::Histogram::<u64>::new(3)?;
    for task in tasks {
        latencies.add(task.await??)?;
    }
    let wall = start.elapsed().as_secs_f64();
    Ok(Row {
        op,
        bytes,
        per_s: jobs as f64 / wall,
        p50_ms: latencies.value_at_quantile(0.5) as f64 / 1e3,
        p99_ms: latencies.value_at_quantile(0.99) as f64 / 1e3,
        client_ms: (self_cpu_ms() - client0) / jobs as f64,
        garage_ms: (procstat::cpu_ms(&[garage_pid]) - garage0) as f64 / jobs as f64,
    })
}

/// `n` bodies: `base` bodies in turn, each with `i` (8 bytes, little-endian) appended.
fn distinct(base: &[Vec<u8>], n: usize) -> Vec<Arc<Vec<u8>>> {
    (0..n)
        .map(|i| {
            let mut body = base[i % base.len()].clone();
            body.extend_from_slice(&(i as u64).to_le_bytes());
            Arc::new(body)
        })
        .collect()
}

fn key(kind: &str, body: &[u8]) -> String {
    format!("projects/load/{kind}/{}", hex(&sha2::Sha256::digest(body)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs the measurement on `reports` (report bodies as sent, compressed), `jobs` of each kind,
/// `concurrency` at a time, with results of `result_bytes`; prints a Markdown table. Errors
/// when Garage does not start or a request fails.
pub async fn run(
    reports: &[Vec<u8>],
    jobs: usize,
    concurrency: usize,
    result_bytes: usize,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let garage = Garage::start(&dir.path().join("garage"));
    let pid = garage.pid().context("Garage's pid")?;
    let env = |name: &str| {
        garage
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .with_context(|| format!("deploy/garage.sh exported no {name}"))
    };
    for name in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        let value = env(name)?;
        // SAFETY: this mode's only other threads are the runtime's idle workers, which read no
        // environment; the S3 client reads these once, below.
        unsafe { std::env::set_var(name, value) };
    }
    let source = Arc::new(
        Source::s3(&S3Settings {
            bucket: env("SYMCLUSTER_S3_BUCKET")?,
            endpoint: Some(env("SYMCLUSTER_S3_ENDPOINT")?),
            region: env("SYMCLUSTER_S3_REGION")?,
            attempts: 1,
            timeout_ms: 30_000,
        })
        .await,
    );
    let mean = |bodies: &[Arc<Vec<u8>>]| bodies.iter().map(|b| b.len()).sum::<usize>() / jobs;
    let report_bodies = distinct(reports, jobs);
    let mut noise = vec![0u8; result_bytes];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in noise.iter_mut() {
        // xorshift: incompressible bytes, as a compressed result is.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let result_bodies = distinct(&[noise], jobs);
    println!(
        "body store: Garage on this machine, {jobs} requests per row, {concurrency} at a time; CPU in ms per request"
    );
    let mut rows = Vec::new();
    for (kind, bodies) in [("reports", report_bodies), ("results", result_bodies)] {
        let bodies = Arc::new(bodies);
        let bytes = mean(&bodies);
        let (s, b) = (source.clone(), bodies.clone());
        rows.push(
            measure("PUT", bytes, jobs, concurrency, pid, move |i| {
                let (s, body) = (s.clone(), b[i].clone());
                async move {
                    let key = key(kind, &body);
                    s.put(&key, body.to_vec()).await?;
                    Ok(())
                }
            })
            .await?,
        );
        let (s, b) = (source.clone(), bodies.clone());
        rows.push(
            measure("GET", bytes, jobs, concurrency, pid, move |i| {
                let (s, body) = (s.clone(), b[i].clone());
                async move {
                    let key = key(kind, &body);
                    let got = s.fetch(&key).await?.context("a stored body is missing")?;
                    anyhow::ensure!(got == *body, "{key}: other bytes came back");
                    Ok(())
                }
            })
            .await?,
        );
    }
    println!(
        "| request | body bytes | requests/s | p50 ms | p99 ms | client CPU ms | Garage CPU ms |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {:.3} | {:.3} |",
            r.op, r.bytes, r.per_s, r.p50_ms, r.p99_ms, r.client_ms, r.garage_ms
        );
    }
    Ok(())
}

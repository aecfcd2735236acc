//! `symcluster-loadtest cold-start DSYM`: what a worker that starts with empty caches pays for
//! a production-size debug file, when another worker has already shared its SymCache through
//! the bucket, against converting the debug file itself.
//!
//! On one cluster (Garage, one master; every process on this machine) it uploads the dSYM,
//! builds one report whose 100 frames fall on functions spread over the whole image (from the
//! dSYM's symbol table), and runs that report once on each of three workers, one at a time,
//! each started with empty caches:
//!
//! 1. `first`: downloads the dSYM, answers the job from a partial SymCache of the report's
//!    units, converts the whole file in the background and shares the SymCache
//!    (`--share-symcaches`, the default); the run waits until the shared SymCache is in the
//!    bucket;
//! 2. `second`: downloads the shared SymCache and converts nothing;
//! 3. `second, no sharing`: a cold worker with `--share-symcaches=false`, which downloads the
//!    dSYM, answers from a partial SymCache and converts it again: the cost sharing saves.
//!
//! Each row gives the job's time from submit to result (ms: the first answer), the partial
//! SymCaches it was answered from, the time from submit to the end of the worker's conversion
//! when it converted, the worker's conversions and shared-SymCache hits (its `/metrics`), and
//! its peak resident memory (`VmHWM`, MiB). With `--memory-limit`, each worker that converts
//! runs in a memory cgroup with that limit (as a container's), and the row gives the most
//! memory the cgroup was charged (page cache included) and its OOM kills. The three
//! results must be the same, frame for frame, and every frame must resolve to a function;
//! otherwise the run fails.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use symbolic_debuginfo::Archive;
use symcluster_client::api;
use symcluster_engine::symcache::{CONVERSION_REVISION, SYMCACHE_VERSION};
use symcluster_sources::layout::{self, DebugId, Scope};

use crate::cgroup::MemoryCgroup;
use crate::cluster::{Cluster, MasterOptions, WorkerOptions};
use crate::procstat;

/// Frames in the measured report.
const FRAMES: usize = 100;
/// Where the report says the image was loaded: an arm64 executable's usual `__TEXT` vmaddr.
const IMAGE_ADDR: u64 = 0x1_0000_0000;

/// One worker's measured run of the report.
struct Row {
    worker: &'static str,
    fetched: &'static str,
    job_ms: f64,
    /// Jobs images answered from a partial SymCache.
    partial: f64,
    /// From the submit to the end of the worker's conversion, when it converted.
    converted_ms: Option<f64>,
    conversions: f64,
    shared_hits: f64,
    peak_rss_mib: f64,
    /// With a memory limit: the cgroup's peak charge (MiB) and OOM kills.
    limited: Option<(f64, u64)>,
    threads: serde_json::Value,
}

/// Runs the measurement on the dSYM bundle (or bare DWARF file) at `dsym`, printing a
/// Markdown table; with `memory_limit` (bytes), the workers that convert run in a memory
/// cgroup of that size. Errors when no cgroup can be made, when the file has no Mach-O object with symbols, when a job fails,
/// when the shared SymCache does not appear within 10 minutes, or when the workers' answers
/// differ.
pub async fn run(dsym: &Path, memory_limit: Option<u64>) -> anyhow::Result<()> {
    let cgroup = |name: &str| {
        memory_limit
            .map(|limit| MemoryCgroup::new(&format!("symcluster-cold-start-{name}"), limit))
            .transpose()
    };
    let dwarf = dwarf_file(dsym)?;
    let dwarf_mb = std::fs::metadata(&dwarf)?.len() as f64 / 1e6;
    let (debug_id, report) = report_for(&dwarf)?;
    println!(
        "cold start on {} ({dwarf_mb:.0} MB of DWARF, debug id {debug_id}): one report of {FRAMES} frames, three workers in turn, each with empty caches",
        dsym.display()
    );

    let mut cluster = Cluster::start(0, MasterOptions::default()).await;
    let started = Instant::now();
    let out = cluster.symctl(&["upload", "dsym", &dsym.display().to_string()]);
    anyhow::ensure!(
        out.status.success(),
        "upload failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("uploaded in {:.1} s", started.elapsed().as_secs_f64());
    let bucket = cluster.garage.bucket().await;
    let original = layout::debug_file_key(&Scope::Project("default").prefix(""), &debug_id);
    let version = bucket
        .version(&original)
        .await?
        .context("the uploaded dSYM is not in the bucket")?;
    let shared_key = layout::symcache_key(
        &original,
        &format!("{SYMCACHE_VERSION}.{CONVERSION_REVISION}"),
        &version,
    );

    // A conversion of a big file outlasts the test cluster's 1 s per S3 attempt; so does a
    // download of it.
    let options = |share: bool| WorkerOptions {
        slots: 1,
        s3_timeout_ms: 600_000,
        args: vec![format!("--share-symcaches={share}")],
        ..WorkerOptions::default()
    };
    let mut rows = Vec::new();
    // Dropped (removed) after the cluster, whose workers are in them.
    let mut cgroups = Vec::new();
    cgroups.push(cgroup("first")?);
    let (first, index) = measure(
        &mut cluster,
        "first",
        "the dSYM, converted",
        options(true),
        &report,
        true,
        cgroups.last().and_then(Option::as_ref),
    )
    .await?;
    rows.push(first);
    // The worker uploads the SymCache after the job: it stops only once that is in the bucket.
    let deadline = Instant::now() + Duration::from_secs(600);
    while bucket.version(&shared_key).await?.is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no shared SymCache at {shared_key} 10 minutes after the first job"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.stop_worker(index, Duration::from_secs(10)).await;
    let shared_mb = bucket
        .fetch(&shared_key)
        .await?
        .map_or(0.0, |b| b.len() as f64 / 1e6);
    for (worker, fetched, share) in [
        ("second", "the shared SymCache", true),
        ("second, no sharing", "the dSYM, converted", false),
    ] {
        cgroups.push(if share { None } else { cgroup("second")? });
        let (row, index) = measure(
            &mut cluster,
            worker,
            fetched,
            options(share),
            &report,
            !share,
            cgroups.last().and_then(Option::as_ref),
        )
        .await?;
        rows.push(row);
        cluster.stop_worker(index, Duration::from_secs(10)).await;
    }
    for row in &rows[1..] {
        anyhow::ensure!(
            row.threads == rows[0].threads,
            "worker `{}` answered differently from the first",
            row.worker
        );
    }

    println!("shared SymCache: {shared_mb:.1} MB at {shared_key}");
    let limit = memory_limit.map_or_else(
        || "no limit".to_owned(),
        |b| format!("{:.0} MiB", b as f64 / f64::from(1 << 20)),
    );
    println!(
        "| worker (cold) | fetched | job ms (first answer) | partial SymCaches | converted after ms | conversions | shared SymCache hits | peak RSS MiB | cgroup peak MiB ({limit}) | OOM kills |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for row in &rows {
        let (cgroup_peak, oom_kills) = row.limited.map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |(peak, kills)| (format!("{peak:.0}"), kills.to_string()),
        );
        println!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {:.0} | {cgroup_peak} | {oom_kills} |",
            row.worker,
            row.fetched,
            row.job_ms,
            row.partial,
            row.converted_ms
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0}")),
            row.conversions,
            row.shared_hits,
            row.peak_rss_mib
        );
    }
    drop(cluster);
    drop(cgroups);
    println!(
        "ratio second worker, converting / shared SymCache: {:.1}x",
        rows[2].job_ms / rows[1].job_ms
    );
    Ok(())
}

/// The DWARF file of a dSYM bundle (`X.dSYM/Contents/Resources/DWARF/*`, the only file
/// there), or `path` itself when it is a file.
fn dwarf_file(path: &Path) -> anyhow::Result<std::path::PathBuf> {
    if path.is_file() {
        return Ok(path.to_owned());
    }
    let dir = path.join("Contents/Resources/DWARF");
    let mut files = std::fs::read_dir(&dir)
        .with_context(|| format!("{} is not a dSYM bundle", path.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file());
    let file = files
        .next()
        .with_context(|| format!("no file in {}", dir.display()))?;
    anyhow::ensure!(
        files.next().is_none(),
        "more than one file in {}",
        dir.display()
    );
    Ok(file)
}

/// The debug id of the first object in `dwarf`, and a Symbolicator-style request (JSON bytes)
/// whose crashed thread holds [`FRAMES`] frames: 8 bytes into functions spread evenly over
/// the object's symbol table, in an image loaded at [`IMAGE_ADDR`].
fn report_for(dwarf: &Path) -> anyhow::Result<(DebugId, Vec<u8>)> {
    let bytes = std::fs::read(dwarf)?;
    let archive = Archive::parse(&bytes)?;
    let object = archive
        .objects()
        .next()
        .context("no object in the file")??;
    let debug_id = object.debug_id();
    let mut addresses: Vec<u64> = object.symbols().map(|s| s.address).collect();
    addresses.sort_unstable();
    addresses.dedup();
    anyhow::ensure!(
        addresses.len() >= FRAMES,
        "{} symbols, fewer than {FRAMES}",
        addresses.len()
    );
    let step = addresses.len() / FRAMES;
    let frames: Vec<serde_json::Value> = addresses
        .iter()
        .step_by(step)
        .take(FRAMES)
        .map(|a| serde_json::json!({ "instruction_addr": format!("{:#x}", IMAGE_ADDR + a + 8) }))
        .collect();
    let last = addresses.last().copied().unwrap_or(0);
    let report = serde_json::json!({
        "modules": [{
            "type": "macho",
            "debug_id": debug_id.to_string(),
            "code_file": "/private/var/containers/Bundle/Application/BigApp.app/BigApp",
            "image_addr": format!("{IMAGE_ADDR:#x}"),
            "image_size": last + 0x1000,
            "arch": "arm64",
        }],
        "stacktraces": [{ "is_requesting": true, "frames": frames }],
    });
    Ok((debug_id, serde_json::to_vec(&report)?))
}

/// Starts a worker with `options` (moved into `cgroup` when given), runs `report` on it alone,
/// waits for its conversion when it `converts`, and reads its metrics and peak memory; the
/// worker's index is returned with them (the caller stops it).
async fn measure(
    cluster: &mut Cluster,
    worker: &'static str,
    fetched: &'static str,
    options: WorkerOptions,
    report: &[u8],
    converts: bool,
    cgroup: Option<&MemoryCgroup>,
) -> anyhow::Result<(Row, usize)> {
    let index = cluster.add_worker_with(options).await;
    let pid = cluster.workers[index]
        .as_ref()
        .map(|p| p.child.id())
        .context("the worker just started")?;
    if let Some(cgroup) = cgroup {
        cgroup.add(pid)?;
    }
    let mut client = cluster.client().await;
    let job_id = format!("cold-start-{index}");
    let started = Instant::now();
    client.submit_native(&job_id, report.to_vec()).await?;
    let job = tokio::time::timeout(Duration::from_secs(600), client.wait(&job_id))
        .await
        .map_err(|_| {
            anyhow::anyhow!(
                "job {job_id} on worker `{worker}` did not end within 10 minutes (OOM kills: {})",
                cgroup.map_or(0, MemoryCgroup::oom_kills)
            )
        })??;
    let job_ms = started.elapsed().as_secs_f64() * 1e3;
    anyhow::ensure!(
        job.state == api::JobState::Completed as i32,
        "job {job_id} on worker `{worker}` did not complete: {}",
        job.error
    );
    let result: serde_json::Value = serde_json::from_slice(&job.result_json)?;
    let threads = result["threads"].clone();
    let frames = threads[0]["frames"].as_array().map_or(0, Vec::len);
    let unresolved = threads[0]["frames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["function"].as_str().is_none_or(str::is_empty))
        .count();
    anyhow::ensure!(
        frames >= FRAMES && unresolved == 0,
        "worker `{worker}`: {unresolved} of {frames} frames without a function"
    );
    // A worker that converts answers from a partial SymCache first; the conversion ends after.
    let conversions = |metrics: &str| {
        sample(
            metrics,
            "symcluster_worker_step_seconds_count{",
            &["step=\"convert\"", "kind=\"native\""],
        )
    };
    let mut metrics = procstat::http_get(&cluster.worker_metrics[index], "/metrics").await?;
    let converted_ms = if converts {
        let deadline = Instant::now() + Duration::from_secs(600);
        while conversions(&metrics) < 1.0 {
            anyhow::ensure!(
                Instant::now() < deadline,
                "worker `{worker}` did not convert within 10 minutes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            metrics = procstat::http_get(&cluster.worker_metrics[index], "/metrics").await?;
        }
        Some(started.elapsed().as_secs_f64() * 1e3)
    } else {
        None
    };
    let row = Row {
        worker,
        fetched,
        job_ms,
        partial: sample(&metrics, "symcluster_worker_partial_symcaches_total", &[]),
        converted_ms,
        conversions: conversions(&metrics),
        shared_hits: sample(
            &metrics,
            "symcluster_worker_cache_lookups_total{",
            &["layer=\"shared\"", "result=\"hit\""],
        ),
        peak_rss_mib: procstat::peak_rss_mib(pid),
        limited: cgroup.map(|c| (c.peak_bytes() as f64 / f64::from(1 << 20), c.oom_kills())),
        threads,
    };
    Ok((row, index))
}

/// The value of the first sample in a Prometheus text exposition whose line starts with
/// `prefix` (the name and `{`) and holds every one of `labels`; 0 when there is none.
fn sample(exposition: &str, prefix: &str, labels: &[&str]) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(prefix) && labels.iter().all(|label| l.contains(label)))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

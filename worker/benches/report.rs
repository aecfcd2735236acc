//! The worker's CPU per native report, step by step: what `runner::run` does with a leased
//! CrashProbe report once its SymCaches are in memory (the steady state of a load run).
//!
//! Reports: the 21 arm64 CrashProbe Sentry events of `../shared/fixtures/crashprobe/release`
//! (about 122 KB of JSON each, 327 images, 60–90 frames), each compressed with zstd as the SDK
//! sends it (`NativeJob.report_zstd`). Debug files: that folder's dSYMs, converted to SymCaches
//! once before timing. Three workloads, one table each:
//! - the full events with `modules = ALL` (every image in the result: what a result was before
//!   results listed referenced images only);
//! - the full events with `modules = REFERENCED` (the default: the reader reads only the
//!   address range of an image no frame is in, the result lists 8-15 images);
//! - the same events cut to the images their frames are in, as our SDK and Apple's `.ips` send
//!   them (`symcluster_loadtest::images::referenced_only`), `modules = REFERENCED`.
//!
//! Steps, timed separately per report and printed as µs per report (the best of `ROUNDS`
//! rounds over every report, after one warm-up round):
//! - `decompress`: `report_bytes` (zstd, into the size the frame header records);
//! - `parse`: `parse_report_with` (format detection and the Sentry reader);
//! - `symbolicate`: `referenced_images`, the SymCache of each from memory,
//!   `symbolicate_owned`;
//! - `encode`: `runner::result_zstd`, the result as JSON compressed with zstd (level 1);
//! - `complete`: `runner::completed_native` (encode, compress, crash group, missing files,
//!   call tree), the whole step after `symbolicate`.
//!
//! The worker's CPU per report in a load run (`symcluster-loadtest`, column `worker CPU
//! ms/job`) is these steps plus the gRPC streams, the tokio runtime and the kernel's share.
//! Run: `cargo bench -p symcluster-worker --bench report`.

/// The worker's allocator: the steps measured as they run there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use symcluster_client::report::report_bytes;
use symcluster_engine::{
    LocalSymCaches, Modules, parse_report_with, referenced_images, symbolicate_owned,
};
use symcluster_proto::v1::NativeJob;
use symcluster_worker::runner::{Prefetched, completed_native, result_zstd};

/// Timed rounds over every report; the best round's mean is printed.
const ROUNDS: usize = 30;

const STEPS: [&str; 5] = ["decompress", "parse", "symbolicate", "encode", "complete"];

fn fixtures() -> PathBuf {
    std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"))
}

fn main() {
    // `cargo test --benches` runs benches with `--test`: check that they start, no timing.
    let test_mode = std::env::args().any(|a| a == "--test");
    let release = fixtures().join("crashprobe/release");
    let mut events: Vec<(String, Vec<u8>)> = std::fs::read_dir(release.join("arm64"))
        .expect("crashprobe fixtures (../shared/fixtures/crashprobe/release/arm64)")
        .map(|entry| entry.expect("fixture entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .map(|path| {
            let text = std::fs::read(&path).expect("read report");
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                text,
            )
        })
        .collect();
    events.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!events.is_empty(), "no CrashProbe reports found");
    let caches = LocalSymCaches::scan(&[release.join("dSYMs")]).expect("scan dSYMs");

    let job = |text: &[u8]| NativeJob {
        report: Vec::new(),
        report_zstd: zstd::bulk::compress(text, 3).expect("compress report"),
        ..Default::default()
    };
    let full: Vec<NativeJob> = events.iter().map(|(_, text)| job(text)).collect();
    let cut: Vec<NativeJob> = events
        .iter()
        .map(|(name, text)| {
            job(&symcluster_loadtest::images::referenced_only(text)
                .unwrap_or_else(|e| panic!("{name}: {e}")))
        })
        .collect();
    for (title, jobs, modules) in [
        ("full events, modules = ALL", &full, Modules::All),
        (
            "full events, modules = REFERENCED",
            &full,
            Modules::Referenced,
        ),
        ("referenced-image reports", &cut, Modules::Referenced),
    ] {
        measure(title, jobs, modules, &caches, test_mode);
    }
}

/// Times the steps over `jobs` and prints them, µs per report.
fn measure(
    title: &str,
    jobs: &[NativeJob],
    modules: Modules,
    caches: &LocalSymCaches,
    test_mode: bool,
) {
    let rounds = if test_mode { 1 } else { ROUNDS + 1 };
    let mut best = [Duration::MAX; STEPS.len()];
    let mut report_bytes_total = 0usize;
    let mut result_bytes = (0u64, 0usize);
    for round in 0..rounds {
        let mut spent = [Duration::ZERO; STEPS.len()];
        let mut time = |step: usize, started: Instant| spent[step] += started.elapsed();
        for job in jobs {
            let started = Instant::now();
            let bytes = report_bytes(job).expect("report bytes");
            time(0, started);
            if round == 0 {
                report_bytes_total += bytes.len();
            }

            let started = Instant::now();
            let report = parse_report_with(&bytes, modules).expect("parse report");
            time(1, started);

            let started = Instant::now();
            let prefetched = Prefetched(
                referenced_images(&report)
                    .into_iter()
                    .filter_map(|i| report.images[i].debug_id)
                    .map(|id| (id, caches.load_debug_id(id)))
                    .collect(),
            );
            let result = symbolicate_owned(report, &prefetched);
            time(2, started);

            let started = Instant::now();
            let zstd = result_zstd(&result).expect("encode result");
            time(3, started);
            if round == 0 {
                result_bytes.0 += zstd::zstd_safe::get_frame_content_size(&zstd)
                    .ok()
                    .flatten()
                    .unwrap_or(0);
                result_bytes.1 += zstd.len();
            }

            let started = Instant::now();
            let outcome = completed_native(&result).expect("complete");
            time(4, started);
            std::hint::black_box(outcome);
        }
        // Round 0 warms up (and converts every SymCache).
        if round > 0 || test_mode {
            for (best, spent) in best.iter_mut().zip(spent) {
                *best = (*best).min(spent);
            }
        }
    }

    let per_report = |d: Duration| d.as_secs_f64() * 1e6 / jobs.len() as f64;
    println!(
        "\nworker CPU per CrashProbe report, {title} ({} reports, on average {:.1} KB of JSON each, result {:.1} KB, {:.1} KB compressed), µs:",
        jobs.len(),
        report_bytes_total as f64 / jobs.len() as f64 / 1000.0,
        result_bytes.0 as f64 / jobs.len() as f64 / 1000.0,
        result_bytes.1 as f64 / jobs.len() as f64 / 1000.0,
    );
    for (step, best) in STEPS.iter().zip(best) {
        println!("  {step:<12} {:>8.1}", per_report(best));
    }
    let total = best[0] + best[1] + best[2] + best[4];
    println!(
        "  {:<12} {:>8.1}  (decompress + parse + symbolicate + complete)",
        "total",
        per_report(total)
    );
}

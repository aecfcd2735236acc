//! Minidumps: the engine's time to a result against `minidump-stackwalk` (rust-minidump's own
//! CLI, crates.io) on the same dump, one run.
//!
//! Input: `examples/linux-demo/demo-app.dmp` (the Linux demo crashed for real, 4 images, one
//! thread) and its debug file. Measured:
//! - **cold**: from the files to the JSON result, in-process: the debug file read, its CFI and
//!   SymCache built, the dump walked with CFI and symbolicated, the result serialized;
//! - **warm**: the walk, symbolication and JSON with the CFI and SymCache already prepared
//!   (criterion): what a worker with warm caches spends on a dump;
//! - **minidump-stackwalk**: it has no long-lived mode (one process per dump), so its best mode
//!   is one process given Breakpad symbols made beforehand (`dump_syms`, Mozilla's, from the
//!   same debug file), `--json`: the median of 20 runs, the process start included.
//!
//! Also checks that both give the crashed thread's frames the same functions and lines (the
//! engine adds the inlined frame `validate_total`, which minidump-stackwalk does not print).
//! Needs `minidump-stackwalk` and `dump_syms` on `PATH` (`bash scripts/install-reference-tools.sh`)
//! for the ratio. Run: `cargo bench -p symcluster-engine --bench minidump`.

/// The worker's allocator (`symcluster-worker` sets it too): the engine measured as it runs
/// there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
use common::{mean_ns, median, ms};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use symcluster_engine::minidump::{self, UnwindInfo, UnwindTable};
use symcluster_engine::{LocalSymCaches, Modules, symbolicate};

const APP: &str = "e03566f6-988e-a224-5037-26179d47ad6c";

fn main() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dump_path = repo.join("examples/linux-demo/demo-app.dmp");
    let debug_path = repo.join("examples/linux-demo/demo-app.debug");
    let dump = std::fs::read(&dump_path).unwrap();
    let id = APP.parse().unwrap();

    let cold = median(10, || {
        let start = Instant::now();
        let object = std::fs::read(&debug_path).unwrap();
        let info = UnwindInfo::from_object_file(&object, id).unwrap();
        let table = UnwindTable::from([(id, Arc::new(info))]);
        let sources = LocalSymCaches::scan(&[&debug_path]).unwrap();
        let report = minidump::stackwalk(&dump, &table, Modules::Referenced).unwrap();
        let result = symbolicate(&report, &sources);
        std::hint::black_box(serde_json::to_vec(&result).unwrap());
        start.elapsed()
    });

    let object = std::fs::read(&debug_path).unwrap();
    let table = UnwindTable::from([(
        id,
        Arc::new(UnwindInfo::from_object_file(&object, id).unwrap()),
    )]);
    let sources = LocalSymCaches::scan(&[&debug_path]).unwrap();
    let ours = symbolicate(
        &minidump::stackwalk(&dump, &table, Modules::Referenced).unwrap(),
        &sources,
    );
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    c.bench_function("minidump-warm/engine", |b| {
        b.iter(|| {
            let report = minidump::stackwalk(&dump, &table, Modules::Referenced).unwrap();
            serde_json::to_vec(&symbolicate(&report, &sources)).unwrap()
        })
    });
    c.final_summary();
    let warm = mean_ns("minidump-warm_engine").map(|ns| Duration::from_nanos(ns as u64));

    println!(
        "\nMinidump to JSON result, {} ({} bytes):",
        dump_path.display(),
        dump.len()
    );
    println!(
        "  symcluster cold (CFI + SymCache built, walk, symbolicate): {:>8.2} ms",
        ms(cold)
    );
    if let Some(warm) = warm {
        println!(
            "  symcluster warm (prepared CFI and SymCache):               {:>8.3} ms",
            ms(warm)
        );
    }

    let Some(peer) = peer(&debug_path) else {
        println!(
            "  minidump-stackwalk or dump_syms not found (bash scripts/install-reference-tools.sh): no ratio"
        );
        return;
    };
    let run = || -> (Duration, Vec<u8>) {
        let start = Instant::now();
        let out = Command::new("minidump-stackwalk")
            .arg("--json")
            .arg("--symbols-path")
            .arg(&peer)
            .arg(&dump_path)
            .output()
            .expect("run minidump-stackwalk");
        let elapsed = start.elapsed();
        assert!(out.status.success(), "minidump-stackwalk failed");
        (elapsed, out.stdout)
    };
    let peer_time = median(20, || run().0);
    let peer_json: serde_json::Value = serde_json::from_slice(&run().1).unwrap();

    // The same functions and lines, the inlined level aside.
    let theirs: Vec<(String, u64)> = peer_json["threads"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .take(4)
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    let mine: Vec<(String, u64)> = ours
        .crashed_thread()
        .unwrap()
        .frames
        .iter()
        .filter(|f| !f.inlined)
        .take(4)
        .map(|f| {
            (
                f.function.clone().unwrap_or_default(),
                u64::from(f.lineno.unwrap_or(0)),
            )
        })
        .collect();
    println!(
        "  frames: {} (the first 4, function and line)",
        if theirs == mine {
            "identical"
        } else {
            "DIFFERENT"
        }
    );
    if theirs != mine {
        println!("    minidump-stackwalk {theirs:?}\n    symcluster         {mine:?}");
    }
    println!(
        "  minidump-stackwalk (one process, Breakpad symbols): {:>8.2} ms",
        ms(peer_time)
    );
    println!(
        "  ratio: cold {:.1}x, warm {} (minidump-stackwalk time / symcluster time)",
        peer_time.as_secs_f64() / cold.as_secs_f64(),
        warm.map(|w| format!("{:.0}x", peer_time.as_secs_f64() / w.as_secs_f64()))
            .unwrap_or_else(|| "-".into())
    );
}

/// A Breakpad symbol directory for the debug file (made once with `dump_syms`), when both tools
/// are installed.
fn peer(debug_path: &Path) -> Option<PathBuf> {
    let found = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !found("minidump-stackwalk") || !found("dump_syms") {
        return None;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-minidump/symbols");
    // Breakpad's layout: <debug file>/<breakpad id>/<debug file>.sym; the dump names the
    // module `demo-app`.
    let module = dir.join("demo-app/E03566F6988EA224503726179D47AD6C0");
    std::fs::create_dir_all(&module).ok()?;
    let sym = module.join("demo-app.sym");
    if !sym.exists() {
        let out = Command::new("dump_syms").arg(debug_path).output().ok()?;
        assert!(out.status.success(), "dump_syms failed");
        std::fs::write(&sym, out.stdout).ok()?;
    }
    Some(dir)
}

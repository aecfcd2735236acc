//! Warm native symbolication throughput: the engine against `llvm-symbolizer`, same addresses,
//! same debug file, one run.
//!
//! Debug file: the real `libswiftCore.dylib` arm64 dSYM from the CrashProbe fixtures
//! (`../shared/fixtures`, 3.7 MiB of DWARF). Addresses: 4 bytes into each of the first
//! `FRAMES` functions of its SymCache, as return addresses of one thread.
//!
//! - `engine/symbolicate`: [`symbolicate`] on a report of `FRAMES` frames, SymCache already built
//!   (warm: what a worker does for every report after the first for that debug id);
//! - `llvm-symbolizer`: one `llvm-symbolizer --inlines` process resolving the same addresses
//!   from stdin (it parses the DWARF lazily, so a large batch is its warm case).
//!
//! Prints frames/s for both and the ratio. Run: `cargo bench -p symcluster-engine --bench native`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{Criterion, Throughput};
use symbolic_common::{Arch, DebugId};
use symcluster_engine::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};
use symcluster_engine::{LocalSymCaches, ModuleLoad, symbolicate};

const FRAMES: usize = 5_000;
const IMAGE_ADDR: u64 = 0x1_0200_0000;

fn fixture(rel: &str) -> PathBuf {
    std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
        })
        .join(rel)
}

fn main() {
    let dwarf = fixture(
        "crashprobe/release/dSYMs/FC4AD1B9-1FD4-3FB7-AC3E-0239C3A7D115.dSYM/Contents/Resources/DWARF/libswiftCore.dylib",
    );
    let debug_id: DebugId = "FC4AD1B9-1FD4-3FB7-AC3E-0239C3A7D115".parse().unwrap();
    let sources = LocalSymCaches::scan(&[&dwarf]).expect("fixture dSYM");
    let ModuleLoad::Found(symcache) = sources.load_debug_id(debug_id) else {
        panic!("no symcache for {}", dwarf.display());
    };
    let mut entries: Vec<u64> = symcache
        .get()
        .functions()
        .map(|f| f.entry_pc() as u64)
        .collect();
    entries.sort_unstable();
    entries.dedup();
    let relative: Vec<u64> = entries.iter().take(FRAMES).map(|pc| pc + 8).collect();
    let frames = relative.len();

    let report = NativeReport {
        format: ReportFormat::SymbolicatorRequest,
        arch: Arch::Arm64,
        crash_reason: None,
        signal: None,
        call_tree: Vec::new(),
        images: vec![Image {
            code_file: Some("/usr/lib/swift/libswiftCore.dylib".into()),
            debug_id: Some(debug_id),
            arch: Arch::Arm64,
            image_addr: IMAGE_ADDR,
            image_size: 0x1000_0000,
        }],
        threads: vec![Thread {
            id: 0,
            name: None,
            crashed: true,
            ip_register: None,
            frames: relative
                .iter()
                .map(|r| RawFrame {
                    instruction_addr: IMAGE_ADDR + r,
                    function: None,
                    image_index: None,
                })
                .collect(),
        }],
    };
    // llvm-symbolizer gets the same lookup addresses the engine uses, in the dSYM's space
    // (vmaddr 0 for this dylib): the return address minus 4, except frame 0.
    let lookups: String = relative
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{:#x}\n", if i == 0 { *r } else { r - 4 }))
        .collect();

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let mut group = c.benchmark_group("native-warm");
    group.throughput(Throughput::Elements(frames as u64));
    group.bench_function("engine/symbolicate", |b| {
        b.iter(|| symbolicate(&report, &sources))
    });
    let llvm = which_llvm_symbolizer();
    if let Some(llvm) = &llvm {
        group.bench_function("llvm-symbolizer", |b| {
            b.iter(|| run_llvm_symbolizer(llvm, &dwarf, &lookups))
        });
    }
    group.finish();
    c.final_summary();

    let engine = mean_ns("native-warm/engine_symbolicate");
    let reference = mean_ns("native-warm/llvm-symbolizer");
    println!("\nwarm native symbolication, {frames} frames of libswiftCore.dylib (arm64 dSYM):");
    if let Some(ns) = engine {
        println!(
            "  symcluster engine : {:>12.0} frames/s",
            frames as f64 / (ns / 1e9)
        );
    }
    match (engine, reference) {
        (Some(e), Some(r)) => {
            println!(
                "  llvm-symbolizer   : {:>12.0} frames/s",
                frames as f64 / (r / 1e9)
            );
            println!("  ratio engine / llvm-symbolizer: {:.1}x", r / e);
        }
        _ if llvm.is_none() => {
            println!("  llvm-symbolizer not found (apt-get install llvm): no ratio")
        }
        _ => println!("  (no estimates found under target/criterion: run without --test)"),
    }
}

fn which_llvm_symbolizer() -> Option<PathBuf> {
    [
        "llvm-symbolizer",
        "llvm-symbolizer-14",
        "llvm-symbolizer-15",
        "llvm-symbolizer-16",
    ]
    .iter()
    .find(|name| {
        Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
    .map(PathBuf::from)
}

fn run_llvm_symbolizer(llvm: &Path, dwarf: &Path, addresses: &str) -> usize {
    let mut child = Command::new(llvm)
        .arg(format!("--obj={}", dwarf.display()))
        .args(["--inlines", "--functions=linkage", "--demangle"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn llvm-symbolizer");
    let mut stdin = child.stdin.take().unwrap();
    let input = addresses.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("llvm-symbolizer output");
    writer.join().unwrap().unwrap();
    out.stdout.len()
}

/// Criterion's mean estimate (ns per iteration) for a benchmark id, from its JSON output.
fn mean_ns(id: &str) -> Option<f64> {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let path = dir.join("criterion").join(id).join("new/estimates.json");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    json.pointer("/mean/point_estimate")?.as_f64()
}

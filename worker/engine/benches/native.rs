//! Warm native symbolication throughput: the engine against `llvm-symbolizer`, same addresses,
//! same debug file, one run.
//!
//! Debug file: the real `libswiftCore.dylib` arm64 dSYM from the CrashProbe fixtures
//! (`../shared/fixtures`, 3.7 MiB of DWARF). Addresses: 4 bytes into each of the first
//! `FRAMES` functions of its SymCache, as return addresses of one thread.
//!
//! - `engine/symbolicate`: [`symbolicate`] on a report of `FRAMES` frames, SymCache already built
//!   (warm: what a worker does for every report after the first for that debug id; the
//!   SymCache's demangled names are kept, see `SymCacheFile::demangled`);
//! - `engine/symbolicate, names not yet demangled`: the same on a SymCache just parsed, so
//!   that every name is demangled (a debug id's first report);
//! - `llvm-symbolizer long-lived`: llvm-symbolizer in its best mode: one `llvm-symbolizer
//!   --inlines` process kept running for the whole benchmark, warmed with one pass over every
//!   address, then fed the same `FRAMES` addresses on stdin per iteration (its answers read
//!   back to the last one);
//! - `llvm-symbolizer per report`: what per-crash tooling does: one process per report of
//!   `REPORT_FRAMES` frames (start, DWARF parse, answers), against the engine's warm
//!   `symbolicate` of the same `REPORT_FRAMES`-frame report.
//!
//! Prints frames/s for each and ends with the two ratio lines (engine warm frames/s over each
//! llvm-symbolizer mode's). Run: `cargo bench -p symcluster-engine --bench native`.

/// The worker's allocator (`symcluster-worker` sets it too): the engine measured as it runs
/// there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
use common::mean_ns;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput};
use symbolic_common::{Arch, ByteView, DebugId};
use symcluster_engine::debug_files::list_objects;
use symcluster_engine::model::{Image, NativeReport, RawFrame, ReportFormat, Thread};
use symcluster_engine::symcache::SymCacheFile;
use symcluster_engine::{LocalSymCaches, ModuleLoad, SymCacheSource, symbolicate};

const FRAMES: usize = 5_000;
/// Frames of one crash report in the per-report comparison (all threads of a typical report).
const REPORT_FRAMES: usize = 100;
const IMAGE_ADDR: u64 = 0x1_0200_0000;

fn fixture(rel: &str) -> PathBuf {
    std::env::var_os("SYMCLUSTER_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures")
        })
        .join(rel)
}

/// Set in the child process that converts the big dSYM (so that its peak RSS is its own).
const CONVERT_ENV: &str = "SYMCLUSTER_BENCH_CONVERT";
/// Set in the child process that answers a report's addresses from the big dSYM before any
/// SymCache of it exists (a partial SymCache of their functions).
const FIRST_ANSWER_ENV: &str = "SYMCLUSTER_BENCH_FIRST_ANSWER";
/// Set for the small process [`measure`] starts each measured command from
/// ([`spawn_and_report`]).
const SPAWN_ENV: &str = "SYMCLUSTER_BENCH_SPAWN";

fn main() {
    if std::env::var_os(SPAWN_ENV).is_some() {
        spawn_and_report();
        return;
    }
    if let Some(path) = std::env::var_os(CONVERT_ENV) {
        convert_only(Path::new(&path));
        return;
    }
    if let Some(path) = std::env::var_os(FIRST_ANSWER_ENV) {
        first_answer_only(Path::new(&path));
        return;
    }
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

    let report = report_of(debug_id, &relative);
    let small_report = report_of(debug_id, &relative[..REPORT_FRAMES]);
    // llvm-symbolizer gets the same lookup addresses the engine uses, in the dSYM's space
    // (vmaddr 0 for this dylib): the return address minus 4, except frame 0.
    let lookups = lookups_of(&relative);
    let small_lookups = lookups_of(&relative[..REPORT_FRAMES]);

    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let mut group = c.benchmark_group("native-warm");
    group.throughput(Throughput::Elements(frames as u64));
    group.bench_function("engine/symbolicate", |b| {
        b.iter(|| symbolicate(&report, &sources))
    });
    // The same report on a SymCache just read (from disk or the bucket's cache): every name
    // demangled for the first time, as for a debug id's first report.
    let bytes = symcache.bytes().to_vec();
    group.bench_function("engine/symbolicate, names not yet demangled", |b| {
        b.iter_batched(
            || {
                Fresh(ModuleLoad::Found(std::sync::Arc::new(
                    SymCacheFile::parse(ByteView::from_vec(bytes.clone())).unwrap(),
                )))
            },
            |fresh| symbolicate(&report, &fresh),
            BatchSize::LargeInput,
        )
    });
    let llvm = which_llvm_symbolizer();
    if let Some(llvm) = &llvm {
        let mut long_lived = LongLived::start(llvm, &dwarf);
        long_lived.resolve(&lookups, frames); // the warm-up pass
        group.bench_function("llvm-symbolizer long-lived", |b| {
            b.iter(|| long_lived.resolve(&lookups, frames))
        });
    }
    group.finish();
    let mut group = c.benchmark_group("native-report");
    group.throughput(Throughput::Elements(REPORT_FRAMES as u64));
    group.bench_function("engine/symbolicate", |b| {
        b.iter(|| symbolicate(&small_report, &sources))
    });
    if let Some(llvm) = &llvm {
        group.bench_function("llvm-symbolizer per report", |b| {
            b.iter(|| run_llvm_symbolizer(llvm, &dwarf, &small_lookups))
        });
    }
    group.finish();
    let big = big_dwarf().map(|path| BigDsym::measure(&path, llvm.as_deref(), &mut c));
    c.final_summary();

    let per_s = |ns: f64, n: usize| n as f64 / (ns / 1e9);
    let engine = mean_ns("native-warm/engine_symbolicate");
    let long = mean_ns("native-warm/llvm-symbolizer long-lived");
    let engine_report = mean_ns("native-report/engine_symbolicate");
    let per_report = mean_ns("native-report/llvm-symbolizer per report");
    println!("\nwarm native symbolication, libswiftCore.dylib (arm64 dSYM):");
    if let Some(ns) = engine {
        println!(
            "  symcluster engine, {frames}-frame report    : {:>12.0} frames/s",
            per_s(ns, frames)
        );
    }
    if let Some(ns) = mean_ns("native-warm/engine_symbolicate, names not yet demangled") {
        println!(
            "  symcluster engine, names not demangled : {:>12.0} frames/s",
            per_s(ns, frames)
        );
    }
    if let Some(ns) = engine_report {
        println!(
            "  symcluster engine, {REPORT_FRAMES}-frame report     : {:>12.0} frames/s",
            per_s(ns, REPORT_FRAMES)
        );
    }
    if let Some(ns) = long {
        println!(
            "  llvm-symbolizer long-lived, warm       : {:>12.0} frames/s",
            per_s(ns, frames)
        );
    }
    if let Some(ns) = per_report {
        println!(
            "  llvm-symbolizer, one process per report: {:>12.0} frames/s",
            per_s(ns, REPORT_FRAMES)
        );
    }
    match &big {
        Some(big) => big.print(),
        None => println!(
            "  (no production-size dSYM: bash scripts/generate-big-dsym.sh builds one, ~15 min)"
        ),
    }
    match (engine, long, engine_report, per_report) {
        (Some(e), Some(l), Some(er), Some(pr)) => {
            println!(
                "ratio native warm / llvm-symbolizer long-lived: {:.1}x",
                l / e
            );
            println!(
                "ratio native warm / llvm-symbolizer per report: {:.1}x",
                pr / er
            );
        }
        _ if llvm.is_none() => {
            println!("  llvm-symbolizer not found (apt-get install llvm): no ratio")
        }
        _ => println!("  (no estimates found under target/criterion: run without --test)"),
    }
}

/// One SymCache for every image.
struct Fresh(ModuleLoad);

impl SymCacheSource for Fresh {
    fn load(&self, _: &Image) -> ModuleLoad {
        self.0.clone()
    }
}

/// A report of one crashed thread whose frames are `relative` (offsets in the image).
fn report_of(debug_id: DebugId, relative: &[u64]) -> NativeReport {
    NativeReport {
        format: ReportFormat::SymbolicatorRequest,
        arch: Arch::Arm64,
        crash_reason: None,
        signal: None,
        call_tree: Vec::new(),
        kind: symcluster_engine::ReportKind::Crash,
        details: None,
        modules: symcluster_engine::model::Modules::Referenced,
        facets: Default::default(),
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
                    trust: None,
                })
                .collect(),
        }],
    }
}

/// llvm-symbolizer's input for `relative`: one hexadecimal address per line, the address the
/// engine looks up (the return address minus 4, except frame 0).
fn lookups_of(relative: &[u64]) -> String {
    relative
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{:#x}\n", if i == 0 { *r } else { r - 4 }))
        .collect()
}

/// One llvm-symbolizer process kept running: addresses in on stdin, answers out on stdout
/// (each address's answer ends with an empty line; llvm-symbolizer flushes after each).
struct LongLived {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    line: String,
}

impl LongLived {
    fn start(llvm: &Path, dwarf: &Path) -> Self {
        let mut child = spawn_llvm_symbolizer(llvm, dwarf);
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        LongLived {
            child,
            stdin,
            stdout,
            line: String::new(),
        }
    }

    /// Sends `addresses` (`count` lines) and reads back every answer; returns the answer
    /// lines read. Writing happens on a scoped thread, so that neither pipe fills up while the
    /// other waits.
    fn resolve(&mut self, addresses: &str, count: usize) -> usize {
        let stdin = self.stdin.as_mut().unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                stdin.write_all(addresses.as_bytes()).unwrap();
                stdin.flush().unwrap();
            });
            let (mut answers, mut lines) = (0, 0);
            while answers < count {
                self.line.clear();
                let n = self.stdout.read_line(&mut self.line).unwrap();
                assert!(n > 0, "llvm-symbolizer ended early");
                lines += 1;
                if self.line == "\n" {
                    answers += 1;
                }
            }
            lines
        })
    }
}

impl Drop for LongLived {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
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

/// llvm-symbolizer on `dwarf`, as the benchmarks run it: inlined frames, linkage names
/// demangled.
fn llvm_symbolizer(llvm: &Path, dwarf: &Path) -> Command {
    let mut command = Command::new(llvm);
    command.arg(format!("--obj={}", dwarf.display())).args([
        "--inlines",
        "--functions=linkage",
        "--demangle",
    ]);
    command
}

/// [`llvm_symbolizer`] started with piped stdin and stdout.
fn spawn_llvm_symbolizer(llvm: &Path, dwarf: &Path) -> std::process::Child {
    llvm_symbolizer(llvm, dwarf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn llvm-symbolizer")
}

fn run_llvm_symbolizer(llvm: &Path, dwarf: &Path, addresses: &str) -> usize {
    let mut child = spawn_llvm_symbolizer(llvm, dwarf);
    let mut stdin = child.stdin.take().unwrap();
    let input = addresses.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("llvm-symbolizer output");
    writer.join().unwrap().unwrap();
    out.stdout.len()
}

/// BigApp's DWARF from `scripts/generate-big-dsym.sh` (or `SYMCLUSTER_BIG_DSYM`), when built.
fn big_dwarf() -> Option<PathBuf> {
    let path = std::env::var_os("SYMCLUSTER_BIG_DSYM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/big-dsym/BigApp.dSYM/Contents/Resources/DWARF/BigApp")
        });
    path.exists().then_some(path)
}

/// The child's work: map the file and convert its first object, as a worker does: the dSYM
/// memory-mapped and its pages released from the process as the conversion goes on
/// (`worker/src/debug_file.rs`), the SymCache written to a file as it is serialized, then
/// mapped (`worker/src/caches.rs`).
fn convert_only(path: &Path) {
    let file = std::fs::File::open(path).expect("the dSYM");
    // SAFETY: the generated dSYM is not written while the bench runs.
    let bytes = unsafe { memmap2::Mmap::map(&file) }.expect("map the dSYM");
    let (debug_id, _, _) = list_objects(&bytes).expect("an object file")[0];
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file.as_file_mut());
    SymCacheFile::write_object_file(&bytes, debug_id, &mut out, || {
        // SAFETY: a read-only map of a file nobody writes: the pages are read back unchanged.
        let _ = unsafe { bytes.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
    })
    .expect("conversion");
    std::io::Write::flush(&mut out).expect("written");
    drop(out);
    let symcache =
        SymCacheFile::parse(symbolic_common::ByteView::open(file.path()).expect("mapped"))
            .expect("a SymCache");
    std::hint::black_box(symcache.size_bytes());
}

/// The first answer from a dSYM no SymCache exists for: maps it, builds the partial SymCache of
/// the addresses read from stdin (image-relative, hex, one per line), and looks each up.
fn first_answer_only(path: &Path) {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input).expect("addresses");
    let addresses: Vec<u64> = input
        .lines()
        .map(|l| u64::from_str_radix(l.trim().trim_start_matches("0x"), 16).expect("hex"))
        .collect();
    let bytes = symbolic_common::ByteView::open(path).expect("map the dSYM");
    let (debug_id, _, _) = list_objects(&bytes).expect("an object file")[0];
    let partial = SymCacheFile::for_addresses(&bytes, debug_id, &addresses).expect("partial");
    let found = addresses
        .iter()
        .filter(|a| partial.get().lookup(**a).next().is_some())
        .count();
    assert_eq!(found, addresses.len(), "every address has a function");
}

/// Wall time and peak resident memory of one process.
struct Measured {
    wall: Duration,
    max_rss_mib: f64,
}

/// Runs `command` to its end (writing `input` to its stdin), measuring it with `wait4` from a
/// fresh, small process ([`spawn_and_report`]): a child forked from this one would be charged
/// this process's resident memory at the fork in its peak (Linux keeps the larger of the
/// forked and the executed image's `maxrss`), and this process holds a whole BigApp SymCache
/// by the time the first answers are measured.
fn measure(command: &Command, input: &str) -> Measured {
    let started = std::time::Instant::now();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(SPAWN_ENV, "1")
        .envs(
            command
                .get_envs()
                .filter_map(|(key, value)| Some((key, value?))),
        )
        .arg(command.get_program())
        .args(command.get_args())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?} failed: {stderr}");
    let kib: f64 = stderr
        .lines()
        .find_map(|l| l.strip_prefix("maxrss-kib "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{command:?}: no peak reported: {stderr}"));
    Measured {
        wall: started.elapsed(),
        max_rss_mib: kib / 1024.0,
    }
}

/// The measuring process: runs its arguments as a command (stdin and stdout inherited), waits
/// for it with `wait4`, prints `maxrss-kib N` (its peak resident memory; Linux reports
/// `ru_maxrss` in KiB) on stderr, and exits as it did.
#[allow(
    clippy::zombie_processes,
    reason = "reaped by wait4, which also gives its rusage"
)]
fn spawn_and_report() {
    let mut args = std::env::args_os().skip(1);
    let program = args.next().expect("a command");
    let child = Command::new(program)
        .args(args)
        .env_remove(SPAWN_ENV)
        .spawn()
        .expect("spawn");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for the child we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    eprintln!("maxrss-kib {}", usage.ru_maxrss);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        1
    };
    std::process::exit(code);
}

/// The production-size dSYM: conversion (time, peak RSS) against llvm-symbolizer's first
/// answer on the same file, and warm frames/s of both on it.
struct BigDsym {
    dwarf_mb: f64,
    symcache_mb: f64,
    convert: Measured,
    /// The report's frames answered from the dSYM alone (partial SymCache), one process.
    first_answer: Measured,
    llvm_first: Option<Measured>,
    /// llvm-symbolizer started and asked the report's frames, one process.
    llvm_first_report: Option<Measured>,
    frames: usize,
}

impl BigDsym {
    fn measure(dwarf: &Path, llvm: Option<&Path>, c: &mut Criterion) -> Self {
        let dwarf_mb = std::fs::metadata(dwarf).unwrap().len() as f64 / 1e6;
        let convert = measure(
            Command::new(std::env::current_exe().unwrap()).env(CONVERT_ENV, dwarf),
            "",
        );
        // Warm: the same conversion here, then lookups of addresses spread over the file.
        let bytes = std::fs::read(dwarf).unwrap();
        let (debug_id, _, _) = list_objects(&bytes).unwrap()[0];
        let symcache = SymCacheFile::from_object_file(&bytes, debug_id).unwrap();
        drop(bytes);
        let symcache_mb = symcache.size_bytes() as f64 / 1e6;
        let mut entries: Vec<u64> = symcache
            .get()
            .functions()
            .map(|f| f.entry_pc() as u64)
            .filter(|&pc| pc != u32::MAX as u64)
            .collect();
        entries.sort_unstable();
        entries.dedup();
        let step = (entries.len() / FRAMES).max(1);
        // SymCache addresses are relative to the image's `__TEXT` vmaddr; an executable's is
        // 0x1_0000_0000, which llvm-symbolizer's (DWARF) addresses include.
        let vmaddr = 0x1_0000_0000u64;
        let relative: Vec<u64> = entries
            .iter()
            .step_by(step)
            .take(FRAMES)
            .map(|pc| pc + 8)
            .collect();
        let frames = relative.len();
        let report = report_of(debug_id, &relative);
        let lookups: String = relative
            .iter()
            .enumerate()
            .map(|(i, r)| format!("{:#x}\n", vmaddr + if i == 0 { *r } else { r - 4 }))
            .collect();
        // A report's worth (100 frames), spread over the whole image like the warm ones.
        let report_frames: Vec<u64> = relative
            .iter()
            .step_by((frames / REPORT_FRAMES).max(1))
            .take(REPORT_FRAMES)
            .copied()
            .collect();
        let first_answer = measure(
            Command::new(std::env::current_exe().unwrap()).env(FIRST_ANSWER_ENV, dwarf),
            &report_frames
                .iter()
                .map(|r| format!("{r:#x}\n"))
                .collect::<String>(),
        );
        let llvm_first_report = llvm.map(|llvm| {
            measure(
                &llvm_symbolizer(llvm, dwarf),
                &report_frames
                    .iter()
                    .map(|r| format!("{:#x}\n", vmaddr + r))
                    .collect::<String>(),
            )
        });
        let llvm_first = llvm.map(|llvm| {
            measure(
                &llvm_symbolizer(llvm, dwarf),
                &format!("{:#x}\n", vmaddr + relative[frames / 2]),
            )
        });
        let source = Fresh(ModuleLoad::Found(std::sync::Arc::new(symcache)));
        let mut group = c.benchmark_group("native-big");
        group.throughput(Throughput::Elements(frames as u64));
        group.bench_function("engine/symbolicate", |b| {
            b.iter(|| symbolicate(&report, &source))
        });
        if let Some(llvm) = llvm {
            let mut long_lived = LongLived::start(llvm, dwarf);
            long_lived.resolve(&lookups, frames);
            group.bench_function("llvm-symbolizer long-lived", |b| {
                b.iter(|| long_lived.resolve(&lookups, frames))
            });
        }
        group.finish();
        BigDsym {
            dwarf_mb,
            symcache_mb,
            convert,
            first_answer,
            llvm_first,
            llvm_first_report,
            frames,
        }
    }

    fn print(&self) {
        let per_s = |ns: f64| self.frames as f64 / (ns / 1e9);
        println!(
            "\nproduction-size dSYM (BigApp, {:.0} MB of DWARF; SymCache {:.1} MB):",
            self.dwarf_mb, self.symcache_mb
        );
        println!(
            "  SymCache conversion (map + convert, one process): {:>8.1} s, peak RSS {:>6.0} MiB",
            self.convert.wall.as_secs_f64(),
            self.convert.max_rss_mib
        );
        println!(
            "  first answer, {} frames, no SymCache yet (map + partial SymCache of their functions): {:>6.2} s, peak RSS {:>6.0} MiB",
            REPORT_FRAMES,
            self.first_answer.wall.as_secs_f64(),
            self.first_answer.max_rss_mib
        );
        if let Some(first) = &self.llvm_first_report {
            println!(
                "  llvm-symbolizer, first answer, {} frames (start + the frames): {:>6.2} s, peak RSS {:>6.0} MiB",
                REPORT_FRAMES,
                first.wall.as_secs_f64(),
                first.max_rss_mib
            );
        }
        if let Some(first) = &self.llvm_first {
            println!(
                "  llvm-symbolizer, first answer (start + one address): {:>6.1} s, peak RSS {:>6.0} MiB",
                first.wall.as_secs_f64(),
                first.max_rss_mib
            );
        }
        if let Some(ns) = mean_ns("native-big/engine_symbolicate") {
            println!("  symcluster engine, warm: {:>12.0} frames/s", per_s(ns));
        }
        if let Some(ns) = mean_ns("native-big/llvm-symbolizer long-lived") {
            println!(
                "  llvm-symbolizer long-lived, warm: {:>12.0} frames/s",
                per_s(ns)
            );
        }
    }
}

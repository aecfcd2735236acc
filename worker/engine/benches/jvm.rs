//! Java/Kotlin retrace: the engine against ProGuard's `retrace` (Debian `proguard-cli`'s
//! retrace.jar), same mapping, same trace, one run.
//!
//! Input: a generated mapping file the size of a large Android app's (`CLASSES` classes of
//! `METHODS` methods, every fourth with an inlined call, as ProGuard writes them: ~40 MB) and a
//! trace of `FRAMES` frames spread over it. Measured:
//! - **cold, time to first frame**: read and prepare the mapping, retrace one frame (engine:
//!   in-process `JvmMapping::from_mapping_file` + `retrace`; ProGuard: one JVM, one frame);
//! - **warm frames/s**: retracing `FRAMES` frames once the mapping is prepared (engine:
//!   criterion on `retrace`). ProGuard's retrace has no long-lived mode (one process reads the
//!   mapping and one trace), so its best mode is one large batch: (t(FRAMES) − t(1)) /
//!   (FRAMES − 1) over two processes, which leaves out the JVM's start and the mapping's parse.
//!
//! Also checks that both give the same text for every line. Needs `java` and retrace.jar
//! (`bash scripts/install-reference-tools.sh`, or set `PROGUARD_RETRACE_JAR`); without them,
//! only the engine is measured. Run: `cargo bench -p symcluster-engine --bench jvm`.

/// The worker's allocator (`symcluster-worker` sets it too): the engine measured as it runs
/// there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
use common::{mean_ns, median, ms};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use symcluster_engine::jvm::{JvmMapping, parse_trace, render, retrace};

const CLASSES: usize = 20_000;
const METHODS: usize = 24;
const FRAMES: usize = 50_000;

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-jvm");
    std::fs::create_dir_all(&target).unwrap();
    let mapping_path = target.join(format!("mapping-{CLASSES}x{METHODS}.txt"));
    if !mapping_path.exists() {
        std::fs::write(&mapping_path, mapping()).unwrap();
    }
    let mapping_bytes = std::fs::read(&mapping_path).unwrap();
    let trace_all = trace(FRAMES);
    let trace_one = trace(1);
    std::fs::write(target.join("trace-all.txt"), &trace_all).unwrap();
    std::fs::write(target.join("trace-one.txt"), &trace_one).unwrap();

    // Cold: median of 3 in-process runs (the mapping read from disk each time).
    let cold_engine = median(3, || {
        let start = Instant::now();
        let bytes = std::fs::read(&mapping_path).unwrap();
        let mapping = JvmMapping::from_mapping_file(&bytes).unwrap();
        let trace = parse_trace(trace_one.as_bytes()).unwrap();
        std::hint::black_box(retrace(&trace, &mapping, None));
        start.elapsed()
    });

    // What the prepared form costs at first: the proguard crate's in-memory mapper (no
    // prepared file) over the same frame.
    let cold_mapper = median(3, || {
        let start = Instant::now();
        let bytes = std::fs::read(&mapping_path).unwrap();
        let text = std::str::from_utf8(&bytes).unwrap();
        let mapper = proguard::ProguardMapper::from(text);
        std::hint::black_box(mapper.remap_stacktrace(&trace_one).unwrap());
        start.elapsed()
    });

    let mapping = JvmMapping::from_mapping_file(&mapping_bytes).unwrap();
    let trace = parse_trace(trace_all.as_bytes()).unwrap();
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(10)
        .measurement_time(Duration::from_secs(5));
    let mut group = c.benchmark_group("jvm-warm");
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("engine/retrace", |b| {
        b.iter(|| retrace(&trace, &mapping, None))
    });
    group.finish();
    c.final_summary();
    let warm_engine = mean_ns("jvm-warm/engine_retrace").map(|ns| FRAMES as f64 / (ns / 1e9));

    println!(
        "\nJava retrace, {:.1} MB mapping ({CLASSES} classes x {METHODS} methods), prepared {:.1} MB:",
        mapping_bytes.len() as f64 / 1e6,
        mapping.size_bytes() as f64 / 1e6
    );
    println!(
        "  symcluster cold (prepare mapping + first frame): {:>8.0} ms",
        ms(cold_engine)
    );
    println!(
        "  (the proguard crate's in-memory mapper, no prepared form, first frame: {:.0} ms)",
        ms(cold_mapper)
    );
    if let Some(fps) = warm_engine {
        println!("  symcluster warm: {fps:>12.0} frames/s");
    }

    let Some((java, jar)) = proguard_retrace() else {
        println!(
            "  ProGuard retrace not found (bash scripts/install-reference-tools.sh): no ratio"
        );
        return;
    };
    let out_path = target.join("retrace-out.txt");
    let run = |trace_file: &Path| -> (Duration, String) {
        let start = Instant::now();
        let status = Command::new(&java)
            .arg("-jar")
            .arg(&jar)
            .arg(&mapping_path)
            .arg(trace_file)
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(Stdio::inherit())
            .status()
            .expect("run ProGuard retrace");
        let elapsed = start.elapsed();
        assert!(status.success(), "ProGuard retrace failed");
        (elapsed, std::fs::read_to_string(&out_path).unwrap())
    };
    let cold_peer = median(3, || run(&target.join("trace-one.txt")).0);
    let all_peer = median(3, || run(&target.join("trace-all.txt")).0);
    let (_, peer_text) = run(&target.join("trace-all.txt"));
    let warm_peer = (FRAMES - 1) as f64 / all_peer.saturating_sub(cold_peer).as_secs_f64();

    let ours = render::java_text(&retrace(&trace, &mapping, None));
    let lines = peer_text.lines().count();
    let same = peer_text
        .lines()
        .zip(ours.lines())
        .filter(|(a, b)| a == b)
        .count();
    if let Some((a, b)) = peer_text.lines().zip(ours.lines()).find(|(a, b)| a != b) {
        println!("  first difference: ProGuard {a:?}, symcluster {b:?}");
    }
    println!(
        "  ProGuard retrace cold (JVM start, parse, first frame): {:>8.0} ms",
        ms(cold_peer)
    );
    println!("  ProGuard retrace warm (one batch): {warm_peer:>12.0} frames/s");
    println!(
        "  identical lines: {same} of {lines} (symcluster printed {})",
        ours.lines().count()
    );
    println!(
        "ratio jvm cold ProGuard retrace / symcluster: {:.1}x",
        ms(cold_peer) / ms(cold_engine)
    );
    if let Some(fps) = warm_engine {
        println!(
            "ratio jvm warm symcluster / ProGuard retrace: {:.1}x",
            fps / warm_peer
        );
    }
}

/// The original class of obfuscated class `c`.
fn class(c: usize) -> String {
    format!("com.example.feature{}.Screen{c}", c % 50)
}

/// A mapping as ProGuard writes it: each class `a.c<c>` with methods `m<m>` over obfuscated
/// lines `m*10+1 ..= m*10+5`; every fourth method has `inlined<m>` inlined into it there.
fn mapping() -> String {
    let mut out = String::new();
    for c in 0..CLASSES {
        let _ = writeln!(out, "{} -> a.c{c}:", class(c));
        let _ = writeln!(out, "    java.lang.String name -> a");
        for m in 0..METHODS {
            let s = m * 10 + 1;
            let o = 100 + m * 10;
            if m % 4 == 0 {
                let _ = writeln!(
                    out,
                    "    {s}:{}:void inlined{m}(int):{}:{} -> m{m}",
                    s + 4,
                    500 + m * 10,
                    504 + m * 10
                );
                let _ = writeln!(out, "    {s}:{}:void method{m}(int):{o} -> m{m}", s + 4);
            } else {
                let _ = writeln!(
                    out,
                    "    {s}:{}:void method{m}(int):{o}:{} -> m{m}",
                    s + 4,
                    o + 4
                );
            }
        }
    }
    out
}

/// A trace of `n` frames spread over the classes and methods.
fn trace(n: usize) -> String {
    let mut out = String::from("java.lang.IllegalStateException: bench\n");
    for i in 0..n {
        let c = (i * 7919) % CLASSES;
        let m = (i * 31) % METHODS;
        let line = m * 10 + 1 + i % 5;
        let _ = writeln!(out, "\tat a.c{c}.m{m}(SourceFile:{line})");
    }
    out
}

/// `java` and ProGuard's retrace.jar: `PROGUARD_RETRACE_JAR`, else Debian's.
fn proguard_retrace() -> Option<(PathBuf, PathBuf)> {
    let jar = std::env::var_os("PROGUARD_RETRACE_JAR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/share/java/retrace.jar"));
    let java = Command::new("java")
        .arg("-version")
        .stderr(Stdio::null())
        .status()
        .ok()?;
    (java.success() && jar.exists()).then(|| (PathBuf::from("java"), jar))
}

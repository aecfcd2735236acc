//! React Native stack restoration: the engine against `metro-symbolicate`, same map, same stack,
//! one run.
//!
//! Input: a generated production-sized source map (≥ 40 MB: 2,600 modules with
//! `sourcesContent`, 600 tokens each, one bundle line per module, as Metro emits) and a JSC-style
//! stack of `FRAMES` frames spread over it. Measured:
//! - **cold, time to first frame**: read + prepare the map and restore one frame (engine:
//!   in-process `JsSourceMap::parse` + `restore`; metro-symbolicate: one process, one frame);
//! - **warm frames/s**: restoring `FRAMES` frames once the map is prepared (engine: criterion on
//!   `restore`, with and without the 5 lines of source context metro does not produce; metro-symbolicate: (t(FRAMES) − t(1)) / (FRAMES − 1) over two processes).
//!
//! Also checks that both tools give the same file:line:name for every frame. Needs
//! `metro-symbolicate` (`bash scripts/install-reference-tools.sh`, or set `METRO_SYMBOLICATE`);
//! without it, only the engine is measured. Run: `cargo bench -p symcluster-engine --bench js`.

/// The worker's allocator (`symcluster-worker` sets it too): the engine measured as it runs
/// there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod common;
use common::{mean_ns, median, ms};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use sourcemap::SourceMapBuilder;
use symcluster_engine::js::{
    JsSourceMap, RestoreOptions, parse_stack, render, restore, restore_with,
};

const MODULES: u32 = 2_600;
const TOKENS_PER_MODULE: u32 = 600;
const SOURCE_LINES: u32 = 200;
const FRAMES: usize = 200_000;

fn main() {
    let target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-js");
    std::fs::create_dir_all(&target).unwrap();
    // Named by its shape, so that a change of the constants makes a new map.
    let map_path = target.join(format!("big-{MODULES}x{TOKENS_PER_MODULE}.bundle.map"));
    if !map_path.exists() {
        generate_map(&map_path);
    }
    let map_bytes = std::fs::read(&map_path).unwrap();
    let stack_all = stack(FRAMES);
    let stack_one = stack(1);
    std::fs::write(target.join("stack-all.txt"), &stack_all).unwrap();
    std::fs::write(target.join("stack-one.txt"), &stack_one).unwrap();

    // Cold: median of 5 in-process runs (map bytes read from disk each time).
    let cold_engine = median(5, || {
        let start = Instant::now();
        let bytes = std::fs::read(&map_path).unwrap();
        let map = JsSourceMap::parse(&bytes, None).unwrap();
        let stack = parse_stack(stack_one.as_bytes(), 1).unwrap();
        std::hint::black_box(restore(&stack, &map));
        start.elapsed()
    });

    let map = JsSourceMap::parse(&map_bytes, None).unwrap();
    let stack = parse_stack(stack_all.as_bytes(), 1).unwrap();
    let mut c = Criterion::default()
        .configure_from_args()
        .sample_size(20)
        .measurement_time(Duration::from_secs(5));
    let mut group = c.benchmark_group("js-warm");
    group.throughput(Throughput::Elements(FRAMES as u64));
    group.bench_function("engine/restore", |b| b.iter(|| restore(&stack, &map)));
    let bare = RestoreOptions { context_lines: 0 };
    group.bench_function("engine/restore-no-context", |b| {
        b.iter(|| restore_with(&stack, &map, bare))
    });
    group.finish();
    c.final_summary();
    let warm_engine_ns = mean_ns("js-warm/engine_restore");
    let bare_engine_ns = mean_ns("js-warm/engine_restore-no-context");

    println!(
        "\nReact Native stack restoration, {:.1} MB source map ({MODULES} modules):",
        map_bytes.len() as f64 / 1e6
    );
    println!(
        "  symcluster cold (prepare map + first frame): {:>8.0} ms",
        ms(cold_engine)
    );
    if let Some(ns) = warm_engine_ns {
        println!(
            "  symcluster warm, 5 lines of context: {:>10.0} frames/s",
            FRAMES as f64 / (ns / 1e9)
        );
    }
    if let Some(ns) = bare_engine_ns {
        println!(
            "  symcluster warm, no context (metro's work): {:>10.0} frames/s",
            FRAMES as f64 / (ns / 1e9)
        );
    }

    let Some(metro) = metro_symbolicate() else {
        println!(
            "  metro-symbolicate not found (bash scripts/install-reference-tools.sh): no ratio"
        );
        return;
    };
    // metro-symbolicate exits before a pipe is drained: its output goes to a file.
    let out_path = target.join("metro-out.txt");
    let run_metro = |stack_file: &Path| -> (Duration, String) {
        let start = Instant::now();
        let status = Command::new(&metro)
            .arg(&map_path)
            .args(["--input-column-start", "1"])
            .stdin(std::fs::File::open(stack_file).unwrap())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(Stdio::inherit())
            .status()
            .expect("run metro-symbolicate");
        let elapsed = start.elapsed();
        assert!(status.success(), "metro-symbolicate failed");
        (elapsed, std::fs::read_to_string(&out_path).unwrap())
    };
    let cold_metro = median(3, || run_metro(&target.join("stack-one.txt")).0);
    let all_metro = median(3, || run_metro(&target.join("stack-all.txt")).0);
    let warm_metro = (FRAMES - 1) as f64 / (all_metro.saturating_sub(cold_metro)).as_secs_f64();

    // Same answers? Compare metro's text output with ours, line by line.
    let (_, metro_text) = run_metro(&target.join("stack-all.txt"));
    let ours = render::metro_text(&stack_all, &stack, &restore(&stack, &map), &map, 1);
    let same = metro_text
        .lines()
        .zip(ours.lines())
        .filter(|(a, b)| a == b)
        .count();
    if let Some((a, b)) = metro_text.lines().zip(ours.lines()).find(|(a, b)| a != b) {
        println!("  first difference: metro {a:?}, symcluster {b:?}");
    }

    println!(
        "  metro-symbolicate cold (node start, parse, first frame): {:>8.0} ms",
        ms(cold_metro)
    );
    println!("  metro-symbolicate warm: {:>12.0} frames/s", warm_metro);
    println!(
        "  ratio cold (metro / symcluster): {:.1}x faster",
        ms(cold_metro) / ms(cold_engine)
    );
    println!("  identical answers: {same} of {FRAMES} frames");
    if let Some(ns) = bare_engine_ns {
        println!(
            "ratio js warm no context / metro-symbolicate: {:.1}x",
            (FRAMES as f64 / (ns / 1e9)) / warm_metro
        );
    }
    if let Some(ns) = warm_engine_ns {
        println!(
            "ratio js warm with context / metro-symbolicate: {:.1}x",
            (FRAMES as f64 / (ns / 1e9)) / warm_metro
        );
    }
}

/// A Metro-like bundle map: one generated line per module, tokens every 7 columns.
fn generate_map(path: &Path) {
    let mut builder = SourceMapBuilder::new(Some("index.android.bundle"));
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for module in 0..MODULES {
        let source = format!("/app/src/feature{}/module{module}.js", module % 40);
        let id = builder.add_source(&source);
        let contents: String = (0..SOURCE_LINES)
            .map(|l| {
                format!("  const value{l} = compute{module}(input{l}, options); // line {l}\n")
            })
            .collect();
        builder.set_source_contents(id, Some(&contents));
        for t in 0..TOKENS_PER_MODULE {
            let src_line = (t * SOURCE_LINES / TOKENS_PER_MODULE) + (next() % 2) as u32;
            let name = (t % 3 == 0).then(|| format!("compute{module}"));
            builder.add(
                module,
                t * 7,
                src_line.min(SOURCE_LINES - 1),
                (next() % 40) as u32,
                Some(&source),
                name.as_deref(),
                false,
            );
        }
    }
    let map = builder.into_sourcemap();
    let file = std::fs::File::create(path).unwrap();
    map.to_writer(std::io::BufWriter::new(file)).unwrap();
}

/// `n` frames spread over the bundle, JSC style, 1-based positions.
fn stack(n: usize) -> String {
    (0..n)
        .map(|i| {
            let line = (i as u32 * 7919) % MODULES + 1;
            let column = (i as u32 * 104_729) % (TOKENS_PER_MODULE * 7) + 1;
            format!("fn{i}@index.android.bundle:{line}:{column}\n")
        })
        .collect()
}

fn metro_symbolicate() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("METRO_SYMBOLICATE") {
        return Some(PathBuf::from(p));
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/reference-tools/node_modules/.bin/metro-symbolicate");
    local.exists().then_some(local)
}

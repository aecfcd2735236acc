//! Partial SymCaches (only the compilation units some addresses fall in) against the full
//! SymCache, frame by frame, on every native debug file the project has: CrashProbe's dSYMs
//! (debug and release, the app, its frameworks and the Swift runtime), the demo's thin and fat
//! dSYMs, the Linux demo's ELF file, the system-symbol dylibs, and BigApp when it was generated
//! (`scripts/generate-big-dsym.sh`).

use std::path::{Path, PathBuf};

use symbolic_common::Language;
use symcluster_engine::debug_files::{DebugFileIndex, list_objects};
use symcluster_engine::model::Image;
use symcluster_engine::result::FrameStatus;
use symcluster_engine::symcache::SymCacheFile;
use symcluster_engine::{
    LocalSymCaches, ModuleLoad, NativeReport, SymCacheSource, image_lookups, parse_report,
    symbolicate,
};

use crate::support::{demo, fixture, repo};

/// Every object file under `root` (files that parse as Mach-O or ELF).
fn object_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .filter(|p| {
            std::fs::read(p)
                .ok()
                .is_some_and(|bytes| list_objects(&bytes).is_ok_and(|o| !o.is_empty()))
        })
        .collect();
    files.sort();
    files
}

/// What a lookup gives, level by level (innermost first): raw name, language, entry address,
/// full path and line.
type Levels = Vec<(String, Language, u32, Option<String>, u32)>;

fn lookup(symcache: &SymCacheFile, address: u64) -> Levels {
    symcache
        .get()
        .lookup(address)
        .map(|l| {
            let f = l.function();
            (
                f.name().to_owned(),
                f.language(),
                f.entry_pc(),
                l.file().map(|file| file.full_path()),
                l.line(),
            )
        })
        .collect()
}

/// xorshift64, for a sample that is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// Addresses to check in a SymCache: every function's entry, the byte after it, and up to 8
/// more spread to the next function's entry; and addresses past the last one.
fn sample(full: &SymCacheFile, rng: &mut Rng) -> Vec<u64> {
    let mut entries: Vec<u64> = full
        .get()
        .functions()
        .map(|f| f.entry_pc())
        .filter(|pc| *pc != u32::MAX)
        .map(u64::from)
        .collect();
    entries.sort_unstable();
    entries.dedup();
    let mut addresses = Vec::new();
    for pair in entries.windows(2) {
        let (start, next) = (pair[0], pair[1]);
        addresses.extend([start, start + 1]);
        for _ in 0..8 {
            addresses.push(start + rng.below(next - start));
        }
    }
    if let Some(last) = entries.last() {
        addresses.extend([*last, last + 4, last + 0x1000, last + 0x10_0000]);
    }
    addresses
}

/// Checks every object of `path`: batches of 16 sampled addresses (at most 48 batches per
/// object, drawn from the whole sample), each batch's partial SymCache giving each of its
/// addresses what the full SymCache gives. Returns how many addresses were checked, and how
/// many partial SymCaches were smaller than the full one.
fn check_file(path: &Path, rng: &mut Rng) -> (usize, usize) {
    let bytes = std::fs::read(path).unwrap();
    let mut checked = 0;
    let mut smaller = 0;
    for (debug_id, arch, _) in list_objects(&bytes).unwrap() {
        let full = SymCacheFile::from_object_file(&bytes, debug_id)
            .unwrap_or_else(|e| panic!("{} ({arch}): {e}", path.display()));
        let mut addresses = sample(&full, rng);
        // Shuffled, so that a batch mixes units.
        for i in (1..addresses.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            addresses.swap(i, j);
        }
        for batch in addresses.chunks(16).take(48) {
            let partial = SymCacheFile::for_addresses(&bytes, debug_id, batch)
                .unwrap_or_else(|e| panic!("{} ({arch}) at {batch:x?}: {e}", path.display()));
            if partial.size_bytes() < full.size_bytes() {
                smaller += 1;
            }
            for &address in batch {
                assert_eq!(
                    lookup(&partial, address),
                    lookup(&full, address),
                    "{} ({arch}, {debug_id}) at {address:#x}",
                    path.display()
                );
                checked += 1;
            }
        }
    }
    (checked, smaller)
}

#[test]
fn a_partial_symcache_answers_its_addresses_as_the_full_one_on_every_native_fixture() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut files = object_files(&fixture("crashprobe"));
    files.extend(object_files(&repo().join("examples/ios-demo")));
    files.extend(object_files(&repo().join("examples/linux-demo")));
    files.extend(object_files(&repo().join("examples/ios-system-symbols")));
    assert!(files.len() >= 20, "{files:?}");
    let mut checked = 0;
    for file in &files {
        let (n, _) = check_file(file, &mut rng);
        checked += n;
    }
    assert!(checked > 10_000, "only {checked} addresses checked");
    // CrashProbe's app has many compilation units: one address's partial SymCache holds less.
    let app = fixture(
        "crashprobe/debug/dSYMs/arm64-CrashProbeiOS.app.dSYM/Contents/Resources/DWARF/CrashProbeiOS",
    );
    let (_, smaller) = check_file(&app, &mut rng);
    assert!(
        smaller > 0,
        "no partial SymCache of CrashProbeiOS was smaller than the full one"
    );
}

/// BigApp (360 MB of DWARF in 400 units), when generated: the same check, and a partial
/// SymCache of 16 addresses is a small part of the full one.
#[test]
fn a_partial_symcache_of_the_big_dsym_answers_as_the_full_one() {
    let big = std::env::var_os("SYMCLUSTER_BIG_DSYM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            repo().join("target/big-dsym/BigApp.dSYM/Contents/Resources/DWARF/BigApp")
        });
    if !big.exists() {
        eprintln!(
            "skipped: no {} (scripts/generate-big-dsym.sh)",
            big.display()
        );
        return;
    }
    let mut rng = Rng(7);
    let (checked, smaller) = check_file(&big, &mut rng);
    assert!(checked >= 16 * 48, "{checked}");
    assert_eq!(smaller, 48);
}

/// The SymCaches of a report's images built from only the addresses the report looks up
/// ([`image_lookups`]), from the debug files `index` found.
struct PartialSymCaches<'a> {
    index: &'a DebugFileIndex,
    report: &'a NativeReport,
    lookups: Vec<(usize, Vec<u64>)>,
}

impl SymCacheSource for PartialSymCaches<'_> {
    fn load(&self, image: &Image) -> ModuleLoad {
        let Some(debug_id) = image.debug_id else {
            return ModuleLoad::Missing;
        };
        let Some(entry) = self.index.get(&debug_id) else {
            return ModuleLoad::Missing;
        };
        // Every image with this debug id: their addresses together.
        let addresses: Vec<u64> = self
            .lookups
            .iter()
            .filter(|(i, _)| self.report.images[*i].debug_id == Some(debug_id))
            .flat_map(|(_, a)| a.iter().copied())
            .collect();
        let bytes = std::fs::read(&entry.path).unwrap();
        match SymCacheFile::for_addresses(&bytes, debug_id, &addresses) {
            Ok(symcache) => ModuleLoad::Found(std::sync::Arc::new(symcache)),
            Err(e) => ModuleLoad::Malformed(e.to_string()),
        }
    }
}

/// Every CrashProbe report (debug and release) and the demo's reports, symbolicated with
/// partial SymCaches of the addresses each looks up, give the very result the full SymCaches
/// give: every thread, frame, module and status.
#[test]
fn reports_symbolicated_with_partial_symcaches_equal_the_full_results() {
    let mut cases: Vec<(PathBuf, PathBuf)> = Vec::new();
    for build in ["debug", "release"] {
        let reports = fixture(&format!("crashprobe/{build}/arm64"));
        let mut names: Vec<PathBuf> = std::fs::read_dir(&reports)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        names.sort();
        let dsyms = fixture(&format!("crashprobe/{build}/dSYMs"));
        cases.extend(names.into_iter().map(|r| (r, dsyms.clone())));
    }
    for report in ["DemoApp.crash", "DemoApp.ips", "DemoApp-sentry.json"] {
        cases.push((demo(report), demo("DemoApp.dSYM")));
    }
    assert!(cases.len() >= 20, "{cases:?}");
    let mut symbolicated = 0;
    for (report_path, debug_files) in &cases {
        let data = std::fs::read(report_path).unwrap();
        let report = parse_report(&data).unwrap();
        let full = LocalSymCaches::scan(&[debug_files]).unwrap();
        let partial = PartialSymCaches {
            index: full.index(),
            report: &report,
            lookups: image_lookups(&report),
        };
        let want = symbolicate(&report, &full);
        let got = symbolicate(&report, &partial);
        assert_eq!(
            serde_json::to_value(&got).unwrap(),
            serde_json::to_value(&want).unwrap(),
            "{}",
            report_path.display()
        );
        symbolicated += want
            .threads
            .iter()
            .flat_map(|t| &t.frames)
            .filter(|f| f.status == FrameStatus::Symbolicated)
            .count();
    }
    assert!(
        symbolicated > 100,
        "only {symbolicated} frames symbolicated"
    );
}

/// A SymCache written as it is serialized ([`SymCacheFile::write_object_file`], what a worker
/// converts with) is byte for byte the one [`SymCacheFile::from_object_file`] builds, on every
/// native fixture and on BigApp when generated, where its pages are released 32 times along
/// the way (once per 20,000 functions) from a map of the file, as the worker does.
#[test]
fn a_symcache_written_as_it_is_serialized_is_the_one_built_in_memory() {
    let mut files = object_files(&fixture("crashprobe"));
    files.extend(object_files(&repo().join("examples/ios-demo")));
    files.extend(object_files(&repo().join("examples/linux-demo")));
    // CrashProbe's 16, the demo's thin and fat dSYMs, the Linux demo's ELF file.
    assert_eq!(files.len(), 19, "{files:?}");
    let big = repo().join("target/big-dsym/BigApp.dSYM/Contents/Resources/DWARF/BigApp");
    if big.exists() {
        files.push(big.clone());
    }
    for path in &files {
        let file = std::fs::File::open(path).unwrap();
        // SAFETY: the fixtures are not written while the test runs.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        for (debug_id, arch, _) in list_objects(&map).unwrap() {
            let mut written = Vec::new();
            let mut releases = 0;
            SymCacheFile::write_object_file(&map, debug_id, &mut written, || {
                // SAFETY: a read-only map of a file nobody writes.
                unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) }.unwrap();
                releases += 1;
            })
            .unwrap();
            let built = SymCacheFile::from_object_file(&map, debug_id).unwrap();
            assert!(
                written == built.bytes(),
                "{} ({arch}): the written SymCache differs",
                path.display()
            );
            let functions = SymCacheFile::parse(symbolic_common::ByteView::from_vec(written))
                .unwrap()
                .get()
                .functions()
                .count();
            if *path == big {
                assert_eq!(releases, 32, "{functions} functions");
            } else {
                assert_eq!(releases, 0);
            }
        }
    }
}

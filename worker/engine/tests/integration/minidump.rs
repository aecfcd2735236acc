//! Minidumps: `examples/linux-demo/demo-app.dmp`, the Linux demo crashed for real and dumped by
//! minidump-writer (`examples/linux-demo/make_minidump.sh`), walked with the CFI of its own
//! debug file and symbolicated against it.

use symcluster_engine::minidump::{self, UnwindInfo, UnwindTable};
use symcluster_engine::model::{FrameTrust, Modules, ReportFormat};
use symcluster_engine::result::{FrameStatus, ModuleStatus};
use symcluster_engine::{LocalSymCaches, symbolicate};

use crate::support::{crashed, repo, summary};

fn dump() -> Vec<u8> {
    std::fs::read(repo().join("examples/linux-demo/demo-app.dmp")).unwrap()
}

fn debug_file() -> std::path::PathBuf {
    repo().join("examples/linux-demo/demo-app.debug")
}

const APP_DEBUG_ID: &str = "e03566f6-988e-a224-5037-26179d47ad6c";

/// The crashed thread's frames as the source markers give them (`examples/linux-demo/
/// expected.md`), frames 1-3 found by the CFI of `demo-app.debug` (built with -O1: no frame
/// pointers to follow), frame 4 in libc (`__libc_start_call_main`, no debug file here).
#[test]
fn crashed_thread_is_walked_with_cfi_and_symbolicated() {
    let data = dump();
    let sources = LocalSymCaches::scan(&[debug_file()]).unwrap();
    let images = minidump::read_images(&data).unwrap();
    let table = sources.unwind_table(&images);
    assert_eq!(table.len(), 1, "only the app's debug file is here");
    let report = minidump::stackwalk(&data, &table, Modules::Referenced).unwrap();
    assert_eq!(report.format, ReportFormat::Minidump);
    assert_eq!(report.signal, Some(11));
    let result = symbolicate(&report, &sources);
    assert_eq!(
        result.crash_reason.as_deref(),
        Some("SIGSEGV / SEGV_MAPERR at 0x0")
    );
    let thread = crashed(&result);
    let f = &thread.frames;
    let got: Vec<_> = f[..5].iter().map(summary).collect();
    assert_eq!(got, crate::support::DEMO_CHAIN);
    let trusts: Vec<_> = f[..5].iter().map(|f| (f.index, f.trust)).collect();
    assert_eq!(
        trusts,
        [
            (0, Some(FrameTrust::Context)),
            (1, Some(FrameTrust::Cfi)),
            (1, Some(FrameTrust::Cfi)),
            (2, Some(FrameTrust::Cfi)),
            (3, Some(FrameTrust::Cfi)),
        ]
    );
    // Frame 0 is the faulting store itself; the others step back into their call.
    assert_eq!(f[0].lookup_addr.0, f[0].instruction_addr.0);
    assert_eq!(f[1].lookup_addr.0, f[1].instruction_addr.0 - 1);
    assert_eq!(f[1].instruction_addr.0 - f[1].image_addr.unwrap().0, 0x1154);
    // main's caller: libc, whose debug file nobody gave.
    assert_eq!(f[5].index, 4);
    assert_eq!(f[5].image.as_deref(), Some("libc.so.6"));
    assert_eq!(f[5].status, FrameStatus::Missing);
    let app = &result.modules[0];
    assert_eq!(app.debug_id.as_deref(), Some(APP_DEBUG_ID));
    assert_eq!(
        app.code_file.as_deref(),
        Some("/tmp/symcluster-linux-demo/demo-app")
    );
    assert_eq!(app.status, ModuleStatus::Found);
    let libc = result
        .modules
        .iter()
        .find(|m| {
            m.code_file
                .as_deref()
                .is_some_and(|f| f.ends_with("/libc.so.6"))
        })
        .unwrap();
    assert_eq!(libc.status, ModuleStatus::Missing);
}

/// Without CFI the walker has only stack scanning for this -O1 build (no frame pointers): the
/// same dump walked with an empty table (what `parse_report` gives) has only guessed callers.
#[test]
fn without_cfi_frames_are_scanned() {
    let data = dump();
    let report = symcluster_engine::parse_report(&data).unwrap();
    assert_eq!(report.format, ReportFormat::Minidump);
    let thread = report.threads.iter().find(|t| t.crashed).unwrap();
    let trusts: Vec<_> = thread.frames.iter().map(|f| f.trust.unwrap()).collect();
    assert_eq!(trusts[0], FrameTrust::Context);
    // Every caller a guess: any word on the stack that points into code.
    assert!(
        trusts[1..].iter().all(|t| *t == FrameTrust::Scan),
        "{trusts:?}"
    );
}

#[test]
fn images_are_listed_with_their_debug_ids() {
    let images = minidump::read_images(&dump()).unwrap();
    let names: Vec<_> = images.iter().map(|i| i.name().unwrap()).collect();
    assert_eq!(
        names,
        [
            "demo-app",
            "libc.so.6",
            "linux-vdso.so.1",
            "ld-linux-x86-64.so.2"
        ]
    );
    assert_eq!(images[0].debug_id.unwrap().to_string(), APP_DEBUG_ID);
    assert_eq!(images[0].image_size, 0x5000);
    // The routing key: the image the crash happened in, read without a walk.
    let crash = symcluster_engine::reports::routing::routing_image(&dump()).unwrap();
    assert_eq!(crash.unwrap().to_string(), APP_DEBUG_ID);
}

#[test]
fn unwind_info_round_trips_through_its_cache_form() {
    let object = std::fs::read(debug_file()).unwrap();
    let id = APP_DEBUG_ID.parse().unwrap();
    let bytes = UnwindInfo::convert(&object, id).unwrap();
    // The magic `CFIC`, as a little-endian u32.
    assert!(bytes.starts_with(b"CIFC"), "{:?}", &bytes[..8]);
    let info = UnwindInfo::parse(&bytes).unwrap();
    assert_eq!(info.size_bytes(), bytes.len());
    let other = "00000000-0000-0000-0000-000000000001".parse().unwrap();
    assert!(UnwindInfo::convert(&object, other).is_err());
    // Not a CFI cache; a CFI cache of another format version; records that do not parse.
    assert!(UnwindInfo::parse(b"garbage!").is_err());
    let mut old = bytes.clone();
    old[4] = 1;
    assert!(UnwindInfo::parse(&old).unwrap_err().contains("version 1"));
    let mut bad = bytes[..8].to_vec();
    bad.extend_from_slice(b"STACK CFI INIT zz yy .cfa: rsp\n");
    assert!(UnwindInfo::parse(&bad).is_err());
}

/// Truncated and damaged dumps: a precise error, never a panic.
#[test]
fn damaged_dumps_are_refused_with_a_reason() {
    let data = dump();
    let empty = UnwindTable::new();
    for cut in [4, 32, 100, data.len() / 2] {
        let truncated = &data[..cut];
        match minidump::stackwalk(truncated, &empty, Modules::Referenced) {
            Err(e) => assert!(
                e.to_string().starts_with("malformed minidump report: "),
                "{cut}: {e}"
            ),
            // Half a dump may still hold its directory and some streams.
            Ok(report) => assert_eq!(report.format, ReportFormat::Minidump),
        }
    }
    let e = minidump::stackwalk(b"MDMP", &empty, Modules::Referenced).unwrap_err();
    assert!(
        e.to_string().starts_with("malformed minidump report: "),
        "{e}"
    );
}

/// The input the `minidump` fuzz target crashed on (`fuzz/regressions/make.py`): the demo dump
/// whose Linux maps stream names a `/SYSVso]` mapping, on which procfs-core 0.18.0 panics
/// (`&x[5..13]`). The stream is not read (`minidump::bounds`), so no parser panics, caught or
/// not, and the dump walks and symbolicates exactly as the demo's.
#[test]
fn a_hostile_linux_maps_stream_reaches_no_parser() {
    let data = std::fs::read(repo().join("fuzz/regressions/minidump/sysv-short-path.dmp")).unwrap();
    // The maps text really is the hostile one (the file is what make.py writes).
    assert!(
        data.windows(b" /SYSVso]\n".len())
            .any(|w| w == b" /SYSVso]\n")
    );
    // Read as rust-minidump reads it, the stream panics (procfs-core 0.18.0): when this stops
    // panicking, the stream can be read again (`minidump::bounds`).
    let unbounded = ::minidump::Minidump::read(&data[..]).unwrap();
    let read_maps = std::panic::catch_unwind(|| {
        unbounded
            .get_stream::<::minidump::MinidumpLinuxMaps>()
            .map(|maps| maps.memory_map_count())
    });
    assert!(read_maps.is_err(), "procfs-core no longer panics here");
    let before = symcluster_engine::guard::panics_caught_on_this_thread();
    let sources = LocalSymCaches::scan(&[debug_file()]).unwrap();
    let images = minidump::read_images(&data).unwrap();
    assert_eq!(images.len(), minidump::read_images(&dump()).unwrap().len());
    let table = sources.unwind_table(&images);
    let report = minidump::stackwalk(&data, &table, Modules::Referenced).unwrap();
    let result = symbolicate(&report, &sources);
    assert_eq!(
        symcluster_engine::guard::panics_caught_on_this_thread(),
        before,
        "a parser panicked (caught)"
    );
    assert_eq!(
        result.crash_reason.as_deref(),
        Some("SIGSEGV / SEGV_MAPERR at 0x0")
    );
    let got: Vec<_> = crashed(&result).frames[..5].iter().map(summary).collect();
    assert_eq!(got, crate::support::DEMO_CHAIN);
}

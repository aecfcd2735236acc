//! The APM reports besides crashes, from real processes: a real busy thread (`cpu`), a real
//! out-of-memory kill in a memory cgroup and the endings that are not one (`oom`), real slow
//! run-loop passes and a real hang (`jank`, `hang`), and the launch time (`launch`).

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use symcluster_loadtest::cgroup::MemoryCgroup;

use crate::support::report as report_file;
use crate::support::{crasher, killed_while_running, marker_line, report, run, symbolicate_report};

/// Report files of `kind` in `dir`.
fn reports(dir: &Path, kind: &str) -> Vec<PathBuf> {
    let prefix = format!("{kind}-");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with(&prefix) && name.ends_with(".json")
        })
        .collect();
    files.sort();
    files
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn functions(frames: &[symcluster_engine::result::FrameResult]) -> Vec<String> {
    frames.iter().filter_map(|f| f.function.clone()).collect()
}

fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_busy_thread_becomes_one_cpu_report_with_its_function_on_the_key_stack() {
    let dir = tempfile::tempdir().unwrap();
    succeeded(&run(dir.path(), "cpu"));
    // One report for one hog (not one per window), none for the idle thread.
    let [path] = reports(dir.path(), "cpu")
        .try_into()
        .unwrap_or_else(|r: Vec<PathBuf>| panic!("expected one cpu report, found {r:?}"));
    let report = json(&path);
    assert_eq!(report["kind"], "cpu");
    assert_eq!(report["cpu"]["thread_name"], "hog");
    assert_eq!(report["samples"], 6);
    let average = report["cpu"]["average_percent"].as_u64().unwrap();
    assert!(average >= 50, "average {average} % under the threshold");
    assert_eq!(report["cpu"]["threshold_percent"], 50);
    let level = report["cpu"]["level"].as_str().unwrap();
    assert_eq!(level, symcluster_sdk::cpu::level(average));
    assert_eq!(report["crash_reason"], "CPU hog on thread hog");

    let result = symbolicate_report(&path);
    let thread = result.crashed_thread().unwrap();
    assert_eq!(thread.name.as_deref(), Some("hog"));
    let names = functions(&thread.frames);
    let at = names
        .iter()
        .position(|f| f == "spin_hog")
        .unwrap_or_else(|| panic!("spin_hog not on the key stack {names:?}"));
    assert_eq!(names[at - 1], "busy_wait_ms");
    assert_eq!(names[at + 1], "hog_thread");
    let spin = thread
        .frames
        .iter()
        .find(|f| f.function.as_deref() == Some("spin_hog"))
        .unwrap();
    assert_eq!(spin.lineno, Some(marker_line("cpu")));
    // Every sample of the tree has app code; the key stack is its heaviest path.
    let top: u64 = result
        .call_tree
        .iter()
        .filter(|n| n.parent.is_none())
        .map(|n| n.hits)
        .sum();
    assert_eq!(top, 6);
}

#[test]
fn a_short_burst_and_an_idle_thread_make_no_cpu_report() {
    let dir = tempfile::tempdir().unwrap();
    succeeded(&run(dir.path(), "cpu-burst"));
    assert_eq!(reports(dir.path(), "cpu"), Vec::<PathBuf>::new());
}

#[test]
fn a_hog_with_no_app_frame_but_main_makes_no_cpu_report() {
    // The main thread spins inside `main` for 1.5 s: every sample is `main` (its range from
    // the program's `main` symbol) and libc, which are not app code.
    let (start, end) = symcluster_sdk::platform::linux::images::main_function().unwrap();
    assert!(start < end);
    let dir = tempfile::tempdir().unwrap();
    succeeded(&run(dir.path(), "cpu-main"));
    assert_eq!(reports(dir.path(), "cpu"), Vec::<PathBuf>::new());
}

#[test]
fn a_real_oom_kill_is_reported_as_a_foreground_oom_at_the_next_launch() {
    let dir = tempfile::tempdir().unwrap();
    let cgroup = MemoryCgroup::new("symcluster-sdk-oom", 48 << 20)
        .expect("this test needs a memory cgroup controller (v1 or v2) and root");
    let procs =
        std::ffi::CString::new(cgroup.procs_file().into_os_string().into_encoded_bytes()).unwrap();
    let mut command = Command::new(crasher());
    command.arg(dir.path()).arg("oom");
    // SAFETY: between fork and exec the closure only makes async-signal-safe calls (open,
    // write, close) on memory prepared before the fork. Writing "0" moves the writer itself.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let written = libc::write(fd, b"0".as_ptr().cast(), 1);
            libc::close(fd);
            if written != 1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let out = crate::support::output(&mut command);
    let pid_run_ms = started.elapsed().as_millis() as u64;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "the OOM killer ends it: {:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cgroup.oom_kills(), 1, "the kernel's OOM killer did it");
    assert_eq!(reports(dir.path(), "oom"), Vec::<PathBuf>::new());

    // The next launch decides.
    succeeded(&run(dir.path(), "clean"));
    let report = json(&report(dir.path(), "oom"));
    assert_eq!(report["kind"], "oom");
    assert_eq!(report["crash_reason"], "Out of memory (foreground)");
    let oom = &report["oom"];
    assert_eq!(oom["in_foreground"], true);
    assert_eq!(oom["breadcrumb"], "Settings");
    assert_eq!(oom["app_version"], "1.2 (34)");
    let footprint = oom["last_footprint_bytes"].as_u64().unwrap();
    assert!(
        (16 << 20..=48 << 20).contains(&footprint),
        "last footprint {footprint} bytes, limit 48 MiB"
    );
    // The kernel gives a process's start time in clock ticks (10 ms at USER_HZ = 100),
    // truncated: the run can look up to one tick (and a millisecond of rounding) longer than
    // the test saw it.
    // SAFETY: sysconf has no preconditions.
    let tick_ms = 1000 / u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    let run_duration_ms = oom["run_duration_ms"].as_u64().unwrap();
    assert!(
        run_duration_ms <= pid_run_ms + tick_ms + 1,
        "run {run_duration_ms} ms, the process lived {pid_run_ms} ms"
    );
    assert_eq!(report["stacktraces"], serde_json::json!([]));
    // The engine reads it; a launch after that one finds no new OOM.
    let result = symbolicate_report(&report_file(dir.path(), "oom"));
    assert_eq!(result.kind, symcluster_engine::ReportKind::Oom);
    succeeded(&run(dir.path(), "clean"));
    assert_eq!(reports(dir.path(), "oom").len(), 1);
}

fn launch_with(dir: &Path, version: &str) {
    succeeded(&crate::support::output(
        Command::new(crasher())
            .arg(dir)
            .arg("clean")
            .env("CRASHER_APP_VERSION", version),
    ));
}

#[test]
fn an_upgrade_a_clean_exit_and_a_crash_are_not_ooms() {
    // SIGKILLed, then launched as a new version: an upgrade.
    let dir = tempfile::tempdir().unwrap();
    killed_while_running(dir.path(), "1.2 (34)");
    launch_with(dir.path(), "1.3 (35)");
    assert_eq!(reports(dir.path(), "oom"), Vec::<PathBuf>::new());

    // A clean exit, then a launch.
    let dir = tempfile::tempdir().unwrap();
    launch_with(dir.path(), "1.2 (34)");
    launch_with(dir.path(), "1.2 (34)");
    assert_eq!(reports(dir.path(), "oom"), Vec::<PathBuf>::new());

    // A crash, then a launch.
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "null");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    launch_with(dir.path(), "1.2 (34)");
    assert_eq!(reports(dir.path(), "oom"), Vec::<PathBuf>::new());

    // The same kill with the same version has no other explanation: a foreground OOM, with
    // the breadcrumb the run set.
    let dir = tempfile::tempdir().unwrap();
    killed_while_running(dir.path(), "1.2 (34)");
    launch_with(dir.path(), "1.2 (34)");
    let report = json(&report(dir.path(), "oom"));
    assert_eq!(report["oom"]["breadcrumb"], "Checkout");
    assert_eq!(report["oom"]["in_foreground"], true);
}

#[test]
fn slow_passes_are_janks_a_long_stall_is_a_hang_and_both_are_rate_limited() {
    // Four 400 ms passes (jank at 200 ms, hang at 1000 ms), two reports a launch.
    let dir = tempfile::tempdir().unwrap();
    let jank = |dir: &Path, day_limit: &str| {
        succeeded(&crate::support::output(
            Command::new(crasher())
                .arg(dir)
                .args(["jank", "4"])
                .env("CRASHER_DAY_LIMIT", day_limit),
        ))
    };
    jank(dir.path(), "3");
    let janks = reports(dir.path(), "jank");
    assert_eq!(janks.len(), 2, "{janks:?}");
    assert_eq!(reports(dir.path(), "hang"), Vec::<PathBuf>::new());
    for path in &janks {
        let report = json(path);
        assert_eq!(report["kind"], "jank");
        let ms = report["jank_duration_ms"].as_u64().unwrap();
        assert!((200..1000).contains(&ms), "jank of {ms} ms");
        let result = symbolicate_report(path);
        let names = functions(&result.crashed_thread().unwrap().frames);
        assert!(
            names.starts_with(&["busy_wait_ms".to_owned(), "block_main_thread".to_owned()]),
            "{names:?}"
        );
    }
    // The next launch: one more, then the day's three are used.
    jank(dir.path(), "3");
    assert_eq!(reports(dir.path(), "jank").len(), 3);

    // One slow pass that ends in a 1.2 s wait for events (`runloop_will_wait`), past the hang
    // threshold: one jank, and the wait is neither a jank nor a hang.
    let dir = tempfile::tempdir().unwrap();
    succeeded(&crate::support::output(
        Command::new(crasher()).arg(dir.path()).args(["jank", "1"]),
    ));
    assert_eq!(reports(dir.path(), "jank").len(), 1);

    // A 1.5 s stall with hang at 500 ms: one hang, no jank.
    let dir = tempfile::tempdir().unwrap();
    succeeded(&run(dir.path(), "hang"));
    assert_eq!(reports(dir.path(), "hang").len(), 1);
    assert_eq!(reports(dir.path(), "jank"), Vec::<PathBuf>::new());
}

#[test]
fn launch_time_is_reported_once_within_the_process_lifetime() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = run(dir.path(), "launch");
    let lifetime_ms = started.elapsed().as_millis() as i64;
    succeeded(&out);
    let printed = String::from_utf8_lossy(&out.stdout);
    let (first, second) = printed.trim().split_once(' ').unwrap();
    let (first, second): (i64, i64) = (first.parse().unwrap(), second.parse().unwrap());
    assert_eq!(second, -1, "marked once");
    // The kernel's start time has 10 ms resolution (clock ticks).
    assert!(
        (300..=lifetime_ms + 10).contains(&first),
        "launch {first} ms, process lived {lifetime_ms} ms"
    );
    let report = json(&report(dir.path(), "launch"));
    assert_eq!(report["kind"], "launch");
    assert_eq!(report["launch"]["duration_ms"], first);
    assert!(!report["modules"].as_array().unwrap().is_empty());
    let result = symbolicate_report(&report_file(dir.path(), "launch"));
    assert_eq!(result.kind, symcluster_engine::ReportKind::Launch);
    assert_eq!(result.details.unwrap()["launch"]["duration_ms"], first);
}

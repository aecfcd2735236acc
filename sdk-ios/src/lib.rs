//! symcluster's on-device SDK: captures raw crash reports and APM reports (janks, hangs, CPU
//! hogs, out-of-memory exits, launch time) and sends them to a symcluster master on the next
//! launch.
//!
//! An app links the static library and calls, through the C header (`include/symcluster_sdk.h`):
//! 1. [`symcluster_sdk_install`] early at launch: crash handlers for fatal signals on an
//!    alternate stack, writing `crash-*.json` into a report directory.
//!    It also judges how the previous run ended ([`run_state`]): an out-of-memory exit becomes an
//!    `oom-*.json` report;
//! 2. [`symcluster_sdk_start_hang_watchdog`], answered by the main run loop
//!    ([`symcluster_sdk_heartbeat`], [`symcluster_sdk_runloop_will_wait`]): slow passes become
//!    `jank-*.json`, long stalls `hang-*.json` reports with a sampled call tree;
//!    [`symcluster_sdk_start_cpu_monitor`]: busy threads become `cpu-*.json` reports;
//!    [`symcluster_sdk_mark_launched`]: a `launch-*.json` report of the launch time;
//! 3. [`symcluster_sdk_send_pending`] (on a background thread): pending reports go to the master
//!    and are deleted once acknowledged.
//!
//! Reports are JSON in the symbolicator request shape the engine reads (`modules` with code
//! ids, `stacktraces` with instruction addresses, `signal`), plus `symcluster_sdk_report: 1`,
//! `kind`, `crash_reason`, `metadata` (and `call_tree` for hangs); see the crate's README.
//!
//! Modules: [`writer`] (no-alloc JSON), [`images`] (the image list in reports), [`unwind`]
//! (frame-pointer walking with fault-free reads), [`crash`] (signal handlers and the once-only
//! guard), [`crash_report`] (the crash report written from a handler), [`call_tree`] (sampled
//! call trees and their reports), [`watchdog`] (janks and hangs), [`cpu`] (CPU hogs),
//! [`run_state`] (out-of-memory exits), [`launch`] (launch time), [`limits`] (report rate
//! limits), [`send`] (delivery), [`used_images`] (a report cut to the images its frames are in,
//! before sending), and [`platform`]: the [`platform::Backend`] trait with the Linux host
//! backend and the Apple backend (Mach exceptions, dyld images, thread states).

#![deny(missing_docs)]

pub mod call_tree;
pub mod cpu;
pub mod crash;
pub mod crash_report;
pub mod images;
pub mod launch;
pub mod limits;
// The platform backends declare Mach/dyld functions: not part of the C header.
/// cbindgen:ignore
pub mod platform;
pub mod run_state;
pub mod send;
pub mod unwind;
pub mod used_images;
pub mod watchdog;
pub mod writer;

use platform::{Backend, Host};

use std::ffi::{CStr, c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The report format version written in `symcluster_sdk_report`.
pub const SYMCLUSTER_REPORT_VERSION: u32 = 1;

static REPORT_DIR: OnceLock<PathBuf> = OnceLock::new();
static APP_VERSION: OnceLock<String> = OnceLock::new();
/// Milliseconds between two memory footprint records of the run state (before install).
static MEMORY_INTERVAL_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);

/// `uname(2)`'s `(release, machine)`: the kernel release, and the hardware (`x86_64`; on iOS
/// devices the model identifier, `iPhone14,2`).
fn uname() -> (String, String) {
    // SAFETY: a zeroed utsname is valid; uname fills it with NUL-terminated fields.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return (String::new(), String::new());
        }
        let field = |f: &[libc::c_char]| CStr::from_ptr(f.as_ptr()).to_string_lossy().into_owned();
        (field(&u.release), field(&u.machine))
    }
}

/// `{"os", "os_version", "machine", "arch", "app", "app_version", "pid", "sdk"}` for every
/// report (`app_version` only when the app set one).
fn metadata_json() -> Vec<u8> {
    let app = app_name().unwrap_or_default();
    let (kernel, machine) = uname();
    let os_version = Host::os_version().unwrap_or(kernel);
    let mut buf = vec![0u8; 4096];
    let mut w = writer::Writer::new(&mut buf);
    w.raw(b"{");
    w.key("os", true);
    w.string(Host::OS.as_bytes());
    w.key("os_version", false);
    w.string(os_version.as_bytes());
    w.key("machine", false);
    w.string(machine.as_bytes());
    w.key("arch", false);
    w.string(images::ARCH.as_bytes());
    w.key("app", false);
    w.string(app.as_bytes());
    if let Some(version) = APP_VERSION.get() {
        w.key("app_version", false);
        w.string(version.as_bytes());
    }
    w.key("pid", false);
    w.dec(u64::from(std::process::id()));
    w.key("sdk", false);
    w.string(concat!("symcluster-sdk ", env!("CARGO_PKG_VERSION")).as_bytes());
    w.raw(b"}");
    w.as_bytes().to_vec()
}

/// Installs the crash handlers; reports go to `dir`. See [`crash::install`]. Then judges how
/// the previous run ended (an `oom` report if it ran out of memory) and starts this run's
/// state ([`run_state::start`]).
pub fn install(dir: &Path) -> std::io::Result<()> {
    let _ = REPORT_DIR.set(dir.to_owned());
    crash::install(dir, metadata_json())?;
    run_state::start(
        dir,
        APP_VERSION.get().map_or("", String::as_str),
        &metadata_json(),
        MEMORY_INTERVAL_MS.load(std::sync::atomic::Ordering::Relaxed),
    );
    Ok(())
}

fn report_dir() -> std::io::Result<PathBuf> {
    REPORT_DIR
        .get()
        .cloned()
        .ok_or_else(|| std::io::Error::other("install the SDK first"))
}

/// Starts the main-thread watchdog on the calling (main) thread: a jank after `jank_ms`
/// without a heartbeat, a hang after `hang_ms`. See [`watchdog`].
pub fn start_hang_watchdog(jank_ms: u64, hang_ms: u64) -> std::io::Result<()> {
    watchdog::start(watchdog::HangConfig {
        jank_ms,
        hang_ms,
        dir: report_dir()?,
        metadata_json: metadata_json(),
    })
}

/// Starts the CPU monitor with `config`'s settings (its `dir` and `metadata_json` are the
/// SDK's). See [`cpu`].
pub fn start_cpu_monitor(configure: impl FnOnce(&mut cpu::CpuConfig)) -> std::io::Result<()> {
    let mut config = cpu::CpuConfig::new(report_dir()?, metadata_json());
    configure(&mut config);
    cpu::start(config)
}

fn c_path(path: *const c_char) -> Option<PathBuf> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) }.to_str().ok()?;
    Some(PathBuf::from(s))
}

fn c_str(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .ok()
        .map(str::to_owned)
}

/// Sets the app's version (`CFBundleShortVersionString (CFBundleVersion)`, say `2.3 (481)`),
/// written as `metadata.app_version` in every report. Call before [`symcluster_sdk_install`];
/// the first call wins. Returns 0, or -1 for a null or non-UTF-8 string.
///
/// # Safety
/// `version` must be a NUL-terminated string (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symcluster_sdk_set_app_version(version: *const c_char) -> c_int {
    match c_str(version) {
        Some(version) => {
            let _ = APP_VERSION.set(version);
            0
        }
        None => -1,
    }
}

/// Installs the crash handlers, writing reports into `report_dir` (created if needed). Then
/// judges how the previous run ended from its `run-state.json` (an `oom` report when the
/// system ended it for memory) and starts this run's state (memory footprint every
/// [`symcluster_sdk_set_memory_interval`] ms, a clean-exit mark at `exit`).
/// Returns 0 on success, -1 on error (bad path, directory not writable, sigaction failed).
///
/// # Safety
/// `report_dir` must be a NUL-terminated UTF-8 path.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symcluster_sdk_install(report_dir: *const c_char) -> c_int {
    match c_path(report_dir).map(|dir| install(&dir)) {
        Some(Ok(())) => 0,
        _ => -1,
    }
}

/// Gives the calling thread an alternate signal stack, so that its stack overflows are
/// reported. The installing thread has one already. Returns 0 on success, -1 on error.
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_thread_init() -> c_int {
    if crash::install_alt_stack().is_ok() {
        0
    } else {
        -1
    }
}

/// Starts the main-thread watchdog for the calling thread, which must be the main thread.
/// A main thread silent (no [`symcluster_sdk_heartbeat`]) for `jank_ms` or more (250 is
/// usual) is sampled; if it answers again within `hang_ms` (2000 is usual) the stall is a
/// `jank` report, else a `hang` report (kept on disk while it lasts). Both are rate-limited
/// ([`symcluster_sdk_set_report_limits`]). Returns 0 on success, -1 on error (SDK not
/// installed).
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_start_hang_watchdog(jank_ms: u32, hang_ms: u32) -> c_int {
    match start_hang_watchdog(u64::from(jank_ms), u64::from(hang_ms)) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// Starts the CPU monitor: every `interval_ms` (1000 is usual) each thread's CPU usage is
/// read; when at least `trigger` (5) of the last `window` (8) intervals were above
/// `threshold_percent` (80) of one core, the thread's stack is sampled, and
/// `samples_per_report` (10) samples with app code make one `cpu` report (call tree, thread
/// name, average usage, level). A 0 argument takes the usual value. Rate-limited
/// ([`symcluster_sdk_set_report_limits`]). Returns 0 on success, -1 on error (SDK not
/// installed, `trigger` over `window` once defaults are applied).
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_start_cpu_monitor(
    interval_ms: u32,
    threshold_percent: u32,
    window: u32,
    trigger: u32,
    samples_per_report: u32,
) -> c_int {
    let or = |value: u32, usual: u64| if value == 0 { usual } else { u64::from(value) };
    let Ok(dir) = report_dir() else {
        return -1;
    };
    let mut config = cpu::CpuConfig::new(dir, metadata_json());
    config.interval_ms = or(interval_ms, config.interval_ms);
    config.threshold_percent = or(threshold_percent, u64::from(config.threshold_percent)) as u32;
    config.window = or(window, config.window as u64) as usize;
    config.trigger = or(trigger, config.trigger as u64) as usize;
    config.samples_per_report = or(samples_per_report, config.samples_per_report);
    if config.trigger > config.window {
        return -1;
    }
    match cpu::start(config) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// Sets the rate limits of `hang`, `jank` and `cpu` reports: at most `per_launch` reports of
/// one kind per launch (3 by default) and `per_day` per UTC day (10 by default; counted in the
/// report directory across launches).
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_set_report_limits(per_launch: u32, per_day: u32) {
    limits::set(per_launch, per_day);
}

/// Sets the size of the buffer a crash report is written into from the crash handler, in bytes
/// (512 KiB by default; clamped to 16 KiB..16 MiB), allocated at install: call before
/// [`symcluster_sdk_install`]. A report that does not fit is still a whole JSON document, with
/// the threads (and then frames) that did not fit left out and `"truncated": true`.
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_set_report_bytes(bytes: usize) {
    crash_report::set_report_bytes(bytes);
}

/// Sets how often the memory footprint is recorded for the out-of-memory decision, in ms
/// (1000 by default). Call before [`symcluster_sdk_install`].
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_set_memory_interval(interval_ms: u32) {
    MEMORY_INTERVAL_MS.store(
        u64::from(interval_ms.max(10)),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// Tells the SDK whether the app is in the foreground (non-zero) or the background (0): an
/// app the system ends for memory is reported as a foreground or background OOM. Call it from
/// the app's did-become-active / did-enter-background notifications; the SDK assumes the
/// foreground at launch.
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_set_foreground(in_foreground: c_int) {
    run_state::set_foreground(in_foreground != 0);
}

/// Sets the breadcrumb (the screen or activity the user is in, `Settings`) that an `oom`
/// report of this run carries and is grouped by. Returns 0, or -1 for a null or non-UTF-8
/// string.
///
/// # Safety
/// `breadcrumb` must be a NUL-terminated string (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symcluster_sdk_set_breadcrumb(breadcrumb: *const c_char) -> c_int {
    match c_str(breadcrumb) {
        Some(b) => {
            run_state::set_breadcrumb(&b);
            0
        }
        None => -1,
    }
}

/// Marks the app's first frame: writes a `launch` report with the time since the process
/// started (the kernel's start time) and returns it in ms; -1 when this launch was marked
/// already or the SDK is not installed.
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_mark_launched() -> i64 {
    report_dir()
        .ok()
        .and_then(|dir| launch::mark_launched(&dir, &metadata_json()))
        .map_or(-1, |ms| ms as i64)
}

/// Tells the watchdog the main thread is responsive: a run-loop pass starts. Call it from the
/// main run loop (on Apple platforms the SDK's run-loop observer does).
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_heartbeat() {
    watchdog::heartbeat();
}

/// Tells the watchdog the main thread is about to wait for events (its run loop is idle), so
/// the silence until the next [`symcluster_sdk_heartbeat`] is no jank or hang. Call it before
/// the main loop blocks waiting (on Apple platforms the SDK's run-loop observer does).
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_runloop_will_wait() {
    watchdog::will_wait();
}

/// Records an uncaught C++ or Objective-C exception (`kind`, `reason`) for the crash report
/// that follows; call it from the terminate / uncaught-exception handler before aborting.
///
/// # Safety
/// Both arguments must be NUL-terminated strings (or null).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symcluster_sdk_note_exception(kind: *const c_char, reason: *const c_char) {
    crash_report::note_exception(
        &c_str(kind).unwrap_or_default(),
        &c_str(reason).unwrap_or_default(),
    );
}

/// Whether [`symcluster_sdk_send_pending`] sends every loaded image a report lists (`true`), or,
/// as by default (`false`) and as Apple's `.ips` reports do, only the images a frame of a
/// `crash`, `hang`, `jank` or `cpu` report is in (a crash report of an iOS app lists 250-330
/// images, 8-15 of them in a frame). `launch` reports always keep every image; the report
/// files on disk always do.
#[unsafe(no_mangle)]
pub extern "C" fn symcluster_sdk_set_send_all_images(send_all: bool) {
    used_images::set_send_all(send_all);
}

/// Sends the reports pending in `report_dir` to the leader of the masters at `endpoint` (`http://host:port`, or several comma-separated)
/// with bearer `token`, deleting each once acknowledged; retries unreachable masters up to 5
/// times with backoff. A report the master refuses for good (e.g. over 16 MiB) is deleted and
/// its reason written to standard error. Blocks: call it from a background thread. Returns the
/// number of reports sent, or -1 on bad arguments.
///
/// # Safety
/// All arguments must be NUL-terminated UTF-8 strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn symcluster_sdk_send_pending(
    report_dir: *const c_char,
    endpoint: *const c_char,
    token: *const c_char,
) -> c_int {
    let (Some(dir), Some(endpoint), Some(token)) =
        (c_path(report_dir), c_str(endpoint), c_str(token))
    else {
        return -1;
    };
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return -1;
    };
    let prefix = app_name().unwrap_or_else(|| "app".into());
    let summary = runtime.block_on(send::send_pending(&dir, &endpoint, &token, &prefix, 5));
    for (job_id, reason) in &summary.refused {
        eprintln!("symcluster: report {job_id} refused by the master and deleted: {reason}");
    }
    summary.sent.len() as c_int
}

/// The executable's file name (`DemoApp`), from `std::env::current_exe`.
fn app_name() -> Option<String> {
    std::env::current_exe()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

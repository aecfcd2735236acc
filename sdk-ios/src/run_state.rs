//! Out-of-memory and other silent exits: what a run leaves behind for the next launch to judge.
//!
//! The system ends an app without a crash report when it runs out of memory (iOS's jetsam, a
//! Linux memory cgroup's OOM killer) or when its watchdog kills a hung app. So during each run
//! the SDK keeps a small state file, `<report dir>/run-state.json` ([`RunState`]): app and OS
//! version, boot time, foreground or background, the last memory footprint, the last
//! breadcrumb (the screen the app said is active), and a clean-exit mark. At the next launch,
//! [`judge`] decides from it how the previous run ended, with the decision table Facebook
//! published for its iOS app ("Reducing FOOMs in the Facebook iOS app", Facebook Engineering,
//! 2015), in this order:
//!
//! | the previous run …                                   | ended as                  |
//! |------------------------------------------------------|---------------------------|
//! | left no state (first launch, or a state unreadable)  | [`Ending::Unknown`]       |
//! | ran under a debugger                                 | [`Ending::Debugger`]      |
//! | had another app version                              | [`Ending::AppUpgraded`]   |
//! | had another OS version                               | [`Ending::OsUpgraded`]    |
//! | was before the device's last boot                    | [`Ending::Rebooted`]      |
//! | exited normally (`exit`, return from `main`)         | [`Ending::CleanExit`]     |
//! | wrote a crash report                                 | [`Ending::Crashed`]       |
//! | was hung when it ended (a hang had not recovered)    | [`Ending::Watchdog`]      |
//! | was in the background                                | [`Ending::BackgroundOom`] |
//! | otherwise                                            | [`Ending::ForegroundOom`] |
//!
//! The crash mark is the crash report itself: a `crash-<ms>-<pid>.json` (or a non-empty
//! `.inprogress`) of the previous run's pid, written after it started. Both OOM endings write an
//! `oom-<ms>-<pid>.json` report (`pid` the previous run's) with no stack; see the README.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::platform::{Backend, Host};
use crate::writer::Writer;

/// The file's name in the report directory.
pub const STATE_FILE: &str = "run-state.json";

/// Footprint changes smaller than this are not written (bytes).
const FOOTPRINT_STEP: u64 = 1 << 20;

/// Boot times that differ by less than this are the same boot (`/proc/stat`'s `btime` moves by
/// a second as the clock is adjusted), in seconds.
const BOOT_TOLERANCE_S: u64 = 30;

/// What a run keeps on disk for the next launch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The run's process id.
    pub pid: u32,
    /// `metadata.app_version` of the run (empty when the app set none).
    pub app_version: String,
    /// `metadata.os_version` of the run.
    pub os_version: String,
    /// The device's boot time, seconds since the Unix epoch.
    pub boot_time_s: u64,
    /// When the process started, ms since the Unix epoch.
    pub started_ms: u64,
    /// When this state was last written, ms since the Unix epoch.
    pub updated_ms: u64,
    /// Whether the app was in the foreground ([`set_foreground`]; `true` at launch).
    pub in_foreground: bool,
    /// The last memory footprint measured, bytes.
    pub footprint_bytes: u64,
    /// The last breadcrumb the app set ([`set_breadcrumb`]).
    pub breadcrumb: Option<String>,
    /// Set when the process exits normally (an `atexit` handler).
    pub clean_exit: bool,
    /// Whether a debugger was attached.
    pub debugger: bool,
    /// Whether the main thread was in a hang ([`set_hung`]): set when a stall reaches the hang
    /// threshold, cleared when the main thread answers again.
    #[serde(default)]
    pub hung: bool,
}

/// The current launch, as [`judge`] compares it with the previous run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This run's app version.
    pub app_version: String,
    /// This run's OS version.
    pub os_version: String,
    /// This boot's time, seconds since the Unix epoch.
    pub boot_time_s: u64,
}

/// What the previous run left in the report directory besides its state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Evidence {
    /// A crash report of the previous run.
    pub crashed: bool,
}

/// How the previous run ended, by the decision table of the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// No state: the first launch, or the state file is unreadable.
    Unknown,
    /// A debugger was attached (stopping it kills the app).
    Debugger,
    /// The app was updated since.
    AppUpgraded,
    /// The OS was updated since.
    OsUpgraded,
    /// The device rebooted since.
    Rebooted,
    /// The process exited normally.
    CleanExit,
    /// The process crashed (and wrote its report).
    Crashed,
    /// The process was hung when it ended: the system's watchdog, or the user, ended it.
    Watchdog,
    /// The system ended it for memory while it was in the background.
    BackgroundOom,
    /// The system ended it for memory while it was in the foreground.
    ForegroundOom,
}

impl Ending {
    /// Whether the ending is an out-of-memory exit (foreground or background).
    pub fn is_oom(self) -> bool {
        matches!(self, Ending::BackgroundOom | Ending::ForegroundOom)
    }
}

/// Decides how the previous run ended (`previous` its state, `None` when there is none).
pub fn judge(previous: Option<&RunState>, now: &Launch, evidence: Evidence) -> Ending {
    let Some(prev) = previous else {
        return Ending::Unknown;
    };
    if prev.debugger {
        Ending::Debugger
    } else if prev.app_version != now.app_version {
        Ending::AppUpgraded
    } else if prev.os_version != now.os_version {
        Ending::OsUpgraded
    } else if prev.boot_time_s.abs_diff(now.boot_time_s) > BOOT_TOLERANCE_S {
        Ending::Rebooted
    } else if prev.clean_exit {
        Ending::CleanExit
    } else if evidence.crashed {
        Ending::Crashed
    } else if prev.hung {
        Ending::Watchdog
    } else if !prev.in_foreground {
        Ending::BackgroundOom
    } else {
        Ending::ForegroundOom
    }
}

/// Looks in `dir` for the crash report of run `prev` (its pid, written after it started).
pub fn evidence(dir: &Path, prev: &RunState) -> Evidence {
    let mut found = Evidence::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((kind, rest)) = name.split_once('-') else {
            continue;
        };
        let Some((stem, ext)) = rest.rsplit_once('.') else {
            continue;
        };
        let Some((ms, pid)) = stem.split_once('-') else {
            continue;
        };
        let (Ok(ms), Ok(pid)) = (ms.parse::<u64>(), pid.parse::<u32>()) else {
            continue;
        };
        // Stamps are ms; the start time has 10 ms resolution on Linux.
        if pid != prev.pid || ms + 1000 < prev.started_ms {
            continue;
        }
        let written =
            ext == "json" || (ext == "inprogress" && entry.metadata().is_ok_and(|m| m.len() > 0));
        if kind == "crash" && written {
            found.crashed = true;
        }
    }
    found
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The state of this run, and where it is kept.
static CURRENT: Mutex<Option<(PathBuf, RunState)>> = Mutex::new(None);

fn update(change: impl FnOnce(&mut RunState) -> bool) {
    let mut current = CURRENT.lock().unwrap_or_else(|e| e.into_inner());
    let Some((path, state)) = current.as_mut() else {
        return;
    };
    if change(state) {
        state.updated_ms = now_ms();
        if let Ok(json) = serde_json::to_vec(state) {
            // A lost write costs one decision at the next launch, nothing else.
            let _ = crate::call_tree::write_atomically(path, &json);
        }
    }
}

/// Says whether the app is in the foreground (call it from the app's state notifications;
/// the SDK assumes the foreground at launch).
pub fn set_foreground(in_foreground: bool) {
    update(|s| std::mem::replace(&mut s.in_foreground, in_foreground) != in_foreground);
}

/// Sets the breadcrumb an `oom` report of this run will carry (the screen or activity the
/// user is in), and groups it by.
pub fn set_breadcrumb(breadcrumb: &str) {
    update(|s| {
        let new = Some(breadcrumb.to_owned());
        std::mem::replace(&mut s.breadcrumb, new).as_deref() != Some(breadcrumb)
    });
}

/// Records whether the main thread is in a hang (the watchdog calls it as a hang starts and
/// ends): a run that ends hung was ended by a watchdog, not by memory.
pub fn set_hung(hung: bool) {
    update(|s| std::mem::replace(&mut s.hung, hung) != hung);
}

/// Records the memory footprint now, when it moved by 1 MiB or more since the last record.
pub fn record_footprint() {
    let Some(bytes) = Host::memory_footprint() else {
        return;
    };
    update(|s| {
        let moved = s.footprint_bytes.abs_diff(bytes) >= FOOTPRINT_STEP;
        if moved {
            s.footprint_bytes = bytes;
        }
        moved
    });
}

extern "C" fn mark_clean_exit() {
    // Not from a forked child (its exit is not ours), and never wait long in `exit`: a child
    // forked while another thread held the lock would wait forever.
    for _ in 0..100 {
        let mut current = match CURRENT.try_lock() {
            Ok(current) => current,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
        };
        if let Some((path, state)) = current.as_mut()
            && state.pid == std::process::id()
        {
            state.clean_exit = true;
            state.updated_ms = now_ms();
            if let Ok(json) = serde_json::to_vec(state) {
                let _ = crate::call_tree::write_atomically(path, &json);
            }
        }
        return;
    }
}

/// At install: judges the previous run of the app in `dir` (writing an `oom` report if it ran
/// out of memory), then starts this run's state: written now, on each change, and every
/// `interval_ms` with the memory footprint (a `symcluster-memory` thread); an `atexit`
/// handler marks a normal exit. Returns how the previous run ended.
pub fn start(dir: &Path, app_version: &str, metadata_json: &[u8], interval_ms: u64) -> Ending {
    if CURRENT.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
        // Installed twice: the state on disk is this run's own.
        return Ending::Unknown;
    }
    let path = dir.join(STATE_FILE);
    let previous: Option<RunState> = std::fs::read(&path)
        .ok()
        .and_then(|data| serde_json::from_slice(&data).ok());
    let os_version = Host::os_version().unwrap_or_else(|| crate::uname().0);
    let launch = Launch {
        app_version: app_version.to_owned(),
        os_version: os_version.clone(),
        boot_time_s: Host::boot_time_s().unwrap_or(0),
    };
    let ending = match &previous {
        Some(prev) => judge(Some(prev), &launch, evidence(dir, prev)),
        None => Ending::Unknown,
    };
    if let (true, Some(prev)) = (ending.is_oom(), &previous) {
        // Named with the previous run's pid: a retry after a lost acknowledgement is the same
        // job, and one run's OOM is one report.
        let path = dir.join(format!("oom-{}-{}.json", now_ms(), prev.pid));
        let _ = crate::call_tree::write_atomically(&path, &oom_report(prev, ending, metadata_json));
    }
    let state = RunState {
        pid: std::process::id(),
        app_version: launch.app_version,
        os_version,
        boot_time_s: launch.boot_time_s,
        started_ms: Host::process_start_ms().unwrap_or_else(now_ms),
        updated_ms: 0,
        in_foreground: true,
        footprint_bytes: Host::memory_footprint().unwrap_or(0),
        breadcrumb: None,
        clean_exit: false,
        debugger: Host::debugger_attached(),
        hung: false,
    };
    let first = CURRENT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .replace((path, state))
        .is_none();
    update(|_| true);
    if first {
        // SAFETY: registering a plain extern "C" function.
        unsafe { libc::atexit(mark_clean_exit) };
        let interval = Duration::from_millis(interval_ms.max(10));
        let _ = std::thread::Builder::new()
            .name("symcluster-memory".into())
            .spawn(move || {
                loop {
                    record_footprint();
                    std::thread::sleep(interval);
                }
            });
    }
    ending
}

/// The `oom` report of run `prev`: `{"symcluster_sdk_report", "kind": "oom", "crash_reason",
/// "oom": {"in_foreground", "last_footprint_bytes", "breadcrumb", "run_duration_ms",
/// "app_version", "os_version", "pid"}, "timestamp_ms", "metadata", "modules": [],
/// "stacktraces": []}`.
pub fn oom_report(prev: &RunState, ending: Ending, metadata_json: &[u8]) -> Vec<u8> {
    let foreground = ending == Ending::ForegroundOom;
    let mut buf = vec![0u8; 16 << 10];
    let mut w = Writer::new(&mut buf);
    crate::call_tree::write_head(
        &mut w,
        "oom",
        if foreground {
            b"Out of memory (foreground)"
        } else {
            b"Out of memory (background)"
        },
    );
    w.key("oom", false);
    w.raw(b"{");
    w.key("in_foreground", true);
    w.raw(if foreground { b"true" } else { b"false" });
    w.key("last_footprint_bytes", false);
    w.dec(prev.footprint_bytes);
    if let Some(breadcrumb) = &prev.breadcrumb {
        w.key("breadcrumb", false);
        w.string(breadcrumb.as_bytes());
    }
    w.key("run_duration_ms", false);
    w.dec(prev.updated_ms.saturating_sub(prev.started_ms));
    w.key("app_version", false);
    w.string(prev.app_version.as_bytes());
    w.key("os_version", false);
    w.string(prev.os_version.as_bytes());
    w.key("pid", false);
    w.dec(u64::from(prev.pid));
    w.raw(b"}");
    w.key("timestamp_ms", false);
    w.dec(prev.updated_ms);
    w.key("metadata", false);
    w.raw(metadata_json);
    w.key("modules", false);
    w.raw(b"[]");
    w.key("stacktraces", false);
    w.raw(b"[]");
    w.raw(b"}\n");
    w.as_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run() -> RunState {
        RunState {
            pid: 41,
            app_version: "1.2 (34)".into(),
            os_version: "17.2 (21C62)".into(),
            boot_time_s: 1_700_000_000,
            started_ms: 1_700_000_100_000,
            updated_ms: 1_700_000_160_000,
            in_foreground: true,
            footprint_bytes: 900 << 20,
            breadcrumb: Some("Settings".into()),
            clean_exit: false,
            debugger: false,
            hung: false,
        }
    }

    fn launch() -> Launch {
        Launch {
            app_version: "1.2 (34)".into(),
            os_version: "17.2 (21C62)".into(),
            boot_time_s: 1_700_000_000,
        }
    }

    fn judged(change: impl FnOnce(&mut RunState, &mut Launch, &mut Evidence)) -> Ending {
        let (mut prev, mut now, mut evidence) = (run(), launch(), Evidence::default());
        change(&mut prev, &mut now, &mut evidence);
        judge(Some(&prev), &now, evidence)
    }

    #[test]
    fn each_rule_of_the_foom_table() {
        assert_eq!(judge(None, &launch(), Evidence::default()), Ending::Unknown);
        assert_eq!(judged(|p, _, _| p.debugger = true), Ending::Debugger);
        assert_eq!(
            judged(|_, n, _| n.app_version = "1.3 (35)".into()),
            Ending::AppUpgraded
        );
        assert_eq!(
            judged(|_, n, _| n.os_version = "17.3 (21D50)".into()),
            Ending::OsUpgraded
        );
        assert_eq!(judged(|_, n, _| n.boot_time_s += 3600), Ending::Rebooted);
        assert_eq!(judged(|_, n, _| n.boot_time_s += 1), Ending::ForegroundOom);
        assert_eq!(judged(|p, _, _| p.clean_exit = true), Ending::CleanExit);
        assert_eq!(judged(|_, _, e| e.crashed = true), Ending::Crashed);
        assert_eq!(judged(|p, _, _| p.hung = true), Ending::Watchdog);
        assert_eq!(
            judged(|p, _, _| p.in_foreground = false),
            Ending::BackgroundOom
        );
        assert_eq!(judged(|_, _, _| {}), Ending::ForegroundOom);
    }

    #[test]
    fn earlier_rules_win() {
        // An upgrade after a clean exit is an upgrade; a crash in the background is a crash.
        assert_eq!(
            judged(|p, n, _| {
                p.clean_exit = true;
                n.app_version = "2.0 (1)".into();
            }),
            Ending::AppUpgraded
        );
        assert_eq!(
            judged(|p, _, e| {
                p.in_foreground = false;
                e.crashed = true;
            }),
            Ending::Crashed
        );
    }

    #[test]
    fn evidence_is_the_previous_runs_own_reports() {
        let dir = tempfile::tempdir().unwrap();
        let prev = run();
        let write = |name: &str, data: &[u8]| std::fs::write(dir.path().join(name), data).unwrap();
        // Another pid's crash, an older run's crash of the same pid, an empty .inprogress.
        write("crash-1700000150000-42.json", b"{}");
        write("crash-1600000000000-41.json", b"{}");
        write("crash-1700000150000-41.inprogress", b"");
        assert_eq!(evidence(dir.path(), &prev), Evidence::default());
        // A hang report is no crash (whether the run ended hung is in its state).
        write("hang-1700000150000-41.json", b"{}");
        assert_eq!(evidence(dir.path(), &prev), Evidence::default());
        write("crash-1700000150001-41.inprogress", b"{\"partial");
        assert!(evidence(dir.path(), &prev).crashed);
    }

    #[test]
    fn the_oom_report_reads_as_json() {
        let report = oom_report(&run(), Ending::ForegroundOom, b"{\"app\":\"DemoApp\"}");
        let json: serde_json::Value = serde_json::from_slice(&report).unwrap();
        assert_eq!(json["kind"], "oom");
        assert_eq!(json["oom"]["in_foreground"], true);
        assert_eq!(json["oom"]["last_footprint_bytes"], 900u64 << 20);
        assert_eq!(json["oom"]["breadcrumb"], "Settings");
        assert_eq!(json["oom"]["run_duration_ms"], 60_000);
        assert_eq!(json["stacktraces"], serde_json::json!([]));
    }
}

//! The main-thread watchdog: janks and hangs.
//!
//! The main run loop answers it ([`heartbeat`] as each pass starts, [`will_wait`] before it
//! waits for events, so an idle main thread is never stalled): on Apple platforms a run-loop
//! observer the watchdog installs does it; elsewhere the app calls them from its loop (or calls
//! [`heartbeat`] from a timer on the main queue: a ping the main thread answers when free). A watchdog thread checks the
//! last answer every 20 ms; once the main thread has been silent past the **jank** threshold, it
//! samples the main thread's stack (through [`Backend::sample_thread`]) at growing intervals
//! (10 ms, doubling, at most 500 ms) into a call tree with hit counts
//! ([`crate::call_tree`]). Then:
//! - silent for the **hang** threshold (several consecutive ping intervals unanswered): a
//!   *hang*. Its report (`hang-<ms>-<pid>.json`) is kept on disk and rewritten while the hang
//!   lasts, so it survives the app being killed blocked (which is what iOS's watchdog does),
//!   and written a last time when the main thread recovers;
//! - answered again before that: a *jank*, one slow pass; its report
//!   (`jank-<ms>-<pid>.json`, `jank_duration_ms`) is written when the pass ends.
//!
//! Both are rate-limited per launch and per day ([`crate::limits`]); one stall is one report,
//! never both kinds.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::call_tree::{CallTree, SampledReport, SampledThread, write_atomically};
use crate::platform::{Backend, Host};
use crate::unwind::MAX_FRAMES;

static LAST_PING_MS: AtomicU64 = AtomicU64::new(0);
/// The main thread is waiting for events (between [`will_wait`] and the next [`heartbeat`]).
static WAITING: AtomicBool = AtomicBool::new(false);
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Watchdog settings.
#[derive(Debug, Clone)]
pub struct HangConfig {
    /// Silence of the main thread that makes a jank (and starts sampling), ms.
    pub jank_ms: u64,
    /// Silence of the main thread that makes a hang, ms (at least `jank_ms`).
    pub hang_ms: u64,
    /// Where reports go.
    pub dir: PathBuf,
    /// Serialized `metadata` (as in crash reports); `modules` is the list
    /// [`crate::images::publish`]ed at install.
    pub metadata_json: Vec<u8>,
}

fn epoch() -> &'static Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    epoch().elapsed().as_millis() as u64
}

/// Records that the main thread is responsive. Call it from the main run loop, often (every
/// iteration, or from a timer).
pub fn heartbeat() {
    LAST_PING_MS.store(now_ms(), Ordering::Release);
    WAITING.store(false, Ordering::Release);
}

/// Records that the main thread is about to wait for events (its run loop is idle): the pass
/// that was running ends here (a stall in progress ends as a jank or hang), and silence until
/// the next [`heartbeat`] is not a stall.
pub fn will_wait() {
    WAITING.store(true, Ordering::Release);
    LAST_PING_MS.store(now_ms(), Ordering::Release);
}

/// Starts the watchdog for the calling thread (the main thread). Idempotent.
pub fn start(config: HangConfig) -> std::io::Result<()> {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let main_thread = Host::current_thread();
    heartbeat();
    Host::observe_main_run_loop();
    std::fs::create_dir_all(&config.dir)?;
    std::thread::Builder::new()
        .name("symcluster-watchdog".into())
        .spawn(move || watch(config, main_thread))?;
    Ok(())
}

fn watch(config: HangConfig, main_thread: <Host as Backend>::Thread) {
    let main_tid = Host::thread_report_id(main_thread);
    let mut frames = vec![0u64; MAX_FRAMES];
    let hang_ms = config.hang_ms.max(config.jank_ms);
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let silent = now_ms().saturating_sub(LAST_PING_MS.load(Ordering::Acquire));
        if silent < config.jank_ms || WAITING.load(Ordering::Acquire) {
            continue;
        }
        // A stall: sample until the main thread answers again.
        let started_ms = LAST_PING_MS.load(Ordering::Acquire);
        let mut tree = CallTree::default();
        let mut interval = 10u64;
        // Set once the stall is a hang the limits let through.
        let mut hang_path = None;
        let mut hang_decided = false;
        while LAST_PING_MS.load(Ordering::Acquire) == started_ms {
            let n = Host::sample_thread(main_thread, &mut frames, 100);
            if n > 0 {
                tree.add(&frames[..n]);
            }
            let duration = now_ms().saturating_sub(started_ms);
            if duration >= hang_ms && !hang_decided {
                hang_decided = true;
                crate::run_state::set_hung(true);
                if crate::limits::take(&config.dir, "hang") {
                    hang_path = Some(crate::call_tree::report_path(&config.dir, "hang"));
                }
            }
            if let (Some(path), true) = (&hang_path, n > 0) {
                write_hang_report(&config, path, &tree, duration, main_tid);
            }
            std::thread::sleep(Duration::from_millis(interval));
            interval = (interval * 2).min(500);
        }
        let duration = LAST_PING_MS
            .load(Ordering::Acquire)
            .saturating_sub(started_ms);
        if hang_decided {
            crate::run_state::set_hung(false);
        }
        if tree.hits == 0 {
            continue;
        }
        if duration >= hang_ms && !hang_decided {
            // It reached the hang threshold between two samples (up to 500 ms apart).
            hang_decided = true;
            if crate::limits::take(&config.dir, "hang") {
                hang_path = Some(crate::call_tree::report_path(&config.dir, "hang"));
            }
        }
        if hang_decided {
            if let Some(path) = &hang_path {
                write_hang_report(&config, path, &tree, duration.max(hang_ms), main_tid);
            }
        } else if duration >= config.jank_ms && crate::limits::take(&config.dir, "jank") {
            let report = SampledReport {
                kind: "jank",
                reason: "Jank: slow main run-loop pass",
                thread: SampledThread {
                    id: main_tid,
                    name: b"main",
                },
                tree: &tree,
                metadata_json: &config.metadata_json,
            };
            let json = report.to_json(&|w| {
                w.key("jank_duration_ms", false);
                w.dec(duration);
            });
            let path = crate::call_tree::report_path(&config.dir, "jank");
            let _ = write_atomically(&path, &json);
        }
    }
}

fn write_hang_report(
    config: &HangConfig,
    path: &std::path::Path,
    tree: &CallTree,
    duration_ms: u64,
    tid: u64,
) {
    let reason = format!("App Hang: main thread blocked for {duration_ms} ms");
    let report = SampledReport {
        kind: "hang",
        reason: &reason,
        thread: SampledThread {
            id: tid,
            name: b"main",
        },
        tree,
        metadata_json: &config.metadata_json,
    };
    let json = report.to_json(&|w| {
        w.key("hang_duration_ms", false);
        w.dec(duration_ms);
    });
    let _ = write_atomically(path, &json);
}

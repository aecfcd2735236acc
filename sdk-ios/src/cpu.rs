//! CPU hogs: threads that keep a core busy (device heat, battery drain, background kills).
//!
//! A `symcluster-cpu` thread reads every thread's CPU time each `interval_ms` (through
//! [`Backend::thread_cpu_time_ns`]) and keeps, per thread, a window of the last `window`
//! intervals. When at least `trigger` of them were above `threshold_percent` of one core (and
//! the last one is), it takes a stack sample of that thread. Samples with no frame in the app's
//! own code are dropped (a system-only stack helps nobody): the app's code is the executable
//! code of the images in the main executable's directory (the app bundle), except `main`
//! itself ([`Backend::main_function`]), on every thread's stack and no help. Once
//! `samples_per_report` samples are taken they are aggregated into one call tree and written as
//! a `cpu` report (`cpu-<ms>-<pid>.json`), one per hog (the thread is reported again only after
//! its window falls below `trigger`), with the thread's name, its average usage over the
//! sampled intervals, and a level: `error` at 95 % of a core or more, `warn` at 85 % or more,
//! `info` below. Reports are rate-limited ([`crate::limits`]). The SDK's own threads
//! (named `symcluster-*`) are not watched.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::call_tree::{CallTree, SampledReport, SampledThread};
use crate::platform::{Backend, Host};
use crate::unwind::MAX_FRAMES;

static RUNNING: AtomicBool = AtomicBool::new(false);

/// CPU monitor settings.
#[derive(Debug, Clone)]
pub struct CpuConfig {
    /// Time between two readings of every thread's CPU time, ms.
    pub interval_ms: u64,
    /// Usage of one core above which an interval counts as busy, percent.
    pub threshold_percent: u32,
    /// Intervals in the window.
    pub window: usize,
    /// Busy intervals in the window that start stack sampling.
    pub trigger: usize,
    /// Stack samples (with app code) aggregated into one report.
    pub samples_per_report: u64,
    /// Where reports go.
    pub dir: PathBuf,
    /// Serialized `metadata` (as in crash reports).
    pub metadata_json: Vec<u8>,
}

impl CpuConfig {
    /// The defaults: 1 s intervals, 80 % of a core, 5 busy intervals out of 8, 10 samples a
    /// report.
    pub fn new(dir: PathBuf, metadata_json: Vec<u8>) -> CpuConfig {
        CpuConfig {
            interval_ms: 1000,
            threshold_percent: 80,
            window: 8,
            trigger: 5,
            samples_per_report: 10,
            dir,
            metadata_json,
        }
    }
}

/// The `info` / `warn` / `error` level of an average usage (percent of one core).
pub fn level(average_percent: u64) -> &'static str {
    match average_percent {
        95.. => "error",
        85.. => "warn",
        _ => "info",
    }
}

/// The window rule: at least `trigger` of the intervals in `window` were busy, the last one
/// included.
pub fn window_rule(window: &VecDeque<bool>, trigger: usize) -> bool {
    window.back() == Some(&true) && window.iter().filter(|b| **b).count() >= trigger
}

/// Which addresses are the app's own code.
#[derive(Debug, Clone, Default)]
pub struct AppCode {
    /// `[start, end)` of the app images' executable code.
    pub ranges: Vec<(u64, u64)>,
    /// `[start, end)` of `main`, which does not count.
    pub main: Option<(u64, u64)>,
}

impl AppCode {
    /// The app's code in this process: the images in the main executable's directory.
    pub fn of_this_process() -> AppCode {
        let images = Host::loaded_images();
        let bundle = images
            .first()
            .and_then(|i| std::path::Path::new(&i.path).parent().map(|p| p.to_owned()));
        let ranges = images
            .iter()
            .filter(|i| {
                bundle
                    .as_ref()
                    .is_some_and(|b| std::path::Path::new(&i.path).starts_with(b))
            })
            .flat_map(|i| i.code_ranges.iter().copied())
            .collect();
        AppCode {
            ranges,
            main: Host::main_function(),
        }
    }

    /// Whether a sample (innermost first: a program counter, then return addresses) has a
    /// frame in the app's code other than `main`'s. A return address is looked up one byte
    /// back, in the call instruction.
    pub fn has_app_frame(&self, frames: &[u64]) -> bool {
        frames.iter().enumerate().any(|(i, &addr)| {
            let addr = if i == 0 { addr } else { addr.wrapping_sub(1) };
            let within = |(start, end): (u64, u64)| start <= addr && addr < end;
            self.ranges.iter().copied().any(within) && !self.main.is_some_and(within)
        })
    }
}

/// Starts the CPU monitor thread. Idempotent.
pub fn start(config: CpuConfig) -> std::io::Result<()> {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    std::fs::create_dir_all(&config.dir)?;
    let app = AppCode::of_this_process();
    std::thread::Builder::new()
        .name("symcluster-cpu".into())
        .spawn(move || monitor(config, app))?;
    Ok(())
}

#[derive(Default)]
struct Watch {
    cpu_ns: u64,
    window: VecDeque<bool>,
    tree: CallTree,
    usage_sum: u64,
    /// This hog was reported: not again until it ends.
    reported: bool,
}

fn monitor(config: CpuConfig, app: AppCode) {
    let mut threads = vec![<Host as Backend>::current_thread(); 1024];
    let mut frames = vec![0u64; MAX_FRAMES];
    let mut name = [0u8; 64];
    // By report id: on Apple platforms a port name may be reused once released.
    let mut watches: HashMap<u64, Watch> = HashMap::new();
    let mut ids: Vec<u64> = Vec::new();
    let mut last = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(config.interval_ms.max(1)));
        let now = Instant::now();
        let wall_ns = now.duration_since(last).as_nanos().max(1) as u64;
        last = now;
        let n = Host::list_threads(&mut threads);
        ids.clear();
        ids.extend(threads[..n].iter().map(|t| Host::thread_report_id(*t)));
        watches.retain(|id, _| ids.contains(id));
        for (&thread, &id) in threads[..n].iter().zip(&ids) {
            let name_len = Host::thread_name(thread, &mut name);
            if name[..name_len].starts_with(b"symcluster") {
                continue;
            }
            let Some(cpu_ns) = Host::thread_cpu_time_ns(thread) else {
                continue;
            };
            let watch = watches.entry(id).or_default();
            let first = watch.window.is_empty() && watch.cpu_ns == 0;
            let usage = cpu_ns.saturating_sub(watch.cpu_ns) * 100 / wall_ns;
            watch.cpu_ns = cpu_ns;
            if first {
                // No interval to measure yet.
                watch.window.push_back(false);
                continue;
            }
            watch
                .window
                .push_back(usage >= u64::from(config.threshold_percent));
            while watch.window.len() > config.window {
                watch.window.pop_front();
            }
            if !window_rule(&watch.window, config.trigger) {
                if watch.window.iter().filter(|b| **b).count() < config.trigger {
                    // The hog is over (before enough samples: nothing to report).
                    watch.tree = CallTree::default();
                    watch.usage_sum = 0;
                    watch.reported = false;
                }
                continue;
            }
            if watch.reported {
                continue;
            }
            let got = Host::sample_thread(thread, &mut frames, 100);
            if got == 0 || !app.has_app_frame(&frames[..got]) {
                continue;
            }
            watch.tree.add(&frames[..got]);
            watch.usage_sum += usage;
            if watch.tree.hits >= config.samples_per_report {
                let average = watch.usage_sum / watch.tree.hits;
                if crate::limits::take(&config.dir, "cpu") {
                    write_report(&config, thread, &name[..name_len], &watch.tree, average);
                }
                watch.tree = CallTree::default();
                watch.usage_sum = 0;
                watch.reported = true;
            }
        }
        Host::release_threads(&threads[..n]);
    }
}

fn write_report(
    config: &CpuConfig,
    thread: <Host as Backend>::Thread,
    name: &[u8],
    tree: &CallTree,
    average: u64,
) {
    let thread_name = String::from_utf8_lossy(name);
    let reason = format!("CPU hog on thread {thread_name}");
    let report = SampledReport {
        kind: "cpu",
        reason: &reason,
        thread: SampledThread {
            id: Host::thread_report_id(thread),
            name,
        },
        tree,
        metadata_json: &config.metadata_json,
    };
    let json = report.to_json(&|w| {
        w.key("cpu", false);
        w.raw(b"{");
        w.key("thread_name", true);
        w.string(name);
        w.key("average_percent", false);
        w.dec(average);
        w.key("level", false);
        w.string(level(average).as_bytes());
        w.key("threshold_percent", false);
        w.dec(u64::from(config.threshold_percent));
        w.key("window", false);
        w.dec(config.window as u64);
        w.key("trigger", false);
        w.dec(config.trigger as u64);
        w.key("interval_ms", false);
        w.dec(config.interval_ms);
        w.raw(b"}");
    });
    let path = crate::call_tree::report_path(&config.dir, "cpu");
    let _ = crate::call_tree::write_atomically(&path, &json);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_rule_needs_trigger_busy_intervals_ending_busy() {
        let w = |bits: &[bool]| bits.iter().copied().collect::<VecDeque<bool>>();
        assert!(window_rule(
            &w(&[true, false, true, true, false, true, true]),
            5
        ));
        assert!(!window_rule(&w(&[true, true, true, true, true, false]), 5));
        assert!(!window_rule(
            &w(&[false, false, false, true, true, true, true]),
            5
        ));
    }

    #[test]
    fn main_and_system_frames_are_not_app_code() {
        let app = AppCode {
            ranges: vec![(0x1000, 0x2000)],
            main: Some((0x1800, 0x1900)),
        };
        // A system PC returning into main: no app frame.
        assert!(!app.has_app_frame(&[0x9000, 0x1850]));
        // A return address right after main's last call is still main's (looked up one back).
        assert!(!app.has_app_frame(&[0x9000, 0x1900]));
        // A system PC called from app code below main.
        assert!(app.has_app_frame(&[0x9000, 0x1200, 0x1850]));
        assert!(app.has_app_frame(&[0x1100]));
        assert_eq!(level(99), "error");
        assert_eq!(level(90), "warn");
        assert_eq!(level(81), "info");
    }
}

//! The main-thread hang watchdog.
//!
//! The app pings it from its main run loop ([`heartbeat`]). A watchdog thread checks the last
//! ping; once the main thread has been silent past the threshold, it samples the main thread's
//! stack (through [`Backend::sample_thread`]) at growing intervals (10 ms, doubling, at most 500 ms) and
//! aggregates the samples into a call tree with hit counts. While the hang lasts, the current
//! report is kept on disk (`hang-<ms>-<pid>.json`), so it survives the app being killed blocked
//! (which is what iOS's watchdog does). When the main thread recovers, the report is kept if the
//! hang lasted at least the reporting threshold, and deleted otherwise.
//!
//! The report's requesting stack trace is the **key stack**: from the root, the most-hit child
//! at each level, innermost first; the whole tree is in `call_tree`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::platform::{Backend, Host};
use crate::unwind::MAX_FRAMES;
use crate::writer::Writer;

static LAST_PING_MS: AtomicU64 = AtomicU64::new(0);
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Watchdog settings.
#[derive(Debug, Clone)]
pub struct HangConfig {
    /// Silence of the main thread that starts a hang, ms.
    pub threshold_ms: u64,
    /// Hangs shorter than this are dropped when the main thread recovers, ms.
    pub report_min_ms: u64,
    /// Where hang reports go.
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
}

/// Starts the watchdog for the calling thread (the main thread). Idempotent.
pub fn start(config: HangConfig) -> std::io::Result<()> {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let main_thread = Host::current_thread();
    heartbeat();
    std::fs::create_dir_all(&config.dir)?;
    std::thread::Builder::new()
        .name("symcluster-watchdog".into())
        .spawn(move || watch(config, main_thread))?;
    Ok(())
}

/// A call tree node: hits and children by address.
#[derive(Debug, Default)]
struct Node {
    hits: u64,
    children: BTreeMap<u64, Node>,
}

impl Node {
    /// Adds a sample (innermost first) from the root (outermost frame).
    fn add(&mut self, frames: &[u64]) {
        self.hits += 1;
        let mut node = self;
        for addr in frames.iter().rev() {
            node = node.children.entry(*addr).or_default();
            node.hits += 1;
        }
    }

    /// The most-hit path from the root, innermost first.
    fn key_stack(&self) -> Vec<u64> {
        let mut path = Vec::new();
        let mut node = self;
        while let Some((addr, child)) = node
            .children
            .iter()
            .max_by_key(|(a, c)| (c.hits, std::cmp::Reverse(**a)))
        {
            path.push(*addr);
            node = child;
        }
        path.reverse();
        path
    }

    /// Writes the tree below this node as a flat JSON array in pre-order (a parent before its
    /// children): `{"instruction_addr": "0x…", "hits": N, "parent": P}` per node, `P` the
    /// index of its parent in the array, or `null` for the outermost frames. Flat, so that a
    /// deep stack does not nest JSON deeper than readers allow (serde_json stops at 128).
    fn write(&self, w: &mut Writer<'_>) {
        w.raw(b"[");
        let mut next = 0u64;
        self.write_children(w, None, &mut next);
        w.raw(b"]");
    }

    fn write_children(&self, w: &mut Writer<'_>, parent: Option<u64>, next: &mut u64) {
        for (addr, child) in &self.children {
            if *next > 0 {
                w.raw(b",");
            }
            let index = *next;
            *next += 1;
            w.raw(b"{");
            w.key("instruction_addr", true);
            w.hex(*addr);
            w.key("hits", false);
            w.dec(child.hits);
            w.key("parent", false);
            match parent {
                Some(p) => w.dec(p),
                None => w.raw(b"null"),
            }
            w.raw(b"}");
            child.write_children(w, Some(index), next);
        }
    }
}

fn watch(config: HangConfig, main_thread: <Host as Backend>::Thread) {
    let main_tid = Host::thread_report_id(main_thread);
    let mut frames = vec![0u64; MAX_FRAMES];
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let silent = now_ms().saturating_sub(LAST_PING_MS.load(Ordering::Acquire));
        if silent < config.threshold_ms {
            continue;
        }
        // A hang: sample until the main thread pings again.
        let started_ms = LAST_PING_MS.load(Ordering::Acquire);
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let path = config
            .dir
            .join(format!("hang-{stamp}-{}.json", std::process::id()));
        let mut tree = Node::default();
        let mut interval = 10u64;
        while LAST_PING_MS.load(Ordering::Acquire) == started_ms {
            let n = Host::sample_thread(main_thread, &mut frames, 100);
            if n > 0 {
                tree.add(&frames[..n]);
                let duration = now_ms().saturating_sub(started_ms);
                write_hang_report(&config, &path, &tree, duration, main_tid);
            }
            std::thread::sleep(Duration::from_millis(interval));
            interval = (interval * 2).min(500);
        }
        let duration = LAST_PING_MS
            .load(Ordering::Acquire)
            .saturating_sub(started_ms);
        if duration < config.report_min_ms {
            let _ = std::fs::remove_file(&path);
        } else if tree.hits > 0 {
            write_hang_report(&config, &path, &tree, duration, main_tid);
        }
    }
}

fn write_hang_report(
    config: &HangConfig,
    path: &std::path::Path,
    tree: &Node,
    duration_ms: u64,
    tid: u64,
) {
    let mut buf = vec![0u8; 1 << 20];
    let mut w = Writer::new(&mut buf);
    w.raw(b"{");
    w.key("symcluster_sdk_report", true);
    w.dec(u64::from(crate::SYMCLUSTER_REPORT_VERSION));
    w.key("kind", false);
    w.string(b"hang");
    w.key("crash_reason", false);
    w.string(format!("App Hang: main thread blocked for {duration_ms} ms").as_bytes());
    w.key("hang_duration_ms", false);
    w.dec(duration_ms);
    w.key("samples", false);
    w.dec(tree.hits);
    w.key("metadata", false);
    w.raw(&config.metadata_json);
    w.key("modules", false);
    w.raw(crate::images::published_modules_json());
    w.key("stacktraces", false);
    w.raw(b"[{");
    w.key("thread_id", true);
    w.dec(tid);
    w.key("thread_name", false);
    w.string(b"main");
    w.key("is_requesting", false);
    w.raw(b"true");
    w.key("frames", false);
    w.frames(&tree.key_stack());
    w.raw(b"}]");
    w.key("call_tree", false);
    tree.write(&mut w);
    w.raw(b"}\n");
    let tmp = path.with_extension("tmp");
    if std::fs::write(&tmp, w.as_bytes()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_stack_follows_the_most_hit_path() {
        let mut tree = Node::default();
        // innermost first: main → work → spin (3×), main → work → io (1×), main → other (1×)
        for _ in 0..3 {
            tree.add(&[0x30, 0x20, 0x10]);
        }
        tree.add(&[0x31, 0x20, 0x10]);
        tree.add(&[0x40, 0x10]);
        assert_eq!(tree.hits, 5);
        assert_eq!(tree.key_stack(), vec![0x30, 0x20, 0x10]);
        assert_eq!(tree.children[&0x10].hits, 5);
        assert_eq!(tree.children[&0x10].children[&0x20].hits, 4);

        // Written flat, parents first.
        let mut buf = vec![0u8; 4096];
        let mut w = Writer::new(&mut buf);
        tree.write(&mut w);
        let text = String::from_utf8(w.as_bytes().to_vec()).unwrap();
        assert_eq!(
            text,
            "[{\"instruction_addr\":\"0x10\",\"hits\":5,\"parent\":null},\
             {\"instruction_addr\":\"0x20\",\"hits\":4,\"parent\":0},\
             {\"instruction_addr\":\"0x30\",\"hits\":3,\"parent\":1},\
             {\"instruction_addr\":\"0x31\",\"hits\":1,\"parent\":1},\
             {\"instruction_addr\":\"0x40\",\"hits\":1,\"parent\":0}]"
        );
    }
}

//! Sampled call trees and the reports made of them (hangs, janks, CPU hogs).
//!
//! Stack samples of one thread (innermost first) are added into a tree rooted at the outermost
//! frame, each node counting the samples through it. The report's requesting stack trace is the
//! **key stack**: from the root, the most-hit child at each level (ties to the lower address),
//! innermost first; the whole tree goes in `call_tree`, flat, parents first.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::writer::Writer;

/// A call tree node: samples through it, and its callees by address.
#[derive(Debug, Default, Clone)]
pub struct CallTree {
    /// Samples through this node (at the root: every sample).
    pub hits: u64,
    children: BTreeMap<u64, CallTree>,
}

impl CallTree {
    /// Adds a sample (addresses innermost first) from the root (outermost frame).
    pub fn add(&mut self, frames: &[u64]) {
        self.hits += 1;
        let mut node = self;
        for addr in frames.iter().rev() {
            node = node.children.entry(*addr).or_default();
            node.hits += 1;
        }
    }

    /// The most-hit path from the root, innermost first.
    pub fn key_stack(&self) -> Vec<u64> {
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

    /// Nodes below this one.
    pub fn nodes(&self) -> usize {
        self.children.values().map(|c| 1 + c.nodes()).sum()
    }

    /// This tree with at most `max_nodes` nodes below the root: the heaviest (a node's hits
    /// are never more than its parent's, so every node kept keeps its callers). The hits of
    /// the nodes kept are unchanged; the samples of the nodes left out stay counted in their
    /// callers'.
    pub fn pruned(&self, max_nodes: usize) -> CallTree {
        let mut hits = Vec::with_capacity(self.nodes());
        self.collect_hits(&mut hits);
        if hits.len() <= max_nodes {
            return self.clone();
        }
        hits.sort_unstable_by(|a, b| b.cmp(a));
        // Keep what is heavier than the first node left out (ties all go, so at most
        // `max_nodes` stay).
        let cut = hits[max_nodes];
        self.keep_above(cut)
    }

    fn collect_hits(&self, into: &mut Vec<u64>) {
        for child in self.children.values() {
            into.push(child.hits);
            child.collect_hits(into);
        }
    }

    fn keep_above(&self, cut: u64) -> CallTree {
        CallTree {
            hits: self.hits,
            children: self
                .children
                .iter()
                .filter(|(_, c)| c.hits > cut)
                .map(|(a, c)| (*a, c.keep_above(cut)))
                .collect(),
        }
    }

    /// Writes the tree below this node as a flat JSON array in pre-order (a parent before its
    /// children): `{"instruction_addr": "0x…", "hits": N, "parent": P}` per node, `P` the
    /// index of its parent in the array, or `null` for the outermost frames. Flat, so that a
    /// deep stack does not nest JSON deeper than readers allow (serde_json stops at 128).
    pub fn write(&self, w: &mut Writer<'_>) {
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

/// The sampled thread of a [`SampledReport`].
#[derive(Debug, Clone, Copy)]
pub struct SampledThread<'a> {
    /// `thread_id` as reports carry it ([`crate::platform::Backend::thread_report_id`]).
    pub id: u64,
    /// Its name (`main` for the main thread).
    pub name: &'a [u8],
}

/// A report made of a sampled call tree: `kind` (`hang`, `jank`, `cpu`), a one-line
/// `crash_reason`, the tree, and fields of its kind written by `extra` (each starting with
/// `w.key(name, false)`).
pub struct SampledReport<'a> {
    /// `kind` in the report.
    pub kind: &'a str,
    /// `crash_reason`: what happened, in one line.
    pub reason: &'a str,
    /// The thread the samples are of.
    pub thread: SampledThread<'a>,
    /// The samples.
    pub tree: &'a CallTree,
    /// Serialized `metadata` (as in crash reports).
    pub metadata_json: &'a [u8],
}

impl SampledReport<'_> {
    /// The report's JSON: `{"symcluster_sdk_report", "kind", "crash_reason", <extra>,
    /// "samples", ["truncated": true,] "metadata", "modules", "stacktraces": [key stack],
    /// "call_tree"}`, at most [`MAX_SAMPLED_REPORT_BYTES`]: a tree too large for it is written
    /// with its heaviest nodes only (halved until it fits, [`CallTree::pruned`]) and the report
    /// marked `"truncated": true`, so that it always stays whole JSON that a master accepts.
    pub fn to_json(&self, extra: &dyn Fn(&mut Writer<'_>)) -> Vec<u8> {
        let mut buf = vec![0u8; MAX_SAMPLED_REPORT_BYTES];
        let mut pruned: Option<CallTree> = None;
        loop {
            let tree = pruned.as_ref().unwrap_or(self.tree);
            let mut w = Writer::new(&mut buf);
            self.write(&mut w, tree, pruned.is_some(), extra);
            let nodes = tree.nodes();
            if !w.truncated() || nodes == 0 {
                return w.as_bytes().to_vec();
            }
            pruned = Some(self.tree.pruned(nodes / 2));
        }
    }

    fn write(
        &self,
        w: &mut Writer<'_>,
        tree: &CallTree,
        truncated: bool,
        extra: &dyn Fn(&mut Writer<'_>),
    ) {
        write_head(w, self.kind, self.reason.as_bytes());
        extra(w);
        w.key("samples", false);
        w.dec(self.tree.hits);
        if truncated {
            w.key("truncated", false);
            w.raw(b"true");
        }
        w.key("metadata", false);
        w.raw(self.metadata_json);
        w.key("modules", false);
        w.raw(crate::images::published_modules_json());
        w.key("stacktraces", false);
        w.raw(b"[{");
        w.key("thread_id", true);
        w.dec(self.thread.id);
        w.key("thread_name", false);
        w.string(self.thread.name);
        w.key("is_requesting", false);
        w.raw(b"true");
        w.key("frames", false);
        w.frames(&self.tree.key_stack());
        w.raw(b"}]");
        w.key("call_tree", false);
        tree.write(w);
        w.raw(b"}\n");
    }
}

/// Largest hang, jank or CPU report, bytes: 1 MiB, within the masters' default largest device
/// report (2 MiB, `--device-max-report`).
pub const MAX_SAMPLED_REPORT_BYTES: usize = 1 << 20;

/// Opens an SDK report: `{"symcluster_sdk_report": 1, "kind": kind, "crash_reason": reason`
/// (the caller writes the other fields, each after a `,`, and the closing `}`).
pub fn write_head(w: &mut Writer<'_>, kind: &str, reason: &[u8]) {
    w.raw(b"{");
    w.key("symcluster_sdk_report", true);
    w.dec(u64::from(crate::SYMCLUSTER_REPORT_VERSION));
    w.key("kind", false);
    w.string(kind.as_bytes());
    w.key("crash_reason", false);
    w.string(reason);
}

/// `<dir>/<kind>-<ms since the epoch>-<pid>.json`: the name of a new report file. The stamp is
/// unique in the process (one more than the last when two reports come in the same ms), so
/// two reports never share a file.
pub fn report_path(dir: &Path, kind: &str) -> PathBuf {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let stamp = match LAST.fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
        Some(now.max(last + 1))
    }) {
        Ok(last) | Err(last) => now.max(last + 1),
    };
    dir.join(format!("{kind}-{stamp}-{}.json", std::process::id()))
}

/// Writes `json` to `path` whole or not at all (a `.tmp` file renamed over it).
pub fn write_atomically(path: &Path, json: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_stack_follows_the_most_hit_path() {
        let mut tree = CallTree::default();
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

    #[test]
    fn a_tree_too_large_for_its_report_keeps_its_heaviest_nodes_and_says_so() {
        // One hot path hit 1,000 times, then 60,000 distinct cold paths 8 frames deep: far
        // more than 1 MiB of nodes.
        let mut tree = CallTree::default();
        for _ in 0..1_000 {
            tree.add(&[0x30, 0x20, 0x10]);
        }
        for i in 0..60_000u64 {
            let cold: Vec<u64> = (0..8).map(|d| 0x1_0000_0000 + i * 16 + d).collect();
            tree.add(&[&cold[..], &[0x20, 0x10]].concat());
        }
        assert!(tree.nodes() > 400_000);
        let report = SampledReport {
            kind: "hang",
            reason: "main thread blocked",
            thread: SampledThread {
                id: 1,
                name: b"main",
            },
            tree: &tree,
            metadata_json: b"{}",
        };
        let json = report.to_json(&|_| {});
        assert!(
            json.len() <= MAX_SAMPLED_REPORT_BYTES,
            "{} bytes",
            json.len()
        );
        let value: serde_json::Value = serde_json::from_slice(&json).expect("whole JSON");
        assert_eq!(value["truncated"], true);
        assert_eq!(value["samples"], 61_000);
        let nodes = value["call_tree"].as_array().unwrap();
        assert!(
            !nodes.is_empty() && nodes.len() < tree.nodes() / 2,
            "{}",
            nodes.len()
        );
        // The hot path is kept whole, with its hits.
        assert_eq!(nodes[0]["instruction_addr"], "0x10");
        assert_eq!(nodes[0]["hits"], 61_000);
        let hot = nodes
            .iter()
            .find(|n| n["instruction_addr"] == "0x30")
            .expect("the hot leaf kept");
        assert_eq!(hot["hits"], 1_000);

        // A tree that fits is written whole, unmarked.
        let mut small = CallTree::default();
        small.add(&[0x30, 0x20, 0x10]);
        let report = SampledReport {
            tree: &small,
            ..report
        };
        let value: serde_json::Value = serde_json::from_slice(&report.to_json(&|_| {})).unwrap();
        assert!(value.get("truncated").is_none());
        assert_eq!(value["call_tree"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn pruning_keeps_the_heaviest_nodes_and_their_callers() {
        let mut tree = CallTree::default();
        for _ in 0..3 {
            tree.add(&[0x30, 0x20, 0x10]);
        }
        tree.add(&[0x31, 0x20, 0x10]);
        tree.add(&[0x40, 0x10]);
        assert_eq!(tree.nodes(), 5);
        let pruned = tree.pruned(3);
        assert_eq!(pruned.nodes(), 3);
        assert_eq!(pruned.key_stack(), vec![0x30, 0x20, 0x10]);
        // Ties at the cut all go: at most the nodes asked for.
        assert_eq!(tree.pruned(4).nodes(), 3);
        assert_eq!(tree.pruned(10).nodes(), 5);
    }
}

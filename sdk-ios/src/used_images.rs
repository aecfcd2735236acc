//! A report's image list cut to the images its frames are in, before it is sent.
//!
//! The crash handler writes every loaded image (it cannot allocate, so it copies the list
//! [`crate::images`] published); an iOS app has 250-330 of them, and only 8-15 hold a frame.
//! Apple's own `.ips` reports list only those (`usedImages`), and so does a symbolication result
//! (`../shared/conformance/CONTRACT.md`). The sender ([`crate::send`]) cuts `crash`, `hang`,
//! `jank` and `cpu` reports here, outside any signal handler, before compressing them; the file
//! on disk keeps every image until the master acknowledges the report.
//!
//! Kept whole: `launch` reports (no stack: their image list is what they tell about the launch,
//! since dyld's work grows with each image loaded; the sender asks their result to list every
//! image) and `oom` reports (they list none). With [`set_send_all`]
//! (`symcluster_sdk_set_send_all_images(true)`) nothing is cut.
//!
//! An image holds an address when `image_addr <= addr < image_addr + image_size`; an image of
//! size 0 extends to the next image's start, as the engine reads it (`ImageRanges` in
//! `symcluster-engine`, which the SDK does not link). A kept image of size 0 is sent with the
//! size that rule gave it in the whole list, so that the image after it being left out cannot
//! stretch it over addresses that were in no image.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;

static SEND_ALL: AtomicBool = AtomicBool::new(false);

/// Whether the sender sends every image of a report (`true`) or the ones its frames are in
/// (`false`, the default).
pub fn set_send_all(all: bool) {
    SEND_ALL.store(all, Ordering::Relaxed);
}

/// See [`set_send_all`].
pub fn send_all() -> bool {
    SEND_ALL.load(Ordering::Relaxed)
}

/// The report kinds whose image list is cut.
pub const CUT_KINDS: [&str; 4] = ["crash", "hang", "jank", "cpu"];

/// `report` (an SDK report's JSON) with its `modules` cut to the images a frame of
/// `stacktraces[].frames` or a node of `call_tree` is in, in their order; `None` when it is to
/// be sent as it is: another kind ([`CUT_KINDS`]), no image to leave out, or not an SDK report
/// this reads (not JSON, no `modules` array: the master gives such a report its precise error).
/// The other fields are kept in their order.
pub fn referenced_only(report: &[u8]) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(report).ok()?;
    let object = value.as_object_mut()?;
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("crash");
    if !CUT_KINDS.contains(&kind) {
        return None;
    }
    let addresses = frame_addresses(object);
    let Some(Value::Array(modules)) = object.get_mut("modules") else {
        return None;
    };
    let extents = extents(modules);
    let used = used(&extents, modules.len(), &addresses);
    if used.iter().all(|&u| u) {
        return None;
    }
    for &(start, end, i) in &extents {
        let sized = modules[i].get("image_size").and_then(address).unwrap_or(0) > 0;
        if used[i] && !sized && end != u64::MAX {
            modules[i]["image_size"] = Value::from(end - start);
        }
    }
    let mut used = used.into_iter();
    modules.retain(|_| used.next().unwrap_or(false));
    serde_json::to_vec(&value).ok()
}

/// Every frame's and call-tree node's `instruction_addr`.
fn frame_addresses(report: &serde_json::Map<String, Value>) -> Vec<u64> {
    let frames = report
        .get("stacktraces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|thread| thread.get("frames").and_then(Value::as_array))
        .flatten();
    let nodes = report
        .get("call_tree")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    frames
        .chain(nodes)
        .filter_map(|f| f.get("instruction_addr").and_then(address))
        .collect()
}

/// `(start, end exclusive, index)` of every module with an address, sorted by start: an image
/// of size 0 ends where the next one starts (the last one at `u64::MAX`).
fn extents(modules: &[Value]) -> Vec<(u64, u64, usize)> {
    let mut starts: Vec<(u64, usize)> = modules
        .iter()
        .enumerate()
        .filter_map(|(i, m)| Some((m.get("image_addr").and_then(address)?, i)))
        .collect();
    starts.sort_unstable();
    starts
        .iter()
        .enumerate()
        .map(|(n, &(start, i))| {
            let size = modules[i].get("image_size").and_then(address).unwrap_or(0);
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                starts[n + 1..]
                    .iter()
                    .map(|&(s, _)| s)
                    .find(|&s| s > start)
                    .unwrap_or(u64::MAX)
            };
            (start, end, i)
        })
        .collect()
}

/// Which of the `count` modules (their [`extents`]) holds at least one of `addresses`.
fn used(ranges: &[(u64, u64, usize)], count: usize, addresses: &[u64]) -> Vec<bool> {
    let mut used = vec![false; count];
    for &addr in addresses {
        let after = ranges.partition_point(|&(start, _, _)| start <= addr);
        if let Some(&(_, end, i)) = ranges[..after].last()
            && addr < end
        {
            used[i] = true;
        }
    }
    used
}

/// An address written as `"0x…"` hex or a number.
fn address(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => u64::from_str_radix(s.strip_prefix("0x")?, 16).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(addr: u64, size: u64, name: &str) -> Value {
        serde_json::json!({"type": "elf", "code_file": name,
            "image_addr": format!("{addr:#x}"), "image_size": size})
    }

    fn names(report: &[u8]) -> Vec<String> {
        let value: Value = serde_json::from_slice(report).unwrap();
        value["modules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["code_file"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn only_images_holding_a_frame_or_node_are_kept() {
        let report = serde_json::json!({
            "symcluster_sdk_report": 1, "kind": "hang", "crash_reason": "hang",
            "modules": [module(0x1000, 0x1000, "a"), module(0x2000, 0x1000, "b"),
                        module(0x3000, 0, "c"), module(0x8000, 0x100, "d"),
                        module(0x9000, 0x100, "e")],
            "stacktraces": [{"frames": [{"instruction_addr": "0x1010"},
                                        // past d's end: in no image
                                        {"instruction_addr": "0x8100"}]}],
            // c has no size: it reaches d's start
            "call_tree": [{"instruction_addr": "0x7fff", "hits": 1, "parent": null}],
        });
        let whole = serde_json::to_vec(&report).unwrap();
        let cut = referenced_only(&whole).unwrap();
        assert_eq!(names(&cut), ["a", "c"]);
        // Everything else as it was, in its order; c keeps the extent it had (up to d, which
        // is left out), so that it does not reach over 0x8100.
        let mut expected = report.clone();
        expected["modules"] =
            serde_json::json!([module(0x1000, 0x1000, "a"), module(0x3000, 0x5000, "c")]);
        assert_eq!(cut, serde_json::to_vec(&expected).unwrap());

        // The engine finds every frame and node in the same image (or none) in both.
        let symbolicated = |report: &[u8]| {
            let report = symcluster_engine::parse_report(report).unwrap();
            symcluster_engine::symbolicate(&report, &NoDebugFiles)
        };
        let (whole, cut) = (symbolicated(&whole), symbolicated(&cut));
        assert_eq!(whole.threads, cut.threads);
        assert_eq!(whole.call_tree, cut.call_tree);
        let frames = &cut.threads[0].frames;
        assert_eq!(frames[0].image.as_deref(), Some("a"));
        assert_eq!(frames[1].image, None);
        assert_eq!(cut.call_tree[0].frames[0].image.as_deref(), Some("c"));
    }

    struct NoDebugFiles;

    impl symcluster_engine::SymCacheSource for NoDebugFiles {
        fn load(&self, _: &symcluster_engine::model::Image) -> symcluster_engine::ModuleLoad {
            symcluster_engine::ModuleLoad::Missing
        }
    }

    #[test]
    fn launch_oom_and_unreadable_reports_are_sent_as_they_are() {
        let report = |kind: &str| {
            serde_json::to_vec(&serde_json::json!({"kind": kind,
                "modules": [module(0x1000, 0x1000, "a")], "stacktraces": []}))
            .unwrap()
        };
        assert_eq!(referenced_only(&report("launch")), None);
        assert_eq!(referenced_only(&report("oom")), None);
        assert_eq!(
            names(&referenced_only(&report("crash")).unwrap()),
            Vec::<String>::new()
        );
        assert_eq!(referenced_only(b"{\"kind\": \"crash\"}"), None);
        assert_eq!(referenced_only(b"not json"), None);
    }
}

//! Crash groups: a fingerprint of the top in-app symbolicated frames of a result, computed by
//! the worker from the result it made (the master only counts).
//!
//! In-app frames are the symbolicated ones outside the platform's own libraries (images under
//! `/System/`, `/usr/lib/`, `/lib/` or a `Developer/` folder, whose symbols come from the
//! shared system symbols when they are symbolicated at all) and, for JavaScript, those outside
//! `node_modules`, for Java/Kotlin those the mapping file retraced (the app's own obfuscated
//! code).
//! The fingerprint hashes the top [`KEY_FRAMES`] frames' function and image (native) or function
//! and file (JS), but not line numbers, so a crash keeps its group across builds that move code.
//!
//! A native crash with no symbolicated frame (its app's dSYM is not uploaded yet) goes to an
//! *unsymbolicated* group keyed by the top frames' image and offset in it (the same build's
//! crashes at the same place share it), titled `… (unsymbolicated)`. When the dSYM arrives and
//! the job is symbolicated again, it moves to its real group.

use std::hash::{Hash, Hasher};

use symcluster_engine::ReportKind;
use symcluster_engine::combined::{CombinedFrame, CombinedResult};
use symcluster_engine::js::{JsFrameStatus, JsRestoreResult};
use symcluster_engine::jvm::result::Relation;
use symcluster_engine::jvm::{JvmFrameStatus, JvmRetraceResult};
use symcluster_engine::result::{FrameStatus, SymbolicationResult};

use symcluster_proto::v1::CrashGroupKey as GroupKey;

/// A result's facets as a completion carries them (`CompleteJobRequest.facets`); `None` when
/// the report said none of them.
pub fn facets(
    facets: &symcluster_engine::ReportFacets,
) -> Option<Box<symcluster_proto::v1::ReportFacets>> {
    (!facets.is_empty()).then(|| {
        let text = |value: &Option<String>| value.clone().unwrap_or_default();
        Box::new(symcluster_proto::v1::ReportFacets {
            release: text(&facets.release),
            dist: text(&facets.dist),
            os: text(&facets.os),
            device: text(&facets.device),
        })
    })
}

/// Frames in a fingerprint and key stack.
pub const KEY_FRAMES: usize = 5;

/// The group of a native result.
///
/// - A crash, hang, jank or CPU hog: by its requesting thread's top symbolicated frames (for a
///   sampled report, its key stack: the heaviest path of the call tree), else
///   ([`unsymbolicated`]) by the top frames' image offsets; `None` when that thread has
///   neither. Other kinds than `crash` salt the fingerprint with their name, so a hang and a
///   crash at the same place are two groups.
/// - An out-of-memory exit ([`oom`]): by app version, last breadcrumb and foreground/background.
/// - A launch-time report: `None` (a metric, not a problem to group).
pub fn native(result: &SymbolicationResult) -> Option<GroupKey> {
    let mut key = match result.kind {
        ReportKind::Launch => return None,
        ReportKind::Oom => return Some(oom(result)),
        _ => by_stack(result)?,
    };
    if result.kind != ReportKind::Crash {
        let mut hasher = StableHasher::default();
        result.kind.name().hash(&mut hasher);
        key.fingerprint.hash(&mut hasher);
        key.fingerprint = format!("{:016x}", hasher.finish());
    }
    key.kind = result.kind.name().to_owned();
    Some(key)
}

/// The group of an `oom` report: its `details.oom` app version, breadcrumb (the screen the
/// app said was active) and whether it was in the foreground; titled
/// `Out of memory (foreground) in 1.2 (34) at Settings`.
fn oom(result: &SymbolicationResult) -> GroupKey {
    let oom = result.details.as_ref().and_then(|d| d.get("oom"));
    let field = |name: &str| {
        oom.and_then(|o| o.get(name))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let version = field("app_version");
    let breadcrumb = field("breadcrumb");
    let foreground = oom
        .and_then(|o| o.get("in_foreground"))
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(true);
    let mut hasher = StableHasher::default();
    ("oom", &version, &breadcrumb, foreground).hash(&mut hasher);
    let place = if foreground {
        "foreground"
    } else {
        "background"
    };
    let mut title = format!(
        "Out of memory ({place}) in {}",
        if version.is_empty() { "?" } else { &version }
    );
    if !breadcrumb.is_empty() {
        title.push_str(&format!(" at {breadcrumb}"));
    }
    GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title,
        key_stack: Vec::new(),
        kind: ReportKind::Oom.name().to_owned(),
    }
}

/// The group of a result with a stack: see [`native`].
fn by_stack(result: &SymbolicationResult) -> Option<GroupKey> {
    let thread = result.crashed_thread()?;
    // The images of the thread's symbolicated frames (a few), then which of them are system
    // images: one pass over the modules (hundreds), no set of them all.
    let mut images: Vec<(&str, bool)> = Vec::new();
    for image in thread
        .frames
        .iter()
        .filter(|f| f.status == FrameStatus::Symbolicated)
        .filter_map(|f| f.image.as_deref())
    {
        if !images.iter().any(|(i, _)| *i == image) {
            images.push((image, false));
        }
    }
    for path in result.modules.iter().filter_map(|m| m.code_file.as_deref()) {
        let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
        if let Some((_, system)) = images.iter_mut().find(|(i, _)| *i == name) {
            *system |= is_system_path(path);
        }
    }
    let is_system = |image: &str| images.iter().any(|(i, system)| *i == image && *system);
    let frames: Vec<_> = thread
        .frames
        .iter()
        .filter(|f| f.status == FrameStatus::Symbolicated)
        .filter(|f| f.image.as_deref().is_none_or(|i| !is_system(i)))
        .take(KEY_FRAMES)
        .collect();
    let Some(top) = frames.first() else {
        return unsymbolicated(result, &thread.frames);
    };
    let mut hasher = StableHasher::default();
    for f in &frames {
        (f.function.as_deref(), f.image.as_deref()).hash(&mut hasher);
    }
    let title = match &result.crash_reason {
        Some(reason) => format!("{reason} in {}", top.function.as_deref().unwrap_or("?")),
        None => top.function.clone().unwrap_or_else(|| "?".into()),
    };
    Some(GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title,
        key_stack: frames
            .iter()
            .map(|f| {
                let function = f.function.as_deref().unwrap_or("?");
                match (&f.filename, f.lineno) {
                    (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
                    _ => format!("{function} ({})", f.image.as_deref().unwrap_or("?")),
                }
            })
            .collect(),
        kind: String::new(),
    })
}

/// Whether an image path is one of the platform's own libraries (Apple's system frameworks
/// and dylibs, the simulator's and Xcode's; Android's `/system`, `/apex` and `/vendor`
/// libraries), not the app's code.
fn is_system_path(path: &str) -> bool {
    [
        "/System/",
        "/usr/lib/",
        "/usr/lib64/",
        "/lib/",
        "/lib64/",
        "/system/",
        "/apex/",
        "/vendor/",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix))
        || path.contains("/Developer/")
}

/// The group of a crash with no symbolicated frame of the app: the top [`KEY_FRAMES`] frames
/// that fall in an image, as `image + 0xoffset` (stable for one build of the app and OS, also
/// when system symbols arrive), titled `… (unsymbolicated)` or `… (in system code)`.
fn unsymbolicated(
    result: &SymbolicationResult,
    frames: &[symcluster_engine::result::FrameResult],
) -> Option<GroupKey> {
    let located: Vec<String> = frames
        .iter()
        .filter_map(|f| {
            let image = f.image.as_deref()?;
            let base = f.image_addr?.0;
            Some(format!(
                "{image} + {:#x}",
                f.instruction_addr.0.checked_sub(base)?
            ))
        })
        .take(KEY_FRAMES)
        .collect();
    let top = located.first()?;
    let mut hasher = StableHasher::default();
    "unsymbolicated".hash(&mut hasher);
    located.hash(&mut hasher);
    // The key never changes when system symbols arrive; the title names the function when the
    // top frame has one (system code).
    let place = match frames
        .first()
        .filter(|f| f.status == FrameStatus::Symbolicated)
    {
        Some(f) => format!(
            "{} ({}) (in system code)",
            f.function.as_deref().unwrap_or("?"),
            f.image.as_deref().unwrap_or("?")
        ),
        None => format!("{top} (unsymbolicated)"),
    };
    let title = match &result.crash_reason {
        Some(reason) => format!("{reason} in {place}"),
        None => place,
    };
    Some(GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title,
        key_stack: located,
        kind: String::new(),
    })
}

/// The crash group of a JS result; `None` when it has no symbolicated frame outside
/// `node_modules`.
pub fn js(result: &JsRestoreResult) -> Option<GroupKey> {
    let frames: Vec<_> = result
        .frames
        .iter()
        .filter(|f| f.status == JsFrameStatus::Symbolicated)
        .filter(|f| !f.filename.as_deref().unwrap_or("").contains("node_modules"))
        .take(KEY_FRAMES)
        .collect();
    let top = frames.first()?;
    let mut hasher = StableHasher::default();
    for f in &frames {
        (f.function.as_deref(), f.filename.as_deref()).hash(&mut hasher);
    }
    Some(GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title: format!(
            "JavaScript error in {}",
            top.function.as_deref().unwrap_or("?")
        ),
        key_stack: frames
            .iter()
            .map(|f| {
                format!(
                    "{} ({}:{})",
                    f.function.as_deref().unwrap_or("?"),
                    f.filename.as_deref().unwrap_or("?"),
                    f.lineno.unwrap_or(0)
                )
            })
            .collect(),
        kind: ReportKind::Crash.name().to_owned(),
    })
}

/// The crash group of a JVM result: the deepest cause that has retraced frames (of the thrown
/// exception's own `Caused by` chain, not of exceptions suppressed inside it: where the failure
/// began, in the app's code), by its original class and its top retraced frames' class and
/// method (not lines); `None` when no exception of that chain has a retraced frame.
pub fn jvm(result: &JvmRetraceResult) -> Option<GroupKey> {
    let root = result.exceptions.iter().rev().find(|e| {
        e.depth == 0
            && e.relation != Relation::Suppressed
            && e.frames
                .iter()
                .any(|f| f.status == JvmFrameStatus::Symbolicated)
    })?;
    let frames: Vec<_> = root
        .frames
        .iter()
        .filter(|f| f.status == JvmFrameStatus::Symbolicated)
        .take(KEY_FRAMES)
        .collect();
    let top = frames.first()?;
    let mut hasher = StableHasher::default();
    root.class.hash(&mut hasher);
    for f in &frames {
        (f.class.as_str(), f.method.as_str()).hash(&mut hasher);
    }
    let simple = |class: &str| class.rsplit('.').next().unwrap_or(class).to_owned();
    Some(GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title: format!(
            "{} in {}.{}",
            simple(&root.class),
            simple(&top.class),
            top.method
        ),
        key_stack: frames
            .iter()
            .map(|f| {
                format!(
                    "{}.{} ({}:{})",
                    f.class,
                    f.method,
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                )
            })
            .collect(),
        kind: ReportKind::Crash.name().to_owned(),
    })
}

/// The crash group of a combined result (JavaScript, Java and native frames in one report):
/// the first exception, the thrown one first, that has in-app restored frames of any layer (a
/// native frame symbolicated outside the platform's libraries, a JavaScript frame restored
/// outside `node_modules` and the map's ignore list, a Java frame the mapping retraced), by
/// its top [`KEY_FRAMES`] such frames in call order across layers (layer, function and
/// image, file or class; not lines); titled `<type> in <top function>`. `None` when no
/// exception has one.
pub fn combined(result: &CombinedResult) -> Option<GroupKey> {
    let system: Vec<&str> = result
        .modules
        .iter()
        .filter_map(|m| m.code_file.as_deref())
        .filter(|path| is_system_path(path))
        .map(|path| path.rsplit(['/', '\\']).next().unwrap_or(path))
        .collect();
    // (layer, function, where) of an in-app restored frame, and its key stack line.
    let in_app = |frame: &CombinedFrame| -> Option<(&'static str, String, String, String)> {
        match frame {
            CombinedFrame::Native(f) => {
                let image = f.image.as_deref()?;
                (f.status == FrameStatus::Symbolicated && !system.contains(&image)).then(|| {
                    let function = f.function.clone().unwrap_or_else(|| "?".into());
                    let line = match (&f.filename, f.lineno) {
                        (Some(file), Some(line)) => format!("{function} ({file}:{line})"),
                        _ => format!("{function} ({image})"),
                    };
                    ("native", function, image.to_owned(), line)
                })
            }
            CombinedFrame::Js(f) => {
                let file = f.filename.as_deref()?;
                (f.status == JsFrameStatus::Symbolicated
                    && !f.in_ignore_list
                    && !file.contains("node_modules"))
                .then(|| {
                    let function = f.function.as_deref().unwrap_or("?").to_owned();
                    let line = format!("{function} ({file}:{})", f.lineno.unwrap_or(0));
                    ("js", function, file.to_owned(), line)
                })
            }
            CombinedFrame::Jvm(f) => (f.status == JvmFrameStatus::Symbolicated).then(|| {
                let function = format!("{}.{}", f.class, f.method);
                let line = format!(
                    "{function} ({}:{})",
                    f.file.as_deref().unwrap_or("?"),
                    f.line.unwrap_or(0)
                );
                ("jvm", function, f.class.clone(), line)
            }),
            CombinedFrame::Other(_) => None,
        }
    };
    let (exception, frames) = result.exceptions.iter().find_map(|e| {
        let frames: Vec<_> = e
            .frames
            .iter()
            .filter_map(in_app)
            .take(KEY_FRAMES)
            .collect();
        (!frames.is_empty()).then_some((e, frames))
    })?;
    let mut hasher = StableHasher::default();
    "combined".hash(&mut hasher);
    exception.type_.hash(&mut hasher);
    for (layer, function, place, _) in &frames {
        (layer, function, place).hash(&mut hasher);
    }
    Some(GroupKey {
        fingerprint: format!("{:016x}", hasher.finish()),
        title: format!("{} in {}", exception.type_, frames[0].1),
        key_stack: frames.into_iter().map(|(_, _, _, line)| line).collect(),
        kind: ReportKind::Crash.name().to_owned(),
    })
}

/// A hang result's call tree, named for aggregation in its crash group: each node becomes its
/// levels (the function, then any call inlined into it, below it), named by function, else
/// `image + 0xoffset`, else the address; siblings with the same name are merged, hits summed.
/// Flat, parents first (`CallTreeNode.parent`, -1 at the top). Empty for other results, and for
/// a tree of more than `MAX_CALL_TREE_NODES` nodes (the result keeps it whole; the group does
/// not sum it).
pub fn call_tree(result: &SymbolicationResult) -> Vec<symcluster_proto::v1::CallTreeNode> {
    let tree = named_tree(result);
    if tree.len() > symcluster_client::result_limits::MAX_CALL_TREE_NODES {
        tracing::warn!(
            nodes = tree.len(),
            "call tree too big to add to its crash group; the result keeps it"
        );
        return Vec::new();
    }
    tree
}

fn named_tree(result: &SymbolicationResult) -> Vec<symcluster_proto::v1::CallTreeNode> {
    use std::collections::HashMap;
    let mut out: Vec<symcluster_proto::v1::CallTreeNode> = Vec::new();
    let mut by_path: HashMap<(i64, String), usize> = HashMap::new();
    // Where each result node's innermost level landed.
    let mut landed: Vec<Option<usize>> = Vec::with_capacity(result.call_tree.len());
    for (index, node) in result.call_tree.iter().enumerate() {
        let mut parent = match node.parent {
            None => -1,
            Some(p) if p < index => match landed[p] {
                Some(at) => at as i64,
                None => {
                    landed.push(None);
                    continue;
                }
            },
            Some(_) => {
                landed.push(None);
                continue;
            }
        };
        // Levels are innermost first; the tree goes outermost first.
        for level in node.frames.iter().rev() {
            let name = frame_name(level);
            let at = *by_path.entry((parent, name.clone())).or_insert_with(|| {
                out.push(symcluster_proto::v1::CallTreeNode {
                    name,
                    hits: 0,
                    parent,
                });
                out.len() - 1
            });
            out[at].hits += node.hits;
            parent = at as i64;
        }
        landed.push(usize::try_from(parent).ok());
    }
    out
}

fn frame_name(frame: &symcluster_engine::result::FrameResult) -> String {
    if let Some(function) = frame.function.as_deref().filter(|f| !f.is_empty()) {
        return function.to_owned();
    }
    match (frame.image.as_deref(), frame.image_addr) {
        (Some(image), Some(base)) if frame.instruction_addr.0 >= base.0 => {
            format!("{image} + {:#x}", frame.instruction_addr.0 - base.0)
        }
        _ => format!("{:#x}", frame.instruction_addr.0),
    }
}

/// FNV-1a: specified, so the same fingerprint on every master, run and Rust release.
type StableHasher = fnv::FnvHasher;

#[cfg(test)]
mod tests {
    use super::*;

    /// A result whose crashed thread has one symbolicated frame `run` in `App`.
    fn result(kind: &str, details: serde_json::Value) -> SymbolicationResult {
        serde_json::from_value(serde_json::json!({
            "status": "complete",
            "crash_reason": "EXC_BAD_ACCESS (SIGSEGV)",
            "kind": kind,
            "details": details,
            "modules": [],
            "threads": [{"id": 1, "name": null, "crashed": true, "frames": [{
                "index": 0, "instruction_addr": "0x1000", "lookup_addr": "0x1000",
                "image": "App", "image_addr": "0x0", "status": "symbolicated",
                "symbol": "run", "function": "run", "sym_addr": "0x1000",
                "filename": "a.c", "abs_path": "/a.c", "lineno": 3, "colno": null,
                "inlined": false
            }]}]
        }))
        .unwrap()
    }

    #[test]
    fn kinds_at_the_same_place_are_different_groups() {
        let crash = native(&result("crash", serde_json::Value::Null)).unwrap();
        let hang = native(&result("hang", serde_json::Value::Null)).unwrap();
        let cpu = native(&result("cpu", serde_json::Value::Null)).unwrap();
        assert_eq!((crash.kind.as_str(), hang.kind.as_str()), ("crash", "hang"));
        assert_eq!(crash.key_stack, hang.key_stack);
        assert_ne!(crash.fingerprint, hang.fingerprint);
        assert_ne!(hang.fingerprint, cpu.fingerprint);
        assert_eq!(native(&result("launch", serde_json::Value::Null)), None);
    }

    #[test]
    fn ooms_group_by_app_version_breadcrumb_and_foreground() {
        let oom = |version: &str, breadcrumb: &str, foreground: bool| {
            native(&result(
                "oom",
                serde_json::json!({"oom": {"app_version": version, "breadcrumb": breadcrumb,
                                            "in_foreground": foreground,
                                            "last_footprint_bytes": 1}}),
            ))
            .unwrap()
        };
        let a = oom("1.2 (34)", "Settings", true);
        assert_eq!(a.kind, "oom");
        assert_eq!(
            a.title,
            "Out of memory (foreground) in 1.2 (34) at Settings"
        );
        assert!(a.key_stack.is_empty());
        assert_eq!(a.fingerprint, oom("1.2 (34)", "Settings", true).fingerprint);
        assert_ne!(a.fingerprint, oom("1.3 (35)", "Settings", true).fingerprint);
        assert_ne!(a.fingerprint, oom("1.2 (34)", "Feed", true).fingerprint);
        assert_ne!(
            a.fingerprint,
            oom("1.2 (34)", "Settings", false).fingerprint
        );
    }
}

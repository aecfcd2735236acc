//! Crash groups: a fingerprint of the top in-app symbolicated frames of a result, computed by
//! the worker from the result it made (the master only counts).
//!
//! In-app frames are the symbolicated ones (their debug files were uploaded by the app's
//! developers; system libraries' are not) and, for JavaScript, those outside `node_modules`.
//! The fingerprint hashes the top [`KEY_FRAMES`] frames' function and image (native) or function
//! and file (JS), but not line numbers, so a crash keeps its group across builds that move code.

use std::hash::{Hash, Hasher};

use symcluster_engine::js::{JsFrameStatus, JsRestoreResult};
use symcluster_engine::result::{FrameStatus, SymbolicationResult};

use symcluster_client::api::CrashGroupKey as GroupKey;

/// Frames in a fingerprint and key stack.
pub const KEY_FRAMES: usize = 5;

/// The crash group of a native result; `None` when it has no symbolicated frame in its crashed
/// thread.
pub fn native(result: &SymbolicationResult) -> Option<GroupKey> {
    let thread = result.crashed_thread()?;
    let frames: Vec<_> = thread
        .frames
        .iter()
        .filter(|f| f.status == FrameStatus::Symbolicated)
        .take(KEY_FRAMES)
        .collect();
    let top = frames.first()?;
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
    })
}

/// FNV-1a: specified, so the same fingerprint on every master, run and Rust release.
type StableHasher = fnv::FnvHasher;

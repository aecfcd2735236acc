//! Launch time: from the process's start, as the kernel recorded it
//! ([`Backend::process_start_ms`]), to the app's first frame ([`mark_launched`], which the app
//! calls when its first screen is drawn), written once per launch as a `launch` report
//! (`launch-<ms>-<pid>.json`) with the image list, so that slow launches can be told apart by
//! build and linked libraries.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::platform::{Backend, Host};
use crate::writer::Writer;

static MARKED: AtomicBool = AtomicBool::new(false);

/// Marks the first frame: writes the `launch` report into `dir` and returns the launch time
/// in ms; `None` when this launch was marked already, or the process start time is unknown.
pub fn mark_launched(dir: &Path, metadata_json: &[u8]) -> Option<u64> {
    let first_frame_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_millis() as u64;
    let started_ms = Host::process_start_ms()?;
    if MARKED.swap(true, Ordering::AcqRel) {
        return None;
    }
    let duration_ms = first_frame_ms.saturating_sub(started_ms);
    let mut buf = vec![0u8; 1 << 20];
    let mut w = Writer::new(&mut buf);
    crate::call_tree::write_head(&mut w, "launch", b"Launch");
    w.key("launch", false);
    w.raw(b"{");
    w.key("duration_ms", true);
    w.dec(duration_ms);
    w.key("process_start_ms", false);
    w.dec(started_ms);
    w.key("first_frame_ms", false);
    w.dec(first_frame_ms);
    w.raw(b"}");
    w.key("timestamp_ms", false);
    w.dec(first_frame_ms);
    w.key("metadata", false);
    w.raw(metadata_json);
    w.key("modules", false);
    w.raw(crate::images::published_modules_json());
    w.key("stacktraces", false);
    w.raw(b"[]");
    w.raw(b"}\n");
    let path = crate::call_tree::report_path(dir, "launch");
    crate::call_tree::write_atomically(&path, w.as_bytes()).ok()?;
    Some(duration_ms)
}

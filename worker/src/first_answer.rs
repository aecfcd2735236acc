//! First answers from a debug file whose SymCache is still being built: a job that needs a
//! debug file no cache holds does not wait for the whole conversion (seconds to minutes for a
//! production dSYM). Once the file is on disk, it builds a partial SymCache of the functions
//! its own addresses fall in ([`SymCacheFile::for_addresses`], the same frames the full
//! SymCache gives) and answers; the full conversion goes on in the background, once per debug
//! file, and later jobs use it.
//!
//! [`OnDisk`] is how a job learns that the file is on disk: the conversion publishes it under
//! the file's key while it converts, and a job subscribes before it asks for the conversion,
//! so it cannot miss it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use symcluster_engine::symcache::SymCacheFile;
use tokio::sync::watch;

use crate::debug_file::DebugFileOnDisk;

/// A debug file on disk while its conversion runs, or nothing yet.
pub type Published = Option<Arc<DebugFileOnDisk>>;

/// Debug files on disk being converted, by their object key; each waited for by the jobs that
/// subscribed.
#[derive(Default)]
pub struct OnDisk(Mutex<HashMap<String, watch::Sender<Published>>>);

impl OnDisk {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<Published>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows `key`: the receiver sees the file once its conversion has it on disk, and
    /// closes once the conversion ended ([`Self::ended`]).
    pub fn subscribe(&self, key: &str) -> watch::Receiver<Published> {
        self.lock()
            .entry(key.to_owned())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// `file` (at `key`) is on disk and being converted: the jobs that follow `key` may read it.
    pub fn publish(&self, key: &str, file: Arc<DebugFileOnDisk>) {
        if let Some(sender) = self.lock().get(key) {
            sender.send_replace(Some(file));
        }
    }

    /// The conversion of `key` ended (or was not needed): its followers stop waiting for the
    /// file, and the file is no longer held here.
    pub fn ended(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// A partial SymCache of `file` for `addresses` (image-relative), built off the async
/// threads; counted in `symcluster_worker_step_seconds{step="partial"}`. The message of an
/// error is one line.
pub async fn partial(
    file: Arc<DebugFileOnDisk>,
    debug_id: symbolic_common::DebugId,
    addresses: Vec<u64>,
) -> Result<SymCacheFile, String> {
    let span = tracing::info_span!("partial", %debug_id, addresses = addresses.len());
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let partial = SymCacheFile::for_addresses(&file.bytes, debug_id, &addresses)
            .map_err(|e| e.to_string());
        crate::metrics::step("partial", "native", started.elapsed());
        partial
    })
    .await
    .map_err(|e| format!("partial SymCache task failed: {e}"))?
}

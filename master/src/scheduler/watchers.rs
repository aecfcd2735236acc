//! Wakes the `WatchJob` streams of one job when that job changes, and no others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Job id → the `Notify` its watchers wait on.
#[derive(Default)]
pub struct Watchers {
    by_job: Mutex<HashMap<String, Arc<Notify>>>,
}

/// A watcher's registration; unregisters on drop.
pub struct Watch {
    watchers: Arc<Watchers>,
    job_id: String,
    /// Notified on every change of the job.
    pub notify: Arc<Notify>,
}

impl Watchers {
    /// Registers interest in `job_id`.
    pub fn watch(self: &Arc<Self>, job_id: &str) -> Watch {
        let mut map = self.by_job.lock().unwrap_or_else(|e| e.into_inner());
        let notify = map.entry(job_id.to_owned()).or_default().clone();
        Watch {
            watchers: self.clone(),
            job_id: job_id.to_owned(),
            notify,
        }
    }

    /// Wakes the watchers of `job_id`.
    pub fn changed(&self, job_id: &str) {
        let map = self.by_job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(notify) = map.get(job_id) {
            notify.notify_waiters();
        }
    }

    /// Wakes every watcher (after a snapshot replaced the index).
    pub fn all_changed(&self) {
        let map = self.by_job.lock().unwrap_or_else(|e| e.into_inner());
        for notify in map.values() {
            notify.notify_waiters();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut map = self
            .watchers
            .by_job
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // The map's reference and ours: nobody else watches this job.
        if map
            .get(&self.job_id)
            .is_some_and(|n| Arc::strong_count(n) <= 2)
        {
            map.remove(&self.job_id);
        }
    }
}

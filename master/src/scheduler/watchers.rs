//! Wakes the `WatchJob` streams of one job when that job changes, and no others.
//!
//! Service tasks register and drop watches (one per job of a `SubmitStream` that waits for its
//! result) while the Raft thread wakes them at every applied change: a sharded map
//! ([`DashMap`]) lets both go on without one lock over every job. A watcher that waits only for
//! the job to finish (a `SubmitStream` answer) is woken only when it does: a lease or a requeue
//! does not wake it to read a record it would not answer.

use std::sync::Arc;

use dashmap::DashMap;
use tokio::sync::Notify;

/// Job id → what its watchers wait on.
#[derive(Default)]
pub struct Watchers {
    by_job: DashMap<String, Arc<JobNotify>>,
}

/// The two wake-ups of one job.
#[derive(Default)]
pub struct JobNotify {
    /// Notified on every change of the job.
    pub any: Notify,
    /// Notified when the job changes into a finished state (COMPLETED or FAILED), and after a
    /// snapshot replaced the index.
    pub finished: Notify,
}

/// A watcher's registration; unregisters on drop.
pub struct Watch {
    watchers: Arc<Watchers>,
    job_id: String,
    /// What this job's changes notify.
    pub notify: Arc<JobNotify>,
}

impl Watchers {
    /// Registers interest in `job_id`.
    pub fn watch(self: &Arc<Self>, job_id: &str) -> Watch {
        let notify = self
            .by_job
            .entry(job_id.to_owned())
            .or_default()
            .value()
            .clone();
        Watch {
            watchers: self.clone(),
            job_id: job_id.to_owned(),
            notify,
        }
    }

    /// Wakes the watchers of `job_id` after a change; those waiting for it to finish only when
    /// `finished` (the job is now COMPLETED or FAILED).
    pub fn changed(&self, job_id: &str, finished: bool) {
        if let Some(notify) = self.by_job.get(job_id) {
            notify.any.notify_waiters();
            if finished {
                notify.finished.notify_waiters();
            }
        }
    }

    /// Wakes every watcher (after a snapshot replaced the index).
    pub fn all_changed(&self) {
        for notify in self.by_job.iter() {
            notify.any.notify_waiters();
            notify.finished.notify_waiters();
        }
    }

    /// Jobs watched now.
    pub fn len(&self) -> usize {
        self.by_job.len()
    }

    /// Whether no job is watched.
    pub fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // The map's reference and ours: nobody else watches this job.
        self.watchers
            .by_job
            .remove_if(&self.job_id, |_, n| Arc::strong_count(n) <= 2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_change_wakes_the_watchers_of_its_job_only_and_the_last_drop_unregisters() {
        let watchers = Arc::new(Watchers::default());
        let a1 = watchers.watch("p/a");
        let a2 = watchers.watch("p/a");
        let b = watchers.watch("p/b");
        assert_eq!(watchers.len(), 2);
        {
            let (woken_a, woken_b) = (a1.notify.any.notified(), b.notify.any.notified());
            tokio::pin!(woken_a, woken_b);
            woken_a.as_mut().enable();
            woken_b.as_mut().enable();
            watchers.changed("p/a", false);
            assert!(futures::poll!(woken_a.as_mut()).is_ready());
            assert!(futures::poll!(woken_b.as_mut()).is_pending());
        }
        drop(a1);
        assert_eq!(watchers.len(), 2, "p/a is still watched by a2");
        drop(a2);
        drop(b);
        assert!(watchers.is_empty());
    }

    #[tokio::test]
    async fn a_watcher_of_the_finish_is_woken_by_the_finish_and_a_snapshot_only() {
        let watchers = Arc::new(Watchers::default());
        let a = watchers.watch("p/a");
        {
            let finished = a.notify.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            // Leased, requeued: not finished.
            watchers.changed("p/a", false);
            watchers.changed("p/a", false);
            assert!(futures::poll!(finished.as_mut()).is_pending());
            watchers.changed("p/a", true);
            assert!(futures::poll!(finished.as_mut()).is_ready());
        }

        {
            let after_restore = a.notify.finished.notified();
            tokio::pin!(after_restore);
            after_restore.as_mut().enable();
            watchers.all_changed();
            assert!(futures::poll!(after_restore.as_mut()).is_ready());
        }
        drop(a);
        assert!(watchers.is_empty());
    }
}

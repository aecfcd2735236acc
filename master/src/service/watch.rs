//! Waiting for a job's next state, as `WatchJob`, `GetJob` and a `SubmitStream` answer it.

use tonic::Status;

use super::index_status;
use crate::index::{JobState, JobView, ResultForm, is_terminal};
use crate::scheduler::Scheduler;

/// How to answer results: compressed when the caller asked for `result_zstd`.
pub(super) fn result_form(zstd: bool) -> ResultForm {
    if zstd {
        ResultForm::Zstd
    } else {
        ResultForm::Json
    }
}

/// Which changes [`next_change`] returns on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Until {
    /// Any state other than the last one seen (`WatchJob` streams every state).
    AnyChange,
    /// A finished state only, COMPLETED or FAILED (a `SubmitStream` answers only that).
    Finished,
}

/// Waits until job `id` is in a state other than `last` that `until` asks for and returns it
/// then (with its result in `form` when finished); `None` when the job is gone (purged).
///
/// One index read per wake-up: the record, and in the same read transaction the result when
/// the job is finished.
pub(super) async fn next_change(
    scheduler: &Scheduler,
    id: &str,
    last: Option<JobState>,
    until: Until,
    form: ResultForm,
) -> Result<Option<JobView>, Status> {
    let watch = scheduler.watchers().watch(id);
    loop {
        // Armed before the read: a change applied between the read and the wait still wakes
        // this loop (`notify_waiters` keeps no permit for a later waiter).
        let notified = match until {
            Until::AnyChange => watch.notify.any.notified(),
            // A lease or a requeue cannot make the answer: only a finish (or a restored index).
            Until::Finished => watch.notify.finished.notified(),
        };
        tokio::pin!(notified);
        notified.as_mut().enable();
        let Some(job) = scheduler
            .index()
            .job_with_result_when_finished(id, form)
            .map_err(index_status)?
        else {
            return Ok(None);
        };
        let state = job.state();
        if last != Some(state) && (until == Until::AnyChange || is_terminal(state)) {
            return Ok(Some(job));
        }
        notified.await;
    }
}

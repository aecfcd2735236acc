//! Checking and submitting one job spec for a caller, as `Ingest/Submit` and each submit of a
//! `SubmitStream` do.

use prost::Message;
use symcluster_admission::{Checked, check};
use symcluster_proto::v1;
use tonic::Status;

use super::{index_status, job_to_proto, schedule_status};
use crate::auth;
use crate::index::keys;
use crate::scheduler::Scheduler;

/// [`check`]s `spec`; a native report without a routing key (decompressing and reading up to
/// 16 MiB), a JVM trace without a mapping id (a Sentry event read for the id it names), or a
/// combined event (read for its routing key), is read on the blocking pool, so that it never holds up the async threads that serve every
/// other request. The spec is handed back; `Err` (INTERNAL) only when the reading task itself
/// ended abnormally.
async fn check_off_runtime(
    spec: v1::JobSpec,
) -> Result<(Result<Checked, String>, v1::JobSpec), Status> {
    let reads_report = match &spec.payload {
        Some(v1::job_spec::Payload::Native(native)) => native.routing_key.is_empty(),
        Some(v1::job_spec::Payload::Jvm(jvm)) => jvm.mapping_id.is_empty(),
        Some(v1::job_spec::Payload::Combined(_)) => true,
        _ => false,
    };
    if !reads_report {
        return Ok((check(&spec), spec));
    }
    // The permit goes into the blocking task, so that a caller who gives up (a short deadline,
    // a reset stream) does not free a place while its read still runs.
    let Ok(permit) = READERS.clone().acquire_owned().await else {
        return Ok((check(&spec), spec));
    };
    tokio::task::spawn_blocking(move || {
        let checked = check(&spec);
        drop(permit);
        (checked, spec)
    })
    .await
    .map_err(|e| Status::internal(format!("the report reader stopped: {e}")))
}

/// Reports read (or compared) at once: as many as there are cores. More would only add
/// blocking-pool threads (each with its own allocator heap: the leader's RSS went from 160 to
/// 287 MiB without this bound under the load test).
static READERS: std::sync::LazyLock<std::sync::Arc<tokio::sync::Semaphore>> =
    std::sync::LazyLock::new(|| {
        std::sync::Arc::new(tokio::sync::Semaphore::new(
            std::thread::available_parallelism().map_or(2, |n| n.get()),
        ))
    });

/// The span a submit runs in: `submit_job`, its `job_id` (the index key) recorded by
/// [`submit_spec`] once known.
pub(super) fn submit_span() -> tracing::Span {
    tracing::info_span!("submit_job", job_id = tracing::field::Empty)
}

/// Checks and submits `spec` on this master (the leader) for `caller` (in a [`submit_span`]):
/// the answer `Submit` gives. The job goes to the project the spec names (or the caller's, see
/// [`auth::Caller::project_for`]) under its index key ([`keys`]): the stored spec carries that
/// key as its `job_id`, which is the id workers complete it by, and the resolved `project`. A
/// caller that may not read (a `device` token) gets the job without its result.
pub(super) async fn submit_spec(
    scheduler: &Scheduler,
    mut spec: v1::JobSpec,
    caller: &auth::Caller,
) -> Result<v1::SubmitResponse, Status> {
    if let Some(max) = caller.max_report_bytes {
        auth::budget::check_report_len(max, payload_len(&spec))?;
    }
    let (checked, returned) = check_off_runtime(spec).await?;
    spec = returned;
    let checked = checked.map_err(Status::invalid_argument)?;
    spec.project = caller.project_for(&spec.project)?;
    spec.job_id = keys::job_key(&spec.project, &spec.job_id);
    tracing::Span::current().record("job_id", spec.job_id.as_str());
    let encoded = spec.encode_to_vec();
    caller.take_bytes(encoded.len())?;
    let key = spec.job_id.as_str();
    let outcome = match checked {
        Checked::Runnable { kind, routing_key } => {
            scheduler.submit(key, kind, encoded, &routing_key).await
        }
        Checked::Unreadable { kind, error } => {
            scheduler.submit_failed(key, kind, encoded, &error).await
        }
    };
    let (job, created) = outcome.map_err(schedule_status)?;
    crate::metrics::JOBS_SUBMITTED.inc_by(u64::from(created));
    tracing::debug!(job_id = %job.record.job_id, created, "job submitted");
    let same_report = created || holds_report(scheduler, spec).await?;
    let mut job = job_to_proto(job);
    if !may_read(caller) {
        // A resubmitted id must not tell a device anything of another device's job: its state,
        // error, result, missing files or group.
        job = v1::Job {
            project: job.project,
            job_id: job.job_id,
            ..Default::default()
        };
    }
    Ok(v1::SubmitResponse {
        job: Some(job),
        created,
        same_report,
    })
}

/// Whether the stored job `spec.job_id` (an index key) was submitted with `spec`'s report (or
/// JS stack): the same payload once reports are decompressed ([`same_payload`]). False when
/// the master no longer holds the spec. Read off the runtime under one of the [`READERS`]
/// places (a spec is up to 16 MiB).
async fn holds_report(scheduler: &Scheduler, spec: v1::JobSpec) -> Result<bool, Status> {
    let index = scheduler.index().clone();
    let Ok(permit) = READERS.clone().acquire_owned().await else {
        return Ok(false);
    };
    tokio::task::spawn_blocking(move || {
        let stored = index.spec(&spec.job_id).map_err(index_status)?;
        drop(permit);
        Ok(stored
            .and_then(|bytes| v1::JobSpec::decode(bytes.as_slice()).ok())
            .is_some_and(|stored| same_payload(&stored, &spec)))
    })
    .await
    .map_err(|e| Status::internal(format!("the report reader stopped: {e}")))?
}

/// Whether two specs carry the same report or JS stack: a native report compared decompressed
/// (another client's zstd gives other bytes for the same report), with the same routing key
/// and modules; a JS job field by field.
fn same_payload(a: &v1::JobSpec, b: &v1::JobSpec) -> bool {
    use symcluster_proto::report::report_bytes;
    use v1::job_spec::Payload;
    match (&a.payload, &b.payload) {
        (Some(Payload::Native(x)), Some(Payload::Native(y))) => {
            x.routing_key == y.routing_key
                && x.modules == y.modules
                && matches!(
                    (report_bytes(x), report_bytes(y)),
                    (Ok(rx), Ok(ry)) if rx == ry
                )
        }
        (x, y) => x == y,
    }
}

/// The decompressed bytes of a spec's report, JS stack, JVM trace or combined event (0 when it cannot tell: admission
/// refuses those).
fn payload_len(spec: &v1::JobSpec) -> usize {
    match &spec.payload {
        Some(v1::job_spec::Payload::Native(native)) => {
            symcluster_proto::report::checked_len(native).unwrap_or(0)
        }
        Some(v1::job_spec::Payload::Js(js)) => js.stack.len(),
        Some(v1::job_spec::Payload::Jvm(jvm)) => jvm.trace.len(),
        Some(v1::job_spec::Payload::Combined(combined)) => combined.event.len(),
        None => 0,
    }
}

/// Whether `caller` may read jobs and results (not a `device` token).
pub(super) fn may_read(caller: &auth::Caller) -> bool {
    auth::READ_ROLES.contains(&caller.role)
}

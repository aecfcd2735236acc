//! Running one leased job: fetch what it needs through the caches, run the engine, and say how
//! it ended.
//!
//! Native: read the report (decompressing `report_zstd`; only the images the result lists, as
//! the job's `modules` asks), prefetch the SymCache of every image a frame is in, symbolicate
//! (CPU work on the blocking pool). Missing or broken debug files are statuses in a completed
//! result; a report that cannot be read fails the job for good. JS: find the source map by debug
//! id or release/dist/bundle; a missing map fails the job for good, an unreachable source fails
//! the attempt (retried). JVM: the same with the ProGuard/R8 mapping file, by mapping id.

use std::collections::HashMap;
use std::sync::Arc;

use symbolic_common::DebugId;
use symcluster_client::missing;
use symcluster_engine::js::{parse_stack, restore};
use symcluster_engine::jvm;
use symcluster_engine::minidump;
use symcluster_engine::model::Image;
use symcluster_engine::result::{ModuleResult, ModuleStatus, SymbolicationResult};
use symcluster_engine::{
    ModuleLoad, Modules, SymCacheSource, image_lookups, parse_report_with, referenced_images,
    symbolicate_owned,
};
use symcluster_proto::v1::{self as api, job_spec::Payload};

use symcluster_sources::{Scope, layout};

use crate::caches::{Caches, SourceMapLoadError};

/// How a job ended.
#[derive(Debug)]
pub enum Outcome {
    /// A result (JSON, the engine's shape) and its crash group.
    Completed {
        /// The result JSON as one zstd frame ([`compress`]).
        result_zstd: Vec<u8>,
        /// Its crash group, when it has in-app symbolicated frames.
        group: Option<api::CrashGroupKey>,
        /// The debug files frames needed and no source had (modules `missing`).
        missing: Vec<api::MissingFile>,
        /// A hang report's named call tree ([`crate::grouping::call_tree`]).
        call_tree: Vec<api::CallTreeNode>,
        /// Where the report came from ([`crate::grouping::facets`]), counted in its group.
        facets: Option<Box<api::ReportFacets>>,
    },
    /// No result: the error (one line), and whether another attempt could succeed.
    Failed {
        /// One line.
        error: String,
        /// Whether to retry.
        retryable: bool,
        /// The source map a JS job (or mapping file a JVM job) lacked (the job runs again when
        /// it arrives).
        missing: Vec<api::MissingFile>,
    },
}

pub(crate) fn permanent(error: impl ToString) -> Outcome {
    Outcome::Failed {
        error: error.to_string(),
        retryable: false,
        missing: Vec::new(),
    }
}

pub(crate) fn retryable(error: impl ToString) -> Outcome {
    Outcome::Failed {
        error: error.to_string(),
        retryable: true,
        missing: Vec::new(),
    }
}

/// The debug files a native result lacked: its `missing` modules (frames needed them), by
/// debug id, with the image's file name and arch.
pub(crate) fn missing_modules(modules: &[ModuleResult]) -> Vec<api::MissingFile> {
    let mut missing: Vec<api::MissingFile> = modules
        .iter()
        .filter(|m| m.status == ModuleStatus::Missing)
        .filter_map(|m| {
            Some(api::MissingFile {
                key: missing::native_key(m.debug_id.as_deref()?),
                image: m
                    .code_file
                    .as_deref()
                    .map(|f| f.rsplit(['/', '\\']).next().unwrap_or(f).to_owned())
                    .unwrap_or_default(),
                arch: m.arch.to_string(),
            })
        })
        .collect();
    missing.sort_by(|a, b| a.key.cmp(&b.key));
    missing.dedup_by(|a, b| a.key == b.key);
    missing
}

/// Runs `spec` with `caches`, reading the files of the spec's project (the master always
/// names it; a spec without one is refused, so that no job reads another project's files).
/// With `recheck_missing` (the job runs again because a file it lacked arrived) files the
/// negative cache remembers as not found are looked up again.
pub async fn run(spec: api::JobSpec, caches: &Arc<Caches>, recheck_missing: bool) -> Outcome {
    if let Err(e) = symcluster_client::project::validate(&spec.project) {
        return permanent(format!("the lease names no valid project: {e}"));
    }
    match spec.payload {
        Some(Payload::Native(native)) => {
            run_native(&native, &spec.project, caches, recheck_missing).await
        }
        Some(Payload::Js(js)) => run_js(js, &spec.project, caches, recheck_missing).await,
        Some(Payload::Jvm(jvm)) => run_jvm(jvm, &spec.project, caches, recheck_missing).await,
        Some(Payload::Combined(job)) => {
            crate::combined::run(job, &spec.project, caches, recheck_missing).await
        }
        None => permanent("the job has no payload"),
    }
}

/// SymCaches fetched before symbolication, by debug id: the [`SymCacheSource`] a worker hands
/// the engine (an image whose debug id is not in the map is [`ModuleLoad::Missing`]).
pub struct Prefetched(pub HashMap<DebugId, ModuleLoad>);

impl SymCacheSource for Prefetched {
    fn load(&self, image: &Image) -> ModuleLoad {
        image
            .debug_id
            .and_then(|id| self.0.get(&id).cloned())
            .unwrap_or(ModuleLoad::Missing)
    }
}

/// zstd level for results: the fastest (a CrashProbe result of ~87 KB of JSON compresses about
/// 6× in ~0.1 ms).
const RESULT_ZSTD_LEVEL: i32 = 1;

/// A result's JSON as one zstd frame (RFC 8878) recording its content size, as
/// `CompleteJobRequest.result_zstd` asks; compressed on the worker, so the master only stores it.
///
/// Errors (zstd's, as an I/O error) only when a compression context cannot be made or used:
/// out of memory.
pub fn compress(json: &[u8]) -> std::io::Result<Vec<u8>> {
    thread_local! {
        // One compression context per thread, reused (creating one per result, and one
        // decompression context per report, were ~2 % of a worker's CPU in a load run).
        static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
            const { std::cell::RefCell::new(None) };
    }
    // `Compressor::compress` writes the content size into the frame header.
    COMPRESSOR.with_borrow_mut(|slot| {
        let compressor = match slot {
            Some(compressor) => compressor,
            None => slot.insert(zstd::bulk::Compressor::new(RESULT_ZSTD_LEVEL)?),
        };
        compressor.compress(json)
    })
}

/// `result` as JSON, compressed ([`compress`]): `CompleteJobRequest.result_zstd`.
///
/// The JSON is written into a buffer each thread keeps (a CrashProbe result is ~87 KB: no
/// allocation and no regrowth per result; a thread keeps at most 4 MiB of it, and the blocking
/// pool ends idle threads), or into a new one when that buffer is in use (a `Serialize` that
/// called back here). Errors when `result` cannot be encoded as JSON (serde_json's error),
/// is larger than the master accepts ([`MAX_RESULT_BYTES`](symcluster_client::result_limits::MAX_RESULT_BYTES):
/// a job whose result can never be stored fails for good instead of being leased again), or
/// cannot be compressed ([`compress`]).
pub fn result_zstd(result: &impl serde::Serialize) -> std::io::Result<Vec<u8>> {
    thread_local! {
        static JSON: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let checked = |json: &[u8]| {
        let max = symcluster_client::result_limits::MAX_RESULT_BYTES;
        if json.len() > max {
            return Err(std::io::Error::other(format!(
                "the result is {} bytes of JSON; the master stores at most {max}",
                json.len()
            )));
        }
        compress(json)
    };
    JSON.with(|cell| {
        let Ok(mut json) = cell.try_borrow_mut() else {
            return checked(&serde_json::to_vec(result)?);
        };
        json.clear();
        let encoded = serde_json::to_writer(&mut *json, result)
            .map_err(std::io::Error::from)
            .and_then(|()| checked(&json));
        // A rare huge result does not keep its buffer for the thread's life.
        if json.capacity() > 4 << 20 {
            *json = Vec::new();
        }
        encoded
    })
}

/// The [`Outcome::Completed`] of a native result: its JSON compressed ([`compress`]), its
/// crash group ([`crate::grouping::native`]), the debug files it lacked and its named call tree
/// ([`crate::grouping::call_tree`]). CPU work only (a worker runs it on the blocking pool).
///
/// Errors when the result cannot be encoded ([`result_zstd`]).
pub fn completed_native(result: &SymbolicationResult) -> std::io::Result<Outcome> {
    Ok(Outcome::Completed {
        result_zstd: result_zstd(result)?,
        group: crate::grouping::native(result),
        missing: missing_modules(&result.modules),
        call_tree: crate::grouping::call_tree(result),
        facets: crate::grouping::facets(&result.facets),
    })
}

async fn run_native(
    native: &api::NativeJob,
    project: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Outcome {
    let modules = match native.modules() {
        api::Modules::Referenced => Modules::Referenced,
        api::Modules::All => Modules::All,
    };
    let bytes = match symcluster_client::report::report_bytes(native) {
        Ok(bytes) => bytes,
        Err(e) => return permanent(e),
    };
    let report = if minidump::is_minidump(&bytes) {
        match walk_minidump(bytes.into_owned(), modules, project, caches, recheck).await {
            Ok(report) => report,
            Err(outcome) => return outcome,
        }
    } else {
        match parse_report_with(&bytes, modules) {
            Ok(report) => report,
            Err(e) => return permanent(e),
        }
    };
    let prefetched = prefetch(&report, project, caches, recheck).await;
    let span = tracing::info_span!("symbolicate");
    let result = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let result = symbolicate_owned(report, &prefetched);
        crate::metrics::step("symbolicate", "native", started.elapsed());
        completed_native(&result)
    })
    .await;
    match result {
        Ok(Ok(completed)) => completed,
        Ok(Err(e)) => permanent(format!("cannot encode the result: {e}")),
        Err(e) => retryable(format!("symbolication task failed: {e}")),
    }
}

/// The SymCache of every image a frame of `report` is in, fetched concurrently (each debug id
/// once, with every address looked up in it: several images may share one).
pub(crate) async fn prefetch(
    report: &symcluster_engine::NativeReport,
    project: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Prefetched {
    let mut lookups: std::collections::BTreeMap<DebugId, Vec<u64>> = Default::default();
    for (i, addresses) in image_lookups(report) {
        if let Some(debug_id) = report.images[i].debug_id {
            lookups.entry(debug_id).or_default().extend(addresses);
        }
    }
    let loads = futures::future::join_all(
        lookups
            .iter()
            .map(|(id, addresses)| caches.symcache(project, *id, recheck, addresses)),
    )
    .await;
    Prefetched(lookups.into_keys().zip(loads).collect())
}

/// Images a minidump's unwind information is fetched for, at most.
const MAX_UNWIND_IMAGES: usize = 64;

/// A minidump's stacks, walked with the unwind information (CFI) of the images they go
/// through: a first walk without CFI (frame pointers, scanning: it finds every image a return
/// address on a stack points into) names them, their debug files' CFI is fetched concurrently
/// (at most [`MAX_UNWIND_IMAGES`]: not the hundreds of system libraries a dump lists), and the
/// dump is walked again with it, both walks on the blocking pool. An image whose debug file is
/// missing, unreadable or could not be fetched is walked without CFI: its frames' SymCache
/// load says why (`missing`: the job runs again when the file arrives). Errors: the dump does
/// not read (for good).
async fn walk_minidump(
    bytes: Vec<u8>,
    modules: Modules,
    project: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Result<symcluster_engine::NativeReport, Outcome> {
    let bytes = Arc::new(bytes);
    let first = stackwalk(bytes.clone(), minidump::UnwindTable::new(), modules).await?;
    let mut debug_ids: Vec<DebugId> = referenced_images(&first)
        .into_iter()
        .filter_map(|i| first.images[i].debug_id)
        .collect();
    debug_ids.sort_unstable();
    debug_ids.dedup();
    debug_ids.truncate(MAX_UNWIND_IMAGES);
    let loads = futures::future::join_all(
        debug_ids
            .iter()
            .map(|id| caches.unwind_info(project, *id, recheck)),
    )
    .await;
    let mut table = minidump::UnwindTable::new();
    for (debug_id, load) in debug_ids.into_iter().zip(loads) {
        match load {
            Ok(Some(info)) => {
                table.insert(debug_id, info);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(%debug_id, error = %e,
                "fetching a debug file for its unwind information failed; walking without"),
        }
    }
    if table.is_empty() {
        return Ok(first);
    }
    stackwalk(bytes, table, modules).await
}

/// [`minidump::stackwalk`] on the blocking pool, timed (`step="stackwalk"`).
async fn stackwalk(
    bytes: Arc<Vec<u8>>,
    table: minidump::UnwindTable,
    modules: Modules,
) -> Result<symcluster_engine::NativeReport, Outcome> {
    let span = tracing::info_span!("stackwalk", cfi = table.len());
    let walked = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let report = minidump::stackwalk(&bytes, &table, modules);
        crate::metrics::step("stackwalk", "native", started.elapsed());
        report
    })
    .await;
    match walked {
        Ok(Ok(report)) => Ok(report),
        Ok(Err(e)) => Err(permanent(e)),
        Err(e) => Err(retryable(format!("stack walk task failed: {e}"))),
    }
}

async fn run_js(js: api::JsJob, project: &str, caches: &Arc<Caches>, recheck: bool) -> Outcome {
    let stack = match parse_stack(&js.stack, 1) {
        Ok(stack) => stack,
        Err(e) => return permanent(e),
    };
    let prefix = Scope::Project(project).prefix(caches.prefix());
    let prefix = prefix.as_str();
    let keys = if js.debug_id.is_empty() {
        layout::sourcemap_keys_by_release(prefix, &js.release, &js.dist, &js.bundle)
    } else {
        layout::sourcemap_keys_by_debug_id(prefix, &js.debug_id)
    };
    // Refused at admission already; a job stored by an older master fails here.
    let (map_key, bundle_key) = match keys {
        Ok(keys) => keys,
        Err(e) => return permanent(e),
    };
    let map = match caches.sourcemap(&map_key, &bundle_key, recheck).await {
        Ok(map) => map,
        Err(e) => return not_loaded(e, "source map", missing::js_job_key(&js)),
    };
    let span = tracing::info_span!("symbolicate");
    let restored = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let result = restore(&stack, &map);
        crate::metrics::step("symbolicate", "js", started.elapsed());
        result_zstd(&result).map(|zstd| (zstd, crate::grouping::js(&result)))
    });
    // A JS job's release and dist are the job's own (they found its source map).
    let facets = symcluster_engine::ReportFacets {
        release: Some(js.release.clone()),
        dist: Some(js.dist.clone()),
        ..Default::default()
    }
    .cleaned();
    completed(restored, crate::grouping::facets(&facets)).await
}

/// How a job ends whose source map or mapping file (`what`) could not be had: failed for now
/// with `missing_key` when it is not there (`no <what> at <key>`; the job is queued again when
/// it is uploaded), for good when it cannot be read, retried when the source could not be
/// asked.
fn not_loaded(e: SourceMapLoadError, what: &str, missing_key: String) -> Outcome {
    match e {
        SourceMapLoadError::NotFound(key) => Outcome::Failed {
            error: format!("no {what} at {key}"),
            retryable: false,
            missing: vec![api::MissingFile {
                key: missing_key,
                image: String::new(),
                arch: String::new(),
            }],
        },
        SourceMapLoadError::Malformed(_) => permanent(e),
        SourceMapLoadError::Fetch(_) => retryable(e),
    }
}

/// The outcome of a blocking task that made a result (zstd JSON) and its crash group.
async fn completed(
    task: tokio::task::JoinHandle<std::io::Result<(Vec<u8>, Option<api::CrashGroupKey>)>>,
    facets: Option<Box<api::ReportFacets>>,
) -> Outcome {
    match task.await {
        Ok(Ok((result_zstd, group))) => Outcome::Completed {
            result_zstd,
            group,
            missing: Vec::new(),
            call_tree: Vec::new(),
            facets,
        },
        Ok(Err(e)) => permanent(format!("cannot encode the result: {e}")),
        Err(e) => retryable(format!("the task failed: {e}")),
    }
}

async fn run_jvm(job: api::JvmJob, project: &str, caches: &Arc<Caches>, recheck: bool) -> Outcome {
    let trace = match jvm::parse_trace(&job.trace) {
        Ok(trace) => trace,
        Err(e) => return permanent(e),
    };
    // Given with the job, else the first the event names (admission checked one is there).
    let named = if job.mapping_id.is_empty() {
        trace.mapping_ids.first().cloned().unwrap_or_default()
    } else {
        job.mapping_id
    };
    let mapping_id = match missing::mapping_id(&named) {
        Ok(id) => id,
        Err(e) => return permanent(e),
    };
    let prefix = Scope::Project(project).prefix(caches.prefix());
    let key = match layout::proguard_key(&prefix, &mapping_id) {
        Ok(key) => key,
        Err(e) => return permanent(e),
    };
    let mapping = match caches.mapping(&key, recheck).await {
        Ok(mapping) => mapping,
        Err(e) => {
            let what = format!("ProGuard mapping file (mapping id {mapping_id})");
            return not_loaded(e, &what, missing::jvm_key(&mapping_id));
        }
    };
    let span = tracing::info_span!("symbolicate");
    let retraced = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let result = jvm::retrace(&trace, &mapping, Some(&mapping_id));
        crate::metrics::step("symbolicate", "jvm", started.elapsed());
        result_zstd(&result).map(|zstd| (zstd, crate::grouping::jvm(&result)))
    });
    completed(retraced, None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_the_master_would_refuse_fails_here() {
        // A trace message of control characters: each becomes `\u0001` in JSON, six bytes.
        let max = symcluster_client::result_limits::MAX_RESULT_BYTES;
        let message = "\u{1}".repeat(max / 6 + 1);
        let e = result_zstd(&message).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("the master stores at most {max}")),
            "{e}"
        );
        let small = result_zstd(&"\u{1}".repeat(10)).unwrap();
        assert_eq!(
            zstd::decode_all(&small[..]).unwrap(),
            b"\"\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\\u0001\""
        );
    }
}

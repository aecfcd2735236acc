//! Running a combined job: a Sentry event whose frames cross JavaScript, Java and native
//! ([`symcluster_engine::combined`]). Every file its layers need is fetched concurrently
//! through the caches (the native images' SymCaches, one source map per bundle, the mapping
//! file); a file that is not there (or is unreadable) leaves its frames as given and is named
//! in the result and in the job's missing files (the job runs again when it arrives). A source
//! map or mapping file whose source cannot be asked fails the attempt (retried); a debug file
//! that cannot be fetched is its module's `fetching_failed` status, as in a native job. An
//! event that does not read fails the job for good (the master reads it at submit already).

use std::collections::HashMap;
use std::sync::Arc;

use symcluster_client::missing;
use symcluster_engine::combined::{self, FileLoad, Layer, LoadStatus, SourceMapRef, Sources};
use symcluster_engine::js::JsSourceMap;
use symcluster_engine::jvm::JvmMapping;
use symcluster_proto::v1 as api;
use symcluster_sources::{Scope, layout};

use crate::caches::{Caches, SourceMapLoadError};
use crate::runner::{Outcome, permanent, retryable};

/// Runs `job` with the files of `project` ([module docs](self)).
pub(crate) async fn run(
    job: api::CombinedJob,
    project: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Outcome {
    let report = match combined::parse_event(&job.event) {
        Ok(report) => report,
        Err(e) => return permanent(e),
    };
    let prefix = Scope::Project(project).prefix(caches.prefix());
    let native = report.native_report();
    let (prefetched, maps, mapping) = futures::join!(
        async {
            match &native {
                Some(native) => {
                    Some(crate::runner::prefetch(native, project, caches, recheck).await)
                }
                None => None,
            }
        },
        sourcemaps(&report, &prefix, caches, recheck),
        mapping(&report, &prefix, caches, recheck),
    );
    let (maps, mapping) = match (maps, mapping) {
        (Ok(maps), Ok(mapping)) => (maps, mapping),
        (Err(e), _) | (_, Err(e)) => return retryable(e),
    };
    let prefetched = prefetched.unwrap_or(crate::runner::Prefetched(HashMap::new()));
    let span = tracing::info_span!("symbolicate");
    let task = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let started = std::time::Instant::now();
        let sources = Sources {
            symcaches: &prefetched,
            sourcemaps: maps
                .iter()
                .map(|(r, load)| (r.clone(), borrowed(load, |m| &**m)))
                .collect(),
            mapping: mapping
                .as_ref()
                .map(|load| borrowed(load, |(m, id)| (&**m, id.as_str()))),
        };
        let result = combined::restore(&report, &sources);
        crate::metrics::step("symbolicate", "combined", started.elapsed());
        let mut missing = crate::runner::missing_modules(&result.modules);
        missing.extend(
            result
                .sourcemaps
                .iter()
                .chain(&result.mapping)
                .filter(|f| f.status == LoadStatus::Missing)
                .map(|f| api::MissingFile {
                    key: f.key.clone(),
                    image: String::new(),
                    arch: String::new(),
                }),
        );
        crate::runner::result_zstd(&result).map(|result_zstd| Outcome::Completed {
            result_zstd,
            group: crate::grouping::combined(&result),
            missing,
            call_tree: Vec::new(),
            facets: crate::grouping::facets(&result.facets),
        })
    });
    match task.await {
        Ok(Ok(completed)) => completed,
        Ok(Err(e)) => permanent(format!("cannot encode the result: {e}")),
        Err(e) => retryable(format!("the task failed: {e}")),
    }
}

/// A load whose file is borrowed from one the caches hold.
fn borrowed<'a, T, U>(load: &'a FileLoad<T>, f: impl FnOnce(&'a T) -> U) -> FileLoad<U> {
    FileLoad {
        key: load.key.clone(),
        file: load.file.as_ref().map(f).map_err(Clone::clone),
    }
}

/// How a cache's answer reads as a [`FileLoad`]; `Err` when the source could not be asked
/// (the attempt is retried).
fn loaded<T>(key: String, answer: Result<T, SourceMapLoadError>) -> Result<FileLoad<T>, String> {
    let file = match answer {
        Ok(file) => Ok(file),
        Err(SourceMapLoadError::NotFound(at)) => Err((
            LoadStatus::Missing,
            format!("not uploaded (looked for {at})"),
        )),
        Err(e @ SourceMapLoadError::Malformed(_)) => Err((LoadStatus::Malformed, e.to_string())),
        Err(e @ SourceMapLoadError::Fetch(_)) => return Err(e.to_string()),
    };
    Ok(FileLoad { key, file })
}

/// The source map of every bundle the JavaScript frames are in, fetched concurrently.
async fn sourcemaps(
    report: &combined::CombinedReport,
    prefix: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Result<HashMap<SourceMapRef, FileLoad<Arc<JsSourceMap>>>, String> {
    let refs = report.sourcemaps();
    let loads = futures::future::join_all(refs.iter().map(|r| async {
        let debug_id = r.debug_id.as_deref().unwrap_or("");
        let key = missing::js_key(debug_id, &report.release, &report.dist, &r.bundle);
        let keys = match &r.debug_id {
            Some(id) => layout::sourcemap_keys_by_debug_id(prefix, id),
            None if report.release.is_empty() => {
                return Ok(FileLoad {
                    key,
                    file: Err((
                        LoadStatus::Malformed,
                        "the event names no release (and no sourcemap debug image) to find the source map by"
                            .into(),
                    )),
                });
            }
            None => layout::sourcemap_keys_by_release(prefix, &report.release, &report.dist, &r.bundle),
        };
        match keys {
            Ok((map_key, bundle_key)) => {
                loaded(key, caches.sourcemap(&map_key, &bundle_key, recheck).await)
            }
            Err(e) => Ok(FileLoad {
                key,
                file: Err((LoadStatus::Malformed, e.to_string())),
            }),
        }
    }))
    .await;
    refs.into_iter()
        .zip(loads)
        .map(|(r, load)| load.map(|load| (r, load)))
        .collect()
}

/// The mapping file of the Java frames: the event's first `proguard` image's; `None` when no
/// frame is Java or the event names none (its frames are then `missing_mapping`).
async fn mapping(
    report: &combined::CombinedReport,
    prefix: &str,
    caches: &Arc<Caches>,
    recheck: bool,
) -> Result<Option<FileLoad<(Arc<JvmMapping>, String)>>, String> {
    if !report.has(Layer::Jvm) {
        return Ok(None);
    }
    let Some(named) = report.mapping_ids.first() else {
        return Ok(None);
    };
    let id = match missing::mapping_id(named) {
        Ok(id) => id,
        Err(e) => {
            return Ok(Some(FileLoad {
                key: missing::jvm_key(named),
                file: Err((LoadStatus::Malformed, e)),
            }));
        }
    };
    let key = missing::jvm_key(&id);
    let object = match layout::proguard_key(prefix, &id) {
        Ok(object) => object,
        Err(e) => {
            return Ok(Some(FileLoad {
                key,
                file: Err((LoadStatus::Malformed, e.to_string())),
            }));
        }
    };
    let answer = caches.mapping(&object, recheck).await.map(|m| (m, id));
    loaded(key, answer).map(Some)
}

//! Workers share the SymCaches they derive through the bucket: a new worker downloads the
//! small SymCache another worker put beside the debug file instead of the debug file, and
//! converts nothing; a shared SymCache that does not parse is ignored, converted again and
//! replaced.

use std::time::{Duration, Instant};

use symcluster_engine::symcache::{CONVERSION_REVISION, SYMCACHE_VERSION, SymCacheFile};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, WorkerOptions};
use symcluster_sources::Source;
use symcluster_sources::layout::{self, DebugId, Scope};

use crate::support::{crashprobe_job, http_get, metric_value, one_crashprobe_job};

/// The shared SymCache key of debug id `id` (uploaded to the `default` project).
async fn shared_key(bucket: &Source, id: &str) -> String {
    let debug_id: DebugId = id.parse().unwrap();
    let original = layout::debug_file_key(&Scope::Project("default").prefix(""), &debug_id);
    let version = bucket.version(&original).await.unwrap().expect("uploaded");
    let format = format!("{SYMCACHE_VERSION}.{CONVERSION_REVISION}");
    layout::symcache_key(&original, &format, &version)
}

/// Waits until a valid SymCache for `id` is at its shared key (the upload runs after the job).
async fn wait_shared(bucket: &Source, id: &str) {
    let key = shared_key(bucket, id).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(bytes) = bucket.fetch(&key).await.unwrap()
            && let Ok(symcache) = SymCacheFile::parse(symbolic_common::ByteView::from_vec(bytes))
            && symcache.get().debug_id() == id.parse::<DebugId>().unwrap()
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no valid shared SymCache at {key}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_worker_downloads_the_symcaches_another_converted() {
    let mut cluster = Cluster::start(0, MasterOptions::default()).await;
    cluster.add_worker_with(WorkerOptions::default()).await;
    let found = one_crashprobe_job(&cluster, "first").await;
    let bucket = cluster.garage.bucket().await;
    for id in &found {
        wait_shared(&bucket, id).await;
    }
    let first = http_get(&cluster.worker_metrics[0], "/metrics").await;
    let converts = |exposition: &str| {
        metric_value(
            exposition,
            "symcluster_worker_step_seconds",
            &[("step", "convert"), ("kind", "native")],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(converts(&first), found.len() as f64);
    let shared_hits = |exposition: &str| {
        metric_value(
            exposition,
            "symcluster_worker_cache_lookups_total",
            &[("layer", "shared"), ("result", "hit")],
        )
    };

    // A second worker, with an empty cache, alone in the cluster: it downloads every SymCache.
    cluster.stop_worker(0, Duration::from_secs(10)).await;
    cluster.add_worker_with(WorkerOptions::default()).await;
    assert_eq!(crashprobe_job(&cluster, "second").await, found);
    let second = http_get(&cluster.worker_metrics[1], "/metrics").await;
    assert_eq!(converts(&second), 0.0, "{second}");
    assert_eq!(shared_hits(&second), Some(found.len() as f64), "{second}");

    // A shared SymCache that is not one: the third worker converts that debug file again, gives
    // the same answer, and puts a valid SymCache back.
    let broken: &String = found.iter().next().unwrap();
    bucket
        .put(
            &shared_key(&bucket, broken).await,
            b"not a symcache".to_vec(),
        )
        .await
        .unwrap();
    cluster.stop_worker(1, Duration::from_secs(10)).await;
    cluster.add_worker_with(WorkerOptions::default()).await;
    assert_eq!(crashprobe_job(&cluster, "third").await, found);
    // The job was answered from a partial SymCache; the conversion ends after it, then the
    // SymCache is shared again.
    wait_shared(&bucket, broken).await;
    let third = http_get(&cluster.worker_metrics[2], "/metrics").await;
    assert_eq!(converts(&third), 1.0, "{third}");
    assert_eq!(
        shared_hits(&third),
        Some(found.len() as f64 - 1.0),
        "{third}"
    );
}

//! The leader's periodic look in the bucket for files that finished jobs lack: a debug file or
//! source map uploaded by another tool than `symctl upload` (which announces its uploads with
//! `Ingest/FilesUploaded`) is found here, and the jobs that lacked it run again.
//!
//! Every `--missing-check-interval` the leader takes the missing files of the index (most
//! affected jobs first, at most [`MAX_KEYS_PER_ROUND`]) and asks the bucket whether each is
//! there now (`HEAD` through `symcluster-sources`): a native debug file in its project's prefix
//! or the shared one, a source map in its project's prefix. An answer other than "there" or
//! "not there" (a dead S3) is logged and the file is asked again next round.

use std::sync::Arc;
use std::time::Duration;

use symcluster_sources::{Scope, Source, layout};

use crate::scheduler::Scheduler;

/// Files asked about per round (most affected jobs first).
pub const MAX_KEYS_PER_ROUND: usize = 1_000;

/// The object keys under which a missing file (`MissingFile.key`) of `project` would be found
/// in the bucket (`base`: `--s3-prefix`), in lookup order; empty for a key that names no file.
/// `proguard:<mapping id>` names a mapping file in the project's prefix; JS keys
/// `release:<release>/<dist>/<bundle>` are read back with
/// [`symcluster_proto::missing::split_release_key`].
pub fn object_keys(base: &str, project: &str, key: &str) -> Vec<String> {
    if let Some(id) = key.strip_prefix("proguard:") {
        let prefix = Scope::Project(project).prefix(base);
        return layout::proguard_key(&prefix, id).into_iter().collect();
    }
    if let Some(id) = key.strip_prefix("debug-id:") {
        let prefix = Scope::Project(project).prefix(base);
        return layout::sourcemap_keys_by_debug_id(&prefix, id)
            .map(|(map, _)| map)
            .into_iter()
            .collect();
    }
    if key.starts_with("release:") {
        let Some((release, dist, bundle)) = symcluster_proto::missing::split_release_key(key)
        else {
            return Vec::new();
        };
        let prefix = Scope::Project(project).prefix(base);
        return layout::sourcemap_keys_by_release(&prefix, &release, &dist, &bundle)
            .map(|(map, _)| map)
            .into_iter()
            .collect();
    }
    let Ok(debug_id) = key.parse::<symbolic_common::DebugId>() else {
        return Vec::new();
    };
    layout::native_scopes(project)
        .iter()
        .map(|scope| layout::debug_file_key(&scope.prefix(base), &debug_id))
        .collect()
}

/// Runs the check every `interval` while this master leads, until the process ends.
pub async fn run(scheduler: Arc<Scheduler>, source: Source, base: String, interval: Duration) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if !scheduler.raft().is_leader() {
            continue;
        }
        let missing = match scheduler
            .index()
            .missing_files(MAX_KEYS_PER_ROUND, |_| true)
        {
            Ok(missing) => missing,
            Err(error) => {
                tracing::warn!(%error, "missing-file check: index unreadable");
                continue;
            }
        };
        for entry in missing {
            let mut there = false;
            for object in object_keys(&base, &entry.project, &entry.key) {
                match source.exists(&object).await {
                    Ok(true) => {
                        there = true;
                        break;
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, "missing-file check: the bucket did not answer");
                        break;
                    }
                }
            }
            if !there {
                continue;
            }
            match scheduler
                .files_uploaded(Some(&entry.project), std::slice::from_ref(&entry.key))
                .await
            {
                Ok(requeued) => {
                    crate::metrics::JOBS_RESYMBOLICATED.inc_by(requeued);
                    tracing::info!(
                        project = entry.project,
                        file = entry.key,
                        requeued,
                        "a missing file is in the bucket now: jobs queued again"
                    );
                }
                Err(error) => tracing::warn!(%error, "missing-file check: cannot queue jobs"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_keys_map_to_the_bucket_layout() {
        assert_eq!(
            object_keys("", "demo", "4c4c443b-5555-3144-a126-3cc30cf88fdb"),
            vec![
                "projects/demo/4c/4c443b55553144a1263cc30cf88fdb/debuginfo".to_owned(),
                "shared/4c/4c443b55553144a1263cc30cf88fdb/debuginfo".to_owned()
            ]
        );
        assert_eq!(
            object_keys("s/", "demo", "release:app@1.0%2Fbeta//index.android.bundle"),
            vec!["s/projects/demo/js/release/app@1.0%2Fbeta/_/index.android.bundle.map".to_owned()]
        );
        assert_eq!(
            object_keys("", "demo", "proguard:3828bd45-950f-5e77-9737-b6b3a1d80299"),
            vec!["projects/demo/38/28bd45950f5e779737b6b3a1d80299/proguard".to_owned()]
        );
        assert_eq!(
            object_keys("", "demo", "debug-id:0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D"),
            vec![
                "projects/demo/js/debug-id/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d/sourcemap"
                    .to_owned()
            ]
        );
        // A key recorded by an older master that names no object in the project: none.
        assert!(object_keys("", "demo", "debug-id:../../b/x").is_empty());
        assert!(object_keys("", "demo", "not a key").is_empty());
    }
}

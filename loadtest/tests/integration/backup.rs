//! Backups and restores with real processes: `symctl admin backup` from a group under load,
//! `symcluster-master --restore` seeding a new group from the file.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN, bin, free_port};

use crate::replication::admin;

/// A backup taken from three masters while they take submits holds the index as it was at
/// the backup's applied index: a new master restored from it answers the digest the backup
/// reported (every table, byte for byte), holds its jobs, and takes new submits. A master
/// that already holds an index refuses `--restore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_load_restores_to_the_index_it_copied() {
    let cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    // Unreadable reports are stored failed at once: one log entry each, no worker needed.
    let stop = Arc::new(AtomicBool::new(false));
    let submitted = Arc::new(AtomicUsize::new(0));
    let client = cluster.client().await;
    let mut tasks = Vec::new();
    for task in 0..4 {
        let (client, stop, submitted) = (client.clone(), stop.clone(), submitted.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = client;
            for i in (task..).step_by(4) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let response = client
                    .submit_native(&format!("bad-{i}"), b"not a crash report".to_vec())
                    .await
                    .map_err(|e| format!("submit bad-{i}: {e}"))?;
                assert!(response.created);
                submitted.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), String>(())
        }));
    }
    while submitted.load(Ordering::Relaxed) < 500 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let file = cluster.dir.path().join("index.backup");
    let out = tokio::task::block_in_place(|| {
        cluster.symctl(&["admin", "backup", &file.display().to_string()])
    });
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The load goes on after the backup.
    let at_backup = submitted.load(Ordering::Relaxed);
    while submitted.load(Ordering::Relaxed) < at_backup + 200 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        if let Err(e) = task.await.unwrap() {
            panic!("{e}\n{}", cluster.master_logs());
        }
    }
    let total = submitted.load(Ordering::Relaxed) as u64;
    // "<file>: N bytes, J jobs, applied index A (term T), index digest HEX"
    let tokens: Vec<&str> = printed
        .split_whitespace()
        .map(|t| t.trim_matches([',', '(', ')']))
        .collect();
    let after = |word: &str, skip: usize| -> &str {
        let at = tokens
            .iter()
            .position(|t| *t == word)
            .unwrap_or_else(|| panic!("no {word:?} in {printed:?}"));
        tokens[at + skip]
    };
    let jobs: u64 = tokens[tokens.iter().position(|t| *t == "jobs").unwrap() - 1]
        .parse()
        .unwrap();
    let applied: u64 = after("applied", 2).parse().unwrap();
    let digest = after("digest", 1).to_owned();
    println!("{printed}(of {total} jobs submitted in all)");
    assert!(jobs >= 500 && jobs < total, "{jobs} jobs of {total}");
    assert_eq!(digest.len(), 64, "{printed}");

    // A new group of one, seeded from the file.
    let mut restored = Cluster::start(
        0,
        MasterOptions {
            masters: 1,
            args: vec!["--restore".into(), file.display().to_string()],
            ..MasterOptions::default()
        },
    )
    .await;
    let answer = index_digest(&restored.masters[0].endpoint()).await;
    let hex = hex::encode(&answer.sha256);
    assert_eq!((hex.as_str(), answer.jobs), (digest.as_str(), jobs));
    assert!(answer.applied_index >= applied);
    // It takes submits.
    let mut client = restored.client().await;
    assert!(
        client
            .submit_native("after-restore", b"not a crash report".to_vec())
            .await
            .unwrap()
            .created
    );
    assert_eq!(restored.status().await.jobs_failed, jobs + 1);

    // A master that holds an index refuses to be restored over.
    restored.kill_master(1);
    let out = std::process::Command::new(bin("symcluster-master"))
        .arg("--data-dir")
        .arg(restored.master_data_dir(1))
        .arg("--restore")
        .arg(&file)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--token", TOKEN])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--restore seeds a new master") && stderr.contains("already holds"),
        "{stderr}"
    );

    a_group_of_three_is_restored_only_from_one_backup(&file, &digest, jobs).await;

    // A master restored beside a group that was not restored from this backup (the one it was
    // taken from) is refused before it writes anything.
    let restore = vec!["--restore".to_owned(), file.display().to_string()];
    let mut cluster = cluster;
    let beside = cluster.new_master_with(&restore);
    let status = cluster
        .wait_master_exit(beside, Duration::from_secs(20))
        .await;
    let log = std::fs::read_to_string(cluster.master_log_path(beside)).unwrap_or_default();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}\n{log}");
    assert!(
        log.contains("holds a group that was not restored from it"),
        "{log}"
    );
    assert!(!cluster.master_data_dir(beside).join("master.redb").exists());
    cluster.forget_master(beside);
}

/// Restoring one master of three and starting the other two empty used to let those two elect
/// each other and overwrite the backup's jobs: they are refused, naming the backup, and
/// restored from the same file they form the group with it, each holding the backup's index.
async fn a_group_of_three_is_restored_only_from_one_backup(file: &Path, digest: &str, jobs: u64) {
    let sha256 = hex::encode(Sha256::digest(std::fs::read(file).unwrap()));
    let restore = vec!["--restore".to_owned(), file.display().to_string()];
    let mut group = Cluster::prepare(MasterOptions {
        masters: 3,
        ..MasterOptions::default()
    });
    group.start_master_with(1, &restore);
    // Alone it has no quorum; it answers ListMembers once its index is seeded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let restored_from = loop {
        if let Some(mut admin) = admin(&group.member_address(1)).await
            && let Ok(answer) = admin
                .list_members(symcluster_client::api::ListMembersRequest {})
                .await
        {
            break answer.into_inner().restored_from;
        }
        assert!(
            Instant::now() < deadline,
            "restored master 1 does not answer\n{}",
            group.master_logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        restored_from.map(|r| hex::encode(r.sha256)),
        Some(sha256.clone())
    );
    for id in [2, 3] {
        group.start_master(id);
    }
    for id in [2, 3] {
        let status = group.wait_master_exit(id, Duration::from_secs(20)).await;
        let log = std::fs::read_to_string(group.master_log_path(id)).unwrap_or_default();
        assert!(
            status.is_some_and(|s| !s.success()),
            "master {id} started empty beside a restored one: {status:?}\n{log}"
        );
        assert!(
            log.contains("master 1 at ")
                && log.contains(&format!("was restored from a backup (SHA-256 {sha256}"))
                && log.contains("--restore of the same backup"),
            "{log}"
        );
        assert!(!group.master_data_dir(id).join("master.redb").exists());
    }
    for id in [2, 3] {
        group.start_master_with(id, &restore);
    }
    group.wait_for_leader().await;
    for id in 1..=3 {
        let answer = index_digest(&group.member_address(id)).await;
        let hex = hex::encode(&answer.sha256);
        assert_eq!((id, hex.as_str(), answer.jobs), (id, digest, jobs));
    }
}

/// `Admin/IndexDigest` of the master at `endpoint`.
async fn index_digest(endpoint: &str) -> symcluster_client::api::IndexDigestResponse {
    admin(endpoint)
        .await
        .unwrap()
        .index_digest(symcluster_client::api::IndexDigestRequest {})
        .await
        .unwrap()
        .into_inner()
}

//! Minidump jobs end to end, against a real master, worker and Garage: the Linux demo crashed
//! for real and dumped by minidump-writer (`examples/linux-demo/demo-app.dmp`) arrives before
//! its debug file (walked without CFI, the app `missing`), and is walked again with the CFI of
//! `demo-app.debug` and symbolicated when `symctl upload` brings it; the same crash as an Android
//! tombstone whose library is loaded from the APK is matched to that file by build id.

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::support::{groups, result, succeeded, wait};

const APP: &str = "e03566f6-988e-a224-5037-26179d47ad6c";

/// The crashed thread's frames: `(function, filename, lineno, trust)`.
fn crashed(result: &serde_json::Value) -> Vec<(String, String, u64, String)> {
    crate::support::crashed_thread_frames(result)
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["filename"].as_str().unwrap_or("").to_owned(),
                f["lineno"].as_u64().unwrap_or(0),
                f["trust"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minidumps_are_walked_with_cfi_once_their_debug_file_arrives() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let mut client = cluster.client().await;
    let dump = std::fs::read(repo().join("examples/linux-demo/demo-app.dmp")).unwrap();

    // A damaged dump fails for good, with the reader's reason.
    let mut damaged = b"MDMP".to_vec();
    damaged.extend_from_slice(&[0xff; 60]);
    client.submit_native("damaged", damaged).await.unwrap();
    let job = wait(&mut client, "damaged").await;
    assert_eq!(job.state, api::JobState::Failed as i32, "{job:?}");
    assert!(
        job.error.starts_with("malformed minidump report: "),
        "{}",
        job.error
    );

    // Before the debug file: completed, frame 0 in the app unsymbolicated, the app missing.
    client.submit_native("dump", dump).await.unwrap();
    let job = wait(&mut client, "dump").await;
    let before = result(&job);
    assert_eq!(before["crash_reason"], "SIGSEGV / SEGV_MAPERR at 0x0");
    let frame0 = &before["threads"][0]["frames"][0];
    assert_eq!(
        (&frame0["image"], &frame0["status"], &frame0["trust"]),
        (&"demo-app".into(), &"missing".into(), &"context".into())
    );
    assert!(
        job.missing
            .iter()
            .any(|m| m.key == APP && m.image == "demo-app"),
        "{:?}",
        job.missing
    );

    // The debug file arrives: the dump is walked again with its CFI and symbolicated.
    let debug_file = repo().join("examples/linux-demo/demo-app.debug");
    let out = succeeded(&cluster.symctl(&["upload", "dsym", debug_file.to_str().unwrap()]));
    assert!(
        out.contains("1 job that lacked these files is being symbolicated again"),
        "{out}"
    );
    let job = wait(&mut client, "dump").await;
    assert_eq!(job.revision, 2, "{job:?}");
    let after = result(&job);
    let frames = crashed(&after);
    let expected = [
        ("crash_write_null", "crash.c", 23, "context"),
        ("validate_total", "crash.c", 33, "cfi"),
        ("process_order", "crash.c", 41, "cfi"),
        ("demo::Checkout::run(int)", "checkout.cpp", 23, "cfi"),
        ("main", "checkout.cpp", 35, "cfi"),
    ];
    let got: Vec<_> = frames[..5]
        .iter()
        .map(|(f, file, line, trust)| (f.as_str(), file.as_str(), *line, trust.as_str()))
        .collect();
    assert_eq!(got, expected);
    assert!(
        job.missing.iter().all(|m| m.key != APP),
        "{:?}",
        job.missing
    );

    // The same crash as an Android tombstone, its library loaded from the APK
    // (base.apk!libdemo.so): matched to the same debug file by build id.
    let tombstone =
        std::fs::read(repo().join("examples/linux-demo/demo-app-tombstone.pb")).unwrap();
    client.submit_native("tombstone", tombstone).await.unwrap();
    let job = wait(&mut client, "tombstone").await;
    let from_apk = result(&job);
    // (function, file, line) of the crashed thread's frames.
    let chain = |result: &serde_json::Value| -> Vec<(String, String, u64)> {
        crashed(result)
            .into_iter()
            .map(|(f, file, line, _)| (f, file, line))
            .collect()
    };
    let expected: Vec<_> = expected
        .iter()
        .map(|(f, file, line, _)| (f.to_string(), file.to_string(), *line))
        .collect();
    assert_eq!(chain(&from_apk), expected);
    assert_eq!(
        from_apk["threads"][0]["frames"][0]["image"],
        "base.apk!libdemo.so"
    );
    // And as debuggerd prints it (text, addresses relative to the library): the same frames.
    let text = std::fs::read(repo().join("examples/linux-demo/demo-app-tombstone.txt")).unwrap();
    client.submit_native("tombstone-text", text).await.unwrap();
    let job = wait(&mut client, "tombstone-text").await;
    assert_eq!(chain(&result(&job)), expected);

    // Two crash groups (a group is the functions and the image they are in: `demo-app` and
    // `base.apk!libdemo.so`, both tombstones), both named by the crashing function.
    let grouped = groups(&client, 10).await;
    assert_eq!(grouped.len(), 2, "{grouped:?}");
    let mut counts: Vec<u64> = grouped.iter().map(|g| g.count).collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 2]);
    for group in &grouped {
        assert_eq!(
            group.title,
            "SIGSEGV / SEGV_MAPERR at 0x0 in crash_write_null"
        );
    }
}

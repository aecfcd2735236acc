//! Pending reports go to a real local cluster (Garage, master, worker) and come back symbolicated.

use std::os::unix::process::ExitStatusExt;

use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN};

use crate::support::{cluster_with_crasher, crasher, marker_line, result_of, run, send};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_report_is_sent_on_next_launch_and_symbolicated() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), "null");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));

    let cluster = cluster_with_crasher().await;
    let report_name = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("crash-") && n.ends_with(".json"))
        .expect("a crash report");

    // The next launch sends it (the C API, as an app would call it).
    assert_eq!(send(dir.path(), &cluster.endpoint), "1");
    assert!(
        !dir.path().join(&report_name).exists(),
        "the report is deleted once acknowledged"
    );

    let result = result_of(&cluster, &format!("crasher-{report_name}")).await;
    let frame = &result["threads"][0]["frames"][0];
    assert_eq!(frame["function"], "crash_null_deref");
    assert_eq!(frame["filename"], "crasher.c");
    assert_eq!(frame["lineno"], marker_line("null"));
}

#[test]
fn unsent_reports_stay_when_the_master_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), "null");
    let port = symcluster_loadtest::cluster::free_port();
    let sent = std::process::Command::new(crasher())
        .arg(dir.path())
        .args(["send", &format!("http://127.0.0.1:{port}"), TOKEN])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sent.stdout).trim(), "0");
    assert_eq!(
        symcluster_sdk::send::pending(dir.path()).len(),
        1,
        "nothing is lost offline"
    );
}

/// `report` with a `padding` string field of `bytes` pseudo-random hex digits in front (the
/// readers skip it; zstd gets it only to about half, so a 10 MiB report stays over 4 MiB on the
/// wire).
fn padded(report: &[u8], bytes: usize) -> Vec<u8> {
    let mut out = b"{\"padding\":\"".to_vec();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    out.extend((0..bytes).map(|_| {
        // xorshift64: cheap, and no compressor finds a pattern in it.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        b"0123456789abcdef"[(state & 15) as usize]
    }));
    out.extend_from_slice(b"\",");
    out.extend_from_slice(&report[1..]);
    out
}

/// A 10 MiB report is accepted (over tonic's 4 MiB default message size even compressed: the
/// master raises it); a report the SDK or the master refuses for good is deleted and listed with
/// the reason, not kept and resent on every launch; a report merely unsent stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_reports_are_sent_and_refused_ones_are_not_kept_forever() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), "null");
    let real = crate::support::report(dir.path(), "crash");
    let event = std::fs::read(&real).unwrap();
    std::fs::remove_file(&real).unwrap();
    assert_eq!(event[0], b'{');
    // Returns the size sent: the report cut to the images its frames are in.
    let write = |name: &str, bytes: usize| {
        let report = padded(&event, bytes);
        std::fs::write(dir.path().join(name), &report).unwrap();
        symcluster_sdk::used_images::referenced_only(&report)
            .expect("the crasher lists images no frame is in")
            .len()
    };
    write("crash-1-big.json", 10 << 20);
    // Over the API's 16 MiB: the client library refuses them before sending (the master's own
    // check of a compressed report's size is tested in the load test crate's integration tests).
    let over = [
        write("crash-2-over.json", (16 << 20) + (256 << 10)),
        write("crash-3-huge.json", 20 << 20),
    ];

    let cluster = Cluster::start(0, MasterOptions::default()).await;
    let summary =
        symcluster_sdk::send::send_pending(dir.path(), &cluster.endpoint, TOKEN, "app", 1).await;
    assert_eq!(summary.sent, vec!["app-crash-1-big.json".to_owned()]);
    assert!(summary.kept.is_empty(), "{:?}", summary.kept);
    let refused: Vec<&str> = summary.refused.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(refused, ["app-crash-2-over.json", "app-crash-3-huge.json"]);
    for ((_, error), bytes) in summary.refused.iter().zip(over) {
        assert!(
            error.contains(&format!(
                "the report is {bytes} bytes; at most 16777216 are accepted"
            )),
            "{error}"
        );
    }
    assert!(symcluster_sdk::send::pending(dir.path()).is_empty());

    // The 10 MiB report is stored as a runnable native job (no worker here: queued).
    let mut client = cluster.client().await;
    let job = client.job("app-crash-1-big.json").await.unwrap();
    assert_eq!(job.state, symcluster_client::api::JobState::Queued as i32);
    assert_eq!(job.kind, symcluster_client::api::JobKind::Native as i32);
}

/// A token the master does not take is not a reason to delete reports, nor to retry them in
/// this pass: they stay on disk, with the master's reason, for a later launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_refused_for_the_token_stay_for_a_later_launch() {
    let dir = tempfile::tempdir().unwrap();
    run(dir.path(), "null");
    let cluster = Cluster::start(0, MasterOptions::default()).await;
    let summary = symcluster_sdk::send::send_pending(
        dir.path(),
        &cluster.endpoint,
        "not-the-token",
        "app",
        5,
    )
    .await;
    assert!(
        summary.sent.is_empty() && summary.refused.is_empty(),
        "{summary:?}"
    );
    assert_eq!(summary.kept.len(), 1, "{summary:?}");
    assert!(
        summary.kept[0].1.contains("invalid bearer token"),
        "{:?}",
        summary.kept
    );
    assert_eq!(symcluster_sdk::send::pending(dir.path()).len(), 1);
    // The right token later sends it.
    let summary =
        symcluster_sdk::send::send_pending(dir.path(), &cluster.endpoint, TOKEN, "app", 1).await;
    assert_eq!(summary.sent.len(), 1, "{summary:?}");
    assert!(symcluster_sdk::send::pending(dir.path()).is_empty());
}

/// The `modules` of a report's JSON, as values.
fn modules_of(report: &[u8]) -> Vec<serde_json::Value> {
    let report: serde_json::Value = serde_json::from_slice(report).unwrap();
    report["modules"].as_array().unwrap().clone()
}

/// The report a job was submitted with, as the master stores it.
async fn stored_report(cluster: &Cluster, job_id: &str) -> Vec<u8> {
    let job = cluster.client().await.job_with_spec(job_id).await.unwrap();
    let Some(symcluster_client::api::job_spec::Payload::Native(native)) =
        job.spec.and_then(|s| s.payload)
    else {
        panic!("{job_id}: no native report stored")
    };
    symcluster_client::report::report_bytes(&native)
        .unwrap()
        .into_owned()
}

/// A real crash report is sent with the images its frames are in, as the engine finds them in
/// the report on disk (and no others); `symcluster_sdk_set_send_all_images(true)` sends the
/// report's every image. Both give the same symbolicated frames and modules. Prints the sizes
/// of the report sent either way, plain and compressed as the client library sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_reports_are_sent_with_the_images_their_frames_are_in() {
    let referenced_dir = tempfile::tempdir().unwrap();
    let all_dir = tempfile::tempdir().unwrap();
    let out = run(referenced_dir.path(), "null");
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV));
    let on_disk_path = crate::support::report(referenced_dir.path(), "crash");
    let on_disk = std::fs::read(&on_disk_path).unwrap();
    // The same report under another name (so another job id), sent with every image.
    std::fs::write(all_dir.path().join("crash-1-all.json"), &on_disk).unwrap();

    // Which images the engine finds frames in, read from the report on disk.
    let parsed = symcluster_engine::parse_report(&on_disk).unwrap();
    let every_image = modules_of(&on_disk);
    assert_eq!(every_image.len(), parsed.images.len());
    let expected: Vec<serde_json::Value> = symcluster_engine::referenced_images(&parsed)
        .into_iter()
        .map(|i| every_image[i].clone())
        .collect();
    assert!(
        !expected.is_empty() && expected.len() < every_image.len(),
        "the crasher's frames are in {} of its {} images: nothing to show",
        expected.len(),
        every_image.len()
    );

    let cluster = cluster_with_crasher().await;
    assert_eq!(send(referenced_dir.path(), &cluster.endpoint), "1");
    let sent_all = std::process::Command::new(crate::support::crasher())
        .arg(all_dir.path())
        .args(["send-all-images", &cluster.endpoint, TOKEN])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&sent_all.stdout).trim(), "1");

    let name = on_disk_path.file_name().unwrap().to_str().unwrap();
    let referenced_id = format!("crasher-{name}");
    let all_id = "crasher-crash-1-all.json";
    let sent_referenced = stored_report(&cluster, &referenced_id).await;
    let sent_every = stored_report(&cluster, all_id).await;
    assert_eq!(modules_of(&sent_referenced), expected);
    assert_eq!(sent_every, on_disk, "sent as written");

    // Everything but the image list is what was written.
    let mut cut: serde_json::Value = serde_json::from_slice(&sent_referenced).unwrap();
    let mut whole: serde_json::Value = serde_json::from_slice(&on_disk).unwrap();
    cut["modules"] = serde_json::Value::Null;
    whole["modules"] = serde_json::Value::Null;
    assert_eq!(cut, whole);

    // The cluster gives both the same frames and modules; only the count left out differs.
    let with_referenced = result_of(&cluster, &referenced_id).await;
    let with_all = result_of(&cluster, all_id).await;
    assert_eq!(with_referenced["threads"], with_all["threads"]);
    assert_eq!(with_referenced["modules"], with_all["modules"]);
    assert_eq!(with_referenced["unreferenced_modules"], 0);
    assert_eq!(
        with_all["unreferenced_modules"],
        every_image.len() - expected.len()
    );
    assert_eq!(
        with_referenced["threads"][0]["frames"][0]["function"],
        "crash_null_deref"
    );

    let zstd = |bytes: &[u8]| symcluster_client::report::compress(bytes).len();
    println!(
        "SDK crash report ({} of {} images): every image {} bytes ({} zstd), referenced images {} bytes ({} zstd)",
        expected.len(),
        every_image.len(),
        on_disk.len(),
        zstd(&on_disk),
        sent_referenced.len(),
        zstd(&sent_referenced),
    );
}

//! Pending reports go to a real local cluster (Garage, master, worker) and come back symbolicated.

use std::os::unix::process::ExitStatusExt;

use symcluster_loadtest::cluster::{Cluster, MasterOptions, TOKEN};

use crate::support::{
    cluster_with_crasher, crasher, job_id_in, job_of, marker_line, result_of, run, send,
};

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

    let result = result_of(&cluster, &job_of(dir.path(), &report_name)).await;
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
    let sent =
        crate::support::output(std::process::Command::new(crasher()).arg(dir.path()).args([
            "send",
            &format!("http://127.0.0.1:{port}"),
            TOKEN,
        ]));
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
    let id = |name: &str| job_id_in(dir.path(), "app", name);
    assert_eq!(summary.sent, vec![id("crash-1-big.json")]);
    assert!(summary.kept.is_empty(), "{:?}", summary.kept);
    let refused: Vec<&str> = summary.refused.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(refused, [id("crash-2-over.json"), id("crash-3-huge.json")]);
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
    let job = client.job(&id("crash-1-big.json")).await.unwrap();
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
    let sent_all = crate::support::output(
        std::process::Command::new(crate::support::crasher())
            .arg(all_dir.path())
            .args(["send-all-images", &cluster.endpoint, TOKEN]),
    );
    assert_eq!(String::from_utf8_lossy(&sent_all.stdout).trim(), "1");

    let name = on_disk_path.file_name().unwrap().to_str().unwrap();
    let referenced_id = job_of(referenced_dir.path(), name);
    let all_id = &job_of(all_dir.path(), "crash-1-all.json");
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

/// Two devices whose reports have the same file name (the same launch time and pid) both get
/// their reports in, under their install ids; a report sent again after its acknowledgement
/// was lost is not stored twice; and a device whose install id came from another (a restored
/// backup) still gets its report in, under the report's content id, leaving the other's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_devices_whose_report_names_collide_both_get_their_reports_in() {
    let crashed = tempfile::tempdir().unwrap();
    run(crashed.path(), "null");
    let event = std::fs::read(crate::support::report(crashed.path(), "crash")).unwrap();
    let name = "crash-1700000000000-7.json";
    let device = |report: &[u8]| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(name), report).unwrap();
        dir
    };
    let (a, b) = (padded(&event, 64), padded(&event, 128));
    let (device_a, device_b) = (device(&a), device(&b));

    let cluster = Cluster::start(0, MasterOptions::default()).await;
    let sent_a = send_from(&cluster, device_a.path()).await;
    let sent_b = send_from(&cluster, device_b.path()).await;
    let (id_a, id_b) = (
        job_id_in(device_a.path(), "app", name),
        job_id_in(device_b.path(), "app", name),
    );
    assert_ne!(id_a, id_b, "two installs, two ids");
    assert_eq!(sent_a.sent, vec![id_a.clone()], "{sent_a:?}");
    assert_eq!(sent_b.sent, vec![id_b.clone()], "{sent_b:?}");
    let stored_a = stored_report(&cluster, &id_a).await;
    let stored_b = stored_report(&cluster, &id_b).await;
    assert_ne!(stored_a, stored_b, "each device's own report");

    // The acknowledgement was lost: the same report is sent again, under the same id, and the
    // master says it holds it (had it not, it would go under another id).
    std::fs::write(device_a.path().join(name), &a).unwrap();
    let again = send_from(&cluster, device_a.path()).await;
    assert_eq!(again.sent, vec![id_a.clone()], "{again:?}");
    assert!(symcluster_sdk::send::pending(device_a.path()).is_empty());

    // A device restored from A's backup: A's install id, another report of the same name.
    let restored = device(&padded(&event, 256));
    std::fs::copy(
        device_a.path().join(symcluster_sdk::send::INSTALL_ID_FILE),
        restored.path().join(symcluster_sdk::send::INSTALL_ID_FILE),
    )
    .unwrap();
    let sent_c = send_from(&cluster, restored.path()).await;
    assert_eq!(sent_c.sent.len(), 1, "{sent_c:?}");
    let id_c = &sent_c.sent[0];
    let content_id = id_c
        .strip_prefix(&format!("{id_a}-"))
        .expect("A's id, then");
    assert_eq!(content_id.len(), 16);
    assert!(content_id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(symcluster_sdk::send::pending(restored.path()).is_empty());
    assert_eq!(
        stored_report(&cluster, &id_a).await,
        stored_a,
        "A's report stays"
    );
    assert_ne!(stored_report(&cluster, id_c).await, stored_a);
}

/// Sends the reports of `dir` once, as app `app`, with the admin token.
async fn send_from(cluster: &Cluster, dir: &std::path::Path) -> symcluster_sdk::send::SendSummary {
    symcluster_sdk::send::send_pending(dir, &cluster.endpoint, TOKEN, "app", 1).await
}

//! Which images a cluster's result lists: the ones a frame is in by default, every image when
//! the job asks (`NativeJob.modules = MODULES_ALL`, `symctl submit --modules all`).

use symcluster_loadtest::cluster::{Cluster, MasterOptions};

use crate::support::{fixture, result, upload_dsyms, wait};

/// `(status, count)` pairs of a result's modules, sorted.
fn statuses(result: &serde_json::Value) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for module in result["modules"].as_array().unwrap() {
        *counts
            .entry(module["status"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

/// "Call abort()" lists 327 images; its frames are in 15, of which the CrashProbe dSYMs cover
/// CrashLibiOS and the app, and the system libraries have none here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_lists_the_images_its_frames_are_in_or_every_image_on_request() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    upload_dsyms(&cluster, &[fixture("crashprobe/release/dSYMs")]);
    let report = fixture("crashprobe/release/arm64/Call abort().json");

    let mut client = cluster.client().await;
    client
        .submit_native("referenced", std::fs::read(&report).unwrap())
        .await
        .unwrap();
    let referenced = result(&wait(&mut client, "referenced").await);

    let out = cluster.symctl(&[
        "submit",
        "--job-id",
        "all",
        "--modules",
        "all",
        "--wait",
        report.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = result(&wait(&mut client, "all").await);
    assert_eq!(printed["result"], all, "symctl prints the stored result");

    let found = statuses(&referenced)
        .into_iter()
        .find(|(s, _)| s == "found")
        .map_or(0, |(_, n)| n);
    assert!(found >= 1, "{:?}", statuses(&referenced));
    assert_eq!(referenced["modules"].as_array().unwrap().len(), 15);
    assert_eq!(referenced["unreferenced_modules"], 312);
    assert!(statuses(&referenced).iter().all(|(s, _)| s != "unused"));

    assert_eq!(all["modules"].as_array().unwrap().len(), 327);
    assert_eq!(all["unreferenced_modules"], 0);
    let mut expected = statuses(&referenced);
    expected.push(("unused".to_owned(), 312));
    expected.sort();
    assert_eq!(statuses(&all), expected);
    assert_eq!(all["threads"], referenced["threads"]);
    // The referenced images are listed alike, in the same order.
    let listed: Vec<&serde_json::Value> = all["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["status"] != "unused")
        .collect();
    let referenced_modules: Vec<&serde_json::Value> =
        referenced["modules"].as_array().unwrap().iter().collect();
    assert_eq!(listed, referenced_modules);
}

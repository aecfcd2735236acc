//! The index heals itself, against a real master, worker and Garage: jobs that finished without
//! their dSYM or source map are listed by `symctl missing`, and are symbolicated again, once,
//! when `symctl upload` brings the file, moving to their real crash group.

use std::time::Duration;

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};
use symcluster_sources::{Scope, layout};

use crate::support::{app_frames, groups, result, succeeded, wait};

const DEMO_APP: &str = "4c4c443b-5555-3144-a126-3cc30cf88fdb";

/// `symctl missing --output json`: one array of entries.
fn missing(cluster: &Cluster) -> Vec<serde_json::Value> {
    serde_json::from_str(&succeeded(
        &cluster.symctl(&["missing", "--output", "json"]),
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_dsyms_and_source_maps_symbolicate_finished_jobs_again() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let mut client = cluster.client().await;

    // Two crashes arrive before the app's dSYM: completed, DemoApp missing, one
    // unsymbolicated group of two.
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    for id in ["late-1", "late-2"] {
        client.submit_native(id, report.clone()).await.unwrap();
        let job = wait(&mut client, id).await;
        let before = result(&job);
        let module = before["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["debug_id"] == DEMO_APP)
            .unwrap();
        assert_eq!(module["status"], "missing");
        assert_eq!(job.revision, 1);
        // DemoApp's and the system libraries' (never uploaded here) debug files.
        assert!(
            job.missing
                .iter()
                .any(|m| m.key == DEMO_APP && m.image == "DemoApp")
        );
    }
    let raw = groups(&client, 10).await;
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_eq!(raw[0].count, 2);
    assert!(
        raw[0].title.ends_with("(unsymbolicated)"),
        "{}",
        raw[0].title
    );
    assert!(
        raw[0].key_stack[0].starts_with("DemoApp + 0x"),
        "{:?}",
        raw[0].key_stack
    );

    let listed = missing(&cluster);
    let entry = listed
        .iter()
        .find(|m| m["key"] == DEMO_APP)
        .unwrap_or_else(|| panic!("{DEMO_APP} not listed: {listed:?}"));
    assert_eq!(
        (
            &entry["project"],
            &entry["image"],
            &entry["arch"],
            &entry["jobs"],
            &entry["groups"]
        ),
        (
            &serde_json::json!("default"),
            &serde_json::json!("DemoApp"),
            &serde_json::json!("arm64"),
            &serde_json::json!(2),
            &serde_json::json!(1)
        )
    );
    let table = succeeded(&cluster.symctl(&["missing"]));
    assert!(
        table
            .lines()
            .next()
            .unwrap()
            .contains("debug id / source map")
    );
    assert!(
        table.contains(DEMO_APP) && table.contains("DemoApp"),
        "{table}"
    );

    // The dSYM arrives: both jobs run again, once, and land in their real group.
    let dsym = repo().join("examples/ios-demo/DemoApp.dSYM");
    let out = succeeded(&cluster.symctl(&["upload", "dsym", &dsym.display().to_string()]));
    assert!(
        out.contains("2 jobs that lacked these files are being symbolicated again"),
        "{out}"
    );
    for id in ["late-1", "late-2"] {
        let job = wait(&mut client, id).await;
        assert_eq!(job.revision, 2, "{id}");
        assert!(job.resymbolicated_at_ms >= job.submitted_at_ms);
        assert!(
            job.missing.iter().all(|m| m.key != DEMO_APP),
            "{:?}",
            job.missing
        );
        assert_eq!(
            app_frames(&result(&job), &["DemoApp"])[0],
            ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
        );
    }
    let healed = groups(&client, 10).await;
    assert_eq!(
        healed.len(),
        1,
        "the unsymbolicated group is gone: {healed:?}"
    );
    assert_eq!(healed[0].count, 2);
    assert!(
        healed[0].title.contains("crash_write_null"),
        "{}",
        healed[0].title
    );
    assert!(missing(&cluster).iter().all(|m| m["key"] != DEMO_APP));
    // Uploading it again changes nothing: each job runs once per arrival of what it lacked.
    let again = succeeded(&cluster.symctl(&["upload", "dsym", &dsym.display().to_string()]));
    assert!(!again.contains("symbolicated again"), "{again}");
    let shown: serde_json::Value =
        serde_json::from_str(&succeeded(&cluster.symctl(&["job", "late-1"]))).unwrap();
    assert_eq!(shown["revision"], 2);
    assert!(shown["resymbolicated_at_ms"].as_u64().unwrap() > 0);

    // A JS job whose source map comes late: failed, listed, then completed.
    let stack = std::fs::read(repo().join("examples/rn-demo/dist/stack-hermes.txt")).unwrap();
    client
        .submit_js(
            "late-js",
            api::JsJob {
                stack,
                release: "late@1.0".into(),
                bundle: "index.android.bundle".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let failed = wait(&mut client, "late-js").await;
    assert_eq!(failed.state, api::JobState::Failed as i32);
    let js_key = "release:late@1.0//index.android.bundle";
    assert!(missing(&cluster).iter().any(|m| m["key"] == js_key));
    let map = repo().join("examples/rn-demo/dist/index.android.bundle.hbc.map");
    let out = succeeded(&cluster.symctl(&[
        "upload",
        "sourcemap",
        "--sourcemap",
        &map.display().to_string(),
        "--release",
        "late@1.0",
        "--bundle-name",
        "index.android.bundle",
    ]));
    assert!(
        out.contains("1 job that lacked these files is being symbolicated again"),
        "{out}"
    );
    let js = wait(&mut client, "late-js").await;
    assert_eq!((js.revision, js.error.as_str()), (2, ""));
    let restored = result(&js);
    assert_eq!(
        restored["frames"][0]["filename"],
        "/Users/dev/DemoApp/src/pricing.js"
    );
    assert_eq!(restored["frames"][0]["lineno"], 22);
    assert!(missing(&cluster).iter().all(|m| m["key"] != js_key));
}

/// A dSYM put in the bucket by another tool (not announced) is found by the leader's periodic
/// look in the bucket, and the job that lacked it is symbolicated again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_uploaded_by_another_tool_is_found_in_the_bucket() {
    let cluster = Cluster::start(
        1,
        MasterOptions {
            missing_check: Some(Duration::from_millis(300)),
            ..MasterOptions::default()
        },
    )
    .await;
    let mut client = cluster.client().await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    client.submit_native("quiet", report).await.unwrap();
    let job = wait(&mut client, "quiet").await;
    assert!(job.missing.iter().any(|m| m.key == DEMO_APP));

    // What `aws s3 cp` or sentry-cli would do: the object appears, nobody says so.
    let dwarf = repo().join("examples/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp");
    let key = layout::debug_file_key(
        &Scope::Project("default").prefix(""),
        &DEMO_APP.parse().unwrap(),
    );
    cluster
        .garage
        .bucket()
        .await
        .put(&key, std::fs::read(dwarf).unwrap())
        .await
        .unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let healed = loop {
        let job = client.job("quiet").await.unwrap();
        if job.revision == 2 && job.state == api::JobState::Completed as i32 {
            break job;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not symbolicated again within 60 s: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        app_frames(&result(&healed), &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
}

//! A React Native crash on Android in all three layers, end to end against a real master,
//! worker and Garage: the composed Sentry event of `examples/rn-android` (JavaScript from the
//! Hermes demo, Java from the ProGuard demo, native from the Linux demo's real crash) arrives
//! before any of its files; it completes with every frame as given and its three files listed
//! in `symctl missing`; each upload restores its layer (the job runs again each time), and the
//! last result has every frame of every layer as its ground truth, in one crash group.

use symcluster_client::{ClientError, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::support::{groups, result, succeeded, wait};

const NATIVE_KEY: &str = "e03566f6-988e-a224-5037-26179d47ad6c";
const JS_KEY: &str = "release:com.example.demo@1.0+1/1/index.android.bundle";
const JVM_KEY: &str = "proguard:72da1f4c-0963-5825-8771-2ed9ef5245f3";

fn event() -> Vec<u8> {
    std::fs::read(repo().join("examples/rn-android/combined-event.json")).unwrap()
}

/// `(layer, status)` runs of the thrown exception's frames, innermost first.
fn layers(result: &serde_json::Value) -> Vec<(String, String)> {
    let mut runs: Vec<(String, String)> = Vec::new();
    for frame in result["exceptions"][0]["frames"].as_array().unwrap() {
        let run = (
            frame["layer"].as_str().unwrap().to_owned(),
            frame["status"].as_str().unwrap().to_owned(),
        );
        if runs.last() != Some(&run) {
            runs.push(run);
        }
    }
    runs
}

fn runs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected
        .iter()
        .map(|(l, s)| (l.to_string(), s.to_string()))
        .collect()
}

fn missing_keys(job: &api::Job) -> Vec<&str> {
    let mut keys: Vec<&str> = job.missing.iter().map(|m| m.key.as_str()).collect();
    keys.sort_unstable();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_layer_crash_is_restored_as_its_files_arrive() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let mut client = cluster.client().await;

    // Refused at once: not a JSON object.
    let e = client
        .submit_combined("bad", b"SIGSEGV at 0x0".to_vec())
        .await
        .unwrap_err();
    let ClientError::Status(status) = e else {
        panic!("{e}")
    };
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    // A JSON object with no stack: failed for good, with the reason.
    client
        .submit_combined("empty", br#"{"exception": {"values": []}}"#.to_vec())
        .await
        .unwrap();
    let empty = wait(&mut client, "empty").await;
    assert_eq!(empty.state, api::JobState::Failed as i32, "{empty:?}");
    assert!(
        empty.error.contains("no exception with a stack trace"),
        "{}",
        empty.error
    );

    // No file yet: completed, every frame as given, the three files missing.
    client.submit_combined("rn", event()).await.unwrap();
    let job = wait(&mut client, "rn").await;
    assert_eq!(job.state, api::JobState::Completed as i32, "{job:?}");
    assert_eq!(job.kind, api::JobKind::Combined as i32);
    assert_eq!(missing_keys(&job), [NATIVE_KEY, JVM_KEY, JS_KEY]);
    assert_eq!(
        layers(&result(&job)),
        runs(&[
            ("native", "missing"),
            ("jvm", "missing_mapping"),
            ("js", "missing_source_map"),
            ("js", "native"),
            ("js", "missing_source_map"),
        ])
    );
    let listed: Vec<serde_json::Value> = serde_json::from_str(&succeeded(
        &cluster.symctl(&["missing", "--output", "json"]),
    ))
    .unwrap();
    for key in [NATIVE_KEY, JS_KEY, JVM_KEY] {
        assert!(
            listed.iter().any(|m| m["key"] == key),
            "{key} not listed: {listed:?}"
        );
    }

    // Each file restores its layer.
    let debug_file = repo().join("examples/linux-demo/demo-app.debug");
    let map = repo().join("examples/rn-demo/dist/index.android.bundle.hbc.map");
    let mapping = repo().join("examples/android-demo/mapping.txt");
    let uploads: [Vec<String>; 3] = [
        // The app's unstripped .so (here the demo's ELF), as an Android build uploads it.
        vec![
            "upload".into(),
            "debug-files".into(),
            debug_file.display().to_string(),
        ],
        vec![
            "upload".into(),
            "sourcemap".into(),
            "--sourcemap".into(),
            map.display().to_string(),
            "--release".into(),
            "com.example.demo@1.0+1".into(),
            "--dist".into(),
            "1".into(),
            "--bundle-name".into(),
            "index.android.bundle".into(),
        ],
        vec![
            "upload".into(),
            "proguard".into(),
            mapping.display().to_string(),
        ],
    ];
    for (i, upload) in uploads.iter().enumerate() {
        let args: Vec<&str> = upload.iter().map(String::as_str).collect();
        let out = succeeded(&cluster.symctl(&args));
        assert!(
            out.contains("1 job that lacked these files is being symbolicated again"),
            "{out}"
        );
        let job = wait(&mut client, "rn").await;
        assert_eq!(job.revision, i as u32 + 2, "{job:?}");
    }
    let job = wait(&mut client, "rn").await;
    assert!(job.missing.is_empty(), "{:?}", job.missing);
    let restored = result(&job);
    assert_eq!(
        layers(&restored),
        runs(&[
            ("native", "symbolicated"),
            ("jvm", "symbolicated"),
            // The JDK's own stream classes, which ProGuard kept.
            ("jvm", "not_in_mapping"),
            ("jvm", "symbolicated"),
            ("js", "symbolicated"),
            ("js", "native"),
            ("js", "symbolicated"),
            // The bundle's last statement, `__r(0)`, has no mapping.
            ("js", "missing_mapping"),
        ])
    );
    let frames = restored["exceptions"][0]["frames"].as_array().unwrap();
    let first = |layer: &str| frames.iter().find(|f| f["layer"] == layer).unwrap();
    let native = first("native");
    assert_eq!(
        (&native["function"], &native["filename"], &native["lineno"]),
        (&"crash_write_null".into(), &"crash.c".into(), &23.into())
    );
    let java = first("jvm");
    assert_eq!(
        (&java["class"], &java["method"], &java["line"]),
        (
            &"com.example.shop.PriceCalculator".into(),
            &"checkPrice".into(),
            &17.into()
        )
    );
    let js = first("js");
    assert_eq!(
        (&js["filename"], &js["lineno"], &js["colno"]),
        (
            &"/Users/dev/DemoApp/src/pricing.js".into(),
            &22.into(),
            &24.into()
        )
    );
    assert_eq!(
        restored["exceptions"][1]["type"],
        "com.example.shop.CheckoutFailedException"
    );

    // One crash group, keyed across layers: the app's native frames first.
    let raw = groups(&client, 10).await;
    let group = raw
        .iter()
        .find(|g| g.title.starts_with("SIGSEGV"))
        .unwrap_or_else(|| panic!("{raw:?}"));
    assert_eq!(group.title, "SIGSEGV in crash_write_null");
    assert_eq!(group.count, 1);
    assert_eq!(group.key_stack[0], "crash_write_null (crash.c:23)");

    // The text a developer reads: every layer in its own style.
    let text = succeeded(&cluster.symctl(&["job", "--output", "text", "rn"]));
    for line in [
        "SIGSEGV: Segmentation fault\n    at crash_write_null (crash.c:23) [native]\n",
        "    at com.example.shop.PriceCalculator.checkPrice(PriceCalculator.java:17) [java]\n",
        "    at list.map$argument_0 (/Users/dev/DemoApp/src/pricing.js:22:24) [js]\n",
        "Caused by: com.example.shop.CheckoutFailedException: order 0 failed\n",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
}

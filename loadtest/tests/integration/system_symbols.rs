//! System symbols, against a real master, worker and Garage: `symctl upload system-symbols`
//! puts a DeviceSupport-like tree (arm64 system dylibs made by
//! `examples/ios-system-symbols/generate.sh`) in the shared prefix; a crash whose frames are in
//! those libraries, submitted before, is symbolicated again, and one of another project is
//! symbolicated from them at once.

use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::support::{result, wait};

/// The crashed thread's `(function, image)` per frame.
fn frames(result: &serde_json::Value) -> Vec<(String, String)> {
    result["threads"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap_or("").to_owned(),
                f["image"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_symbols_serve_every_project() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    let dir = repo().join("examples/ios-system-symbols");
    let report = std::fs::read(dir.join("SystemFrames.crash")).unwrap();
    let mut client = cluster.client().await;
    client.submit_native("sys-1", report.clone()).await.unwrap();
    let before = result(&wait(&mut client, "sys-1").await);
    assert_eq!(before["threads"][0]["frames"][0]["status"], "missing");

    let symbols = dir.join("iOS DeviceSupport/15.0 (19A346)/Symbols");
    let out = cluster.symctl(&["upload", "system-symbols", &symbols.display().to_string()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("-> shared/4c/4c44e155553144a119ce9974678f51/debuginfo"),
        "{stdout}"
    );
    assert!(
        stdout.contains("1 job that lacked these files is being symbolicated again"),
        "{stdout}"
    );

    let expected = vec![
        (
            "demo_kernel_trap".to_owned(),
            "libdemo_kernel.dylib".to_owned(),
        ),
        ("demokit_dispatch_event".to_owned(), "DemoKit".to_owned()),
        ("demokit_run_loop".to_owned(), "DemoKit".to_owned()),
    ];
    let healed = wait(&mut client, "sys-1").await;
    assert_eq!(healed.revision, 2);
    assert_eq!(frames(&result(&healed)), expected);
    // System frames are not the app's code: symbolicated or not, the crash groups by place (the
    // group it had before the symbols came), named by the system function now.
    let groups = crate::support::groups(&client, 10).await;
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].count, 1);
    assert_eq!(
        groups[0].title,
        "EXC_BAD_ACCESS (SIGSEGV) in demo_kernel_trap (libdemo_kernel.dylib) (in system code)"
    );

    // Another project reads the shared prefix too.
    let mut other = client.clone().with_project("other-app");
    other.submit_native("sys-2", report).await.unwrap();
    let job = wait(&mut other, "sys-2").await;
    assert_eq!((job.project.as_str(), job.revision), ("other-app", 1));
    let symbolicated = result(&job);
    assert_eq!(frames(&symbolicated), expected);
    assert!(
        symbolicated["threads"][0]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["status"] == "symbolicated")
    );
}

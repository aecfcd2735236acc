//! The whole path: upload, submit, symbolicate on workers, read the index.

use symcluster_client::api;
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};

use crate::support::{app_frames, fixture, groups, result, upload_dsyms, wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashprobe_demo_and_js_jobs_end_to_end() {
    let cluster = Cluster::start(2, MasterOptions::default()).await;
    upload_dsyms(
        &cluster,
        &[
            fixture("crashprobe/release/dSYMs"),
            repo().join("examples/ios-demo/DemoAppFat.dSYM"),
        ],
    );
    let out = cluster.symctl(&[
        "upload",
        "sourcemap",
        "--sourcemap",
        &repo()
            .join("examples/rn-demo/dist/index.android.bundle.hbc.map")
            .display()
            .to_string(),
        "--release",
        "demo@1.0",
        "--bundle-name",
        "index.android.bundle",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut client = cluster.client().await;
    let reports = [
        (
            "abort",
            "Call abort().json",
            "-[CRLCrashAbort crash]",
            "CRLCrashAbort.m",
            37,
        ),
        (
            "null",
            "Dereference a NULL pointer.json",
            "-[CRLCrashNULL crash]",
            "CRLCrashNULL.m",
            37,
        ),
        (
            "trap",
            "Call __builtin_trap().json",
            "-[CRLCrashTrap crash]",
            "CRLCrashTrap.m",
            37,
        ),
    ];
    for (id, file, ..) in &reports {
        let report = std::fs::read(fixture(&format!("crashprobe/release/arm64/{file}"))).unwrap();
        let submitted = client.submit_native(id, report).await.unwrap();
        assert!(submitted.created);
    }
    // The same id again: idempotent, nothing new.
    let again = client
        .submit_native("abort", b"ignored".to_vec())
        .await
        .unwrap();
    assert!(!again.created);

    for (id, _, function, file, line) in &reports {
        let job = wait(&mut client, id).await;
        let result = result(&job);
        let frames = app_frames(&result, &["CrashLibiOS", "CrashProbeiOS"]);
        assert_eq!(
            frames[0],
            (function.to_string(), file.to_string(), *line),
            "{id}"
        );
        assert_eq!(
            frames[1],
            (
                "-[CRLDetailViewController doCrash]".to_owned(),
                "CRLDetailViewController.m".to_owned(),
                53
            ),
            "{id}"
        );
        assert_eq!(job.attempts, 1);
        assert!(!job.fingerprint.is_empty());
    }

    // The project's own iOS example, from the fat dSYM in S3.
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.ips")).unwrap();
    client.submit_native("demo-ips", report).await.unwrap();
    let demo = result(&wait(&mut client, "demo-ips").await);
    assert_eq!(
        app_frames(&demo, &["DemoApp"])[..3],
        [
            ("crash_write_null".to_owned(), "crash.c".to_owned(), 23),
            ("validate_total".to_owned(), "crash.c".to_owned(), 33),
            ("process_order".to_owned(), "crash.c".to_owned(), 41),
        ]
    );
    // The result says where the report came from (the `.ips` body's bundle info, OS and model).
    assert_eq!(
        demo["facets"],
        serde_json::json!({"release": "com.example.DemoApp@1.0+1", "os": "iOS 15.0 (19A346)",
                           "device": "iPhone13,2"})
    );

    // `symctl job --format apple` prints the stored result in the report's own format, byte for
    // byte what `symctl symbolicate --format apple` prints for the same report and dSYM.
    let crash = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    client.submit_native("demo-crash", crash).await.unwrap();
    wait(&mut client, "demo-crash").await;
    for (id, file) in [("demo-ips", "DemoApp.ips"), ("demo-crash", "DemoApp.crash")] {
        let from_cluster = cluster.symctl(&["job", id, "--output", "apple"]);
        let report = repo().join("examples/ios-demo").join(file);
        let dsym = repo().join("examples/ios-demo/DemoAppFat.dSYM");
        let local = cluster.symctl(&[
            "symbolicate",
            "--debug-files",
            &dsym.display().to_string(),
            "--format",
            "apple",
            &report.display().to_string(),
        ]);
        for out in [&from_cluster, &local] {
            assert!(
                out.status.success(),
                "{id}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            String::from_utf8_lossy(&local.stdout).contains("crash_write_null"),
            "{id}: not symbolicated"
        );
        assert!(
            from_cluster.stdout == local.stdout,
            "{id}: the cluster's rendering differs:\n{}\n---\n{}",
            String::from_utf8_lossy(&from_cluster.stdout),
            String::from_utf8_lossy(&local.stdout)
        );
    }
    // A Sentry JSON report has no Apple rendering: a clear error, exit 1.
    let refused = cluster.symctl(&["job", "null", "--output", "apple"]);
    assert_eq!(refused.status.code(), Some(1));

    // A real Hermes crash of the React Native example, its map found by release and bundle.
    let stack = std::fs::read(repo().join("examples/rn-demo/dist/stack-hermes.txt")).unwrap();
    client
        .submit_js(
            "hermes",
            api::JsJob {
                stack,
                release: "demo@1.0".into(),
                bundle: "index.android.bundle".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let js = result(&wait(&mut client, "hermes").await);
    // `symctl job --format text` prints it as `symctl restore-js --format text` does (the map
    // read back from the bucket).
    let map = repo().join("examples/rn-demo/dist/index.android.bundle.hbc.map");
    let stack_file = repo().join("examples/rn-demo/dist/stack-hermes.txt");
    let from_cluster = cluster.symctl(&["job", "hermes", "--output", "text"]);
    let local = cluster.symctl(&[
        "restore-js",
        "--sourcemap",
        &map.display().to_string(),
        "--format",
        "text",
        &stack_file.display().to_string(),
    ]);
    for out in [&from_cluster, &local] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        String::from_utf8_lossy(&local.stdout).contains("pricing.js:22:"),
        "{}",
        String::from_utf8_lossy(&local.stdout)
    );
    assert!(
        from_cluster.stdout == local.stdout,
        "the cluster's rendering differs:\n{}\n---\n{}",
        String::from_utf8_lossy(&from_cluster.stdout),
        String::from_utf8_lossy(&local.stdout)
    );
    let top = &js["frames"][0];
    assert_eq!(top["filename"], "/Users/dev/DemoApp/src/pricing.js");
    assert_eq!(top["lineno"], 22);
    assert_eq!(top["function"], "list.map$argument_0");

    // A JS job whose map was never uploaded fails with a precise error.
    client
        .submit_js(
            "no-map",
            api::JsJob {
                stack: b"at f (address at index.android.bundle:1:10)".to_vec(),
                release: "unknown@0".into(),
                bundle: "index.android.bundle".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let failed = wait(&mut client, "no-map").await;
    assert_eq!(failed.state, api::JobState::Failed as i32);
    assert_eq!(
        failed.error,
        "no source map at projects/default/js/release/unknown@0/_/index.android.bundle.map"
    );

    // A report that is not a report: failed at once, with the engine's message.
    let bad = client
        .submit_native("garbage", b"hello, this is not a crash".to_vec())
        .await
        .unwrap();
    let bad = bad.job.unwrap();
    assert_eq!(bad.state, api::JobState::Failed as i32);
    assert!(bad.error.starts_with("not a crash report"), "{}", bad.error);

    // The same report sent with its routing key: the master does not read it, so it is
    // accepted and the worker fails it, with the same message.
    let routed = api::JobSpec {
        job_id: "garbage-routed".into(),
        payload: Some(api::job_spec::Payload::Native(api::NativeJob {
            routing_key: "54039061-a983-3323-a49d-837a894d667f".into(),
            ..symcluster_client::report::compressed_job(b"hello, this is not a crash")
        })),
        project: String::new(),
    };
    let routed = client.submit(routed).await.unwrap().job.unwrap();
    // Accepted: queued, or already leased when the lease was applied before the answer left.
    assert!(
        [api::JobState::Queued as i32, api::JobState::Running as i32].contains(&routed.state),
        "{routed:?}"
    );
    let routed = wait(&mut client, "garbage-routed").await;
    assert_eq!(routed.state, api::JobState::Failed as i32);
    assert!(
        routed.error.starts_with("not a crash report"),
        "{}",
        routed.error
    );

    // The master's own checks of `report_zstd` (the client library's would refuse these first,
    // so they are sent as raw specs): not a frame, and a 2 KB frame of 17 MiB of zeros, both
    // also with a routing key (the frame header is read all the same); and a routing key over
    // 128 bytes.
    let key = "54039061-a983-3323-a49d-837a894d667f";
    let bomb = symcluster_client::report::compress(&vec![0; 17 << 20]);
    let bomb_message = format!(
        "the report is {} bytes; at most 16777216 are accepted",
        17 << 20
    );
    for (id, report_zstd, routing_key, message) in [
        (
            "not-zstd",
            b"plain text".to_vec(),
            "",
            "report_zstd is not a zstd frame".to_owned(),
        ),
        (
            "not-zstd-routed",
            b"plain text".to_vec(),
            key,
            "report_zstd is not a zstd frame".to_owned(),
        ),
        ("zstd-bomb", bomb.clone(), "", bomb_message.clone()),
        ("zstd-bomb-routed", bomb, key, bomb_message),
        (
            "long-routing-key",
            symcluster_client::report::compress(b"{}"),
            &"k".repeat(129),
            "routing_key must be at most 128 bytes".to_owned(),
        ),
    ] {
        let spec = api::JobSpec {
            job_id: id.to_owned(),
            payload: Some(api::job_spec::Payload::Native(api::NativeJob {
                report: Vec::new(),
                report_zstd,
                routing_key: routing_key.to_owned(),
                ..Default::default()
            })),
            project: String::new(),
        };
        match client.submit(spec).await {
            Err(symcluster_client::ClientError::Status(status)) => {
                assert_eq!(status.code(), tonic::Code::InvalidArgument, "{id}");
                assert_eq!(status.message(), message);
            }
            other => panic!("{id}: {other:?}"),
        }
    }

    // Crash groups: the three CrashProbe crashes are three groups, the demo a fourth.
    let groups = groups(&client, 10).await;
    assert_eq!(groups.len(), 5, "3 CrashProbe + iOS demo + Hermes");
    // `symctl groups --output json` prints the same groups, in the same order.
    let out = cluster.symctl(&["groups", "--output", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let printed: Vec<(String, u64, Vec<String>)> = printed
        .iter()
        .map(|g| {
            (
                g["fingerprint"].as_str().unwrap().to_owned(),
                g["count"].as_u64().unwrap(),
                serde_json::from_value(g["key_stack"].clone()).unwrap(),
            )
        })
        .collect();
    let expected: Vec<(String, u64, Vec<String>)> = groups
        .iter()
        .map(|g| (g.fingerprint.clone(), g.count, g.key_stack.clone()))
        .collect();
    assert_eq!(printed, expected);
    let table = String::from_utf8(cluster.symctl(&["groups"]).stdout).unwrap();
    assert!(
        table.lines().next().unwrap().starts_with("count"),
        "{table}"
    );
    for g in &groups {
        assert!(table.contains(&g.fingerprint), "{table}");
    }
    let abort = groups
        .iter()
        .find(|g| g.key_stack[0].starts_with("-[CRLCrashAbort crash]"))
        .unwrap();
    assert_eq!(abort.count, 1);
    assert_eq!(abort.title, "EXC_CRASH (SIGABRT) in -[CRLCrashAbort crash]");

    // Asked for, each group comes with its jobs by release, dist, OS, device and day: the
    // demo's two reports of one crash (`.ips` and text) count twice under the same values, the
    // Hermes job under its job's release.
    let with_facets = client
        .ingest()
        .list_groups(api::ListGroupsRequest {
            page_size: 10,
            facets: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .groups;
    let breakdown = |g: &api::CrashGroup| {
        let f = g.facets.clone().unwrap_or_default();
        let top = |b: Option<api::FacetBreakdown>| {
            let b = b.unwrap_or_default();
            let mut top: Vec<(String, u64)> =
                b.top.into_iter().map(|c| (c.value, c.jobs)).collect();
            top.push(("(other)".into(), b.other));
            top
        };
        let days: u64 = f.days.iter().map(|d| d.jobs).sum();
        (top(f.releases), top(f.os), top(f.devices), days)
    };
    let demo_group = with_facets
        .iter()
        .find(|g| {
            g.key_stack
                .first()
                .is_some_and(|f| f.starts_with("crash_write_null"))
        })
        .expect("the demo's group");
    assert_eq!(demo_group.count, 2);
    assert_eq!(
        breakdown(demo_group),
        (
            vec![
                ("com.example.DemoApp@1.0+1".into(), 2),
                ("(other)".into(), 0)
            ],
            vec![("iOS 15.0 (19A346)".into(), 2), ("(other)".into(), 0)],
            vec![("iPhone13,2".into(), 2), ("(other)".into(), 0)],
            2
        )
    );
    assert_eq!(
        (
            demo_group.first_release.as_str(),
            demo_group.last_release.as_str()
        ),
        ("com.example.DemoApp@1.0+1", "com.example.DemoApp@1.0+1")
    );
    let hermes_group = with_facets
        .iter()
        .find(|g| g.last_job_id == "hermes")
        .expect("the Hermes job's group");
    assert_eq!(breakdown(hermes_group).0[0], ("demo@1.0".to_owned(), 1));
    // Not asked for, none are sent.
    assert!(groups.iter().all(|g| g.facets.is_none()));
    // `symctl groups --facets` prints them.
    let out = cluster.symctl(&["groups", "--facets", "--output", "json"]);
    let printed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let demo = printed
        .iter()
        .find(|g| g["fingerprint"] == demo_group.fingerprint.as_str())
        .unwrap();
    assert_eq!(
        demo["facets"]["devices"],
        serde_json::json!({"top": [{"value": "iPhone13,2", "jobs": 2}], "other": 0})
    );
    assert_eq!(demo["last_release"], "com.example.DemoApp@1.0+1");
}

/// A source map that breaks a rule of the format (ECMA-426, the TC39 suite's invalid maps) is
/// refused at upload naming the rule, and a job whose map got into the bucket some other way
/// fails with that message instead of answering wrong lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_source_map_is_refused_at_upload_and_fails_its_job() {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    // The second line's segment moves the original line from 0 to -2.
    let map = br#"{"version":3,"sources":["a.js"],"names":[],"mappings":"AAAA;AAFA"}"#;
    let rule = "mappings: line 2, segment 1: original line -2 is negative";
    let path = cluster.dir.path().join("negative-line.js.map");
    std::fs::write(&path, map).unwrap();
    let debug_id = "00000000-0000-0000-0000-0000000bad01";
    let out = cluster.symctl(&[
        "upload",
        "sourcemap",
        "--sourcemap",
        &path.display().to_string(),
        "--debug-id",
        debug_id,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the upload was accepted");
    assert!(stderr.contains(rule), "{stderr}");

    // Put there by hand, past symctl's check.
    let prefix = symcluster_sources::layout::Scope::Project("default").prefix("");
    let (key, _) =
        symcluster_sources::layout::sourcemap_keys_by_debug_id(&prefix, debug_id).unwrap();
    cluster
        .garage
        .bucket()
        .await
        .put(&key, map.to_vec())
        .await
        .unwrap();
    let mut client = cluster.client().await;
    client
        .submit_js(
            "bad-map",
            api::JsJob {
                stack: b"f@index.bundle:2:1\n".to_vec(),
                debug_id: debug_id.into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let job = wait(&mut client, "bad-map").await;
    assert_eq!(job.state, api::JobState::Failed as i32, "{job:?}");
    assert!(
        job.error.contains(&format!("malformed source map: {rule}")),
        "{}",
        job.error
    );
}

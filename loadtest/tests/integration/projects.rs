//! Projects (tenants), against a real master, worker and Garage: each project's jobs, results,
//! groups and debug files are its own; the shared prefix serves every project.

use symcluster_client::{Client, ClientError, api};
use symcluster_loadtest::cluster::repo;

use crate::support::{app_frames, fixture, result, wait};
use crate::tokens::cluster_with_tokens;

const A: &str = "project-a-secret";
const B: &str = "project-b-secret";
const AB: &str = "project-ab-secret";

fn code<T: std::fmt::Debug>(result: Result<T, ClientError>) -> tonic::Status {
    match result {
        Err(ClientError::Status(status)) => status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn succeeded(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The module of `debug_id` in a native result.
fn module<'r>(result: &'r serde_json::Value, debug_id: &str) -> &'r serde_json::Value {
    result["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["debug_id"] == debug_id)
        .unwrap_or_else(|| panic!("no module {debug_id} in {result}"))
}

const DEMO_APP: &str = "4c4c443b-5555-3144-a126-3cc30cf88fdb";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projects_see_only_their_own_jobs_groups_and_files() {
    let (cluster, _tokens) = cluster_with_tokens(
        1,
        &[
            ("a-svc", A, "ingest\nprojects = [\"a\"]"),
            ("b-svc", B, "ingest\nprojects = [\"b\"]"),
            ("ab-svc", AB, "ingest\nprojects = [\"a\", \"b\"]"),
        ],
    )
    .await;
    // DemoApp's dSYM belongs to project a only; CrashProbe's are shared by every project.
    let demo_dsym = repo().join("examples/ios-demo/DemoApp.dSYM");
    let demo_dsym = demo_dsym.display().to_string();
    let out = cluster.symctl(&["upload", "dsym", "--project", "a", &demo_dsym]);
    succeeded(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("projects/a/4c/4c443b55553144a1263cc30cf88fdb/debuginfo"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let crashprobe = fixture("crashprobe/release/dSYMs").display().to_string();
    succeeded(&cluster.symctl(&["upload", "dsym", "--shared", &crashprobe]));
    let bad = cluster.symctl(&["upload", "dsym", "--project", "No/Such", &demo_dsym]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a valid name"));

    let demo = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let abort = std::fs::read(fixture("crashprobe/release/arm64/Call abort().json")).unwrap();
    let mut a = Client::connect(&cluster.endpoint, A).await.unwrap();
    let mut b = Client::connect(&cluster.endpoint, B).await.unwrap();

    // The same job id in two projects: two jobs. A's finds DemoApp's dSYM in its prefix; B's
    // does not (not in b's prefix, not shared), although the worker has it cached for A.
    let in_a = a.submit_native("crash-1", demo.clone()).await.unwrap();
    assert!(in_a.created);
    assert_eq!(in_a.job.unwrap().project, "a");
    let a_done = result(&wait(&mut a, "crash-1").await);
    assert_eq!(
        app_frames(&a_done, &["DemoApp"])[0],
        ("crash_write_null".to_owned(), "crash.c".to_owned(), 23)
    );
    assert_eq!(module(&a_done, DEMO_APP)["status"], "found");
    let in_b = b.submit_native("crash-1", demo.clone()).await.unwrap();
    assert!(in_b.created, "b's crash-1 is not a's");
    let b_done = result(&wait(&mut b, "crash-1").await);
    assert_eq!(module(&b_done, DEMO_APP)["status"], "missing");
    assert_eq!(b_done["threads"][0]["frames"][0]["status"], "missing");
    assert!(
        !app_frames(&b_done, &["DemoApp"])
            .iter()
            .any(|(function, _, _)| function == "crash_write_null")
    );

    // The shared prefix serves b.
    b.submit_native("crash-2", abort).await.unwrap();
    let shared = result(&wait(&mut b, "crash-2").await);
    assert_eq!(
        app_frames(&shared, &["CrashLibiOS", "CrashProbeiOS"])[0],
        (
            "-[CRLCrashAbort crash]".to_owned(),
            "CRLCrashAbort.m".to_owned(),
            37
        )
    );

    // A never sees b's jobs, even by guessing an id: the same answer as an unknown id.
    let guessed = code(a.job("crash-2").await);
    assert_eq!(guessed.code(), tonic::Code::NotFound);
    assert_eq!(guessed.message(), "no job \"crash-2\"");
    let named = code(a.clone().with_project("b").job("crash-2").await);
    assert_eq!(named.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        named.message(),
        "token \"a-svc\" does not serve project \"b\""
    );
    let into_b = code(
        a.clone()
            .with_project("b")
            .submit_native("x", demo.clone())
            .await,
    );
    assert_eq!(into_b.code(), tonic::Code::PermissionDenied);

    // Listings: each token's own projects; a token of two names one to submit.
    let listed = |client: &Client, project: &str| {
        let mut ingest = client.ingest();
        let project = project.to_owned();
        async move {
            let jobs = ingest
                .list_jobs(api::ListJobsRequest {
                    state: 0,
                    page_size: 100,
                    project: project.clone(),
                    ..Default::default()
                })
                .await?
                .into_inner()
                .jobs;
            let groups = ingest
                .list_groups(api::ListGroupsRequest {
                    page_size: 100,
                    project,
                    call_trees: false,
                    kind: String::new(),
                    ..Default::default()
                })
                .await?
                .into_inner()
                .groups;
            let mut jobs: Vec<String> = jobs
                .iter()
                .map(|j| format!("{}/{}", j.project, j.job_id))
                .collect();
            jobs.sort();
            let mut groups: Vec<String> = groups.iter().map(|g| g.project.clone()).collect();
            groups.dedup();
            Ok::<_, tonic::Status>((jobs, groups))
        }
    };
    assert_eq!(
        listed(&a, "").await.unwrap(),
        (vec!["a/crash-1".to_owned()], vec!["a".to_owned()])
    );
    assert_eq!(
        listed(&b, "").await.unwrap(),
        (
            vec!["b/crash-1".to_owned(), "b/crash-2".to_owned()],
            vec!["b".to_owned()]
        )
    );
    assert_eq!(
        listed(&a, "b").await.unwrap_err().code(),
        tonic::Code::PermissionDenied
    );
    let ab = Client::connect(&cluster.endpoint, AB).await.unwrap();
    assert_eq!(listed(&ab, "").await.unwrap().0.len(), 3);
    assert_eq!(
        listed(&ab, "b").await.unwrap().0,
        vec!["b/crash-1".to_owned(), "b/crash-2".to_owned()]
    );
    let unnamed = code(ab.clone().submit_native("y", demo.clone()).await);
    assert_eq!(unnamed.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        unnamed.message(),
        "token \"ab-svc\" serves the projects a, b: name one (`project`)"
    );

    // symctl: --project on submit and job; a project the token does not serve exits 1.
    let symctl_as = |token: &str, args: &[&str]| {
        std::process::Command::new(symcluster_loadtest::cluster::bin("symctl"))
            .args(args)
            .env("SYMCLUSTER_MASTER", &cluster.endpoint)
            .env("SYMCLUSTER_TOKEN", token)
            .output()
            .unwrap()
    };
    let report_path = repo().join("examples/ios-demo/DemoApp.crash");
    let out = symctl_as(
        AB,
        &[
            "submit",
            "--project",
            "a",
            "--job-id",
            "cli-1",
            "--wait",
            &report_path.display().to_string(),
        ],
    );
    succeeded(&out);
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&printed["project"], &printed["job_id"], &printed["state"]),
        (
            &serde_json::json!("a"),
            &serde_json::json!("cli-1"),
            &serde_json::json!("completed")
        )
    );
    let out = symctl_as(B, &["job", "--project", "a", "cli-1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("token \"b-svc\" does not serve project \"a\""),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The admin token (`--token`) serves every project: `default` unless one is named.
    let admin = cluster.client().await;
    let b_job = admin
        .clone()
        .with_project("b")
        .job("crash-1")
        .await
        .unwrap();
    assert_eq!(
        (b_job.project.as_str(), b_job.job_id.as_str()),
        ("b", "crash-1")
    );
    assert_eq!(
        code(admin.clone().job("crash-1").await).code(),
        tonic::Code::NotFound
    );
}

/// A JS job's debug id or release names a key inside its project's prefix, never a path out of
/// it: a worker reading a directory source (`--source-dir`) would otherwise resolve
/// `projects/a/js/debug-id/../../../b/…` to project b's source map.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_key_never_leaves_its_project() {
    let (mut cluster, _tokens) = cluster_with_tokens(
        0,
        &[
            ("a-svc", A, "ingest\nprojects = [\"a\"]"),
            ("b-svc", B, "ingest\nprojects = [\"b\"]"),
        ],
    )
    .await;
    // Each project's map by debug id (b's is the one to protect), in a directory the worker
    // reads.
    let sources = tempfile::tempdir().unwrap();
    let id = "b2a5d2cc-3c9f-4d45-9d6a-6d1e2f0a1b3c";
    let map =
        std::fs::read(repo().join("examples/rn-demo/dist/index.android.bundle.hbc.map")).unwrap();
    for key in [
        format!("projects/b/js/debug-id/{id}/sourcemap"),
        "projects/a/js/debug-id/0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d/sourcemap".to_owned(),
    ] {
        std::fs::create_dir_all(sources.path().join(&key).parent().unwrap()).unwrap();
        std::fs::write(sources.path().join(&key), &map).unwrap();
    }
    cluster
        .add_worker_with(symcluster_loadtest::cluster::WorkerOptions {
            source_dir: Some(sources.path().to_owned()),
            ..Default::default()
        })
        .await;
    let stack = std::fs::read(repo().join("examples/rn-demo/dist/stack-hermes.txt")).unwrap();
    let js = |debug_id: &str, release: &str, dist: &str, bundle: &str| api::JsJob {
        stack: stack.clone(),
        debug_id: debug_id.into(),
        release: release.into(),
        dist: dist.into(),
        bundle: bundle.into(),
    };
    let mut b = Client::connect(&cluster.endpoint, B).await.unwrap();
    let mut a = Client::connect(&cluster.endpoint, A).await.unwrap();

    // b reads its own map (the id in capitals: the same key).
    b.submit_js("own", js(&id.to_uppercase(), "", "", ""))
        .await
        .unwrap();
    let own = result(&wait(&mut b, "own").await);
    assert_eq!(
        own["frames"][0]["filename"],
        "/Users/dev/DemoApp/src/pricing.js"
    );

    // a cannot reach it by a debug id that is a path, nor climb by release or dist.
    let climbs = [
        (
            format!("../../../b/js/debug-id/{id}"),
            "",
            "",
            "index.android.bundle",
            format!(
                "debug_id \"../../../b/js/debug-id/{id}\" is not a debug id \
                 (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, optionally -<age in hex>)"
            ),
        ),
        (
            String::new(),
            "..",
            "..",
            "x",
            "release must not be \".\", \"..\" or empty".to_owned(),
        ),
        (
            String::new(),
            "1.0",
            ".",
            "x",
            "dist must not be \".\", \"..\" or empty".to_owned(),
        ),
    ];
    for (n, (debug_id, release, dist, bundle, message)) in climbs.iter().enumerate() {
        let refused = code(
            a.submit_js(&format!("climb-{n}"), js(debug_id, release, dist, bundle))
                .await,
        );
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{debug_id}");
        assert_eq!(refused.message(), message);
    }
}

//! JVM jobs end to end, against a real master, worker and Garage: Java traces obfuscated by a
//! real ProGuard build (examples/android-demo) arrive before their mapping file, are listed by
//! `symctl missing`, and are retraced when a build machine uploads the mapping with
//! `symctl upload proguard` (an upload token, through the masters); the result is the
//! unobfuscated run's frames, and ProGuard's own `retrace` text.

use symcluster_client::{Client, ClientError, api};
use symcluster_loadtest::cluster::{MasterOptions, repo};

use crate::support::{groups, result, succeeded, wait};
use crate::tokens::cluster_with_tokens_and;

const UPLOAD_A: &str = "upload-a-secret";
const INGEST_A: &str = "ingest-a-secret";

fn demo(name: &str) -> Vec<u8> {
    std::fs::read(repo().join("examples/android-demo").join(name)).unwrap()
}

fn refusal(e: ClientError) -> tonic::Status {
    match e {
        ClientError::Status(status) => status,
        other => panic!("not a refusal: {other}"),
    }
}

/// ProGuard's retrace of the demo's crash, without the JVM's prefixes (the engine drops module
/// prefixes, and prints the throwable without its thread).
fn proguard_retrace() -> String {
    String::from_utf8(demo("retrace-proguard.txt"))
        .unwrap()
        .replace("Exception in thread \"main\" ", "")
        .replace("java.base/", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jvm_jobs_wait_for_their_mapping_and_are_retraced_when_it_is_uploaded() {
    let (cluster, _tokens) = cluster_with_tokens_and(
        1,
        &[
            ("build-machine-a", UPLOAD_A, "upload\nprojects = [\"a\"]"),
            ("ingest-a", INGEST_A, "ingest\nprojects = [\"a\"]"),
        ],
        MasterOptions::default(),
    )
    .await;
    let mut client = Client::connect_with(&cluster.endpoint, INGEST_A, cluster.tls())
        .await
        .unwrap();
    let mapping = demo("mapping.txt");
    let mapping_id = symcluster_engine::jvm::mapping_id(&mapping);

    // A text trace names its mapping with the job; a Sentry event in its debug_meta.
    let text = api::JvmJob {
        trace: demo("obfuscated-logcat.txt"),
        mapping_id: mapping_id.to_ascii_uppercase(),
    };
    let event = api::JvmJob {
        trace: demo("obfuscated-sentry.json"),
        mapping_id: String::new(),
    };
    // Refused at once: a text trace with no id, an id that is no UUID.
    for (bad, message) in [
        (
            api::JvmJob {
                trace: demo("obfuscated-trace.txt"),
                mapping_id: String::new(),
            },
            "a JVM job needs a mapping_id",
        ),
        (
            api::JvmJob {
                trace: demo("obfuscated-trace.txt"),
                mapping_id: "../../b/x".into(),
            },
            "is not a UUID",
        ),
    ] {
        let status = refusal(client.submit_jvm("bad", bad).await.unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(status.message().contains(message), "{status:?}");
    }

    // Before the mapping: failed for now, the mapping missing.
    let key = format!("proguard:{mapping_id}");
    for (id, job) in [("text", text.clone()), ("event", event.clone())] {
        client.submit_jvm(id, job).await.unwrap();
        let job = wait(&mut client, id).await;
        assert_eq!(job.state, api::JobState::Failed as i32, "{job:?}");
        assert!(
            job.error.starts_with(&format!(
                "no ProGuard mapping file (mapping id {mapping_id}) at projects/a/"
            )),
            "{}",
            job.error
        );
        assert_eq!(
            job.missing
                .iter()
                .map(|m| m.key.as_str())
                .collect::<Vec<_>>(),
            [key.as_str()]
        );
    }
    let listed: Vec<serde_json::Value> = serde_json::from_str(&succeeded(
        &cluster.symctl_as(INGEST_A, &["missing", "--output", "json"]),
    ))
    .unwrap();
    let entry = listed
        .iter()
        .find(|m| m["key"] == key.as_str())
        .unwrap_or_else(|| panic!("{key} not listed: {listed:?}"));
    assert_eq!(
        (&entry["project"], &entry["jobs"]),
        (&"a".into(), &2.into())
    );

    // The build machine uploads the mapping: an upload token, no bucket credentials.
    let path = repo().join("examples/android-demo/mapping.txt");
    let out =
        succeeded(&cluster.symctl_as(UPLOAD_A, &["upload", "proguard", path.to_str().unwrap()]));
    assert!(
        out.contains(&format!("mapping id {mapping_id}"))
            && out.contains("2 jobs that lacked these files are being symbolicated again"),
        "{out}"
    );

    // Both retraced: every frame the unobfuscated run's, as ProGuard's retrace prints them.
    for id in ["text", "event"] {
        let job = wait(&mut client, id).await;
        assert_eq!(job.revision, 2, "{job:?}");
        let result = result(&job);
        assert_eq!(result["mapping_id"], mapping_id.as_str());
        let cause = &result["exceptions"][1];
        assert_eq!(
            (
                &cause["frames"][0]["class"],
                &cause["frames"][0]["method"],
                &cause["frames"][0]["line"],
                &cause["frames"][0]["inlined"]
            ),
            (
                &"com.example.shop.PriceCalculator".into(),
                &"checkPrice".into(),
                &17.into(),
                &true.into()
            )
        );
        let text = succeeded(&cluster.symctl_as(INGEST_A, &["job", "--output", "text", id]));
        assert_eq!(text, proguard_retrace(), "{id}");
        assert!(job.missing.is_empty());
    }
    let listed: Vec<serde_json::Value> = serde_json::from_str(&succeeded(
        &cluster.symctl_as(INGEST_A, &["missing", "--output", "json"]),
    ))
    .unwrap();
    assert!(
        listed.iter().all(|m| m["key"] != key.as_str()),
        "{listed:?}"
    );

    // One crash group for both: the root cause and its retraced frames.
    let raw = groups(&client, 10).await;
    assert_eq!(raw.len(), 1, "{raw:?}");
    assert_eq!(raw[0].count, 2);
    assert_eq!(
        raw[0].title,
        "IllegalStateException in PriceCalculator.checkPrice"
    );
    assert_eq!(
        raw[0].key_stack[0],
        "com.example.shop.PriceCalculator.checkPrice (PriceCalculator.java:17)"
    );

    // A build that wrote its own id into the app (Sentry's Gradle plugin does) uploads the
    // same file under that id.
    let own_id = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    client
        .submit_jvm(
            "own-id",
            api::JvmJob {
                trace: demo("obfuscated-trace.txt"),
                mapping_id: own_id.into(),
            },
        )
        .await
        .unwrap();
    let job = wait(&mut client, "own-id").await;
    assert_eq!(job.state, api::JobState::Failed as i32, "{job:?}");
    let out = succeeded(&cluster.symctl_as(
        UPLOAD_A,
        &[
            "upload",
            "proguard",
            "--mapping-id",
            &own_id.to_ascii_uppercase(),
            path.to_str().unwrap(),
        ],
    ));
    assert!(
        out.contains(&format!("mapping id {own_id}"))
            && out.contains("1 job that lacked these files is being symbolicated again"),
        "{out}"
    );
    let job = wait(&mut client, "own-id").await;
    assert_eq!(result(&job)["mapping_id"], own_id);

    // A file that is no mapping is refused before anything is sent.
    let trace = repo().join("examples/android-demo/obfuscated-trace.txt");
    let out = cluster.symctl_as(UPLOAD_A, &["upload", "proguard", trace.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a ProGuard/R8 mapping file"),
        "{out:?}"
    );
}

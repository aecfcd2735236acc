//! Tokens and roles (`--tokens-file`), against a real master over real sockets: what each role
//! may call, a worker acting only as itself, and a reload on SIGHUP.

use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};
use symcluster_client::{Client, ClientError, api};
use symcluster_loadtest::cluster::{Cluster, MasterOptions, repo};
use tokio_stream::StreamExt;

const DEVICE: &str = "device-secret";
const INGEST: &str = "ingest-secret";
const WORKER_1: &str = "worker-1-secret";
const WORKER_2: &str = "worker-2-secret";
const LIMITED: &str = "limited-secret";
const LIMITED_STREAM: &str = "limited-stream-secret";

/// A tokens file of `(name, token, role)`; a role may carry more TOML lines after a newline.
/// `device` and `ingest` tokens serve the project `demo` unless those lines name `projects`.
pub fn write_tokens(path: &Path, tokens: &[(&str, &str, &str)]) {
    let mut text = String::new();
    for (name, token, role) in tokens {
        let (role, more) = role.split_once('\n').unwrap_or((role, ""));
        let more = if matches!(role, "device" | "ingest") && !more.contains("projects") {
            format!("projects = [\"demo\"]\n{more}")
        } else {
            more.to_owned()
        };
        text += &format!(
            "[[tokens]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n{more}\n",
            hex::encode(Sha256::digest(token.as_bytes()))
        );
    }
    std::fs::write(path, text).unwrap();
}

/// A cluster (`workers` workers) whose masters read a tokens file of `tokens`
/// ([`write_tokens`]); the file's directory, to rewrite it.
pub async fn cluster_with_tokens(
    workers: usize,
    tokens: &[(&str, &str, &str)],
) -> (Cluster, tempfile::TempDir) {
    cluster_with_tokens_and(workers, tokens, MasterOptions::default()).await
}

/// [`cluster_with_tokens`] with more master `options`.
pub async fn cluster_with_tokens_and(
    workers: usize,
    tokens: &[(&str, &str, &str)],
    options: MasterOptions,
) -> (Cluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tokens.toml");
    write_tokens(&path, tokens);
    let cluster = Cluster::start(
        workers,
        MasterOptions {
            tokens_file: Some(path),
            ..options
        },
    )
    .await;
    (cluster, dir)
}

/// Opens `worker_id`'s lease stream as `client` and waits for its first lease (30 s at most);
/// the stream too, which hands its jobs back once dropped.
async fn first_lease(
    client: &Client,
    worker_id: &str,
) -> (api::Lease, tonic::Streaming<api::Lease>) {
    let mut leases = client
        .worker_api()
        .lease_jobs(api::LeaseJobsRequest {
            worker_id: worker_id.into(),
        })
        .await
        .unwrap()
        .into_inner();
    let lease = tokio::time::timeout(Duration::from_secs(30), leases.next())
        .await
        .expect("a lease within 30 s")
        .expect("lease stream open")
        .unwrap();
    (lease, leases)
}

/// The status of a call that must fail with one.
fn status<T: std::fmt::Debug>(result: Result<T, ClientError>) -> tonic::Status {
    match result {
        Err(ClientError::Status(status)) => status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn denied<T: std::fmt::Debug>(result: Result<T, ClientError>, message: &str) {
    let status = status(result);
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert_eq!(status.message(), message);
}

fn assert_denied<T: std::fmt::Debug>(result: Result<T, tonic::Status>, message: &str) {
    denied(result.map_err(ClientError::Status), message);
}

/// A device token submits and reads nothing; a worker token cannot submit or read; an unknown
/// token is UNAUTHENTICATED; a token over its rate limit is RESOURCE_EXHAUSTED, per call and
/// per streamed job; a worker token acts only as the worker it registered, a completion from
/// a worker without the lease is not counted while the holder's is, and a malformed result
/// is refused; `symctl`
/// prints the refusal and exits 1; SIGHUP reloads the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_does_only_what_it_may() {
    let (cluster, tokens) = cluster_with_tokens(
        0,
        &[
            ("demo-app", DEVICE, "device"),
            ("ingest-svc", INGEST, "ingest"),
            ("worker-1", WORKER_1, "worker"),
            ("worker-2", WORKER_2, "worker"),
            // One call per 1,000 s after a burst of 3: the fourth call is refused.
            ("limited", LIMITED, "device\nrate = 0.001\nburst = 3"),
            (
                "limited-stream",
                LIMITED_STREAM,
                "device\nrate = 0.001\nburst = 3",
            ),
        ],
    )
    .await;
    let path = tokens.path().join("tokens.toml");
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();

    // device: submits (twice: idempotent), reads nothing, sees only where the leader is.
    let mut device = Client::connect(&cluster.endpoint, DEVICE).await.unwrap();
    let submitted = device.submit_native("d-1", report.clone()).await.unwrap();
    assert!(submitted.created && submitted.same_report);
    let retried = device.submit_native("d-1", report.clone()).await.unwrap();
    assert!(!retried.created && retried.same_report);
    let read_denied = "token \"demo-app\" has role device; reading jobs needs ingest or admin";
    denied(device.job("d-1").await, read_denied);
    denied(device.wait("d-1").await, read_denied);
    assert_denied(
        device
            .ingest()
            .list_groups(api::ListGroupsRequest {
                page_size: 10,
                project: String::new(),
                call_trees: false,
                kind: String::new(),
                ..Default::default()
            })
            .await,
        "token \"demo-app\" has role device; listing crash groups needs ingest or admin",
    );
    let watched = device
        .submit_stream()
        .submit(
            symcluster_client::native_spec("d-2", &report).unwrap(),
            true,
        )
        .await;
    let refusal = status(watched.map(|_| ()));
    assert_eq!(refusal.code(), tonic::Code::PermissionDenied);
    let status_seen = device
        .admin()
        .cluster_status(api::ClusterStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert!(status_seen.from_leader);
    assert!(status_seen.masters.is_empty() && status_seen.workers.is_empty());
    let out = std::process::Command::new(symcluster_loadtest::cluster::bin("symctl"))
        .args([
            "job",
            "--master",
            &cluster.endpoint,
            "--token",
            DEVICE,
            "d-1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(read_denied), "{stderr}");

    // Rate limits: connecting takes a call (the leader lookup), then two submits; the third is
    // refused. On a stream, the call takes one and each job one.
    let mut limited = Client::connect(&cluster.endpoint, LIMITED).await.unwrap();
    limited.submit_native("l-1", report.clone()).await.unwrap();
    limited.submit_native("l-2", report.clone()).await.unwrap();
    let refused = limited.submit_native("l-3", report.clone()).await;
    // The wait the master asks for, as the clients' retry reads it.
    let pushback =
        |r: &Result<(), ClientError>| symcluster_client::retry::pushback(r.as_ref().unwrap_err());
    let refused = refused.map(|_| ());
    assert_eq!(pushback(&refused), Some(std::time::Duration::from_secs(1)));
    let over = status(refused);
    assert_eq!(over.code(), tonic::Code::ResourceExhausted);
    assert_eq!(
        over.message(),
        "token \"limited\" is over its rate limit of 0.001 calls per second (burst 3)"
    );
    let streaming = Client::connect(&cluster.endpoint, LIMITED_STREAM)
        .await
        .unwrap()
        .submit_stream();
    let spec = |id: &str| symcluster_client::native_spec(id, &report).unwrap();
    streaming.submit(spec("s-1"), false).await.unwrap();
    let refused = streaming.submit(spec("s-2"), false).await.map(|_| ());
    // Also through the stream (`SubmitRefused.retry_after_ms`).
    assert_eq!(pushback(&refused), Some(std::time::Duration::from_secs(1)));
    let over = status(refused);
    assert_eq!(over.code(), tonic::Code::ResourceExhausted);

    // Unknown token.
    let unknown = status(
        Client::connect(&cluster.endpoint, "guess")
            .await
            .map(|_| ()),
    );
    assert_eq!(unknown.code(), tonic::Code::Unauthenticated);

    // worker tokens: no submit, no reads; each acts only as the worker it registered.
    let w1 = Client::connect(&cluster.endpoint, WORKER_1).await.unwrap();
    let mut w2 = Client::connect(&cluster.endpoint, WORKER_2).await.unwrap();
    let not_ingest =
        "token \"worker-2\" has role worker; the Ingest service needs device or ingest or admin";
    denied(w2.submit_native("w-1", report.clone()).await, not_ingest);
    denied(w2.job("d-1").await, not_ingest);
    let register = |id: &str| api::RegisterRequest {
        worker_id: id.to_owned(),
        slots: 1,
        prefetch: 0,
    };
    w1.worker_api().register(register("w1")).await.unwrap();
    w2.worker_api().register(register("w2")).await.unwrap();
    assert_denied(
        w2.worker_api().register(register("w1")).await,
        "worker \"w1\" is registered by token \"worker-1\", not \"worker-2\"",
    );
    assert_denied(
        w2.worker_api()
            .lease_jobs(api::LeaseJobsRequest {
                worker_id: "w1".into(),
            })
            .await,
        "worker \"w1\" was registered by token \"worker-1\", not \"worker-2\"",
    );
    let (lease, _leases) = first_lease(&w1, "w1").await;
    let job = lease.job.unwrap();
    // Workers know a job by its id inside the cluster: `<project>/<job id>`.
    assert_eq!(
        (job.job_id.as_str(), job.project.as_str(), lease.attempt),
        ("demo/d-1", "demo", 1)
    );
    let result = br#"{"status":"completed","threads":[]}"#.to_vec();
    let complete = |worker: &str| api::CompleteJobRequest {
        worker_id: worker.to_owned(),
        job_id: "demo/d-1".into(),
        attempt: 1,
        result_json: result.clone(),
        group: None,
        result_zstd: Vec::new(),
        missing: Vec::new(),
        call_tree: Vec::new(),
        facets: None,
    };
    assert_denied(
        w2.worker_api().complete_job(complete("w1")).await,
        "worker \"w1\" was registered by token \"worker-1\", not \"worker-2\"",
    );
    let mut malformed = complete("w1");
    malformed.result_json = b"{\"status\": trunc".to_vec();
    let refused = w1.worker_api().complete_job(malformed).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with("result_json is not a JSON object: "),
        "{}",
        refused.message()
    );
    let stolen = w2.worker_api().complete_job(complete("w2")).await.unwrap();
    assert!(!stolen.into_inner().accepted, "w2 holds no lease on d-1");

    // The same rules over `ReportOutcomes`, one answer per outcome: a refusal answers that
    // outcome and the call goes on.
    let outcome = |id: u64, request: api::CompleteJobRequest| api::OutcomeRequest {
        id,
        outcome: Some(api::outcome_request::Outcome::Complete(request)),
        traceparent: String::new(),
    };
    let answers = report_outcomes(
        &w2,
        vec![outcome(1, complete("w1")), outcome(2, complete("w2"))],
    )
    .await;
    assert_eq!(answers[0].code, tonic::Code::PermissionDenied as i32);
    assert_eq!(
        answers[0].message,
        "worker \"w1\" was registered by token \"worker-1\", not \"worker-2\""
    );
    assert_eq!(
        (answers[1].code, answers[1].accepted),
        (0, false),
        "w2 holds no lease on d-1"
    );
    let mut malformed = complete("w1");
    malformed.result_json = b"{\"status\": trunc".to_vec();
    let answers =
        report_outcomes(&w1, vec![outcome(7, malformed), outcome(8, complete("w1"))]).await;
    assert_eq!(answers[0].code, tonic::Code::InvalidArgument as i32);
    assert!(
        answers[0]
            .message
            .starts_with("result_json is not a JSON object: "),
        "{}",
        answers[0].message
    );
    assert_eq!((answers[1].code, answers[1].accepted), (0, true));
    let again = report_outcomes(&w1, vec![outcome(9, complete("w1"))]).await;
    assert_eq!(
        (again[0].code, again[0].accepted),
        (0, false),
        "a job completes once"
    );

    // ingest: reads the job as w1 completed it, once.
    let mut ingest = Client::connect(&cluster.endpoint, INGEST).await.unwrap();
    let job = ingest.job("d-1").await.unwrap();
    assert_eq!(job.state, api::JobState::Completed as i32);
    assert_eq!((job.attempts, job.worker_id.as_str()), (1, "w1"));
    assert_eq!(job.result_json, result);
    // A device resubmitting a finished job's id learns only whether the master holds this very
    // report under it: nothing of the job's state, result, error or group.
    let again = device.submit_native("d-1", report.clone()).await.unwrap();
    assert!(!again.created && again.same_report);
    assert_eq!(
        again.job.unwrap(),
        api::Job {
            project: "demo".into(),
            job_id: "d-1".into(),
            ..Default::default()
        }
    );
    // Another report under that id (another device chose it): the master does not hold it.
    let mut other = report.clone();
    other.extend_from_slice(b"\n");
    let taken = device.submit_native("d-1", other).await.unwrap();
    assert!(!taken.created && !taken.same_report);

    // SIGHUP: the file now has another device token; the old one is refused.
    write_tokens(&path, &[("demo-app-2", "device-2-secret", "device")]);
    let pid = cluster.masters[0].pid().unwrap() as i32;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut renewed = loop {
        match Client::connect(&cluster.endpoint, "device-2-secret").await {
            Ok(client) => break client,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("the reloaded token was not accepted within 20 s: {e}"),
        }
    };
    assert!(
        renewed
            .submit_native("d-3", report.clone())
            .await
            .unwrap()
            .created
    );
    let old = status(device.submit_native("d-4", report).await.map(|_| ()));
    assert_eq!(old.code(), tonic::Code::Unauthenticated);
}

/// Sends `requests` on one `ReportOutcomes` call and returns every answer, ordered by id.
async fn report_outcomes(
    client: &Client,
    requests: Vec<api::OutcomeRequest>,
) -> Vec<api::OutcomeResponse> {
    let ids: Vec<u64> = requests.iter().map(|r| r.id).collect();
    let mut answers = client
        .worker_api()
        .report_outcomes(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut got = Vec::new();
    while let Some(answer) = tokio::time::timeout(Duration::from_secs(30), answers.next())
        .await
        .expect("an answer within 30 s")
    {
        got.push(answer.unwrap());
    }
    got.sort_by_key(|a| a.id);
    assert_eq!(
        got.iter().map(|a| a.id).collect::<Vec<_>>(),
        ids,
        "one answer per outcome"
    );
    got
}

/// A lease belongs to the token of the worker it was granted to, in the replicated index: after
/// the leader dies, the new leader (which has seen no registration yet) refuses another worker
/// token's completion of it and its registration under the holder's worker id, and takes the
/// holder's completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_completed_only_by_its_workers_token_across_a_failover() {
    let (mut cluster, _tokens) = cluster_with_tokens_and(
        0,
        &[
            ("ingest-svc", INGEST, "ingest"),
            ("worker-1", WORKER_1, "worker"),
            ("worker-2", WORKER_2, "worker"),
        ],
        MasterOptions {
            masters: 3,
            ..MasterOptions::default()
        },
    )
    .await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut ingest = Client::connect(&cluster.endpoint, INGEST).await.unwrap();
    ingest.submit_native("f-1", report).await.unwrap();
    let w1 = Client::connect(&cluster.endpoint, WORKER_1).await.unwrap();
    w1.worker_api()
        .register(api::RegisterRequest {
            worker_id: "w1".into(),
            slots: 1,
            prefetch: 0,
        })
        .await
        .unwrap();
    let (lease, _leases) = first_lease(&w1, "w1").await;
    assert_eq!(lease.job.unwrap().job_id, "demo/f-1");
    // The lease stream stays open (a closed one hands the job back) until its master dies.

    let leader = cluster.wait_for_leader().await;
    // Every master has applied the lease (a follower that applied it only once leading would
    // hand it back, w1 being unknown to it).
    for id in (1..=3).filter(|id| *id != leader) {
        assert!(
            crate::replication::wait_until_applied(&cluster, id, 1, |s| s.jobs_running).await,
            "master {id} did not apply the lease"
        );
    }
    cluster.kill_master(leader);
    let new_leader = cluster.wait_for_leader().await;
    assert_ne!(new_leader, leader);
    let complete = |worker: &str| api::CompleteJobRequest {
        worker_id: worker.to_owned(),
        job_id: "demo/f-1".into(),
        attempt: lease.attempt,
        result_json: br#"{"status":"completed","threads":[]}"#.to_vec(),
        ..Default::default()
    };
    // Straight to the new leader: the clients' failover is not under test.
    let endpoint = cluster.masters[new_leader as usize - 1].endpoint();
    let w2 = Client::connect(&endpoint, WORKER_2).await.unwrap();
    let stolen = w2.worker_api().complete_job(complete("w1")).await;
    assert_denied(
        stolen,
        "job \"demo/f-1\" is leased to token \"worker-1\", not \"worker-2\"",
    );
    // Nor can it take w1's id on the new leader before w1 registers there again.
    let squatted = w2
        .worker_api()
        .register(api::RegisterRequest {
            worker_id: "w1".into(),
            slots: 1,
            prefetch: 0,
        })
        .await;
    assert_denied(
        squatted,
        "worker \"w1\" is registered by token \"worker-1\", not \"worker-2\"",
    );
    let w1 = Client::connect(&endpoint, WORKER_1).await.unwrap();
    let kept = w1.worker_api().complete_job(complete("w1")).await.unwrap();
    assert!(kept.into_inner().accepted, "the holder's completion counts");
    let job = ingest.job("f-1").await.unwrap();
    assert_eq!(job.state, api::JobState::Completed as i32);
}

/// With `--peer-token`, the masters' Raft transport admits that token only: the masters
/// replicate with it, and an admin token's `Peer/Step` (which could step a master's Raft, or send
/// it a snapshot that replaces its index) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_transport_admits_only_the_peer_token() {
    use symcluster_client::BearerToken;
    use symcluster_proto::cluster::v1::{RaftBatch, peer_client::PeerClient};

    const PEER: &str = "between-masters-secret";
    let cluster = Cluster::start(
        0,
        MasterOptions {
            masters: 3,
            args: vec!["--peer-token".into(), PEER.into()],
            ..MasterOptions::default()
        },
    )
    .await;
    let leader = cluster.wait_for_leader().await;
    let report = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let mut admin = cluster.client().await;
    admin.submit_native("p-1", report).await.unwrap();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    assert!(
        crate::replication::wait_until_applied(&cluster, follower, 1, |s| s.queue_depth).await,
        "the job was not replicated over the peer token"
    );

    let step = |token: &'static str| {
        let endpoint = cluster.masters[follower as usize - 1].endpoint();
        async move {
            let channel = tonic::transport::Endpoint::from_shared(endpoint)
                .unwrap()
                .connect()
                .await
                .unwrap();
            PeerClient::with_interceptor(channel, BearerToken::new(token).unwrap())
                .step(RaftBatch {
                    from: leader,
                    messages: Vec::new(),
                })
                .await
        }
    };
    assert_denied(
        step(symcluster_loadtest::cluster::TOKEN).await,
        "token \"admin\" has role admin; the masters' Raft transport needs peer",
    );
    step(PEER)
        .await
        .expect("the peer token reaches the transport");
}

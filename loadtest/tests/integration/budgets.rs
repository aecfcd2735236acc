//! A device token is public (it ships in every copy of the app): whatever it sends, three real
//! masters stay within their memory, refuse what is over a budget with RESOURCE_EXHAUSTED and a
//! retry pushback (a report over the device maximum with OUT_OF_RANGE), keep serving ingest tokens, and a follower killed during the attack
//! restarts within the same memory and catches up, losing no accepted job.
//!
//! Reproduced first: before device budgets, one master accepted 40 JS jobs of 15 MiB from a
//! device token in 9 s and went from 25 to 1,548 MiB (992 MiB in this session's run), and came
//! back at 355 MiB after SIGKILL. The attack here runs with the budgets set small by flags.

use std::time::Duration;

use symcluster_client::{Client, ClientError, api};
use symcluster_loadtest::cluster::{MasterOptions, repo};
use symcluster_loadtest::procstat::peak_rss_mib;

use crate::replication::wait_until_applied;
use crate::tokens::cluster_with_tokens_and;

const DEVICE: &str = "budget-device-secret";
const INGEST: &str = "budget-ingest-secret";
/// `--device-max-report` of the test.
const MAX_REPORT: usize = 1 << 20;
/// Peak resident memory allowed to each master, MiB: its base (~30), the device calls in
/// flight (4 × ~1 MiB, a few copies each), at most 64 MiB of uncommitted log, 64 MiB of log
/// kept in memory and 64 MiB of index cache.
const BUDGET_MIB: f64 = 320.0;

/// What one device call came back with.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Answer {
    Accepted,
    /// OUT_OF_RANGE for a report over the device maximum.
    TooLarge,
    /// RESOURCE_EXHAUSTED with a retry pushback (rate, bytes, calls in flight, log).
    RetryLater,
}

/// A JS stack of `len` bytes that compresses badly (hex of a xorshift sequence).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(format!("{x:016x}").as_bytes());
    }
    out.truncate(len);
    out
}

/// The refusal of a report over the device maximum, for a request of `declared` bytes.
fn too_large(declared: usize) -> String {
    format!(
        "a {declared}-byte request is larger than a device token may send ({} bytes: a report \
         of at most {MAX_REPORT} bytes)",
        MAX_REPORT + (64 << 10)
    )
}

/// 32 concurrent device callers (eight HTTP/2 streams on each of four connections), each making
/// `calls` submits of incompressible JS stacks at the maximum size, every third one over it;
/// the jobs are `attack-<first>` on.
async fn attack(endpoint: &str, first: u64, calls: u64) -> Vec<(Answer, u64)> {
    let mut tasks = tokio::task::JoinSet::new();
    for connection in 0..4u64 {
        let client = Client::connect(endpoint, DEVICE).await.unwrap();
        for caller in 0..8u64 {
            let mut client = client.clone();
            tasks.spawn(async move {
                let mut answers = Vec::new();
                for call in 0..calls {
                    let n = first + (connection * 8 + caller) * calls + call;
                    let len = if n % 3 == 2 {
                        3 * MAX_REPORT
                    } else {
                        MAX_REPORT
                    };
                    let js = api::JsJob {
                        stack: noise(len, n + 1),
                        debug_id: "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d".into(),
                        ..Default::default()
                    };
                    let answer = tokio::time::timeout(
                        Duration::from_secs(60),
                        client.submit_js(&format!("attack-{n}"), js),
                    )
                    .await
                    .expect("every call is answered within 60 s");
                    let answer = match answer {
                        Ok(response) => {
                            assert!(response.created, "attack-{n} is new");
                            assert_eq!(len, MAX_REPORT, "attack-{n} is over the maximum");
                            Answer::Accepted
                        }
                        Err(ClientError::Status(status))
                            if status.code() == tonic::Code::OutOfRange =>
                        {
                            // Refused at the message's length prefix: the declared length.
                            let declared = status
                                .message()
                                .strip_prefix("a ")
                                .and_then(|m| m.split_once('-'))
                                .and_then(|(n, _)| n.parse::<usize>().ok())
                                .unwrap_or_else(|| panic!("{status:?}"));
                            assert_eq!(status.message(), too_large(declared));
                            assert!(len > MAX_REPORT && declared > len, "{status:?}");
                            Answer::TooLarge
                        }
                        Err(ClientError::Status(status))
                            if status.code() == tonic::Code::ResourceExhausted =>
                        {
                            // The log's pushback, or a device budget's.
                            let expected = if status.message().contains("not yet committed") {
                                "500"
                            } else {
                                "1000"
                            };
                            assert_eq!(
                                status
                                    .metadata()
                                    .get(symcluster_client::retry::PUSHBACK_METADATA)
                                    .map(|v| v.to_str().unwrap()),
                                Some(expected),
                                "a budget refusal says when to retry: {status:?}"
                            );
                            Answer::RetryLater
                        }
                        Err(other) => {
                            panic!("attack-{n}: neither accepted nor exhausted: {other:?}")
                        }
                    };
                    answers.push((answer, n));
                }
                answers
            });
        }
    }
    let mut all = Vec::new();
    while let Some(answers) = tasks.join_next().await {
        all.extend(answers.unwrap());
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_token_cannot_exhaust_the_masters() {
    let (mut cluster, _tokens) = cluster_with_tokens_and(
        0,
        &[("app", DEVICE, "device"), ("ingest-svc", INGEST, "ingest")],
        MasterOptions {
            masters: 3,
            args: [
                "--device-max-report",
                "1MiB",
                "--device-max-in-flight",
                "4",
                "--device-bytes-per-second",
                "8MiB",
            ]
            .map(String::from)
            .to_vec(),
            ..MasterOptions::default()
        },
    )
    .await;
    let leader = cluster.wait_for_leader().await;
    let follower = (1..=3).find(|id| *id != leader).unwrap();

    let first = attack(&cluster.endpoint, 0, 3).await;
    // A follower killed during the attack, and started again while it goes on.
    cluster.kill_master(follower);
    let mut ingest = Client::connect(&cluster.endpoint, INGEST).await.unwrap();
    let demo = std::fs::read(repo().join("examples/ios-demo/DemoApp.crash")).unwrap();
    let (second, submitted) = tokio::join!(attack(&cluster.endpoint, 96, 3), async {
        ingest.submit_native("ingest-during-attack", demo).await
    });
    cluster.start_master(follower);
    let third = attack(&cluster.endpoint, 192, 2).await;
    assert!(
        submitted
            .expect("an ingest token submits during the attack")
            .created,
        "the ingest job is new"
    );

    let answers: Vec<_> = first.into_iter().chain(second).chain(third).collect();
    let count = |kind: Answer| answers.iter().filter(|(a, _)| *a == kind).count();
    let (accepted, too_large, later) = (
        count(Answer::Accepted),
        count(Answer::TooLarge),
        count(Answer::RetryLater),
    );
    println!(
        "{} device calls: {accepted} accepted, {too_large} refused as too large, {later} told to retry later",
        answers.len()
    );
    // 32 callers × 8 calls, job ids attack-0 to attack-255.
    assert_eq!(answers.len(), 32 * 8);
    let mut ids: Vec<u64> = answers.iter().map(|(_, n)| *n).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..256).collect::<Vec<_>>());
    // Every third one is over the maximum, refused at its length prefix before anything else.
    assert_eq!(too_large, (0..256).filter(|n| n % 3 == 2).count());
    assert!(accepted > 0, "some device reports get in");
    assert!(later > 0, "the budgets refuse some: {answers:?}");

    // The restarted follower holds every accepted job (all queued: no worker runs).
    let expected = accepted as u64 + 1;
    assert!(
        wait_until_applied(&cluster, follower, expected, |s| s.queue_depth).await,
        "the restarted follower did not catch up to {expected} queued jobs"
    );
    let mut peaks = Vec::new();
    for m in &cluster.masters {
        let peak = peak_rss_mib(m.pid().unwrap());
        println!("master {}: peak resident memory {peak:.0} MiB", m.id);
        peaks.push((m.id, peak));
    }
    for (id, peak) in peaks {
        assert!(
            peak > 0.0 && peak < BUDGET_MIB,
            "master {id} peaked at {peak:.0} MiB, over its budget of {BUDGET_MIB} MiB"
        );
    }
}

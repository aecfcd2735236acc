//! Kafka in, Kafka out, through a real Kafka-protocol broker (Tansu) and the real bridge
//! process: a bridge SIGKILLed half-way and restarted loses no report and makes no duplicate
//! job; malformed messages land on the dead-letter topic with their reason, and so do messages
//! whose result the broker refuses for good.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message};
use symcluster_loadtest::cluster::{Cluster, MasterOptions};
use symcluster_loadtest::kafka::{BridgeTopics, Tansu, start_bridge, start_bridge_with};

use crate::support::{absent_metrics, dashboard_metrics, fixture, http_get, upload_dsyms};

const REPORTS: usize = 1_000;

fn consumer(brokers: &str, group: &str, topic: &str) -> StreamConsumer {
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

fn header<'a>(message: &'a impl Message, name: &str) -> Option<&'a str> {
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| std::str::from_utf8(h.value?).ok())
}

/// Produces `report` to `topic` as a native report (header `symcluster-kind: native`) under
/// `key`; where it landed, `topic:partition:offset`.
async fn produce_native(
    producer: &FutureProducer,
    topic: &str,
    key: Option<&str>,
    report: &[u8],
) -> String {
    let mut record = FutureRecord::<str, [u8]>::to(topic)
        .payload(report)
        .headers(OwnedHeaders::new().insert(Header {
            key: "symcluster-kind",
            value: Some("native"),
        }));
    if let Some(key) = key {
        record = record.key(key);
    }
    let delivered = producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .expect("produce");
    format!("{topic}:{}:{}", delivered.partition, delivered.offset)
}

/// A cluster with one worker and CrashProbe's dSYMs, a Tansu broker, and the bridge's topics
/// made there (`<prefix>reports` with `input_partitions`, `<prefix>results`,
/// `<prefix>dead-letter`).
async fn cluster_and_broker(prefix: &str, input_partitions: u32) -> (Cluster, Tansu, BridgeTopics) {
    let cluster = Cluster::start(1, MasterOptions::default()).await;
    upload_dsyms(&cluster, &[fixture("crashprobe/release/dSYMs")]);
    let tansu = Tansu::start(cluster.dir.path());
    let topics = BridgeTopics {
        input: format!("{prefix}reports"),
        output: format!("{prefix}results"),
        dead_letter: format!("{prefix}dead-letter"),
        group: "symcluster-bridge".into(),
    };
    tansu.create_topic(&topics.input, input_partitions);
    tansu.create_topic(&topics.output, 1);
    tansu.create_topic(&topics.dead_letter, 1);
    (cluster, tansu, topics)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_killed_half_way_loses_and_duplicates_nothing() {
    let (cluster, tansu, topics) = cluster_and_broker("", 2).await;

    // 1,000 CrashProbe reports (as the SDK's events arrive: one per message, no headers but the
    // kind), and two messages that cannot be jobs.
    let reports: Vec<Vec<u8>> = std::fs::read_dir(fixture("crashprobe/release/arm64"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", tansu.brokers())
        .create()
        .expect("producer");
    let mut expected = BTreeSet::new();
    for i in 0..REPORTS {
        let key = format!("device-{}", i % 37);
        let source = produce_native(
            &producer,
            &topics.input,
            Some(&key),
            &reports[i % reports.len()],
        )
        .await;
        expected.insert(format!("kafka:{source}"));
    }
    let mut malformed = BTreeMap::new();
    for (kind, payload, reason) in [
        (
            "native",
            &b""[..],
            "the message has no report (empty value)",
        ),
        (
            "banana",
            &b"{}"[..],
            "header symcluster-kind: \"banana\" is not `native` or `js`",
        ),
    ] {
        let record = FutureRecord::<str, [u8]>::to(&topics.input)
            .payload(payload)
            .headers(OwnedHeaders::new().insert(Header {
                key: "symcluster-kind",
                value: Some(kind),
            }));
        let delivered = producer
            .send(record, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        malformed.insert(
            format!(
                "{}:{}:{}",
                topics.input, delivered.partition, delivered.offset
            ),
            reason,
        );
    }
    assert_eq!(expected.len(), REPORTS);

    // The bridge runs until half the results are out, is SIGKILLed, and a second one (same
    // consumer group) takes over from the last committed offsets.
    let (mut first, _) = start_bridge(&cluster, &tansu, &topics, "bridge-1");
    let results = consumer(&tansu.brokers(), "test-reader", &topics.output);
    let mut seen = BTreeSet::new();
    let mut publications = 0usize;
    let mut grouped = 0usize;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut second = None;
    while seen.len() < REPORTS {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let message = tokio::time::timeout(remaining, results.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{} of {REPORTS} results after 180 s\n--- bridge-1\n{}\n{}",
                    seen.len(),
                    first.log(),
                    cluster.master_logs()
                )
            })
            .expect("consume results");
        let value: serde_json::Value =
            serde_json::from_slice(message.payload().expect("result payload")).expect("JSON");
        let job_id = value["job_id"].as_str().expect("job_id").to_owned();
        assert_eq!(message.key(), Some(job_id.as_bytes()), "keyed by job id");
        assert_eq!(value["status"], "completed", "{job_id}: {}", value["error"]);
        assert_eq!(header(&message, "symcluster-status"), Some("completed"));
        assert!(
            value["crash_group"].is_string() || value["crash_group"].is_null(),
            "{job_id}"
        );
        assert!(value["result"]["threads"].is_array(), "{job_id}");
        if value["crash_group"].is_string() {
            grouped += 1;
        }
        assert!(expected.contains(&job_id), "unexpected job {job_id}");
        publications += 1;
        seen.insert(job_id);
        if seen.len() == REPORTS / 2 && second.is_none() {
            first.kill();
            second = Some(start_bridge(&cluster, &tansu, &topics, "bridge-2"));
        }
    }
    assert_eq!(seen, expected);
    let Some((_second, second_metrics)) = &second else {
        panic!("the bridge was killed half-way")
    };
    // The dashboard's bridge metrics exist (the lag once the bridge has read its committed
    // offsets, within seconds).
    let bridge_metrics: Vec<String> = dashboard_metrics()
        .into_iter()
        .filter(|n| n.starts_with("symcluster_bridge_"))
        .collect();
    assert!(bridge_metrics.len() >= 4, "{bridge_metrics:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exposition = http_get(second_metrics, "/metrics").await;
        let absent = absent_metrics(&bridge_metrics, &exposition);
        if absent.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not exported: {absent:?}\n{exposition}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(grouped > 0, "no result named its crash group");

    // Exactly one job per report in the master, all completed.
    let status = cluster.status().await;
    assert_eq!(
        (
            status.jobs_completed,
            status.jobs_failed,
            status.queue_depth,
            status.jobs_running
        ),
        (REPORTS as u64, 0, 0, 0),
        "{publications} results published for {REPORTS} reports"
    );

    // Both malformed messages are on the dead-letter topic, as they came, with their reason.
    let dead = consumer(&tansu.brokers(), "dead-letter-reader", &topics.dead_letter);
    let mut dead_letters = BTreeMap::new();
    while dead_letters.len() < malformed.len() {
        let message = tokio::time::timeout(Duration::from_secs(30), dead.recv())
            .await
            .expect("dead letters within 30 s")
            .expect("consume dead letters");
        dead_letters.insert(
            header(&message, "symcluster-source").unwrap().to_owned(),
            header(&message, "symcluster-reason").unwrap().to_owned(),
        );
    }
    assert_eq!(
        dead_letters,
        malformed
            .into_iter()
            .map(|(k, v)| (k, v.to_owned()))
            .collect::<BTreeMap<_, _>>()
    );
}

/// A result the producer refuses for good (larger than its `message.max.bytes`, here set to
/// 2,000 bytes: a symbolicated CrashProbe report is larger) dead-letters its input message with
/// the reason, without the input's value when that is refused too, and the bridge goes on with
/// the partition. Before, it retried the result forever and held the partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_the_broker_refuses_for_good_is_dead_lettered_and_the_bridge_goes_on() {
    const MESSAGES: usize = 5;
    let (cluster, tansu, topics) = cluster_and_broker("big-", 1).await;
    let report = std::fs::read_dir(fixture("crashprobe/release/arm64"))
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .next()
        .unwrap();
    assert!(
        report.len() > 2_000,
        "the report itself is over the limit too"
    );
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", tansu.brokers())
        .create()
        .expect("producer");
    let mut sources = BTreeSet::new();
    for _ in 0..MESSAGES {
        sources.insert(produce_native(&producer, &topics.input, None, &report).await);
    }
    let (_bridge, _) = start_bridge_with(
        &cluster,
        &tansu,
        &topics,
        "bridge-small",
        &["message.max.bytes=2000"],
    );
    let dead = consumer(&tansu.brokers(), "dead-letter-reader", &topics.dead_letter);
    let mut dead_letters = BTreeSet::new();
    while dead_letters.len() < MESSAGES {
        let message = tokio::time::timeout(Duration::from_secs(120), dead.recv())
            .await
            .expect("every message dead-lettered within 120 s")
            .expect("consume dead letters");
        let reason = header(&message, "symcluster-reason").unwrap();
        assert!(
            reason.contains("was refused by the broker") && reason.contains("MessageSizeTooLarge"),
            "{reason}"
        );
        // The input's value was too large as well: left out, and said so.
        assert_eq!(message.payload().unwrap_or_default(), b"");
        let notes: Vec<&str> = message
            .headers()
            .unwrap()
            .iter()
            .filter(|h| h.key == "symcluster-reason")
            .filter_map(|h| std::str::from_utf8(h.value?).ok())
            .collect();
        assert!(notes.iter().any(|n| n.contains("is left out")), "{notes:?}");
        dead_letters.insert(header(&message, "symcluster-source").unwrap().to_owned());
    }
    assert_eq!(dead_letters, sources);
}

//! Kafka in, Kafka out, through a real Kafka-protocol broker (Tansu) and the real bridge
//! process: a bridge SIGKILLed half-way and restarted loses no report and makes no duplicate
//! job; malformed messages land on the dead-letter topic with their reason, and so do messages
//! whose result the broker refuses for good.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use symcluster_loadtest::cluster::{Cluster, MasterOptions};
use symcluster_loadtest::kafka::{BridgeTopics, Tansu, start_bridge, start_bridge_with};

use crate::support::{
    absent_metrics, dashboard_metrics, fixture, http_get, metric_value, upload_dsyms,
};

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

/// The partition and offset of the input message a job id (`kafka:<topic>:<partition>:<offset>`)
/// names.
fn source_of(job_id: &str) -> (i32, i64) {
    let mut parts = job_id.rsplitn(3, ':');
    let offset = parts.next().and_then(|o| o.parse().ok()).expect("offset");
    let partition = parts
        .next()
        .and_then(|p| p.parse().ok())
        .expect("partition");
    (partition, offset)
}

/// [`committed_offsets`] once two reads 300 ms apart agree (within 10 s): a commit request
/// already on its way when its bridge was killed has landed by then.
async fn settled_offsets(brokers: &str, topics: &BridgeTopics, partitions: i32) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = committed_offsets(brokers, topics, partitions);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = committed_offsets(brokers, topics, partitions);
        if now == last {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "the committed offsets kept moving: {now:?}"
        );
        last = now;
    }
}

/// The offsets the bridges' consumer group committed on the input topic's `partitions`
/// (0 where none).
fn committed_offsets(brokers: &str, topics: &BridgeTopics, partitions: i32) -> Vec<i64> {
    let reader: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", &topics.group)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(&topics.input, partition);
    }
    let committed = tokio::task::block_in_place(|| {
        reader
            .committed_offsets(list, Duration::from_secs(10))
            .expect("committed offsets")
    });
    (0..partitions)
        .map(|partition| {
            match committed
                .find_partition(&topics.input, partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(n)) => n,
                _ => 0,
            }
        })
        .collect()
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
            "header symcluster-kind: \"banana\" is not `native`, `js` or `jvm`",
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
    let mut grouped = 0usize;
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut second = None;
    let mut committed = Vec::new();
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
        seen.insert(job_id);
        if seen.len() == REPORTS / 2 && second.is_none() {
            first.kill();
            // Where the second bridge must start: the offsets the first committed. A commit
            // it sent just before the kill may still land: read until two reads agree.
            committed = settled_offsets(&tansu.brokers(), &topics, 2).await;
            second = Some(start_bridge(&cluster, &tansu, &topics, "bridge-2"));
        }
    }
    assert_eq!(seen, expected);
    let Some((_second, second_metrics)) = &second else {
        panic!("the bridge was killed half-way")
    };

    // The second bridge read again every report from the committed offsets on, no other, each
    // once: those the first had submitted as duplicates (their jobs exist), the rest as new
    // jobs; and it published a result for each.
    let uncommitted = expected
        .iter()
        .filter(|id| {
            let (partition, offset) = source_of(id);
            offset >= committed[partition as usize]
        })
        .count() as f64;
    assert!(
        uncommitted > 0.0,
        "the first bridge had committed every report"
    );
    let counters = |exposition: &str| {
        let messages = |outcome| {
            metric_value(
                exposition,
                "symcluster_bridge_messages_total",
                &[("outcome", outcome)],
            )
            .unwrap_or(0.0)
        };
        let published = metric_value(
            exposition,
            "symcluster_bridge_results_published_total",
            &[("status", "completed")],
        )
        .unwrap_or(0.0);
        (messages("submitted"), messages("duplicate"), published)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (submitted, redelivered, published) = loop {
        let exposition = http_get(second_metrics, "/metrics").await;
        let (submitted, redelivered, published) = counters(&exposition);
        if submitted + redelivered >= uncommitted && published >= uncommitted {
            break (submitted, redelivered, published);
        }
        assert!(
            Instant::now() < deadline,
            "bridge-2 handled {submitted} + {redelivered} of {uncommitted} uncommitted reports"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (submitted + redelivered, published),
        (uncommitted, uncommitted),
        "bridge-2: {submitted} submitted, {redelivered} redelivered, {published} published; \
         committed offsets {committed:?}"
    );
    // Every result on the output topic: a report below the committed offsets once (only the
    // first bridge read it), one above once or twice (the first may have published it too).
    let mut times: BTreeMap<String, usize> = BTreeMap::new();
    // The first bridge is dead, and the second one's publications were acknowledged before its
    // counters moved: a marker produced now comes after the last of them on the output's one
    // partition.
    let marker = FutureRecord::<str, [u8]>::to(&topics.output)
        .key("end-of-test")
        .payload(&b"{}"[..]);
    producer
        .send(marker, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .expect("produce the marker");
    let all = consumer(&tansu.brokers(), "test-reader-all", &topics.output);
    let mut total = 0usize;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), all.recv())
            .await
            .expect("every publication within 30 s")
            .expect("consume results");
        if message.key() == Some(&b"end-of-test"[..]) {
            break;
        }
        total += 1;
        let value: serde_json::Value =
            serde_json::from_slice(message.payload().expect("result payload")).expect("JSON");
        *times
            .entry(value["job_id"].as_str().expect("job_id").to_owned())
            .or_default() += 1;
    }
    let missing: Vec<&String> = expected
        .iter()
        .filter(|id| !times.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty() && times.len() == expected.len(),
        "{total} publications of {} jobs; not published: {missing:?}",
        times.len()
    );
    // More than one result per report only for those the first bridge had submitted and the
    // second read again.
    assert!(
        (REPORTS..=REPORTS + redelivered as usize).contains(&total),
        "{total} results published for {REPORTS} reports, {redelivered} read again"
    );
    for (id, n) in &times {
        let (partition, offset) = source_of(id);
        let most = if offset >= committed[partition as usize] {
            2
        } else {
            1
        };
        assert!(
            (1..=most).contains(n),
            "{id} published {n} times (committed {committed:?})"
        );
    }
    eprintln!(
        "kafka: {total} results published for {REPORTS} reports; {uncommitted} read again by \
         bridge-2 from offsets {committed:?} ({redelivered} already submitted)"
    );
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
        "one job per report"
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

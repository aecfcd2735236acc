//! A real Kafka-protocol broker for tests: Tansu (`tansu broker`, Apache-2.0, installed by
//! `scripts/test.sh` with `cargo install tansu`), in-memory storage, on a free loopback port;
//! and the Kafka bridge started against it. Both are killed when their guards drop.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{Cluster, Proc, TOKEN, bin, free_port};

/// A Tansu broker.
pub struct Tansu {
    proc: Proc,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Tansu {
    /// Starts a broker with in-memory storage, logging to `dir/tansu.log`; waits until it takes
    /// connections.
    pub fn start(dir: &Path) -> Self {
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let log = dir.join("tansu.log");
        let child = Command::new("tansu")
            .args(["broker", "--listener-url", &url])
            .args(["--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start tansu (cargo install tansu; see scripts/test.sh)");
        let tansu = Tansu {
            proc: Proc {
                child,
                name: "tansu".into(),
                log,
            },
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen:\n{}",
                tansu.proc.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        tansu
    }

    /// `127.0.0.1:port`, for `bootstrap.servers`.
    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Creates `topic` with `partitions` partitions.
    pub fn create_topic(&self, topic: &str, partitions: u32) {
        let out = Command::new("tansu")
            .args(["topic", "create", topic])
            .args(["--broker", &format!("tcp://127.0.0.1:{}", self.port)])
            .args(["--partitions", &partitions.to_string()])
            .output()
            .expect("run tansu topic create");
        assert!(
            out.status.success(),
            "tansu topic create {topic}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Topics and consumer group of a bridge.
#[derive(Debug, Clone)]
pub struct BridgeTopics {
    /// Raw reports.
    pub input: String,
    /// Results.
    pub output: String,
    /// Dead letters.
    pub dead_letter: String,
    /// Consumer group.
    pub group: String,
}

/// Starts `symcluster-kafka-bridge` between `tansu` and `cluster`'s masters; `name` names its
/// log (`<cluster dir>/<name>.log`). Returns the process and its metrics address.
pub fn start_bridge(
    cluster: &Cluster,
    tansu: &Tansu,
    topics: &BridgeTopics,
    name: &str,
) -> (Proc, String) {
    start_bridge_with(cluster, tansu, topics, name, &[])
}

/// [`start_bridge`] with more librdkafka properties (`key=value`, each a `--kafka-option`).
pub fn start_bridge_with(
    cluster: &Cluster,
    tansu: &Tansu,
    topics: &BridgeTopics,
    name: &str,
    kafka_options: &[&str],
) -> (Proc, String) {
    let metrics = format!("127.0.0.1:{}", free_port());
    let log = cluster.dir.path().join(format!("{name}.log"));
    let child = Command::new(bin("symcluster-kafka-bridge"))
        .args(["--brokers", &tansu.brokers()])
        .args(["--group", &topics.group])
        .args(["--input-topic", &topics.input])
        .args(["--output-topic", &topics.output])
        .args(["--dead-letter-topic", &topics.dead_letter])
        .args(["--master", &cluster.endpoint])
        .args(["--token", TOKEN])
        .args(["--metrics-listen", &metrics])
        // A killed bridge's partitions move to the next one after this session timeout (the
        // broker's minimum), not librdkafka's default 45 s.
        .args(["--kafka-option", "session.timeout.ms=6000"])
        .args(["--kafka-option", "heartbeat.interval.ms=1000"])
        .args(kafka_options.iter().flat_map(|o| ["--kafka-option", o]))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start symcluster-kafka-bridge");
    (
        Proc {
            child,
            name: name.to_owned(),
            log,
        },
        metrics,
    )
}

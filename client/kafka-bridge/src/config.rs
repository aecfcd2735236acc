//! The bridge's configuration: flags, each with an environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// symcluster Kafka bridge: raw reports from an input topic in, results to an output topic out.
#[derive(Debug, Clone, Parser)]
#[command(name = "symcluster-kafka-bridge", version, about)]
pub struct BridgeConfig {
    /// Log output (`--log-format text|json`).
    #[command(flatten)]
    pub log: symcluster_telemetry::LogArgs,
    /// Span export to an OpenTelemetry collector (`--otlp-endpoint`).
    #[command(flatten)]
    pub trace: symcluster_telemetry::TraceArgs,

    /// Kafka bootstrap servers, comma-separated `host:port`.
    #[arg(long, env = "SYMCLUSTER_KAFKA_BROKERS")]
    pub brokers: String,

    /// Consumer group: bridges of one group share the input partitions.
    #[arg(
        long,
        env = "SYMCLUSTER_KAFKA_GROUP",
        default_value = "symcluster-bridge"
    )]
    pub group: String,

    /// Topic of raw reports (see the crate docs for headers).
    #[arg(
        long,
        env = "SYMCLUSTER_KAFKA_INPUT_TOPIC",
        default_value = "symcluster-reports"
    )]
    pub input_topic: String,

    /// Topic results are published to, keyed by job id.
    #[arg(
        long,
        env = "SYMCLUSTER_KAFKA_OUTPUT_TOPIC",
        default_value = "symcluster-results"
    )]
    pub output_topic: String,

    /// Topic of messages that cannot become jobs, with the reason in header `symcluster-reason`.
    #[arg(
        long,
        env = "SYMCLUSTER_KAFKA_DEAD_LETTER_TOPIC",
        default_value = "symcluster-dead-letter"
    )]
    pub dead_letter_topic: String,

    /// More librdkafka settings, `key=value`, for both consumer and producer (e.g.
    /// `security.protocol=SASL_SSL`). Repeatable.
    #[arg(long = "kafka-option", env = "SYMCLUSTER_KAFKA_OPTIONS", value_delimiter = ',', value_parser = parse_option)]
    pub kafka_options: Vec<(String, String)>,

    /// The masters' gRPC endpoints, comma-separated (any member: the bridge follows the
    /// leader).
    #[arg(
        long,
        env = "SYMCLUSTER_MASTER",
        default_value = "http://127.0.0.1:7700"
    )]
    pub master: String,

    /// Bearer token for the master (an `ingest` or `admin` token).
    #[arg(long, env = "SYMCLUSTER_TOKEN", hide_env_values = true)]
    pub token: String,

    /// PEM CA certificate(s) of `https://` masters (default: the public roots).
    #[arg(long, env = "SYMCLUSTER_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// Project of messages without a `symcluster-project` header (default: the token's).
    #[arg(long, env = "SYMCLUSTER_PROJECT", default_value = "")]
    pub project: String,

    /// Messages handled at once (submitted and waiting for their results).
    #[arg(long, env = "SYMCLUSTER_BRIDGE_IN_FLIGHT", default_value_t = 256)]
    pub in_flight: usize,

    /// How often done offsets are committed (`1s`, `500ms`: humantime's syntax).
    #[arg(long, env = "SYMCLUSTER_BRIDGE_COMMIT_INTERVAL", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "1s")]
    pub commit_interval: Duration,

    /// Largest message value published (`900KB`; a bare number is bytes): a result message
    /// over it goes without the result body (`result_omitted` says so), a dead letter without
    /// the original value (a header says so). Keep it below the topics' `max.message.bytes`
    /// (1 MB by default). Held in bytes.
    #[arg(long = "max-message-size", alias = "max-message-bytes",
        env = "SYMCLUSTER_BRIDGE_MAX_MESSAGE_BYTES", value_name = "SIZE",
        value_parser = symcluster_telemetry::flags::bytes_usize, default_value = "900KB")]
    pub max_message_bytes: usize,

    /// On SIGTERM, how long messages in flight may take to finish before the bridge stops
    /// (their offsets stay uncommitted: the next consumer submits them again, deduplicated).
    #[arg(long, env = "SYMCLUSTER_BRIDGE_DRAIN_TIMEOUT", value_name = "DURATION", value_parser = symcluster_telemetry::flags::duration, default_value = "30s")]
    pub drain_timeout: Duration,

    /// Where to serve Prometheus metrics (`/metrics`) (`SYMCLUSTER_BRIDGE_METRICS_LISTEN`, its
    /// former variable, is still read, with a warning).
    #[arg(
        long,
        env = "SYMCLUSTER_METRICS_LISTEN",
        default_value = "127.0.0.1:9810"
    )]
    pub metrics_listen: SocketAddr,
}

fn parse_option(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("{s:?} is not key=value"))
}

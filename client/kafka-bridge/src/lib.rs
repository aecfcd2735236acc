//! The symcluster Kafka bridge: for ingestion pipelines that already carry raw reports on
//! Kafka. It consumes an input topic (SDK → Kafka), submits each report to the cluster, and
//! publishes each finished result to an output topic (→ the product side: crash lists,
//! alerts), with malformed messages on a dead-letter topic.
//!
//! - [`message`]: what an input message means (headers, job id from its position);
//! - [`output`]: the result message's JSON;
//! - [`offsets`]: which offsets may be committed (at-least-once, in order per partition);
//! - [`bridge`]: the loop: consume, submit, wait, publish, commit; drain on SIGTERM;
//! - [`metrics`]: Prometheus metrics (messages by outcome, results, in flight, lag, latency);
//! - [`config`]: flags and environment.
//!
//! Delivery: a message's offset is committed only after its result (or dead letter) is
//! published; a bridge killed between two commits makes the next consumer read those messages
//! again, and since the job id is the message's position, the master keeps one job each. The
//! output topic may then carry a result twice, under the same key (the job id).

#![deny(missing_docs)]

pub mod bridge;
pub mod config;
pub mod message;
pub mod metrics;
pub mod offsets;
pub mod output;

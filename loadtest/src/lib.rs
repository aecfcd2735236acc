//! Load generation and measurement (throughput, p50/p99 latency) for a symcluster deployment.
//!
//! Not built yet: this crate holds the place the cluster issue fills. The engine's own
//! micro-benchmark is `worker/engine/benches/native.rs`.

#![deny(missing_docs)]

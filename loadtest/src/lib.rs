//! Load generation and end-to-end harness for symcluster.
//!
//! [`cluster`] starts real local clusters (Garage S3, one or three masters, workers, as processes on
//! loopback) for the end-to-end tests in `tests/integration` and for the `symcluster-loadtest`
//! binary, which measures throughput, latency and CPU per job of each process ([`procstat`])
//! through the whole path, what a worker starting cold on a big dSYM pays
//! ([`cold_start`]), what keeping job bodies in the object store would cost
//! ([`body_store`]), and whether the replicated index keeps its promises under faults
//! ([`nemesis`]: random client calls, injected faults, the history checked), and what a run
//! measured against its targets ([`targets`]).

#![deny(missing_docs)]

pub mod body_store;
pub mod builds;
pub mod cgroup;
pub mod cluster;
pub mod cold_start;
pub mod failpoints;
pub mod images;
pub mod kafka;
pub mod nemesis;
pub mod network;
pub mod procstat;
pub mod small_disk;
pub mod targets;

//! The client library ingestion services link to talk to a symcluster master.
//!
//! Deliberately light: only the generated API (`symcluster-proto`) and tonic, no engine, no
//! storage. Today it re-exports the generated clients; the cluster issue adds connection set-up,
//! auth and retries.

#![deny(missing_docs)]

/// The generated gRPC clients and message types (`package symcluster.v1`).
pub use symcluster_proto::v1 as api;

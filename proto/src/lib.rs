//! The symcluster gRPC API.
//!
//! The `.proto` files under `proto/symcluster/v1/` are the source of truth; this crate holds the
//! Rust types and tonic client/server stubs generated from them. It does no I/O.
//!
//! - `jobs.proto`: jobs (native report or JS stack), their states and results;
//! - `ingest.proto`: the `Ingest` service ingestion services call (submit, get, watch);
//! - `worker.proto`: the `WorkerApi` service workers call (register, lease, complete, heartbeat);
//! - `admin.proto`: the `Admin` service operators read (cluster status).

/// Version 1 of the API (`package symcluster.v1`).
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("symcluster.v1");
}

/// The encoded `FileDescriptorSet` of the API, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("symcluster_descriptor");

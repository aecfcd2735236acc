//! The symcluster gRPC API.
//!
//! The `.proto` files under `proto/symcluster/v1/` are the source of truth; this crate holds the
//! Rust types and tonic client/server stubs generated from them. It does no I/O.
//!
//! - `jobs.proto`: jobs (native report or JS stack), their states and results;
//! - `ingest.proto`: the `Ingest` service ingestion services call (submit, get, watch);
//! - `worker.proto`: the `WorkerApi` service workers call (register, lease, complete, heartbeat);
//! - `uploads.proto`: the `Uploads` service build machines call (presigned uploads);
//! - `admin.proto`: the `Admin` service operators read (cluster status, masters and workers);
//! - `cluster/v1/`: internal to the masters: the replicated index (`index.proto`) and Raft's
//!   transport (`peer.proto`).
//!
//! [`report`] holds how a native report travels (plain or zstd) and its size limit;
//! [`result`] how a result travels compressed, and its limit; [`project`] what a project name
//! may be; [`missing`] how a missing debug file or source map is named.

mod frame;
pub mod missing;
pub mod project;
pub mod report;
pub mod result;

/// Version 1 of the API (`package symcluster.v1`).
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("symcluster.v1");
}

/// What the masters say among themselves (`package symcluster.cluster.v1`): the replicated
/// index's commands, records and snapshots (`index.proto`), and the Raft transport
/// (`peer.proto`). Not an API for clients.
pub mod cluster {
    /// Version 1 (`package symcluster.cluster.v1`).
    #[allow(missing_docs, clippy::all)]
    pub mod v1 {
        tonic::include_proto!("symcluster.cluster.v1");
    }
}

/// The largest HTTP/2 DATA frame every symcluster endpoint accepts
/// (`SETTINGS_MAX_FRAME_SIZE`, RFC 9113 §6.5.2), in bytes: 1 MiB.
///
/// HTTP/2's default is 16 KiB, and h2 writes each DATA frame with its own `writev`: a Raft
/// append of a few jobs (~23 KB each) went out as five frames per follower, a report lease as
/// two. With 1 MiB frames a message of up to 1 MiB is one frame and one system call. The
/// masters' servers, the Raft transport and the client library all advertise it; the peer sends
/// frames up to the smaller of what it wants and this (a peer that sets nothing keeps 16 KiB).
pub const HTTP2_MAX_FRAME_BYTES: u32 = 1 << 20;

/// The encoded `FileDescriptorSet` of the API, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("symcluster_descriptor");

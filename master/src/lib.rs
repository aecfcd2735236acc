//! The symcluster master: accepts jobs over gRPC, keeps the job/result index, and schedules
//! native and JS jobs onto workers with leases; three masters replicate their state with Raft.
//!
//! Not built yet: this crate holds the place the cluster issue fills. The API it will serve is
//! defined in `symcluster-proto`.

#![deny(missing_docs)]

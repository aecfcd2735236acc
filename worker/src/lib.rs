//! The symcluster worker: runs symbolication jobs with `symcluster-engine`, one per CPU core,
//! fetching debug files and source maps from S3 into disk and memory caches.
//!
//! Not built yet: this crate holds the place the cluster issue fills. The engine it will run is
//! `symcluster-engine` (`worker/engine`), which `symctl` already uses in-process.

#![deny(missing_docs)]

pub use symcluster_engine as engine;

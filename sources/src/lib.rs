//! Where symcluster's debug files and source maps live, and how to read and write them.
//!
//! One crate owns the bucket layout, as Sentry symbolicator's `symbolicator-sources` owns its
//! source layouts: the worker reads through it, `symctl upload` writes through it, the load
//! test fills buckets through it, and none of them builds a key by hand.
//!
//! - [`layout`]: object keys: per-project and shared prefixes ([`layout::Scope`]), native
//!   debug files by debug id (Sentry's unified layout), source maps by debug id or by
//!   release/dist/bundle;
//! - [`source`]: a [`Source`] (an S3 bucket through `aws-sdk-s3`, or a local directory with the
//!   same layout) with `fetch`, `exists` and `put`;
//! - [`download`]: big objects streamed to a file, bounded by their size, resumed with ranged
//!   GETs when cut;
//! - [`upload`]: presigned uploads (one PUT, or a resumable multipart upload) checked by
//!   SHA-256, for the masters' `Uploads` service;
//! - [`BucketArgs`]: the bucket flags the worker and `symctl` share.

pub mod download;
pub mod layout;
pub mod source;
pub mod upload;

pub use download::{DownloadLimits, Downloaded};
pub use layout::Scope;
pub use source::{FetchError, S3Settings, Source};

/// Where the bucket is: the flags the worker and `symctl upload` share. Credentials come from
/// the AWS environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).
#[derive(Debug, Clone, clap::Args)]
pub struct BucketArgs {
    /// S3 bucket holding debug files and source maps.
    #[arg(long, env = "SYMCLUSTER_S3_BUCKET")]
    pub s3_bucket: Option<String>,

    /// S3 endpoint URL (for S3-compatible servers such as Garage or MinIO).
    #[arg(long, env = "SYMCLUSTER_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// S3 region (must equal the server's region for request signing).
    #[arg(long, env = "SYMCLUSTER_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,

    /// Key prefix inside the bucket, before the layout's `projects/` and `shared/` (e.g.
    /// `symbols/` to share a bucket with other data).
    #[arg(long, env = "SYMCLUSTER_S3_PREFIX", default_value = "")]
    pub s3_prefix: String,
}

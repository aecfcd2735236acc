//! The symcluster symbolication engine.
//!
//! Turns raw native crash reports (addresses only) into function, file and line, the way
//! Apple's `atos` and Sentry's symbolicator do:
//!
//! 1. [`reports::parse_report`] reads any supported format (Apple `.crash` and `.ips`, KSCrash,
//!    Sentry events, symbolicator requests), detected from content, into a
//!    [`model::NativeReport`];
//! 2. [`symbolicate::symbolicate`] looks every frame up in SymCaches ([`symcache`]) that a
//!    [`symbolicate::SymCacheSource`] provides — [`local::LocalSymCaches`] for files on disk;
//! 3. the [`result::SymbolicationResult`] is printed as JSON or rendered back into Apple's formats
//!    by [`render`].
//!
//! The [`js`] module does the same for React Native JavaScript: minified or Hermes bytecode
//! positions back to original source through source maps; [`jvm`] for Java/Kotlin frames
//! obfuscated by ProGuard or R8, through their mapping files.
//!
//! The engine does no network I/O; the worker brings debug files from S3 and caches them.

#![deny(missing_docs)]

pub mod combined;
pub mod debug_files;
pub mod facets;
pub mod guard;
pub mod js;
pub mod jvm;
pub mod local;
pub mod minidump;
pub mod model;
pub mod names;
mod partial;
pub mod render;
pub mod reports;
pub mod result;
pub mod symbolicate;
pub mod symcache;

pub use facets::ReportFacets;
pub use local::LocalSymCaches;
pub use model::{Modules, NativeReport, ReportFormat, ReportKind};
pub use reports::{ReportError, parse_report, parse_report_with};
pub use result::SymbolicationResult;
pub use symbolicate::{
    ModuleLoad, SymCacheSource, image_lookups, referenced_images, symbolicate, symbolicate_owned,
};

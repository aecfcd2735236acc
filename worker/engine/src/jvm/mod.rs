//! Java/Kotlin (Android) stack traces: frames obfuscated by ProGuard or R8 back to the original
//! class, method, file and line, through the build's mapping file.
//!
//! 1. [`trace::parse_trace`] reads a `printStackTrace` text (also from logcat) or a Sentry
//!    event's exceptions into a [`JvmTrace`];
//! 2. [`mapping::JvmMapping::from_mapping_file`] prepares a `mapping.txt` once (a
//!    `ProguardCache`), found by its [`mapping::mapping_id`];
//! 3. [`retrace::retrace`] maps every exception class and frame, expanding inlined calls;
//! 4. [`render::java_text`] prints the result as Java (and ProGuard's `retrace`) would.
//!
//! The mapping file format, the mapping id and the retrace rules are the `proguard` crate's
//! (getsentry/rust-proguard, the code Sentry's symbolicator runs); this module reads traces,
//! chooses statuses and shapes the result.

pub mod mapping;
pub mod render;
pub mod result;
pub mod retrace;
pub mod trace;

pub use mapping::{JvmMapping, MappingError, mapping_id};
pub use result::{JvmExceptionResult, JvmFrameResult, JvmFrameStatus, JvmRetraceResult};
pub use retrace::{retrace, unmapped};
pub use trace::{JvmTrace, JvmTraceError, parse_trace};

//! One report, three layers: a React Native app's crash on Android as a Sentry event whose
//! exceptions hold JavaScript frames (Hermes or JSC, restored by source map), Java/Kotlin frames
//! (obfuscated by ProGuard/R8, retraced by mapping file) and native frames (addresses in the app's
//! `.so` files or the system's, symbolicated by SymCache), mixed in one stack or spread over
//! several exceptions.
//!
//! 1. [`event::parse_event`] reads the event into a [`CombinedReport`]: each frame is given its
//!    layer (the frame's `platform`, else what it holds: an `instruction_addr` is native, a
//!    column or a bundle file is JavaScript, a `module` (class) is Java), and the event names
//!    what each layer needs (the native images and mapping ids of `debug_meta.images`, the
//!    source maps by debug id or by `release`/`dist` and the bundle's file name);
//! 2. the caller brings those files (a worker from its caches; `symctl` from disk);
//! 3. [`restore::restore`] runs each layer's own engine over its frames (the native frames as
//!    one thread per exception through [`crate::symbolicate`], the JavaScript frames through
//!    [`crate::js::restore_frame`], the Java frames as one exception each through
//!    [`crate::jvm::retrace`]) and puts every frame back in its place: a
//!    [`CombinedResult`], each frame with its layer and status, a file that is missing named
//!    in the result (and its frames left as given) rather than failing the job.
//!
//! The event format is Sentry's (<https://develop.sentry.dev/sdk/data-model/event-payloads/>,
//! the stack trace and debug meta interfaces): what the React Native SDK sends.

pub mod event;
pub mod render;
pub mod restore;
pub mod result;

pub use event::{CombinedReport, EventError, Layer, SourceMapRef, parse_event};
pub use restore::{FileLoad, Sources, restore};
pub use result::{CombinedException, CombinedFrame, CombinedResult, FileStatus, LoadStatus};

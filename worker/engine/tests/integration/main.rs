//! Integration tests of the engine: real reports and real debug files in, exact frames out.
//!
//! Third-party fixtures are read from `../shared/fixtures` (beside the repository; override with
//! `SYMCLUSTER_FIXTURES`); the project's own generated example is in `examples/ios-demo`.

mod bad_input;
mod combined;
mod crashprobe;
mod demo;
mod facets;
mod formats;
mod js_bad_input;
mod js_demo;
mod js_metro;
mod jvm;
mod minidump;
mod modules;
mod partial;
mod support;
mod tombstone;

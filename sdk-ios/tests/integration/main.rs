//! The SDK on the host: a C program linking the static library is crashed for real (null
//! dereference, abort, stack overflow, a crash on another thread) and hangs for real; the reports
//! it writes are read by the engine, symbolicated against the program's own ELF debug info, and
//! sent to a real local cluster.

mod apm;
mod apm_groups;
mod apple_images;
mod capture;
mod delivery;
mod handler;
mod hang_trees;
mod support;

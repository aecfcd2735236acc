//! On-device capture of raw crash and hang reports for iOS apps (a static library with a C
//! header), feeding them to a symcluster master.
//!
//! Not built yet: this crate holds the place the SDK issue fills.

#![deny(missing_docs)]

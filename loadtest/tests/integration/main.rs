//! End-to-end tests: a real Garage S3 server, a real master and real workers (processes on
//! loopback), real gRPC. Uploads real debug files and source maps, submits real reports, and
//! checks the symbolicated frames; kills and drains workers, stops S3, kills and restarts masters (one, or
//! the leader or a follower of three).
//!
//! Needs the release binaries (`cargo build --release --bins`) and `garage` on PATH; both are
//! provided by `scripts/test.sh`.

mod backup;
mod budgets;
mod clock;
mod cluster_api;
mod combined;
mod disk_cache;
mod downloads;
mod drain;
mod failpoints;
mod faults;
mod first_answer;
mod jvm;
mod kafka;
mod late_files;
mod logs;
mod membership;
mod minidump;
mod modules;
mod nemesis;
mod partition;
mod projects;
mod replication;
mod shared_symcaches;
mod submit_stream;
mod support;
mod symbolication;
mod system_symbols;
mod tls;
mod tokens;
mod traces;
mod uploads;

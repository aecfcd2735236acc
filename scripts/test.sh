#!/usr/bin/env bash
# The test command (README, .ci/run): installs what a fresh machine lacks, then runs every test.
# Needs: the Rust toolchain (present on the machine), ../shared/fixtures beside the repo, and
# root (apt-get for protoc and iproute2; network namespaces for the partition test).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d ../shared/fixtures ] && [ -z "${SYMCLUSTER_FIXTURES:-}" ]; then
    echo "scripts/test.sh: ../shared/fixtures not found (set SYMCLUSTER_FIXTURES)" >&2
    exit 2
fi

# The end-to-end tests run a real S3-compatible server: Garage (built once, ~8 minutes on
# 2 cores, then reused from ~/.cargo/bin).
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v garage >/dev/null || ! garage --version 2>/dev/null | grep -q '2\.5\.0'; then
    cargo install garage --locked --version 2.5.0
fi

# The Kafka bridge's test runs a real Kafka-protocol broker: Tansu (Apache-2.0; in-memory
# storage needs its `dynostore` feature; ~10 minutes to build on 2 cores, then reused).
if ! command -v tansu >/dev/null || ! tansu --version 2>/dev/null | grep -q '0\.6\.0'; then
    cargo install tansu --locked --version 0.6.0 --features dynostore
fi

# raft-rs's message types are generated at build time with protoc 3.x (prost-codec); the
# master's own protos use the protoc that protoc-bin-vendored ships. The partition test needs
# `ip` (iproute2) and root. The clock test steps one master's wall clock with libfaketime
# (Debian's `faketime`, LD_PRELOADed into that master only).
if ! command -v protoc >/dev/null || ! command -v ip >/dev/null || ! command -v faketime >/dev/null; then
    apt-get update -qq && apt-get install -y -qq protobuf-compiler iproute2 faketime
fi

# The end-to-end tests start the release binaries as real processes. They are built together
# with the tests (`--tests`), so that the dev-dependencies' features are unified once and
# `cargo test` reuses every artifact: built without `--tests`, the binaries would get another
# feature set (chrono, getrandom, zerocopy...) and `cargo test` would compile the tree twice.
# The master is built with its failpoints (master/src/failpoints.rs), which the crash tests
# and the nemesis's slow-disk fault arm: the same feature for both commands, so that nothing
# is compiled twice. A build for production (`cargo build --release`) has none.
FEATURES=(--features symcluster-master/failpoints)
cargo build --workspace --release --locked --bins --lib --tests "${FEATURES[@]}"
cargo test --workspace --release --locked "${FEATURES[@]}"

# Dependency hygiene: advisories, licences, bans, sources (deny.toml; cargo-deny is installed
# when missing).
bash scripts/deny.sh

# deploy/: Kubernetes manifests, compose file, systemd units, launchd plist and dashboard,
# validated offline.
bash deploy/validate.sh

# The SDK's Apple backend (Mach, dyld) cannot be linked or run here: type-check it.
cargo check --release --locked -p symcluster-sdk-ios --features apple-typecheck

# Every parser of untrusted input under its fuzz target (nightly, cargo-fuzz; installed by the
# script when missing): the seeds, the stored regressions and a fixed-seed, fixed-count run, so
# that the same commit gets the same answer. Open-ended fuzzing, outside this command:
# `bash fuzz/run.sh SECONDS` (docs/development.md).
bash fuzz/run.sh --check

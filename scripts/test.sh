#!/usr/bin/env bash
# The test command (README, .ci/run): installs what a fresh machine lacks, then runs every test.
# Needs: the Rust toolchain (present on the machine), and ../shared/fixtures beside the repo.
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

# The end-to-end tests start the release binaries as real processes.
cargo build --workspace --release --locked --bins --lib
cargo test --workspace --release --locked

# The SDK's Apple backend (Mach, dyld) cannot be linked or run here: type-check it.
cargo check --release --locked -p symcluster-sdk-ios --features apple-typecheck

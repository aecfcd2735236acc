#!/usr/bin/env bash
# The test command (README, .ci/run): installs what a fresh machine lacks, then runs every test.
# Needs: the Rust toolchain (present on the machine), and ../shared/fixtures beside the repo.
set -euo pipefail
cd "$(dirname "$0")/.."

# Nothing beyond cargo is needed for the tests today: the generated fixtures under examples/
# are committed (their generators need clang/lld/llvm; see examples/*/README.md).
if [ ! -d ../shared/fixtures ] && [ -z "${SYMCLUSTER_FIXTURES:-}" ]; then
    echo "scripts/test.sh: ../shared/fixtures not found (set SYMCLUSTER_FIXTURES)" >&2
    exit 2
fi

cargo test --workspace --release --locked

#!/usr/bin/env bash
# Installs the reference tools the benchmarks compare against (not needed by the tests):
# - llvm-symbolizer (Debian package llvm) for benches/native.rs;
# - metro-symbolicate (npm, pinned) into target/reference-tools/ for benches/js.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v llvm-symbolizer >/dev/null; then
    apt-get update -qq && apt-get install -y -qq llvm
fi
dir=target/reference-tools
mkdir -p "$dir"
if [ ! -x "$dir/node_modules/.bin/metro-symbolicate" ]; then
    (cd "$dir" && npm install --no-audit --no-fund --silent metro-symbolicate@0.84.6)
fi
echo "reference tools ready: $(command -v llvm-symbolizer), $dir/node_modules/.bin/metro-symbolicate"

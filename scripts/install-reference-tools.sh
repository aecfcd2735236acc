#!/usr/bin/env bash
# Installs the reference tools the benchmarks compare against (not needed by the tests):
# - llvm-symbolizer (Debian package llvm) for benches/native.rs;
# - metro-symbolicate (npm, pinned) into target/reference-tools/ for benches/js.rs;
# - ProGuard's retrace (Debian proguard-cli: /usr/share/java/retrace.jar) and a JRE for
#   benches/jvm.rs;
# - minidump-stackwalk (rust-minidump's CLI) and dump_syms (Mozilla's Breakpad symbol writer),
#   pinned, from crates.io with cargo, for benches/minidump.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v llvm-symbolizer >/dev/null; then
    apt-get update -qq && apt-get install -y -qq llvm
fi
if ! command -v java >/dev/null || [ ! -f /usr/share/java/retrace.jar ]; then
    apt-get update -qq && apt-get install -y -qq default-jre-headless proguard-cli
fi
if ! command -v minidump-stackwalk >/dev/null; then
    cargo install --locked --no-default-features minidump-stackwalk --version 0.27.0
fi
if ! command -v dump_syms >/dev/null; then
    cargo install --locked dump_syms --version 2.3.9
fi
dir=target/reference-tools
mkdir -p "$dir"
if [ ! -x "$dir/node_modules/.bin/metro-symbolicate" ]; then
    (cd "$dir" && npm install --no-audit --no-fund --silent metro-symbolicate@0.84.6)
fi
echo "reference tools ready: $(command -v llvm-symbolizer), $dir/node_modules/.bin/metro-symbolicate, /usr/share/java/retrace.jar, $(command -v minidump-stackwalk), $(command -v dump_syms)"

#!/usr/bin/env bash
# Installs the reference tools the benchmarks compare against (not needed by the tests):
# - llvm-symbolizer (Debian package llvm) for benches/native.rs;
# - metro-symbolicate (npm, pinned) into target/reference-tools/ for benches/js.rs;
# - ProGuard's retrace (Debian proguard-cli: /usr/share/java/retrace.jar) and a JRE for
#   benches/jvm.rs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v llvm-symbolizer >/dev/null; then
    apt-get update -qq && apt-get install -y -qq llvm
fi
if ! command -v java >/dev/null || [ ! -f /usr/share/java/retrace.jar ]; then
    apt-get update -qq && apt-get install -y -qq default-jre-headless proguard-cli
fi
dir=target/reference-tools
mkdir -p "$dir"
if [ ! -x "$dir/node_modules/.bin/metro-symbolicate" ]; then
    (cd "$dir" && npm install --no-audit --no-fund --silent metro-symbolicate@0.84.6)
fi
echo "reference tools ready: $(command -v llvm-symbolizer), $dir/node_modules/.bin/metro-symbolicate, /usr/share/java/retrace.jar"

#!/usr/bin/env bash
# Builds BigApp, a production-sized arm64 iOS binary, and its dSYM (≥ 300 MB of DWARF) for the
# benchmarks (worker/engine/benches/native.rs uses it when present): generated C++
# (scripts/big_dsym.py: template-heavy compile units), compiled for arm64-apple-ios15.0 with
# clang, linked with ld64.lld, dSYM by dsymutil. The output is not committed:
#
#   target/big-dsym/BigApp           the binary
#   target/big-dsym/BigApp.dSYM/     its dSYM
#
# Needs clang, lld and llvm (Debian: apt-get install clang lld llvm; made with LLVM 14) and
# python3. About 15 minutes on 2 cores; a re-run recompiles only what changed.
#
# Usage: bash scripts/generate-big-dsym.sh [UNITS [DEPTH]]   (defaults: 400 units, depth 200)
set -euo pipefail
cd "$(dirname "$0")/.."

UNITS="${1:-400}"
DEPTH="${2:-200}"
OUT=target/big-dsym
find_tool() {
    for name in "$@" "$1-14" "$1-15" "$1-16"; do
        command -v "$name" >/dev/null && { command -v "$name"; return; }
    done
    echo "generate-big-dsym.sh: $1 not found (apt-get install clang lld llvm)" >&2
    exit 2
}
CLANGXX="$(find_tool clang++)"
LD64="$(find_tool ld64.lld)"
DSYMUTIL="$(find_tool dsymutil)"

python3 scripts/big_dsym.py "$OUT/src" "$UNITS" "$DEPTH"
mkdir -p "$OUT/obj"
# Where the DWARF says the sources were, independent of this checkout's location.
export CLANGXX OUT
ls "$OUT/src" | grep '\.cpp$' | xargs -P "$(nproc)" -I{} sh -c '
    src="$OUT/src/{}"; obj="$OUT/obj/{}.o"
    [ "$obj" -nt "$src" ] || "$CLANGXX" --target=arm64-apple-ios15.0 -std=c++17 -g -O1 \
        -fno-exceptions -fno-rtti -ftemplate-depth=2000 -nostdinc++ \
        -fdebug-prefix-map="$PWD/$OUT/src=/Users/dev/BigApp" -c "$src" -o "$obj"'
"$LD64" -arch arm64 -platform_version ios 15.0 15.0 -e _main -undefined dynamic_lookup \
    -o "$OUT/BigApp" "$OUT"/obj/*.o
rm -rf "$OUT/BigApp.dSYM"
"$DSYMUTIL" "$OUT/BigApp" -o "$OUT/BigApp.dSYM"
DWARF="$OUT/BigApp.dSYM/Contents/Resources/DWARF/BigApp"
echo "BigApp: $(du -h "$OUT/BigApp" | cut -f1) binary, $(du -h "$DWARF" | cut -f1) dSYM DWARF ($DWARF)"

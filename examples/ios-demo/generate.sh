#!/usr/bin/env bash
# Regenerates the native test fixtures in this directory from src/:
#
#   DemoApp.dSYM/        dSYM of the arm64 iOS binary (the crash reports point at its UUID)
#   DemoAppFat.dSYM/     fat dSYM (arm64 + x86_64 simulator); its arm64 slice is the same
#                        binary as DemoApp.dSYM, the x86_64 slice has another UUID
#   DemoApp.crash        Apple text crash report (Report Version 104)
#   DemoApp-macos12.crash  the same crash in the macOS 12+/iOS 15+ text layout (Report Version 12)
#   DemoApp.ips          Apple JSON crash report (iOS 15, bug_type 309)
#   DemoApp-sentry.json  Sentry event
#   expected.md          ground truth (from the source line markers), checked with llvm-symbolizer
#
# The binaries themselves go to build/ (not committed).
#
# Needs clang, ld64.lld, dsymutil and the llvm tools (Debian: apt-get install clang lld llvm;
# the committed outputs were made with LLVM 14) and python3. No Xcode, no SDK, no system
# library: the binary links with -undefined dynamic_lookup and is never run.
#
# Shared with ../linux-demo: ../common/tools.sh (tool lookup) and ../common/fixturelib.py
# (ground truth, call sites, llvm-symbolizer check; imported by make_reports.py).
#
# Usage: bash examples/ios-demo/generate.sh   (from any directory; safe to re-run)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE"

# Where the DWARF says the sources were: looks like a Mac build, and does not depend on
# where this checkout lives.
FAKE_SRCROOT=/Users/dev/DemoApp

# find_tool, die: ../common/tools.sh (shared with ../linux-demo/generate.sh).
TOOLS_PACKAGES="clang lld llvm"
source "$HERE/../common/tools.sh"

CLANG="$(find_tool clang)"
LD64="$(find_tool ld64.lld)"
DSYMUTIL="$(find_tool dsymutil)"
LIPO="$(find_tool llvm-lipo lipo)"
OBJDUMP="$(find_tool llvm-objdump)"
NM="$(find_tool llvm-nm)"
DWARFDUMP="$(find_tool llvm-dwarfdump)"
SYMBOLIZER="$(find_tool llvm-symbolizer)"
PYTHON="$(find_tool python3)"

echo "== tools"
"$CLANG" --version | head -n 1
echo "ld64.lld: $LD64"

# dsymutil calls `lipo` (found on PATH) to merge the per-arch dSYMs of a fat binary.
TMPBIN="$(mktemp -d "${TMPDIR:-/tmp}/ios-demo-gen.XXXXXX")"
trap 'rm -rf "$TMPBIN"' EXIT
if ! command -v lipo >/dev/null 2>&1; then
    ln -s "$LIPO" "$TMPBIN/lipo"
    export PATH="$TMPBIN:$PATH"
fi

# Reproducibility: no timestamps in the debug map (N_OSO), relative object paths
# (-oso_prefix), DWARF paths mapped to $FAKE_SRCROOT, sources compiled by relative path.
export ZERO_AR_DATE=1
export LC_ALL=C

rm -rf build DemoApp.dSYM DemoAppFat.dSYM
mkdir -p build/arm64 build/x86_64 build/fat

CFLAGS=(-g -gdwarf-4 -O1 -fdebug-prefix-map="$HERE=$FAKE_SRCROOT" -Wall -Wextra)
CXXFLAGS=("${CFLAGS[@]}" -std=c++17 -nostdinc++ -fno-exceptions -fno-rtti)

# build ARCH TARGET PLATFORM: compiles and links build/ARCH/DemoApp.
build() {
    local arch="$1" target="$2" platform="$3"
    "$CLANG" --target="$target" "${CFLAGS[@]}" -c src/crash.c -o "build/$arch/crash.o"
    "$CLANG" --target="$target" "${CXXFLAGS[@]}" -c src/checkout.cpp -o "build/$arch/checkout.o"
    "$LD64" -arch "$arch" -platform_version "$platform" 15.0 15.0 \
        -e _main -undefined dynamic_lookup -oso_prefix "$HERE/" \
        -o "build/$arch/DemoApp" "build/$arch/crash.o" "build/$arch/checkout.o"
}

echo "== build"
build arm64 arm64-apple-ios15.0 ios
build x86_64 x86_64-apple-ios15.0-simulator ios-simulator
"$LIPO" -create build/arm64/DemoApp build/x86_64/DemoApp -output build/fat/DemoApp

echo "== dsymutil"
# Run from $HERE: the debug map holds object paths relative to it.
"$DSYMUTIL" --num-threads 1 build/arm64/DemoApp -o DemoApp.dSYM
"$DSYMUTIL" --num-threads 1 build/fat/DemoApp -o DemoAppFat.dSYM

echo "== UUIDs"
"$DWARFDUMP" --uuid build/arm64/DemoApp DemoApp.dSYM build/fat/DemoApp DemoAppFat.dSYM

echo "== reports"
"$PYTHON" make_reports.py \
    --binary build/arm64/DemoApp \
    --dsym DemoApp.dSYM \
    --fat-dsym DemoAppFat.dSYM \
    --src src \
    --out-dir . \
    --objdump "$OBJDUMP" --nm "$NM" --dwarfdump "$DWARFDUMP" --symbolizer "$SYMBOLIZER"
# The same crash in the macOS 12+/iOS 15+ text layout.
"$PYTHON" make_macos12_text.py

echo "== done"

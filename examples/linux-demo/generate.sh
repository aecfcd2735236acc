#!/usr/bin/env bash
# Regenerates the Linux (x86_64 ELF) test fixtures in this directory from ../ios-demo/src/
# (the same DemoApp sources as the iOS demo, so both crash in the same functions):
#
#   demo-app.debug          the unstripped PIE (code + DWARF + .symtab + GNU build-id note):
#                           the debug file the request points at
#   demo-app-request.json   a symbolicator-style request (POST /symbolicate) for the crash
#   expected.md             ground truth (from the source line markers), checked with
#                           llvm-symbolizer
#
# Objects and the stripped binary go to build/ (not committed).
#
# Needs gcc and g++ (the committed files were made with Debian gcc 12.2.0, binutils 2.40),
# binutils objdump, llvm-symbolizer (any recent LLVM; -14 suffixed names are found too) and
# python3 (standard library only). Debian: apt-get install gcc g++ binutils llvm python3.
#
# Shared with ../ios-demo: ../common/tools.sh (tool lookup) and ../common/fixturelib.py
# (ground truth, call sites, llvm-symbolizer check; imported by make_request.py).
#
# Usage: bash examples/linux-demo/generate.sh   (from any directory; safe to re-run)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# The shared sources: the source root is ios-demo/, the files are in ios-demo/src/.
SRCROOT="$(cd "$HERE/../ios-demo" && pwd -P)"
cd "$HERE"

# Where the DWARF says the sources were: looks like a Linux build, and does not depend on
# where this checkout lives. Files show up as /home/dev/DemoApp/src/<file> (the iOS demo has
# /Users/dev/DemoApp/src/<file>).
FAKE_SRCROOT=/home/dev/DemoApp

# find_tool, die: ../common/tools.sh (shared with ../ios-demo/generate.sh).
TOOLS_PACKAGES="gcc g++ binutils llvm"
source "$HERE/../common/tools.sh"

CC="$(find_tool gcc)"
CXX="$(find_tool g++)"
OBJDUMP="$(find_tool objdump)"
OBJCOPY="$(find_tool objcopy)"
SYMBOLIZER="$(find_tool llvm-symbolizer)"
PYTHON="$(find_tool python3)"

echo "== tools"
"$CC" --version | head -n 1
"$CXX" --version | head -n 1
"$OBJDUMP" --version | head -n 1
echo "llvm-symbolizer: $SYMBOLIZER"

export LC_ALL=C

for f in crash.c checkout.cpp demo.h; do
    [[ -f "$SRCROOT/src/$f" ]] || die "$SRCROOT/src/$f is missing"
done

rm -rf build demo-app.debug demo-app-request.json expected.md
mkdir -p build

# Same flags as the iOS demo where they apply. gcc 12 writes DWARF 5 by default; say so, so
# that another gcc does not silently change it. PIE code, linked as a PIE.
CFLAGS=(-g -gdwarf-5 -O1 -fPIE -fdebug-prefix-map="$SRCROOT=$FAKE_SRCROOT" -Wall -Wextra)
CXXFLAGS=("${CFLAGS[@]}" -std=c++17 -nostdinc++ -fno-exceptions -fno-rtti)

echo "== build"
# Compile from the source root with relative paths: DW_AT_comp_dir is then $FAKE_SRCROOT and
# DW_AT_name src/<file>, as in the iOS demo. Only the outputs are written (to build/ here).
(
    cd "$SRCROOT"
    "$CC" "${CFLAGS[@]}" -c src/crash.c -o "$HERE/build/crash.o"
    "$CXX" "${CXXFLAGS[@]}" -c src/checkout.cpp -o "$HERE/build/checkout.o"
)
# Linked with the C driver: the C++ half uses nothing from libstdc++ (no exceptions, no RTTI,
# no new/delete), so the only dependency is libc.so.6.
"$CC" -pie -Wl,--build-id=sha1 -o build/demo-app.unstripped build/crash.o build/checkout.o

# The debug file: the unstripped binary itself (about 19 KB: code, .debug_*, .symtab and the
# build-id note), nothing removed. build/demo-app is what would ship to /opt/demo/demo-app
# (same build id, no DWARF, no .symtab); not committed.
cp build/demo-app.unstripped demo-app.debug
"$OBJCOPY" --strip-all build/demo-app.unstripped build/demo-app

if [[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]]; then
    echo "== run (must die with SIGSEGV)"
    set +e
    # (the group's redirect also silences bash's own "Segmentation fault" notice)
    { (ulimit -c 0; exec build/demo-app); rc=$?; } 2>/dev/null
    set -e
    if [[ $rc -ne 139 ]]; then
        die "build/demo-app exited with $rc, expected 139 (SIGSEGV)"
    fi
    echo "build/demo-app: exit status $rc (SIGSEGV), as expected"
fi

echo "== request and ground truth"
"$PYTHON" make_request.py \
    --binary demo-app.debug \
    --src "$SRCROOT/src" \
    --out-dir . \
    --objdump "$OBJDUMP" --symbolizer "$SYMBOLIZER"

if [[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]]; then
    echo "== minidump of the crash"
    bash "$HERE/make_minidump.sh"
fi

echo "== done"

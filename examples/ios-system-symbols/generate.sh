#!/usr/bin/env bash
# Regenerates a DeviceSupport-like tree of system libraries and a crash report whose frames
# fall in them, for `symctl upload system-symbols` and the shared prefix:
#
#   iOS DeviceSupport/15.0 (19A346)/Symbols/usr/lib/system/libdemo_kernel.dylib
#   iOS DeviceSupport/15.0 (19A346)/Symbols/System/Library/Frameworks/DemoKit.framework/DemoKit
#                        arm64 dylibs with a symbol table and no DWARF, as Xcode copies them
#                        from a device (function names, no files or lines)
#   SystemFrames.crash   Apple text crash report whose crashed thread is in those dylibs
#   expected.md          ground truth (llvm-nm on the dylibs; offsets checked with llvm-objdump)
#
# Needs clang, ld64.lld and the llvm tools (Debian: apt-get install clang lld llvm; the
# committed outputs were made with LLVM 14) and python3.
#
# Usage: bash examples/ios-system-symbols/generate.sh   (from any directory; safe to re-run)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE"

TOOLS_PACKAGES="clang lld llvm"
source "$HERE/../common/tools.sh"
CLANG="$(find_tool clang)"
LD64="$(find_tool ld64.lld)"
NM="$(find_tool llvm-nm)"
DWARFDUMP="$(find_tool llvm-dwarfdump)"
OBJDUMP="$(find_tool llvm-objdump)"
PYTHON="$(find_tool python3)"

export ZERO_AR_DATE=1 LC_ALL=C
SYMBOLS="iOS DeviceSupport/15.0 (19A346)/Symbols"
rm -rf build "iOS DeviceSupport"
mkdir -p build "$SYMBOLS/usr/lib/system" "$SYMBOLS/System/Library/Frameworks/DemoKit.framework"

# No -g: device libraries carry a symbol table, not DWARF.
"$CLANG" --target=arm64-apple-ios15.0 -O1 -c src/demo_kernel.c -o build/demo_kernel.o
"$CLANG" --target=arm64-apple-ios15.0 -O1 -c src/DemoKit.c -o build/DemoKit.o
"$LD64" -arch arm64 -platform_version ios 15.0 15.0 -dylib \
    -install_name /usr/lib/system/libdemo_kernel.dylib \
    -o "$SYMBOLS/usr/lib/system/libdemo_kernel.dylib" build/demo_kernel.o
"$LD64" -arch arm64 -platform_version ios 15.0 15.0 -dylib \
    -install_name /System/Library/Frameworks/DemoKit.framework/DemoKit \
    -undefined dynamic_lookup \
    -o "$SYMBOLS/System/Library/Frameworks/DemoKit.framework/DemoKit" build/DemoKit.o

"$PYTHON" make_report.py --symbols "$SYMBOLS" --nm "$NM" --dwarfdump "$DWARFDUMP" \
    --objdump "$OBJDUMP"
rm -rf build
echo "== done"

#!/usr/bin/env bash
# Writes demo-app.dmp: a minidump of demo-app.debug (the committed unstripped PIE) crashed for
# real on this machine (x86_64 Linux), written by minidump-writer (EmbarkStudios, the writer
# behind crash-handler/minidumper) through ./dump-on-crash, a small tracer that hands it the
# crash context at the faulting instruction, as an in-process handler would.
#
# The program runs as /tmp/symcluster-linux-demo/demo-app with an empty environment (the dump
# keeps the command line, /proc/<pid>/maps, auxv, cpuinfo and status, not the environment of
# whoever regenerates it). Its libc and loader are this machine's: their build ids are in the
# dump, their files are not needed (nothing symbolicates them).
#
# Needs: cargo (builds ./dump-on-crash into the workspace's target/dump-on-crash: out of
# examples/, whose files the tests scan as debug files).
# Then writes demo-app-tombstone.pb from it (make_tombstone.py; needs python3 and builds symctl).
# Called by generate.sh; safe to run alone: bash examples/linux-demo/make_minidump.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE"
[[ "$(uname -s)/$(uname -m)" == Linux/x86_64 ]] || {
    echo "make_minidump.sh: needs x86_64 Linux (the demo is an x86_64 ELF)" >&2
    exit 1
}

TARGET="$HERE/../../target/dump-on-crash"
CARGO_TARGET_DIR="$TARGET" \
    cargo build --quiet --locked --manifest-path dump-on-crash/Cargo.toml
RUN_DIR=/tmp/symcluster-linux-demo
rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR"
cp demo-app.debug "$RUN_DIR/demo-app"
"$TARGET/debug/dump-on-crash" demo-app.dmp "$RUN_DIR/demo-app"
rm -rf "$RUN_DIR"
echo "demo-app.dmp: $(stat -c %s demo-app.dmp) bytes"

# The same crash as an Android tombstone with the library in the APK (make_tombstone.py).
(cd ../.. && cargo run --quiet --release -p symctl -- symbolicate \
    --debug-files examples/linux-demo/demo-app.debug examples/linux-demo/demo-app.dmp) |
    python3 make_tombstone.py >demo-app-tombstone.pb
echo "demo-app-tombstone.pb: $(stat -c %s demo-app-tombstone.pb) bytes"
(cd ../.. && cargo run --quiet --release -p symctl -- symbolicate \
    --debug-files examples/linux-demo/demo-app.debug examples/linux-demo/demo-app.dmp) |
    python3 make_tombstone.py --text >demo-app-tombstone.txt
echo "demo-app-tombstone.txt: $(stat -c %s demo-app-tombstone.txt) bytes"

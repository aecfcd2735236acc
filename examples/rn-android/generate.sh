#!/usr/bin/env bash
# Writes combined-event.json (make_event.py) from the other examples' real crashes: the Linux
# demo's minidump walked with CFI by symctl, the Hermes demo's stack, the ProGuard demo's event.
# Run from anywhere: bash examples/rn-android/generate.sh
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE/../.."
cargo run --quiet --release -p symctl -- symbolicate \
    --debug-files examples/linux-demo/demo-app.debug examples/linux-demo/demo-app.dmp |
    python3 "$HERE/make_event.py" >"$HERE/combined-event.json"
echo "combined-event.json: $(stat -c %s "$HERE/combined-event.json") bytes"

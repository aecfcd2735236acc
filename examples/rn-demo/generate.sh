#!/usr/bin/env bash
# Regenerates the React Native JS test fixtures in dist/ and expected.md from src/:
#
#   dist/index.bundle                  Metro release bundle, minified (terser)
#   dist/index.bundle.map              its source map, with Metro's function map
#                                      (x_facebook_sources)
#   dist/index.android.bundle          Metro release bundle, not minified: hermesc's input
#   dist/index.android.bundle.map      its source map (Metro's "packager" map)
#   dist/index.android.bundle.hbc      Hermes bytecode of it (hermesc -O)
#   dist/index.android.bundle.hbc.map  hermesc's map composed with Metro's (metro-source-map
#                                      composeSourceMaps): line 1, column = bytecode offset
#   dist/stack-v8.txt                  real: error.stack of the crash, the bundle run by node
#   dist/stack-jsc.txt                 derived: the same frames in JavaScriptCore's form
#   dist/stack-hermes.txt              real: the crash's stack, the bytecode run by `hermes`
#   expected.md                        ground truth from src/, checked with metro-symbolicate
#
# Everything comes from npm, pinned by package-lock.json: Metro, its React Native Babel
# transformer and preset, terser, metro-symbolicate, and hermes-engine-cli (Linux x86-64
# hermesc + hermes). Needs bash, node (>= 20.19.4, Metro 0.84's minimum) and npm, and a
# Linux x86-64 machine (the Hermes binaries). node_modules/ and build/ are not committed.
#
# Shared with ../ios-demo and ../linux-demo: ../common/tools.sh (die, find_tool).
#
# Usage: bash examples/rn-demo/generate.sh   (from any directory; safe to re-run)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
cd "$HERE"

# Where the maps say the sources are: looks like an app checkout on a Mac, and does not
# depend on where this checkout lives (the same root as ../ios-demo's DWARF).
SOURCE_ROOT=/Users/dev/DemoApp

TOOLS_PACKAGES="nodejs npm"
source "$HERE/../common/tools.sh"
NODE="$(find_tool node)"
NPM="$(find_tool npm)"

node_version="$("$NODE" -p 'process.versions.node')"
"$NODE" -e '
const [a, b, c] = process.versions.node.split(".").map(Number);
process.exit(a > 20 || (a === 20 && (b > 19 || (b === 19 && c >= 4))) ? 0 : 1);
' || die "node $node_version is too old: Metro 0.84 needs >= 20.19.4"
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] ||
    die "hermes-engine-cli ships Linux x86-64 binaries; this is $(uname -s)/$(uname -m)"

export LC_ALL=C
# no update check, audit or funding chatter
export npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false

echo "== npm"
if [ -f package-lock.json ]; then
    "$NPM" ci --no-audit --no-fund
else
    "$NPM" install --no-audit --no-fund
fi
HERMES_BIN=node_modules/hermes-engine-cli/linux64-bin
HERMESC="$HERMES_BIN/hermesc"
HERMES="$HERMES_BIN/hermes"

echo "== tools"
echo "node $node_version, npm $("$NPM" --version)"
"$NODE" -e '
for (const p of ["metro", "metro-minify-terser", "terser", "metro-source-map",
                 "metro-symbolicate", "@react-native/metro-babel-transformer",
                 "@react-native/babel-preset", "@babel/core", "hermes-engine-cli"])
  console.log(p + " " + require("./node_modules/" + p + "/package.json").version);
'
"$HERMESC" -version | grep -E 'Hermes release version|HBC bytecode version' | sed 's/^ */hermesc: /'

rm -rf build dist
mkdir -p build/device dist

echo "== metro: minified bundle (V8 / JSC)"
"$NODE" build.js dist/index.bundle dist/index.bundle.map ios true \
    index.bundle.map "$SOURCE_ROOT"

echo "== metro: bundle for hermesc (not minified, as React Native builds it for Hermes)"
"$NODE" build.js dist/index.android.bundle dist/index.android.bundle.map android false \
    index.android.bundle.map "$SOURCE_ROOT"

echo "== hermesc"
# React Native's release build: hermesc -emit-binary -O -output-source-map, then the
# compiler's map composed with Metro's. Run in build/ on a copy, so that nothing in the
# outputs names this checkout.
cp dist/index.android.bundle build/index.android.bundle
(cd build && "$HERE/$HERMESC" -emit-binary -O -output-source-map \
    -out index.android.bundle.hbc index.android.bundle)
cp build/index.android.bundle.hbc dist/index.android.bundle.hbc
"$NODE" compose-maps.js dist/index.android.bundle.map build/index.android.bundle.hbc.map \
    dist/index.android.bundle.hbc.map

echo "== run: V8 (node)"
"$NODE" run.js dist/index.bundle dist

echo "== run: Hermes"
# As on a device: the bytecode file is named index.android.bundle (that name is in the
# frames). The hermes CLI prints an uncaught error as "Uncaught " + error.stack on stderr
# and exits 1; stack-hermes.txt is error.stack (the "Uncaught " prefix removed).
cp dist/index.android.bundle.hbc build/device/index.android.bundle
rc=0
(cd build/device && "$HERE/$HERMES" -b index.android.bundle) >build/hermes.out 2>build/hermes.err || rc=$?
[ "$rc" = 1 ] || die "hermes exited $rc, expected 1 (an uncaught error): $(cat build/hermes.err)"
head -n 1 build/hermes.err | grep -q '^Uncaught Error: price missing$' ||
    die "hermes: unexpected output: $(cat build/hermes.err)"
sed '1s/^Uncaught //' build/hermes.err >dist/stack-hermes.txt
cat dist/stack-hermes.txt

echo "== expected.md"
"$NODE" make-expected.js "$SOURCE_ROOT"

echo "== done"
ls -l dist expected.md

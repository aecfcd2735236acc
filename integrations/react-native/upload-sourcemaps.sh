#!/bin/sh
# Uploads a React Native release's source map to symcluster, after `react-native bundle` (and
# `hermesc`): composes the Hermes map with Metro's when given both, writes one debug id into the
# JS bundle and the map (`symctl sourcemaps inject`), and uploads the map (and the bundle) by
# that debug id and, when given, by release, dist and bundle name. Run it from a Gradle task, an
# Xcode "Bundle React Native code and images" phase, fastlane or any CI. Needs `symctl` and an
# upload token of the project; no bucket credentials.
#
# Usage:
#   upload-sourcemaps.sh --bundle FILE --sourcemap FILE
#                        [--hermes-map FILE]    hermesc's map: composed with --sourcemap (Metro's)
#                        [--release R [--dist D] --bundle-name NAME]
#
#   --bundle   the JS bundle Metro wrote (text; before hermesc compiles it)
#   --sourcemap  Metro's source map of it (the "packager" map; `--map` is the former spelling)
#   --hermes-map  the map hermesc wrote with -output-source-map: the two are composed with
#              React Native's scripts/compose-source-maps.js (COMPOSE_SOURCE_MAPS, default
#              node_modules/react-native/scripts/compose-source-maps.js; needs node)
#   --release, --dist, --bundle-name  also store the map under them (stacks without a debug
#              id, e.g. Hermes', find it so; the bundle name as stacks show it, e.g.
#              index.android.bundle)
#
# Reads SYMCLUSTER_TOKEN, SYMCLUSTER_MASTER, SYMCLUSTER_PROJECT, SYMCLUSTER_TLS_CA (symctl's),
# SYMCTL (default: `symctl` on PATH), SYMCLUSTER_FAIL_BUILD=1 (fail when the upload fails;
# default: a warning, exit 0).
set -u

symctl="${SYMCTL:-symctl}"
fail_build="${SYMCLUSTER_FAIL_BUILD:-0}"
bundle="" map="" hermes_map="" release="" dist="" bundle_name=""

give_up() {
    if [ "$fail_build" = 1 ]; then
        echo "error: symcluster: $1" >&2
        exit 1
    fi
    echo "warning: symcluster: $1 (the build goes on; SYMCLUSTER_FAIL_BUILD=1 makes this an error)" >&2
    exit 0
}

while [ "$#" -gt 0 ]; do
    case "$1" in
        --bundle) bundle="$2"; shift 2 ;;
        --sourcemap|--map) map="$2"; shift 2 ;;
        --hermes-map) hermes_map="$2"; shift 2 ;;
        --release) release="$2"; shift 2 ;;
        --dist) dist="$2"; shift 2 ;;
        --bundle-name) bundle_name="$2"; shift 2 ;;
        *) echo "upload-sourcemaps.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ -z "$bundle" ] || [ -z "$map" ]; then
    echo "usage: upload-sourcemaps.sh --bundle FILE --sourcemap FILE [--hermes-map FILE] [--release R [--dist D] --bundle-name NAME]" >&2
    exit 2
fi
if [ -n "$release" ] && [ -z "$bundle_name" ]; then
    echo "upload-sourcemaps.sh: --release needs --bundle-name" >&2
    exit 2
fi
if [ -z "${SYMCLUSTER_TOKEN:-}" ]; then
    give_up "SYMCLUSTER_TOKEN is not set (an upload token of the project)"
fi
if ! command -v "$symctl" >/dev/null 2>&1; then
    give_up "symctl not found (install it, or set SYMCTL to its path)"
fi

if [ -n "$hermes_map" ]; then
    compose="${COMPOSE_SOURCE_MAPS:-node_modules/react-native/scripts/compose-source-maps.js}"
    composed="$map.composed"
    node "$compose" "$map" "$hermes_map" -o "$composed" \
        || give_up "could not compose $map with $hermes_map ($compose)"
    map="$composed"
fi

# A Hermes bytecode bundle takes no comment: the map is then stored by release only.
if ! "$symctl" sourcemaps inject "$bundle" "$map"; then
    if [ -z "$release" ]; then
        give_up "could not write a debug id into $bundle and $map, and no --release to store the map by"
    fi
    echo "warning: symcluster: no debug id in $bundle: the map is stored by release only" >&2
fi

set -- --sourcemap "$map" --bundle "$bundle"
if [ -n "$release" ]; then
    set -- "$@" --release "$release" --dist "$dist" --bundle-name "$bundle_name"
fi
unset SYMCLUSTER_S3_BUCKET
if "$symctl" upload sourcemap "$@"; then
    exit 0
fi
give_up "the source map was not uploaded (symctl said why above; the next build tries again)"

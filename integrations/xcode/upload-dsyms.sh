#!/bin/sh
# Uploads an app's dSYMs to symcluster: an Xcode "Run Script" build phase, or a shell step of
# fastlane or any CI (`sh upload-dsyms.sh PATH...`). Needs `symctl` and an upload token of the
# project; no bucket credentials. Files the cluster holds already are not sent again.
#
# Reads (Xcode sets the first three in a build phase):
#   DWARF_DSYM_FOLDER_PATH     the folder holding the build's dSYMs (the app's and its
#                              frameworks'), uploaded whole when no PATH is given
#   DEBUG_INFORMATION_FORMAT   `dwarf-with-dsym` makes dSYMs; any other value: nothing to upload
#   CONFIGURATION              shown in messages
#   SYMCLUSTER_TOKEN           an upload token of the project (required)
#   SYMCLUSTER_MASTER          the masters' gRPC endpoints, comma-separated
#   SYMCLUSTER_PROJECT         the project (default: the token's)
#   SYMCLUSTER_TLS_CA          PEM CA of https:// masters (default: the public roots)
#   SYMCTL                     the symctl binary (default: `symctl` on PATH)
#   SYMCLUSTER_FAIL_BUILD=1    fail the build when the upload fails (default: a warning only)
#
# Messages start with `warning:` or `error:`, which Xcode shows in the build log and issues.
# Exit status: 0, unless SYMCLUSTER_FAIL_BUILD=1 and the upload failed (1).
set -u

symctl="${SYMCTL:-symctl}"
fail_build="${SYMCLUSTER_FAIL_BUILD:-0}"

give_up() {
    if [ "$fail_build" = 1 ]; then
        echo "error: symcluster: $1" >&2
        exit 1
    fi
    echo "warning: symcluster: $1 (the build goes on; SYMCLUSTER_FAIL_BUILD=1 makes this an error)" >&2
    exit 0
}

if [ "$#" -eq 0 ]; then
    if [ -n "${DEBUG_INFORMATION_FORMAT:-}" ] && [ "$DEBUG_INFORMATION_FORMAT" != "dwarf-with-dsym" ]; then
        echo "warning: symcluster: DEBUG_INFORMATION_FORMAT is $DEBUG_INFORMATION_FORMAT in ${CONFIGURATION:-this configuration}: no dSYM to upload (set it to dwarf-with-dsym)" >&2
        exit 0
    fi
    if [ -z "${DWARF_DSYM_FOLDER_PATH:-}" ]; then
        give_up "DWARF_DSYM_FOLDER_PATH is not set: run this as an Xcode build phase, or give the dSYM paths as arguments"
    fi
    set -- "$DWARF_DSYM_FOLDER_PATH"
fi
if [ -z "${SYMCLUSTER_TOKEN:-}" ]; then
    give_up "SYMCLUSTER_TOKEN is not set (an upload token of the project)"
fi
if ! command -v "$symctl" >/dev/null 2>&1; then
    give_up "symctl not found (install it, or set SYMCTL to its path)"
fi

# symctl reads SYMCLUSTER_TOKEN, SYMCLUSTER_MASTER, SYMCLUSTER_PROJECT and SYMCLUSTER_TLS_CA
# itself; without SYMCLUSTER_S3_BUCKET the files go through the masters.
unset SYMCLUSTER_S3_BUCKET
if "$symctl" upload dsym "$@"; then
    exit 0
fi
give_up "the dSYMs were not uploaded (symctl said why above; the next build tries again)"

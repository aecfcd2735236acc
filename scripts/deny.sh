#!/usr/bin/env bash
# Dependency hygiene with cargo-deny (deny.toml): advisories, licences, bans, sources.
# Installs cargo-deny 0.20.2 when missing (~2.5 minutes on 2 cores; without default features:
# no HTTP client of its own, it fetches the advisory database with git).
#
# The advisory database (RustSec's, a git repository) is fetched when the network allows; else
# the copy fetched last is used, with its date printed; with none at all, the advisories are
# NOT checked and the script says so loudly (licences, bans and sources are checked offline
# from Cargo.lock and the registry cache). SYMCLUSTER_ADVISORY_DB=PATH names a clone of
# https://github.com/rustsec/advisory-db to use instead (a mirror on a machine without network).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

if ! cargo deny --version 2>/dev/null | grep -q '0\.20\.2'; then
    cargo install cargo-deny --locked --version 0.20.2 --no-default-features
fi

dbs=${CARGO_HOME:-$HOME/.cargo}/advisory-dbs
# deny.toml's database URL is RustSec's default; cargo-deny keeps it in this directory.
db=$dbs/advisory-db-3157b0e258782691
if [ -n "${SYMCLUSTER_ADVISORY_DB:-}" ]; then
    rm -rf "$db" && mkdir -p "$dbs"
    git clone -q "$SYMCLUSTER_ADVISORY_DB" "$db"
elif timeout 120 cargo deny fetch db >/dev/null 2>&1; then
    :
fi

if [ -d "$db/.git" ]; then
    echo "cargo deny: advisory database of $(git -C "$db" log -1 --format=%cs)"
    cargo deny --offline check
else
    echo "cargo deny: ADVISORIES NOT CHECKED: no advisory database could be fetched (no network)" \
        "and none is cached in $dbs; set SYMCLUSTER_ADVISORY_DB to a clone of rustsec/advisory-db" >&2
    cargo deny --offline check bans licenses sources
fi

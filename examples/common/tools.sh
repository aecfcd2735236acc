# Shell helpers shared by the DemoApp fixture generators (../ios-demo/generate.sh and
# ../linux-demo/generate.sh). Sourced by them (bash, after `set -euo pipefail`), not run.
#
# Before sourcing, a generator sets:
#   TOOLS_PACKAGES   the Debian packages that provide its tools, named when one is missing
#
# It gets:
#   die MESSAGE          "generate.sh: MESSAGE" on stderr, exit 1
#   find_tool NAME...    the path of the first of the tools that exists (see below)

# die MESSAGE...: prints "<script name>: MESSAGE" to stderr and exits 1.
die() {
    echo "${0##*/}: $*" >&2
    exit 1
}

# find_tool NAME...: the path of the first of NAME, NAME-14, /usr/lib/llvm-14/bin/NAME that
# exists, trying the NAMEs in order (Debian installs LLVM 14, the version the committed
# fixtures were made with, under both plain and -14 names, or only the latter). Dies, naming
# $TOOLS_PACKAGES, if none does. Use as VAR="$(find_tool NAME...)": under `set -e` the
# generator then stops too.
find_tool() {
    local name cand
    for name in "$@"; do
        for cand in "$name" "$name-14" "/usr/lib/llvm-14/bin/$name"; do
            if command -v "$cand" >/dev/null 2>&1; then
                command -v "$cand"
                return 0
            fi
        done
    done
    die "none of these tools found: $* (Debian: apt-get install $TOOLS_PACKAGES)"
}

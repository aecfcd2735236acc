#!/usr/bin/env bash
# fuzz/run.sh --check [TARGET...]: the pass/fail step of the test command, the same answer on
#   every run of the same commit. For each fuzz target (or those named): every seed and every
#   stored regression input (fuzz/regressions/TARGET/, committed: inputs that once crashed it)
#   is run, then a fixed number of mutations from a fixed seed (libFuzzer -seed, -runs; see
#   CHECK_RUNS below), over a fresh corpus in a temporary directory, so that what earlier
#   open-ended runs left in fuzz/corpus/ does not change the answer. Exit 1 on any crash.
# fuzz/run.sh SECONDS [TARGET...]: open-ended fuzzing, outside the pass/fail command: runs each
#   target for SECONDS over fuzz/corpus/TARGET/ (where what libFuzzer finds accumulates from run
#   to run) and the stored regressions. A crash leaves its input in fuzz/artifacts/TARGET/ and
#   makes the script exit 1: the input goes to fuzz/regressions/TARGET/ (or is made there by
#   fuzz/regressions/make.py) with the fix.
# Both print last one line:
#   fuzz: T targets, N execs, C crashes
# libFuzzer with AddressSanitizer (cargo-fuzz, nightly); installs what a fresh machine lacks (the
# nightly toolchain, cargo-fuzz). The seed corpus is gathered at run time from ../shared/fixtures
# (third-party: read from there, never copied into the repository) and the project's own
# examples.
set -euo pipefail
cd "$(dirname "$0")"

usage="usage: fuzz/run.sh --check [TARGET...] | fuzz/run.sh SECONDS [TARGET...]"
mode=${1:?$usage}
shift
check=false
if [ "$mode" = --check ]; then
    check=true
elif ! [[ "$mode" =~ ^[0-9]+$ ]]; then
    echo "$usage" >&2
    exit 2
fi
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(native_report js_stack source_map debug_file job_request jvm_trace proguard_mapping
        minidump combined_event)
fi

export PATH="$HOME/.cargo/bin:$PATH"
if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null; then
    cargo install cargo-fuzz --locked
fi

fixtures=${SYMCLUSTER_FIXTURES:-$(cd .. && pwd)/../shared/fixtures}
examples=../examples

# Where the seeds go: the accumulating corpus for open-ended runs, a fresh directory for --check.
if $check; then
    corpus=$(mktemp -d)
    trap 'rm -rf "$corpus"' EXIT
else
    corpus=corpus
fi

# seed TARGET FILE...: copies the files that exist (at most 1 MiB each) into $corpus/TARGET/,
# each named by a hash of its path (the same name on every machine).
seed() {
    local target=$1
    shift
    # Only the targets this run fuzzes (two runs of other targets may share corpus/).
    [[ " ${targets[*]} " == *" $target "* ]] || return 0
    mkdir -p "$corpus/$target"
    local f
    for f in "$@"; do
        if [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 1048576 ]; then
            cp "$f" "$corpus/$target/seed-$(printf %s "${f#"$fixtures"}" | sha1sum | cut -c1-16)"
        fi
    done
}

mapfile -d '' reports < <(find "$fixtures/crashprobe" "$fixtures/kscrash" \
    "$fixtures/apple-crash-reports/fixtures" -type f \
    \( -name '*.json' -o -name '*.txt' -o -name '*.crash' -o -name '*.ips' \) -print0 2>/dev/null)
native_seeds=("${reports[@]}" "$examples"/ios-demo/DemoApp.crash "$examples"/ios-demo/DemoApp.ips
    "$examples"/ios-demo/DemoApp-sentry.json "$examples"/linux-demo/demo-app-request.json
    "$examples"/ios-demo/DemoApp-macos12.crash "$examples"/ios-system-symbols/SystemFrames.crash
    "$examples"/linux-demo/demo-app.dmp "$examples"/linux-demo/demo-app-tombstone.pb
    "$examples"/linux-demo/demo-app-tombstone.txt)
seed native_report "${native_seeds[@]}"
seed job_request "${native_seeds[@]}"
# A real Android tombstone (third-party, gzipped in the repository).
tombstone=$(mktemp)
gunzip -c "$examples"/third-party/sentry-java/tombstone.pb.gz >"$tombstone"
seed native_report "$tombstone"
seed job_request "$tombstone"
rm -f "$tombstone"
mapfile -d '' stacks < <(find "$fixtures/js" -type f \( -name '*.stack' -o -name '*.txt' \) -print0 2>/dev/null)
seed js_stack "${stacks[@]}" "$examples"/rn-demo/dist/stack-hermes.txt
mapfile -d '' maps < <(find "$fixtures/js" -type f \( -name '*.map' -o -name '*.json' \) -print0 2>/dev/null)
seed source_map "${maps[@]}" "$examples"/rn-demo/dist/*.map
seed debug_file "$examples"/ios-demo/DemoApp.dSYM/Contents/Resources/DWARF/DemoApp \
    "$examples"/ios-demo/DemoAppFat.dSYM/Contents/Resources/DWARF/DemoApp \
    "$examples"/linux-demo/demo-app.debug \
    "$examples/ios-system-symbols/iOS DeviceSupport/15.0 (19A346)/Symbols/usr/lib/system/libdemo_kernel.dylib"

seed jvm_trace "$examples"/android-demo/obfuscated-*
mapfile -d '' proguard < <(find "$HOME/.cargo/registry/src" -path '*/proguard-*/tests/res/*.txt' \
    -print0 2>/dev/null)
seed proguard_mapping "$examples"/android-demo/mapping.txt "${proguard[@]}"

seed minidump "$examples"/linux-demo/demo-app.dmp
seed combined_event "$examples"/rn-android/combined-event.json "$examples"/android-demo/obfuscated-sentry.json \
    "$examples"/ios-demo/DemoApp-sentry.json

# Every target, built once with the sanitizer and coverage instrumentation.
if ! cargo +nightly fuzz build -O >fuzz-build.log 2>&1; then
    tail -n 30 fuzz-build.log >&2
    echo "fuzz: the fuzz targets do not build" >&2
    exit 2
fi

# --check: executions per target (the seeds and regressions included), 5-30 s each on the
# 2-core development machine when it is quiet (111-128 s for the nine, three fresh clones);
# the same count on every machine, so the same inputs are run.
declare -A CHECK_RUNS=(
    [native_report]=3000 [js_stack]=100000 [source_map]=20000 [debug_file]=4000
    [job_request]=3000 [jvm_trace]=30000 [proguard_mapping]=1500 [minidump]=10000
    [combined_event]=20000
)

total_execs=0
total_crashes=0
for target in "${targets[@]}"; do
    mkdir -p "artifacts/$target"
    before=$(find "artifacts/$target" -type f | wc -l)
    log=$(mktemp)
    started=$(date +%s)
    # Reports are mutated up to 16 KiB (the whole small seeds, the head of the big ones; a
    # truncated report is bad input too): at 100 KB an input costs ~20 ms under ASan.
    extra=()
    case $target in
    native_report | job_request) extra=(-max_len=16384) ;;
    # A mapping is converted whole before anything is looked up: 64 KiB keeps ~100 execs/s.
    proguard_mapping) extra=(-max_len=65536) ;;
    esac
    if $check; then
        runs=${CHECK_RUNS[$target]}
        length=(-seed=1 -runs="$runs")
    else
        length=(-max_total_time="$mode")
    fi
    mkdir -p "regressions/$target"
    # The first directory is where libFuzzer writes what it finds; the regressions are only read.
    # -rss_limit_mb: one input may hold a 16 MiB report; -timeout: a hang is a finding.
    if cargo +nightly fuzz run -O "$target" "$corpus/$target" "regressions/$target" -- \
        "${length[@]}" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        "${extra[@]}" -artifact_prefix="artifacts/$target/" >"$log" 2>&1; then
        :
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -n 1)
    after=$(find "artifacts/$target" -type f | wc -l)
    crashes=$((after - before))
    if [ "$crashes" -gt 0 ]; then
        grep -E 'panicked|ERROR: ' "$log" | head -n 5 >&2 || true
    fi
    if [ -z "$execs" ] && [ "$crashes" -eq 0 ]; then
        # libFuzzer did not get to its final stats: the target did not start.
        tail -n 20 "$log" >&2
        crashes=1
    fi
    if $check; then
        echo "fuzz: $target: ${execs:-0} execs (seed 1, $runs runs) in $(($(date +%s) - started)) s, $crashes new crash inputs" >&2
    else
        echo "fuzz: $target: ${execs:-0} execs in $mode s, $crashes new crash inputs" >&2
    fi
    total_execs=$((total_execs + ${execs:-0}))
    total_crashes=$((total_crashes + crashes))
    rm -f "$log"
done

echo "fuzz: ${#targets[@]} targets, $total_execs execs, $total_crashes crashes"
[ "$total_crashes" -eq 0 ]

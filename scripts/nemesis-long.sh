#!/usr/bin/env bash
# The long nemesis run (issue 54): several seeded runs of `symcluster-loadtest nemesis`, one after
# the other, on three and five masters, every fault kind, each history kept and checked again,
# then one table of what they found (Markdown, on stdout; docs/development.md "The nemesis").
#
#   bash scripts/nemesis-long.sh [OUT_DIR] [SECONDS_PER_RUN] [RUNS...]
#
# RUNS are MASTERS:WORKERS:SEED (default: 3:2:31 3:2:32 3:2:33 5:2:34 5:2:35 5:2:36, 300 s each:
# 30 minutes of faults, about 40 minutes in all on 2 cores). Needs root (network namespaces,
# tmpfs data directories), faketime, and the release build of scripts/test.sh (the masters'
# failpoints); SYMCLUSTER_BIN_DIR runs the binaries of another directory (a copy, so that the
# tree can be built again while the runs go on). Exits 1 when any run found an anomaly or its
# history did not check again.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${1:-/tmp/nemesis-long}
seconds=${2:-300}
shift $(( $# > 2 ? 2 : $# ))
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(3:2:31 3:2:32 3:2:33 5:2:34 5:2:35 5:2:36)
faults=kill,pause,partition,disk-full,clock,slow-disk,fsync-crash,membership,snapshot
loadtest=${SYMCLUSTER_BIN_DIR:-target/release}/symcluster-loadtest
[ -x "$loadtest" ] || { echo "$loadtest: build it first (bash scripts/test.sh)" >&2; exit 2; }

mkdir -p "$out"
failed=0
for run in "${runs[@]}"; do
    IFS=: read -r masters workers seed <<<"$run"
    name="$out/m$masters-w$workers-seed$seed"
    echo "nemesis-long: $masters masters, $workers workers, seed $seed, $seconds s" >&2
    start=$(date +%s)
    if ! "$loadtest" nemesis --masters "$masters" --workers "$workers" --seconds "$seconds" \
        --faults "$faults" --seed "$seed" --clients 8 --history "$name.jsonl" \
        >"$name.txt" 2>"$name.log"; then
        failed=1
    fi
    echo "$(( $(date +%s) - start ))" >"$name.wall"
    if ! "$loadtest" nemesis --check "$name.jsonl" >"$name.check" 2>&1; then
        failed=1
    fi
done

python3 - "$out" "$seconds" "${runs[@]}" <<'EOF'
import collections, re, sys
out, seconds, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print("| run | calls | submits acknowledged | reads answered | unknown | faults by kind | on the leader | anomalies | check again | wall s |")
print("|---|---|---|---|---|---|---|---|---|---|")
total = collections.Counter()
kinds_all = collections.Counter()
for run in runs:
    masters, workers, seed = run.split(":")
    name = f"{out}/m{masters}-w{workers}-seed{seed}"
    text = open(f"{name}.txt").read()
    head = re.search(r"nemesis: (\d+) calls \((\d+) submits acknowledged, (\d+) reads answered, "
                     r"(\d+) unknown\) on (\d+) jobs, (\d+) fault events, (\d+) anomalies", text)
    if not head:
        print(f"| {run} | no report: see {name}.log | | | | | | | | |")
        total["failed"] += 1
        continue
    calls, acked, reads, unknown, jobs, events, anomalies = map(int, head.groups())
    kinds = collections.Counter()
    leader = 0
    for kind, on_leader in re.findall(r"^\s+[\d.]+ s  ([A-Z][A-Za-z]+) master \d+( \(the leader\))?",
                                      text, re.M):
        kinds[kind] += 1
        leader += bool(on_leader)
    check = open(f"{name}.check").read().strip().splitlines()
    checked = "0 anomalies" if re.search(r", 0 anomalies", check[0] if check else "") else "FAILED"
    wall = open(f"{name}.wall").read().strip()
    faults = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
    print(f"| {seconds} s, {masters} masters, {workers} workers, seed {seed} | {calls:,} | {acked:,} "
          f"| {reads:,} | {unknown:,} | {sum(kinds.values())}: {faults} | {leader} | {anomalies} "
          f"| {checked} | {wall} |")
    total.update(calls=calls, acked=acked, reads=reads, unknown=unknown, anomalies=anomalies,
                 faults=sum(kinds.values()), leader=leader, seconds=seconds)
    kinds_all.update(kinds)
    for kind in re.findall(r"^  ANOMALY (.+?) \S+: ", text, re.M):
        total["anomaly " + kind] += 1
print()
print(f"In all: {total['calls']:,} calls over {total['seconds'] / 60:.1f} minutes of faults, "
      f"{total['acked']:,} submits acknowledged, {total['faults']} faults "
      f"({', '.join(f'{k} {n}' for k, n in sorted(kinds_all.items()))}; {total['leader']} on the leader), "
      f"{total['anomalies']} anomalies (lost {total['anomaly lost']}, created twice "
      f"{total['anomaly created twice']}), {total['failed']} runs without a report.")
EOF
exit "$failed"

#!/usr/bin/env bash
# A local symcluster for a newcomer: Garage (S3) + one or three masters + N workers, in the
# background.
#
#   deploy/local-cluster.sh start [--masters 1|3] [--workers N]   # builds, starts everything
#   deploy/local-cluster.sh stop
#
# State, caches and logs live in .local-cluster/ at the repository root. `start` prints the
# environment that `symctl` needs (eval it). Ports: master i gRPC 7700+10(i-1), metrics +1
# (7700/7701, 7710/7711, 7720/7721), worker i metrics and /ready 7800+i, S3 3900.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.local-cluster
cmd=${1:-start}
shift || true
masters=1
workers=2
while [ $# -gt 0 ]; do
    case "$1" in
    --masters) masters=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    [0-9]*) workers=$1; shift ;;
    *) echo "usage: $0 start [--masters 1|3] [--workers N] | stop" >&2; exit 2 ;;
    esac
done

# Stops the processes of the pid files matching $1 with SIGTERM and waits for them to exit.
stop_all() {
    local pids=() pid
    for file in "$root"/$1; do
        [ -e "$file" ] || continue
        pid=$(cat "$file")
        kill "$pid" 2>/dev/null && pids+=("$pid")
        rm -f "$file"
    done
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done
}

# Workers first, while a master can take back their leases (they drain and exit at once);
# then the masters, then Garage.
stop() {
    stop_all 'worker-*.pid'
    stop_all '*.pid'
    bash deploy/garage.sh stop "$root/garage"
}

case "$cmd" in
stop) stop; echo "stopped"; exit 0 ;;
start) ;;
*) echo "usage: $0 start [--masters 1|3] [--workers N] | stop" >&2; exit 2 ;;
esac

export PATH="$HOME/.cargo/bin:$PATH"
command -v garage >/dev/null || cargo install garage --locked --version 2.5.0
cargo build --release --locked --bins -q
mkdir -p "$root"
stop 2>/dev/null || true

eval "$(bash deploy/garage.sh start "$root/garage" 3900)"
export SYMCLUSTER_TOKEN=${SYMCLUSTER_TOKEN:-local-dev-token}

peers=""
endpoints=""
for i in $(seq 1 "$masters"); do
    port=$((7700 + 10 * (i - 1)))
    peers="$peers${peers:+,}$i=127.0.0.1:$port"
    endpoints="$endpoints${endpoints:+,}http://127.0.0.1:$port"
done
for i in $(seq 1 "$masters"); do
    port=$((7700 + 10 * (i - 1)))
    group=()
    [ "$masters" -gt 1 ] && group=(--id "$i" --peers "$peers")
    target/release/symcluster-master --data-dir "$root/master-$i" "${group[@]}" \
        --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$((port + 1))" \
        > "$root/master-$i.log" 2>&1 &
    echo $! > "$root/master-$i.pid"
done
for i in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/7700) 2>/dev/null && break
    sleep 0.1
done
for i in $(seq 1 "$workers"); do
    target/release/symcluster-worker --master "$endpoints" --worker-id "worker-$i" \
        --cache-dir "$root/worker-$i-cache" --metrics-listen "127.0.0.1:$((7800 + i))" \
        > "$root/worker-$i.log" 2>&1 &
    echo $! > "$root/worker-$i.pid"
done
sleep 1
cat <<ENV
# symcluster is up: $masters master(s) $endpoints, $workers workers, Garage S3 :3900.
# Logs: $root/*.log. Stop with: deploy/local-cluster.sh stop
export PATH=$PWD/target/release:\$PATH
export SYMCLUSTER_MASTER=$endpoints
export SYMCLUSTER_TOKEN=$SYMCLUSTER_TOKEN
# symctl uploads through the masters (presigned requests): your shell needs no bucket
# credentials. Operators who want the bucket itself: symctl upload --s3-bucket $SYMCLUSTER_S3_BUCKET
# --s3-endpoint $SYMCLUSTER_S3_ENDPOINT --s3-region $SYMCLUSTER_S3_REGION, with the AWS keys
# that deploy/garage.sh start prints.
ENV

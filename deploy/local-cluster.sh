#!/usr/bin/env bash
# A local symcluster for a newcomer: Garage (S3) + a master + N workers, in the background.
#
#   deploy/local-cluster.sh start [N_WORKERS]   # builds the binaries, starts everything
#   deploy/local-cluster.sh stop
#
# State, caches and logs live in .local-cluster/ at the repository root. `start` prints the
# environment that `symctl` needs (eval it). Ports: master gRPC 7700, metrics 7701, S3 3900.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.local-cluster
cmd=${1:-start}
workers=${2:-2}

stop() {
    for pid in "$root"/*.pid; do
        [ -e "$pid" ] || continue
        kill "$(cat "$pid")" 2>/dev/null || true
        rm -f "$pid"
    done
    bash deploy/garage.sh stop "$root/garage"
}

case "$cmd" in
stop) stop; echo "stopped"; exit 0 ;;
start) ;;
*) echo "usage: $0 start [N_WORKERS] | stop" >&2; exit 2 ;;
esac

export PATH="$HOME/.cargo/bin:$PATH"
command -v garage >/dev/null || cargo install garage --locked --version 2.5.0
cargo build --release --locked --bins -q
mkdir -p "$root"
stop 2>/dev/null || true

eval "$(bash deploy/garage.sh start "$root/garage" 3900)"
export SYMCLUSTER_TOKEN=${SYMCLUSTER_TOKEN:-local-dev-token}

target/release/symcluster-master --data-dir "$root/master" \
    --listen 127.0.0.1:7700 --metrics-listen 127.0.0.1:7701 > "$root/master.log" 2>&1 &
echo $! > "$root/master.pid"
for i in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/7700) 2>/dev/null && break
    sleep 0.1
done
for i in $(seq 1 "$workers"); do
    target/release/symcluster-worker --master http://127.0.0.1:7700 --worker-id "worker-$i" \
        --cache-dir "$root/worker-$i-cache" > "$root/worker-$i.log" 2>&1 &
    echo $! > "$root/worker-$i.pid"
done
sleep 1
cat <<ENV
# symcluster is up: master http://127.0.0.1:7700 (metrics :7701), $workers workers, Garage S3 :3900.
# Logs: $root/*.log. Stop with: deploy/local-cluster.sh stop
export PATH=$PWD/target/release:\$PATH
export SYMCLUSTER_MASTER=http://127.0.0.1:7700
export SYMCLUSTER_TOKEN=$SYMCLUSTER_TOKEN
export AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID
export AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY
export SYMCLUSTER_S3_BUCKET=$SYMCLUSTER_S3_BUCKET
export SYMCLUSTER_S3_ENDPOINT=$SYMCLUSTER_S3_ENDPOINT
export SYMCLUSTER_S3_REGION=$SYMCLUSTER_S3_REGION
ENV

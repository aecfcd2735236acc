#!/usr/bin/env bash
# A single-node Garage (S3-compatible) server for a local cluster and the end-to-end tests.
#
#   deploy/garage.sh start DIR [S3_PORT]   # configure + start; prints the env to use it
#   deploy/garage.sh stop DIR
#
# Ports: S3 = S3_PORT (default 3900), RPC = S3_PORT+1, admin = S3_PORT+3. Data, config, logs and
# the pid file live in DIR. The bucket `symcluster` and a fixed test key are created.
# Needs `garage` on PATH (`cargo install garage --locked --version 2.5.0`; see .ci/run).
set -euo pipefail

cmd=${1:?usage: garage.sh start|stop DIR [S3_PORT]}
dir=${2:?usage: garage.sh start|stop DIR [S3_PORT]}
port=${3:-3900}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
KEY_ID=GK31c2f218a2e44f485b94239e
SECRET=b892c0665f0ada8a4755dae98baa3b133590e11dae3bcc1f9d769d67f16c3835
BUCKET=symcluster

if [ "$cmd" = stop ]; then
    if [ -f "$dir/garage.pid" ]; then
        pid=$(cat "$dir/garage.pid")
        kill "$pid" 2>/dev/null || true
        rm -f "$dir/garage.pid"
        # Wait for it to exit (a few seconds), so that the next start finds its ports free.
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    exit 0
fi
[ "$cmd" = start ] || { echo "garage.sh: unknown command $cmd" >&2; exit 2; }
command -v garage >/dev/null || { echo "garage.sh: garage not on PATH" >&2; exit 1; }

rpc=$((port + 1)); admin=$((port + 3))
if [ -f "$dir/garage.pid" ] && kill -0 "$(cat "$dir/garage.pid")" 2>/dev/null; then
    echo "garage.sh: already running in $dir (pid $(cat "$dir/garage.pid"))" >&2
    exit 1
fi
for p in "$port" "$rpc" "$admin"; do
    if (exec 3<>/dev/tcp/127.0.0.1/"$p") 2>/dev/null; then
        echo "garage.sh: port $p is in use" >&2
        exit 1
    fi
done
cat > "$dir/garage.toml" <<TOML
metadata_dir = "$dir/meta"
data_dir = "$dir/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(printf '%064d' "$port")"

[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$port"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$admin"
admin_token = "symcluster-admin-token"
TOML

export GARAGE_CONFIG_FILE="$dir/garage.toml"
garage server > "$dir/garage.log" 2>&1 &
echo $! > "$dir/garage.pid"

for _ in $(seq 1 100); do
    garage status > /dev/null 2>&1 && break
    kill -0 "$(cat "$dir/garage.pid")" 2>/dev/null || {
        echo "garage.sh: garage exited; see $dir/garage.log" >&2
        exit 1
    }
    sleep 0.1
done
if [ ! -f "$dir/configured" ]; then
    node=$(garage node id -q 2>/dev/null | cut -d@ -f1)
    garage layout assign -z dc1 -c 1G "$node" > /dev/null
    garage layout apply --version 1 > /dev/null
    garage key import --yes -n symcluster "$KEY_ID" "$SECRET" > /dev/null
    garage bucket create "$BUCKET" > /dev/null
    garage bucket allow --read --write --owner "$BUCKET" --key symcluster > /dev/null
    touch "$dir/configured"
fi
# Wait until the S3 API answers.
for _ in $(seq 1 100); do
    (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && break
    sleep 0.1
done
# A Garage that could not bind its S3 port has exited: what answered was another process.
kill -0 "$(cat "$dir/garage.pid")" 2>/dev/null || {
    echo "garage.sh: garage exited; see $dir/garage.log" >&2
    exit 1
}
cat <<ENV
export AWS_ACCESS_KEY_ID=$KEY_ID
export AWS_SECRET_ACCESS_KEY=$SECRET
export SYMCLUSTER_S3_BUCKET=$BUCKET
export SYMCLUSTER_S3_ENDPOINT=http://127.0.0.1:$port
export SYMCLUSTER_S3_REGION=garage
ENV

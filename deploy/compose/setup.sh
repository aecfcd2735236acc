#!/bin/sh
# Garage's one-time set-up for deploy/compose.yaml, run by its `setup` service on every `up`
# (a step already done is skipped): a layout for the single node, the S3 keys, the buckets
# (symcluster's and the one Tansu stores its topics in) and each key's rights on them. Through
# Garage's admin API v2 with curl; POSIX sh (the curl image's busybox). Settings, from
# compose.yaml:
#   GARAGE_ADMIN_URL    the admin API (http://garage:3903)
#   GARAGE_ADMIN_TOKEN  [admin] admin_token of compose/garage.toml
#   GARAGE_CAPACITY     bytes given to the node in the layout
#   KEYS                "name:key-id:secret ..." (ids GK + 24 hex digits, secrets 64 hex digits)
#   BUCKETS             "bucket ..."
#   GRANTS              "bucket:key-id:rights ...", rights of r (read), w (write), o (owner)
set -eu

admin=${GARAGE_ADMIN_URL:-http://garage:3903}
auth="Authorization: Bearer ${GARAGE_ADMIN_TOKEN:?}"

# api METHOD ENDPOINT [JSON]: the answer, on one line without blanks; fails on an HTTP error.
api() {
    if [ $# -ge 3 ]; then
        answer=$(curl -fsS -X "$1" -H "$auth" -H 'Content-Type: application/json' --data "$3" "$admin/v2/$2")
    else
        answer=$(curl -fsS -X "$1" -H "$auth" "$admin/v2/$2")
    fi || return 1
    printf %s "$answer" | tr -d ' \n\r\t'
}

# The first 64-hex-digit "id" of a JSON answer (a node's or a bucket's).
first_id() {
    printf %s "$1" | grep -o '"id":"[0-9a-f]\{64\}"' | head -n 1 | cut -d '"' -f 4
}

# Garage starts in a second or two.
tries=0
until status=$(api GET GetClusterStatus 2>/dev/null); do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "setup: Garage's admin API at $admin did not answer" >&2
        exit 1
    fi
    sleep 1
done

version=$(printf %s "$status" | sed -n 's/.*"layoutVersion":\([0-9]*\).*/\1/p')
if [ "${version:-0}" = 0 ]; then
    node=$(first_id "$status")
    [ -n "$node" ] || { echo "setup: no node id in $status" >&2; exit 1; }
    api POST UpdateClusterLayout \
        "{\"roles\":[{\"id\":\"$node\",\"zone\":\"dc1\",\"capacity\":${GARAGE_CAPACITY:-10000000000},\"tags\":[]}]}" >/dev/null
    api POST ApplyClusterLayout '{"version":1}' >/dev/null
    echo "setup: layout applied (node $node)"
fi

for entry in ${KEYS:-}; do
    name=${entry%%:*}
    rest=${entry#*:}
    id=${rest%%:*}
    secret=${rest#*:}
    if api GET "GetKeyInfo?id=$id" >/dev/null 2>&1; then
        continue
    fi
    api POST ImportKey \
        "{\"name\":\"$name\",\"accessKeyId\":\"$id\",\"secretAccessKey\":\"$secret\"}" >/dev/null
    echo "setup: key $name ($id) imported"
done

for bucket in ${BUCKETS:-}; do
    if ! api GET "GetBucketInfo?globalAlias=$bucket" >/dev/null 2>&1; then
        api POST CreateBucket "{\"globalAlias\":\"$bucket\"}" >/dev/null
        echo "setup: bucket $bucket created"
    fi
done

for grant in ${GRANTS:-}; do
    bucket=${grant%%:*}
    rest=${grant#*:}
    id=${rest%%:*}
    rights=${rest#*:}
    bucket_id=$(first_id "$(api GET "GetBucketInfo?globalAlias=$bucket")")
    [ -n "$bucket_id" ] || { echo "setup: no id for bucket $bucket" >&2; exit 1; }
    can_read=false can_write=false is_owner=false
    case $rights in *r*) can_read=true ;; esac
    case $rights in *w*) can_write=true ;; esac
    case $rights in *o*) is_owner=true ;; esac
    api POST AllowBucketKey \
        "{\"bucketId\":\"$bucket_id\",\"accessKeyId\":\"$id\",\"permissions\":{\"read\":$can_read,\"write\":$can_write,\"owner\":$is_owner}}" >/dev/null
done
echo "setup: Garage ready (buckets: ${BUCKETS:-none})"

#!/usr/bin/env bash
# Offline checks of everything in deploy/ (run by scripts/test.sh, so by CI):
# - Kubernetes: the Kustomize overlay rendered (namespace, labels, images applied to every
#   resource it lists) and every resource validated against the Kubernetes 1.30 API schemas,
#   strictly (unknown fields refused), with kubernetes-validate (PyPI);
# - compose.yaml: validated against the Compose Specification JSON schema that docker-compose
#   ships (its wheel, from PyPI), with jsonschema; every service's image or build named;
# - systemd units: `systemd-analyze verify`, which must print nothing (it exits 0 on unknown
#   keys and bad values, so its output is what counts), ExecStart pointed at the built binaries;
# - the launchd plist: parsed, with the keys launchd needs;
# - the Grafana dashboard: parsed, every panel with a query (its metrics are checked against
#   real /metrics by the end-to-end tests).
# Needs python3 and the release binaries (target/release). Python packages go into a venv in
# ~/.cache/symcluster-deploy-venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# A fresh Debian machine may lack venv support or systemd-analyze.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv
fi
command -v systemd-analyze >/dev/null || { apt-get update -qq && apt-get install -y -qq systemd; }

venv=${XDG_CACHE_HOME:-$HOME/.cache}/symcluster-deploy-venv
if [ ! -x "$venv/bin/kubernetes-validate" ] || [ ! -f "$venv/compose_spec.json" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q 'kubernetes-validate==1.37.0' 'pyyaml>=6' 'jsonschema>=4'
    wheel_dir=$(mktemp -d)
    "$venv/bin/pip" download -q --no-deps 'docker-compose==1.29.2' -d "$wheel_dir"
    "$venv/bin/python" - "$wheel_dir"/docker_compose-1.29.2-*.whl "$venv/compose_spec.json" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    open(sys.argv[2], "wb").write(wheel.read("compose/config/compose_spec.json"))
PY
    rm -rf "$wheel_dir"
fi

rendered=$(mktemp -d)
trap 'rm -rf "$rendered"' EXIT

# Kubernetes: render the overlay, then validate.
"$venv/bin/python" - deploy/kubernetes "$rendered/kubernetes.yaml" <<'PY'
import os, sys, yaml
base, out = sys.argv[1], sys.argv[2]
k = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
known = {"apiVersion", "kind", "namespace", "labels", "resources", "images"}
unknown = set(k) - known
if unknown:
    sys.exit(f"kustomization.yaml: fields this check does not render: {sorted(unknown)}")
labels = {}
for entry in k.get("labels", []):
    labels.update(entry["pairs"])
images = {i["name"]: f'{i.get("newName", i["name"])}:{i["newTag"]}' for i in k.get("images", [])}
listed = set(k["resources"])
present = {f for f in os.listdir(base) if f.endswith(".yaml") and f != "kustomization.yaml"}
missing = listed - present
if missing:
    sys.exit(f"kustomization.yaml lists missing files: {sorted(missing)}")
unlisted = present - listed - {"secret.example.yaml"}
if unlisted:
    sys.exit(f"files not in kustomization.yaml: {sorted(unlisted)}")
docs = []
def set_images(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str) and value in images:
                node[key] = images[value]
            else:
                set_images(value)
    elif isinstance(node, list):
        for item in node:
            set_images(item)
for name in k["resources"] + ["secret.example.yaml"]:
    for doc in yaml.safe_load_all(open(os.path.join(base, name))):
        if doc is None:
            continue
        meta = doc.setdefault("metadata", {})
        if doc["kind"] != "Namespace":
            meta["namespace"] = k["namespace"]
        meta.setdefault("labels", {}).update(labels)
        set_images(doc)
        docs.append(doc)
yaml.safe_dump_all(docs, open(out, "w"), sort_keys=False)
print(f"kubernetes: rendered {len(docs)} resources")
PY
"$venv/bin/kubernetes-validate" --strict --quiet -k 1.30.0 "$rendered/kubernetes.yaml"
echo "kubernetes: every resource valid (1.30, strict)"

# Compose.
"$venv/bin/python" - deploy/compose.yaml "$venv/compose_spec.json" <<'PY'
import json, sys, yaml, jsonschema
compose = yaml.safe_load(open(sys.argv[1]))
schema = json.load(open(sys.argv[2]))
jsonschema.validate(compose, schema)
for name, service in compose["services"].items():
    if "image" not in service and "build" not in service:
        sys.exit(f"compose: service {name} has neither image nor build")
print(f"compose: {len(compose['services'])} services valid")
PY

# systemd units.
for unit in deploy/systemd/*.service; do
    sed "s#/usr/local/bin/#$PWD/target/release/#" "$unit" > "$rendered/$(basename "$unit")"
done
out=$(systemd-analyze verify "$rendered"/*.service 2>&1 || true)
if [ -n "$out" ]; then
    echo "systemd-analyze verify:" >&2
    echo "$out" >&2
    exit 1
fi
echo "systemd: $(ls deploy/systemd/*.service | wc -l) units verified"

# launchd plist and Grafana dashboard.
python3 - deploy/launchd/io.symcluster.worker.plist deploy/grafana/symcluster.json <<'PY'
import json, plistlib, sys
plist = plistlib.load(open(sys.argv[1], "rb"))
for key in ("Label", "ProgramArguments", "RunAtLoad", "KeepAlive", "ExitTimeOut"):
    if key not in plist:
        sys.exit(f"launchd plist: no {key}")
if not plist["ProgramArguments"][0].endswith("/symcluster-worker"):
    sys.exit("launchd plist: ProgramArguments does not start the worker")
print("launchd: plist valid")
dashboard = json.load(open(sys.argv[2]))
for panel in dashboard["panels"]:
    if not panel.get("targets") or not all(t.get("expr") for t in panel["targets"]):
        sys.exit(f"dashboard: panel {panel.get('title')!r} has no query")
print(f"grafana: {len(dashboard['panels'])} panels")
PY

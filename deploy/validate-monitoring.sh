#!/usr/bin/env bash
# Offline checks of the monitoring and autoscaling kit (run by deploy/validate.sh):
# - deploy/kubernetes/monitoring, autoscaling/keda, autoscaling/hpa: each kustomization lists
#   its files and renders (namespace, labels), as `kubectl kustomize` does where kubectl is;
# - the PrometheusRule's `spec` extracted to a plain rules file: `promtool check rules`, and
#   `promtool test rules` with monitoring/tests.yaml;
# - every alert: severity page|ticket, summary, description, a runbook_url whose anchor is a
#   heading of docs/runbooks.md (and every alert heading there an alert), a test that fires it
#   and one where it stays quiet;
# - PodMonitor, PrometheusRule and ScaledObject against the schemas of their CRDs: the
#   cloudcoil-models packages on PyPI are generated from prometheus-operator's and KEDA's CRDs;
#   strict (a field the schema does not have is an error, as `kubectl apply` refuses it);
# - the HPA with kubernetes-validate (Kubernetes 1.30, strict); prometheus-adapter's Helm values
#   parsed, its rule serving the metric the HPA reads; KEDA's and the adapter's demand queries
#   parsed by promtool and shown (a promtool unit test) to compute the same demand; the same
#   scale-down behavior, bounds and target in both; the base manifests still give masters,
#   workers and the bridge a container port named `metrics` (what the PodMonitor scrapes);
# - every Grafana panel's query parsed by promtool.
# One line per check. promtool comes from Debian's `prometheus` package when it is not on the
# PATH: only its promtool is extracted (installing the package would start a server); Python
# packages go into a venv. Both are kept under ${XDG_CACHE_HOME:-$HOME/.cache}. Needs python3,
# and apt-get when promtool is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${XDG_CACHE_HOME:-$HOME/.cache}
mon=deploy/kubernetes/monitoring
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Runs a command, printing its output only when it fails.
quiet() {
    local out
    if ! out=$("$@" 2>&1); then
        echo "$out" >&2
        echo "FAILED: $*" >&2
        exit 1
    fi
}

# promtool.
promtool=$(command -v promtool || true)
if [ -z "$promtool" ]; then
    promtool=$cache/symcluster-promtool/promtool
    if [ ! -x "$promtool" ]; then
        command -v apt-get >/dev/null || {
            echo "promtool is missing, and so is apt-get to fetch it: install promtool (2.42 or later)" >&2
            exit 1
        }
        mkdir -p "$work/deb" "$(dirname "$promtool")"
        # The .deb only, not the package: no Prometheus service, no web assets.
        fetch() { (cd "$work/deb" && apt-get -qq -o APT::Sandbox::User=root download prometheus); }
        fetch 2>/dev/null || { apt-get update -qq && fetch; }
        dpkg-deb --fsys-tarfile "$work"/deb/prometheus_*.deb \
            | tar -x -O ./usr/bin/promtool > "$promtool.part"
        chmod +x "$promtool.part"
        mv "$promtool.part" "$promtool"
    fi
fi
echo "promtool: $("$promtool" --version 2>&1 | head -1) ($promtool)"

# Python: PyYAML, the CRD models, and kubernetes-validate (deploy/validate.sh's venv has the
# same version; it is used when present).
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv
fi
venv=$cache/symcluster-monitoring-venv
requirements=('pyyaml>=6' 'cloudcoil-models-prometheus-operator==0.80.1.0' 'cloudcoil-models-keda==2.16.1.0')
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/requirements.txt" 2>/dev/null)" != "${requirements[*]}" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${requirements[@]}"
    echo "${requirements[*]}" > "$venv/requirements.txt"
fi
python=$venv/bin/python
kubernetes_validate=
for candidate in "$cache/symcluster-deploy-venv/bin/kubernetes-validate" "$venv/bin/kubernetes-validate"; do
    if [ -x "$candidate" ] && [ "$("$candidate" --version 2>/dev/null)" = 1.37.0 ]; then
        kubernetes_validate=$candidate
        break
    fi
done
if [ -z "$kubernetes_validate" ]; then
    "$venv/bin/pip" install -q --disable-pip-version-check 'kubernetes-validate==1.37.0'
    kubernetes_validate=$venv/bin/kubernetes-validate
fi

# The manifests: rendered, their fields checked, the files promtool and kubernetes-validate read
# written to $work.
"$python" - "$work" <<'PY'
import json, os, re, sys
import yaml

work = sys.argv[1]
MON = "deploy/kubernetes/monitoring"
KEDA = "deploy/kubernetes/autoscaling/keda"
HPA = "deploy/kubernetes/autoscaling/hpa"
RUNBOOKS = "docs/runbooks.md"
RUNBOOK_URL = "https://github.com/symcluster/symcluster/blob/main/docs/runbooks.md#"


def fail(message):
    sys.exit(f"FAILED: {message}")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


# Kustomizations: every file listed exists, every manifest is listed; rendered with the
# namespace and labels (the only fields used), as `kubectl apply -k` would.
NOT_RESOURCES = {"kustomization.yaml", "tests.yaml", "prometheus-adapter-values.yaml"}
rendered = {}
for base in (MON, KEDA, HPA):
    k = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
    unknown = set(k) - {"apiVersion", "kind", "namespace", "labels", "resources"}
    if unknown:
        fail(f"{base}/kustomization.yaml: fields this check does not render: {sorted(unknown)}")
    present = {f for f in os.listdir(base) if f.endswith(".yaml")} - NOT_RESOURCES
    if set(k["resources"]) != present:
        fail(f"{base}/kustomization.yaml lists {sorted(k['resources'])}, the directory has {sorted(present)}")
    labels = {}
    for entry in k.get("labels", []):
        labels.update(entry["pairs"])
    docs = []
    for name in k["resources"]:
        for doc in load_all(os.path.join(base, name)):
            doc["metadata"]["namespace"] = k["namespace"]
            doc["metadata"].setdefault("labels", {}).update(labels)
            docs.append(doc)
    rendered[base] = docs
    with open(os.path.join(work, "rendered-" + base.replace("/", "_") + ".yaml"), "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)
    kinds = ", ".join(f"{d['kind']} {d['metadata']['name']}" for d in docs)
    print(f"kustomize: {base} renders {kinds} in namespace {k['namespace']}")


def one(base, kind):
    docs = [d for d in rendered[base] if d["kind"] == kind]
    if len(docs) != 1:
        fail(f"{base}: {len(docs)} {kind} objects, expected 1")
    return docs[0]


podmonitor = one(MON, "PodMonitor")
rule = one(MON, "PrometheusRule")
scaledobject = one(KEDA, "ScaledObject")
hpa = one(HPA, "HorizontalPodAutoscaler")

# CRD schemas, strictly: pydantic models generated from the CRDs' openAPIV3Schema check types,
# required fields, enums and patterns; a field the model does not know is dropped by it, so
# what it gives back must hold every field given.
from cloudcoil.models.keda import v1alpha1 as keda
from cloudcoil.models.prometheus_operator import v1 as monitoring


def unknown_fields(given, kept, path=""):
    if isinstance(given, dict):
        if not isinstance(kept, dict):
            return [path or "/"]
        out = []
        for key, value in given.items():
            if key not in kept:
                out.append(f"{path}.{key}")
            else:
                out += unknown_fields(value, kept[key], f"{path}.{key}")
        return out
    if isinstance(given, list) and isinstance(kept, list):
        return [p for i, (g, k) in enumerate(zip(given, kept)) for p in unknown_fields(g, k, f"{path}[{i}]")]
    return []


for doc, model, source in [
    (podmonitor, monitoring.PodMonitor, "prometheus-operator 0.80.1"),
    (rule, monitoring.PrometheusRule, "prometheus-operator 0.80.1"),
    (scaledobject, keda.ScaledObject, "KEDA 2.16.1"),
]:
    name = f"{doc['kind']} {doc['metadata']['name']}"
    try:
        parsed = model.model_validate(doc)
    except Exception as e:  # pydantic's ValidationError lists every error
        fail(f"{name} does not match the {source} CRD schema:\n{e}")
    kept = parsed.model_dump(by_alias=True, exclude_unset=True, mode="json")
    extra = unknown_fields(doc, kept)
    if extra:
        fail(f"{name}: fields the {source} CRD schema does not have: {', '.join(extra)}")
    print(f"crd schema: {name} valid against the {source} CRD (strict)")

# The PodMonitor scrapes what the base manifests expose.
names = {"symcluster-master": 7701, "symcluster-worker": 7702, "symcluster-kafka-bridge": 9810}
selected = set()
for expr in podmonitor["spec"]["selector"].get("matchExpressions", []):
    if expr["key"] == "app.kubernetes.io/name" and expr["operator"] == "In":
        selected |= set(expr["values"])
if selected != set(names) or podmonitor["spec"].get("jobLabel") != "app.kubernetes.io/name":
    fail(f"PodMonitor must select {sorted(names)} with jobLabel app.kubernetes.io/name (alerts use job=<name>)")
ports = {e["port"] for e in podmonitor["spec"]["podMetricsEndpoints"]}
if ports != {"metrics"}:
    fail(f"PodMonitor scrapes ports {sorted(ports)}, expected ['metrics']")
found = {}
for manifest in ("master.yaml", "worker.yaml", "kafka-bridge.yaml"):
    for doc in load_all(os.path.join("deploy/kubernetes", manifest)):
        if doc["kind"] not in ("StatefulSet", "Deployment"):
            continue
        template = doc["spec"]["template"]
        name = template["metadata"]["labels"].get("app.kubernetes.io/name")
        for container in template["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") == "metrics":
                    found[name] = port["containerPort"]
for name, port in names.items():
    if name not in found:
        fail(f"deploy/kubernetes: no container port named `metrics` on {name}: the PodMonitor scrapes none")
    if found[name] != port:
        print(f"note: {name} serves metrics on {found[name]}, not {port} (the docs say {port})")
print("base manifests: container port `metrics` on " + ", ".join(f"{n} ({found[n]})" for n in names))

# Alerts: labels and annotations, runbook anchors, tests.
rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
alerts = [r for r in rules if "alert" in r]
for r in alerts:
    a = r["alert"]
    if r.get("labels", {}).get("severity") not in ("page", "ticket"):
        fail(f"alert {a}: labels.severity must be page or ticket")
    for key in ("summary", "description", "runbook_url"):
        if not r.get("annotations", {}).get(key, "").strip():
            fail(f"alert {a}: no annotations.{key}")
print(f"rules: {len(alerts)} alerts, each with severity (page|ticket), summary, description, runbook_url")


def github_anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


text = open(RUNBOOKS).read()
text = re.sub(r"```.*?```", "", text, flags=re.S)
headings = [m.group(2) for m in re.finditer(r"^(#{1,6})\s+(.+?)\s*#*\s*$", text, flags=re.M)]
anchors = {github_anchor(h) for h in headings}
for r in alerts:
    url = r["annotations"]["runbook_url"]
    if not url.startswith(RUNBOOK_URL):
        fail(f"alert {r['alert']}: runbook_url {url} is not {RUNBOOK_URL}<anchor>")
    anchor = url[len(RUNBOOK_URL):]
    if anchor != r["alert"].lower():
        fail(f"alert {r['alert']}: runbook anchor #{anchor}, expected #{r['alert'].lower()}")
    if anchor not in anchors:
        fail(f"alert {r['alert']}: {RUNBOOKS} has no heading for #{anchor}")
stale = {h for h in headings if h.startswith("Symcluster")} - {r["alert"] for r in alerts}
if stale:
    fail(f"{RUNBOOKS}: sections for alerts that do not exist: {sorted(stale)}")
print(f"runbooks: every runbook_url anchor is a heading of {RUNBOOKS} ({len(alerts)} sections)")

tests = yaml.safe_load(open(os.path.join(MON, "tests.yaml")))
fires, quiet = set(), set()
for test in tests["tests"]:
    for case in test.get("alert_rule_test", []):
        (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
for r in alerts:
    missing = [what for what, seen in (("fires", fires), ("stays quiet", quiet)) if r["alert"] not in seen]
    if missing:
        fail(f"tests.yaml: no test where {r['alert']} {' or '.join(missing)}")
print(f"tests: every alert has a test where it fires and one where it stays quiet")

# Files for promtool: the queries of the dashboard and both autoscalers, as recording rules
# (promtool parses them); a unit test of the two demand queries. (The alerts' rules file is
# extracted below by monitoring/extract-rules.py, as tests.yaml's header says.)
values = yaml.safe_load(open(os.path.join(HPA, "prometheus-adapter-values.yaml")))
external = values.get("rules", {}).get("external") or []
metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
served = [r for r in external if r.get("name", {}).get("as") == metric]
if len(served) != 1:
    fail(f"prometheus-adapter-values.yaml: {len(served)} external rules name {metric!r}, expected 1")
adapter = served[0]
if adapter.get("resources", {}).get("overrides", {}).get("namespace", {}).get("resource") != "namespace":
    fail("prometheus-adapter-values.yaml: the rule must map `namespace` to the HPA's namespace")
if not values.get("prometheus", {}).get("url"):
    fail("prometheus-adapter-values.yaml: no prometheus.url")
print(f"prometheus-adapter: values parsed, external rule serves {metric} (the HPA's metric)")

# The two autoscalers agree: bounds, target, scale-down behavior.
trigger = scaledobject["spec"]["triggers"][0]
so = scaledobject["spec"]
checks = [
    (so["scaleTargetRef"]["name"], hpa["spec"]["scaleTargetRef"]["name"], "target"),
    (so.get("scaleTargetRef", {}).get("kind", "Deployment"), hpa["spec"]["scaleTargetRef"]["kind"], "target kind"),
    (so["minReplicaCount"], hpa["spec"]["minReplicas"], "minimum"),
    (so["maxReplicaCount"], hpa["spec"]["maxReplicas"], "maximum"),
    (so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"], hpa["spec"]["behavior"], "behavior"),
]
for keda_value, hpa_value, what in checks:
    if keda_value != hpa_value:
        fail(f"ScaledObject and HPA differ in {what}: {keda_value!r} vs {hpa_value!r}")
target = hpa["spec"]["metrics"][0]["external"]["target"]["averageValue"]
target = float(target[:-1]) / 1000 if target.endswith("m") else float(target)
if trigger["type"] != "prometheus" or float(trigger["metadata"]["threshold"]) != target:
    fail(f"ScaledObject threshold {trigger['metadata'].get('threshold')} vs HPA averageValue {target}")
if (so["scaleTargetRef"]["name"], so["minReplicaCount"], so["maxReplicaCount"]) != ("symcluster-worker", 2, 50):
    fail("autoscaling: expected Deployment symcluster-worker, 2 to 50 workers")
print(f"autoscaling: KEDA and HPA agree (Deployment {so['scaleTargetRef']['name']}, {so['minReplicaCount']}-{so['maxReplicaCount']} workers, {target} per worker, same scale-down)")

with open(os.path.join(work, "hpa.yaml"), "w") as f:
    yaml.safe_dump(hpa, f, sort_keys=False)

keda_query = trigger["metadata"]["query"]
adapter_query = (
    adapter["metricsQuery"]
    .replace("<<.LabelMatchers>>", 'namespace="symcluster"')
    .replace("<<.Series>>", "symcluster_queue_depth")
)
if "<<" in adapter_query:
    fail(f"prometheus-adapter metricsQuery uses a template this check does not fill: {adapter['metricsQuery']}")
dashboard = json.load(open("deploy/grafana/symcluster.json"))
queries = []
for panel in dashboard["panels"]:
    if not panel.get("targets") or not all(t.get("expr") for t in panel["targets"]):
        fail(f"dashboard: panel {panel.get('title')!r} has no query")
    for t in panel["targets"]:
        expr = re.sub(r"\$__(rate_)?interval", "5m", t["expr"])
        queries.append({"record": f"dashboard:panel_{panel['id']}:{t['refId']}", "expr": expr})
with open(os.path.join(work, "queries.yaml"), "w") as f:
    yaml.safe_dump({"groups": [
        {"name": "autoscaling", "rules": [
            {"record": "autoscaling:demand:keda", "expr": keda_query},
            {"record": "autoscaling:demand:adapter", "expr": adapter_query},
        ]},
        {"name": "dashboard", "rules": queries},
    ]}, f, sort_keys=False, width=1000)

# Demand = queued + busy: the leader 3 native + 4 js queued, 10 busy; followers 0; another
# namespace's cluster, not counted.
def series(name, labels, value):
    text = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{text}}}", "values": f"{value}x10"}

input_series = []
for ns, pods in (("symcluster", {"symcluster-master-0": (3, 4, 10, 2), "symcluster-master-1": (0, 0, 0, 0)}),
                 ("other", {"symcluster-master-0": (50, 0, 40, 0)})):
    for pod, (native, js, busy, free) in pods.items():
        labels = {"job": "symcluster-master", "namespace": ns, "pod": pod}
        input_series += [
            series("symcluster_queue_depth", {**labels, "kind": "native"}, native),
            series("symcluster_queue_depth", {**labels, "kind": "js"}, js),
            series("symcluster_cluster_slots", {**labels, "state": "busy"}, busy),
            series("symcluster_cluster_slots", {**labels, "state": "free"}, free),
        ]
with open(os.path.join(work, "queries-tests.yaml"), "w") as f:
    yaml.safe_dump({
        "rule_files": ["queries.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series,
            "promql_expr_test": [
                {"expr": "autoscaling:demand:keda", "eval_time": "5m",
                 "exp_samples": [{"labels": "autoscaling:demand:keda", "value": 17}]},
                {"expr": "autoscaling:demand:adapter", "eval_time": "5m",
                 "exp_samples": [{"labels": "autoscaling:demand:adapter", "value": 17}]},
            ],
        }],
    }, f, sort_keys=False, width=1000)
with open(os.path.join(work, "counts"), "w") as f:
    f.write(f"{len(rules)} {len(dashboard['panels'])} {len(queries)}\n")
PY
read -r rule_count panel_count query_count < "$work/counts"

# The rendering above, compared with Kustomize's own where kubectl is installed.
if command -v kubectl >/dev/null; then
    for base in "$mon" deploy/kubernetes/autoscaling/keda deploy/kubernetes/autoscaling/hpa; do
        quiet kubectl kustomize "$base" -o "$work/kubectl-${base//\//_}.yaml"
    done
    "$python" - "$work" <<'PY'
import glob, os, sys
import yaml

work = sys.argv[1]
for ours in sorted(glob.glob(os.path.join(work, "rendered-*.yaml"))):
    theirs = ours.replace("rendered-", "kubectl-")
    key = lambda d: (d["kind"], d["metadata"]["name"])
    a = sorted(yaml.safe_load_all(open(ours)), key=key)
    b = sorted((d for d in yaml.safe_load_all(open(theirs)) if d), key=key)
    if a != b:
        sys.exit(f"FAILED: {os.path.basename(ours)[9:-5].replace('_', '/')}: kubectl kustomize renders something else")
print("kustomize: the three kustomizations render as kubectl kustomize renders them")
PY
else
    echo "kustomize: kubectl not installed, rendering not compared with kubectl kustomize"
fi

# promtool: the alerts, their unit tests, the other queries.
"$python" "$mon/extract-rules.py" "$mon/prometheusrule.yaml" > "$work/symcluster-rules.yaml"
quiet "$promtool" check rules "$work/symcluster-rules.yaml"
echo "promtool check rules: $rule_count rules of $mon/prometheusrule.yaml"
cp "$mon/tests.yaml" "$work/tests.yaml"
quiet "$promtool" test rules "$work/tests.yaml"
echo "promtool test rules: $mon/tests.yaml passed"
quiet "$promtool" check rules "$work/queries.yaml"
echo "promtool: KEDA's and prometheus-adapter's demand queries and the dashboard's $query_count queries ($panel_count panels) parse"
quiet "$promtool" test rules "$work/queries-tests.yaml"
echo "promtool test rules: KEDA's and prometheus-adapter's queries give the same demand (queued + busy, one namespace)"

# The HPA against the Kubernetes API schema.
quiet "$kubernetes_validate" --strict --quiet -k 1.30.0 "$work/hpa.yaml"
echo "kubernetes-validate: HorizontalPodAutoscaler symcluster-worker valid (1.30, strict)"

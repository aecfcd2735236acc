#!/usr/bin/env bash
# Offline checks of everything in deploy/ (run by scripts/test.sh, so by CI):
# - Kubernetes: the Kustomize overlay rendered (namespace, labels, images applied to every
#   resource it lists, subdirectory kustomizations and components included) by a small
#   emulation of Kustomize, compared with `kubectl kustomize` when kubectl is installed;
#   - every built-in resource (and the example Secrets) validated against the Kubernetes 1.30
#     API schemas, strictly (unknown fields refused), with kubernetes-validate (PyPI);
#   - cert-manager's Issuers and Certificates (CRDs, which kubernetes-validate does not know)
#     against the validators @kubernetes-models/cert-manager (npm) generated from cert-manager's
#     CRDs, plus unknown fields refused from its type definitions; without node/npm or the
#     registry, said so and checked structurally only;
#   - what the schemas cannot see: each pod reads only its own role's Secrets (and never the
#     CA's), by key, and those keys exist in secret.example.yaml; the tokens file there hashes
#     the worker and bridge tokens under the right roles; every container has readiness and
#     liveness probes (httpGet /ready, /live) on a named port it declares, the one its
#     --metrics-listen serves; --listen/--peer-listen match the ports named grpc/peer; every
#     file flag (--tls-*, --tokens-file) points into a mounted Secret key; --peers and
#     SYMCLUSTER_MASTER name the StatefulSet's pods; Services select pods with the ports they
#     target; the certificates chain to the CA Issuer, the masters' names every address it is
#     reached at, with server and client auth, the workers' is a client certificate; the
#     NetworkPolicies deny ingress by default, open the peer port to masters only, the workers
#     to nothing but metrics, name ports the pods have, and limit the workers' egress; the pods
#     meet the `restricted` Pod Security profile the namespace enforces;
# - compose.yaml: validated against the Compose Specification JSON schema that docker-compose
#   ships (its wheel, from PyPI), with jsonschema; every service's image or build named, third-
#   party images pinned (Garage and Tansu to the versions scripts/test.sh tests against), the
#   set-up creating every bucket used (Tansu's storage bucket included) with the keys and rights
#   the services use, tokens matching compose/tokens.toml, files mounted present, setup.sh
#   parsed by sh -n;
# - systemd units: `systemd-analyze verify`, which must print nothing (it exits 0 on unknown
#   keys and bad values, so its output is what counts), ExecStart pointed at the built binaries;
# - the launchd plist: parsed, with the keys launchd needs;
# - the Grafana dashboard: parsed, every panel with a query (its metrics are checked against
#   real /metrics by the end-to-end tests).
# Needs python3 and the release binaries (target/release); node and npm for the cert-manager
# schema check. Python packages go into a venv in ~/.cache/symcluster-deploy-venv, the npm
# package beside it.
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

# Kubernetes: render the overlay (a Kustomize emulation: resources as files or directories
# with their own kustomization.yaml, components, namespace, labels, images), then validate.
# Writes: kubernetes.yaml (built-in kinds and the example Secrets, for kubernetes-validate),
# cert-manager.json (cert-manager.io objects), kustomize.json (what `kubectl kustomize` would
# print), secrets.json (the example Secrets).
"$venv/bin/python" - deploy/kubernetes "$rendered" <<'PY'
import json, os, sys, yaml
base, out = sys.argv[1], sys.argv[2]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterIssuer",
                  "CustomResourceDefinition", "PriorityClass", "StorageClass",
                  "PersistentVolume", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration", "APIService"}
KNOWN = {"apiVersion", "kind", "namespace", "labels", "resources", "components", "images"}

def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]

def set_images(node, images):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str) and value in images:
                node[key] = images[value]
            else:
                set_images(value, images)
    elif isinstance(node, list):
        for item in node:
            set_images(item, images)

def render(directory, component=False, root=False):
    path = os.path.join(directory, "kustomization.yaml")
    if not os.path.isfile(path):
        sys.exit(f"{directory}: no kustomization.yaml")
    k = yaml.safe_load(open(path))
    unknown = set(k) - KNOWN
    if unknown:
        sys.exit(f"{path}: fields this check does not render: {sorted(unknown)}")
    kind = k.get("kind", "Kustomization")
    if component and kind != "Component":
        sys.exit(f"{path}: listed in components but its kind is {kind}")
    if not component and kind != "Kustomization":
        sys.exit(f"{path}: kind {kind} where a Kustomization is expected")
    docs = []
    for entry in k.get("resources", []):
        target = os.path.join(directory, entry)
        if os.path.isdir(target):
            docs += render(target)
        elif os.path.isfile(target):
            docs += load_docs(target)
        else:
            sys.exit(f"{path} lists {entry}, which does not exist")
    for entry in k.get("components", []):
        docs += render(os.path.join(directory, entry), component=True)
    if root:
        listed = {e for e in k.get("resources", []) if os.path.isfile(os.path.join(directory, e))}
        present = {f for f in os.listdir(directory)
                   if f.endswith(".yaml") and f not in ("kustomization.yaml", "secret.example.yaml")}
        unlisted = present - listed
        # A file whose objects a subdirectory's kustomization now renders (moved there) is
        # left over: said, not an error; any other file left out is.
        moved = {}
        for top, _, names in sorted(os.walk(directory)):
            if top == directory or "kustomization.yaml" not in names:
                continue
            sub = os.path.relpath(top, directory)
            try:
                there = {(d["kind"], d["metadata"]["name"]) for d in render(top)}
            except SystemExit:
                continue
            for f in unlisted:
                objects = {(d["kind"], d["metadata"]["name"]) for d in load_docs(os.path.join(directory, f))}
                if objects and objects <= there:
                    moved[f] = sub
        for f, sub in sorted(moved.items()):
            print(f"kubernetes: {f} is not in the base; its objects are in {sub}/ now: delete it")
        if unlisted - set(moved):
            sys.exit(f"{path}: files not listed in it: {sorted(unlisted - set(moved))}")
    labels = {}
    for entry in k.get("labels", []):
        labels.update(entry["pairs"])
    images = {i["name"]: f'{i.get("newName", i["name"])}:{i["newTag"]}' for i in k.get("images", [])}
    for doc in docs:
        meta = doc.setdefault("metadata", {})
        if "namespace" in k and doc["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        if labels:
            meta.setdefault("labels", {}).update(labels)
        set_images(doc, images)
    return docs

docs = render(base, root=True)
seen = set()
for doc in docs:
    key = (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])
    if key in seen:
        sys.exit(f"kubernetes: {key} rendered twice")
    seen.add(key)
json.dump(docs, open(os.path.join(out, "kustomize.json"), "w"))

# The example Secrets: namespace and labels as the overlay's.
k = yaml.safe_load(open(os.path.join(base, "kustomization.yaml")))
secrets = load_docs(os.path.join(base, "secret.example.yaml"))
for doc in secrets:
    if doc["kind"] != "Secret":
        sys.exit(f"secret.example.yaml: a {doc['kind']}, not a Secret")
    doc["metadata"]["namespace"] = k["namespace"]
    for entry in k.get("labels", []):
        doc["metadata"].setdefault("labels", {}).update(entry["pairs"])
json.dump(secrets, open(os.path.join(out, "secrets.json"), "w"))

def builtin(api_version):
    group = api_version.split("/")[0] if "/" in api_version else ""
    return group in ("", "apps", "batch", "policy", "autoscaling") or group.endswith(".k8s.io")

core = [d for d in docs if builtin(d["apiVersion"])] + secrets
cert_manager = [d for d in docs if d["apiVersion"].split("/")[0] == "cert-manager.io"]
other = [d for d in docs if d not in core and d not in cert_manager]
if other:
    sys.exit("kubernetes: no schema to check these against (teach deploy/validate.sh): "
             + ", ".join(f'{d["apiVersion"]} {d["kind"]} {d["metadata"]["name"]}' for d in other))
yaml.safe_dump_all(core, open(os.path.join(out, "kubernetes.yaml"), "w"), sort_keys=False)
json.dump(cert_manager, open(os.path.join(out, "cert-manager.json"), "w"))
print(f"kubernetes: rendered {len(docs)} resources ({len(cert_manager)} of cert-manager) "
      f"and {len(secrets)} example Secrets")
PY
"$venv/bin/kubernetes-validate" --strict --quiet -k 1.30.0 "$rendered/kubernetes.yaml"
echo "kubernetes: every built-in resource valid (1.30, strict)"

# The emulation against Kustomize itself, where kubectl (which embeds it) is installed.
if command -v kubectl >/dev/null && kubectl kustomize deploy/kubernetes > "$rendered/kubectl.yaml" 2> "$rendered/kubectl.err"; then
    "$venv/bin/python" - "$rendered/kustomize.json" "$rendered/kubectl.yaml" <<'PY'
import json, sys, yaml
ours = json.load(open(sys.argv[1]))
theirs = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d]
key = lambda d: (d["kind"], d["metadata"].get("namespace") or "", d["metadata"]["name"])
ours, theirs = {key(d): d for d in ours}, {key(d): d for d in theirs}
if set(ours) != set(theirs):
    sys.exit(f"kubernetes: the emulation renders {sorted(set(ours) ^ set(theirs))} "
             "differently from kubectl kustomize")
for k in ours:
    if json.dumps(ours[k], sort_keys=True) != json.dumps(theirs[k], sort_keys=True):
        sys.exit(f"kubernetes: {k} rendered differently from kubectl kustomize")
print(f"kubernetes: the emulation renders what kubectl kustomize does ({len(ours)} resources)")
PY
elif command -v kubectl >/dev/null; then
    echo "kubectl kustomize deploy/kubernetes failed:" >&2
    cat "$rendered/kubectl.err" >&2
    exit 1
else
    echo "kubernetes: kubectl not installed, the emulation not compared with kubectl kustomize"
fi

# cert-manager's objects against the validators generated from its CRDs (npm), when node and
# the package can be had; the structural checks below run either way.
cm_version=6.0.0
cm_dir=${XDG_CACHE_HOME:-$HOME/.cache}/symcluster-deploy-cert-manager-$cm_version
cm_package=$cm_dir/node_modules/@kubernetes-models/cert-manager
cm_skip=
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    cm_skip="node or npm not installed"
elif [ ! -f "$cm_package/package.json" ]; then
    mkdir -p "$cm_dir"
    if ! npm install --prefix "$cm_dir" --no-audit --no-fund --ignore-scripts --engine-strict=false \
            --loglevel=error "@kubernetes-models/cert-manager@$cm_version" > "$cm_dir/npm.log" 2>&1; then
        cm_skip="npm install @kubernetes-models/cert-manager@$cm_version failed: $(grep -m1 -i 'err' "$cm_dir/npm.log" || tail -n1 "$cm_dir/npm.log")"
        rm -rf "$cm_dir"
    fi
fi
if [ -z "$cm_skip" ]; then
    cat > "$cm_dir/check.mjs" <<'JS'
// Validates cert-manager objects (a JSON array, argv[2]) with @kubernetes-models/cert-manager:
// its validators (generated from cert-manager's CRDs: types, enums, required fields), then
// unknown fields, which those validators let through (a CRD's structural schema prunes them;
// the API server's strict field validation refuses them), from the package's type definitions.
import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
const docs = JSON.parse(readFileSync(process.argv[2], "utf8"));
const errors = [];

// Interfaces of a .d.ts file: name → { fields: {name: type}, bases: [type] }; its imports.
const files = new Map();
function parse(file) {
  if (files.has(file)) return files.get(file);
  const text = readFileSync(file, "utf8");
  const imports = new Map();
  for (const m of text.matchAll(/^import \{ (\w+) \} from "([^"]+)";$/gm)) {
    const spec = m[2].startsWith(".") ? resolve(dirname(file), m[2]) : join(modules, m[2]);
    imports.set(m[1], spec.replace(/\.js$/, "") + ".d.ts");
  }
  const interfaces = new Map();
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const head = lines[i].match(/^export interface (\w+)(?: extends ([^{]+))? \{$/);
    if (!head) continue;
    const fields = {};
    const bases = head[2] ? head[2].split(",").map((s) => s.trim()) : [];
    for (i++; i < lines.length && lines[i] !== "}"; i++) {
      const field = lines[i].match(/^ {4}"([^"]+)"\??: (.*)$/);
      if (!field) continue;
      let type = field[2];
      if (type === "{") {
        const value = lines[++i].match(/^\s*\[key: string\]: (.*);$/);
        type = `Map<${value ? value[1] : "any"}>`;
        while (lines[i].trim() !== "};") i++;
      } else {
        type = type.replace(/;$/, "");
      }
      fields[field[1]] = type;
    }
    interfaces.set(head[1], { fields, bases });
  }
  const parsed = { imports, interfaces };
  files.set(file, parsed);
  return parsed;
}

// A type named in `file` → the interface it is ({fields, bases, file}), or null (a leaf: a
// scalar, an enum or another alias, left to the validators).
function lookup(file, name) {
  const { imports, interfaces } = parse(file);
  if (interfaces.has(name)) return { ...interfaces.get(name), file };
  const target = imports.get(name);
  if (!target || !existsSync(target)) return null;
  const other = parse(target);
  const [first] = other.interfaces.keys();
  return first ? { ...other.interfaces.get(first), file: target } : null;
}

function walk(value, type, file, path) {
  let m;
  if ((m = type.match(/^Array<(.*)>$/))) {
    if (Array.isArray(value)) value.forEach((v, i) => walk(v, m[1], file, `${path}[${i}]`));
    return;
  }
  if ((m = type.match(/^Map<(.*)>$/))) {
    if (value && typeof value === "object") {
      for (const [k, v] of Object.entries(value)) walk(v, m[1], file, `${path}.${k}`);
    }
    return;
  }
  if (!/^I\w+$/.test(type)) return;
  const iface = lookup(file, type);
  if (!iface || !value || typeof value !== "object" || Array.isArray(value)) return;
  const fields = { ...iface.fields };
  for (const base of iface.bases) {
    const b = lookup(iface.file, base);
    if (b) Object.assign(fields, b.fields);
  }
  for (const [k, v] of Object.entries(value)) {
    if (!(k in fields)) errors.push(`${path}.${k}: unknown field`);
    else walk(v, fields[k], iface.file, `${path}.${k}`);
  }
}

const pkg = join(modules, "@kubernetes-models/cert-manager");
for (const doc of docs) {
  const [group, version] = doc.apiVersion.split("/");
  const where = `${doc.kind} ${doc.metadata?.name}`;
  const dts = join(pkg, group, version, `${doc.kind}.d.ts`);
  if (!existsSync(dts)) {
    errors.push(`${where}: ${doc.apiVersion} ${doc.kind} is not a cert-manager kind`);
    continue;
  }
  const model = await import(join(pkg, group, version, `${doc.kind}.js`));
  try {
    new model[doc.kind](doc).validate();
  } catch (e) {
    errors.push(`${where}: ${e.message}`);
  }
  walk(doc, `I${doc.kind}`, dts, where);
}
if (errors.length) {
  for (const e of errors) console.error(`cert-manager: ${e}`);
  process.exit(1);
}
console.log(`cert-manager: ${docs.length} objects valid against @kubernetes-models/cert-manager ` +
  `${JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version} (cert-manager's CRDs; unknown fields refused)`);
JS
    node "$cm_dir/check.mjs" "$rendered/cert-manager.json"
else
    echo "cert-manager objects: CRD schema check skipped: $cm_skip"
fi

# What the schemas cannot see (docs/operator-guide.md, "Kubernetes").
"$venv/bin/python" - "$rendered" "${cm_skip:+structural}" <<'PY'
import hashlib, json, os, re, sys, tomllib
out, fallback = sys.argv[1], sys.argv[2] == "structural"
docs = json.load(open(os.path.join(out, "kustomize.json")))
secrets = {s["metadata"]["name"]: s for s in json.load(open(os.path.join(out, "secrets.json")))}
errors = []
def fail(message):
    errors.append(message)

def of_kind(*kinds):
    return [d for d in docs if d["kind"] in kinds]

def secret_data(name):
    s = secrets.get(name)
    if s is None:
        return None
    data = dict(s.get("stringData") or {})
    data.update({k: None for k in (s.get("data") or {})})
    return data

def matches(selector, labels):
    """A LabelSelector (matchLabels, matchExpressions) against labels; {} selects all."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        present, value = e["key"] in labels, labels.get(e["key"])
        op = e["operator"]
        if op == "In" and value not in e["values"]: return False
        if op == "NotIn" and present and value in e["values"]: return False
        if op == "Exists" and not present: return False
        if op == "DoesNotExist" and present: return False
    return True

# Workloads: name → (doc, pod spec, pod labels, role Secret name).
workloads = {}
for d in of_kind("Deployment", "StatefulSet", "DaemonSet", "Job"):
    template = d["spec"]["template"]
    labels = template["metadata"].get("labels", {})
    app = labels.get("app.kubernetes.io/name", "")
    if not app.startswith("symcluster-"):
        fail(f'{d["kind"]} {d["metadata"]["name"]}: pod label app.kubernetes.io/name '
             'must name its role (symcluster-<role>)')
    workloads[d["metadata"]["name"]] = (d, template["spec"], labels, app)

configmaps = {c["metadata"]["name"]: c.get("data", {}) for c in of_kind("ConfigMap")}
def environment(container):
    env = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmaps.get(source["configMapRef"]["name"], {}))
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
    return env

def command_line(container):
    return " ".join(container.get("command", []) + container.get("args", []))

def flag(line, name):
    m = re.search(rf"--{name}[= ]+\"?([^\s\"]+)", line)
    return m.group(1) if m else None

def port_of(address):
    return int(address.rsplit(":", 1)[1]) if address and ":" in address else None

certificates = of_kind("Certificate")
issuers = {i["metadata"]["name"]: i for i in of_kind("Issuer")}
cert_secrets = {c["spec"].get("secretName"): c for c in certificates}
ca_secrets = {i["spec"]["ca"]["secretName"] for i in issuers.values() if "ca" in i["spec"]}
CERT_KEYS = {"tls.crt", "tls.key", "ca.crt"}

# 1. Secrets: a pod reads only its own role's (symcluster-<role>, symcluster-<role>-tls), by
#    key, keys the example Secret has; never the CA's; every role Secret is read.
used_secrets = set()
for name, (d, pod, labels, app) in workloads.items():
    where = f'{d["kind"]} {name}'
    own = {app, f"{app}-tls"}
    refs = []
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for source in c.get("envFrom", []):
            if "secretRef" in source:
                fail(f"{where}: envFrom loads all of Secret {source['secretRef']['name']}; "
                     "take its keys one by one (env[].valueFrom.secretKeyRef)")
                refs.append(source["secretRef"]["name"])
        for e in c.get("env", []):
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                refs.append(ref["name"])
                data = secret_data(ref["name"])
                if data is not None and ref["key"] not in data and not ref.get("optional"):
                    fail(f"{where}: env {e['name']} reads key {ref['key']} that Secret "
                         f"{ref['name']} (secret.example.yaml) does not have")
    for v in pod.get("volumes", []):
        if "secret" in v:
            refs.append(v["secret"]["secretName"])
        for source in (v.get("projected") or {}).get("sources", []):
            if "secret" in source:
                refs.append(source["secret"]["name"])
    for ref in refs:
        used_secrets.add(ref)
        if ref in ca_secrets:
            fail(f"{where}: reads the CA's Secret {ref} (it holds the CA's key)")
        elif ref not in own:
            fail(f"{where}: reads Secret {ref}, which is not its role's ({sorted(own)})")
    if app not in refs:
        fail(f"{where}: reads no key of its role's Secret {app}")
for name in secrets:
    if name not in used_secrets:
        fail(f"secret.example.yaml: Secret {name} is read by no pod")
for ref in used_secrets:
    if ref.endswith("-tls") and ref not in cert_secrets:
        fail(f"Secret {ref} is mounted but no Certificate writes it")
    if not ref.endswith("-tls") and ref not in secrets:
        fail(f"Secret {ref} is read but secret.example.yaml does not show it")

# 2. Files given by flags are keys of mounted Secrets; probes; ports and flags agree.
def mounted_file(pod, container, path):
    """The (secret, key) a path reads, or None."""
    for m in container.get("volumeMounts", []):
        prefix = m["mountPath"].rstrip("/") + "/"
        if not path.startswith(prefix):
            continue
        rel = path[len(prefix):]
        volume = next((v for v in pod.get("volumes", []) if v["name"] == m["name"]), None)
        if volume is None or "secret" not in volume:
            return None
        secret = volume["secret"]["secretName"]
        items = volume["secret"].get("items")
        if items is not None:
            key = next((i["key"] for i in items if i["path"] == rel), None)
        else:
            key = rel
        return secret, key
    return None

for name, (d, pod, labels, app) in workloads.items():
    where = f'{d["kind"]} {name}'
    for c in pod.get("containers", []):
        cwhere = f"{where} container {c['name']}"
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
        line = command_line(c)
        env = environment(c)
        for probe_kind, path in (("readinessProbe", "/ready"), ("livenessProbe", "/live"),
                                 ("startupProbe", "/live")):
            probe = c.get(probe_kind)
            if probe is None:
                if probe_kind != "startupProbe":
                    fail(f"{cwhere}: no {probe_kind}")
                continue
            get = probe.get("httpGet")
            if get is None:
                fail(f"{cwhere}: {probe_kind} is not an httpGet (the probes are plain HTTP on "
                     "the metrics port, whatever gRPC speaks)")
                continue
            if not isinstance(get.get("port"), str) or get["port"] not in ports:
                fail(f"{cwhere}: {probe_kind} port {get.get('port')!r} is not a port the "
                     f"container names ({sorted(ports)})")
                continue
            if get.get("path") != path:
                fail(f"{cwhere}: {probe_kind} path {get.get('path')!r}, expected {path}")
            metrics = port_of(flag(line, "metrics-listen") or env.get("SYMCLUSTER_METRICS_LISTEN"))
            if metrics is None:
                fail(f"{cwhere}: no --metrics-listen (the probes' port)")
            elif ports.get(get.get("port")) != metrics:
                fail(f"{cwhere}: {probe_kind} on port {get.get('port')} "
                     f"({ports.get(get.get('port'))}), --metrics-listen serves {metrics}")
        for flag_name, port_name in (("listen", "grpc"), ("peer-listen", "peer"),
                                     ("metrics-listen", "metrics")):
            port = port_of(flag(line, flag_name))
            if port is not None and ports.get(port_name) != port:
                fail(f"{cwhere}: --{flag_name} port {port} but its port named {port_name} is "
                     f"{ports.get(port_name)}")
        for flag_name in ("tls-cert", "tls-key", "tls-ca", "tls-client-ca", "tokens-file"):
            path = flag(line, flag_name)
            if path is None:
                continue
            found = mounted_file(pod, c, path)
            if found is None:
                fail(f"{cwhere}: --{flag_name} {path} is in no mounted Secret")
                continue
            secret, key = found
            keys = CERT_KEYS if secret in cert_secrets else set(secret_data(secret) or {})
            if key is None:
                fail(f"{cwhere}: --{flag_name} {path} is not among the items mounted from "
                     f"Secret {secret}")
            elif key not in keys:
                fail(f"{cwhere}: --{flag_name} {path} reads key {key!r}, which Secret {secret} "
                     f"does not have ({sorted(keys)})")
        if flag(line, "tls-cert") and not flag(line, "tls-key"):
            fail(f"{cwhere}: --tls-cert without --tls-key")

# 3. The masters: --peers and SYMCLUSTER_MASTER name the StatefulSet's pods through its
#    headless Service, which exposes grpc and peer and publishes not-ready pods.
services = {s["metadata"]["name"]: s for s in of_kind("Service")}
master_hosts, master_tls, master_mtls = set(), False, False
for d in of_kind("StatefulSet"):
    name, pod = d["metadata"]["name"], d["spec"]["template"]["spec"]
    c = pod["containers"][0]
    line, env = command_line(c), environment(c)
    if "symcluster-master" not in line:
        continue
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
    headless = services.get(d["spec"]["serviceName"])
    if headless is None:
        fail(f"StatefulSet {name}: no Service {d['spec']['serviceName']}")
        continue
    if headless["spec"].get("clusterIP") != "None" or not headless["spec"].get("publishNotReadyAddresses"):
        fail(f"Service {headless['metadata']['name']}: must be headless and publish not-ready "
             "addresses (Raft elects before the masters are ready)")
    exposed = {p.get("targetPort") for p in headless["spec"]["ports"]}
    for needed in ("grpc", "peer"):
        if needed not in exposed:
            fail(f"Service {headless['metadata']['name']}: does not expose port {needed}")
    if not flag(line, "peer-listen"):
        fail(f"StatefulSet {name}: the masters have no --peer-listen (the Raft port apart)")
    pods = [f"{name}-{i}.{d['spec']['serviceName']}" for i in range(d["spec"]["replicas"])]
    master_hosts |= set(pods)
    peers = env.get("SYMCLUSTER_PEERS", "")
    want = {f"{i + 1}={p}:{ports.get('grpc')}" for i, p in enumerate(pods)}
    if set(peers.split(",")) != want:
        fail(f"StatefulSet {name}: SYMCLUSTER_PEERS {peers!r}, expected {','.join(sorted(want))}")
    master_tls = bool(flag(line, "tls-cert"))
    master_mtls = bool(flag(line, "tls-client-ca"))
    if not master_tls:
        fail(f"StatefulSet {name}: the masters serve without TLS (--tls-cert, --tls-key)")
    if not master_mtls:
        fail(f"StatefulSet {name}: the masters take workers and peers without client "
             "certificates (--tls-client-ca)")
    scheme = "https" if master_tls else "http"
    want = {f"{scheme}://{p}:{ports.get('grpc')}" for p in pods}
    for wname, (_, wpod, _, _) in workloads.items():
        for wc in wpod.get("containers", []):
            wline = command_line(wc)
            if wname == name or not re.search(r"symcluster-(worker|kafka-bridge)", wline):
                continue
            masters = flag(wline, "master") or environment(wc).get("SYMCLUSTER_MASTER", "")
            if set(masters.split(",")) != want:
                fail(f"{wname}: SYMCLUSTER_MASTER {masters!r}, expected {','.join(sorted(want))}")
            if master_tls and not flag(wline, "tls-ca"):
                fail(f"{wname}: no --tls-ca for the masters' certificates")
            if master_mtls and "symcluster-worker" in wline and not flag(wline, "tls-cert"):
                fail(f"{wname}: the masters require a client certificate (--tls-client-ca); "
                     "the worker gives none (--tls-cert)")

# 4. Services select pods that have the ports they target.
for s in services.values():
    selector = s["spec"].get("selector") or {}
    selected = [w for w in workloads.values() if matches({"matchLabels": selector}, w[2])]
    if not selected:
        fail(f"Service {s['metadata']['name']}: selects no pod")
    for p in s["spec"]["ports"]:
        target = p.get("targetPort", p["port"])
        for d, pod, _, _ in selected:
            ports = [q for c in pod["containers"] for q in c.get("ports", [])]
            if not any(q.get("name") == target or q["containerPort"] == target for q in ports):
                fail(f"Service {s['metadata']['name']}: port {target} is not a port of "
                     f"{d['metadata']['name']}")

# 5. Certificates: chained to a CA Issuer; the masters' names every address they are reached
#    at, for server and client auth; the workers' is a client certificate naming no master.
USAGES = {"signing", "digital signature", "content commitment", "key encipherment",
          "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only",
          "decipher only", "any", "server auth", "client auth", "code signing",
          "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user",
          "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"}
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
ISSUER_TYPES = {"selfSigned", "ca", "acme", "vault", "venafi"}
for name, i in issuers.items():
    types = set(i.get("spec", {})) & ISSUER_TYPES
    if len(types) != 1 or set(i.get("spec", {})) - ISSUER_TYPES:
        fail(f"Issuer {name}: spec must be exactly one of {sorted(ISSUER_TYPES)}")
for name, i in issuers.items():
    if "ca" in i["spec"]:
        ca = cert_secrets.get(i["spec"]["ca"].get("secretName"))
        if ca is None or not ca["spec"].get("isCA"):
            fail(f"Issuer {name}: its CA Secret is written by no Certificate with isCA")
if len(cert_secrets) != len(certificates):
    fail("Certificates: two write the same Secret")
for c in certificates:
    name, spec = c["metadata"]["name"], c.get("spec", {})
    if not spec.get("secretName") or not (spec.get("issuerRef") or {}).get("name"):
        fail(f"Certificate {name}: needs secretName and issuerRef.name")
        continue
    ref = spec["issuerRef"]
    if ref.get("kind", "Issuer") == "Issuer" and ref["name"] not in issuers:
        fail(f"Certificate {name}: issuerRef names Issuer {ref['name']}, which is not rendered")
    if not any(spec.get(k) for k in ("commonName", "dnsNames", "uris", "ipAddresses",
                                     "emailAddresses", "literalSubject")):
        fail(f"Certificate {name}: names nothing")
    for usage in spec.get("usages", []):
        if usage not in USAGES:
            fail(f"Certificate {name}: unknown usage {usage!r}")
    for k in ("duration", "renewBefore"):
        if k in spec and not DURATION.match(str(spec[k])):
            fail(f"Certificate {name}: {k} {spec[k]!r} is not a Go duration")
    key = spec.get("privateKey", {})
    if key.get("algorithm", "RSA") not in ("RSA", "ECDSA", "Ed25519"):
        fail(f"Certificate {name}: privateKey.algorithm {key['algorithm']!r}")
    if key.get("rotationPolicy", "Never") not in ("Never", "Always"):
        fail(f"Certificate {name}: privateKey.rotationPolicy {key['rotationPolicy']!r}")
    if not spec.get("isCA"):
        issuer = issuers.get(ref["name"], {})
        if "ca" not in issuer.get("spec", {}) and ref.get("kind", "Issuer") == "Issuer":
            fail(f"Certificate {name}: not issued by the CA Issuer")

def certificate_of(app):
    for c in certificates:
        if c["spec"].get("secretName") == f"{app}-tls":
            return c
    return None

namespace = next((d["metadata"].get("namespace") for d in docs if d["kind"] == "StatefulSet"), None)
master_cert = certificate_of("symcluster-master")
if master_cert is None:
    fail("no Certificate writes symcluster-master-tls")
else:
    names = set(master_cert["spec"].get("dnsNames", []))
    wanted = set(master_hosts)
    for s in services.values():
        if (s["spec"].get("selector") or {}).get("app.kubernetes.io/name") == "symcluster-master":
            if s["spec"].get("clusterIP") != "None":
                wanted |= {s["metadata"]["name"], f"{s['metadata']['name']}.{namespace}.svc"}
    wanted |= {f"{h}.{namespace}.svc" for h in master_hosts}
    missing = wanted - names
    if missing:
        fail(f"Certificate {master_cert['metadata']['name']}: dnsNames lack {sorted(missing)}")
    usages = set(master_cert["spec"].get("usages", []))
    if not {"server auth", "client auth"} <= usages:
        fail(f"Certificate {master_cert['metadata']['name']}: usages must include server auth "
             "and client auth (masters present it to each other's peer port)")
worker_cert = certificate_of("symcluster-worker")
if worker_cert is None:
    fail("no Certificate writes symcluster-worker-tls")
else:
    usages = set(worker_cert["spec"].get("usages", []))
    if "client auth" not in usages or "server auth" in usages:
        fail(f"Certificate {worker_cert['metadata']['name']}: a client certificate only")
    if set(worker_cert["spec"].get("dnsNames", [])) & (master_hosts | {f"{h}.{namespace}.svc" for h in master_hosts}):
        fail(f"Certificate {worker_cert['metadata']['name']}: names a master (it could speak "
             "for one on the peer port)")

# 6. NetworkPolicies: ingress denied by default; the peer port open to masters only; workers
#    open on their metrics port only, to namespaces only; named ports exist; workers' egress
#    limited to masters, DNS and S3.
policies = of_kind("NetworkPolicy")
def selected(selector):
    return [w for w in workloads.values() if matches(selector, w[2])]
def container_ports(pod):
    return [q for c in pod["containers"] for q in c.get("ports", [])]
def has_port(pod, port):
    return any(q.get("name") == port or q["containerPort"] == port for q in container_ports(pod))

if not any(p["spec"].get("podSelector") == {} and "Ingress" in p["spec"].get("policyTypes", [])
           and not p["spec"].get("ingress") for p in policies):
    fail("NetworkPolicy: no default deny of ingress (podSelector {}, policyTypes [Ingress], no rule)")
# (workload, port) → the peers allowed in.
opened = {}
for p in policies:
    name, spec = p["metadata"]["name"], p["spec"]
    targets = selected(spec.get("podSelector", {}))
    if spec.get("podSelector") and not targets:
        fail(f"NetworkPolicy {name}: selects no pod")
    for rule in spec.get("ingress", []):
        ports = [q["port"] for q in rule.get("ports", [])]
        if not rule.get("ports"):
            fail(f"NetworkPolicy {name}: an ingress rule opens every port")
        for d, pod, _, _ in targets:
            for port in ports:
                if not has_port(pod, port):
                    fail(f"NetworkPolicy {name}: port {port} is not a port of {d['metadata']['name']}")
                    continue
                number = next(q["containerPort"] for q in container_ports(pod)
                              if q.get("name") == port or q["containerPort"] == port)
                opened.setdefault((d["metadata"]["name"], number), []).extend(rule.get("from") or [{}])
    for rule in spec.get("egress", []):
        if not rule.get("to") or not rule.get("ports"):
            fail(f"NetworkPolicy {name}: an egress rule open to everywhere or every port")
        for peer in rule.get("to", []):
            if "podSelector" in peer and "namespaceSelector" not in peer:
                for d, pod, _, _ in selected(peer["podSelector"]):
                    for q in rule.get("ports", []):
                        if isinstance(q["port"], str) and not has_port(pod, q["port"]):
                            fail(f"NetworkPolicy {name}: egress to port {q['port']}, which "
                                 f"{d['metadata']['name']} does not have")

for wname, (d, pod, labels, app) in workloads.items():
    ports = {q.get("name"): q["containerPort"] for q in container_ports(pod)}
    for port_name, number in ports.items():
        peers = opened.get((wname, number), [])
        if port_name == "peer":
            for peer in peers:
                only_masters = (set(peer) == {"podSelector"} and
                                all(w[3] == "symcluster-master" for w in selected(peer["podSelector"])))
                if not only_masters:
                    fail(f"NetworkPolicy: {wname}'s peer port is open to {peer} (masters only)")
        if port_name == "metrics":
            for peer in peers:
                if set(peer) != {"namespaceSelector"}:
                    fail(f"NetworkPolicy: {wname}'s metrics port open to {peer} "
                         "(the monitoring namespace only)")
            if not peers:
                fail(f"NetworkPolicy: {wname}'s metrics port is open to no one (Prometheus)")
        if app == "symcluster-worker" and port_name != "metrics" and peers:
            fail(f"NetworkPolicy: worker port {port_name} is open ({peers})")
        if port_name == "grpc" and app == "symcluster-master":
            callers = {w[3] for peer in peers if set(peer) == {"podSelector"}
                       for w in selected(peer["podSelector"])}
            for needed in ("symcluster-worker", "symcluster-kafka-bridge"):
                if needed not in callers:
                    fail(f"NetworkPolicy: {needed} cannot reach the masters' grpc port")
    if app == "symcluster-worker":
        egress = [p for p in policies if "Egress" in p["spec"].get("policyTypes", [])
                  and matches(p["spec"].get("podSelector", {}), labels)]
        if not egress:
            fail(f"NetworkPolicy: {wname}'s egress is not limited")
        rules = [r for p in egress for r in p["spec"].get("egress", [])]
        to_masters = any(any(w[3] == "symcluster-master" for w in selected(peer["podSelector"]))
                         for r in rules for peer in r.get("to", []) if set(peer) == {"podSelector"})
        dns = any(q.get("port") == 53 for r in rules for q in r.get("ports", []))
        if egress and not (to_masters and dns):
            fail(f"NetworkPolicy: {wname}'s egress must let it reach the masters and DNS")

# 7. The `restricted` Pod Security profile (namespace.yaml enforces it).
for name, (d, pod, labels, app) in workloads.items():
    where = f'{d["kind"]} {name}'
    psc = pod.get("securityContext", {})
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        fail(f"{where}: host namespaces")
    if any("hostPath" in v for v in pod.get("volumes", [])):
        fail(f"{where}: a hostPath volume")
    if pod.get("automountServiceAccountToken") is not False:
        fail(f"{where}: mounts a service account token it does not need")
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        if not (sc.get("runAsNonRoot", psc.get("runAsNonRoot"))):
            fail(f"{where} {c['name']}: runAsNonRoot")
        seccomp = (sc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            fail(f"{where} {c['name']}: seccompProfile RuntimeDefault")
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
            fail(f"{where} {c['name']}: allowPrivilegeEscalation: false")
        if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
            fail(f"{where} {c['name']}: capabilities must drop ALL")

# 8. The tokens file of the masters' Secret: valid entries, the workers' and the bridge's
#    tokens hashed under their roles, the admin and peer tokens apart.
ROLES = {"device", "ingest", "upload", "worker", "admin", "peer"}
FIELDS = {"name", "sha256", "role", "projects", "rate", "burst", "bytes_per_second"}
def check_tokens(where, text, expected):
    """expected: (token, role) pairs the file must hash."""
    try:
        entries = tomllib.loads(text).get("tokens", [])
    except tomllib.TOMLDecodeError as e:
        fail(f"{where}: {e}")
        return
    by_hash = {}
    for i, entry in enumerate(entries, 1):
        if set(entry) - FIELDS:
            fail(f"{where}: token {i}: unknown fields {sorted(set(entry) - FIELDS)}")
        if entry.get("role") not in ROLES:
            fail(f"{where}: token {i}: role {entry.get('role')!r}")
        if not re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256", ""))):
            fail(f"{where}: token {i}: sha256 must be 64 hex digits")
        needs = entry.get("role") in ("device", "ingest", "upload")
        if needs != bool(entry.get("projects")):
            fail(f"{where}: token {i}: projects {'required' if needs else 'not taken'} "
                 f"for role {entry.get('role')}")
        by_hash[entry.get("sha256")] = entry.get("role")
    for token, role in expected:
        digest = hashlib.sha256(token.encode()).hexdigest()
        if by_hash.get(digest) != role:
            fail(f"{where}: no {role} entry hashing that role's token "
                 f"(printf %s \"$TOKEN\" | sha256sum)")
    return by_hash

master = secret_data("symcluster-master") or {}
hashed = check_tokens("secret.example.yaml symcluster-master tokens.toml",
                      master.get("tokens.toml", ""),
                      [((secret_data("symcluster-worker") or {}).get("SYMCLUSTER_TOKEN", ""), "worker"),
                       ((secret_data("symcluster-kafka-bridge") or {}).get("SYMCLUSTER_TOKEN", ""), "ingest")])
admin, peer = master.get("SYMCLUSTER_TOKEN"), master.get("SYMCLUSTER_PEER_TOKEN")
if not admin or not peer or admin == peer:
    fail("secret.example.yaml: the masters need an admin token and a different peer token")

if errors:
    for e in errors:
        print(f"kubernetes: {e}", file=sys.stderr)
    sys.exit(1)
print(f"kubernetes: {len(workloads)} workloads read only their role's Secrets, by key; probes on "
      "named metrics ports; flags, ports and mounted files agree; TLS chained to the CA "
      f"Issuer; {len(policies)} NetworkPolicies (default deny, peer port masters-only); "
      "restricted Pod Security; tokens file hashes the worker and ingest tokens"
      + ("; cert-manager objects checked structurally" if fallback else ""))
PY

# Compose.
sh -n deploy/compose/setup.sh
"$venv/bin/python" - deploy/compose.yaml "$venv/compose_spec.json" scripts/test.sh <<'PY'
import hashlib, json, os, re, sys, tomllib, yaml, jsonschema
path = sys.argv[1]
compose = yaml.safe_load(open(path))
schema = json.load(open(sys.argv[2]))
jsonschema.validate(compose, schema)
here = os.path.dirname(path)
services = compose["services"]
errors = []
fail = errors.append

def env(service):
    e = services[service].get("environment") or {}
    if isinstance(e, list):
        e = dict(item.split("=", 1) for item in e)
    return {k: str(v) for k, v in e.items()}

def command(service):
    c = services[service].get("command") or []
    return c if isinstance(c, list) else c.split()

def arg(cmd, name):
    return cmd[cmd.index(name) + 1] if name in cmd else None

# Images: named, third-party ones pinned; Garage and Tansu at the versions the tests run.
test_sh = open(sys.argv[3]).read()
tested = dict(re.findall(r"cargo install (garage|tansu) --locked --version ([0-9.]+)", test_sh))
for name, service in services.items():
    image = service.get("image")
    if image is None and "build" not in service:
        fail(f"service {name} has neither image nor build")
    if image and "build" not in service:
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else None
        if tag in (None, "latest"):
            fail(f"service {name}: image {image} is not pinned to a version")
        if "/garage:" in image and tag != f"v{tested.get('garage')}":
            fail(f"service {name}: {image}, the tests run Garage {tested.get('garage')}")
        if "/tansu:" in image and tag != tested.get("tansu"):
            fail(f"service {name}: {image}, the tests run Tansu {tested.get('tansu')}")
    deps = service.get("depends_on") or []
    for dep in deps:
        if dep not in services:
            fail(f"service {name} depends on {dep}, which is no service")
    for volume in service.get("volumes") or []:
        source = volume.split(":")[0] if isinstance(volume, str) else volume.get("source", "")
        if source.startswith("."):
            if not os.path.exists(os.path.join(here, source)):
                fail(f"service {name} mounts {source}, which does not exist")

# The set-up: keys, buckets, grants; every S3 user's key among them, with the rights it needs.
setup = next((n for n, s in services.items() if "GRANTS" in env(n)), None)
if setup is None:
    sys.exit("compose: no set-up service (GRANTS) for Garage")
setup_env = env(setup)
keys = {}
for entry in setup_env.get("KEYS", "").split():
    name, key_id, secret = entry.split(":")
    if not re.fullmatch(r"GK[0-9a-f]{24}", key_id) or not re.fullmatch(r"[0-9a-f]{64}", secret):
        fail(f"{setup}: key {name}: Garage needs GK + 24 hex digits and a 64-hex-digit secret")
    keys[key_id] = secret
buckets = set(setup_env.get("BUCKETS", "").split())
grants = {}
for entry in setup_env.get("GRANTS", "").split():
    bucket, key_id, rights = entry.split(":")
    if bucket not in buckets or key_id not in keys:
        fail(f"{setup}: grant {entry} names an unknown bucket or key")
    grants[(bucket, key_id)] = rights
garage_toml = tomllib.load(open(os.path.join(here, "compose", "garage.toml"), "rb"))
if setup_env.get("GARAGE_ADMIN_TOKEN") != garage_toml["admin"]["admin_token"]:
    fail(f"{setup}: GARAGE_ADMIN_TOKEN differs from compose/garage.toml's admin_token")

def needs(service, bucket, rights):
    e = env(service)
    key_id = e.get("AWS_ACCESS_KEY_ID")
    if keys.get(key_id) != e.get("AWS_SECRET_ACCESS_KEY"):
        fail(f"{service}: its S3 key is not one the set-up imports")
    have = grants.get((bucket, key_id), "")
    if not set(rights) <= set(have):
        fail(f"{service}: its key has {have or 'no'} rights on bucket {bucket}, needs {rights}")
    if bucket not in buckets:
        fail(f"{service}: uses bucket {bucket}, which the set-up does not create")

for name in services:
    cmd, e = command(name), env(name)
    engine = arg(cmd, "--storage-engine")
    if engine and engine.startswith("s3://"):
        needs(name, engine[len("s3://"):].strip("/"), "rw")
        if setup not in (services[name].get("depends_on") or {}):
            fail(f"{name}: stores in S3 but does not wait for {setup}")
    if cmd[:1] == ["symcluster-master"]:
        needs(name, e["SYMCLUSTER_S3_BUCKET"], "rw")
    if cmd[:1] == ["symcluster-worker"]:
        needs(name, e["SYMCLUSTER_S3_BUCKET"], "rw" if "--share-symcaches=false" not in cmd else "r")

# Tokens: per role, the tokens file hashing the worker and bridge tokens.
masters = [n for n in services if command(n)[:1] == ["symcluster-master"]]
tokens_file = None
for name in masters:
    e = env(name)
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services[name].get("volumes", []) if isinstance(v, str)}
    source = mounted.get(e.get("SYMCLUSTER_TOKENS_FILE"))
    if source is None:
        fail(f"{name}: SYMCLUSTER_TOKENS_FILE is not a mounted file")
        continue
    tokens_file = os.path.join(here, source)
    if not e.get("SYMCLUSTER_PEER_TOKEN") or e["SYMCLUSTER_PEER_TOKEN"] == e.get("SYMCLUSTER_TOKEN"):
        fail(f"{name}: needs a peer token apart from the admin token")
    if not e.get("SYMCLUSTER_PEER_LISTEN"):
        fail(f"{name}: no SYMCLUSTER_PEER_LISTEN (the Raft port apart)")
    ids = {arg(command(m), "--id"): m for m in masters}
    want = {f"{i}={m}:{command(m)[command(m).index('--listen') + 1].rsplit(':', 1)[1]}" for i, m in ids.items()}
    if set(e.get("SYMCLUSTER_PEERS", "").split(",")) != want:
        fail(f"{name}: SYMCLUSTER_PEERS {e.get('SYMCLUSTER_PEERS')!r}, expected {','.join(sorted(want))}")
if tokens_file:
    entries = {t["sha256"]: t["role"] for t in tomllib.load(open(tokens_file, "rb")).get("tokens", [])}
    for name in services:
        cmd, token = command(name), env(name).get("SYMCLUSTER_TOKEN")
        role = {"symcluster-worker": "worker", "symcluster-kafka-bridge": "ingest"}.get(cmd[0] if cmd else None)
        if role and entries.get(hashlib.sha256((token or "").encode()).hexdigest()) != role:
            fail(f"{name}: its token is not a {role} token of {os.path.relpath(tokens_file)}")
        if role and token == env(masters[0]).get("SYMCLUSTER_TOKEN"):
            fail(f"{name}: holds the admin token")

if errors:
    for e in errors:
        print(f"compose: {e}", file=sys.stderr)
    sys.exit(1)
print(f"compose: {len(services)} services valid; images pinned (Garage {tested.get('garage')}, "
      f"Tansu {tested.get('tansu')}); the set-up creates buckets {sorted(buckets)} with the keys "
      "the services use; per-role tokens")
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

# The monitoring kit (Prometheus rules, ServiceMonitors, its own kustomization), when present.
if [ -f deploy/validate-monitoring.sh ]; then bash deploy/validate-monitoring.sh; fi

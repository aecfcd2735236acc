#!/usr/bin/env python3
"""Writes the `spec` of the PrometheusRule(s) in a manifest as a plain Prometheus rules file,
which `promtool check rules` and `promtool test rules` read:

    python3 deploy/kubernetes/monitoring/extract-rules.py \
        deploy/kubernetes/monitoring/prometheusrule.yaml > /tmp/symcluster-rules.yaml

Several PrometheusRules (or several documents) are merged into one file, their groups in order;
a group name used twice is an error (Prometheus refuses it too). Needs PyYAML.
"""

import sys

import yaml


def main(paths):
    groups, seen = [], set()
    for path in paths:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc or doc.get("kind") != "PrometheusRule":
                    continue
                for group in doc.get("spec", {}).get("groups", []):
                    if group["name"] in seen:
                        sys.exit(f"{path}: rule group {group['name']!r} defined twice")
                    seen.add(group["name"])
                    groups.append(group)
    if not groups:
        sys.exit(f"no PrometheusRule groups in {', '.join(paths)}")
    yaml.safe_dump({"groups": groups}, sys.stdout, sort_keys=False, width=1000)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

"""Validate prometheus-operator objects (PodMonitor, PrometheusRule), which kubernetes-validate
has no schema for, against typed models generated from the prometheus-operator CRDs
(PyPI cloudcoil-models-prometheus-operator). Strict: a field the model does not know is
dropped by the model, so the object must survive a parse -> dump round trip unchanged.

usage: python tests/packaging/validate_crds.py FILE...
"""

from __future__ import annotations

import json
import sys

import yaml
from cloudcoil.models.prometheus_operator import v1

KINDS = {("monitoring.coreos.com/v1", "PodMonitor"): v1.PodMonitor,
         ("monitoring.coreos.com/v1", "PrometheusRule"): v1.PrometheusRule}


def diff(a, b, path="") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in b:
                return f"{path}.{k}: not in the CRD schema"
            if k not in a:
                return f"{path}.{k}: added by the model"
            d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {json.dumps(a)} became {json.dumps(b)}"


def main() -> int:
    rc, seen = 0, 0
    for filename in sys.argv[1:]:
        for obj in yaml.safe_load_all(open(filename)):
            if not obj:
                continue
            model = KINDS.get((obj.get("apiVersion"), obj.get("kind")))
            if model is None:
                continue
            seen += 1
            where = f"{filename}: {obj['kind']}/{obj['metadata']['name']}"
            try:
                parsed = model.model_validate(obj)
            except Exception as exc:  # pydantic.ValidationError
                print(f"ERROR {where}: {exc}")
                rc = 1
                continue
            problem = diff(obj, parsed.model_dump(by_alias=True, exclude_unset=True, mode="json"))
            if problem:
                print(f"ERROR {where}: {problem}")
                rc = 1
            else:
                print(f"INFO {where} passed (prometheus-operator CRD model)")
    if seen == 0:
        print("validate_crds: no PodMonitor/PrometheusRule objects found", file=sys.stderr)
    return rc


if __name__ == "__main__":
    sys.exit(main())

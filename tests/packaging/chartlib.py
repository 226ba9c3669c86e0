"""Render the redlock-elector chart with Helm's own SDK (helm-python-sdk, Helm v4).

Shared by scripts/check-packaging.sh (lint + render for kubernetes-validate),
scripts/gen-manifests.py (manifests/ from the chart) and the pytest assertions.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "redlock-elector"
PARENT = REPO / "charts" / "examples" / "parent-app"
CI_DIR = CHART / "ci"
RELEASE = "demo"
NAMESPACE = "demo-ns"
# Kubernetes versions everything is validated against: the oldest with native sidecars on by
# default (the chart's default form), and the newest kubernetes-validate knows (filled in by
# check-packaging.sh). Chart.yaml's kubeVersion allows 1.27 for sidecar.native=false;
# check-packaging.sh checks that form there with the helm CLI and kubernetes-validate.
KUBE_MIN = "1.29.0"


def ci_cases() -> dict[str, Path]:
    """charts/redlock-elector/ci/<case>-values.yaml -> {case: path}."""
    cases = {}
    for path in sorted(CI_DIR.glob("*.yaml")):
        cases[path.name.removesuffix(".yaml").removesuffix("-values")] = path
    if not cases:
        raise SystemExit(f"no values files in {CI_DIR}")
    return cases


def load_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def split_objects(manifests: dict[str, str]) -> list[dict[str, Any]]:
    """Every Kubernetes object in a render, in template order (NOTES.txt left out)."""
    objects = []
    for name in sorted(manifests):
        if name.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(manifests[name]):
            if doc:
                objects.append(doc)
    return objects


def render_chart(
    values: dict[str, Any] | None = None,
    *,
    chart: Path = CHART,
    name: str = RELEASE,
    namespace: str = NAMESPACE,
) -> dict[str, str]:
    """template path -> rendered text, validating values against values.schema.json first."""
    with helm.Chart.load(str(chart)) as loaded:
        loaded.validate_schema(values or {})
        return loaded.render(values or {}, name=name, namespace=namespace, is_install=True)


def lint(chart: Path, values: dict[str, Any] | None, kube_version: str) -> list[str]:
    """Helm lint (strict). Returns the problems; INFO findings are printed, not returned."""
    report = helm.lint(str(chart), values, strict=True, kube_version=f"v{kube_version}",
                       with_subcharts=True)
    problems = list(report.get("errors") or [])
    for msg in report.get("messages") or []:
        line = f"{msg.get('path')}: {msg.get('error')}"
        if msg.get("severity", 0) >= 2:
            problems.append(line)
        else:
            print(f"    lint info (accepted, see docs/development.md, the packaging checks): {line}")
    return problems


class ParentChart:
    """A copy of charts/examples/parent-app with its dependency built in (helm dependency
    update from the file:// repository), so the tree itself stays clean."""

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="parent-app-")
        root = Path(self._tmp.name)
        # Keep the relative file://../../redlock-elector repository path valid.
        shutil.copytree(CHART, root / "redlock-elector")
        shutil.copytree(PARENT, root / "examples" / "parent-app")
        self.path = root / "examples" / "parent-app"
        charts_dir = self.path / "charts"
        if charts_dir.exists():
            shutil.rmtree(charts_dir)
        helm.dependency_update(str(self.path))

    def render(self, values: dict[str, Any] | None = None) -> dict[str, str]:
        return render_chart(values, chart=self.path, name="shop", namespace="shop")

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> "ParentChart":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dump_objects(objects: list[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)

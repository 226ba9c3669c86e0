"""Lint and render every chart case into OUTDIR, one multi-document YAML file per case.

Cases: each charts/redlock-elector/ci/*.yaml, and the include-from-parent example chart
(charts/examples/parent-app, dependency built from the local chart). Exits non-zero, naming the
case, on any lint error or warning, schema violation or render failure.

usage: python tests/packaging/render_all.py OUTDIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import chartlib


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    failed = []

    for case, values_file in chartlib.ci_cases().items():
        values = chartlib.load_values(values_file)
        print(f"  chart case {case} ({values_file.relative_to(chartlib.REPO)})")
        problems = chartlib.lint(chartlib.CHART, values, chartlib.KUBE_MIN)
        if problems:
            failed.append(case)
            for p in problems:
                print(f"    LINT {case}: {p}")
        try:
            manifests = chartlib.render_chart(values)
        except Exception as exc:  # the SDK's typed errors; report and go on to the next case
            failed.append(case)
            print(f"    RENDER {case} FAILED: {exc}")
            continue
        objects = chartlib.split_objects(manifests)
        (out / f"{case}.yaml").write_text(chartlib.dump_objects(objects))
        notes = next((v for k, v in manifests.items() if k.endswith("NOTES.txt")), "")
        (out / f"{case}.NOTES.txt").write_text(notes)
        print(f"    {len(objects)} objects -> {out / (case + '.yaml')}")

    print("  parent chart example (charts/examples/parent-app)")
    try:
        with chartlib.ParentChart() as parent:
            problems = chartlib.lint(parent.path, None, chartlib.KUBE_MIN)
            for p in problems:
                print(f"    LINT parent-app: {p}")
            if problems:
                failed.append("parent-app")
            objects = chartlib.split_objects(parent.render())
            (out / "parent-app.yaml").write_text(chartlib.dump_objects(objects))
            print(f"    {len(objects)} objects -> {out / 'parent-app.yaml'}")
    except Exception as exc:
        failed.append("parent-app")
        print(f"    RENDER parent-app FAILED: {exc}")

    if failed:
        print(f"FAILED chart cases: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

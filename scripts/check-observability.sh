#!/usr/bin/env bash
# Observability checks with the real tools: promtool and a real Prometheus server (Debian package
# `prometheus`, installed here when missing), redis-server, and the sidecar binary.
#
#   scripts/check-observability.sh                 everything
#   UPDATE_DOCS_PNG=1 scripts/check-observability.sh
#                                                  also copy the plotted panels to docs/img/dashboard.png
#
# Steps: tools -> alerts source == plain rules copy -> promtool check rules + test rules ->
# dashboard structure -> build the binary -> tests/observability/e2e.py (3 Redis, 3 sidecars,
# Prometheus scraping every 1s: promtool check metrics on live /metrics, every panel query and
# every alert expression through the HTTP API, faults) -> target/observability/dashboard.png.
# Idempotent, no stdin; fails loudly with the step that failed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv-tools"
REQS="$REPO/tests/observability/requirements.txt"
ALERTS_SRC=charts/redlock-elector/files/alerts.yaml
ALERTS_COPY=monitoring/alerts.rules.yaml
DASHBOARD=charts/redlock-elector/files/dashboard.json
OUT="$REPO/target/observability"

step() { printf '\n==> %s\n' "$*"; }
die() { printf '\ncheck-observability: FAILED: %s\n' "$*" >&2; exit 1; }

source "$REPO/scripts/lib.sh"

# ------------------------------------------------------------------------------------ tools
step "tools: prometheus + promtool, redis-server, python venv"
ensure_apt prometheus prometheus
ensure_apt promtool prometheus
ensure_apt redis-server redis-server
PROMETHEUS="$(command -v prometheus)" || die "prometheus not on PATH after install"
PROMTOOL="$(command -v promtool)" || die "promtool not on PATH after install"
"$PROMETHEUS" --version 2>&1 | head -1
ensure_apt python3 python3
ensure_venv "$VENV" "$REQS" observability-requirements
PY="$VENV/bin/python"
"$PY" -c 'import matplotlib, yaml' || die "matplotlib / PyYAML do not import from $VENV"

# ------------------------------------------------------------------------------------ rules
step "alert rules: one source ($ALERTS_SRC), plain copy identical ($ALERTS_COPY)"
cmp -s "$ALERTS_SRC" "$ALERTS_COPY" \
  || die "$ALERTS_COPY differs from $ALERTS_SRC; the chart file is the source: cp $ALERTS_SRC $ALERTS_COPY"
step "promtool check rules / test rules"
"$PROMTOOL" check rules "$ALERTS_COPY" || die "promtool check rules"
"$PROMTOOL" test rules monitoring/alerts.test.yaml || die "promtool test rules"
"$PY" - "$ALERTS_COPY" monitoring/alerts.test.yaml <<'EOF' || die "every alert needs a firing unit test, a runbook description and a runbook_url"
import sys, yaml
rules = [r for g in yaml.safe_load(open(sys.argv[1]))["groups"] for r in g["rules"]]
tests = yaml.safe_load(open(sys.argv[2]))["tests"]
fired = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a.get("exp_alerts")}
for r in rules:
    assert r["alert"] in fired, f"{r['alert']}: no promtool test where it fires"
    a = r.get("annotations", {})
    assert a.get("summary") and len(a.get("description", "")) > 200, f"{r['alert']}: summary + runbook-style description"
    assert a.get("runbook_url", "").startswith("https://github.com/redlock-elector/redlock-elector/blob/main/docs/"), f"{r['alert']}: runbook_url into docs/ (its anchor is checked by tests/suite/docs_links.rs)"
    assert r.get("labels", {}).get("severity") in {"critical", "warning"}, f"{r['alert']}: severity"
print(f"{len(rules)} alerts, each with a firing unit test, a severity, a runbook description and a runbook_url")
EOF

# ------------------------------------------------------------------------------------ dashboard
step "dashboard structure ($DASHBOARD)"
"$PY" - "$DASHBOARD" <<'EOF' || die "dashboard structure"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schemaVersion"] >= 39, d["schemaVersion"]
v = {x["name"]: x for x in d["templating"]["list"]}
assert v["datasource"]["type"] == "datasource" and v["datasource"]["query"] == "prometheus"
for name in ("namespace", "lease"):
    assert v[name]["type"] == "query" and v[name]["datasource"]["uid"] == "${datasource}", name
panels = [p for p in d["panels"] if p["type"] != "row"]
ids = [p["id"] for p in d["panels"]]
assert len(ids) == len(set(ids)), "duplicate panel ids"
for p in panels:
    assert p["datasource"]["uid"] == "${datasource}", p["title"]
    assert p["targets"], p["title"]
    for t in p["targets"]:
        assert 'namespace=~"$namespace"' in t["expr"] and 'lease=~"$lease"' in t["expr"], (p["title"], t["expr"])
print(f"schemaVersion {d['schemaVersion']}, {len(panels)} panels, every query filtered by $namespace and $lease")
EOF

# ------------------------------------------------------------------------------------ e2e
step "build the sidecar"
# The binary `cargo test --release` builds for the integration tests (a no-op after test.sh's),
# not `cargo build --bin`: that resolves the dependencies without the dev-dependencies' features
# and so compiles 23 crates (and all above them) once more, minutes on a fresh machine.
cargo test --locked --release --no-run --test suite || die "cargo test --release --no-run --test suite"
BIN="${CARGO_TARGET_DIR:-$REPO/target}/release/redlock-elector"
step "end-to-end against a real Prometheus (tests/observability/e2e.py)"
mkdir -p "$OUT"
"$PY" tests/observability/e2e.py --binary "$BIN" --prometheus "$PROMETHEUS" --promtool "$PROMTOOL" \
  --plot "$OUT/dashboard.png" </dev/null || die "end-to-end observability test"
if [ "${UPDATE_DOCS_PNG:-}" = 1 ]; then
  cp "$OUT/dashboard.png" docs/img/dashboard.png
  echo "updated docs/img/dashboard.png"
fi
echo
echo "check-observability: all passed"

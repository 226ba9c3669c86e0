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
# (lint --strict, template at 1.29 and the newest Kubernetes, with/without CRD APIs; the
# non-native case also at 1.27, Chart.yaml's floor; native sidecars refused at 1.28, everything
# at 1.26) -> kubernetes-validate --strict (1.29 and newest; the non-native render at 1.27) of
# renders and manifests/ -> CRD objects -> manifests/ up to date -> kustomize build -> hadolint
# -> static binary build + smoke -> pytest assertions.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
VENV="$REPO/.venv-tools"
OUT="$REPO/target/packaging"
REQS="$REPO/tests/packaging/requirements.txt"
# The oldest Kubernetes with native sidecars on by default (the chart's default form), and the
# oldest Chart.yaml's kubeVersion allows (sidecar.native=false).
KUBE_MIN=1.29.0
KUBE_FLOOR=1.27.0
NATIVE_OFF=charts/redlock-elector/ci/native-off-values.yaml
# Where scripts/image.sh builds the static binary (a separate target dir keeps the normal build
# cache, target/release and target/debug, intact).
STATIC_TARGET_DIR="$REPO/target/static"
BIN="$STATIC_TARGET_DIR/$(uname -m)-unknown-linux-gnu/release/redlock-elector"

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
# Kubernetes $KUBE_MIN and the newest built (the non-native case also at $KUBE_FLOOR), with and
# without the prometheus-operator API announced (the chart gates PodMonitor/PrometheusRule on
# values, so a cluster without the CRDs must still render), native sidecars are refused below
# 1.29 with the chart's own message, and any form below $KUBE_FLOOR by Chart.yaml's kubeVersion.
step "helm CLI: lint --strict and template of every ci/*.yaml at Kubernetes $KUBE_MIN and the newest (native off: $KUBE_FLOOR too), native refused at 1.28, 1.26 refused"
HELM_BIN="$(scripts/control-plane.sh build)/helm" \
  || die "the helm CLI is not built: scripts/control-plane.sh build needs Go 1.26 and the Go module proxy (see docs/development.md)"
"$HELM_BIN" version --short | sed 's/^/    /'
KUBE_CP="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { sub(/^v/, "", $2); print $2; exit }' tests/control-plane/kubernetes/go.mod)"
[ -n "$KUBE_CP" ] || die "cannot read the Kubernetes version from tests/control-plane/kubernetes/go.mod"
for values in charts/redlock-elector/ci/*.yaml; do
  kubes=("$KUBE_MIN" "$KUBE_CP")
  [ "$values" = "$NATIVE_OFF" ] && kubes=("$KUBE_FLOOR" "${kubes[@]}")
  for kube in "${kubes[@]}"; do
    "$HELM_BIN" lint --strict --quiet --kube-version "$kube" -f "$values" charts/redlock-elector > "$OUT/helm-cli.log" 2>&1 \
      || { cat "$OUT/helm-cli.log"; die "helm lint --strict --kube-version $kube -f $values failed"; }
    for apis in "" "--api-versions=monitoring.coreos.com/v1"; do
      # shellcheck disable=SC2086 # $apis is one flag or none
      "$HELM_BIN" template demo charts/redlock-elector --kube-version "$kube" $apis -f "$values" > "$OUT/helm-cli.yaml" 2> "$OUT/helm-cli.log" \
        || { cat "$OUT/helm-cli.log"; die "helm template --kube-version $kube $apis -f $values failed"; }
    done
  done
  echo "    $(basename "$values"): lint and template at ${kubes[*]}"
done
DEFAULTS=charts/redlock-elector/ci/defaults-values.yaml
# At 1.27 and 1.28 Chart.yaml's kubeVersion (>=1.27.0-0, the non-native form's floor) lets the
# chart through, and the templates refuse the native sidecar (the default) with their own message;
# below 1.27 kubeVersion refuses any form.
if "$HELM_BIN" template demo charts/redlock-elector --kube-version 1.28.0 -f "$DEFAULTS" > /dev/null 2> "$OUT/helm-cli.log"; then
  die "helm template --kube-version 1.28.0 rendered a native sidecar; the templates must refuse it below 1.29"
fi
grep -q "sidecar.native=true needs Kubernetes >= 1.29" "$OUT/helm-cli.log" \
  || { cat "$OUT/helm-cli.log"; die "helm template at 1.28 failed, but not with the chart's native-sidecar message"; }
echo "    1.28, native sidecar: refused ($(tr -d '\n' < "$OUT/helm-cli.log" | cut -c1-160))"
if "$HELM_BIN" template demo charts/redlock-elector --kube-version 1.26.0 -f "$NATIVE_OFF" > /dev/null 2> "$OUT/helm-cli.log"; then
  die "helm template --kube-version 1.26.0 rendered; Chart.yaml's kubeVersion must refuse Kubernetes < $KUBE_FLOOR"
fi
grep -q "kubeVersion" "$OUT/helm-cli.log" \
  || { cat "$OUT/helm-cli.log"; die "helm template at 1.26 failed, but not on the chart's kubeVersion"; }
echo "    1.26, native off: refused by kubeVersion ($(tr -d '\n' < "$OUT/helm-cli.log" | cut -c1-120))"

# The post-renderer route for third-party charts, through the helm CLI itself: the plugin
# installed into a private plugin dir, `helm template --post-renderer` of a stand-in chart.
step "helm CLI: the post-renderer plugin (scripts/helm-post-renderer) on a third-party chart"
# Helm 4 installs plugins under HELM_DATA_HOME (not HELM_PLUGINS): both point into $OUT, so the
# user's own Helm directories are not touched.
HELM_HOME_TMP="$OUT/helm-home"
rm -rf "$HELM_HOME_TMP" && mkdir -p "$HELM_HOME_TMP"
helm_private() {
  HELM_DATA_HOME="$HELM_HOME_TMP/data" HELM_PLUGINS="$HELM_HOME_TMP/data/plugins" HELM_CONFIG_HOME="$HELM_HOME_TMP/config" \
    HELM_CACHE_HOME="$HELM_HOME_TMP/cache" PATH="$VENV/bin:$PATH" "$HELM_BIN" "$@"
}
helm_private plugin install scripts/helm-post-renderer > "$OUT/helm-cli.log" 2>&1 \
  || { cat "$OUT/helm-cli.log"; die "helm plugin install scripts/helm-post-renderer failed"; }
helm_private template shop tests/packaging/third-party-chart -n shop \
  --post-renderer redlock-elector-sidecar \
  --post-renderer-args "--config=$REPO/manifests/example-existing-workload/config.yaml" \
  --post-renderer-args StatefulSet/shop-db > "$OUT/post-rendered.yaml" 2> "$OUT/helm-cli.log" \
  || { cat "$OUT/helm-cli.log"; die "helm template --post-renderer redlock-elector-sidecar failed"; }
"$PY" - "$OUT/post-rendered.yaml" <<'EOF2' || die "the post-rendered StatefulSet lacks the native sidecar"
import sys, yaml
objs = [o for o in yaml.safe_load_all(open(sys.argv[1])) if o]
(db,) = [o for o in objs if o["kind"] == "StatefulSet"]
inits = {c["name"]: c.get("restartPolicy") for c in db["spec"]["template"]["spec"]["initContainers"]}
assert inits.get("redlock-elector") == "Always", inits
(ui,) = [o for o in objs if o["kind"] == "Deployment"]
assert "initContainers" not in ui["spec"]["template"]["spec"], "shop-ui was not named"
print(f"    StatefulSet/shop-db init containers {list(inits)}; {len(objs)} objects")
EOF2

# ---------------------------------------------------------------------- kubernetes-validate
validate() {
  # kubernetes-validate has no schemas for CRDs (PodMonitor, PrometheusRule); it warns and those
  # are checked by validate_crds.py. Any other warning or error fails. Versions: $KUBE_VERSIONS,
  # by default $KUBE_MIN and $KUBE_NEWEST.
  local log="$OUT/validate.log" k=()
  for v in ${KUBE_VERSIONS:-$KUBE_MIN $KUBE_NEWEST}; do k+=(-k "$v"); done
  "$VENV/bin/kubernetes-validate" --strict --quiet "${k[@]}" "$@" > "$log" 2>&1 \
    || { cat "$log"; die "kubernetes-validate --strict failed"; }
  if grep -v "Couldn't find schema for kind \(PodMonitor\|PrometheusRule\) with api version monitoring.coreos.com/v1" "$log" | grep -q .; then
    cat "$log"; die "kubernetes-validate printed unexpected warnings"
  fi
  grep -h . "$log" | sed 's/^/    /' || true
}
step "kubernetes-validate --strict, Kubernetes $KUBE_MIN and $KUBE_NEWEST: rendered chart"
validate "$OUT"/rendered/*.yaml "$OUT/post-rendered.yaml"
echo "    $(cat "$OUT"/rendered/*.yaml | grep -c '^kind:') objects valid"
step "kubernetes-validate --strict, Kubernetes $KUBE_FLOOR (Chart.yaml's kubeVersion): the render with sidecar.native=false"
KUBE_VERSIONS="$KUBE_FLOOR" validate "$OUT/rendered/native-off.yaml"
echo "    $(grep -c '^kind:' "$OUT/rendered/native-off.yaml") objects valid"
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
step "kubectl kustomize manifests/base, manifests/example and manifests/example-existing-workload, and kubernetes-validate --strict"
"$VENV/bin/kubectl" kustomize manifests/base > "$OUT/kustomize-base.yaml" || die "kustomize build of manifests/base failed"
"$VENV/bin/kubectl" kustomize manifests/example > "$OUT/kustomize-example.yaml" || die "kustomize build of manifests/example failed"
"$VENV/bin/kubectl" kustomize manifests/example-existing-workload > "$OUT/kustomize-existing-workload.yaml" \
  || die "kustomize build of manifests/example-existing-workload (the sidecar Component on a plain Deployment) failed"
# Whole objects only: the Component's sidecar-patch.yaml is a patch and its config.example.yaml
# a sidecar config; both are checked through the kustomize build above and tests/packaging.
manifest_files=()
while IFS= read -r f; do manifest_files+=("$f"); done < <(find manifests -name '*.yaml' ! -name kustomization.yaml \
  ! -path 'manifests/components/*' ! -name 'config*.yaml' | sort)
validate "${manifest_files[@]}" "$OUT/kustomize-base.yaml" "$OUT/kustomize-example.yaml" "$OUT/kustomize-existing-workload.yaml"
echo "    ${#manifest_files[@]} files + 3 kustomize builds valid"

# ------------------------------------------------------------------------------ Dockerfile
step "hadolint Dockerfile"
"$VENV/bin/hadolint" --failure-threshold info Dockerfile || die "hadolint found problems in Dockerfile"
echo "    clean"

# ---------------------------------------------------------------------- release workflow
# .github/workflows/release.yml cannot run here (no registry, no tag); actionlint checks its
# syntax, expressions, action inputs and runner labels. Pinned, built from source when missing.
step "actionlint .github/workflows (the release workflow)"
ACTIONLINT="$(ensure_go_tool "${ACTIONLINT[@]}")" \
  || die "actionlint is missing and could not be built (go install ${ACTIONLINT[1]}@${ACTIONLINT[2]})"
"$ACTIONLINT" -no-color .github/workflows/*.yml || die "actionlint found problems in .github/workflows"
echo "    clean ($(ls .github/workflows/*.yml | wc -l) workflow(s))"

# ---------------------------------------------------------------------------- chart README
step "charts/redlock-elector/README.md up to date with values.yaml (helm-docs)"
HELM_DOCS="$(ensure_go_tool "${HELM_DOCS[@]}")" \
  || die "helm-docs is missing and could not be built (go install ${HELM_DOCS[1]}@${HELM_DOCS[2]})"
rm -rf "$OUT/helm-docs" && mkdir -p "$OUT/helm-docs" && cp -r charts/redlock-elector "$OUT/helm-docs/"
"$HELM_DOCS" --log-level warning --chart-search-root "$OUT/helm-docs" > "$OUT/helm-docs.log" 2>&1 \
  || { cat "$OUT/helm-docs.log"; die "helm-docs failed"; }
if ! diff -u charts/redlock-elector/README.md "$OUT/helm-docs/redlock-elector/README.md"; then
  die "charts/redlock-elector/README.md is stale: run '$HELM_DOCS --chart-search-root charts/redlock-elector' and commit it"
fi
echo "    up to date"

# --------------------------------------------------------------------------- static binary
# scripts/image.sh builds it exactly as the Dockerfile's builder stage does (RUSTFLAGS, --target,
# CARGO_TARGET_DIR=target/static) and strips it as the image ships it; scripts/check-image.sh checks
# that the two agree and builds the image itself.
if [ -z "${SKIP_STATIC_BUILD:-}" ]; then
  step "static binary, as the Dockerfile builds it (scripts/image.sh binary)"
  BIN="$(scripts/image.sh binary)" || die "static build failed (scripts/image.sh binary; same flags as the Dockerfile)"
else
  step "static binary: SKIP_STATIC_BUILD set, using ${REDLOCK_ELECTOR_BIN:-$BIN}"
  BIN="$(REDLOCK_ELECTOR_BIN="${REDLOCK_ELECTOR_BIN:-$BIN}" scripts/image.sh binary)" || die "scripts/image.sh binary failed"
fi
unstripped_size="$(stat -c %s "${REDLOCK_ELECTOR_BIN:-$STATIC_TARGET_DIR/$(uname -m)-unknown-linux-gnu/release/redlock-elector}")"
mkdir -p "$OUT"
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

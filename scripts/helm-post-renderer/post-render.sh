#!/usr/bin/env bash
# Adds the redlock-elector native sidecar to named workloads of rendered manifests (stdin to
# stdout), through the kustomize Component manifests/components/sidecar: the sidecar, its
# ConfigMap (from your config file), ServiceAccount, Role, RoleBinding and the leader Service.
#
#   helm template web some/chart | post-render.sh --config config.yaml Deployment/web [StatefulSet/db ...]
#   helm install web some/chart --post-renderer redlock-elector-sidecar \
#     --post-renderer-args --config=/abs/config.yaml --post-renderer-args Deployment/web
#
#   --config FILE   the sidecar's config file (required; lease.name is replaced by the lease below)
#   --lease NAME    the lease (pod label redlock-elector/lease, leader Service selector);
#                   default: the first workload's name
#   KIND/NAME       a Deployment or StatefulSet to add the sidecar to (KIND defaults to Deployment)
# Runs `kustomize build` when kustomize is on PATH, else `kubectl kustomize`.
# REDLOCK_ELECTOR_COMPONENT overrides the Component's directory.
set -euo pipefail

die() { echo "redlock-elector post-render: $*" >&2; exit 1; }
# Portable (bash and POSIX tools only: no GNU readlink -f or realpath, so it runs on macOS too).
# This script's own directory, following symlinks to it (helm may link the plugin's directory).
self="${BASH_SOURCE[0]}"
while [ -L "$self" ]; do
  dir="$(cd "$(dirname "$self")" && pwd -P)"
  self="$(readlink "$self")"
  case "$self" in /*) ;; *) self="$dir/$self" ;; esac
done
here="$(cd "$(dirname "$self")" && pwd -P)"
component="${REDLOCK_ELECTOR_COMPONENT:-$here/../../manifests/components/sidecar}"
# relative FROM TO: the path of TO from the directory FROM (both existing directories).
relative() {
  local from to up=""
  from="$(cd "$1" && pwd -P)" to="$(cd "$2" && pwd -P)"
  while [ "$from" != / ] && [ "${to#"$from"/}" = "$to" ] && [ "$to" != "$from" ]; do
    from="$(dirname "$from")" up="../$up"
  done
  if [ "$to" = "$from" ]; then up="${up%/}"; echo "${up:-.}"
  elif [ "$from" = / ]; then echo "$up${to#/}"
  else echo "$up${to#"$from"/}"; fi
}

config="" lease="" targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --config) [ $# -ge 2 ] || die "--config needs a file"; config=$2; shift 2 ;;
    --config=*) config=${1#--config=}; shift ;;
    --lease) [ $# -ge 2 ] || die "--lease needs a name"; lease=$2; shift 2 ;;
    --lease=*) lease=${1#--lease=}; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || die "name at least one workload, e.g. Deployment/web (see --help)"
[ -n "$config" ] || die "--config FILE is required: the sidecar's config (your Redis masters)"
[ -r "$config" ] || die "cannot read the config file $config"
[ -f "$component/kustomization.yaml" ] || die "no kustomize Component at $component (set REDLOCK_ELECTOR_COMPONENT)"
if command -v kustomize >/dev/null 2>&1; then build=(kustomize build)
elif command -v kubectl >/dev/null 2>&1; then build=(kubectl kustomize)
else die "needs kustomize or kubectl on PATH"; fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/upstream.yaml"
cp "$config" "$work/config.yaml"
mkdir "$work/select"
{
  echo "apiVersion: kustomize.config.k8s.io/v1alpha1"
  echo "kind: Component"
  echo "patches:"
  for t in "${targets[@]}"; do
    kind=Deployment name=$t
    if [[ $t == */* ]]; then kind=${t%%/*}; name=${t#*/}; fi
    case "$kind" in Deployment|StatefulSet) ;; *) die "$t: only Deployment and StatefulSet can get the sidecar" ;; esac
    [ -n "$lease" ] || lease=$name
    # A strategic-merge patch: it adds the annotation and keeps the workload's others.
    printf '  - target: {kind: %s, name: "%s"}\n' "$kind" "$name"
    printf '    patch: |-\n      apiVersion: apps/v1\n      kind: %s\n      metadata:\n        name: "%s"\n        annotations:\n          redlock-elector/sidecar: "true"\n' "$kind" "$name"
  done
} > "$work/select/kustomization.yaml"
{
  echo "apiVersion: kustomize.config.k8s.io/v1beta1"
  echo "kind: Kustomization"
  echo "resources: [upstream.yaml]"
  # kustomize refuses an absolute path to a component; a relative one works from anywhere.
  echo "components: [select, \"$(relative "$work" "$component")\"]"
  echo "configMapGenerator:"
  echo "  - name: redlock-elector-config"
  echo "    files: [config.yaml]"
  echo "patches:"
  for t in "${targets[@]}"; do
    kind=Deployment name=$t
    if [[ $t == */* ]]; then kind=${t%%/*}; name=${t#*/}; fi
    printf '  - target: {kind: %s, name: "%s"}\n' "$kind" "$name"
    printf '    patch: |-\n      - op: replace\n        path: /spec/template/metadata/labels/redlock-elector~1lease\n        value: "%s"\n' "$lease"
  done
  printf '  - target: {kind: Service, name: redlock-elector-leader}\n'
  printf '    patch: |-\n      - op: replace\n        path: /spec/selector/redlock-elector~1lease\n        value: "%s"\n' "$lease"
} > "$work/kustomization.yaml"
"${build[@]}" "$work" || die "kustomize failed on the rendered manifests (see above)"

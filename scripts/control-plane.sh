#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from the public Go modules pinned in
# tests/control-plane/ (etcd, kube-apiserver, kube-controller-manager; kubectl and helm beside
# them). No kubelet and no scheduler: pods stay Pending unless something plays the kubelet.
#
#   scripts/control-plane.sh build       build (or reuse) the binaries; prints their directory
#   scripts/control-plane.sh up DIR      start etcd, kube-apiserver, kube-controller-manager with
#                                        their state, logs and pids in DIR (new or empty); prints
#                                        DIR/admin.kubeconfig once /readyz answers ok
#   scripts/control-plane.sh down DIR    stop what `up DIR` started and remove DIR
#   scripts/control-plane.sh stop DIR kube-apiserver    stop one component (an outage) ...
#   scripts/control-plane.sh start DIR kube-apiserver   ... and start it again with the same flags
#
# Binaries are cached outside the work tree, one directory per component and version:
#   ${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/control-plane}/
#     kubernetes-v1.37.2/  etcd-v3.6.16/  helm-v4.3.1/  bin/ (symlinks to the current ones)
# A cold build takes tens of minutes on 2 cores (see docs/development.md); later runs reuse the cache and
# rebuild only when tests/control-plane/*/go.mod or go.sum change. Go builds run under
# `nice -n ${CONTROL_PLANE_NICE:-15}`.
#
# The apiserver: RBAC (and Node) authorization, client-certificate authentication (DIR/
# admin.kubeconfig is user admin in system:masters), ServiceAccount tokens and the TokenRequest
# API (RSA signing key generated here). The controller manager runs the controllers listed in
# KCM_CONTROLLERS, each with its own ServiceAccount's credentials as in a real cluster.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$REPO/scripts/lib.sh"
MODS="$REPO/tests/control-plane"
CACHE="${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/control-plane}"
NICE="${CONTROL_PLANE_NICE:-15}"
# Seconds `up` waits for each component to answer its health check.
START_TIMEOUT="${CONTROL_PLANE_START_TIMEOUT:-90}"
# What a test or the stand-in kubelet needs; the rest (node lifecycle, pod GC of pods on unknown
# nodes, jobs, ...) stays off so that nothing acts on the stand-in's pods behind its back.
KCM_CONTROLLERS="deployment-controller,replicaset-controller,statefulset-controller,endpoints-controller,endpointslice-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,namespace-controller,garbage-collector-controller,disruption-controller,clusterrole-aggregation-controller"
# Extra flags, split on spaces, e.g. KUBE_APISERVER_EXTRA_ARGS="--feature-gates=..." or an audit log.
read -r -a APISERVER_EXTRA <<< "${KUBE_APISERVER_EXTRA_ARGS:-}"
read -r -a KCM_EXTRA <<< "${KUBE_CONTROLLER_MANAGER_EXTRA_ARGS:-}"
SERVICE_CIDR=10.0.0.0/24
SERVICE_IP=10.0.0.1   # first address of SERVICE_CIDR: the `kubernetes` Service

die() { echo "control-plane: $*" >&2; exit 1; }
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# --------------------------------------------------------------------------------- building
GO=""
find_go() {
  if [ -n "$GO" ]; then return; fi
  GO="$(command -v go || true)"
  [ -n "$GO" ] || { [ -x /usr/local/go/bin/go ] && GO=/usr/local/go/bin/go; } \
    || die "build: no go toolchain (go 1.26 or newer) on PATH or in /usr/local/go/bin"
}

# mod_version MODDIR MODULE: the version of MODULE that MODDIR/go.mod requires.
mod_version() {
  awk -v m="$2" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$1/go.mod" | head -n1
}

# build_component NAME MODDIR VERSION LDFLAGS PKG...: build PKGs of the module in MODDIR into
# $CACHE/NAME-VERSION unless it already holds a build from the same go.mod, go.sum, go and
# ldflags (apart from the build date). Prints nothing on a cache hit. Called under build_all's lock.
build_component() {
  local name=$1 dir=$2 version=$3 ldflags=$4; shift 4
  local out="$CACHE/$name-$version" want start
  want="$({ cat "$dir/go.mod" "$dir/go.sum"; echo "${ldflags//$BUILD_DATE/}"; } | sha256sum | cut -c1-16) $("$GO" env GOVERSION)"
  if [ "$(cat "$out/.built-from" 2>/dev/null)" = "$want" ]; then return; fi
  echo "-- building $name $version with $("$GO" env GOVERSION) into $out (cold, all three: 10 to 40 min on 2 cores, see docs/development.md)" >&2
  start=$SECONDS
  rm -rf "$out.tmp"
  (cd "$dir" && CGO_ENABLED=0 nice -n "$NICE" "$GO" build -trimpath -ldflags "$ldflags" -o "$out.tmp/" "$@") \
    > "$CACHE/$name-build.log" 2>&1 \
    || { tail -n 30 "$CACHE/$name-build.log" >&2; rm -rf "$out.tmp"; die "build: go build of $name $version failed (whole log: $CACHE/$name-build.log)"; }
  # go build names a binary after the import path's last element before a /vN: etcd's is server.
  if [ -e "$out.tmp/server" ]; then mv "$out.tmp/server" "$out.tmp/etcd"; fi
  echo "$want" > "$out.tmp/.built-from"
  rm -rf "$out"
  mv "$out.tmp" "$out"
  echo "-- built $name $version in $((SECONDS - start)) s" >&2
}

# link_bins DIR: DIR/<binary> -> the binaries of the versions pinned now.
link_bins() {
  mkdir -p "$1"
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kube-apiserver" "$1/kube-apiserver"
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kube-controller-manager" "$1/kube-controller-manager"
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kubectl" "$1/kubectl"
  ln -sfn "$CACHE/etcd-$ETCD_VERSION/etcd" "$1/etcd"
  ln -sfn "$CACHE/helm-$HELM_VERSION/helm" "$1/helm"
}

# build_all: build what is missing; $CACHE/bin links to the result. One lock, so concurrent
# callers (two `up`s at once) wait for one build instead of racing.
build_all() {
  local major minor ld p
  find_go
  K8S_VERSION="$(mod_version "$MODS/kubernetes" k8s.io/kubernetes)"
  ETCD_VERSION="$(mod_version "$MODS/etcd" go.etcd.io/etcd/server/v3)"
  HELM_VERSION="$(mod_version "$MODS/helm" helm.sh/helm/v4)"
  if [ -z "$K8S_VERSION" ] || [ -z "$ETCD_VERSION" ] || [ -z "$HELM_VERSION" ]; then
    die "build: cannot read the versions from $MODS/*/go.mod"
  fi
  BUILD_DATE="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"
  # What hack/lib/version.sh sets, so /version and `kubectl version` tell the truth. The module
  # proxy does not say which commit the tag is, so gitCommit is empty rather than made up (or
  # left at its placeholder "$Format:%H$").
  ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitCommit= -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
  done
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.build.lock"
  flock 9
  build_component kubernetes "$MODS/kubernetes" "$K8S_VERSION" "$ld" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl
  # etcd's version is a constant in go.etcd.io/etcd/api/v3/version; only its GitSHA is an ldflag.
  build_component etcd "$MODS/etcd" "$ETCD_VERSION" "-s -w" go.etcd.io/etcd/server/v3
  build_component helm "$MODS/helm" "$HELM_VERSION" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    helm.sh/helm/v4/cmd/helm
  link_bins "$CACHE/bin"
  exec 9>&-
}

# ------------------------------------------------------------------------------ certificates
# cert NAME CN [O] [SAN]: NAME.key and NAME.crt in $PKI, signed by the CA there.
cert() {
  local name=$1 cn=$2 org=${3:-} san=${4:-} subj ext
  subj="/CN=$cn"; [ -z "$org" ] || subj="/O=$org$subj"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>>"$PKI/openssl.log" || return 1
  ext="$PKI/$name.ext"
  { echo "basicConstraints=critical,CA:FALSE"; echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then echo "extendedKeyUsage=serverAuth"; echo "subjectAltName=$san"
    else echo "extendedKeyUsage=clientAuth"; fi; } > "$ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>>"$PKI/openssl.log" || return 1
  rm -f "$PKI/$name.csr" "$ext"
}

make_pki() {
  PKI="$DIR/pki"
  mkdir -p "$PKI"
  ensure_apt openssl openssl
  local why="openssl could not generate the certificates and keys in $PKI (its errors: $PKI/openssl.log)"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=redlock-elector-test-ca" \
    -days 30 -sha256 -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$PKI/ca.crt" 2>>"$PKI/openssl.log" || fail pki "$why"
  cert apiserver kube-apiserver "" \
    "IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
    || fail pki "$why"
  cert admin admin system:masters || fail pki "$why"
  cert controller-manager system:kube-controller-manager || fail pki "$why"
  # The ServiceAccount token signing key pair.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>>"$PKI/openssl.log" || fail pki "$why"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>>"$PKI/openssl.log" || fail pki "$why"
}

# kubeconfig FILE CERTNAME: a kubeconfig for the apiserver authenticating with $PKI/CERTNAME.
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$2.crt")
    client-key-data: $(base64 -w0 "$PKI/$2.key")
contexts:
- name: control-plane
  context: {cluster: control-plane, user: $2}
current-context: control-plane
EOF
}

# ------------------------------------------------------------------------------- processes
# free_ports N: N distinct free loopback ports (held together while chosen, so they differ).
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# fail COMPONENT WHY: say which part failed and why, with the tail of its log; stop what this
# `up` started (the logs stay in DIR; `down DIR` removes them).
fail() {
  local comp=$1; shift
  echo "control-plane: up: $comp failed: $*" >&2
  if [ -f "$DIR/logs/$comp.log" ]; then
    echo "---- last 25 lines of $DIR/logs/$comp.log" >&2
    tail -n 25 "$DIR/logs/$comp.log" >&2
    echo "----" >&2
  fi
  stop_all
  echo "control-plane: the logs are in $DIR/logs; remove them with: $0 down $DIR" >&2
  exit 1
}

# start NAME BINARY ARGS...: run BINARY in its own session (so a terminal's hangup or Ctrl-C
# does not reach it), output in DIR/logs/NAME.log, pid in DIR/NAME.pid.
start() {
  local name=$1 bin=$2; shift 2
  printf '%s\0' "$bin" "$@" > "$DIR/$name.cmd"   # for `start DIR NAME` after a `stop DIR NAME`
  setsid "$bin" "$@" >> "$DIR/logs/$name.log" 2>&1 < /dev/null &
  echo "$!" > "$DIR/$name.pid"
}

# running NAME: the pid in DIR/NAME.pid is alive and still runs our binary (not a reused pid).
running() {
  local pid exe
  pid="$(cat "$DIR/$1.pid" 2>/dev/null)" || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  # setsid for the moment before it execs the binary.
  case "${exe##*/}" in "$1" | setsid) return 0 ;; *) return 1 ;; esac
}

# wait_for NAME CHECK...: until CHECK succeeds; fails NAME when its process exits or time runs out.
wait_for() {
  local name=$1 deadline=$((SECONDS + START_TIMEOUT)); shift
  until "$@" >/dev/null 2>&1; do
    running "$name" || fail "$name" "it exited during startup"
    [ "$SECONDS" -lt "$deadline" ] || fail "$name" "not healthy after ${START_TIMEOUT} s (check: $*)"
    sleep 0.2
  done
}

stop_one() {
  local name=$1 pid _
  pid="$(cat "$DIR/$name.pid" 2>/dev/null)" || return 0
  if running "$name"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do running "$name" || break; sleep 0.1; done
    if running "$name"; then echo "control-plane: $name (pid $pid) ignored SIGTERM for 5 s; SIGKILL" >&2; kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$DIR/$name.pid"
}

# Reverse start order: the controller manager and apiserver go before their storage.
stop_all() { stop_one kube-controller-manager; stop_one kube-apiserver; stop_one etcd; }

https_get() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"; }

# ----------------------------------------------------------------------------------- up/down
up() {
  local t0=$SECONDS etcd_port peer_port kcm_port
  mkdir -p "$DIR"
  DIR="$(cd "$DIR" && pwd)"
  [ -z "$(ls -A "$DIR")" ] || die "up: $DIR is not empty (a running control plane? stop it with: $0 down $DIR)"
  ensure_apt curl curl
  ensure_apt python3 python3
  ensure_apt flock util-linux
  build_all
  touch "$DIR/.control-plane"   # lets `down` check it removes a directory of ours
  # Links to the versioned binaries: a later build of other versions leaves these alone.
  BIN="$DIR/bin"
  link_bins "$BIN"
  mkdir -p "$DIR/logs"
  trap 'fail startup "interrupted by a signal"' INT TERM
  make_pki
  read -r etcd_port peer_port APISERVER_PORT kcm_port < <(free_ports 4) || fail ports "python3 could not find 4 free loopback ports"
  echo "$APISERVER_PORT" > "$DIR/apiserver.port"

  # Plain HTTP on loopback, and no fsync: the data dies with DIR anyway.
  start etcd "$BIN/etcd" --name control-plane --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "control-plane=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level warn
  wait_for etcd sh -c "curl -sf --max-time 2 http://127.0.0.1:$etcd_port/health | grep -q '\"health\":\"true\"'"

  # The `kubernetes` Service's endpoints cannot be a loopback address, so the apiserver does not
  # reconcile them (--endpoint-reconciler-type=none); clients use the kubeconfig's address.
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --cert-dir "$DIR/apiserver" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" --endpoint-reconciler-type none ${APISERVER_EXTRA[@]+"${APISERVER_EXTRA[@]}"}
  wait_for kube-apiserver sh -c "curl -sf --max-time 2 --cacert '$PKI/ca.crt' --cert '$PKI/admin.crt' --key '$PKI/admin.key' https://127.0.0.1:$APISERVER_PORT/readyz | grep -qx ok"

  kubeconfig "$DIR/admin.kubeconfig" admin
  kubeconfig "$DIR/controller-manager.kubeconfig" controller-manager
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$kcm_port" --cert-dir "$DIR/controller-manager" \
    --leader-elect=false --controllers "$KCM_CONTROLLERS" --use-service-account-credentials \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" ${KCM_EXTRA[@]+"${KCM_EXTRA[@]}"}
  wait_for kube-controller-manager curl -skf --max-time 2 "https://127.0.0.1:$kcm_port/healthz"
  # Its ServiceAccount controller creates `default` in every namespace; pods need it to be admitted.
  wait_for kube-controller-manager https_get "https://127.0.0.1:$APISERVER_PORT/api/v1/namespaces/default/serviceaccounts/default"

  trap - INT TERM
  echo "-- control plane up in $((SECONDS - t0)) s: apiserver https://127.0.0.1:$APISERVER_PORT, binaries in $DIR/bin, logs in $DIR/logs" >&2
  echo "$DIR/admin.kubeconfig"
}

down() {
  [ -d "$DIR" ] || { echo "control-plane: down: $DIR does not exist; nothing to stop" >&2; return 0; }
  DIR="$(cd "$DIR" && pwd)"
  [ -e "$DIR/.control-plane" ] || die "down: $DIR was not made by '$0 up'; not touching it"
  stop_all
  rm -rf "$DIR"
}

apiserver_ready() { [ "$(https_get "https://127.0.0.1:$APISERVER_PORT/readyz")" = ok ]; }

# stop/start NAME: one component of a running `up DIR`, e.g. an apiserver outage in a test.
component() {
  local op=$1 name=$2 cmd=()
  [ -e "$DIR/.control-plane" ] || die "$op: $DIR was not made by '$0 up'"
  case "$name" in etcd | kube-apiserver | kube-controller-manager) ;; *) die "$op: no component $name" ;; esac
  PKI="$DIR/pki"
  if [ "$op" = stop ]; then stop_one "$name"; return; fi
  ! running "$name" || die "start: $name is running already"
  mapfile -d '' cmd < "$DIR/$name.cmd"
  start "$name" "${cmd[@]}"
  APISERVER_PORT="$(cat "$DIR/apiserver.port")"
  case "$name" in
    kube-apiserver) wait_for kube-apiserver apiserver_ready ;;
    *) sleep 1; running "$name" || fail "$name" "it exited during startup" ;;
  esac
}

case "${1:-}" in
  build) [ $# -eq 1 ] || usage; ensure_apt flock util-linux; build_all; echo "$CACHE/bin" ;;
  up) [ $# -eq 2 ] || usage; DIR=$2; up ;;
  down) [ $# -eq 2 ] || usage; DIR=$2; down ;;
  stop | start) [ $# -eq 3 ] || usage; DIR="$(cd "$2" && pwd)"; component "$1" "$3" ;;
  *) usage ;;
esac

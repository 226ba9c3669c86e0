#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, built from the public Go modules pinned in
# tests/control-plane/ (etcd, kube-apiserver, kube-controller-manager; kubectl and helm beside
# them). Without --node there is no kubelet and no scheduler: pods stay Pending unless something
# plays the kubelet (the tests' stand-in). With --node, a real node joins: containerd + runc
# (Debian packages), the CNI bridge plugin, kube-scheduler and a real kubelet (see "the node" below).
#
#   scripts/control-plane.sh build       build (or reuse) the binaries; prints their directory
#   scripts/control-plane.sh prereqs     install what --node needs from Debian when missing
#   scripts/control-plane.sh up DIR [--node]   start etcd, kube-apiserver, kube-controller-manager
#                                        with their state, logs and pids in DIR (new or empty);
#                                        with --node also kube-scheduler, containerd and a kubelet
#                                        (node `node`, Ready); prints DIR/admin.kubeconfig
#   scripts/control-plane.sh down DIR    stop what `up DIR` started and remove DIR; nothing is left
#   scripts/control-plane.sh stop DIR NAME    stop one component (an outage; NAME: etcd, kube-apiserver,
#   scripts/control-plane.sh start DIR NAME   kube-controller-manager, kube-scheduler, kubelet, containerd)
#   scripts/control-plane.sh import DIR TAR   import an OCI image tarball into the node's containerd
#   scripts/control-plane.sh forward DIR PORT...   make the host's 127.0.0.1:PORT reachable from the
#                                        node and its pods as NODE_IP:PORT (prints NODE_IP)
#
# Binaries are cached outside the work tree, one directory per component and version:
#   ${CONTROL_PLANE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/control-plane}/
#     kubernetes-v1.37.2/  etcd-v3.6.16/  helm-v4.3.1/  coredns-v1.15.0/  bin/ (symlinks to the current ones)
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
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

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
  # The packages are part of the key: a cached build without one of them (kubelet, say) is rebuilt.
  # A module of ours with a main package (coredns) keys on its .go files too.
  want="$({ cat "$dir/go.mod" "$dir/go.sum"; find "$dir" -maxdepth 1 -name '*.go' -exec cat {} +; echo "${ldflags//$BUILD_DATE/}"; echo "$*"; } | sha256sum | cut -c1-16) $("$GO" env GOVERSION)"
  if [ "$(cat "$out/.built-from" 2>/dev/null)" = "$want" ]; then return; fi
  echo "-- building $name $version with $("$GO" env GOVERSION) into $out (cold, the kubernetes binaries: 10 to 40 min on 2 cores, see docs/development.md)" >&2
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
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kube-scheduler" "$1/kube-scheduler"
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kubelet" "$1/kubelet"
  ln -sfn "$CACHE/kubernetes-$K8S_VERSION/kube-proxy" "$1/kube-proxy"
  ln -sfn "$CACHE/coredns-$COREDNS_VERSION/coredns" "$1/coredns"
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
  COREDNS_VERSION="$(mod_version "$MODS/coredns" github.com/coredns/coredns)"
  if [ -z "$K8S_VERSION" ] || [ -z "$ETCD_VERSION" ] || [ -z "$HELM_VERSION" ] || [ -z "$COREDNS_VERSION" ]; then
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
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  # etcd's version is a constant in go.etcd.io/etcd/api/v3/version; only its GitSHA is an ldflag.
  build_component etcd "$MODS/etcd" "$ETCD_VERSION" "-s -w" go.etcd.io/etcd/server/v3
  build_component helm "$MODS/helm" "$HELM_VERSION" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    helm.sh/helm/v4/cmd/helm
  # The node's cluster DNS: tests/control-plane/coredns/main.go links only the plugins it uses.
  build_component coredns "$MODS/coredns" "$COREDNS_VERSION" "-s -w" .
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
  # The apiserver's client certificate for the kubelet (exec, logs, port-forward; the kubelet
  # accepts the CA's certificates and authorizes everything, authorization: AlwaysAllow).
  if [ "$WITH_NODE" = 1 ]; then cert apiserver-kubelet-client kube-apiserver-kubelet-client || fail pki "$why"; fi
  # The ServiceAccount token signing key pair.
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI/sa.key" 2>>"$PKI/openssl.log" || fail pki "$why"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>>"$PKI/openssl.log" || fail pki "$why"
}

# kubeconfig FILE CERTNAME: a kubeconfig for the apiserver authenticating with $PKI/CERTNAME
# (at APISERVER_URL when set, else the host's loopback).
kubeconfig() {
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: control-plane
  cluster:
    server: ${APISERVER_URL:-https://127.0.0.1:$APISERVER_PORT}
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
  # setsid (and nsenter, for the node's) for the moment before it execs the binary; DIR/NAME.exe
  # names the binary when it is not NAME (python3 for a forwarder).
  case "${exe##*/}" in "$1" | "$(cat "$DIR/$1.exe" 2>/dev/null || echo "$1")"* | setsid | nsenter) return 0 ;; *) return 1 ;; esac
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
stop_all() { node_down || true; stop_one kube-controller-manager; stop_one kube-apiserver; stop_one etcd; }

https_get() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "$@"; }

# ----------------------------------------------------------------------------------- up/down
up() {
  local t0=$SECONDS etcd_port peer_port kcm_port
  if [ "$WITH_NODE" = 1 ]; then
    case "$DIR" in /run/* | /var/lib/* | /var/log/* | /var/run/*)
      die "up --node: DIR must not be under /run, /var/lib or /var/log (the node's namespace hides them)" ;; esac
    node_prereqs
    # A real node is watched as in a cluster: NotReady after its grace period, taints,
    # eviction, garbage collection of pods on a gone node.
    KCM_CONTROLLERS="$KCM_CONTROLLERS,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller"
  fi
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
  read -r etcd_port peer_port APISERVER_PORT kcm_port SCHED_PORT < <(free_ports 5) || fail ports "python3 could not find 5 free loopback ports"
  echo "$APISERVER_PORT" > "$DIR/apiserver.port"
  # With a node, the apiserver reaches its kubelet (kubectl exec, logs, port-forward) at the
  # node's address through an HTTP CONNECT proxy on a Unix socket in DIR that connects inside
  # the node's namespace (scripts/node/netns-forward.py --connect, started in node_up): the
  # egress selector's `cluster` connection, so no route to the node's address is added to the
  # host. (A TCP proxy URL without TLS crashes the 1.37 apiserver at start.)
  local node_args=()
  if [ "$WITH_NODE" = 1 ]; then
    cat > "$DIR/egress-selector.yaml" <<EGRESS
apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: $DIR/kubelet-proxy.sock
EGRESS
    node_args=(--egress-selector-config-file "$DIR/egress-selector.yaml"
      --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" --kubelet-client-key "$PKI/apiserver-kubelet-client.key"
      --kubelet-preferred-address-types InternalIP)
  fi

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
    --service-cluster-ip-range "$SERVICE_CIDR" --endpoint-reconciler-type none ${node_args[@]+"${node_args[@]}"} \
    ${APISERVER_EXTRA[@]+"${APISERVER_EXTRA[@]}"}
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

  if [ "$WITH_NODE" = 1 ]; then node_up; fi
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
  case "$name" in etcd | kube-apiserver | kube-controller-manager) ;;
    kube-scheduler | kubelet | containerd) [ -e "$DIR/node-cgroup" ] || die "$op: $DIR has no node (up DIR --node)" ;;
    *) die "$op: no component $name" ;; esac
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

# -------------------------------------------------------------------------------- the node
# `up DIR --node` adds one real node, named `node`. What it changes on this machine, and how
# each change is contained (a test, cp_node_down_leaves_nothing, checks that `down` restores all):
# - its own mount and network namespace, held by DIR/node-ns.pid (`unshare`); containerd, the
#   shims, the kubelet and the pods live in them. In the mount namespace, fresh tmpfs on /run,
#   /var/lib and /var/log take the paths the kubelet and containerd hard-code
#   (/var/lib/kubelet/device-plugins/kubelet.sock, /var/log/containers, /run/containerd/s/...), and
#   files in DIR are bind-mounted over the /proc/sys entries the kubelet sets at start
#   (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...), so the host's global values
#   never change. The network namespace holds lo, a port-less bridge (this kernel has no dummy links) with the node's address
#   ($NODE_IP) and the service address $SERVICE_IP, and the CNI bridge the pods hang on; nothing
#   (no link, route or iptables rule) is added to the host's namespace, and the kubelet's
#   iptables chains are off (makeIPTablesUtilChains: false).
# - the apiserver and any `forward`ed port stay on the host's 127.0.0.1; scripts/node/netns-forward.py
#   listens inside the node's namespace and relays (the kubelet and the pods reach the apiserver at
#   $SERVICE_IP:443, the `kubernetes` Service's address, so in-cluster config works unchanged).
# - cgroups (v1 here): everything the kubelet makes is under /<CGROUP_ROOT> (cgroupRoot) in each
#   hierarchy; `down` kills what is in them and removes them.
# The machine has no CAP_SYS_RESOURCE to lower oom_score_adj: containerd runs with
# restrict_oom_score_adj and the kubelet with oomScoreAdj: 0. Cgroup v1: failCgroupV1: false.
NODE_NAME=node
NODE_IP=10.89.0.1
POD_CIDR=10.88.0.0/16
PAUSE_IMAGE=localhost/redlock-elector/pause:3.10.2
# The kubelet writes these at start; each one is a file of ours in its mount namespace.
KUBELET_SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"

# ns_pid: the pid holding the node's namespaces.
ns_pid() { cat "$DIR/node-ns.pid" 2>/dev/null; }
in_node() { nsenter -t "$(ns_pid)" -m -n -- "$@"; }

node_prereqs() {
  ensure_apt containerd containerd
  ensure_apt runc runc
  [ -x /usr/lib/cni/bridge ] || { echo "-- CNI plugins not found: installing Debian package containernetworking-plugins"; apt_package containernetworking-plugins; }
  ensure_apt nsenter util-linux
  ensure_apt ip iproute2
  ensure_apt cc gcc
  [ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || apt_package libc6-dev
  [ "$(id -u)" = 0 ] || die "up --node: the kubelet and containerd need root (namespaces, cgroups, mounts)"
  local fs; fs="$(stat -f -c %T /sys/fs/cgroup)"
  [ "$fs" = tmpfs ] || [ "$fs" = cgroup2fs ] || die "up --node: /sys/fs/cgroup is $fs, neither cgroup v1 nor v2"
}

# node_images: the pause image (Kubernetes' build/pause/linux/pause.c, compiled static) and a
# static busybox for the chart's demo app container, as OCI tarballs in $CACHE/images.
node_images() {
  local src="$GOMODCACHE_DIR/k8s.io/kubernetes@$K8S_VERSION/build/pause/linux/pause.c" img="$CACHE/images"
  mkdir -p "$img"
  [ -f "$src" ] || (cd "$MODS/kubernetes" && "$GO" mod download k8s.io/kubernetes >/dev/null) \
    || die "up --node: cannot download k8s.io/kubernetes $K8S_VERSION for build/pause/linux/pause.c"
  if [ ! -f "$img/pause-$K8S_VERSION.oci.tar" ]; then
    cc -Os -Wall -static -DVERSION="v3.10.2-$K8S_VERSION" -o "$img/pause" "$src" \
      || die "up --node: cc -static of $src failed (needs gcc and libc6-dev)"
    python3 "$REPO/scripts/node/oci-image.py" "$img/pause-$K8S_VERSION.oci.tar" "$PAUSE_IMAGE" \
      --entrypoint /pause --user 65535:65535 "$img/pause=/pause"
  fi
  if [ ! -f "$img/busybox.oci.tar" ]; then
    local bb=/bin/busybox
    # Debian's `busybox` is dynamic; the image has no libc, so it needs busybox-static's.
    dpkg -s busybox-static >/dev/null 2>&1 || apt_package busybox-static
    python3 "$REPO/scripts/node/oci-image.py" "$img/busybox.oci.tar" localhost/redlock-elector/busybox:1.36 \
      --entrypoint /bin/sh "$bb=/bin/busybox" "/bin/sh->busybox" "/bin/wget->busybox" "/bin/sed->busybox" \
      "/bin/sleep->busybox" "/bin/echo->busybox" "/bin/cat->busybox" "/bin/id->busybox" "/bin/touch->busybox"
  fi
}

node_config() {
  local n="$DIR/node"
  mkdir -p "$n/cni" "$n/cni-state" "$n/containerd" "$n/kubelet" "$n/pod-logs" "$n/sysctl" "$n/certs.d"
  cat > "$n/containerd.toml" <<CFG
version = 2
root = "$n/containerd/root"
state = "$n/containerd/state"
# opt would create /opt/containerd on the host; the others are snapshotters this node never uses.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$n/containerd.sock"
[ttrpc]
  address = "$n/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # No CAP_SYS_RESOURCE here: never set an oom_score_adj below containerd's own.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$n/cni"
  # Registry hosts (read at each pull): a test points a registry's name at a loopback registry
  # with DIR/node/certs.d/<registry>/hosts.toml.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$n/certs.d"
CFG
  cat > "$n/cni/10-bridge.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "node", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$n/cni-state", "ranges": [[{"subnet": "$POD_CIDR"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
CNI
  cert kubelet "system:node:$NODE_NAME" system:nodes || fail pki "openssl could not make the kubelet's certificate"
  # The kubelet reaches the apiserver through the forwarder at the `kubernetes` Service's address.
  APISERVER_URL="https://$SERVICE_IP:443" kubeconfig "$n/kubelet.kubeconfig" kubelet
  cat > "$n/kubelet.yaml" <<KCFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$n/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
# cgroup v1 is all this machine has; kubelet 1.35+ refuses it unless told otherwise.
failCgroupV1: false
# No CAP_SYS_RESOURCE: the default -999 cannot be set.
oomScoreAdj: 0
makeIPTablesUtilChains: false
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
podLogsDir: $n/pod-logs
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}
# The images are imported, never pulled: nothing may garbage-collect them (pause included).
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
failSwapOn: false
resolvConf: /etc/resolv.conf
# The node's CoreDNS (node_dns) listens on the node's address, as a node-local DNS cache would.
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
serializeImagePulls: false
KCFG
  # kube-proxy, the real one (iptables mode; the rules live in the node's network namespace).
  # The built-in ClusterRoleBinding system:node-proxier grants the user system:kube-proxy.
  cert kube-proxy system:kube-proxy || fail pki "openssl could not make kube-proxy's certificate"
  APISERVER_URL="https://$SERVICE_IP:443" kubeconfig "$n/kube-proxy.kubeconfig" kube-proxy
  cat > "$n/kube-proxy.yaml" <<PCFG
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $n/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# The pods share one bridge; without br_netfilter (this kernel has no modules) a reply from a
# Service's backend to a client on the same bridge would skip the un-DNAT, so every Service
# connection is masqueraded to the bridge's address.
iptables: {masqueradeAll: true, localhostNodePorts: false}
# No CAP_SYS_RESOURCE (as for the kubelet), and the conntrack table size is the host's, not the
# namespace's: leave the conntrack settings as they are.
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
PCFG
  # CoreDNS as the cluster DNS, run on the node like the kubelet; its RBAC is applied by node_dns.
  cert coredns system:coredns || fail pki "openssl could not make CoreDNS's certificate"
  APISERVER_URL="https://$SERVICE_IP:443" kubeconfig "$n/coredns.kubeconfig" coredns
  cat > "$n/Corefile" <<DNS
.:53 {
    ready 127.0.0.1:8181
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $n/coredns.kubeconfig control-plane
        fallthrough in-addr.arpa ip6.arpa
    }
}
DNS
  cert kube-scheduler system:kube-scheduler || fail pki "openssl could not make the scheduler's certificate"
  kubeconfig "$DIR/kube-scheduler.kubeconfig" kube-scheduler
}

# node_namespaces: the holder process and its namespaces (see the top of this section).
node_namespaces() {
  local n="$DIR/node" f d _
  # The kubelet's sysctls: copies with the host's current values, bind-mounted in its namespace.
  for f in $KUBELET_SYSCTLS; do cat "/proc/sys/$f" > "$n/sysctl/${f//\//.}"; done
  rm -f "$n/ns-ready"
  setsid unshare --mount --net --propagation private -- sh -euc '
    n=$1
    for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=755 node-$(basename $d) $d; done
    for f in '"$KUBELET_SYSCTLS"'; do mount --bind "$n/sysctl/$(echo $f | tr / .)" /proc/sys/$f; done
    ip link set lo up
    ip link add node0 type bridge
    ip addr add '"$NODE_IP"'/24 dev node0
    ip addr add '"$SERVICE_IP"'/32 dev node0
    ip link set node0 up
    ip route add default dev node0
    touch "$n/ns-ready"
    exec sleep infinity' node-ns "$n" >> "$DIR/logs/node-ns.log" 2>&1 < /dev/null &
  echo "$!" > "$DIR/node-ns.pid"
  echo sleep > "$DIR/node-ns.exe"
  for _ in $(seq 100); do [ -e "$n/ns-ready" ] && return 0; sleep 0.1; done
  fail node-ns "the node's namespaces were not ready after 10 s"
}

node_cgroups() {
  local h
  for h in /sys/fs/cgroup/*/; do
    case "$h" in */unified/) continue ;; esac
    mkdir -p "$h$CGROUP_ROOT"
    # A v1 cpuset cgroup takes no task until it has cpus and mems.
    if [ -e "$h/cpuset.cpus" ]; then
      cat "$h/cpuset.cpus" > "$h$CGROUP_ROOT/cpuset.cpus"
      cat "$h/cpuset.mems" > "$h$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

node_ready() {
  [ "$(https_get "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$NODE_NAME" | python3 -c '
import json, sys
n = json.load(sys.stdin)
print(next((c["status"] for c in n["status"].get("conditions", []) if c["type"] == "Ready"), ""))' 2>/dev/null)" = True ]
}

# node_up: after the control plane of `up` is running.
node_up() {
  local t0=$SECONDS n="$DIR/node"
  GOMODCACHE_DIR="$("$GO" env GOMODCACHE)"
  node_images
  CGROUP_ROOT="redlock-elector-node-$(echo "$DIR" | sha256sum | cut -c1-12)"
  echo "$CGROUP_ROOT" > "$DIR/node-cgroup"
  node_config
  node_cgroups
  node_namespaces
  # The interpreter itself, not a wrapper (pyenv's shim is a shell script), so `running` knows it.
  python3 -c 'import sys; print(sys.executable)' > "$DIR/python"
  start forward-apiserver "$(cat "$DIR/python")" "$REPO/scripts/node/netns-forward.py" "/proc/$(ns_pid)/ns/net" \
    "$SERVICE_IP:443=127.0.0.1:$APISERVER_PORT" "$NODE_IP:$APISERVER_PORT=127.0.0.1:$APISERVER_PORT"
  basename "$(cat "$DIR/python")" > "$DIR/forward-apiserver.exe"
  wait_for forward-apiserver grep -q listening "$DIR/logs/forward-apiserver.log"
  start forward-kubelet "$(cat "$DIR/python")" "$REPO/scripts/node/netns-forward.py" "/proc/$(ns_pid)/ns/net" \
    --connect "$DIR/kubelet-proxy.sock"
  basename "$(cat "$DIR/python")" > "$DIR/forward-kubelet.exe"
  wait_for forward-kubelet grep -q listening "$DIR/logs/forward-kubelet.log"
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$DIR/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/kube-scheduler.kubeconfig" --authorization-kubeconfig "$DIR/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false
  start containerd nsenter -t "$(ns_pid)" -m -n -- containerd --config "$n/containerd.toml"
  wait_for containerd ctr --address "$n/containerd.sock" version
  node_import "$CACHE/images/pause-$K8S_VERSION.oci.tar"
  node_import "$CACHE/images/busybox.oci.tar"
  start kubelet nsenter -t "$(ns_pid)" -m -n -- "$BIN/kubelet" --config "$n/kubelet.yaml" \
    --kubeconfig "$n/kubelet.kubeconfig" --root-dir "$n/kubelet" --cert-dir "$n/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" --v 2
  wait_for kubelet node_ready
  wait_for kube-scheduler curl -skf --max-time 2 "https://127.0.0.1:$SCHED_PORT/healthz"
  node_services
  echo "-- node $NODE_NAME Ready in $((SECONDS - t0)) s (containerd, kubelet, kube-scheduler, kube-proxy, CoreDNS; logs in $DIR/logs)" >&2
}

# node_services: Services work as in a cluster. kube-proxy routes ClusterIPs in the node's
# namespace, and CoreDNS answers the pods' cluster.local names at $NODE_IP.
#   The apiserver keeps no endpoints for the `kubernetes` Service (--endpoint-reconciler-type
#   none: its own address is the host's loopback), so the node writes them: $NODE_IP:port, where
#   the apiserver's forwarder listens. Without them kube-proxy would reject $SERVICE_IP:443,
#   which the kubelet and the pods use.
node_services() {
  local n="$DIR/node"
  "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" apply -f - >> "$DIR/logs/node-services.log" 2>&1 <<YAML \
    || { tail -n 5 "$DIR/logs/node-services.log" >&2; fail node-services "kubectl apply of the kubernetes Service's endpoints and CoreDNS's RBAC failed"; }
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kubernetes
  namespace: default
  labels:
    kubernetes.io/service-name: kubernetes
    endpointslice.kubernetes.io/managed-by: control-plane.sh
addressType: IPv4
endpoints:
- addresses: ["$NODE_IP"]
  conditions: {ready: true}
ports:
- {name: https, port: $APISERVER_PORT, protocol: TCP}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [services, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:coredns}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:coredns}
YAML
  start kube-proxy nsenter -t "$(ns_pid)" -m -n -- "$BIN/kube-proxy" --config "$n/kube-proxy.yaml" --v 2
  wait_for kube-proxy in_node curl -sf --max-time 2 http://127.0.0.1:10256/healthz
  start coredns nsenter -t "$(ns_pid)" -m -n -- "$BIN/coredns" -conf "$n/Corefile"
  wait_for coredns in_node curl -sf --max-time 2 http://127.0.0.1:8181/ready
}

node_import() {
  ctr --address "$DIR/node/containerd.sock" -n k8s.io images import --no-unpack=false "$1" >> "$DIR/logs/import.log" 2>&1 \
    || { tail -n 5 "$DIR/logs/import.log" >&2; die "import: ctr could not import $1 (log: $DIR/logs/import.log)"; }
}

# node_kill_all: every process of the node: the namespace holders' members, the containers in
# its cgroups (they have mount namespaces of their own), the forwarders.
node_kill_all() {
  local ns pid cg _ left
  ns="$(readlink "/proc/$(ns_pid)/ns/mnt" 2>/dev/null || true)"
  cg="$(cat "$DIR/node-cgroup" 2>/dev/null || true)"
  for _ in $(seq 50); do
    left=""
    if [ -n "$ns" ]; then
      for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" = "$ns" ] && { kill -KILL "$pid" 2>/dev/null || true; left=1; }
      done
    fi
    if [ -n "$cg" ]; then
      for pid in $(find /sys/fs/cgroup/*/"$cg" -name cgroup.procs -exec cat {} + 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true; left=1
      done
    fi
    [ -n "$left" ] || break
    sleep 0.1
  done
}

node_down() {
  local cg f
  [ -e "$DIR/node-cgroup" ] || return 0
  # The kubelet first (it would restart what dies), then the runtime, then whatever is left.
  stop_one kubelet
  stop_one kube-scheduler
  stop_one containerd
  node_kill_all
  rm -f "$DIR/node-ns.pid"
  for f in "$DIR"/forward-*.pid; do [ -e "$f" ] || continue; f="${f##*/}"; stop_one "${f%.pid}"; done
  cg="$(cat "$DIR/node-cgroup")"
  # Deepest first: rmdir refuses a cgroup with children.
  find /sys/fs/cgroup/*/"$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  if compgen -G "/sys/fs/cgroup/*/$cg" > /dev/null; then
    echo "control-plane: down: could not remove every cgroup under /sys/fs/cgroup/*/$cg" >&2
    return 1
  fi
  rm -f "$DIR/node-cgroup"
}

# forward DIR PORT...: the host's 127.0.0.1:PORT reachable in the node's namespace on every
# address there (pods use $NODE_IP:PORT). One forwarder per call; `down` stops them.
forward() {
  local maps=() p i=0
  [ -e "$DIR/node-cgroup" ] || die "forward: $DIR has no node (up DIR --node)"
  for p in "$@"; do maps+=("0.0.0.0:$p=127.0.0.1:$p"); done
  while [ -e "$DIR/forward-$i.pid" ]; do i=$((i + 1)); done
  start "forward-$i" "$(cat "$DIR/python")" "$REPO/scripts/node/netns-forward.py" "/proc/$(ns_pid)/ns/net" "${maps[@]}"
  basename "$(cat "$DIR/python")" > "$DIR/forward-$i.exe"
  local deadline=$((SECONDS + START_TIMEOUT))
  until grep -q listening "$DIR/logs/forward-$i.log" 2>/dev/null; do
    running "forward-$i" && [ "$SECONDS" -lt "$deadline" ] || {
      cat "$DIR/logs/forward-$i.log" >&2; stop_one "forward-$i"; die "forward: the forwarder did not start"; }
    sleep 0.1
  done
  echo "$NODE_IP"
}

case "${1:-}" in
  build) [ $# -eq 1 ] || usage; ensure_apt flock util-linux; build_all; echo "$CACHE/bin" ;;
  prereqs) [ $# -eq 1 ] || usage; node_prereqs ;;
  up) [ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$3" = --node ]; } || usage; DIR=$2; WITH_NODE=0; [ $# -eq 2 ] || WITH_NODE=1; up ;;
  import) [ $# -eq 3 ] || usage; DIR="$(cd "$2" && pwd)"; [ -e "$DIR/node-cgroup" ] || die "import: $DIR has no node (up DIR --node)"; node_import "$(realpath "$3")" ;;
  forward) [ $# -ge 3 ] || usage; DIR="$(cd "$2" && pwd)"; shift 2; forward "$@" ;;
  down) [ $# -eq 2 ] || usage; DIR=$2; down ;;
  stop | start) [ $# -eq 3 ] || usage; DIR="$(cd "$2" && pwd)"; component "$1" "$3" ;;
  *) usage ;;
esac

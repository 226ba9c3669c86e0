#!/usr/bin/env bash
# The image, built without a Docker engine (scripts/image.sh build), checked with the real tools:
#   1. it agrees with the Dockerfile: user, entrypoint, exposed port, labels, the builder's RUSTFLAGS,
#      cargo arguments and strip, and the final stage's files (tests/packaging/check_image.py, which
#      parses the Dockerfile with Docker's own parser);
#   2. containerd (Debian's) imports it: a private containerd with its own root, state and socket in
#      a temporary directory (the machine's containerd, if any, is not touched), `ctr -n k8s.io images
#      import`, and `ctr run` of the imported image's entrypoint (`--version`) as the image's user;
#      the private containerd is stopped and its directory removed afterwards;
#   3. skopeo (Debian's) reads it: `skopeo inspect oci-archive:` gives the same digest and config;
#   4. the release workflow's push steps work on it: crane push of the layout by digest and crane
#      index append, to crane's in-memory registry on loopback (ghcr.io itself is not reachable).
# Prints the image size and the build and import times. Idempotent; installs what it needs.
#
#   scripts/check-image.sh              build the image, then check it
#   IMAGE_ARCHIVE=path scripts/check-image.sh   check an archive built before (no build)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
source "$REPO/scripts/lib.sh"
VENV="$REPO/.venv-tools"
REQS="$REPO/tests/packaging/requirements.txt"
OUT="$REPO/target/image"

step() { printf '\n==> %s\n' "$*"; }
die() { printf '\ncheck-image: FAILED: %s\n' "$*" >&2; exit 1; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

step "tools: python venv ($(basename "$REQS")), containerd, runc, skopeo (Debian)"
ensure_apt python3 python3
ensure_apt readelf binutils
ensure_venv "$VENV" "$REQS" requirements --upgrade pip
ensure_apt containerd containerd
ensure_apt ctr containerd
ensure_apt runc runc
ensure_apt skopeo skopeo
echo "    $(containerd --version | cut -d' ' -f1-3); $(runc --version | head -1); $(skopeo --version)"

# ------------------------------------------------------------------------------------ build
if [ -n "${IMAGE_ARCHIVE:-}" ]; then
  ARCHIVE="$IMAGE_ARCHIVE"
  REF="$(python3 -c 'import json,sys,tarfile; print(json.load(tarfile.open(sys.argv[1]).extractfile("index.json"))["manifests"][0]["annotations"]["io.containerd.image.name"])' "$ARCHIVE")"
  step "image: IMAGE_ARCHIVE set, checking $ARCHIVE ($REF)"
else
  ARCHIVE="$OUT/redlock-elector.oci.tar"
  step "image: scripts/image.sh build $ARCHIVE"
  t0=$(date +%s%N)
  REF="$(scripts/image.sh build "$ARCHIVE")" || die "scripts/image.sh build failed"
  echo "    $REF built in $(ms_since "$t0") ms (the static cargo build included; a no-op when the binary is up to date)"
fi
[ "$REF" = "$(scripts/image.sh ref)" ] || die "the archive names $REF, scripts/image.sh ref says $(scripts/image.sh ref)"

# ------------------------------------------------------------------------- agrees with the Dockerfile
step "the image agrees with the Dockerfile (tests/packaging/check_image.py)"
scripts/image.sh flags > "$OUT/flags.txt"
"$VENV/bin/python" tests/packaging/check_image.py Dockerfile "$ARCHIVE" "$OUT/flags.txt" \
  || die "the image and the Dockerfile disagree (see above)"

# ------------------------------------------------------------------------------------ skopeo
step "skopeo inspect oci-archive:$ARCHIVE"
skopeo inspect "oci-archive:$ARCHIVE" > "$OUT/skopeo-inspect.json" || die "skopeo cannot read the archive"
skopeo inspect --config "oci-archive:$ARCHIVE" > "$OUT/skopeo-config.json" || die "skopeo cannot read the archive's config"
python3 - "$ARCHIVE" "$OUT/skopeo-inspect.json" "$OUT/skopeo-config.json" <<'EOF' || die "skopeo read something else than the archive holds"
import json, sys, tarfile
tar = tarfile.open(sys.argv[1])
digest = json.load(tar.extractfile("index.json"))["manifests"][0]["digest"]
inspect, config = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
assert inspect["Digest"] == digest, (inspect["Digest"], digest)
c = config["config"]
assert c["User"] == "65532:65532" and c["Entrypoint"] == ["/usr/local/bin/redlock-elector"] and "4041/tcp" in c["ExposedPorts"], c
print(f"    digest {digest}; User {c['User']}, Entrypoint {c['Entrypoint']}, ports {sorted(c['ExposedPorts'])}, {inspect['Architecture']}")
EOF

# ------------------------------------------------------------------------- containerd import + run
step "containerd: ctr -n k8s.io images import into a private containerd, then ctr run"
[ "$(id -u)" = 0 ] || die "a private containerd (and ctr run) needs root: run this check as root (CI does), e.g. sudo -E scripts/check-image.sh"
CT="$(mktemp -d -t check-image-containerd.XXXXXX)"
CT_PID=""
CT_ID="check-image-$$"
cleanup() {
  if [ -n "$CT_PID" ]; then
    ctr --address "$CT/containerd.sock" -n k8s.io tasks kill -s KILL "$CT_ID" >/dev/null 2>&1 || true
    ctr --address "$CT/containerd.sock" -n k8s.io containers rm "$CT_ID" >/dev/null 2>&1 || true
    kill "$CT_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$CT_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$CT_PID" 2>/dev/null || true
    CT_PID=""
  fi
  # Snapshots are plain directories until a container mounts them; anything still mounted under
  # the private root (a failed run) is unmounted before the directory goes.
  { grep -o " $CT/[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$CT"
}
trap cleanup EXIT
# Only what import and run need: no CRI (the machine's kubelet, if any, talks to its own
# containerd), every path inside $CT, /opt/containerd too.
cat > "$CT/config.toml" <<EOF
version = 2
root = "$CT/root"
state = "$CT/state"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CT/containerd.sock"
[ttrpc]
  address = "$CT/containerd.sock.ttrpc"
[debug]
  address = "$CT/debug.sock"
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$CT/opt"
EOF
containerd --config "$CT/config.toml" > "$CT/containerd.log" 2>&1 &
CT_PID=$!
CTR=(ctr --address "$CT/containerd.sock" -n k8s.io)
for _ in $(seq 100); do "${CTR[@]}" version >/dev/null 2>&1 && break; kill -0 "$CT_PID" 2>/dev/null || break; sleep 0.1; done
"${CTR[@]}" version >/dev/null 2>&1 || { tail -n 20 "$CT/containerd.log"; die "the private containerd did not start (log above)"; }
t0=$(date +%s%N)
"${CTR[@]}" images import "$ARCHIVE" > "$CT/import.out" 2>&1 || { cat "$CT/import.out"; die "ctr -n k8s.io images import refused $ARCHIVE"; }
import_ms=$(ms_since "$t0")
"${CTR[@]}" images ls > "$CT/images.out"
grep -q "^$REF " "$CT/images.out" || { cat "$CT/import.out" "$CT/images.out"; die "ctr imported the archive but lists no image $REF"; }
"${CTR[@]}" images check "name==$REF" | grep -q "complete" || die "ctr images check: $REF is not complete"
echo "    imported as $REF in $import_ms ms (unpacked into the overlayfs snapshotter)"
# The image's own config decides the user: ctr run without --user, the entrypoint's path given
# explicitly (ctr replaces the whole argv), so only the argument differs from a pod's start.
t0=$(date +%s%N)
# Its own top-level cgroup (ctr's default, /k8s.io/<id>, would leave the k8s.io parent behind);
# runc removes it with the task.
"${CTR[@]}" run --cgroup "/$CT_ID" "$REF" "$CT_ID" /usr/local/bin/redlock-elector --version > "$CT/run.out" 2>&1 \
  || { cat "$CT/run.out"; tail -n 20 "$CT/containerd.log"; die "ctr run of the imported image failed"; }
run_ms=$(ms_since "$t0")
grep -q "^redlock-elector ${REF##*:}" "$CT/run.out" || { cat "$CT/run.out"; die "the imported image's binary did not print its version"; }
"${CTR[@]}" containers info "$CT_ID" > "$CT/info.json"
python3 - "$CT/info.json" <<'EOF2' || die "the container did not run as the image's user 65532:65532"
import json, sys
user = json.load(open(sys.argv[1]))["Spec"]["process"]["user"]
assert (user["uid"], user["gid"]) == (65532, 65532), user
print(f"    ctr run: process user uid={user['uid']} gid={user['gid']} (from the image config)")
EOF2
"${CTR[@]}" containers rm "$CT_ID" > /dev/null || die "ctr containers rm $CT_ID failed"
echo "    ctr run: '$(tr -d '\n' < "$CT/run.out")' in $run_ms ms"
cleanup
trap - EXIT
# Nothing left behind: no directory, no mount, no process (containerd, a runc shim) naming it.
[ ! -e "$CT" ] || die "the private containerd's directory $CT is still there"
! grep -q " $CT" /proc/mounts || die "mounts under $CT are left: $(grep " $CT" /proc/mounts)"
left="$(pgrep -a -f "$CT" || true; ls -d /sys/fs/cgroup/"$CT_ID" /sys/fs/cgroup/*/"$CT_ID" 2>/dev/null || true)"
[ -z "$left" ] || die "processes or cgroups of the private containerd are left: $left"
echo "    private containerd stopped; its directory, mounts, processes and the container's cgroups are gone"

# ------------------------------------------------------------------------- release rehearsal
# The release workflow's push steps (.github/workflows/release.yml), against crane's own in-memory
# registry on loopback instead of ghcr.io: the archive unpacked and pushed by digest, then the
# multi-arch index (here with this machine's one architecture; the workflow adds arm64's).
step "release rehearsal: crane push of the layout by digest, crane index append, to a loopback registry"
CRANE="$(scripts/image.sh crane)"
RH="$(mktemp -d -t check-image-release.XXXXXX)"
"$CRANE" registry serve --address 127.0.0.1:0 > "$RH/registry.log" 2>&1 &
RH_PID=$!
trap 'kill "$RH_PID" 2>/dev/null || true; rm -rf "$RH"' EXIT
for _ in $(seq 100); do
  port="$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$RH/registry.log")"; [ -z "$port" ] || break; sleep 0.1
done
[ -n "$port" ] || die "crane registry serve did not start"
repo="127.0.0.1:$port/redlock-elector/redlock-elector"
mkdir "$RH/layout" && tar -C "$RH/layout" -xf "$ARCHIVE"
"$CRANE" push "$RH/layout" "$repo:${REF##*:}-$(uname -m)" --image-refs "$RH/ref" > "$RH/push.log" 2>&1 \
  || { cat "$RH/push.log"; die "crane push of the OCI layout failed"; }
"$CRANE" index append -m "$(cat "$RH/ref")" -t "$repo:${REF##*:}" > "$RH/index.log" 2>&1 \
  || { cat "$RH/index.log"; die "crane index append failed"; }
"$CRANE" manifest "$repo:${REF##*:}" > "$RH/index.json"
python3 - "$RH/index.json" "$ARCHIVE" <<'EOF2' || die "the pushed index does not hold the archive's image for this platform"
import json, sys, tarfile
index = json.load(open(sys.argv[1]))
digest = json.load(tarfile.open(sys.argv[2]).extractfile("index.json"))["manifests"][0]["digest"]
(m,) = index["manifests"]
assert index["mediaType"] == "application/vnd.oci.image.index.v1+json", index["mediaType"]
assert m["digest"] == digest and m["platform"]["os"] == "linux", m
print(f"    index {index['mediaType']}: {m['platform']['os']}/{m['platform']['architecture']} -> {digest} (the archive's image)")
EOF2
kill "$RH_PID" 2>/dev/null || true
wait "$RH_PID" 2>/dev/null || true
rm -rf "$RH"
trap - EXIT

mib() { awk "BEGIN{printf \"%.1f\", $1/1048576}"; }
size="$(stat -c %s "$ARCHIVE")"
printf '\n    image archive: %s bytes (%s MiB); imported into containerd in %s ms\n' "$size" "$(mib "$size")" "$import_ms"
printf '\ncheck-image: all image checks passed\n'

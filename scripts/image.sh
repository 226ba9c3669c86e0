#!/usr/bin/env bash
# The container image without a Docker engine: the release binary built exactly as the Dockerfile's
# builder stage builds it, and an OCI image with the same content as the Dockerfile's final stage
# (distroless/static-debian12:nonroot + the binary), assembled with crane.
#
#   scripts/image.sh build [OUT]   build the binary and write the image as an OCI archive to OUT
#                                  (default target/image/redlock-elector.oci.tar); prints the
#                                  image reference on stdout (progress goes to stderr)
#   scripts/image.sh binary        only the binary: builds it, prints the path of the stripped copy
#   scripts/image.sh ref           prints the image reference, ghcr.io/redlock-elector/redlock-elector:<Cargo version>
#   scripts/image.sh flags         prints the build's RUSTFLAGS and cargo arguments (the test compares
#                                  them with the Dockerfile's)
#   scripts/image.sh crane         prints the path of the pinned crane (built when missing)
#
# Environment:
#   IMAGE_REPOSITORY   repository of the reference (default ghcr.io/redlock-elector/redlock-elector)
#   IMAGE_TAG          tag (default: the version in Cargo.toml)
#   REDLOCK_ELECTOR_BIN  use this already built static binary instead of building (it is still
#                      checked to be static, and stripped into the image)
#   CARGO_TARGET_DIR   default target/static (a separate dir keeps the normal build cache intact)
#
# The archive is an OCI image layout in a tar (index.json names the image both for containerd,
# `io.containerd.image.name`, and for skopeo/podman, `org.opencontainers.image.ref.name`), so
#   ctr -n k8s.io images import target/image/redlock-elector.oci.tar
#   skopeo inspect oci-archive:target/image/redlock-elector.oci.tar
# both take it as it is. The layer's files carry the commit's time, so rebuilding the same commit
# gives the same image digest.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
source "$REPO/scripts/lib.sh"

CRANE_VERSION=v0.22.1
IMAGE_REPOSITORY="${IMAGE_REPOSITORY:-ghcr.io/redlock-elector/redlock-elector}"
SOURCE_URL="https://github.com/redlock-elector/redlock-elector"
# The builder stage's flags (Dockerfile: ENV RUSTFLAGS, cargo build ... --target, strip). The
# target follows the machine (the Dockerfile's is x86_64; the release workflow builds arm64 on an
# arm64 runner); check-packaging.sh's image test fails when these and the Dockerfile's part.
RUSTFLAGS_STATIC="-C target-feature=+crt-static"
RUST_TARGET="${RUST_TARGET:-$(uname -m)-unknown-linux-gnu}"
CARGO_ARGS=(build --release --locked --target "$RUST_TARGET" --bin redlock-elector)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target/static}"
# What distroless/static-debian12:nonroot's config sets and the Dockerfile inherits.
BASE_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt)
BASE_WORKDIR=/home/nonroot

die() { echo "image.sh: $*" >&2; exit 1; }
log() { echo "-- $*" >&2; }

cargo_version() {
  awk -F'"' '/^\[package\]/ {p=1; next} /^\[/ {p=0} p && $1 ~ /^version *= *$/ {print $2; exit}' Cargo.toml
}
image_ref() {
  local v
  v="${IMAGE_TAG:-$(cargo_version)}"
  [ -n "$v" ] || die "cannot read the version from Cargo.toml"
  echo "$IMAGE_REPOSITORY:$v"
}
oci_arch() {
  case "$RUST_TARGET" in
    x86_64-*) echo amd64 ;;
    aarch64-*) echo arm64 ;;
    *) die "no OCI architecture known for the Rust target $RUST_TARGET" ;;
  esac
}

# binary: the static, stripped binary the image ships; prints its path.
build_binary() {
  local bin out="$REPO/target/image"
  if [ -n "${REDLOCK_ELECTOR_BIN:-}" ]; then
    bin="$REDLOCK_ELECTOR_BIN"
    log "using REDLOCK_ELECTOR_BIN=$bin"
  else
    command -v cargo >/dev/null || die "cargo is missing (install Rust from https://rustup.rs)"
    log "RUSTFLAGS=\"$RUSTFLAGS_STATIC\" cargo ${CARGO_ARGS[*]} (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
    RUSTFLAGS="$RUSTFLAGS_STATIC" cargo "${CARGO_ARGS[@]}" >&2 \
      || die "static cargo build failed (same flags as the Dockerfile's builder stage)"
    bin="$CARGO_TARGET_DIR/$RUST_TARGET/release/redlock-elector"
  fi
  [ -x "$bin" ] || die "no binary at $bin"
  ensure_apt strip binutils >&2
  mkdir -p "$out"
  # A name of this process's own: two builds may finish at once (test.sh's background one and a
  # check's), and a shared name let one move the other's copy away before its strip.
  cp "$bin" "$out/redlock-elector.tmp.$$"
  strip "$out/redlock-elector.tmp.$$" || die "strip failed"
  mv "$out/redlock-elector.tmp.$$" "$out/redlock-elector"
  # distroless/static has no libc: a dynamically linked binary would not start.
  if LC_ALL=C readelf -l "$out/redlock-elector" | grep -q 'Requesting program interpreter'; then
    die "$out/redlock-elector is dynamically linked (it has a program interpreter); the image has no libc"
  fi
  echo "$out/redlock-elector"
}

crane_path() { ensure_go_tool crane github.com/google/go-containerregistry/cmd/crane "$CRANE_VERSION"; }

# write_layer BIN OUT.tar MTIME: the final stage's filesystem as one layer tar.
write_layer() {
  python3 - "$@" <<'EOF'
import io, sys, tarfile
bin_path, out, mtime = sys.argv[1], sys.argv[2], int(sys.argv[3])
# distroless/static-debian12:nonroot's users and groups; 65532 is "nonroot", the chart's uid.
passwd = ("root:x:0:0:root:/root:/sbin/nologin\n"
          "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
          "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")
group = ("root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n")
# Static glibc >= 2.34 resolves hosts from files then DNS without NSS modules; the file says so
# for any reader, as distroless's does.
nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"
with open("/etc/ssl/certs/ca-certificates.crt", "rb") as f:
    certs = f.read()
with open(bin_path, "rb") as f:
    binary = f.read()

entries = []  # (path, kind, mode, uid, gid, data)
def d(path, mode=0o755, uid=0, gid=0): entries.append((path, tarfile.DIRTYPE, mode, uid, gid, None))
def f(path, data, mode=0o644): entries.append((path, tarfile.REGTYPE, mode, 0, 0, data))
for p in ["etc", "etc/ssl", "etc/ssl/certs", "home", "usr", "usr/local", "usr/local/bin"]:
    d(p)
d("root", 0o700)
d("home/nonroot", 0o700, 65532, 65532)
d("tmp", 0o1777)
f("etc/passwd", passwd.encode())
f("etc/group", group.encode())
f("etc/nsswitch.conf", nsswitch.encode())
f("etc/ssl/certs/ca-certificates.crt", certs)
f("usr/local/bin/redlock-elector", binary, 0o755)

with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
    for path, kind, mode, uid, gid, data in sorted(entries):
        ti = tarfile.TarInfo(path)
        ti.type, ti.mode, ti.uid, ti.gid, ti.mtime = kind, mode, uid, gid, mtime
        ti.uname = ti.gname = ""
        if data is None:
            tar.addfile(ti)
        else:
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
EOF
}

# finish_layout LAYOUT REF: name the image in index.json the way containerd and skopeo/podman read it.
finish_layout() {
  python3 - "$@" <<'EOF'
import json, sys
layout, ref = sys.argv[1], sys.argv[2]
with open(f"{layout}/index.json") as f:
    index = json.load(f)
if len(index["manifests"]) != 1:
    sys.exit(f"image.sh: expected one manifest in {layout}/index.json, found {len(index['manifests'])}")
# crane's layout writes the config's media type as artifactType; an image is not an artifact
# (OCI image-spec: artifactType is for artifacts), so leave it out.
index["manifests"][0].pop("artifactType", None)
index["manifests"][0]["annotations"] = {
    "io.containerd.image.name": ref,
    "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1],
}
with open(f"{layout}/index.json", "w") as f:
    json.dump(index, f, separators=(",", ":"))
EOF
}

# tar_layout LAYOUT OUT MTIME: the layout directory as a deterministic tar (sorted, fixed owner and time).
tar_layout() {
  python3 - "$@" <<'EOF'
import os, sys, tarfile
layout, out, mtime = sys.argv[1], sys.argv[2], int(sys.argv[3])
paths = []
for root, dirs, files in os.walk(layout):
    for name in dirs + files:
        paths.append(os.path.relpath(os.path.join(root, name), layout))
with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
    for rel in sorted(paths):
        ti = tar.gettarinfo(os.path.join(layout, rel), arcname=rel)
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = mtime
        ti.mode = 0o755 if ti.isdir() else 0o644
        if ti.isfile():
            with open(os.path.join(layout, rel), "rb") as f:
                tar.addfile(ti, f)
        else:
            tar.addfile(ti)
EOF
}

build_image() {
  local out="${1:-$REPO/target/image/redlock-elector.oci.tar}" bin crane ref version revision mtime work port reg_pid local_ref start=$SECONDS
  ref="$(image_ref)"
  version="${ref##*:}"
  bin="$(build_binary)"
  crane="$(crane_path)"
  ensure_apt python3 python3 >&2
  if [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then
    log "/etc/ssl/certs/ca-certificates.crt missing: installing Debian package ca-certificates"
    apt_package ca-certificates
  fi
  revision="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)"
  mtime="$(git -C "$REPO" log -1 --format=%ct 2>/dev/null || echo 0)"
  mkdir -p "$(dirname "$out")"
  work="$(mktemp -d)"
  reg_pid=""
  # shellcheck disable=SC2064 # expand now: the trap must know these even after the function returns
  trap "[ -z \"\${reg_pid:-}\" ] || kill \"\$reg_pid\" 2>/dev/null || true; rm -rf '$work'" EXIT

  write_layer "$bin" "$work/layer.tar" "$mtime"

  # crane mutate works on a registry, so a throwaway in-memory one (crane's own) on loopback holds
  # the image between append and mutate; crane pull then writes it as an OCI layout.
  # The log exists before the server starts: the loop below reads it at once, and on a loaded
  # machine the background process had not opened it yet (sed failed, set -e ended the build:
  # a cold run, 2026-11-29).
  : > "$work/registry.log"
  "$crane" registry serve --address 127.0.0.1:0 >> "$work/registry.log" 2>&1 &
  reg_pid=$!
  for _ in $(seq 100); do
    port="$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/registry.log")"
    [ -z "$port" ] || break
    kill -0 "$reg_pid" 2>/dev/null || { cat "$work/registry.log" >&2; die "crane registry serve exited"; }
    sleep 0.1
  done
  [ -n "$port" ] || { cat "$work/registry.log" >&2; die "crane registry serve did not say its port within 10 s"; }
  local_ref="127.0.0.1:$port/redlock-elector:$version"
  "$crane" append --insecure --oci-empty-base -f "$work/layer.tar" -t "$local_ref" > "$work/append.out" 2>&1 \
    || { cat "$work/append.out" >&2; die "crane append failed"; }
  # The Dockerfile's USER, EXPOSE and ENTRYPOINT, plus what its distroless base brings (env, workdir).
  local env_args=() e
  for e in "${BASE_ENV[@]}"; do env_args+=(-e "$e"); done
  "$crane" mutate --insecure "$local_ref" -t "$local_ref" \
    --set-platform "linux/$(oci_arch)" \
    --entrypoint /usr/local/bin/redlock-elector \
    --user 65532:65532 \
    --exposed-ports 4041/tcp \
    --workdir "$BASE_WORKDIR" \
    "${env_args[@]}" \
    -l org.opencontainers.image.title=redlock-elector \
    -l org.opencontainers.image.version="$version" \
    -l org.opencontainers.image.source="$SOURCE_URL" \
    -l org.opencontainers.image.revision="$revision" \
    -l org.opencontainers.image.licenses=Apache-2.0 \
    > "$work/mutate.out" 2>&1 || { cat "$work/mutate.out" >&2; die "crane mutate failed"; }
  "$crane" pull --insecure --format=oci "$local_ref" "$work/layout" > "$work/pull.out" 2>&1 \
    || { cat "$work/pull.out" >&2; die "crane pull --format=oci failed"; }
  kill "$reg_pid" 2>/dev/null || true
  wait "$reg_pid" 2>/dev/null || true
  reg_pid=""
  finish_layout "$work/layout" "$ref"
  # A temporary name of this process's own, renamed into place: two builds of the same archive
  # at once (a check script's and a real-node test's, in two lanes of scripts/test.sh) each
  # write their own, and the rename is atomic.
  tar_layout "$work/layout" "$out.tmp.$$" "$mtime"
  mv "$out.tmp.$$" "$out"
  rm -rf "$work"
  trap - EXIT
  log "image $ref ($(oci_arch)) in $out: $(stat -c %s "$out") bytes, built in $((SECONDS - start)) s"
  echo "$ref"
}

case "${1:-}" in
  build) shift; build_image "$@" ;;
  binary) build_binary ;;
  ref) image_ref ;;
  flags) echo "RUSTFLAGS=$RUSTFLAGS_STATIC"; echo "cargo ${CARGO_ARGS[*]}" ;;
  crane) crane_path ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# The whole test suite: installs what it needs (redis-server, openssl, and whatever the check
# scripts need), runs every Rust test (unit + integration against real redis-server processes and the
# real binary), the model check and every scripts/check-*.sh (packaging, observability, ...); the
# control-plane tests and check-packaging.sh (its helm comes from the Go build) come last.
#
#   ./scripts/test.sh            everything
#   ./scripts/test.sh --rust     only the Rust tests: unit + integration (every test but the
#                                control-plane ones, cp_*), the Valkey and mixed runs and the model
#                                check. No control-plane prerequisites or Go build, no image
#                                build, no cp_* tests, no scripts/check-*.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
RUST_ONLY=""
[ "${1:-}" = "--rust" ] && RUST_ONLY=1

ensure_apt redis-server redis-server
ensure_apt openssl openssl      # tests/suite/managed_redis.rs makes its CA, server and client certificates with it
ensure_apt curl curl
ensure_apt kill procps          # the tests send real signals with kill(1), not the shell builtin
ensure_apt python3 python3      # the packaging and observability checks run Python tools in a venv
ensure_apt strip binutils       # the image's binary is stripped
ensure_apt cc gcc               # the harness builds tests/clockshift (an LD_PRELOAD that steps Redis's wall clock)
ensure_apt jq jq                # tests/suite/clients.rs runs the client snippets of examples/clients/:
ensure_apt node nodejs          #   shell (curl + jq), Python, Node (18+: built-in fetch) and Go (as for the control plane)

# The control-plane tests (tests/suite/control_plane*.rs, test names cp_*) need etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, kubectl and helm built from their Go modules
# (tests/control-plane/). The real-node ones (control_plane_node.rs) also need root, and install
# containerd, runc, the CNI plugins and busybox-static from Debian when missing
# (scripts/control-plane.sh up --node); they build the image with scripts/image.sh.
# A cold build takes 10-40 min on 2 cores, so it starts now, in the background (cached after the
# first run), and those tests run last. No Go, or a failed build, fails the run loudly.
# The real node's Debian packages now, before any test reads the host's state (a package's own
# service, where one starts, is then part of the "before" that cp_node_down_leaves_nothing_behind
# compares with). --rust skips all of this: it runs no cp_* test and builds no image.
if [ -z "$RUST_ONLY" ]; then
  scripts/control-plane.sh prereqs
  CP_BUILD_LOG="$(mktemp -t control-plane-build.XXXXXX)"
  setsid scripts/control-plane.sh build > "$CP_BUILD_LOG" 2>&1 < /dev/null &
  CP_BUILD=$!
  # The image's static release binary and crane (scripts/image.sh; the real-node tests and
  # check-image.sh use them) build beside it, at the lowest priority, so they cost the suite only
  # the CPU its tests leave idle. If this fails, the tests that need it build it again and fail
  # loudly there.
  IMAGE_BUILD_LOG="$(mktemp -t image-build.XXXXXX)"
  # (setsid gives it an autogroup of its own, which the kernel would give an equal share of the
  # CPU whatever the nice values inside: the group's own priority is lowered first.)
  setsid nice -n 19 bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true; scripts/image.sh binary && scripts/image.sh crane' > "$IMAGE_BUILD_LOG" 2>&1 < /dev/null &
  IMAGE_BUILD=$!
  trap 'kill -- -"$CP_BUILD" -"$IMAGE_BUILD" 2>/dev/null || true' EXIT
fi

# Every test runs on the release build, the one that ships: the model check and the benchmark
# need it anyway, and one build of the dependency tree (with the dev-dependencies' features)
# instead of two, debug and release, saves a fresh machine about a quarter of an hour
# (docs/development.md). `cargo test` without --release works as well, for the dev loop.
echo "== the previous release's binary (tests/suite/mixed_versions.rs; built from git once, cached in target/previous-*)"
cargo test --locked --release --test suite -- --exact mixed_versions::previous_release_builds_from_git

echo "== cargo test --release (unit + integration; real redis-server processes, real binary, real signals)"
cargo test --locked --release --lib --bins --test suite --benches -- --test-threads="${TEST_THREADS:-2}" --skip cp_

# Valkey beside Redis (docs/operating/which-redis.md): the election, handover, crash, clock-jump
# and fault-schedule tests again, on Valkey 8.1 nodes, then on mixed trios (Redis, Valkey,
# Redis). scripts/valkey.sh fetches valkey-server once (built without TLS: TLS is tested on
# Redis only).
VALKEY_SERVER="$(scripts/valkey.sh)"
export VALKEY_SERVER
for server in valkey mixed; do
  echo "== cargo test --release on $server nodes (TEST_SERVER=$server): election, handover, crash, clock jumps, fault schedule"
  TEST_SERVER=$server cargo test --locked --release --test suite -- --test-threads="${TEST_THREADS:-2}" \
    election:: fresh_handover:: safety_clock_jump:: fault_schedule::
done

# The model check (tests/model.rs, docs/model.md) runs on its own, one check at a time (a few
# minutes; unoptimized it would be about five times slower, so a debug build lists its checks as
# ignored).
echo "== cargo test --release --test model (stateright model check: each hazard off and on; S1, S2, the release proof's invariant)"
cargo test --locked --release --test model -- --test-threads=1

if [ -n "$RUST_ONLY" ]; then
  echo "== the Rust tests passed (--rust: no control-plane build, no image, no cp_* tests, no check scripts)"
  exit 0
fi

# From here on the foreground needs the image's binary (check-image.sh, the real-node tests). A
# background build still running at the lowest priority would hold the foreground up behind it
# (cargo's lock on target/static) while getting only the CPU that others leave: it is raised to
# normal priority first (its own autogroup and its processes), then waited for.
t0=$SECONDS
if kill -0 "$IMAGE_BUILD" 2>/dev/null; then
  echo 0 > "/proc/$IMAGE_BUILD/autogroup" 2>/dev/null || true
  renice -n 0 -g "$IMAGE_BUILD" > /dev/null 2>&1 || true
fi
wait "$IMAGE_BUILD" || echo "-- the image's background build failed (log $IMAGE_BUILD_LOG); check-image.sh and the real-node tests build it again" >&2
echo "-- the image's binary and crane ready after $((SECONDS - t0)) s more"

# The check scripts that need nothing from the control-plane build run next, while a cold Go build
# may still be going (on a fresh machine it is the longest step): the CPU-heavy release builds
# here overlap it instead of waiting for it. check-packaging.sh runs the helm that build makes.
shopt -s nullglob
for check in scripts/check-*.sh; do
  [ "$check" = scripts/check-packaging.sh ] && continue
  echo "== $check"
  bash "$check"
done

echo "== waiting for the control-plane build (scripts/control-plane.sh build; log $CP_BUILD_LOG)"
t0=$SECONDS
if ! wait "$CP_BUILD"; then
  cat "$CP_BUILD_LOG" >&2
  echo "test.sh: scripts/control-plane.sh build failed (its log is above). The control-plane tests" \
    "need Go 1.26 and the Go module proxy (install Go from https://go.dev/dl/, or put it in" \
    "/usr/local/go/bin) and, for a cold build, about 6 GB free for the Go caches (GOCACHE," \
    "GOMODCACHE) and 0.4 GB for the binaries; a 'no space left on device' in the log is the latter." >&2
  exit 1
fi
echo "-- control-plane binaries ready after $((SECONDS - t0)) s more: $(tail -n 1 "$CP_BUILD_LOG")"
trap - EXIT
echo "== cargo test: the real control plane (tests/suite/control_plane*.rs; one control plane at a time)"
cargo test --locked --release --test suite -- --test-threads=1 cp_

echo "== scripts/check-packaging.sh"
bash scripts/check-packaging.sh
echo "== all tests passed"

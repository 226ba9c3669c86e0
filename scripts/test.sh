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
#                                build, no cp_* tests, no scripts/check-*.sh. Still needs Go
#                                (tests/suite/clients.rs runs the Go client snippet), apt (root or
#                                `sudo -n`) for missing Debian packages, x86_64 (the Valkey fetch)
#                                and the git history (the previous release is built from it).
#   ./scripts/test.sh --quick    the contributor's fast path (under 10 min warm): the unit tests,
#                                the suite on Redis (every test but cp_* and the mixed-version
#                                ones, which build the previous release from git) and the model's
#                                quick checks (the searches that take seconds; the full test
#                                command runs all of them). Needs Go and apt as --rust does.
#
# Each stage's wall time (compiles included) is printed as it ends, and a table of them at the end,
# also when a stage fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
MODE=all
case "${1:-}" in
  "") ;;
  --rust) MODE=rust ;;
  --quick) MODE=quick ;;
  *) echo "usage: $0 [--rust | --quick]" >&2; exit 2 ;;
esac
RUST_ONLY=""
[ "$MODE" != all ] && RUST_ONLY=1

# Stage times: `stage NAME` starts one (and ends the one before), `stage_end` ends it. The table
# goes out on exit, whatever the exit: a failed run says where its time went too.
STAGES=()
STAGE_NAME=""
STAGE_T0=0
RUN_T0=$SECONDS
BACKGROUND=()
stage_end() {
  [ -n "$STAGE_NAME" ] || return 0
  STAGES+=("$(printf '%7d s  %s' $((SECONDS - STAGE_T0)) "$STAGE_NAME")")
  echo "-- $STAGE_NAME: $((SECONDS - STAGE_T0)) s"
  STAGE_NAME=""
}
stage() {
  stage_end
  STAGE_NAME=$1
  STAGE_T0=$SECONDS
  echo "== $1"
}
on_exit() {
  local rc=$? s
  if [ -n "$STAGE_NAME" ]; then
    STAGES+=("$(printf '%7d s  %s (FAILED, rc %s)' $((SECONDS - STAGE_T0)) "$STAGE_NAME" "$rc")")
  fi
  if [ ${#BACKGROUND[@]} -gt 0 ]; then
    for s in "${BACKGROUND[@]}"; do kill -- "-$s" 2>/dev/null || true; done
  fi
  echo
  echo "== stage times (./scripts/test.sh $MODE; wall, compiles and waits included)"
  for s in "${STAGES[@]}"; do echo "$s"; done
  printf '%7d s  total (%d min %d s), rc %s\n' $((SECONDS - RUN_T0)) $(((SECONDS - RUN_T0) / 60)) $(((SECONDS - RUN_T0) % 60)) "$rc"
}
trap on_exit EXIT

stage "prerequisites (Debian packages when missing)"
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
# compares with). --rust and --quick skip all of this: they run no cp_* test and build no image.
if [ -z "$RUST_ONLY" ]; then
  scripts/control-plane.sh prereqs
  CP_BUILD_LOG="$(mktemp -t control-plane-build.XXXXXX)"
  setsid scripts/control-plane.sh build > "$CP_BUILD_LOG" 2>&1 < /dev/null &
  CP_BUILD=$!
  # The image's static release binary and crane (scripts/image.sh; the real-node tests and
  # check-image.sh use them) build beside it, at the lowest priority, so they cost the suite only
  # the CPU its tests leave idle. If this fails, the tests that need it build it again and fail
  # loudly there. It cannot share the test build's target directory: its RUSTFLAGS
  # (+crt-static) and its features (no dev-dependencies unify them) differ, so every crate
  # would compile again anyway, and the shared lock would hold the tests up behind it.
  IMAGE_BUILD_LOG="$(mktemp -t image-build.XXXXXX)"
  # (setsid gives it an autogroup of its own, which the kernel would give an equal share of the
  # CPU whatever the nice values inside: the group's own priority is lowered first.)
  setsid nice -n 19 bash -c 'echo 19 > /proc/self/autogroup 2>/dev/null || true; scripts/image.sh binary && scripts/image.sh crane' > "$IMAGE_BUILD_LOG" 2>&1 < /dev/null &
  IMAGE_BUILD=$!
  BACKGROUND=("$CP_BUILD" "$IMAGE_BUILD")
fi

# Every test runs on the release build, the one that ships: the model check and the benchmark
# need it anyway, and one build of the dependency tree (with the dev-dependencies' features)
# instead of two, debug and release, saves a fresh machine about a quarter of an hour
# (docs/development.md). `cargo test` without --release works as well, for the dev loop.
# Every test binary of the run in one cargo call: cargo then builds them side by side (the
# library's unit tests, the binary, the suite, the model, the benchmark) where three calls one
# after the other each ended on a tail of one crate compiling alone.
TARGETS=(--lib --bins --test suite --test model)
[ "$MODE" = quick ] || TARGETS+=(--benches)
stage "build: the release test binaries (cargo test --no-run ${TARGETS[*]})"
cargo test --locked --release --no-run "${TARGETS[@]}"

if [ "$MODE" = quick ]; then
  stage "cargo test --release: unit tests and the suite on Redis (no cp_*, no mixed_versions)"
  cargo test --locked --release --lib --bins --test suite -- --test-threads="${TEST_THREADS:-2}" \
    --skip cp_ --skip mixed_versions::previous_release_builds_from_git \
    --skip mixed_versions::old_and_new_sidecars_share_a_lease_through_handovers_and_crashes
  # The model's searches that take seconds; the four that take a minute or more each (the
  # attestation and pause on-checks, the random walks) run in the full command.
  stage "cargo test --release --test model (quick checks)"
  cargo test --locked --release --test model -- --test-threads=1 \
    --skip fresh_follower_attestation_check_on --skip pause_needs_answer_time_deadline \
    --skip three_sidecars_random_walks --skip hazard_bounds_random_walks
  stage_end
  echo "== the quick checks passed (--quick: the full command also runs the mixed-version, Valkey and control-plane tests, the whole model check and the check scripts)"
  exit 0
fi

# The previous release's binary, built from git once (cached in target/previous-*) with this
# tree's dependencies, before the suite: its own cargo call takes the target directory's lock,
# so it cannot build beside a running `cargo test`.
stage "the previous release's binary (tests/suite/mixed_versions.rs; built from git once, cached in target/previous-*)"
cargo test --locked --release --test suite -- --exact mixed_versions::previous_release_builds_from_git

stage "cargo test --release (unit + integration; real redis-server processes, real binary, real signals)"
cargo test --locked --release --lib --bins --test suite --benches -- --test-threads="${TEST_THREADS:-2}" --skip cp_

# Valkey beside Redis (docs/operating/which-redis.md): the election, handover, crash, clock-jump
# and fault-schedule tests again, on Valkey 8.1 nodes, then on mixed trios (Redis, Valkey,
# Redis). scripts/valkey.sh fetches valkey-server once (built without TLS: TLS is tested on
# Redis only).
stage "valkey-server (scripts/valkey.sh)"
VALKEY_SERVER="$(scripts/valkey.sh)"
export VALKEY_SERVER
for server in valkey mixed; do
  stage "cargo test --release on $server nodes (TEST_SERVER=$server): election, handover, crash, clock jumps, fault schedule"
  TEST_SERVER=$server cargo test --locked --release --test suite -- --test-threads="${TEST_THREADS:-2}" \
    election:: fresh_handover:: safety_clock_jump:: fault_schedule::
done

# The model check (tests/model.rs, docs/model.md) runs on its own, one check at a time (a few
# minutes; unoptimized it would be about five times slower, so a debug build lists its checks as
# ignored).
stage "cargo test --release --test model (stateright model check: each hazard off and on; S1, S2, the release proof's invariant)"
cargo test --locked --release --test model -- --test-threads=1

if [ "$MODE" = rust ]; then
  stage_end
  echo "== the Rust tests passed (--rust: no control-plane build, no image, no cp_* tests, no check scripts)"
  exit 0
fi

# The check scripts that need nothing from the control-plane build run next, while a cold Go build
# may still be going (on a fresh machine it is the longest step): the CPU-heavy release builds
# here overlap it instead of waiting for it. check-packaging.sh runs the helm that build makes.
# check-bench.sh is the benchmark's smoke (every section's code once, no figures kept): the
# figures are scripts/bench.sh's. Those that do not need the image run first, while its
# background build goes on at the lowest priority.
shopt -s nullglob
for check in scripts/check-*.sh; do
  case "$check" in scripts/check-packaging.sh | scripts/check-image.sh) continue ;; esac
  stage "$check"
  bash "$check"
done

# From here on the foreground needs the image's binary (check-image.sh, the real-node tests). A
# background build still running at the lowest priority would hold the foreground up behind it
# (cargo's lock on target/static) while getting only the CPU that others leave: it is raised to
# normal priority first (its own autogroup and its processes), then waited for.
stage "waiting for the image's static binary and crane (background build; log $IMAGE_BUILD_LOG)"
if kill -0 "$IMAGE_BUILD" 2>/dev/null; then
  echo 0 > "/proc/$IMAGE_BUILD/autogroup" 2>/dev/null || true
  renice -n 0 -g "$IMAGE_BUILD" > /dev/null 2>&1 || true
fi
wait "$IMAGE_BUILD" || echo "-- the image's background build failed (log $IMAGE_BUILD_LOG); check-image.sh and the real-node tests build it again" >&2
BACKGROUND=("$CP_BUILD")
stage "scripts/check-image.sh"
bash scripts/check-image.sh

stage "waiting for the control-plane build (scripts/control-plane.sh build; log $CP_BUILD_LOG)"
if ! wait "$CP_BUILD"; then
  cat "$CP_BUILD_LOG" >&2
  echo "test.sh: scripts/control-plane.sh build failed (its log is above). The control-plane tests" \
    "need Go 1.26 and the Go module proxy (install Go from https://go.dev/dl/, or put it in" \
    "/usr/local/go/bin) and, for a cold build, about 6.6 GB free for the Go caches (GOCACHE," \
    "GOMODCACHE) and 0.4 GB for the binaries; a 'no space left on device' in the log is the latter." >&2
  exit 1
fi
BACKGROUND=()
echo "-- control-plane binaries: $(tail -n 1 "$CP_BUILD_LOG")"
stage "cargo test: the real control plane (tests/suite/control_plane*.rs; one control plane at a time)"
cargo test --locked --release --test suite -- --test-threads=1 cp_

stage "scripts/check-packaging.sh"
bash scripts/check-packaging.sh
stage_end
echo "== all tests passed"

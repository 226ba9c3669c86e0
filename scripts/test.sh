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

# Stage times: `stage NAME` starts one (and ends the one before), `stage_end` ends it; the lanes'
# stages (below) append theirs to one file. The table goes out on exit, whatever the exit: a
# failed run says where its time went too.
LANES_DIR="$(mktemp -d -t test-lanes.XXXXXX)"
TIMES="$LANES_DIR/times"
: > "$TIMES"
STAGE_NAME=""
STAGE_T0=0
RUN_T0=$SECONDS
BACKGROUND=()
stage_end() {
  [ -n "$STAGE_NAME" ] || return 0
  printf '%7d s  %s\n' $((SECONDS - STAGE_T0)) "$STAGE_NAME" >> "$TIMES"
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
    printf '%7d s  %s (FAILED, rc %s)\n' $((SECONDS - STAGE_T0)) "$STAGE_NAME" "$rc" >> "$TIMES"
  fi
  if [ ${#BACKGROUND[@]} -gt 0 ]; then
    for s in "${BACKGROUND[@]}"; do kill -- "-$s" 2>/dev/null || true; done
  fi
  echo
  echo "== stage times (./scripts/test.sh $MODE; wall, compiles and waits included; [lane] stages ran side by side)"
  cat "$TIMES"
  printf '%7d s  total (%d min %d s), rc %s\n' $((SECONDS - RUN_T0)) $(((SECONDS - RUN_T0) / 60)) $(((SECONDS - RUN_T0) % 60)) "$rc"
}
trap on_exit EXIT

# Lanes: after the build, groups of stages that share nothing run side by side, each its stages
# one after the other, so that the tests that mostly wait on real time (the suite, the control
# plane) overlap the ones that keep a core busy (the model check, the benchmark's smoke). A lane
# in the background writes its output to $LANES_DIR/NAME.log (printed whole if it fails) and its
# exit code to NAME.rc; `lane_stage` times each of its stages into the same table.
lane_stage() {
  local lane=$1 name=$2 t0=$SECONDS rc=0
  shift 2
  echo "== [$lane] $name"
  "$@" || rc=$?
  if [ "$rc" = 0 ]; then
    printf '%7d s  [%s] %s\n' $((SECONDS - t0)) "$lane" "$name" >> "$TIMES"
  else
    printf '%7d s  [%s] %s (FAILED, rc %s)\n' $((SECONDS - t0)) "$lane" "$name" "$rc" >> "$TIMES"
  fi
  echo "-- [$lane] $name: $((SECONDS - t0)) s, rc $rc"
  return "$rc"
}
# lane NAME FUNCTION: FUNCTION in the background, in a process group of its own (so that a
# failure elsewhere stops all of it).
LANES=()
lane() {
  local name=$1 fn=$2
  setsid bash -c "$(declare -f lane_stage raise_build wait_for_build wait_for_builds set_lane_priority "$fn"; declare -p NODE_TESTS NODE_HOST_TEST SKIP_NODE_TESTS MODEL_SLOW_SKIPS); set -uo pipefail; export TIMES LANES_DIR; rc=0; $fn || rc=\$?; echo \$rc > '$LANES_DIR/$name.rc'; exit \$rc" \
    > "$LANES_DIR/$name.log" 2>&1 < /dev/null &
  BACKGROUND+=("$!")
  LANES+=("$name")
  echo "-- lane [$name] started in the background (log $LANES_DIR/$name.log)"
}
# raise_build NAME: a background build started at the lowest priority (its pid in
# $LANES_DIR/NAME.pid) back to normal, its autogroup and its processes, unless it is done.
# .ci/run starts the Go build before this script (CI_CONTROL_PLANE_BUILD_PID; this script's own
# call then waits for it under the build lock): that one is raised with ours.
raise_build() {
  local pid pids
  pids="$(cat "$LANES_DIR/$1.pid")"
  if [ "$1" = control-plane-build ] && [ -n "${CI_CONTROL_PLANE_BUILD_PID:-}" ]; then
    pids="$pids $CI_CONTROL_PLANE_BUILD_PID"
  fi
  if [ ! -e "$LANES_DIR/$1.rc" ]; then
    echo "-- raising the background build $1 to normal priority (the suites are done)"
    for pid in $pids; do
      echo 0 > "/proc/$pid/autogroup" 2>/dev/null || true
      renice -n 0 -g "$pid" > /dev/null 2>&1 || true
    done
  fi
}
# wait_for_build NAME: waits for a background build's exit code ($LANES_DIR/NAME.rc).
wait_for_build() {
  while [ ! -e "$LANES_DIR/$1.rc" ]; do sleep 2; done
  return "$(cat "$LANES_DIR/$1.rc")"
}
# wait_for_builds: both background builds' ends, whatever their outcome (the lanes that need
# them report a failure).
wait_for_builds() {
  wait_for_build control-plane-build || true
  wait_for_build image-build || true
}
# wait_lanes: every lane's end; prints a failed lane's log whole, and fails if any failed.
wait_lanes() {
  local name failed=""
  for name in "${LANES[@]}"; do
    while [ ! -e "$LANES_DIR/$name.rc" ]; do sleep 2; done
    if [ "$(cat "$LANES_DIR/$name.rc")" = 0 ]; then
      echo "-- lane [$name] passed: $(grep -cE '^test result: ok' "$LANES_DIR/$name.log" || true) test binaries ok (log $LANES_DIR/$name.log)"
    else
      echo "== lane [$name] FAILED (rc $(cat "$LANES_DIR/$name.rc")); its log:"
      cat "$LANES_DIR/$name.log"
      failed="$failed $name"
    fi
  done
  if [ -n "$failed" ]; then
    echo "test.sh: lanes failed:$failed (their logs are above)" >&2
    return 1
  fi
}

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
# first run), and those tests run last. No Go, or a failed build, fails the run loudly. It runs at
# a low priority (nice 10, its autogroup too) until the foreground's suites are done: at an equal
# share it took half the CPU from the test build, which then took 1 682 s instead of about 600 (a
# cold run, 2026-11-29), and the tests could start only after both. So it takes mostly the CPU
# the test build and the suites leave idle, ahead of the image's build (nice 19: the real-node
# lane needs both, the control-plane lane only this one), and the lanes raise both to normal once
# the suites are done (raise_build).
# The real node's Debian packages now, before any test reads the host's state (a package's own
# service, where one starts, is then part of the "before" that cp_node_down_leaves_nothing_behind
# compares with). --rust and --quick skip all of this: they run no cp_* test and build no image.
if [ -z "$RUST_ONLY" ]; then
  scripts/control-plane.sh prereqs
  # Each background build writes its exit code to $LANES_DIR/NAME.rc (wait_for_build).
  CP_BUILD_LOG="$LANES_DIR/control-plane-build.log"
  # (setsid gives it an autogroup of its own, which the kernel would give an equal share of the
  # CPU whatever the nice values inside: the group's own priority is lowered first.)
  setsid nice -n 10 bash -c "echo 10 > /proc/self/autogroup 2>/dev/null || true; source scripts/lib.sh; scripts/control-plane.sh build && { ensure_go_tool \"\${ACTIONLINT[@]}\" && ensure_go_tool \"\${HELM_DOCS[@]}\"; } > /dev/null; echo \$? > '$LANES_DIR/control-plane-build.rc'" > "$CP_BUILD_LOG" 2>&1 < /dev/null &
  echo "$!" > "$LANES_DIR/control-plane-build.pid"
  BACKGROUND+=("$!")
  # The image's static release binary and crane (scripts/image.sh; the real-node tests and
  # check-image.sh use them) build beside it, at the lowest priority, so they cost the suite only
  # the CPU its tests leave idle. If this fails, the tests that need it build it again and fail
  # loudly there. It cannot share the test build's target directory: its RUSTFLAGS
  # (+crt-static) and its features (no dev-dependencies unify them: serde, serde_json, tokio,
  # hyper-util and a few more resolve with other features, and everything above them) differ,
  # so every crate would compile again anyway, and the shared lock would hold the tests up.
  IMAGE_BUILD_LOG="$LANES_DIR/image-build.log"
  setsid nice -n 19 bash -c "echo 19 > /proc/self/autogroup 2>/dev/null || true; scripts/image.sh binary && scripts/image.sh crane; echo \$? > '$LANES_DIR/image-build.rc'" > "$IMAGE_BUILD_LOG" 2>&1 < /dev/null &
  echo "$!" > "$LANES_DIR/image-build.pid"
  BACKGROUND+=("$!")
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
# The lanes below run the model's and the suite's executables themselves, not through cargo: a
# cargo call waits for the target directory's lock, which the previous release's build holds for
# minutes on a fresh machine.
cargo test --locked --release --no-run "${TARGETS[@]}" --message-format=json-render-diagnostics > "$LANES_DIR/build.json"
test_binary() {
  jq -r --arg name "$1" 'select(.reason == "compiler-artifact" and .profile.test and .target.name == $name) | .executable' \
    "$LANES_DIR/build.json" | tail -n 1
}
MODEL_BIN="$(test_binary model)"
SUITE_BIN="$(test_binary suite)"
[ -x "$MODEL_BIN" ] && [ -x "$SUITE_BIN" ] || { echo "test.sh: cargo reported no model or suite test executable (see $LANES_DIR/build.json)" >&2; exit 1; }
export MODEL_BIN SUITE_BIN

# From here on, lanes (see `lane` above), in two phases. Beside the foreground's suites (the
# previous release, the suite on Redis, Valkey and mixed trios) only the background builds run
# (and the model check, with --rust and --quick, which build nothing). Once they are done, three
# lanes run side by side: the control plane with the stand-in kubelet, the real node, and the
# check scripts (after both background builds, below the other two in priority); the model runs
# once both builds are done, at the lowest priority. The control-plane
# tests wait for the suites because their rollouts against real controllers, beside a suite of
# sidecars and redis-servers and every check script, moved a rollout's leadership twice (at a
# load average of 30, 2026-11-29). The real-node tests get a lane of their own (containerd and a
# kubelet on this host: one node at a time, and cp_node_down_leaves_nothing_behind compares the
# whole host before and after); the stand-in ones each run their own control plane on free
# loopback ports, none of which that comparison reads. A test that starts the real node is named
# cp_docs_*, cp_node_* or cp_real_node_* (tests/suite/lanes.rs holds every test to that).
NODE_TESTS=(cp_docs_ cp_node_ cp_real_node_)
# --quick's model checks: all but these (a minute or more each; the full command runs the pause
# check and the three-sidecar walks, and the other two run outside CI: docs/model.md, "Outside CI").
MODEL_SLOW_SKIPS=(--skip fresh_follower_attestation_check_on --skip pause_needs_answer_time_deadline
  --skip three_sidecars_random_walks --skip hazard_bounds_random_walks)
SKIP_NODE_TESTS=(--skip cp_docs_ --skip cp_node_ --skip cp_real_node_)
export LANES_DIR TIMES
export TEST_THREADS="${TEST_THREADS:-2}"

# Where a fresh machine's time goes (docs/results/test-command.md, run 4): the real-node lane can
# start only once the Go build and the image's build are done, and its tests then wait on real
# time, with the CPU mostly idle. Work that keeps a core busy but needs neither build (the model,
# the benchmark's smoke, Prometheus's checks) therefore runs below the builds in priority: before
# they are done it takes only the CPU they leave, and the rest of it runs in that idle tail.
# set_lane_priority N: this lane's autogroup (setsid gave it one; the kernel shares the CPU
# between autogroups by their own nice value, whatever the nice values inside them) at nice N.
set_lane_priority() {
  echo "$1" > /proc/self/autogroup 2>/dev/null || true
  renice -n "$1" -p $$ > /dev/null 2>&1 || true
}
# The model check (tests/model.rs, docs/model.md), one check at a time (unoptimized it would be
# about five times slower, so a debug build lists its checks as ignored): one busy core, beside
# the suites (which hold to three, issue 52) with --rust and --quick, after the builds at the
# lowest priority in the full run.
lane_checks() {
  if [ "$MODE" = quick ]; then
    # The model's searches that take seconds (MODEL_SLOW_SKIPS above).
    lane_stage checks "cargo test --release --test model (quick checks)" \
      "$MODEL_BIN" --test-threads=1 "${MODEL_SLOW_SKIPS[@]}"
    return
  fi
  if [ "$MODE" = all ]; then
    # On a fresh machine the builds need every CPU second the suites leave (a cold run with the
    # model beside them at the lowest priority still took a share from the image's build): the
    # model starts once both are done, in the real node's idle tail.
    lane_stage checks "waiting for the background builds (the Go build and the image's)" wait_for_builds
    set_lane_priority 19
  fi
  lane_stage checks "cargo test --release --test model (stateright model check: each hazard off and on; S1, S2, the release proof's invariant)" \
    "$MODEL_BIN" --test-threads=1
}
# The check scripts (check-image.sh checks the image's archive with the real tools;
# check-bench.sh is the benchmark's smoke: every section's code once, no figures kept, the
# figures are scripts/bench.sh's; check-observability.sh a real Prometheus; check-packaging.sh
# the chart and manifests, with the Go build's helm, actionlint and helm-docs), after the suites
# and after both builds: they start when the last two lanes can, and run beside them one step
# below in priority (nice 10), in the time those lanes' tests spend waiting.
lane_scripts() {
  lane_stage scripts "waiting for the foreground's suites (see below)" wait_for_build foreground || return
  lane_stage scripts "waiting for the background builds (the Go build and the image's)" wait_for_builds
  set_lane_priority 10
  local check
  for check in scripts/check-*.sh; do
    lane_stage scripts "$check" bash "$check" || return
  done
}
# The control plane with the stand-in kubelet (tests/suite/control_plane.rs,
# control_plane_rollout.rs), as soon as the Go build is done.
lane_control_plane() {
  lane_stage control-plane "waiting for the foreground's suites (see below)" wait_for_build foreground || return
  raise_build control-plane-build
  lane_stage control-plane "waiting for the control-plane build (scripts/control-plane.sh build; log $CP_BUILD_LOG)" \
    wait_for_build control-plane-build || { cat "$CP_BUILD_LOG"; echo "test.sh: $CP_BUILD_FAILED" >&2; return 1; }
  lane_stage control-plane "cargo test: the control plane with the stand-in kubelet (cp_*, not the real node's)" \
    "$SUITE_BIN" --test-threads=1 cp_ "${SKIP_NODE_TESTS[@]}"
}
# The real node (tests/suite/control_plane_node.rs, control_plane_docs.rs): the host check that
# runs no image of ours as soon as the Go build is done, the rest after the image.
NODE_HOST_TEST=control_plane_node::cp_node_down_leaves_nothing_behind
lane_node() {
  lane_stage node "waiting for the foreground's suites (see below)" wait_for_build foreground || return
  # The image's build and the Go build run at the lowest priority until the suites are done
  # (they would take a core from them); from here on they are what this lane waits for: raised
  # to normal priority (their own autogroups and their processes), then waited for.
  raise_build image-build
  raise_build control-plane-build
  lane_stage node "waiting for the control-plane build (scripts/control-plane.sh build; log $CP_BUILD_LOG)" \
    wait_for_build control-plane-build || { cat "$CP_BUILD_LOG"; echo "test.sh: $CP_BUILD_FAILED" >&2; return 1; }
  lane_stage node "cargo test: the real node's host check ($NODE_HOST_TEST; busybox only, no image of ours)" \
    "$SUITE_BIN" --test-threads=1 --exact "$NODE_HOST_TEST" || return
  lane_stage node "waiting for the image's static binary and crane (background build; log $IMAGE_BUILD_LOG)" \
    wait_for_build image-build \
    || echo "-- the image's background build failed (log $IMAGE_BUILD_LOG); the real-node tests and check-image.sh build it again" >&2
  lane_stage node "cargo test: the real node (cp_docs_*, cp_node_*, cp_real_node_*; one node at a time)" \
    "$SUITE_BIN" --test-threads=1 "${NODE_TESTS[@]}" --skip "$NODE_HOST_TEST"
}
CP_BUILD_FAILED="scripts/control-plane.sh build failed (its log is above). The control-plane tests need Go 1.26 and the Go module proxy (install Go from https://go.dev/dl/, or put it in /usr/local/go/bin) and, for a cold build, about 6.6 GB free for the Go caches (GOCACHE, GOMODCACHE) and 0.4 GB for the binaries; a 'no space left on device' in the log is the latter."
export MODE CP_BUILD_LOG="${CP_BUILD_LOG:-}" IMAGE_BUILD_LOG="${IMAGE_BUILD_LOG:-}" CP_BUILD_FAILED

lane checks lane_checks
if [ "$MODE" = all ]; then
  lane control-plane lane_control_plane
  lane node lane_node
  lane scripts lane_scripts
fi

# In the foreground: the previous release's binary, built from git once (cached in
# target/previous-*) with this tree's dependencies, before the suite (its own cargo call takes
# the target directory's lock: the lanes' cargo calls wait for it, they build nothing); then the
# suite on Redis, and again on Valkey and on mixed trios.
if [ "$MODE" = quick ]; then
  stage "cargo test --release: unit tests and the suite on Redis (no cp_*, no mixed_versions)"
  cargo test --locked --release --lib --bins --test suite -- --test-threads="$TEST_THREADS" \
    --skip cp_ --skip mixed_versions::previous_release_builds_from_git \
    --skip mixed_versions::old_and_new_sidecars_share_a_lease_through_handovers_and_crashes
  stage "waiting for the lanes: ${LANES[*]}"
  wait_lanes
  stage_end
  BACKGROUND=()
  echo "== the quick checks passed (--quick: the full command also runs the mixed-version, Valkey and control-plane tests, the whole model check and the check scripts)"
  exit 0
fi

stage "the previous release's binary (tests/suite/mixed_versions.rs; built from git once, cached in target/previous-*)"
cargo test --locked --release --test suite -- --exact mixed_versions::previous_release_builds_from_git

stage "cargo test --release (unit + integration; real redis-server processes, real binary, real signals)"
cargo test --locked --release --lib --bins --test suite --benches -- --test-threads="$TEST_THREADS" --skip cp_

# Valkey beside Redis (docs/operating/which-redis.md): the election, handover, crash, clock-jump
# and fault-schedule tests again, on Valkey 8.1 nodes, then on mixed trios (Redis, Valkey,
# Redis). scripts/valkey.sh fetches valkey-server once (built without TLS: TLS is tested on
# Redis only).
stage "valkey-server (scripts/valkey.sh)"
VALKEY_SERVER="$(scripts/valkey.sh)"
export VALKEY_SERVER
for server in valkey mixed; do
  stage "cargo test --release on $server nodes (TEST_SERVER=$server): election, handover, crash, clock jumps, fault schedule"
  TEST_SERVER=$server cargo test --locked --release --test suite -- --test-threads="$TEST_THREADS" \
    election:: fresh_handover:: safety_clock_jump:: fault_schedule::
done

echo 0 > "$LANES_DIR/foreground.rc"
stage "waiting for the lanes: ${LANES[*]}"
wait_lanes
stage_end
BACKGROUND=()
if [ "$MODE" = rust ]; then
  echo "== the Rust tests passed (--rust: no control-plane build, no image, no cp_* tests, no check scripts)"
else
  echo "== all tests passed"
fi

#!/usr/bin/env bash
# The benchmark suite (docs/performance.md): builds the release binary and the bench target,
# starts real redis-servers on loopback ports, and prints every figure next to its target as
# met / not met. Timing never fails it; it exits non-zero only if the benchmark itself breaks.
#
#   ./scripts/bench.sh                  full run (about 5 minutes)
#   ./scripts/bench.sh --quick          few iterations
#   ./scripts/bench.sh --smoke          every section's code once, figures meaningless (the test
#                                       command's smoke: scripts/check-bench.sh)
#   ./scripts/bench.sh --json           the figures as JSON on stdout (progress on stderr)
#   ./scripts/bench.sh --only acquire,tls,handover,restart,failover,rollout,load,fanout,footprint,fleet,binary,endpoints,real-node
#
# The results file: every run writes its figures into docs/results/figures.json and
# docs/results/figures.md (the page docs/performance.md includes; the README's figures are
# checked against it by tests/suite/docs_figures.rs). A run replaces only the sections it
# measured: `--only handover` rewrites the handover rows, and every other row keeps the run
# (date, commit, machine, load) that measured it. `--quick` and `--smoke` never write docs/: their merged
# copy goes to target/bench-results/ ($CARGO_TARGET_DIR/bench-results/). The control-plane parts
# below (endpoints, rollout's real rolling updates, real-node) print their figures only; the
# file keeps their last recorded figures under the run that measured them. Commit the file
# after a run; the run names the commit it measured ("+ local changes" when the tree differed).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_apt redis-server redis-server
# Optional: wrk drives /leader (else a built-in load generator does); strip(1) gives the
# stripped binary size. A subshell, because ensure_apt exits when it cannot install.
(ensure_apt wrk wrk) || echo "-- wrk unavailable: /leader load uses the built-in load generator" >&2
(ensure_apt strip binutils) || echo "-- strip unavailable: no stripped binary size" >&2

# `cargo bench` builds with the release profile, the sidecar binary included
# (target/release/redlock-elector), and passes `--bench`, which the harness ignores.
cargo bench --locked --bench bench -- "$@"

# The latency a user's clients see: from a handover (the new leader's /leader version change) to
# the leader Service's EndpointSlice listing only the new leader's pod IP, on the real control
# plane (Deployment and EndpointSlice controllers; 20 handovers; the test in
# tests/suite/control_plane_rollout.rs, optimized here). Full runs only, or `--only endpoints`; figures
# on stderr so that --json stays clean. CI runs the same test unoptimized.
quick=0 only=""
prev=""
for a in "$@"; do
  { [ "$a" = "--quick" ] || [ "$a" = "--smoke" ]; } && quick=1
  [ "$prev" = "--only" ] && only=",$a,"
  prev="$a"
done
# --against compares the single-lease sections only: no control-plane section.
for a in "$@"; do [[ "$a" == --against* ]] && only=",against,"; done
if { [ -z "$only" ] && [ "$quick" = 0 ]; } || [[ "$only" == *",endpoints,"* ]]; then
  echo "== EndpointSlice switch after a handover, real control plane (20 handovers)" >&2
  scripts/control-plane.sh build > /dev/null
  cargo test --locked --release --test suite -- --nocapture --test-threads=1 \
    cp_the_leader_services_endpoints_follow_handovers 2>&1 | grep -E '^\[figure\]|^test result' >&2
fi
# Real rolling updates for comparison with `prefer: newest` (which CI checks): `prefer: none`, and
# `newest` without `minReadySeconds`; 5 rollouts each on the real Deployment controller. Full
# runs only, or `--only rollout` (beside the scripted rollouts above).
if { [ -z "$only" ] && [ "$quick" = 0 ]; } || [[ "$only" == *",rollout,"* ]]; then
  echo "== Real rolling updates: prefer none, and newest without minReadySeconds (5 rollouts each)" >&2
  scripts/control-plane.sh build > /dev/null
  cargo test --locked --release --test suite -- --ignored --nocapture --test-threads=1 \
    cp_real_rolling_updates_ 2>&1 | grep -E '^\[figure\]|^test result' >&2
fi
# On the real node (scripts/control-plane.sh up --node: containerd, kubelet, kube-proxy, the
# sidecar from the image scripts/image.sh builds): the leader Service's endpoints on the label
# route and on the sidecar route side by side, REAL_NODE_ROUNDS (default 20) handovers of each
# kind (step-down, SIGTERM, kubectl delete pod, rollout restart) on each: term start -> the slice
# lists only the new leader, the time it lists nobody, term start -> the cluster IP answers from
# the new leader (tests/suite/control_plane_traffic.rs). Full runs only, or `--only real-node`;
# needs root.
if { [ -z "$only" ] && [ "$quick" = 0 ]; } || [[ "$only" == *",real-node,"* ]]; then
  echo "== Traffic follows the leader, real node: sidecar route (${REAL_NODE_ROUNDS:-20} rounds of 4 kinds) and label route (half as many, or REAL_NODE_LABEL_ROUNDS)" >&2
  scripts/control-plane.sh build > /dev/null
  cargo test --locked --release --test suite -- --ignored --nocapture --test-threads=1 \
    cp_real_node_traffic_follows_the_leader 2>&1 | grep -E '^\[figure\]|^test result' >&2
  # lease.followApp on the real node: an exec readiness probe fails, every app fails, an app
  # crash-loops (the test CI runs too; its figures: probe -> not ready -> handover, the Service).
  echo "== Leadership follows the app, real node (readiness probe, crash loop)" >&2
  cargo test --locked --release --test suite -- --nocapture --test-threads=1 \
    cp_real_node_leadership_follows_the_app 2>&1 | grep -E '^\[figure\]|^test result' >&2
fi

#!/usr/bin/env bash
# The test command's benchmark smoke: every section of the benchmark once, with a tenth of
# --quick's iterations and 1-second windows (benches/bench/args.rs, --smoke), so that a broken
# benchmark (a sidecar that never leads, a section that panics) fails the tests. Figures are
# printed but mean nothing and are never written to docs/: the figures are scripts/bench.sh's
# (a full run, or --quick), and nothing is asserted on timing (see docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./scripts/bench.sh --smoke

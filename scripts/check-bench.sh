#!/usr/bin/env bash
# CI: run the benchmark suite once in quick mode. Figures are printed; nothing is asserted on
# timing, so this fails only when the benchmark itself breaks (see docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
exec ./scripts/bench.sh --quick

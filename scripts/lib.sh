# Shared shell helpers for the scripts in this folder (sourced, not run).

# apt_package PACKAGE: install a Debian package non-interactively, without recommends (prometheus
# would pull node-exporter), as root or through `sudo -n`; `apt-get update` runs once per script.
# Fails with the fix when it can't. The test command's lanes run check scripts side by side: apt
# waits for another's dpkg lock instead of failing on it.
_apt_updated=""
apt_package() {
  local pkg=$1 sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo -n"; else
      echo "error: $pkg is needed and we are not root; install it with: sudo apt-get install -y $pkg" >&2; exit 1
    fi
  fi
  command -v apt-get >/dev/null 2>&1 || { echo "error: $pkg is needed and there is no apt-get; install it by hand" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "$_apt_updated" ]; then
    $sudo apt-get -o DPkg::Lock::Timeout=900 update -qq >/dev/null || { echo "error: apt-get update failed; install $pkg by hand: apt-get install -y $pkg" >&2; exit 1; }
    _apt_updated=1
  fi
  $sudo apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "$pkg" >/dev/null </dev/null || { echo "error: apt-get install $pkg failed" >&2; exit 1; }
}

# ensure_apt CMD PACKAGE: install PACKAGE when the program CMD is missing. `type -P` looks for
# an executable file only, so a shell builtin of the same name (kill) does not count.
ensure_apt() {
  local cmd=$1 pkg=$2
  if type -P "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || [ -x "/usr/bin/$cmd" ]; then return 0; fi
  echo "-- $cmd not found: installing Debian package $pkg"
  apt_package "$pkg"
  type -P "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || { echo "error: $pkg installed but $cmd is still not on PATH" >&2; exit 1; }
}

# ensure_venv VENV REQUIREMENTS STAMP [PIP_ARGS...]: a Python venv at VENV (python3-venv installed
# when Debian's python3 lacks it) with REQUIREMENTS installed; reinstalls only when the file
# changed (its sha256 is kept in VENV/.STAMP.sha256). PIP_ARGS, if any, are installed first.
ensure_venv() {
  local venv=$1 reqs=$2 stamp="$1/.$3.sha256" want fd
  shift 3
  # Two check scripts of the test command's lanes may share one venv: one creates it at a time.
  exec {fd}>"$venv.lock"
  flock "$fd"
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv" 2>/dev/null || { rm -rf "$venv"; apt_package python3-venv; python3 -m venv "$venv"; } \
      || { echo "error: python3 -m venv failed (on Debian: apt-get install -y python3-venv)" >&2; exit 1; }
  fi
  want="$(sha256sum "$reqs" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    if [ $# -gt 0 ]; then
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" \
        || { echo "error: pip install $* failed" >&2; exit 1; }
    fi
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$reqs" \
      || { echo "error: pip install -r $reqs failed" >&2; exit 1; }
    echo "$want" > "$stamp"
  fi
  exec {fd}>&-
}

# The Go programs scripts/check-packaging.sh runs, pinned here: scripts/test.sh builds them
# beside the control plane's, in the background, so that a cold run's last stage does not wait
# for them (ensure_go_tool "${ACTIONLINT[@]}").
ACTIONLINT=(actionlint github.com/rhysd/actionlint/cmd/actionlint v1.7.12)
HELM_DOCS=(helm-docs github.com/norwoodj/helm-docs/cmd/helm-docs v1.14.2)

# ensure_go_tool NAME PACKAGE VERSION: prints the path of the Go program NAME, built from PACKAGE at
# exactly VERSION (`go install PACKAGE@VERSION`) into its own cache directory
# ${REDLOCK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/tools}/NAME-VERSION/, once;
# a lock makes concurrent callers wait for one build. Go is looked for on PATH, then in
# /usr/local/go/bin. Fails with the fix when it can't.
ensure_go_tool() {
  local name=$1 pkg=$2 version=$3 dir go start fd rc=0
  dir="${REDLOCK_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/redlock-elector/tools}/$name-$version"
  if [ -x "$dir/$name" ]; then echo "$dir/$name"; return 0; fi
  mkdir -p "$(dirname "$dir")"
  exec {fd}>"$dir.lock"
  flock "$fd"
  if [ ! -x "$dir/$name" ]; then
    go="$(command -v go || true)"
    if [ -z "$go" ] && [ -x /usr/local/go/bin/go ]; then go=/usr/local/go/bin/go; fi
    if [ -z "$go" ]; then
      echo "error: $name is built with Go and there is no go on PATH or in /usr/local/go/bin; install Go from https://go.dev/dl/" >&2
      rc=1
    else
      echo "-- $name $version not found: go install $pkg@$version into $dir" >&2
      start=$SECONDS
      rm -rf "$dir.tmp"
      if GOBIN="$dir.tmp" CGO_ENABLED=0 nice -n 10 "$go" install -trimpath -ldflags "-s -w" "$pkg@$version" >&2; then
        mkdir -p "$dir" && mv "$dir.tmp/$name" "$dir/$name"
        echo "-- built $name $version in $((SECONDS - start)) s" >&2
      else
        echo "error: go install $pkg@$version failed (see above); it needs the Go module proxy (GOPROXY)" >&2
        rc=1
      fi
      rm -rf "$dir.tmp"
    fi
  fi
  exec {fd}>&-
  [ "$rc" = 0 ] && echo "$dir/$name"
}

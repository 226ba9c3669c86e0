#!/usr/bin/env bash
# Demo: 3 local redis-server processes + 3 redlock-elector sidecars on loopback.
# Shows the election, kills the leader (SIGKILL) and shows the failover, then stops the new
# leader gracefully (SIGTERM) and shows the handover. Cleans up every process it started,
# also on Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_apt redis-server redis-server
ensure_apt curl curl

TTL=${DEMO_TTL:-2s}
RETRY=${DEMO_RETRY:-250ms}
# The ttl in ms (ms, s or m), for the waits below: each is derived from it, so that a longer
# DEMO_TTL does not time out.
case "$TTL" in
  *ms) TTL_MS=${TTL%ms} ;;
  *s) TTL_MS=$(( ${TTL%s} * 1000 )) ;;
  *m) TTL_MS=$(( ${TTL%m} * 60000 )) ;;
  *) echo "DEMO_TTL=$TTL: give it as 500ms, 2s or 1m" >&2; exit 2 ;;
esac
[[ "$TTL_MS" =~ ^[0-9]+$ ]] || { echo "DEMO_TTL=$TTL: a whole number of ms, s or m" >&2; exit 2; }
# First election: the fresh servers' quarantine (ttl + 1 s), then the clock watch (ttl + margin).
FIRST_MS=$(( 3 * TTL_MS + 5000 ))
# SIGKILL failover: the lease expires (ttl), then a follower's next attempt.
FAILOVER_MS=$(( 2 * TTL_MS + 5000 ))
# SIGTERM handover: milliseconds; the bound is for a loaded machine.
HANDOVER_MS=$(( TTL_MS + 5000 ))
echo "== building redlock-elector (release; the first build takes a few minutes, cargo shows its progress)"
cargo build --release --locked
BIN=target/release/redlock-elector

WORK=$(mktemp -d /tmp/redlock-elector-demo.XXXXXX)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
  echo "== cleaned up: every process this demo started is gone"
}
trap cleanup EXIT
trap 'echo; echo "interrupted"; exit 130' INT TERM

# A port nobody listens on (bash only: a fresh machine may lack python).
# Never the same port twice (the caller runs in this shell, so the set persists).
declare -A HANDED_OUT
PORT=0
free_port() {
  local p
  while :; do
    p=$(( 20000 + RANDOM % 12000 ))
    [[ -n "${HANDED_OUT[$p]:-}" ]] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then HANDED_OUT[$p]=1; PORT=$p; return; fi
  done
}

REDIS_URLS=()
for i in 1 2 3; do
  free_port; port=$PORT
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    >"$WORK/redis-$i.log" 2>&1 &
  PIDS+=($!)
  REDIS_URLS+=("--redis" "redis://127.0.0.1:$port")
  echo "redis-$i      127.0.0.1:$port (pid $!)"
done

declare -A API SIDECAR_PID
start_sidecar() {
  local name=$1 api ops
  free_port; api=$PORT; free_port; ops=$PORT
  "$BIN" --lease demo --identity "$name" --ttl "$TTL" --retry-every "$RETRY" "${REDIS_URLS[@]}" \
    --api-listen "127.0.0.1:$api" --ops-listen "127.0.0.1:$ops" --kubernetes false --log-format text \
    >"$WORK/$name.log" 2>&1 &
  SIDECAR_PID[$name]=$!
  PIDS+=($!)
  API[$name]=$api
  echo "sidecar $name  api http://127.0.0.1:$api/leader  metrics http://127.0.0.1:$ops/metrics (pid $!)"
}
for n in alpha bravo charlie; do start_sidecar "$n"; done

now_ms() { date +%s%3N; }
leader_of() { curl -s --max-time 1 "http://127.0.0.1:${API[$1]}/leader" || true; }
show() {
  for n in "$@"; do printf '  %-8s %s\n' "$n" "$(leader_of "$n")"; done
}
find_leader() {
  for n in "$@"; do
    if leader_of "$n" | grep -q '"is_leader":true'; then echo "$n"; return 0; fi
  done
  return 1
}
wait_leader() {
  local deadline=$(( $(now_ms) + $1 )); shift
  while [ "$(now_ms)" -lt "$deadline" ]; do
    if l=$(find_leader "$@"); then echo "$l"; return 0; fi
    sleep 0.005
  done
  return 1
}

echo
echo "== waiting for the first election (fresh Redis servers are quarantined for ttl + 1s, by design)"
L=$(wait_leader "$FIRST_MS" alpha bravo charlie) || { echo "no leader elected"; tail -n 20 "$WORK"/*.log; exit 1; }
echo "leader: $L"
sleep 0.5   # followers learn the holder's identity at their next attempt (retryEvery)
show alpha bravo charlie

REST=()
for n in alpha bravo charlie; do [ "$n" != "$L" ] && REST+=("$n"); done
echo
echo "== SIGKILL the leader ($L): the lease must expire (ttl $TTL) before another may lead"
t0=$(now_ms)
kill -9 "${SIDECAR_PID[$L]}"
wait "${SIDECAR_PID[$L]}" 2>/dev/null || true
L2=$(wait_leader "$FAILOVER_MS" "${REST[@]}") || { echo "no failover"; exit 1; }
echo "new leader: $L2 after $(( $(now_ms) - t0 )) ms"
show "${REST[@]}"

LAST=""
for n in "${REST[@]}"; do [ "$n" != "$L2" ] && LAST=$n; done
echo
echo "== SIGTERM the leader ($L2): it releases and notifies; handover takes milliseconds, not a ttl"
t0=$(now_ms)
kill -TERM "${SIDECAR_PID[$L2]}"
L3=$(wait_leader "$HANDOVER_MS" "$LAST") || { echo "no handover"; exit 1; }
echo "new leader: $L3 after $(( $(now_ms) - t0 )) ms"
wait "${SIDECAR_PID[$L2]}" && echo "$L2 exited with status 0"
show "$LAST"
echo
echo "== demo done"

#!/usr/bin/env bash
# Leadership from the redlock-elector sidecar with curl and jq.
#
#   leader.sh poll    # am I the leader? ask GET /leader twice a second
#   leader.sh watch   # the same by long-poll: GET /leader?wait=30s&version=N
#   leader.sh work    # run work only while leading; each write carries the fencing token
#   leader.sh leases  # several leases or shards: the set this replica leads, by long-poll
#                     # of GET /leases?wait=30s&version=N (one connection at a time)
#
# Each prints a line when leadership changes, `leader=true token=7` or `leader=false token=none`;
# `work` also prints `write token=7 n=1` for each (simulated) write; `leases` prints the leases it
# leads with their tokens, `leases=jobs-0:7,jobs-3:2`, or `leases=none`.
set -uo pipefail
SIDECAR=${REDLOCK_ELECTOR_URL:-http://127.0.0.1:4040}

# get_leader QUERY MAX_SECONDS: prints "is_leader token valid_for_ms version" (token "none" when
# not leader), or fails when the sidecar does not answer in time: treat that as "not leader".
# The sidecar listens on loopback: --noproxy keeps an HTTP proxy from the environment out of it.
get_leader() {
  curl -fsS --noproxy '*' --max-time "$2" "$SIDECAR/leader$1" 2>/dev/null |
    jq -er '"\(.is_leader) \(.fencing_token // "none") \(.valid_for_ms) \(.version)"'
}

# (a) Am I the leader? Poll: one GET, answered at once.
poll() {
  local shown="" now out leading token
  while :; do
    leading=false token=none
    if out=$(get_leader "" 1); then read -r leading token _ _ <<<"$out"; fi
    now="leader=$leading token=$token"
    if [ "$now" != "$shown" ]; then echo "$now"; shown=$now; fi
    sleep 0.5
  done
}

# (a) Am I the leader? Long-poll: the sidecar answers when `version` changes.
watch() {
  local shown="" now out leading=false token=none valid=0 version=0 asked wait max
  while :; do
    if [ "$leading" != true ]; then
      wait=30000 max=35 # a follower waits for the next change
    elif [ "$version" != "$asked" ]; then
      # News of leadership after a long wait: its valid_for_ms counts from when it was
      # answered, not sent. Ask again at once for a validity to rely on.
      wait=0 max=1
    else
      # Renewals do not change the version: ask again well within the validity to learn the
      # new one, and count a lease with no answer by its end (curl --max-time) as lost.
      wait=$((valid / 8)) max=$(printf '%d.%03d' $((valid / 1000)) $((valid % 1000)))
    fi
    asked=$version # 0: the current state, whatever it is
    if out=$(get_leader "?wait=${wait}ms&version=$asked" "$max"); then
      read -r leading token valid version <<<"$out"
    else
      leading=false token=none version=0 # unreachable: not leader; ask again shortly
      sleep 0.5
    fi
    now="leader=$leading token=$token"
    if [ "$now" != "$shown" ]; then echo "$now"; shown=$now; fi
  done
}

# (b) Run work only while leading, and (c) hand the fencing token to every write.

# write TOKEN N: a downstream write. The store must refuse a token lower than the highest it has
# accepted, so that a write from a paused old leader cannot land after the new leader's, e.g.
# psql -c "UPDATE jobs SET state = 'done', token = $1 WHERE id = 42 AND token <= $1"
write() {
  echo "write token=$1 n=$2"
}

work() {
  local shown="" out leading valid token n=0
  while :; do
    # Ask before every step of work, and start a step only if the lease outlives the question
    # (at most 0.5 s) plus the step (0.1 s) by a margin.
    token=none
    if out=$(get_leader "" 0.5); then
      read -r leading token valid _ <<<"$out"
      if [ "$leading" != true ] || [ "$valid" -le 700 ]; then token=none; fi
    fi
    if [ "$token" != "$shown" ]; then # became leader, lost it, or a new term began
      if [ "$token" = none ]; then echo "leader=false token=none"; else echo "leader=true token=$token"; fi
      shown=$token
    fi
    if [ "$token" != none ]; then
      n=$((n + 1))
      write "$token" "$n"
    fi
    sleep 0.1 # one step of work: keep each step far shorter than the lease ttl
  done
}

# (d) Several leases or shards (lease.names, lease.shards): which ones do I lead? The same
# long-poll on GET /leases, whose `version` changes when any lease's answer does.

# get_leases QUERY MAX_SECONDS: prints "version valid_for_ms owned": owned is the leases led with
# their tokens, `jobs-0:7,jobs-3:2` (or "none"), valid_for_ms the shortest of their validities.
get_leases() {
  curl -fsS --noproxy '*' --max-time "$2" "$SIDECAR/leases$1" 2>/dev/null |
    jq -er '[.leases[] | select(.is_leader)] as $led
      | ([$led[] | "\(.lease):\(.fencing_token)"] | join(",")) as $owned
      | "\(.version) \([$led[].valid_for_ms] | min // 0) \(if $owned == "" then "none" else $owned end)"'
}

leases() {
  local shown="" now out owned=none valid=0 version=0 asked wait max unreachable
  while :; do
    if [ "$owned" = none ]; then
      wait=30000 max=35 # leading none: wait for the next change
    elif [ "$version" != "$asked" ]; then
      wait=0 max=1 # news after a long wait: ask again at once for validities to rely on
    else
      # Renewals do not change the version: ask again well within the shortest validity, and
      # count the leases as lost if no answer comes by its end (curl --max-time).
      wait=$((valid / 8)) max=$(printf '%d.%03d' $((valid / 1000)) $((valid % 1000)))
    fi
    asked=$version # 0: the current state, whatever it is
    if out=$(get_leases "?wait=${wait}ms&version=$asked" "$max"); then
      read -r version valid owned <<<"$out"
      unreachable=false
    else
      owned=none version=0 unreachable=true # unreachable: leading none
    fi
    now="leases=$owned"
    if [ "$now" != "$shown" ]; then echo "$now"; shown=$now; fi
    if [ "$unreachable" = true ]; then sleep 0.5; fi # ask again shortly
  done
}

case "${1:-}" in
  poll | watch | work | leases) "$1" ;;
  *) echo "usage: $0 poll|watch|work|leases" >&2; exit 2 ;;
esac

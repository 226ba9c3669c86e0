#!/usr/bin/env python3
"""Leadership from the redlock-elector sidecar, with Python's standard library only.

    python3 leader.py poll    # am I the leader? ask GET /leader twice a second
    python3 leader.py watch   # the same by long-poll: GET /leader?wait=30s&version=N
    python3 leader.py work    # run work only while leading; each write carries the fencing token
    python3 leader.py leases  # several leases or shards: the set this replica leads, by long-poll
                              # of GET /leases?wait=30s&version=N (one connection at a time)

Each prints a line when leadership changes, `leader=true token=7` or `leader=false token=none`;
`work` also prints `write token=7 n=1` for each (simulated) write; `leases` prints the leases it
leads with their tokens, `leases=jobs-0:7,jobs-3:2`, or `leases=none`.
"""
import http.client
import json
import os
import sys
import threading
import time
import urllib.request

SIDECAR = os.environ.get("REDLOCK_ELECTOR_URL", "http://127.0.0.1:4040")
# The sidecar listens on loopback: never send it through an HTTP proxy from the environment.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get_leader(query="", timeout=1.0, path="/leader"):
    """GET /leader (or `path`) as a dict, or None when the sidecar does not answer: treat that as
    "not leader"."""
    try:
        with HTTP.open(SIDECAR + path + query, timeout=timeout) as r:
            return json.load(r)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def show(token):
    print(f"leader={'false' if token is None else 'true'} token={token or 'none'}", flush=True)


# (a) Am I the leader? Poll: one GET, answered at once.
def poll():
    last = "?"  # nothing shown yet
    while True:
        v = get_leader()
        token = v["fencing_token"] if v and v["is_leader"] else None
        if token != last:
            show(token)
            last = token
        time.sleep(0.5)


# (a) Am I the leader? Long-poll: the sidecar answers when `version` changes.
def leadership():
    """Yield (token, deadline) after every answer; token None when not leading. deadline is the
    time.monotonic() until which the lease is known to be valid."""
    asked, view, deadline = 0, None, 0.0
    while True:
        if view is None or not view["is_leader"]:
            wait, timeout = 30000, 35  # a follower waits for the next change
        elif view["version"] != asked:
            # News of leadership after a long wait: its valid_for_ms counts from when it was
            # answered, not sent. Ask again at once for a deadline to rely on.
            wait, timeout = 0, 1
        else:
            # Renewals do not change the version: ask again well within the validity to learn
            # the new one, and count a lease with no answer by its end as lost.
            wait = view["valid_for_ms"] // 8
            timeout = max(deadline - time.monotonic(), 0.001)
        asked = view["version"] if view else 0  # 0: the current state, whatever it is
        sent = time.monotonic()  # before sending: valid_for_ms runs from a later moment
        view = get_leader(f"?wait={wait}ms&version={asked}", timeout)
        if view is None:
            yield None, 0.0  # unreachable: not leader
            time.sleep(0.5)
        elif view["is_leader"]:
            deadline = sent + view["valid_for_ms"] / 1000
            yield view["fencing_token"], deadline
        else:
            yield None, 0.0


def watch():
    last = "?"  # nothing shown yet
    for token, _ in leadership():
        if token != last:
            show(token)
            last = token


# (b) Run work only while leading, and (c) hand the fencing token to every write.
class Lease:
    """The long-poll's latest answer, for the worker."""

    def __init__(self):
        self.lock = threading.Lock()
        self.token, self.deadline = None, 0.0
        threading.Thread(target=self.follow, daemon=True).start()

    def follow(self):
        for token, deadline in leadership():
            with self.lock:
                self.token, self.deadline = token, deadline

    def token_now(self):
        """The fencing token while the lease is valid by this process's own clock, else None:
        it turns None at the deadline even if the sidecar stops answering."""
        with self.lock:
            return self.token if time.monotonic() < self.deadline else None


def write(token, n):
    """A downstream write. The store must refuse a token lower than the highest it has accepted,
    so that a write from a paused old leader cannot land after the new leader's, e.g.
    UPDATE jobs SET state = %s, token = %s WHERE id = %s AND token <= %s"""
    print(f"write token={token} n={n}", flush=True)


def work():
    lease, last, n = Lease(), "?", 0
    while True:
        token = lease.token_now()  # check before every step of work
        if token != last:
            show(token)  # became leader, lost it, or a new term began
            last = token
        if token is not None:
            n += 1
            write(token, n)
        time.sleep(0.1)  # one step of work: keep each step far shorter than the lease ttl


# (d) Several leases or shards (`lease.names`, `lease.shards`): which ones do I lead? The same
# long-poll on GET /leases, whose `version` changes when any lease's answer does.
def owned_leases():
    """Yield {lease: (token, deadline)} of the leases led, after every answer; {} when the
    sidecar does not answer. deadline is the time.monotonic() until which that lease is known to
    be valid: act on a lease only before it, as with one lease."""
    asked, view, owned = 0, None, {}
    while True:
        if not owned:
            wait, timeout = 30000, 35  # leading none: wait for the next change
        elif view["version"] != asked:
            wait, timeout = 0, 1  # news after a long wait: ask again for validities to rely on
        else:
            # Renewals do not change the version: ask again well within the shortest validity,
            # and count the leases as lost if no answer comes by the earliest deadline.
            wait = min(l["valid_for_ms"] for l in view["leases"] if l["is_leader"]) // 8
            timeout = max(min(d for _, d in owned.values()) - time.monotonic(), 0.001)
        asked = view["version"] if view else 0  # 0: the current state, whatever it is
        sent = time.monotonic()  # before sending: valid_for_ms runs from a later moment
        view = get_leader(f"?wait={wait}ms&version={asked}", timeout, path="/leases")
        if view is None:
            owned = {}  # unreachable: leading none
            yield owned
            time.sleep(0.5)
            continue
        owned = {
            l["lease"]: (l["fencing_token"], sent + l["valid_for_ms"] / 1000)
            for l in view["leases"]
            if l["is_leader"]
        }
        yield owned


def leases():
    last = None  # nothing shown yet
    for owned in owned_leases():
        now = ",".join(f"{name}:{token}" for name, (token, _) in owned.items()) or "none"
        if now != last:
            print(f"leases={now}", flush=True)
            last = now


if __name__ == "__main__":
    modes = {"poll": poll, "watch": watch, "work": work, "leases": leases}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        sys.exit(f"usage: {sys.argv[0]} poll|watch|work|leases")
    try:
        modes[sys.argv[1]]()
    except KeyboardInterrupt:
        pass

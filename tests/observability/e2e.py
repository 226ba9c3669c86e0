#!/usr/bin/env python3
"""End-to-end observability test against a real Prometheus server.

Starts 3 redis-server nodes, 3 redlock-elector sidecars (lease `demo`) and a Prometheus that
scrapes them every second and evaluates the chart's alert rules (files/alerts.yaml) every second.
Then it drives real events and checks, through Prometheus's HTTP API, what an operator would see:

  1. exactly one leader (and the "who leads" panel names the sidecar whose /leader says so);
  2. SIGKILL of the leader: a new term, the transitions counter rises, the failover gap is
     recorded, and RedlockElectorNoLeader never fires (the gap is inside its `for:`);
  3. a second sidecar group with the same lease name on other Redis: MultipleLeaders is true;
  4. repeated step-downs: LeadershipFlapping fires;
  5. SIGSTOP of a sidecar: SidecarStalled fires;
  5b. redis-1's wall clock stepped forward, then back (it runs under tests/clockshift's
     LD_PRELOAD library): RedisClockJump fires for each direction, the node is quarantined and
     not eligible for ttl + margin, and the leader keeps the lease on the other two;
  6. a Redis node killed: RedisEndpointDown becomes true for it and fires after its `for:`;
     restarted: RedisEndpointQuarantined's expression becomes true for it (ttl+1s quarantine);
  7. two of three Redis nodes killed: RedisQuorumLost, RenewalsFailing and NoLeader become true.

Finally every dashboard panel query (variables substituted) and every alert expression is
evaluated over the whole run and must have returned data; with --plot the main panels are drawn
from the same Prometheus data into a PNG.

Fails loudly (exit 1) with every failed check listed; always stops every process it started.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "charts/redlock-elector/files/alerts.yaml"
DASHBOARD = REPO / "charts/redlock-elector/files/dashboard.json"
LEASE = "demo"
NAMESPACE = "e2e"
TTL = 2.0  # seconds; quarantine of a fresh Redis node is ttl + 1s
CLOCKSHIFT_SRC = REPO / "tests/clockshift/clockshift.c"
CLOCK_JUMP_MS = 5000  # far beyond the detection allowance (ms), small enough to leave no long-lived key
RETRY = "300ms"

# The metrics docs/reference/metrics.md lists that the dashboard and alerts rely on.
REQUIRED_METRICS = {f"redlock_elector_{m}" for m in (
    "is_leader leader_transitions_total acquire_attempts_total renewals_total lease_valid_seconds "
    "fencing_token acquire_duration_seconds redis_up redis_quarantined redis_command_duration_seconds "
    "build_info acquire_wait_seconds leader_known quorum redis_endpoints_usable lease_info "
    "stalls_total stalled redis_eligible redis_clock_jumps_total").split()}

failures: list[str] = []
events: list[tuple[float, str]] = []
notes: list[str] = []


def log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(ok: bool, what: str) -> bool:
    log(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)
    return ok


def event(label: str) -> None:
    events.append((time.time(), label))
    log(f"event: {label}")


# Like testkit's free_port (testkit/src/common): a counter below Linux's ephemeral range (32768+), so no port is
# handed out twice (binding port 0 twice may repeat one) and no outgoing connection can take the
# port of a Redis that is restarted on it; the start depends on the pid.
_next_port = os.getpid() * 7919 % 20000


def free_port() -> int:
    """A free loopback port in 12000..32000 not handed out before in this run."""
    global _next_port
    for _ in range(20000):
        port = 12000 + _next_port % 20000
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port in 12000..32000")


def http(method: str, url: str, timeout: float = 5.0) -> tuple[int, str]:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


class Proc:
    """A child process in its own process group, logged to a file, always stopped."""

    all: list["Proc"] = []

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict[str, str] | None = None):
        self.name, self.argv, self.logdir = name, argv, logdir
        self.env = {**os.environ, **env} if env else None
        self.p: subprocess.Popen | None = None
        Proc.all.append(self)

    def start(self) -> "Proc":
        out = open(self.logdir / f"{self.name}.log", "ab")
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def send(self, sig: int) -> None:
        if self.p and self.p.poll() is None:
            os.kill(self.p.pid, sig)

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.p and self.p.poll() is None:
            self.send(signal.SIGCONT)
            self.send(sig)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait()

    def alive(self) -> bool:
        return bool(self.p) and self.p.poll() is None

    def logs(self) -> str:
        try:
            return (self.logdir / f"{self.name}.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""


def build_clockshift(tmp: Path) -> Path:
    """tests/clockshift's LD_PRELOAD library, built with cc (cargo needs cc to link anyway)."""
    out = tmp / "libclockshift.so"
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(out), str(CLOCKSHIFT_SRC)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cc failed to build {CLOCKSHIFT_SRC}:\n{r.stdout}{r.stderr}")
    return out


class Redis(Proc):
    def __init__(self, name: str, logdir: Path, clockshift: Path | None = None):
        self.port = free_port()
        d = logdir / name
        d.mkdir()
        # Under the clockshift library, the server's wall clock is offset by the ms in this file.
        self.offset_file = d / "clock-offset-ms" if clockshift else None
        env = {"LD_PRELOAD": str(clockshift), "CLOCKSHIFT_FILE": str(self.offset_file)} if clockshift else None
        super().__init__(name, ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                                "--save", "", "--appendonly", "no", "--dir", str(d)], logdir, env)

    def shift_clock(self, offset_ms: int) -> None:
        """Set the server's wall-clock offset (from true time); written atomically by rename."""
        assert self.offset_file, f"{self.name} does not run under the clockshift library"
        tmp = self.offset_file.with_suffix(".tmp")
        tmp.write_text(str(offset_ms))
        os.replace(tmp, self.offset_file)
        time.sleep(0.005)  # the library re-reads the file at most once per ms

    def start(self) -> "Redis":
        super().start()
        deadline = time.time() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{self.name} did not start:\n{self.logs()}")
            time.sleep(0.05)

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"


class Sidecar(Proc):
    def __init__(self, identity: str, binary: str, redis: list[Redis], logdir: Path,
                 lease: str = LEASE, extra: list[str] | None = None):
        self.identity = identity
        self.api, self.ops = free_port(), free_port()
        argv = [binary, "--lease", lease, "--identity", identity, "--ttl", f"{TTL:g}s",
                "--retry-every", RETRY, "--api-listen", f"127.0.0.1:{self.api}",
                "--ops-listen", f"127.0.0.1:{self.ops}", "--kubernetes", "false",
                "--log-format", "json"]
        for r in redis:
            argv += ["--redis", f"redis://{r.endpoint}"]
        argv += extra or []
        super().__init__(identity, argv, logdir)

    def start(self) -> "Sidecar":
        super().start()
        if not wait(10, lambda: self.view() is not None):
            raise RuntimeError(f"sidecar {self.identity} did not serve /leader:\n{self.logs()}")
        return self

    def view(self) -> dict | None:
        try:
            code, body = http("GET", f"http://127.0.0.1:{self.api}/leader", timeout=1)
            return json.loads(body) if code == 200 else None
        except (OSError, ValueError):
            return None

    def is_leader(self) -> bool:
        v = self.view()
        return bool(v and v["is_leader"])

    def metrics(self) -> str:
        return http("GET", f"http://127.0.0.1:{self.ops}/metrics")[1]


def wait(timeout: float, cond, every: float = 0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(every)
    return None


class Prom:
    """The Prometheus HTTP API."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def _get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        # A query that times out on a loaded 2-core machine is retried (transport only: an
        # answer Prometheus gave is never retried).
        for _ in range(3):
            code, body = http("GET", url, timeout=15)
            if code != 0:
                break
        if code == 0:
            raise RuntimeError(f"Prometheus {path} {params}: no answer: {body}")
        data = json.loads(body)
        if code != 200 or data.get("status") != "success":
            raise RuntimeError(f"Prometheus {path} {params}: {code} {body[:500]}")
        return data["data"]

    def query(self, q: str, at: float | None = None) -> list[dict]:
        params = {"query": q}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", **params)["result"]

    def range(self, q: str, start: float, end: float, step: float = 1.0) -> list[dict]:
        return self._get("/api/v1/query_range", query=q, start=f"{start:.3f}", end=f"{end:.3f}",
                         step=f"{step:g}")["result"]

    def values(self, q: str) -> list[float]:
        return [float(r["value"][1]) for r in self.query(q)]

    def scalar(self, q: str) -> float | None:
        v = self.values(q)
        return v[0] if len(v) == 1 else None

    def alert_states(self, name: str, start: float, end: float) -> set[str]:
        res = self.range(f'ALERTS{{alertname="{name}"}}', start, end)
        return {r["metric"].get("alertstate", "") for r in res}

    def firing_now(self, name: str) -> list[dict]:
        return [a for a in self._get("/api/v1/alerts")["alerts"]
                if a["labels"].get("alertname") == name and a["state"] == "firing"]


def rules_by_name() -> dict[str, dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"]}


def panel_queries(range_s: int) -> list[tuple[str, str, bool]]:
    """(panel title + refId, expr with variables substituted, instant?) for every dashboard target."""
    dash = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for p in panels:
            walk(p.get("panels", []))
            for t in p.get("targets", []):
                expr = (t["expr"].replace("$namespace", NAMESPACE).replace("$lease", LEASE)
                        .replace("$__rate_interval", "5s").replace("$__range", f"{range_s}s"))
                assert "$" not in expr, f"unsubstituted variable in {p['title']}: {expr}"
                out.append((f"{p['title']} [{t['refId']}]", expr, bool(t.get("instant"))))

    walk(dash["panels"])
    return out


def has_value(series: list[dict]) -> bool:
    for s in series:
        vals = s.get("values") or [s["value"]]
        if any(not math.isnan(float(v[1])) for v in vals):
            return True
    return False


def check_metrics(promtool: str, s: Sidecar) -> None:
    text = s.metrics()
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    missing = sorted(REQUIRED_METRICS - families)
    check(r.returncode == 0 and not missing,
          f"promtool check metrics on the live /metrics of {s.identity} ({len(families)} families): "
          f"{(r.stdout + r.stderr).strip() or 'clean'}" + (f"; missing {missing}" if missing else ""))


def run(args) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="redlock-elector-e2e-"))
    log(f"work dir {tmp}")
    try:
        scenario(args, tmp)
    finally:
        for p in reversed(Proc.all):
            p.stop()
        if failures:
            for p in Proc.all:
                if p.name.startswith("s"):
                    print(f"---- last log lines of {p.name}\n{p.logs()[-1500:]}", file=sys.stderr)
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def scenario(args, tmp: Path) -> None:
    rules = rules_by_name()
    clockshift = build_clockshift(tmp)
    redis = [Redis(f"redis-{i}", tmp, clockshift if i == 1 else None).start() for i in range(1, 4)]
    split_redis = Redis("redis-split", tmp).start()
    sidecars = [Sidecar(f"s{i}", args.binary, redis, tmp) for i in range(1, 4)]
    split = Sidecar("split", args.binary, [split_redis], tmp)
    # Alone on a lease of its own, following an app whose health URL refuses every probe.
    sick = Sidecar("sick", args.binary, [split_redis], tmp, lease="e2e-sick-app",
                   extra=["--follow-app", "true", "--app-health-url", f"http://127.0.0.1:{free_port()}/healthz",
                          "--app-health-interval", "200ms", "--app-unhealthy-grace", "1s"])

    # Prometheus: scraped like the chart's PodMonitor does it (namespace and pod target labels,
    # the operator's `endpoint` target label dropped by the same relabeling).
    prom_port = free_port()
    targets = [{"targets": [f"127.0.0.1:{s.ops}"],
                "labels": {"namespace": NAMESPACE, "pod": s.identity, "endpoint": "ops"}}
               for s in sidecars + [split, sick]]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [{"job_name": "redlock-elector", "static_configs": targets,
                            "relabel_configs": [{"action": "labeldrop", "regex": "endpoint"}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    (tmp / "tsdb").mkdir()
    prometheus = Proc("prometheus", [args.prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                                     f"--storage.tsdb.path={tmp / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}",
                                     "--storage.tsdb.retention.time=1h", "--log.level=warn"], tmp).start()
    prom = Prom(prom_port)
    if not wait(30, lambda: http("GET", f"{prom.base}/-/ready")[0] == 200 if prometheus.alive() else None):
        raise RuntimeError(f"Prometheus did not become ready:\n{prometheus.logs()}")
    loaded = {r["name"] for g in prom._get("/api/v1/rules")["groups"] for r in g["rules"]}
    check(loaded == set(rules), f"Prometheus loaded every rule of {ALERTS.name}: {sorted(loaded)}")

    t0 = time.time()
    event("start (fresh Redis: quarantine)")
    for s in sidecars:
        s.start()

    def leaders() -> list[Sidecar]:
        return [s for s in sidecars if s.alive() and s.is_leader()]

    def prom_leaders() -> float | None:
        return prom.scalar(f'sum by (namespace, lease) (redlock_elector_is_leader{{namespace="{NAMESPACE}", lease="{LEASE}"}})')

    # ---- 1. exactly one leader -------------------------------------------------------------
    up = wait(30, lambda: prom.scalar('count(up{job="redlock-elector"} == 1)') == 3)
    check(bool(up), "Prometheus scrapes all 3 sidecars (up == 1)")
    check(bool(wait(20, lambda: len(leaders()) == 1 and prom_leaders() == 1)),
          "exactly one leader, seen by the sidecars and by Prometheus")
    stable = all((time.sleep(1) or prom_leaders() == 1) for _ in range(5))
    check(stable, "sum(is_leader) stays exactly 1 for 5 scrapes")
    for s in sidecars:
        check_metrics(args.promtool, s)
    leader = leaders()[0]
    who = prom.query(f'max by (namespace, lease, identity, pod) (redlock_elector_is_leader{{namespace=~"{NAMESPACE}", lease=~"{LEASE}"}} '
                     f'* on (job, instance) group_left (identity) redlock_elector_lease_info) == 1')
    check([r["metric"].get("identity") for r in who] == [leader.identity],
          f"'Who leads' names {leader.identity}, the sidecar whose /leader says is_leader: {[r['metric'] for r in who]}")

    # ---- 2. SIGKILL the leader -------------------------------------------------------------
    others = [s for s in sidecars if s is not leader]
    sel_others = "|".join(s.identity for s in others)
    before = prom.scalar(f'sum(redlock_elector_leader_transitions_total{{pod=~"{sel_others}"}})') or 0.0
    t_kill = time.time()
    event(f"SIGKILL leader {leader.identity}")
    leader.stop(signal.SIGKILL)
    new = wait(TTL * 4, lambda: [s for s in others if s.is_leader()], every=0.02)
    failover = time.time() - t_kill
    check(bool(new) and len(new) == 1, f"a new leader within {TTL * 4:g}s (took {failover:.2f}s)")
    new_leader = new[0] if new else others[0]
    rose = wait(10, lambda: (prom.scalar(f'sum(redlock_elector_leader_transitions_total{{pod=~"{sel_others}"}})') or 0) > before)
    check(bool(rose), f"leader transitions counter rose after the SIGKILL (was {before:g})")
    check(bool(wait(10, lambda: prom_leaders() == 1)), "Prometheus sees exactly one leader again")
    gap = wait(10, lambda: prom.scalar(f'redlock_elector_acquire_wait_seconds_sum{{pod="{new_leader.identity}"}} '
                                       f'/ redlock_elector_acquire_wait_seconds_count{{pod="{new_leader.identity}"}}'))
    check(gap is not None and 0 <= gap <= TTL + 1.0,
          f"failover gap recorded by the new leader: {gap if gap is None else round(gap, 3)}s (<= ttl + retryEvery)")
    notes.append(f"SIGKILL failover: new leader answered after {failover:.2f}s; its acquire_wait = {gap}s")
    leader.start()  # the pod comes back, as Kubernetes would restart it
    event(f"{leader.identity} restarted")

    # ---- 3. a second group with the same lease name on other Redis -------------------------
    split.start()
    event("2nd group, same lease, other Redis")
    multi = rules["RedlockElectorMultipleLeaders"]["expr"]
    res = wait(15, lambda: prom.values(multi))
    check(res == [2.0], f"MultipleLeaders expression true with value 2: {res}")
    check(bool(wait(5, lambda: "pending" in prom.alert_states("RedlockElectorMultipleLeaders", time.time() - 5, time.time()))),
          "MultipleLeaders is pending (fires after its for: 1m)")
    split.stop(signal.SIGTERM)
    event("2nd group stopped")

    # ---- 3b. a leader whose app is unhealthy, with no healthy candidate (lease.followApp) -----
    sick.start()
    event("a sidecar alone on its lease, its app unhealthy")
    sick_expr = rules["RedlockElectorLeaderAppUnhealthy"]["expr"]
    res = wait(20, lambda: [r["metric"].get("pod") for r in prom.query(sick_expr)])
    check(res == ["sick"], f"LeaderAppUnhealthy expression true for the leader keeping the lease: {res}")
    view = sick.view() or {}
    check(view.get("is_leader") and view.get("app_healthy") is False and view.get("healthy_candidates") == 0,
          f"/leader: it keeps the lease and says why: {view}")
    sick.stop(signal.SIGTERM)
    event("the sick-app sidecar stopped")
    check(bool(wait(10, lambda: not prom.values(multi))), "MultipleLeaders expression clears after the second group stops")

    # ---- 4. flapping: repeated step-downs ---------------------------------------------------
    flaps = 0
    t_flap = time.time()
    for _ in range(6):
        cur = wait(10, lambda: leaders())
        if not cur:
            break
        code, _ = http("POST", f"http://127.0.0.1:{cur[0].api}/leader/step-down")
        if code == 200 and wait(5, lambda: [s for s in leaders() if s is not cur[0]], every=0.02):
            flaps += 1
        time.sleep(1.2)
    event(f"{flaps} step-downs")
    check(flaps == 6, f"6 step-downs each handed over to another sidecar ({flaps})")
    flap = rules["RedlockElectorLeadershipFlapping"]
    v = wait(10, lambda: prom.values(flap["expr"]))
    check(bool(v) and v[0] > 4, f"LeadershipFlapping expression true: {v}")
    check(bool(wait(10, lambda: prom.firing_now("RedlockElectorLeadershipFlapping"))), "LeadershipFlapping fires")
    w = f"{int(time.time() - t_flap) + 2}s"
    handover = prom.scalar(f'sum(increase(redlock_elector_acquire_wait_seconds_sum{{namespace="{NAMESPACE}"}}[{w}])) '
                           f'/ sum(increase(redlock_elector_acquire_wait_seconds_count{{namespace="{NAMESPACE}"}}[{w}]))')
    check(handover is not None and handover < 0.5, f"graceful handovers: mean acquire_wait {handover}s (< 0.5s)")
    notes.append(f"graceful step-down handovers: mean acquire_wait {handover}s")

    # ---- 5. a stalled sidecar ------------------------------------------------------------------
    victim = [s for s in sidecars if s.alive() and not s.is_leader()][0]
    event(f"SIGSTOP {victim.identity} 1.5s")
    victim.send(signal.SIGSTOP)
    time.sleep(1.5)
    victim.send(signal.SIGCONT)
    stall = rules["RedlockElectorSidecarStalled"]["expr"]
    res = wait(15, lambda: [r["metric"].get("pod") for r in prom.query(stall)])
    check(res == [victim.identity], f"SidecarStalled expression names {victim.identity}: {res}")
    check(bool(wait(10, lambda: prom.firing_now("RedlockElectorSidecarStalled"))), "SidecarStalled fires")

    # ---- 5b. redis-1's wall clock steps forward, then back (a minority of the nodes) --------
    r1 = redis[0]
    jump = rules["RedlockElectorRedisClockJump"]["expr"]
    ep1 = f'endpoint="{r1.endpoint}", namespace="{NAMESPACE}"'

    def jumps_seen() -> list[tuple[str, str]]:
        return sorted((r["metric"]["endpoint"], r["metric"]["direction"]) for r in prom.query(jump))

    def all_eligible() -> bool:  # every sidecar counts redis-1's vote again
        v = prom.values(f"redlock_elector_redis_eligible{{{ep1}}}")
        return len(v) == len(sidecars) and min(v) == 1

    check(bool(wait(10, all_eligible)), f"redlock_elector_redis_eligible is 1 for {r1.endpoint} on every sidecar before the jump")
    check(jumps_seen() == [], "RedisClockJump expression false before any jump (counters at their initial 0)")
    for delta, direction in [(CLOCK_JUMP_MS, "forward"), (0, "backward")]:
        t_jump = time.time()
        event(f"redis-1 clock {direction} {CLOCK_JUMP_MS / 1000:g}s")
        r1.shift_clock(delta)
        res = wait(15, lambda: (r1.endpoint, direction) in jumps_seen() and jumps_seen())
        check(bool(res), f"RedisClockJump expression true for {r1.endpoint} {direction}: {res}")
        firing = wait(10, lambda: [a for a in prom.firing_now("RedlockElectorRedisClockJump")
                                   if a["labels"].get("direction") == direction])
        check(bool(firing) and [a["labels"]["endpoint"] for a in firing] == [r1.endpoint],
              f"RedisClockJump fires for {r1.endpoint} {direction} (no for:)")
        check(bool(wait(10, all_eligible)), f"{r1.endpoint} eligible again on every sidecar after ttl + margin")
        seen = prom.range(f"max(redlock_elector_redis_quarantined{{{ep1}}})", t_jump, time.time())
        check(any(float(v[1]) == 1 for s in seen for v in s["values"]),
              f"redlock_elector_redis_quarantined was 1 for {r1.endpoint} after the {direction} jump")
        seen = prom.range(f"min(redlock_elector_redis_eligible{{{ep1}}})", t_jump, time.time())
        check(any(float(v[1]) == 0 for s in seen for v in s["values"]),
              f"redlock_elector_redis_eligible was 0 for {r1.endpoint} after the {direction} jump")
        check(prom_leaders() == 1 and len(leaders()) == 1, f"still exactly one leader after a {direction} jump on 1 of 3 nodes")
    res = jumps_seen()
    check(res == [(r1.endpoint, "backward"), (r1.endpoint, "forward")],
          f"RedisClockJump expression true per endpoint and direction, and for nothing else: {res}")
    n = {r["metric"]["direction"]: float(r["value"][1])
         for r in prom.query(f"sum by (direction) (redlock_elector_redis_clock_jumps_total{{{ep1}}})")}
    notes.append(f"clock jumps of {r1.endpoint} counted by the sidecars, per direction: {n}")

    # ---- 6. one Redis node down, then back (quarantined) ----------------------------------
    r3 = redis[2]
    t_r3 = time.time()
    event("kill redis-3")
    r3.stop(signal.SIGKILL)
    down = rules["RedlockElectorRedisEndpointDown"]["expr"]
    res = wait(15, lambda: (lambda d: d if d == {r3.endpoint: 3.0} else None)(
        {r["metric"]["endpoint"]: float(r["value"][1]) for r in prom.query(down)}))
    check(res == {r3.endpoint: 3.0}, f"RedisEndpointDown expression true for {r3.endpoint} from all 3 sidecars: {res}")
    check(not prom.values(rules["RedlockElectorRedisQuorumLost"]["expr"]), "2 of 3 endpoints: RedisQuorumLost stays false")
    check(prom_leaders() == 1, "still exactly one leader with 2 of 3 Redis nodes")
    # The SIGKILL failover must not have fired NoLeader: watch until its for: has surely passed.
    no_leader_for = 60
    time.sleep(max(0.0, t_kill + no_leader_for + 5 - time.time()))
    states = prom.alert_states("RedlockElectorNoLeader", t_kill, time.time())
    check("firing" not in states, f"NoLeader did not fire for the SIGKILL failover (states seen: {sorted(states) or 'none'})")
    notes.append(f"NoLeader states during the SIGKILL failover: {sorted(states) or 'none (gap shorter than a scrape)'}")
    time.sleep(max(0.0, t_r3 + 60 + 4 - time.time()))
    firing = prom.firing_now("RedlockElectorRedisEndpointDown")
    check([a["labels"]["endpoint"] for a in firing] == [r3.endpoint], f"RedisEndpointDown fires for {r3.endpoint} after its for: 1m")
    r3.start()
    event("redis-3 back (empty)")
    quar = rules["RedlockElectorRedisEndpointQuarantined"]["expr"]
    res = wait(10, lambda: [r["metric"]["endpoint"] for r in prom.query(quar)], every=0.2)
    check(res == [r3.endpoint], f"RedisEndpointQuarantined expression true for the restarted {r3.endpoint}: {res}")
    check(bool(wait(10, lambda: not prom.query(quar))), "quarantine ends after ttl + 1s")
    check(bool(wait(10, lambda: not prom.query(down))), "RedisEndpointDown expression clears")
    t_healthy = time.time()

    # ---- 7. two of three Redis nodes down: no quorum -------------------------------------
    event("kill redis-2 + redis-3: no quorum")
    redis[1].stop(signal.SIGKILL)
    redis[2].stop(signal.SIGKILL)
    for name in ["RedlockElectorRedisQuorumLost", "RedlockElectorRenewalsFailing", "RedlockElectorNoLeader"]:
        res = wait(15, lambda: prom.query(rules[name]["expr"]))
        check(bool(res), f"{name} expression true: {[(r['metric'].get('lease'), r['value'][1]) for r in res or []]}")
    res = {r["metric"]["endpoint"] for r in prom.query(down)}
    check(res == {redis[1].endpoint, redis[2].endpoint}, f"RedisEndpointDown true for both dead nodes: {sorted(res)}")
    check(bool(wait(5, lambda: "pending" in prom.alert_states("RedlockElectorNoLeader", time.time() - 5, time.time()))),
          "NoLeader is pending (fires after its for: 1m)")
    time.sleep(3)
    for s in sidecars:  # now with error, quarantine and wait series present
        check_metrics(args.promtool, s)
    t_end = time.time()
    event("end")

    # ---- every panel and every alert expression over the run -------------------------------
    span = int(t_end - t0) + 1
    for title, expr, instant in panel_queries(span):
        series = prom.query(expr, at=t_healthy) if instant else prom.range(expr, t0, t_end)
        check(has_value(series), f"panel {title} returns data ({len(series)} series)")
    for name, r in rules.items():
        series = prom.range(r["expr"], t0, t_end)
        check(has_value(series), f"alert {name}: its expression was true during the run")
    # Specific panel values.
    leaders_series = prom.range(f'sum by (lease) (redlock_elector_is_leader{{namespace=~"{NAMESPACE}", lease=~"{LEASE}"}})', t0, t_end)
    vals = [float(v[1]) for s in leaders_series for v in s["values"]]
    check(set(vals) <= {0.0, 1.0, 2.0} and 2.0 in vals and 0.0 in vals, f"'Leaders per lease' took only 0/1/2: {sorted(set(vals))}")
    tokens = prom.range(f'max by (lease) (redlock_elector_fencing_token{{namespace=~"{NAMESPACE}", lease=~"{LEASE}", pod!="split"}})', t0, t_end)
    tv = [float(v[1]) for v in tokens[0]["values"]] if tokens else []
    nonzero = [x for x in tv if x > 0]
    check(bool(nonzero) and max(nonzero) >= 8, f"'Fencing token' reached >= 8 after 8 terms: max {max(nonzero) if nonzero else None}")
    terms = prom.scalar(f'sum by (lease) (increase(redlock_elector_leader_transitions_total{{namespace=~"{NAMESPACE}", lease=~"{LEASE}", pod!="split"}}[{span}s]))')
    check(terms is not None and terms >= 7, f"'New terms in range' counted the terms: {terms}")
    if args.plot:
        plot(prom, t0, t_end, Path(args.plot), [r.endpoint for r in redis])


def plot(prom: Prom, t0: float, t1: float, out: Path, endpoints: list[str]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from datetime import datetime

    sel = f'namespace=~"{NAMESPACE}", lease=~"{LEASE}"'
    names = {e: f"redis-{i + 1}" for i, e in enumerate(endpoints)}

    def series(expr, label):
        res = []
        for s in prom.range(expr, t0, t1):
            xs = [datetime.fromtimestamp(float(v[0])) for v in s["values"]]
            ys = [float(v[1]) for v in s["values"]]
            res.append((label(s["metric"]), xs, ys))
        return sorted(res)

    panels = [
        ("Leadership by sidecar (1 = leader)", series(
            f'max by (identity) (redlock_elector_is_leader{{{sel}}} * on (job, instance) group_left (identity) redlock_elector_lease_info)',
            lambda m: m.get("identity", "?")), "state"),
        ("Leaders per lease", series(f'sum by (lease) (redlock_elector_is_leader{{{sel}}})', lambda m: "leaders")
         + series(f'sum by (lease) (redlock_elector_leader_known{{{sel}}})', lambda m: "sidecars that know a leader"), "line"),
        ("Leader transitions per 5s / fencing token", series(
            f'sum by (lease) (increase(redlock_elector_leader_transitions_total{{{sel}}}[5s]))', lambda m: "new terms")
         + series(f'max by (lease) (redlock_elector_fencing_token{{{sel}, pod!="split"}})', lambda m: "fencing token"), "line"),
        ("Acquire attempts by result (per s)", series(
            f'sum by (result) (rate(redlock_elector_acquire_attempts_total{{{sel}}}[5s]))', lambda m: m["result"]), "line"),
        ("Lease validity remaining (s)", series(
            f'max by (identity) (redlock_elector_lease_valid_seconds{{{sel}}} * on (job, instance) group_left (identity) redlock_elector_lease_info) > 0',
            lambda m: m.get("identity", "?")), "line"),
        ("Renewals by result (per s)", series(
            f'sum by (result) (rate(redlock_elector_renewals_total{{{sel}}}[5s]))', lambda m: m["result"]), "line"),
        ("Redis endpoint up (worst sidecar) / quarantined", series(
            f'min by (endpoint) (redlock_elector_redis_up * on (job, instance) group_left (lease) redlock_elector_lease_info{{{sel}, pod!="split"}})',
            lambda m: f'{names.get(m["endpoint"], m["endpoint"])} up')
         + series(f'max by (endpoint) (redlock_elector_redis_quarantined * on (job, instance) group_left (lease) redlock_elector_lease_info{{{sel}, pod!="split"}}) > 0',
                  lambda m: f'{names.get(m["endpoint"], m["endpoint"])} quarantined'), "state"),
        ("Redis command latency p99 per endpoint (ms)", [
            (lbl, xs, [y * 1000 for y in ys]) for lbl, xs, ys in series(
                f'histogram_quantile(0.99, sum by (le, endpoint) (rate(redlock_elector_redis_command_duration_seconds_bucket[5s]) '
                f'* on (job, instance) group_left (lease) redlock_elector_lease_info{{{sel}, pod!="split"}}))',
                lambda m: names.get(m["endpoint"], m["endpoint"]))], "line"),
    ]
    fig, axes = plt.subplots(4, 2, figsize=(15, 14), sharex=True)
    for ax, (title, data, kind) in zip(axes.flat, panels):
        ax.set_title(title, fontsize=10, loc="left")
        if kind == "state":
            for i, (lbl, xs, ys) in enumerate(data):
                ax.fill_between(xs, i, [i + 0.8 * y for y in ys], step="post", alpha=0.7, label=lbl)
            ax.set_yticks([i + 0.4 for i in range(len(data))], [d[0] for d in data], fontsize=8)
        else:
            for lbl, xs, ys in data:
                ax.plot(xs, ys, label=lbl, linewidth=1.2, drawstyle="steps-post")
            ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
        for t, label in events:
            ax.axvline(datetime.fromtimestamp(t), color="grey", linestyle=":", linewidth=0.8)
    for i, (t, _) in enumerate(events, 1):
        for ax in axes[0]:
            ax.annotate(str(i), (datetime.fromtimestamp(t), 1.0), xycoords=("data", "axes fraction"),
                        fontsize=7, va="bottom", ha="center", color="dimgrey")
    legend = "   ".join(f"{i} {label}" for i, (_, label) in enumerate(events, 1))
    fig.text(0.5, 0.005, "events: " + legend, ha="center", va="bottom", fontsize=8, wrap=True)
    for ax in axes[-1]:
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    fig.suptitle("redlock-elector dashboard panels, plotted from a real Prometheus during the e2e run "
                 "(3 sidecars, 3 Redis, scrape 1s)", fontsize=11)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    log(f"wrote {out}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", required=True, help="redlock-elector binary")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    ap.add_argument("--promtool", default=shutil.which("promtool") or "/usr/bin/promtool")
    ap.add_argument("--plot", help="write the main panels as a PNG here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, TSDB)")
    args = ap.parse_args()
    for tool in [args.binary, args.prometheus, args.promtool, shutil.which("redis-server"), shutil.which("cc")]:
        if not tool or not Path(tool).exists():
            print(f"e2e: missing prerequisite: {tool!r} (run scripts/check-observability.sh, which installs them)", file=sys.stderr)
            return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        run(args)
    except Exception as e:  # noqa: BLE001 - report and fail loudly
        failures.append(f"aborted: {type(e).__name__}: {e}")
        log(f"FAIL aborted: {e}")
    for n in notes:
        log(f"note: {n}")
    if failures:
        print(f"\ne2e: {len(failures)} check(s) FAILED:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    log("all observability checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

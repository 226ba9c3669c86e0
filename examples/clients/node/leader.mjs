// Leadership from the redlock-elector sidecar with Node's built-in fetch (Node 18+), no packages.
//
//   node leader.mjs poll    # am I the leader? ask GET /leader twice a second
//   node leader.mjs watch   # the same by long-poll: GET /leader?wait=30s&version=N
//   node leader.mjs work    # run work only while leading; each write carries the fencing token
//   node leader.mjs leases  # several leases or shards: the set this replica leads, by long-poll
//                           # of GET /leases?wait=30s&version=N (one connection at a time)
//
// Each prints a line when leadership changes, `leader=true token=7` or `leader=false token=none`;
// `work` also prints `write token=7 n=1` for each (simulated) write; `leases` prints the leases
// it leads with their tokens, `leases=jobs-0:7,jobs-3:2`, or `leases=none`.
import { setTimeout as sleep } from "node:timers/promises";

const SIDECAR = process.env.REDLOCK_ELECTOR_URL || "http://127.0.0.1:4040";

// GET /leader (or `path`), or null when the sidecar does not answer in time: treat that as "not
// leader". (fetch ignores HTTP proxy variables, so the environment cannot divert it.)
async function getLeader(query = "", timeoutMs = 1000, path = "/leader") {
  try {
    const r = await fetch(`${SIDECAR}${path}${query}`, { signal: AbortSignal.timeout(timeoutMs) });
    return r.ok ? await r.json() : null;
  } catch {
    return null;
  }
}

const show = (token) => console.log(`leader=${token !== null} token=${token ?? "none"}`);

// (a) Am I the leader? Poll: one GET, answered at once.
async function poll() {
  let last; // undefined: nothing shown yet
  for (;;) {
    const v = await getLeader();
    const token = v?.is_leader ? v.fencing_token : null;
    if (token !== last) show((last = token));
    await sleep(500);
  }
}

// (a) Am I the leader? Long-poll: the sidecar answers when `version` changes. Yields
// { token, deadline } after every answer: token null when not leading, deadline the
// performance.now() until which the lease is known to be valid.
async function* leadership() {
  let v = null;
  let asked = 0;
  let deadline = 0;
  for (;;) {
    let wait = 30000; // a follower waits for the next change
    let timeout = 35000;
    if (v?.is_leader && v.version !== asked) {
      // News of leadership after a long wait: its valid_for_ms counts from when it was
      // answered, not sent. Ask again at once for a deadline to rely on.
      wait = 0;
      timeout = 1000;
    } else if (v?.is_leader) {
      // Renewals do not change the version: ask again well within the validity to learn the
      // new one, and count a lease with no answer by its end as lost.
      wait = Math.floor(v.valid_for_ms / 8);
      timeout = Math.max(Math.floor(deadline - performance.now()), 1);
    }
    asked = v?.version ?? 0; // 0: the current state, whatever it is
    const sent = performance.now(); // before sending: valid_for_ms runs from a later moment
    v = await getLeader(`?wait=${wait}ms&version=${asked}`, timeout);
    if (v === null) {
      yield { token: null, deadline: 0 }; // unreachable: not leader
      await sleep(500);
    } else if (v.is_leader) {
      deadline = sent + v.valid_for_ms;
      yield { token: v.fencing_token, deadline };
    } else {
      yield { token: null, deadline: 0 };
    }
  }
}

async function watch() {
  let last;
  for await (const { token } of leadership()) {
    if (token !== last) show((last = token));
  }
}

// (b) Run work only while leading, and (c) hand the fencing token to every write.

// A downstream write. The store must refuse a token lower than the highest it has accepted, so
// that a write from a paused old leader cannot land after the new leader's, e.g.
// UPDATE jobs SET state = $1, token = $2 WHERE id = $3 AND token <= $2
function write(token, n) {
  console.log(`write token=${token} n=${n}`);
}

async function work() {
  const lease = { token: null, deadline: 0 }; // the long-poll's latest answer
  (async () => {
    for await (const l of leadership()) Object.assign(lease, l);
  })();
  // The fencing token while the lease is valid by this process's own clock, else null: it turns
  // null at the deadline even if the sidecar stops answering.
  const tokenNow = () => (performance.now() < lease.deadline ? lease.token : null);
  let last;
  let n = 0;
  for (;;) {
    const token = tokenNow(); // check before every step of work
    if (token !== last) show((last = token)); // became leader, lost it, or a new term began
    if (token !== null) write(token, ++n);
    await sleep(100); // one step of work: keep each step far shorter than the lease ttl
  }
}

// (d) Several leases or shards (`lease.names`, `lease.shards`): which ones do I lead? The same
// long-poll on GET /leases, whose `version` changes when any lease's answer does. Yields the
// leases led after every answer, as [{ lease, token, deadline }] in the sidecar's order ([] when
// it does not answer); act on a lease only before its deadline, as with one lease.
async function* ownedLeases() {
  let v = null;
  let asked = 0;
  let owned = [];
  for (;;) {
    let wait = 30000; // leading none: wait for the next change
    let timeout = 35000;
    if (owned.length && v.version !== asked) {
      // News after a long wait: ask again at once for validities to rely on.
      wait = 0;
      timeout = 1000;
    } else if (owned.length) {
      // Renewals do not change the version: ask again well within the shortest validity, and
      // count the leases as lost if no answer comes by the earliest deadline.
      const led = v.leases.filter((l) => l.is_leader);
      wait = Math.floor(Math.min(...led.map((l) => l.valid_for_ms)) / 8);
      const first = Math.min(...owned.map((l) => l.deadline));
      timeout = Math.max(Math.floor(first - performance.now()), 1);
    }
    asked = v?.version ?? 0; // 0: the current state, whatever it is
    const sent = performance.now(); // before sending: valid_for_ms runs from a later moment
    v = await getLeader(`?wait=${wait}ms&version=${asked}`, timeout, "/leases");
    if (v === null) {
      owned = []; // unreachable: leading none
      yield owned;
      await sleep(500);
      continue;
    }
    owned = v.leases
      .filter((l) => l.is_leader)
      .map((l) => ({ lease: l.lease, token: l.fencing_token, deadline: sent + l.valid_for_ms }));
    yield owned;
  }
}

async function leases() {
  let last;
  for await (const owned of ownedLeases()) {
    const now = owned.map((l) => `${l.lease}:${l.token}`).join(",") || "none";
    if (now !== last) console.log(`leases=${(last = now)}`);
  }
}

const modes = { poll, watch, work, leases };
const mode = process.argv[2];
if (process.argv.length !== 3 || !Object.hasOwn(modes, mode)) {
  console.error("usage: node leader.mjs poll|watch|work|leases");
  process.exit(2);
}
await modes[mode]();

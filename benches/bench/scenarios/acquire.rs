//! Acquire + release: ours (library API) against rslock on the same nodes, with the floors
//! that say what the machine allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_elector::redlock::{Acquire, Notice, Redlock};
use tokio_util::sync::CancellationToken;

use crate::args::Opts;
use crate::common::Redis;
use crate::direct::Direct;
use crate::fault::proxy::{LinkFault, Proxy};
use crate::floors::{Bare, BareQuorum};
use crate::harness::{library_lock, wait_connected};
use crate::report::{Report, Spec, fmt_val, ms, pct};

/// How much further away (one way) the slow node of the last scenario is: real deployments
/// spread nodes over zones, and one slow node shows what deciding at the quorum is worth.
const SLOW_NODE: Duration = Duration::from_millis(2);

/// Per-iteration times (ms) of one acquire scenario.
#[derive(Default)]
struct Samples {
    /// Ours: acquire + release.
    ours: Vec<f64>,
    /// Ours: acquire alone.
    acq: Vec<f64>,
    /// Ours: release alone.
    rel: Vec<f64>,
    /// Ours: one renew round.
    ren: Vec<f64>,
    /// rslock: lock + unlock.
    theirs: Vec<f64>,
    /// Floor: bare blocking sockets, every reply.
    floor: Vec<f64>,
    /// Floor: bare busy-polled sockets, quorum.
    floor_q: Vec<f64>,
    /// Floor: tokio sockets + our scripts, quorum.
    floor_d: Vec<f64>,
    /// Floor: busy-polled sockets + our scripts, quorum.
    floor_qs: Vec<f64>,
    /// Acquire and renew round p50 without and with the node's TIME (see `Direct::time_cost`).
    time_cost: [f64; 4],
}

/// Every client of one scenario, on the same nodes.
struct Clients {
    /// Ours, through the library API.
    redlock: Arc<Redlock>,
    /// rslock, and the key it locks.
    rs: (rslock::LockManager, String),
    /// Floor: blocking sockets, every reply.
    bare: Bare,
    /// Floor: busy-polled sockets, quorum.
    bare_q: BareQuorum,
    /// Floor: busy-polled sockets and our scripts, quorum.
    bare_qs: BareQuorum,
    /// Floor: tokio sockets and our scripts, quorum; also measures the cost of `TIME`.
    direct: Direct,
}

pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[Redis]) {
    eprintln!("== acquire + release (library API) vs rslock 0.10");
    let iters = o.n(2000, 200);
    let urls = |n: usize| nodes.iter().take(n).map(Redis::url).collect::<Vec<_>>();
    let proxy = Proxy::new(1, &[nodes[4].port]);
    proxy.set(
        0,
        0,
        LinkFault {
            latency: SLOW_NODE,
            blackhole: false,
        },
    );
    let mut slow = urls(4);
    slow.extend(proxy.urls(0));
    let scenarios = [
        ("1 node", urls(1)),
        ("3 nodes", urls(3)),
        ("5 nodes", urls(5)),
        ("5 nodes, one +2ms", slow),
    ];
    for (i, (label, urls)) in scenarios.into_iter().enumerate() {
        let stop = CancellationToken::new();
        let redlock = library_lock(rt, &stop, &format!("bench-acq-{i}"), &urls, &[]);
        wait_connected(&[&redlock], "library nodes");
        let mut c = Clients {
            redlock,
            bare: Bare::connect(&urls, &format!("bench-bare-{i}")),
            bare_q: BareQuorum::connect(&urls, &format!("bench-bare-q-{i}"), false),
            bare_qs: BareQuorum::connect(&urls, &format!("bench-bare-qs-{i}"), true),
            direct: rt.block_on(Direct::connect(&urls, &format!("bench-direct-{i}"))),
            rs: (rslock::LockManager::new(urls), format!("bench-rslock-{i}")),
        };
        let s = rt.block_on(sample(&mut c, i, iters));
        stop.cancel();
        add_rows(rep, label, &s);
    }
}

/// Every client's acquire + release `iters` times (after a tenth as warm-up), then the cost of
/// `TIME` and one renew round alone.
async fn sample(c: &mut Clients, scenario: usize, iters: usize) -> Samples {
    let mut s = Samples::default();
    for i in 0..iters + iters / 10 {
        let t = round(c).await;
        if i >= iters / 10 {
            let d = |k: usize| ms(t[k + 1] - t[k]);
            s.ours.push(ms(t[2] - t[0]));
            s.acq.push(d(0));
            s.rel.push(d(1));
            s.theirs.push(d(2));
            s.floor.push(d(3));
            s.floor_q.push(d(4));
            s.floor_d.push(d(6));
            s.floor_qs.push(d(8));
        }
    }
    s.time_cost = c
        .direct
        .time_cost(&format!("bench-time-{scenario}"), iters / 2)
        .await;
    // One renew round alone, for reference: the cost of one script round on every node.
    if let Acquire::Acquired(lease) = c.redlock.acquire("bench", false).await {
        for _ in 0..iters / 2 {
            let t = Instant::now();
            let _ = c.redlock.renew(&lease).await;
            s.ren.push(ms(t.elapsed()));
        }
        c.redlock.release(&lease.value, Notice::Silent).await;
    }
    s
}

/// One acquire + release by every client in turn; the instants between them. Untimed gaps
/// (`t[5..6]`, `t[7..8]`) collect the replies the quorum floors left owed.
async fn round(c: &mut Clients) -> [Instant; 10] {
    let mut t = [Instant::now(); 10];
    // Ours: acquire (one SET NX round that also stores the fencing token), then release.
    let lease = match c.redlock.acquire("bench", false).await {
        Acquire::Acquired(l) => l,
        other => panic!("our acquire failed on free nodes: {other:?}"),
    };
    t[1] = Instant::now();
    c.redlock.release(&lease.value, Notice::Silent).await;
    t[2] = Instant::now();
    // rslock: SET NX round, then release.
    let (rs, key) = &c.rs;
    let lock = rs
        .lock(key.as_str(), Duration::from_secs(1))
        .await
        .expect("rslock lock on free nodes");
    rs.unlock(&lock).await;
    t[3] = Instant::now();
    // The floor: blocking, so it holds this runtime thread for its two rounds.
    c.bare.acquire_release();
    t[4] = Instant::now();
    c.bare_q.acquire_release();
    t[5] = Instant::now();
    c.bare_q.settle();
    t[6] = Instant::now();
    c.direct.acquire_release().await;
    t[7] = Instant::now();
    c.direct.settle().await;
    t[8] = Instant::now();
    c.bare_qs.acquire_release();
    t[9] = Instant::now();
    c.bare_qs.settle();
    t
}

/// The figures of one scenario, each named `"{label}: ..."`.
fn add_rows(rep: &mut Report, label: &str, s: &Samples) {
    let (o50, o99) = (pct(&s.ours, 0.5), pct(&s.ours, 0.99));
    let (t50, t99) = (pct(&s.theirs, 0.5), pct(&s.theirs, 0.99));
    let (fl50, flq50) = (pct(&s.floor, 0.5), pct(&s.floor_q, 0.5));
    let (fd50, fqs50) = (pct(&s.floor_d, 0.5), pct(&s.floor_qs, 0.5));
    let rounds = format!(
        "release p50 {} ms, renew round p50 {} ms",
        fmt_val(pct(&s.rel, 0.5)),
        fmt_val(pct(&s.ren, 0.5))
    );
    let [acq_before, acq_after, ren_before, ren_after] = s.time_cost;
    let time_note = format!(
        "tokio sockets, our scripts before/after every reply carried TIME: acquire {} -> {} ms, renew {} -> {} ms",
        fmt_val(acq_before),
        fmt_val(acq_after),
        fmt_val(ren_before),
        fmt_val(ren_after)
    );
    #[rustfmt::skip]
    let mut rows = vec![
        Spec::info("ours acquire+release p50", o50, "ms", "acquire = one SET NX round storing the fencing token (a second round only when behind)"),
        Spec::info("ours acquire+release p99", o99, "ms", ""),
        Spec::info("rslock lock+unlock p50", t50, "ms", "rslock: SET NX round (waits for all nodes) + unlock"),
        Spec::info("rslock lock+unlock p99", t99, "ms", ""),
        Spec::info("ours acquire / release / one renew round p50", pct(&s.acq, 0.5), "ms", &rounds),
        Spec::info("floor, bare blocking sockets, every reply p50", fl50, "ms", "SET NX + DEL; no runtime, no library, no script"),
        Spec::info("floor, bare busy-polled sockets, quorum p50", flq50, "ms", "SET NX + DEL, each round decided at the quorum-th reply"),
        Spec::info("floor, tokio sockets + our scripts, quorum p50", fd50, "ms", "a hand-written async client: our acquire + release scripts, each round decided at the quorum-th reply"),
        Spec::info("floor, bare busy-polled sockets + our scripts, quorum p50", fqs50, "ms", "as the busy-polled floor, with our acquire + release scripts"),
        Spec::info("cost of TIME: acquire round p50", acq_after - acq_before, "ms", &time_note),
        Spec::info("cost of TIME: renew round p50", ren_after - ren_before, "ms", ""),
    ];
    // Only the 5-node run carries the target, and the floor ratio that says if it is reachable.
    if label == "5 nodes" {
        // The lower of the two floors: what no lock client can beat on these nodes.
        let f50 = fl50.min(flq50);
        let floor_note = if f50 / t50 > 0.5 {
            "above 0.5: the halving target is below what the hardware allows here"
        } else {
            "below 0.5: the halving target is physically possible here"
        };
        #[rustfmt::skip]
        rows.extend([
            Spec::info("floor / rslock p50", f50 / t50, "x", floor_note),
            Spec::info("tokio sockets + our scripts / rslock p50", fd50 / t50, "x", "what replacing redis-rs's connection could reach with our scripts"),
            Spec::info("busy-polled + our scripts / rslock p50", fqs50 / t50, "x", "what spinning a core could reach with our scripts"),
            Spec::at_most("ratio ours/rslock p50", o50 / t50, "x", 0.5, "target: at most half of rslock's p50"),
        ]);
    } else {
        rows.push(Spec::info("ratio ours/rslock p50", o50 / t50, "x", ""));
    }
    rows.push(Spec::info("ratio ours/rslock p99", o99 / t99, "x", ""));
    for spec in rows {
        let name = format!("{label}: {}", spec.name);
        rep.push(
            "acquire",
            Spec {
                name: &name,
                ..spec
            },
        );
    }
}

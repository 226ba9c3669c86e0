//! Crash failover: SIGKILL the leader of three real sidecars on three nodes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redlock_elector::backoff;
use redlock_elector::config::validate::lease_margin;
use redlock_elector::redlock::math;

use crate::args::Opts;
use crate::common::Redis;
use crate::report::{Report, Spec, ms, ms_between, pct};
use crate::scenarios::trio::Trio;

/// The sidecars' lease ttl in this section (`--ttl 1s`).
const TTL: Duration = Duration::from_secs(1);
/// The sidecars' retry period in this section (`--retry-every 1s`).
const RETRY: Duration = Duration::from_secs(1);
/// Where in the renewal period (ttl/3) a crash lands: anywhere, like a real one.
const CRASH_AT: std::ops::Range<Duration> = Duration::ZERO..Duration::from_millis(333);

pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    eprintln!("== crash failover: SIGKILL the leader; 3 sidecars, 3 nodes, ttl 1s, retryEvery 1s");
    let lease = "bench-failover";
    let mut trio = Trio::start(rt, lease, nodes, &["--ttl", "1s", "--retry-every", "1s"]);
    let mut latest = HashMap::new();
    let key = format!("redlock-elector:{lease}");
    let (mut beyond, mut total) = (vec![], vec![]);
    // The margin a term pays (issue 34): the drift term plus the blind band of the readings
    // that renewed it, seen from outside as ttl minus the longest validity `/leader` reports.
    let l = trio.steady(&mut latest);
    let measured = ms(TTL) - max_valid_ms(&trio.sidecars[l], Duration::from_millis(1300));
    for _ in 0..o.n(20, 3) {
        let l = trio.steady(&mut latest);
        // Do not kill right at a renewal: land somewhere in the renewal period, like a real crash.
        std::thread::sleep(backoff::jitter(CRASH_AT));
        let old = trio.sidecars[l].identity.clone();
        let t_kill = Instant::now();
        trio.sidecars[l].kill();
        let expiry = quorum_expiry(nodes, &key);
        let Some(new) = trio.next_leader(&old, t_kill, &mut latest) else {
            panic!("no new leader within 10s of a crash");
        };
        if let Some(x) = expiry {
            beyond.push(ms_between(x, new.at));
        }
        total.push(ms_between(t_kill, new.at));
        let mut gone = trio.sidecars.remove(l);
        gone.kill();
        latest.remove(&old);
        trio.spawn(rt, nodes);
    }
    let limit = ms(RETRY.mul_f64(1.25)) + 50.0;
    let (t50, t99, b99) = (pct(&total, 0.5), pct(&total, 0.99), pct(&beyond, 0.99));
    let crashes = format!("{} crashes", total.len());
    #[rustfmt::skip]
    rep.add("failover", vec![
        Spec::info("SIGKILL -> new leader p50", t50, "ms", &crashes),
        Spec::info("SIGKILL -> new leader p99", t99, "ms", ""),
        Spec::info("failover / ttl p50", t50 / ms(TTL), "x", ""),
        Spec::info("failover / ttl p99", t99 / ms(TTL), "x", ""),
        Spec::info("beyond key expiry p50", pct(&beyond, 0.5), "ms", "expiry = when the quorum-th key expires (PTTL read after the kill)"),
        Spec::at_most("beyond key expiry p99", b99, "ms", limit, "target: expiry + retryEvery*1.25 + 50ms"),
        Spec::info("beyond key expiry p99 / ttl", b99 / ms(TTL), "x", ""),
    ]);
    let timeout = Duration::from_millis(50);
    let worst = |ttl: Duration, timeout: Duration| {
        ms(lease_margin(ttl, 0.01, timeout) - math::drift(ttl, 0.01)) / 2.0
            + ms(math::drift(ttl, 0.01))
    };
    #[rustfmt::skip]
    rep.add("margin", vec![
        Spec::info("leader's margin, ttl 1s, measured", measured, "ms", "ttl - max valid_for_ms over 1.3 s: drift 12 ms + the band of its renewals' readings + the poll's delay"),
        Spec::info("leader's margin at worst, ttl 1s", worst(TTL, timeout), "ms", "drift + band at redis.timeout round trips and a window's gap"),
        Spec::info("leader's margin at worst, ttl 10s", worst(Duration::from_secs(10), timeout), "ms", "defaults"),
        Spec::info("leader's margin at worst, ttl 30s", worst(Duration::from_secs(30), timeout), "ms", ""),
        Spec::info("leader's margin at worst, ttl 10s, timeout 250ms", worst(Duration::from_secs(10), Duration::from_millis(250)), "ms", "a cross-region lease (100 ms RTT)"),
    ]);
}

/// The longest validity sidecar `s` reports on `/leader` over `window`, ms.
fn max_valid_ms(s: &crate::common::Sidecar, window: Duration) -> f64 {
    let end = Instant::now() + window;
    let mut best = 0u64;
    while Instant::now() < end {
        if let Some(v) = s.try_leader().filter(|v| v.is_leader) {
            best = best.max(v.valid_for_ms);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    best as f64
}

/// When a quorum of `key`s is free: when the quorum-th key expires. Read after the process is
/// gone, so no renewal can move them now.
fn quorum_expiry(nodes: &[&Redis], key: &str) -> Option<Instant> {
    let mut expiries: Vec<Instant> = nodes
        .iter()
        .filter_map(|n| {
            let at = Instant::now();
            let pttl: i64 = n.cli(&["PTTL", key])?.parse().ok()?;
            (pttl >= 0).then(|| at + Duration::from_millis(pttl as u64))
        })
        .collect();
    expiries.sort();
    expiries.get(math::quorum(nodes.len()) - 1).copied()
}

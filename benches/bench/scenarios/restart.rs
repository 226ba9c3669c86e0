//! Handover after a restart (issue 25): a rolling restart's shape. Every follower is restarted
//! (SIGTERM, then a fresh process, which has watched no node's clock yet) 0.5 to 2 s before the
//! leader's SIGTERM; the leader's release names one of them. By then the leader has vouched for
//! the fresh followers' watches (attestations), so the successor counts the nodes like any
//! follower; without attestations (`--no-attestations`, printed beside at ttl 10 s in a full
//! run) it takes the lease on the release proof. Either way it does not watch the nodes' clocks
//! for ttl + margin first: at ttl 1 s and at the default ttl 10 s, where that watch used to be
//! the whole gap (8 to 9 s with no leader).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::Redis;
use crate::harness::lease_notices;
use crate::report::{Report, Spec, ms_between, pct};
use crate::scenarios::trio::Trio;

pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    for ttl in ["1s", "10s"] {
        run_ttl(rt, o, rep, nodes, ttl, false);
    }
    if !o.quick {
        run_ttl(rt, o, rep, nodes, "10s", true);
    }
}

fn run_ttl(
    rt: &tokio::runtime::Runtime,
    o: &Opts,
    rep: &mut Report,
    nodes: &[&Redis],
    ttl: &str,
    proof_only: bool,
) {
    let rounds = o.n(60, 3);
    let how = if proof_only {
        ", --no-attestations (the release proof alone)"
    } else {
        ""
    };
    eprintln!(
        "== handover after restart (ttl {ttl}{how}): 3 sidecars, 3 nodes, every follower restarted 0.5-2 s before the leader's SIGTERM, {rounds} rounds"
    );
    let lease = format!(
        "bench-restart-{}{}",
        ttl.trim_end_matches('s'),
        if proof_only { "-proof" } else { "" }
    );
    let nrx = lease_notices(nodes, &lease);
    let mut args = vec!["--ttl", ttl, "--retry-every", "1s"];
    if proof_only {
        args.push("--no-attestations");
    }
    let mut trio = Trio::start(rt, &lease, nodes, &args);
    let mut latest = HashMap::new();
    // The first term: every sidecar has watched the nodes (up to ttl + margin).
    trio.steady(&mut latest);
    let (mut release, mut signal, mut ages) = (vec![], vec![], vec![]);
    for round in 0..rounds {
        let l = trio.steady_candidates(&mut latest);
        let old = trio.sidecars[l].identity.clone();
        // Restart every follower: the leader is the one sidecar that keeps its process.
        let mut gone: Vec<_> = (0..trio.sidecars.len())
            .filter(|&i| i != l)
            .rev()
            .map(|i| trio.sidecars.remove(i))
            .collect();
        // A rollout stops each old pod with SIGTERM: it withdraws its candidate record, so the
        // leader names a new pod, not a stopped one.
        for s in &mut gone {
            latest.remove(&s.identity);
            let _ = s.terminate();
        }
        let started = Instant::now();
        for _ in 0..gone.len() {
            trio.spawn(rt, nodes);
        }
        // 0.5, 1, 1.5, 2 s before the SIGTERM, in turn.
        let age = Duration::from_millis(500 + 500 * (round as u64 % 4));
        let l = trio.steady_candidates(&mut latest);
        assert_eq!(
            trio.sidecars[l].identity, old,
            "the leader changed during the restart"
        );
        std::thread::sleep(age.saturating_sub(started.elapsed()));
        ages.push(started.elapsed().as_secs_f64() * 1000.0);
        while nrx.try_recv().is_ok() {}
        let t_sig = Instant::now();
        trio.sidecars[l].signal("TERM");
        let t_rel = nrx
            .recv_timeout(Duration::from_secs(5))
            .expect("a release notice");
        let Some(new) = trio.next_leader(&old, t_sig, &mut latest) else {
            panic!("no new leader within 10s of the SIGTERM (ttl {ttl})");
        };
        let took = ms_between(t_rel, new.at);
        // The logs of a slow round (over 100 ms, or `BENCH_RESTART_LOGS_MS`), for whoever reads the figures.
        let dump_over = std::env::var("BENCH_RESTART_LOGS_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(100.0);
        if took > dump_over {
            eprintln!("-- round {round}: {took:.1} ms from the release to the new leader; logs:");
            for s in trio.sidecars.iter() {
                eprintln!("--- {}:\n{}", s.identity, s.logs());
            }
        }
        release.push(took);
        signal.push(ms_between(t_sig, new.at));
        let mut old_leader = trio.sidecars.remove(l);
        old_leader.reap();
        latest.remove(&old);
        trio.spawn(rt, nodes);
    }
    let ttl = format!("{ttl}{}", if proof_only { " (proof only)" } else { "" });
    let count = format!(
        "{} handovers, followers restarted {:.0}-{:.0} ms before",
        release.len(),
        ages.iter().copied().fold(f64::INFINITY, f64::min),
        ages.iter().copied().fold(0.0, f64::max)
    );
    rep.add(
        "restart",
        vec![
            Spec::at_most(
                &format!("ttl {ttl}: release -> new leader p50"),
                pct(&release, 0.5),
                "ms",
                1.0,
                &count,
            ),
            Spec::at_most(
                &format!("ttl {ttl}: release -> new leader p99"),
                pct(&release, 0.99),
                "ms",
                5.0,
                "before the release proof: 8.1-9.1 s at ttl 10 s (the fresh sidecar's clock watch)",
            ),
            Spec::info(
                &format!("ttl {ttl}: SIGTERM sent -> new leader p50"),
                pct(&signal, 0.5),
                "ms",
                "includes signal delivery, publishing not-leader, the release round",
            ),
        ],
    );
}

//! Graceful handover: three real sidecars on three nodes, the leader leaving by SIGTERM or
//! by a step-down request, with and without naming a successor.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::{Redis, http};
use crate::harness::lease_notices;
use crate::report::{Report, Spec, ms_between, pct};
use crate::scenarios::trio::Trio;

/// Release -> new leader, and request/signal -> new leader (ms), for one way of leaving.
struct ByKind {
    /// "SIGTERM" or "step-down".
    kind: &'static str,
    /// From the first release notice on any node to the new leader's SSE event.
    release: Vec<f64>,
    /// From sending the signal or request to the new leader's SSE event.
    signal: Vec<f64>,
}

pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    run_with(rt, o, rep, nodes, true);
    run_with(rt, o, rep, nodes, false);
}

/// Graceful handovers with the release naming a successor (the default), or without
/// (`--no-named-successor`: followers race, as before candidate records).
fn run_with(
    rt: &tokio::runtime::Runtime,
    o: &Opts,
    rep: &mut Report,
    nodes: &[&Redis],
    named: bool,
) {
    let how = if named {
        "named successor"
    } else {
        "no named successor"
    };
    eprintln!("== graceful handover ({how}): 3 sidecars, 3 nodes, ttl 1s, retryEvery 1s");
    let lease = if named {
        "bench-handover"
    } else {
        "bench-handover-race"
    };
    let nrx = lease_notices(nodes, lease);
    let mut args = vec!["--ttl", "1s", "--retry-every", "1s"];
    if !named {
        args.push("--no-named-successor");
    }
    let mut trio = Trio::start(rt, lease, nodes, &args);
    let mut latest = HashMap::new();
    // Printed in this order.
    let mut by_kind = ["SIGTERM", "step-down"].map(|kind| ByKind {
        kind,
        release: vec![],
        signal: vec![],
    });
    for i in 0..2 * o.n(30, 3) {
        let k = &mut by_kind[i % 2];
        let (release, signal) = handover(rt, &mut trio, &mut latest, &nrx, nodes, k.kind);
        k.release.push(release);
        k.signal.push(signal);
    }
    if named {
        add_named(rep, &by_kind);
    } else {
        let all = all_releases(&by_kind);
        let count = format!("{} handovers (SIGTERM and step-down)", all.len());
        rep.add(
            "handover",
            vec![
                Spec::info(
                    &format!("{how}: release -> new leader p50"),
                    pct(&all, 0.5),
                    "ms",
                    &count,
                ),
                Spec::info(
                    &format!("{how}: release -> new leader p99"),
                    pct(&all, 0.99),
                    "ms",
                    "followers race after the release notice",
                ),
            ],
        );
    }
}

/// One handover of `kind`: (release -> new leader, request/signal -> new leader) in ms.
fn handover(
    rt: &tokio::runtime::Runtime,
    trio: &mut Trio,
    latest: &mut HashMap<String, crate::common::View>,
    notices: &mpsc::Receiver<Instant>,
    nodes: &[&Redis],
    kind: &str,
) -> (f64, f64) {
    let l = trio.steady(latest);
    while notices.try_recv().is_ok() {}
    let old = trio.sidecars[l].identity.clone();
    let port = trio.sidecars[l].api_port;
    let t_sig = Instant::now();
    let poster = if kind == "SIGTERM" {
        trio.sidecars[l].signal("TERM");
        None
    } else {
        Some(std::thread::spawn(move || {
            http("POST", port, "/leader/step-down")
        }))
    };
    let t_rel = notices
        .recv_timeout(Duration::from_secs(5))
        .expect("a release notice");
    let Some(new) = trio.next_leader(&old, t_sig, latest) else {
        panic!("no new leader within 10s of a {kind} handover");
    };
    if let Some(p) = poster {
        let _ = p.join();
        // The old leader sits out one ttl; let it contend again so every round has two contenders.
        std::thread::sleep(Duration::from_millis(1100));
    } else {
        let mut gone = trio.sidecars.remove(l);
        gone.reap();
        latest.remove(&old);
        trio.spawn(rt, nodes);
    }
    (ms_between(t_rel, new.at), ms_between(t_sig, new.at))
}

/// Every release -> new leader time, SIGTERM and step-down together.
fn all_releases(by_kind: &[ByKind]) -> Vec<f64> {
    by_kind
        .iter()
        .flat_map(|k| k.release.iter().copied())
        .collect()
}

/// The figures of the named-successor run: per kind, then all with the targets.
fn add_named(rep: &mut Report, by_kind: &[ByKind]) {
    for ByKind {
        kind,
        release: rel,
        signal: sig,
    } in by_kind
    {
        let count = format!("{} handovers", rel.len());
        rep.add(
            "handover",
            vec![
                Spec::info(
                    &format!("{kind}: release -> new leader p50"),
                    pct(rel, 0.5),
                    "ms",
                    &count,
                ),
                Spec::info(
                    &format!("{kind}: release -> new leader p99"),
                    pct(rel, 0.99),
                    "ms",
                    "",
                ),
                Spec::info(
                    &format!("{kind}: request/signal sent -> new leader p50"),
                    pct(sig, 0.5),
                    "ms",
                    "includes signal delivery / HTTP, publishing not-leader, the release round",
                ),
            ],
        );
    }
    let all = all_releases(by_kind);
    let note = format!(
        "{} handovers, the release naming a successor; release = first release notice on any node, new leader = first is_leader:true SSE event",
        all.len()
    );
    rep.add(
        "handover",
        vec![
            Spec::at_most(
                "all: release -> new leader p50",
                pct(&all, 0.5),
                "ms",
                10.0,
                &note,
            ),
            Spec::at_most(
                "all: release -> new leader p99",
                pct(&all, 0.99),
                "ms",
                50.0,
                "",
            ),
        ],
    );
}

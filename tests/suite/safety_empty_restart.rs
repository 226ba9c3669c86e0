//! The classic Redlock hazard (Kleppmann, "How to do distributed locking"): five nodes; A holds
//! the lock on nodes {1, 2, 3}; node 3 crashes and restarts without persistence, empty; B then
//! locks {3, 4, 5}. Both hold "a majority".
//!
//! To make it faithful, both sidecars are configured with all five nodes (N = 5, quorum 3), each
//! through its own fault proxy: A is partitioned from nodes 4 and 5, B from nodes 1 and 2, so A
//! can only ever hold {1, 2, 3} and B only {3, 4, 5}. (Giving A and B disjoint three-node
//! configurations instead would let B win on {4, 5} alone, without any restart.) At the restart
//! A is also cut off from node 3, as a client that cannot re-lock the restarted node; otherwise
//! A's next renewal would re-create its key there and hide the hazard by luck of timing.
//!
//! With quarantine, node 3 does not count for ttl + 1 s after its restart, A's renewals fail on
//! {1, 2} and A steps down at its deadline before B can count node 3: the checker finds no
//! overlap. The restarted server's new run_id also starts a new watch of its clock (ttl +
//! margin before it counts), a second defence against the same hazard; so the unsafe run turns
//! off both (`--unsafe-disable-quarantine --unsafe-disable-clock-check`): B counts the empty
//! node at once and the checker
//! reports both sidecars answering leader at the same time: the checker can fail.

use testkit::common;
use testkit::fault;

use std::time::{Duration, Instant};

use common::*;
use fault::checker::{Checker, analyze};
use fault::describe;
use fault::proxy::{LinkFault, Proxy};

// A lease of 3 s keeps the stall margin (renewEvery/2 = 500 ms) well above CPU hiccups of a
// busy CI machine: a stalled A would step down early, which is safe but hides the hazard.
const TTL: Duration = Duration::from_secs(3);
const BLACKHOLE: LinkFault = LinkFault {
    latency: Duration::ZERO,
    blackhole: true,
};

/// Run the scenario; returns the checker's report and whether B ever led.
fn scenario(unsafe_disable_quarantine: bool) -> (fault::checker::Report, bool, String) {
    let mut nodes = redis_cluster(5, TTL);
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let proxy = Proxy::new(2, &ports);
    const A: usize = 0;
    const B: usize = 1;
    for n in [3, 4] {
        proxy.set(A, n, BLACKHOLE);
    }
    for n in [0, 1] {
        proxy.set(B, n, BLACKHOLE);
    }
    let mut opts = Opts {
        ttl: "3s",
        ..Opts::default()
    };
    if unsafe_disable_quarantine {
        opts.extra.push("--unsafe-disable-quarantine".into());
        opts.extra.push("--unsafe-disable-clock-check".into());
    }
    let a = Sidecar::start_urls("a", &proxy.urls(A), &opts);
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        a.leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| panic!("A never led on nodes 1-3:\n{}", a.logs()));
    let b = Sidecar::start_urls("b", &proxy.urls(B), &opts);
    let checker = Checker::start(&[a.api_port, b.api_port]);
    // B contends for a while and cannot win: node 3 is A's.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        a.leader().is_leader,
        "A lost the lease before the restart:\n{}",
        a.logs()
    );
    assert!(!b.leader().is_leader);

    // Cut A off from node 3 and restart it a third of a renewal period after A's renewal: a
    // renewal in flight at the cut could reach the restarted node and re-create A's key there
    // (RENEW heals a missing key), which hides the hazard for a whole ttl.
    just_after_renewal(&nodes[2], "redlock-elector:test", TTL * 2);
    std::thread::sleep(Duration::from_millis(300));
    // Cut A off from node 3 and restart it a third of a renewal period after A's renewal: a
    // renewal in flight at the cut could reach the restarted node and re-create A's key there
    // (RENEW heals a missing key), which hides the hazard for a whole ttl.
    just_after_renewal(&nodes[2], "redlock-elector:test", TTL * 2);
    std::thread::sleep(Duration::from_millis(300));
    proxy.set(A, 2, BLACKHOLE);
    let restarted = Instant::now();
    nodes[2].restart();
    let b_led = wait_for(TTL * 5, Duration::from_millis(5), || {
        b.leader().is_leader.then(Instant::now)
    });
    if let Some(t) = b_led {
        report(
            &format!("B's first term after the restart (unsafe={unsafe_disable_quarantine})"),
            format!("{:?}", t - restarted),
        );
    }
    std::thread::sleep(Duration::from_secs(1));
    let obs = checker.finish();
    let logs = format!("--- A:\n{}\n--- B:\n{}", a.logs(), b.logs());
    (analyze(&obs.segments), b_led.is_some(), logs)
}

#[test]
fn empty_restart_overlap_is_prevented_by_quarantine_and_caught_without_it() {
    let (safe, b_led, logs) = scenario(false);
    assert!(
        safe.overlaps.is_empty(),
        "S1 violated with quarantine on:\n{}{logs}",
        describe(&safe)
    );
    assert!(
        safe.token_violations.is_empty(),
        "S2 violated:\n{}",
        describe(&safe)
    );
    assert!(
        b_led,
        "B never took over once A's deadline and node 3's quarantine had passed:\n{logs}"
    );

    // The hazard needs B to win the race for node 3 while A is still within its lease; a CPU
    // stall of A (it then steps down early) can spoil one attempt, so allow three.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        let (r, _, logs) = scenario(true);
        let found = !r.overlaps.is_empty();
        attempts.push((r, logs));
        if found {
            break;
        }
    }
    let (unsafe_run, logs) = attempts.last().unwrap();
    report("attempts to show the hazard", attempts.len());
    report(
        "overlaps found without quarantine",
        unsafe_run.overlaps.len(),
    );
    assert!(
        !unsafe_run.overlaps.is_empty(),
        "without quarantine B should lead on the empty node while A still leads, and the checker should see it:\n{}{logs}",
        describe(unsafe_run)
    );
    let o = &unsafe_run.overlaps[0];
    report(
        "proven overlap without quarantine",
        format!("{:?}", o.to.saturating_sub(o.from)),
    );
}

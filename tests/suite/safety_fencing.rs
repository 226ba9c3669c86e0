//! Fencing tokens strictly increase from term to term, including across empty restarts of
//! nodes.
//!
//! Three sidecars, five nodes. Terms change by graceful handover and by SIGKILL. Then, while one
//! leader holds the lease, three of the five nodes (a majority) restart empty one after the
//! other, each only once the previous one has been healed; finally the two untouched nodes go
//! down and the leader is killed, so the next term is granted by the three restarted nodes
//! alone. Its token is still higher. Two mechanisms see to that and the test checks the first
//! directly: the leader's renewals re-assert the epoch on each restarted node while it is
//! quarantined (the epoch is read back from the node), and every follower remembers the highest
//! epoch it saw in the nodes' denials while it contended.

use testkit::common;
use testkit::fault;

use std::time::Duration;

use common::*;
use fault::checker::{Checker, analyze};
use fault::{api_ports, describe};

const TTL: Duration = Duration::from_secs(1);
const EPOCH_KEY: &str = "redlock-elector:test:epoch";

fn sole(sidecars: &[Option<Sidecar>]) -> Option<usize> {
    let live: Vec<(usize, &Sidecar)> = sidecars
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
        .collect();
    let refs: Vec<&Sidecar> = live.iter().map(|(_, s)| *s).collect();
    sole_leader(&refs).map(|k| live[k].0)
}

fn wait_leader(sidecars: &[Option<Sidecar>]) -> (usize, u64) {
    let i = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        sole(sidecars)
    })
    .expect("a leader");
    let token = sidecars[i]
        .as_ref()
        .unwrap()
        .leader()
        .fencing_token
        .expect("a leader has a token");
    (i, token)
}

#[test]
fn tokens_increase_across_handovers_crashes_and_empty_restarts() {
    let mut nodes = redis_cluster(5, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let names = ["a", "b", "c"];
    let mut sidecars: Vec<Option<Sidecar>> = names
        .iter()
        .map(|n| Some(Sidecar::start(n, &refs, &Opts::default())))
        .collect();
    let checker = Checker::start(&api_ports(&sidecars));
    let mut tokens = Vec::new();

    // Graceful handovers and crashes; each replaced sidecar comes back in its slot.
    for round in 0..4 {
        let (l, token) = wait_leader(&sidecars);
        tokens.push(token);
        checker.down(l);
        let mut old = sidecars[l].take().unwrap();
        if round % 2 == 0 {
            old.terminate();
        } else {
            old.kill();
        }
        let (next, _) = wait_leader(&sidecars);
        assert_ne!(next, l);
        let s = Sidecar::start(names[l], &refs, &Opts::default());
        checker.point(l, s.api_port);
        sidecars[l] = Some(s);
    }

    // A majority of nodes restart empty under one leader, one at a time.
    let (l, token) = wait_leader(&sidecars);
    tokens.push(token);
    for node in nodes.iter_mut().take(3) {
        node.restart();
        assert_eq!(
            node.cli(&["GET", EPOCH_KEY]).as_deref(),
            Some(""),
            "restarted empty"
        );
        // Quarantine (ttl + 1 s) plus a renewal.
        std::thread::sleep(TTL * 2 + Duration::from_millis(500));
        let (still, same) = wait_leader(&sidecars);
        assert_eq!(
            (still, same),
            (l, token),
            "the leader keeps the lease on the other four nodes"
        );
        // At least the token: renewals re-assert it. It may be higher: a follower's attempt
        // that won this (then key-less) node stored its proposed token there before failing.
        let epoch = node
            .cli(&["GET", EPOCH_KEY])
            .and_then(|e| e.parse::<u64>().ok());
        assert!(
            epoch.is_some_and(|e| e >= token),
            "renewals re-assert the epoch on a restarted node: {epoch:?} < {token}"
        );
    }
    // Only the three restarted nodes remain; the leader crashes.
    nodes[3].kill();
    nodes[4].kill();
    checker.down(l);
    sidecars[l].take().unwrap().kill();
    let (_, next) = wait_leader(&sidecars);
    tokens.push(next);
    assert!(
        next > token,
        "term granted by restarted nodes reused a token: {next} after {token}"
    );

    let obs = checker.finish();
    let r = analyze(&obs.segments);
    report("tokens", format!("{tokens:?}"));
    assert!(
        r.overlaps.is_empty() && r.token_violations.is_empty(),
        "{}",
        describe(&r)
    );
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(r.terms >= tokens.len(), "{}", describe(&r));
}

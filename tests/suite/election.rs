//! Election end to end: real redis-server processes, the real binary, real signals.

use testkit::common;

use std::time::{Duration, Instant};

use common::*;

const TTL: Duration = Duration::from_secs(1);
const RETRY: Duration = Duration::from_millis(200);

/// The nodes run the server `TEST_SERVER` names (scripts/test.sh runs this module on Redis, on
/// Valkey, and on mixed trios): each one's `INFO` says which it is.
#[test]
fn the_nodes_run_the_server_test_server_names() {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let want: Vec<Server> = match std::env::var("TEST_SERVER").as_deref() {
        Ok("valkey") => vec![Server::Valkey; 3],
        Ok("mixed") => vec![Server::Redis, Server::Valkey, Server::Redis],
        _ => vec![Server::Redis; 3],
    };
    let seen: Vec<Server> = nodes
        .iter()
        .map(|n| {
            let info = n.cli(&["INFO", "server"]).expect("INFO server");
            if info.contains("valkey_version:") {
                Server::Valkey
            } else {
                Server::Redis
            }
        })
        .collect();
    assert_eq!(seen, want);
    assert_eq!(nodes.iter().map(|n| n.server).collect::<Vec<_>>(), want);
}

#[test]
fn one_sidecar_on_three_nodes_leads_and_owns_the_key() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let s = Sidecar::start("pod-a", &refs, &Opts::default());
    let v = wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        s.leader().is_leader.then(|| s.leader())
    })
    .unwrap_or_else(|| panic!("no leadership within 5s:\n{}", s.logs()));
    assert_eq!(v.lease, "test");
    assert_eq!(v.identity, "pod-a");
    assert_eq!(v.leader.as_deref(), Some("pod-a"));
    assert!(v.fencing_token.is_some_and(|t| t >= 1), "{v:?}");
    assert!(v.valid_for_ms > 0 && v.valid_for_ms <= 1000, "{v:?}");
    assert!(
        v.version >= 2,
        "version starts at 1 and changed at least once: {v:?}"
    );
    for n in &nodes {
        let value = n.cli(&["GET", "redlock-elector:test"]).unwrap();
        assert!(
            value.starts_with("pod-a#"),
            "key value {value:?} begins with the identity"
        );
        let nonce = value.trim_start_matches("pod-a#");
        assert!(nonce.len() >= 32, "nonce carries >= 128 bits: {nonce:?}");
        let pttl: i64 = n
            .cli(&["PTTL", "redlock-elector:test"])
            .unwrap()
            .parse()
            .unwrap();
        assert!(pttl > 0 && pttl <= 1000, "key has the lease ttl: {pttl}");
    }
    // Renewals keep it: after 3 ttl it still leads with the same token.
    std::thread::sleep(TTL * 3);
    let later = s.leader();
    assert!(later.is_leader, "still leading after 3×ttl:\n{}", s.logs());
    assert_eq!(later.fencing_token, v.fencing_token);
    assert_eq!(
        later.version, v.version,
        "deadline moves do not change the version"
    );
}

#[test]
fn three_sidecars_on_five_nodes_elect_exactly_one() {
    let nodes = redis_cluster(5, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let sidecars: Vec<Sidecar> = ["a", "b", "c"]
        .iter()
        .map(|id| Sidecar::start(id, &refs, &Opts::default()))
        .collect();
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let leader = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        sole_leader(&all)
    })
    .expect("exactly one leader within 5s");
    let leader_id = sidecars[leader].identity.clone();
    // Followers learn the holder from the key's value.
    let named = wait_for(Duration::from_secs(3), Duration::from_millis(20), || {
        sidecars
            .iter()
            .all(|s| s.leader().leader.as_deref() == Some(leader_id.as_str()))
            .then_some(())
    });
    assert!(
        named.is_some(),
        "every sidecar names {leader_id}: {:?}",
        sidecars.iter().map(|s| s.leader()).collect::<Vec<_>>()
    );
    // And it stays that way: sample for 2 s, never two leaders.
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        let n = sidecars.iter().filter(|s| s.leader().is_leader).count();
        assert!(n <= 1, "two leaders at once");
        std::thread::sleep(Duration::from_millis(5));
    }
    for s in &sidecars {
        let v = s.leader();
        if s.identity != leader_id {
            assert_eq!(v.fencing_token, None);
            assert_eq!(v.valid_for_ms, 0);
        }
    }
}

/// Poll the candidates every ms until one answers `is_leader: true`; returns it and the elapsed time.
fn time_to_new_leader(
    candidates: &[&Sidecar],
    from: Instant,
    limit: Duration,
) -> Option<(usize, Duration)> {
    wait_for(limit, Duration::from_millis(1), || {
        candidates
            .iter()
            .position(|s| s.try_leader().is_some_and(|v| v.is_leader))
            .map(|i| (i, from.elapsed()))
    })
}

#[test]
fn sigkill_failover_within_ttl_plus_retry() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut sidecars: Vec<Sidecar> = ["a", "b", "c"]
        .iter()
        .map(|id| Sidecar::start(id, &refs, &Opts::default()))
        .collect();
    let mut figures = Vec::new();
    for round in 0..3 {
        let all: Vec<&Sidecar> = sidecars.iter().collect();
        let l = wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
            sole_leader(&all)
        })
        .expect("a leader");
        // Kill right after a renewal would be the worst case; any moment is a fair sample.
        let mut dead = sidecars.remove(l);
        let t0 = Instant::now();
        dead.kill();
        let rest: Vec<&Sidecar> = sidecars.iter().collect();
        let slack = Duration::from_millis(500);
        let (_, took) = time_to_new_leader(&rest, t0, TTL + RETRY + slack).unwrap_or_else(|| {
            panic!("round {round}: no new leader within ttl + retryEvery + 500ms")
        });
        figures.push(took);
        // Replace the dead one so every round has 3 contenders.
        sidecars.push(Sidecar::start(
            &format!("r{round}"),
            &refs,
            &Opts::default(),
        ));
    }
    report(
        "SIGKILL failover (ttl 1s, retryEvery 200ms), ms",
        format!(
            "{:?}",
            figures.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
        ),
    );
}

#[test]
fn sigterm_hands_over_well_before_ttl_and_exits_zero() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    // A long ttl makes the point: handover must not wait for expiry.
    let o = Opts {
        ttl: "10s",
        retry_every: "2s",
        ..Opts::default()
    };
    let mut sidecars: Vec<Sidecar> = ["a", "b", "c"]
        .iter()
        .map(|id| Sidecar::start(id, &refs, &o))
        .collect();
    let mut handovers = Vec::new();
    let mut exits = Vec::new();
    for _ in 0..2 {
        let all: Vec<&Sidecar> = sidecars.iter().collect();
        let l = wait_for(Duration::from_secs(15), Duration::from_millis(10), || {
            sole_leader(&all)
        })
        .expect("a leader");
        let mut old = sidecars.remove(l);
        let rest: Vec<&Sidecar> = sidecars.iter().collect();
        let t0 = Instant::now();
        let waiter = std::thread::spawn(move || {
            let r = old.terminate();
            (r, old)
        });
        let (_, took) = time_to_new_leader(&rest, t0, Duration::from_secs(5))
            .expect("a follower leads within 5s of SIGTERM (ttl is 10s)");
        let ((code, exit_after), old) = waiter.join().unwrap();
        assert_eq!(code, Some(0), "graceful exit code:\n{}", old.logs());
        assert!(
            exit_after < Duration::from_secs(1),
            "exits within 1s when Redis answers: {exit_after:?}"
        );
        handovers.push(took);
        exits.push(exit_after);
        sidecars.push(Sidecar::start("late", &refs, &o));
    }
    report(
        "SIGTERM handover (ttl 10s, retryEvery 2s), ms",
        format!(
            "{:?}",
            handovers.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
        ),
    );
    report(
        "SIGTERM exit time, ms",
        format!(
            "{:?}",
            exits.iter().map(|d| d.as_millis()).collect::<Vec<_>>()
        ),
    );
    for h in &handovers {
        assert!(
            *h < Duration::from_secs(2),
            "handover {h:?} is far below the 10s ttl and the 2s retry period"
        );
    }
}

#[test]
fn sigterm_exits_within_bound_when_redis_does_not_answer() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let o = Opts {
        ttl: "5s",
        retry_every: "200ms",
        timeout: "200ms",
        ..Opts::default()
    };
    let mut s = Sidecar::start("a", &refs, &o);
    // A fresh sidecar watches the nodes' clocks for ttl + margin before it may lead.
    wait_for(Duration::from_secs(12), Duration::from_millis(10), || {
        s.leader().is_leader.then_some(())
    })
    .expect("leads");
    // Freeze every node: commands now hang until the per-node timeout.
    for n in &nodes {
        n.stop();
    }
    let (code, took) = s.terminate();
    for n in &nodes {
        n.cont();
    }
    report(
        "SIGTERM exit with Redis frozen (timeout 200ms), ms",
        took.as_millis(),
    );
    assert_eq!(code, Some(0));
    assert!(
        took <= Duration::from_millis(2 * 200 + 1000),
        "exit within 2×timeout + 1s: {took:?}"
    );
}

#[test]
fn first_term_on_fresh_nodes_gets_token_one_despite_attempts_during_quarantine() {
    // Start the sidecar at once: for ttl + 1 s every node is quarantined and each attempt fails.
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let refs: Vec<&Redis> = nodes.iter().collect();
    let s = Sidecar::start("a", &refs, &Opts::default());
    let v = wait_for(Duration::from_secs(6), Duration::from_millis(10), || {
        Some(s.leader()).filter(|v| v.is_leader)
    })
    .unwrap_or_else(|| panic!("no leadership after the quarantine:\n{}", s.logs()));
    let failed = metric_sum_where(&s, |l| {
        l.starts_with("redlock_elector_acquire_attempts_total") && !l.contains("acquired")
    });
    assert!(
        failed >= 2.0,
        "attempts failed during the quarantine: {failed}"
    );
    // Quarantined nodes are not asked to store the proposed token, so failed attempts do not
    // inflate the epoch.
    assert_eq!(
        v.fencing_token,
        Some(1),
        "after {failed} failed attempts: {v:?}"
    );
}

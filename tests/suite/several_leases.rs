//! Several leases in one sidecar (`lease.names`): one set of node connections and one clock
//! watch per process, each lease contended for on its own, with its own tokens, notices and
//! step-downs. Real redis-server processes, the real binary, real signals; the checker polls
//! every lease of every sidecar (`GET /leases/NAME`) and verifies S1 and S2 per lease.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Deserialize;
use testkit::common::*;
use testkit::fault::checker::{Checker, analyze};
use testkit::fault::metric;

const TTL: Duration = Duration::from_secs(1);
const LEASES: [&str; 3] = ["alpha", "beta", "gamma"];

/// `GET /leases`, the fields the tests read.
#[derive(Debug, Deserialize)]
struct Leases {
    version: u64,
    leading: usize,
    leases: Vec<View>,
}

fn leases(s: &Sidecar) -> Leases {
    let (status, body) = http("GET", s.api_port, "/leases")
        .unwrap_or_else(|| panic!("{} does not answer /leases:\n{}", s.identity, s.logs()));
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("valid /leases JSON")
}

/// A sidecar for every lease of [`LEASES`]: by flag, or (`by_env`) by the comma-separated env
/// var.
fn start(identity: &str, nodes: &[&Redis], by_env: bool) -> Sidecar {
    let mut opts = Opts {
        lease: String::new(),
        ..Opts::default()
    };
    if by_env {
        opts.env
            .push(("REDLOCK_ELECTOR_LEASE_NAMES".into(), LEASES.join(",")));
    } else {
        for l in LEASES {
            opts.extra.extend(["--leases".into(), l.into()]);
        }
    }
    Sidecar::start(identity, nodes, &opts)
}

/// Who leads each lease, if every lease has exactly one leader among `sidecars`.
fn owners(sidecars: &[&Sidecar]) -> Option<BTreeMap<String, usize>> {
    let mut owners = BTreeMap::new();
    for (i, s) in sidecars.iter().enumerate() {
        for v in leases(s).leases.into_iter().filter(|v| v.is_leader) {
            if owners.insert(v.lease.clone(), i).is_some() {
                return None;
            }
        }
    }
    (owners.len() == LEASES.len()).then_some(owners)
}

/// Connections a node holds now (`INFO clients`), less the one asking.
fn clients(node: &Redis) -> usize {
    let info = node.cli(&["INFO", "clients"]).expect("INFO clients");
    let n: usize = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("connected_clients");
    n - 1
}

/// One sidecar with three leases holds as many connections per node as one with a single
/// lease: the node connections (and with them the clock watch and the attestations) are the
/// process's, not the lease's.
#[test]
fn three_leases_hold_the_connections_of_one() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let single = Sidecar::start("pod-single", &refs, &Opts::default());
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        single.leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| panic!("the single lease has no leader:\n{}", single.logs()));
    let one_lease = clients(&nodes[0]);
    drop(single);
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (clients(&nodes[0]) == 0).then_some(())
    })
    .expect("the single-lease sidecar's connections close");

    let three = start("pod-three", &refs, false);
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        (leases(&three).leading == LEASES.len()).then_some(())
    })
    .unwrap_or_else(|| panic!("not every lease led:\n{}", three.logs()));
    let three_leases = clients(&nodes[0]);
    report(
        "connections per node: one lease / three leases",
        format!("{one_lease} / {three_leases}"),
    );
    assert!(one_lease >= 2, "a connection and a subscription at least");
    assert_eq!(
        three_leases, one_lease,
        "three leases must share the node connections of one"
    );
    // Each lease is its own key, with its own token, and its own series.
    let all = leases(&three);
    let names: Vec<&str> = all.leases.iter().map(|v| v.lease.as_str()).collect();
    assert_eq!(names, LEASES);
    assert_eq!(
        three.leader().lease,
        "alpha",
        "/leader answers for the first"
    );
    for l in LEASES {
        let value = nodes[0]
            .cli(&["GET", &format!("redlock-elector:{l}")])
            .unwrap();
        assert!(value.starts_with("pod-three#"), "{l}: {value:?}");
        assert_eq!(
            metric(&three, "redlock_elector_is_leader", &[("lease", l)]),
            Some(1.0),
            "{l}'s series"
        );
    }
    assert_eq!(
        metric(
            &three,
            "redlock_elector_redis_up",
            &[("endpoint", &format!("127.0.0.1:{}", nodes[0].port))]
        ),
        Some(1.0),
        "one series per endpoint, not per lease"
    );
    // One `lease_info` series per process (the first lease's): the dashboard's joins on
    // (job, instance) stay one-to-one.
    let (_, text) = http("GET", three.ops_port, "/metrics").expect("/metrics");
    let info: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("redlock_elector_lease_info{"))
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    assert!(info[0].contains("lease=\"alpha\""), "{info:?}");
}

/// Two sidecars with three leases each: every lease has one leader; a step-down of one lease
/// moves that lease alone; a SIGTERM moves every lease the sidecar led within milliseconds;
/// the checker finds no two leaders of one lease and increasing tokens per lease.
#[test]
fn each_lease_has_one_leader_and_moves_on_its_own() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = start("pod-a", &refs, false);
    let b = start("pod-b", &refs, true);
    let ports = [a.api_port, b.api_port];
    let checkers: Vec<(&str, Checker)> = LEASES
        .iter()
        .map(|l| (*l, Checker::start_at(&ports, &format!("/leases/{l}"))))
        .collect();
    let both = [&a, &b];
    let first = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        owners(&both)
    })
    .unwrap_or_else(|| panic!("not one leader per lease:\n{}\n{}", a.logs(), b.logs()));

    // What the test just saw is in every checker's record before anything changes (a loaded
    // machine may schedule a poller late).
    for (_, c) in &checkers {
        c.sync(0);
        c.sync(1);
    }
    // A step-down of one lease: that lease moves, the others stay.
    let (moved, from) = first.iter().next().map(|(l, i)| (l.clone(), *i)).unwrap();
    let owner = both[from];
    let before = leases(owner).version;
    let (status, body) = http(
        "POST",
        owner.api_port,
        &format!("/leases/{moved}/step-down"),
    )
    .expect("step-down answers");
    assert_eq!(status, 200, "{body}");
    let (status, _) = http("POST", owner.api_port, "/leases/nope/step-down").unwrap();
    assert_eq!(status, 404, "an unknown lease");
    // A long-poll of /leases returns at once: the version moved.
    let (status, body) = http(
        "GET",
        owner.api_port,
        &format!("/leases?wait=10s&version={before}"),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let after = wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
        owners(&both).filter(|o| o[&moved] != from)
    })
    .unwrap_or_else(|| panic!("{moved} did not move after its step-down"));
    for (l, i) in &first {
        if *l != moved {
            assert_eq!(after[l], *i, "{l} moved with {moved}'s step-down");
        }
    }

    // The step-down's cool-down (one ttl) keeps its sidecar from taking that lease back, also
    // as a named successor: it ends first.
    std::thread::sleep(TTL);

    // SIGTERM of the sidecar that leads the most: each of its leases moves within milliseconds.
    let led_by_b = after.values().filter(|&&i| i == 1).count();
    let (stopped, survivor) = if led_by_b >= 2 { (1, 0) } else { (0, 1) };
    let survivor = both[survivor];
    let checkers_down = |slot: usize| {
        for (_, c) in &checkers {
            c.down(slot);
        }
    };
    checkers_down(stopped);
    let t0 = Instant::now();
    both[stopped].signal("TERM");
    let taken = wait_for(Duration::from_secs(5), Duration::from_millis(1), || {
        (leases(survivor).leading == LEASES.len()).then(|| t0.elapsed())
    })
    .unwrap_or_else(|| {
        panic!(
            "the survivor did not take every lease:\n{}",
            survivor.logs()
        )
    });
    report(
        "SIGTERM to the survivor leading all three",
        format!("{taken:?}"),
    );
    assert!(
        taken < TTL,
        "a graceful release hands each lease over without waiting for its expiry: {taken:?}"
    );

    for (l, c) in checkers {
        let r = analyze(&c.finish().segments);
        report(
            &format!("{l}: terms, tokens"),
            format!("{}, {:?}", r.terms, r.tokens),
        );
        assert!(r.overlaps.is_empty(), "{l}: two leaders: {:?}", r.overlaps);
        assert!(
            r.token_violations.is_empty(),
            "{l}: tokens: {:?}",
            r.token_violations
        );
        if l == moved {
            assert!(r.terms >= 2, "{l} changed hands: {:?}", r.tokens);
        }
    }
}

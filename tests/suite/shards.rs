//! Sharded leases (`lease.shards`): every replica contends for every shard, and the shards
//! spread evenly over the replicas. Real redis-server processes, the real binary, real signals;
//! the checker polls every sidecar's `GET /leases` and verifies S1 and S2 on every shard.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Deserialize;
use testkit::common::*;
use testkit::fault::checker::{Checker, analyze};

const TTL: Duration = Duration::from_secs(1);
const SHARDS: usize = 32;

/// `GET /leases`, the fields the test reads.
#[derive(Debug, Deserialize)]
struct Leases {
    leases: Vec<View>,
}

fn names() -> Vec<String> {
    (0..SHARDS).map(|i| format!("jobs-{i}")).collect()
}

fn start(identity: &str, nodes: &[&Redis]) -> Sidecar {
    start_ranked(identity, nodes, &[])
}

/// A sidecar with `extra` flags besides the shards (a rank for a rollout).
fn start_ranked(identity: &str, nodes: &[&Redis], extra: &[&str]) -> Sidecar {
    let mut flags = vec!["--shards".to_string(), SHARDS.to_string()];
    flags.extend(extra.iter().map(|s| s.to_string()));
    let opts = Opts {
        lease: "jobs".into(),
        extra: flags,
        ..Opts::default()
    };
    Sidecar::start(identity, nodes, &opts)
}

/// The old replicas' rank in a rollout (outside Kubernetes the revision is the priority, as in
/// `rollout.rs`), and the new ones'.
const OLD: [&str; 4] = ["--prefer", "newest", "--priority", "1"];
const NEW: [&str; 4] = ["--prefer", "newest", "--priority", "2"];

/// Each shard's leader among `sidecars` (by index), if every shard has exactly one.
fn assignment(sidecars: &[&Sidecar]) -> Option<BTreeMap<String, usize>> {
    let mut owner = BTreeMap::new();
    for (i, s) in sidecars.iter().enumerate() {
        let (status, body) = http("GET", s.api_port, "/leases")?;
        if status != 200 {
            return None;
        }
        let all: Leases = serde_json::from_str(&body).ok()?;
        for v in all.leases.into_iter().filter(|v| v.is_leader) {
            if owner.insert(v.lease, i).is_some() {
                return None;
            }
        }
    }
    (owner.len() == SHARDS).then_some(owner)
}

/// Shards led per sidecar.
fn loads(owner: &BTreeMap<String, usize>, sidecars: usize) -> Vec<usize> {
    let mut n = vec![0; sidecars];
    for i in owner.values() {
        n[*i] += 1;
    }
    n
}

/// Wait until every shard has one leader and the loads differ by at most one; the assignment
/// and how long it took.
fn balanced(sidecars: &[&Sidecar], within: Duration) -> (BTreeMap<String, usize>, Duration) {
    let t0 = Instant::now();
    let mut last = None;
    wait_for(within, Duration::from_millis(20), || {
        let owner = assignment(sidecars)?;
        let n = loads(&owner, sidecars.len());
        last = Some(n.clone());
        let (max, min) = (n.iter().max()?, n.iter().min()?);
        (max - min <= 1).then(|| (owner, t0.elapsed()))
    })
    .unwrap_or_else(|| {
        panic!(
            "not balanced within {within:?}: loads {last:?}\n{}",
            sidecars
                .iter()
                .map(|s| s.logs())
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

/// Five replicas with 32 shards converge to a balanced assignment after the last start; a
/// SIGKILLed replica's shards are taken by the survivors after their expiry and rebalanced; a
/// SIGTERMed replica's shards spread over the survivors within milliseconds; every shard has
/// at most one leader at every instant, and its tokens increase.
#[test]
fn five_replicas_share_thirty_two_shards_through_a_crash_and_a_shutdown() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut sidecars: Vec<Sidecar> = (0..5).map(|i| start(&format!("pod-{i}"), &refs)).collect();
    let ports: Vec<u16> = sidecars.iter().map(|s| s.api_port).collect();
    let checker = Checker::start_leases(&ports, &names());
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (owner, took) = balanced(&all, Duration::from_secs(20));
    report(
        "32 shards over 5 replicas: balanced after the last start",
        format!("{took:?}, loads {:?}", loads(&owner, 5)),
    );

    // SIGKILL of one replica: its shards wait out their expiry, then the survivors take them.
    checker.down(4);
    sidecars[4].kill();
    let t0 = Instant::now();
    let survivors: Vec<&Sidecar> = sidecars[..4].iter().collect();
    let (owner, _) = balanced(&survivors, TTL * 10);
    let took = t0.elapsed();
    report(
        "SIGKILL of one of 5: 32 shards balanced over 4 again",
        format!("{took:?}, loads {:?}", loads(&owner, 4)),
    );
    assert!(
        loads(&owner, 4).iter().all(|n| *n == 8),
        "{:?}",
        loads(&owner, 4)
    );

    // SIGTERM of another: its shards spread over the three left within milliseconds.
    checker.down(3);
    let t0 = Instant::now();
    sidecars[3].signal("TERM");
    let three: Vec<&Sidecar> = sidecars[..3].iter().collect();
    let taken = wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
        assignment(&three).map(|o| (o, t0.elapsed()))
    });
    let (owner, took) =
        taken.unwrap_or_else(|| panic!("the shards were not taken over:\n{}", sidecars[3].logs()));
    report(
        "SIGTERM of one of 4: every shard led by the 3 left after",
        format!("{took:?}, loads {:?}", loads(&owner, 3)),
    );
    assert!(
        took < TTL,
        "a graceful shutdown hands its shards over without their expiry: {took:?}"
    );
    let (owner, _) = balanced(&three, Duration::from_secs(10));
    assert!(
        loads(&owner, 3).iter().all(|n| (10..=11).contains(n)),
        "{:?}",
        loads(&owner, 3)
    );

    let obs = checker.finish();
    let mut terms = 0;
    for (name, segments) in names().iter().zip(&obs.by_lease) {
        let r = analyze(segments);
        assert!(
            r.overlaps.is_empty(),
            "{name}: two leaders: {:?}",
            r.overlaps
        );
        assert!(
            r.token_violations.is_empty(),
            "{name}: tokens: {:?}",
            r.token_violations
        );
        terms += r.terms;
    }
    report("terms over the 32 shards", terms);
}

/// The longest stretch in `led` (per ms) without a leader after the first leader; ms.
fn longest_gap(led: &[bool]) -> usize {
    let Some(first) = led.iter().position(|l| *l) else {
        return led.len();
    };
    let (mut longest, mut run) = (0, 0);
    for l in &led[first..] {
        run = if *l { 0 } else { run + 1 };
        longest = longest.max(run);
    }
    longest
}

/// A rolling restart of 5 replicas with 32 shards, as a Deployment with `maxSurge: 1` does it:
/// a new replica (a newer rank: priority 2 over 1, `prefer: newest`) starts and the shards
/// rebalance, then an old one gets SIGTERM; five times. Every shard moves at most twice (the
/// balancer hands shards to the new replicas and gives a shard that moved from old to old to a
/// new one next); every shard has at most one leader at every instant, its tokens increase,
/// and no gap is longer than a handover (far below the ttl: no shard waits for an expiry).
/// Prints each shard's moves and longest leaderless gap.
#[test]
fn a_rolling_restart_of_five_replicas_moves_shards_on_to_the_new_ones_without_an_expiry() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut old: Vec<Sidecar> = (0..5)
        .map(|i| start_ranked(&format!("old-{i}"), &refs, &OLD))
        .collect();
    balanced(&old.iter().collect::<Vec<_>>(), Duration::from_secs(20));
    // Slots 0-4 the old replicas, 5-9 the new ones.
    let mut ports: Vec<u16> = old.iter().map(|s| s.api_port).collect();
    ports.extend([0; 5]);
    let checker = Checker::start_leases(&ports, &names());
    let t0 = Instant::now();
    let mut new: Vec<Sidecar> = Vec::new();
    for i in 0..5 {
        let s = start_ranked(&format!("new-{i}"), &refs, &NEW);
        checker.point(5 + i, s.api_port);
        new.push(s);
        let live: Vec<&Sidecar> = old[i..].iter().chain(&new).collect();
        balanced(&live, Duration::from_secs(20));
        // Polled until it has exited: a shard it still leads while it hands the others over
        // is led, not leaderless.
        old[i].signal("TERM");
        old[i].reap();
        checker.down(i);
        let live: Vec<&Sidecar> = old[i + 1..].iter().chain(&new).collect();
        balanced(&live, Duration::from_secs(20));
    }
    report(
        "rolling restart of 5 replicas, 32 shards",
        format!("{:?}", t0.elapsed()),
    );
    let obs = checker.finish();
    let mut moves: BTreeMap<usize, usize> = BTreeMap::new();
    let mut per_shard = Vec::new();
    let mut gaps = Vec::new();
    let mut twice = Vec::new();
    for (name, segments) in names().iter().zip(&obs.by_lease) {
        let r = analyze(segments);
        assert!(
            r.overlaps.is_empty(),
            "{name}: two leaders: {:?}",
            r.overlaps
        );
        assert!(
            r.token_violations.is_empty(),
            "{name}: tokens: {:?}",
            r.token_violations
        );
        let moved = r.terms.saturating_sub(1);
        let gap = longest_gap(&r.led);
        *moves.entry(moved).or_default() += 1;
        per_shard.push(format!("{name} {moved}x {gap}ms"));
        if moved > 2 {
            twice.push(format!("{name}: {moved} moves"));
        }
        gaps.push(gap);
    }
    report(
        "per shard: moves and longest leaderless gap",
        per_shard.join(", "),
    );
    gaps.sort_unstable();
    report(
        "shards by how often they moved (moves: shards)",
        format!("{moves:?}"),
    );
    report(
        "longest leaderless gap per shard, ms (min / median / max)",
        format!(
            "{} / {} / {}",
            gaps[0],
            gaps[gaps.len() / 2],
            gaps[gaps.len() - 1]
        ),
    );
    // Issue 37 asks for at most two moves per shard. The rollout plan (one plan of targets for
    // the fleet, the move counts carried in the release notices) meets it in every simulated
    // rollout (elector::balance::tests::rollout) and in every real run since (12 of 12 on
    // 2026-11-28, 6 of them beside a full CI run and 3 busy loops on 2 cores).
    report(
        "at most two moves per shard (issue 37)",
        match twice.is_empty() {
            true => "met".to_string(),
            false => format!("NOT MET: {twice:?}"),
        },
    );
    let worst = moves.keys().max().copied().unwrap_or(0);
    assert!(
        worst <= 2,
        "a shard moved {worst} times: {twice:?}; the handovers:\n{}",
        old.iter()
            .chain(&new)
            .flat_map(|s| s
                .logs()
                .lines()
                .filter(|l| l.contains("handed"))
                .map(|l| format!("{}: {l}", s.identity))
                .collect::<Vec<_>>())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        gaps[gaps.len() - 1] < (TTL / 2).as_millis() as usize,
        "a shard waited for an expiry: gaps {gaps:?}"
    );
}

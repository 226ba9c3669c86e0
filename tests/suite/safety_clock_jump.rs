//! Wall-clock jumps on real Redis nodes (issue: Redis expires keys by its wall clock).
//!
//! Every node runs under the clockshift `LD_PRELOAD` library (`tests/clockshift/`), so a test
//! can step a running server's wall clock. A forward step on a majority just after the leader's
//! renewal deletes the lease there at once, while the leader's monotonic deadline still runs: a
//! follower that took those nodes would lead beside it. With detection, the first reply from a
//! stepped node reveals the jump (its `TIME` moved more than the monotonic clock allows), the
//! vote in it does not count and the node is quarantined for ttl + margin; with
//! `--unsafe-disable-clock-check` the checker finds the overlap.

use testkit::common;
use testkit::fault;

use std::time::{Duration, Instant};

use common::*;
use fault::checker::{Checker, Report, analyze};
use fault::{describe, metric};

const TTL: Duration = Duration::from_secs(1);
const KEY: &str = "redlock-elector:test";
const UNSAFE: &str = "--unsafe-disable-clock-check";

fn nodes() -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start_shiftable()).collect();
    // Out of the start-up quarantine (uptime below ttl + 1 s).
    std::thread::sleep(TTL + Duration::from_millis(1100));
    nodes
}

fn opts(detection: bool) -> Opts {
    let mut o = Opts::default();
    if !detection {
        o.extra.push(UNSAFE.into());
    }
    o
}

/// Sidecars a, b and c on every node.
fn trio(nodes: &[Redis], o: &Opts) -> Vec<Sidecar> {
    let refs: Vec<&Redis> = nodes.iter().collect();
    ["a", "b", "c"]
        .iter()
        .map(|id| Sidecar::start(id, &refs, o))
        .collect()
}

/// The index of the one leader, once every sidecar counts a quorum of nodes.
fn settled_leader(sidecars: &[&Sidecar]) -> usize {
    for s in sidecars {
        s.wait_eligible(TTL * 4);
    }
    wait_for(TTL * 4, Duration::from_millis(5), || sole_leader(sidecars))
        .unwrap_or_else(|| panic!("no single leader among {} sidecars", sidecars.len()))
}

fn just_after_renewal(node: &Redis) {
    common::just_after_renewal(node, KEY, TTL * 3);
}

fn outcome(checker: Checker, sidecars: &[&Sidecar]) -> (Report, String) {
    let obs = checker.finish();
    let logs = sidecars
        .iter()
        .map(|s| format!("--- {}:\n{}", s.identity, s.logs()))
        .collect::<String>();
    (analyze(&obs.segments), logs)
}

fn jumps(s: &Sidecar) -> f64 {
    metric_sum(s, "redlock_elector_redis_clock_jumps_total")
}

/// Three sidecars; a majority of nodes steps `steps` (ms, in order, `gap` apart) right after a
/// renewal; the checker watches for 3 s more.
fn majority_scenario(detection: bool, steps: &[i64], gap: Duration) -> (Report, f64, String) {
    let nodes = nodes();
    let sidecars = trio(&nodes, &opts(detection));
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    settled_leader(&all);
    let checker = Checker::start(&sidecars.iter().map(|s| s.api_port).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_millis(300));
    just_after_renewal(&nodes[0]);
    for (i, step) in steps.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        nodes[0].jump_clock(*step);
        nodes[1].jump_clock(*step);
    }
    std::thread::sleep(Duration::from_secs(3));
    let (report, logs) = outcome(checker, &all);
    let detected = all.iter().map(|s| jumps(s)).sum();
    (report, detected, logs)
}

/// With detection on: neither S1 nor S2 violated, and at least two of the jumps detected.
fn assert_safe_and_detected(safe: &Report, detected: f64, logs: &str) {
    assert!(
        safe.overlaps.is_empty(),
        "S1 violated with detection on:\n{}{logs}",
        describe(safe)
    );
    assert!(safe.token_violations.is_empty(), "S2:\n{}", describe(safe));
    assert!(detected >= 2.0, "the jumps were not detected:\n{logs}");
}

#[test]
fn majority_forward_jump_after_a_renewal() {
    let (safe, detected, logs) = majority_scenario(true, &[20_000], Duration::ZERO);
    report("jumps detected (majority +20 s, 3 sidecars)", detected);
    assert_safe_and_detected(&safe, detected, &logs);

    // Without detection the follower that takes the stepped nodes leads beside the leader. A
    // CPU stall of the leader (it then steps down early) can spoil one run: allow three.
    let mut found = None;
    for attempt in 1..=3 {
        let (r, _, logs) = majority_scenario(false, &[20_000], Duration::ZERO);
        if !r.overlaps.is_empty() {
            found = Some((attempt, r));
            break;
        }
        eprintln!("attempt {attempt} without detection found no overlap:\n{logs}");
    }
    let (attempt, r) = found.expect("with the switch off the checker must find two leaders");
    let o = &r.overlaps[0];
    report("attempts to show the hazard", attempt);
    report(
        "proven overlap without detection",
        format!("{:?}", o.to.saturating_sub(o.from)),
    );
}

#[test]
fn majority_backward_then_forward_again() {
    // Back 20 s, a renewal or two on the stepped clocks, then forward 20 s: the keys written
    // meanwhile expire at once. The backward step already quarantines the nodes.
    let (safe, detected, logs) =
        majority_scenario(true, &[-20_000, 20_000], Duration::from_millis(700));
    report("jumps detected (majority -20 s then +20 s)", detected);
    assert_safe_and_detected(&safe, detected, &logs);
}

#[test]
fn minority_jump_keeps_the_leader() {
    let nodes = nodes();
    let sidecars = trio(&nodes, &opts(true));
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let leader = settled_leader(&all);
    let before = sidecars[leader].leader();
    let checker = Checker::start(&sidecars.iter().map(|s| s.api_port).collect::<Vec<_>>());
    just_after_renewal(&nodes[0]);
    nodes[0].jump_clock(30_000);
    std::thread::sleep(Duration::from_secs(3));
    let (r, logs) = outcome(checker, &all);
    assert!(r.overlaps.is_empty(), "S1:\n{}{logs}", describe(&r));
    let after = sidecars[leader].leader();
    assert!(
        after.is_leader && after.fencing_token == before.fencing_token,
        "one stepped node of three must not cost the leader its term: {before:?} -> {after:?}\n{logs}"
    );
    let ep = format!("127.0.0.1:{}", nodes[0].port);
    let q = metric(
        &sidecars[leader],
        "redlock_elector_redis_clock_jumps_total",
        &[("endpoint", &ep), ("direction", "forward")],
    );
    assert_eq!(q, Some(1.0), "the leader counts the jump on {ep}:\n{logs}");
    assert!(
        sidecars[leader]
            .logs()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("wall clock jumped") && l.contains(&ep)),
        "a warn line names the endpoint:\n{logs}"
    );
}

/// A leader alone; a majority steps forward; a fresh sidecar starts right after. Its first
/// reading of each node comes after the step, so it cannot see it: only observing the nodes for
/// ttl + margin before counting them keeps it from leading beside the leader, and the leader,
/// whose readings reveal the step, vouches for its watch only on the node that did not step.
/// `leader_extra` are the leader's extra flags (the attestation switch). Returns the checker's
/// report, when the fresh sidecar first counted a quorum (with the check) or led (without),
/// and the logs.
fn fresh_sidecar_scenario(
    fresh_detection: bool,
    leader_extra: &[&str],
) -> (Report, Duration, String) {
    let nodes = nodes();
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut leader_opts = opts(true);
    leader_opts
        .extra
        .extend(leader_extra.iter().map(|f| f.to_string()));
    let leader = Sidecar::start("a", &refs, &leader_opts);
    settled_leader(&[&leader]);
    let checker = Checker::start(&[leader.api_port, 0]);
    just_after_renewal(&nodes[0]);
    nodes[0].jump_clock(20_000);
    nodes[1].jump_clock(20_000);
    let started = Instant::now();
    let fresh = Sidecar::start("b", &refs, &opts(fresh_detection));
    checker.point(1, fresh.api_port);
    // With the check, the fresh sidecar counts the nodes (`eligible`) once it has watched them
    // for ttl + margin; by then the old leader's quarantine of the stepped nodes ends too, and
    // either may win the next term. Without it, it leads at once beside the old leader.
    let safe = fresh_detection && leader_extra.is_empty();
    let counted = wait_for(TTL * 5, Duration::from_millis(2), || {
        let v = fresh.leader();
        (v.is_leader || (safe && v.eligible)).then(|| started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    let (r, logs) = outcome(checker, &[&leader, &fresh]);
    let counted =
        counted.unwrap_or_else(|| panic!("the fresh sidecar never counted a quorum:\n{logs}"));
    (r, counted, logs)
}

#[test]
fn jump_while_a_fresh_sidecar_starts() {
    let (safe, first_term, logs) = fresh_sidecar_scenario(true, &[]);
    report(
        "fresh sidecar counts a quorum after start (watching ttl + margin)",
        format!("{first_term:?}"),
    );
    assert!(
        safe.overlaps.is_empty(),
        "S1 violated with observe-before-counting:\n{}{logs}",
        describe(&safe)
    );
    assert!(
        first_term >= TTL,
        "the fresh sidecar counted nodes it had watched for less than ttl: {first_term:?}"
    );
    // The leader's readings revealed the step on two nodes: it vouched for the third only.
    assert!(
        logs.contains("vouched for this sidecar's watch"),
        "the leader should still vouch on the node that did not step:\n{logs}"
    );
    let (r, _, logs) = fresh_sidecar_scenario(false, &[]);
    assert!(
        !r.overlaps.is_empty(),
        "a fresh sidecar without the check should lead beside the leader, and the checker should see it:\n{}{logs}",
        describe(&r)
    );
}

/// Attestations (issue 25): the same step, and the leader asked for vouches by the fresh
/// sidecar. With the check (`jump_while_a_fresh_sidecar_starts`) it vouches only on the node
/// that did not step, so the fresh sidecar still waits for its own watch. Under `--unsafe-disable-attestation-check`
/// the leader vouches for the stepped nodes too, though its own readings just revealed the step:
/// the fresh sidecar counts them at once and leads beside it.
#[test]
fn a_vouch_across_a_jump_needs_the_attestation_check() {
    let (r, led, logs) = fresh_sidecar_scenario(true, &["--unsafe-disable-attestation-check"]);
    report(
        "fresh sidecar led after a vouch across a jump (attestation check off)",
        format!("{led:?}"),
    );
    assert!(
        !r.overlaps.is_empty(),
        "with the leader vouching across the step, the fresh sidecar should lead beside it, and the checker should see it:\n{}{logs}",
        describe(&r)
    );
}

/// The release proof (issue 25). A majority of nodes steps forward just after the leader A's
/// renewal, so A's keys vanish there (A's next renewal heals them, and sees the jump). B starts
/// right after the step, so its own watch cannot see it, and A is terminated before its deadline:
/// its graceful release names B, but A no longer counts the stepped nodes, so it leaves its proof
/// only on the third. B must not count the stepped nodes on A's word: it waits for its own watch
/// (ttl + margin). Under `--unsafe-disable-release-proof-check` B counts every grant of its named
/// attempt and leads at once, on nodes nobody vouched for. Returns how long after the release B
/// led, how long its watch still had to run then, and the logs.
fn proof_scenario(check: bool) -> (Duration, Duration, String) {
    // ttl 2 s: room for B to start and become a ready candidate within A's validity.
    let ttl = Duration::from_secs(2);
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start_shiftable()).collect();
    std::thread::sleep(ttl + Duration::from_millis(1100));
    let refs: Vec<&Redis> = nodes.iter().collect();
    let o = |check: bool| {
        let mut o = opts(true);
        o.ttl = "2s";
        if !check {
            // Since issue 52 a proof counts only for a watch that counts anyway (proof
            // continuity): the unchecked proof's hazard needs that path open too.
            o.extra.push("--unsafe-disable-release-proof-check".into());
            o.extra.push("--unsafe-disable-proof-continuity".into());
        }
        o
    };
    let mut a = Sidecar::start("a", &refs, &o(true));
    a.wait_eligible(ttl * 3);
    wait_for(ttl * 3, Duration::from_millis(5), || {
        a.leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| panic!("a never led:\n{}", a.logs()));
    common::just_after_renewal(&nodes[0], KEY, ttl * 3);
    nodes[0].jump_clock(20_000);
    nodes[1].jump_clock(20_000);
    let b = Sidecar::start("b", &refs, &o(check));
    // B's watch runs. Its candidate record says ready on the proof only with the switches: with
    // every defence on a fresh watch that nobody vouched for is no ready candidate (issue 52).
    wait_for(ttl, Duration::from_millis(2), || {
        let v = b.leader();
        (v.quorum_counts_in_ms.is_some() && v.candidate_ready != check).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "b's watch never began (or b's readiness is wrong):\n{}",
            b.logs()
        )
    });
    let view = b.leader();
    assert_eq!(view.waiting_for.as_deref(), Some("clock_watch"), "{view:?}");
    let watch_left = Duration::from_millis(view.quorum_counts_in_ms.expect("known"));
    assert!(
        a.leader().is_leader,
        "a lost the lease before its release:\n{}",
        a.logs()
    );
    let released = Instant::now();
    let _ = a.terminate();
    let led = wait_for(ttl * 4, Duration::from_millis(1), || {
        b.leader().is_leader.then(|| released.elapsed())
    });
    let logs = format!("--- a:\n{}--- b:\n{}", a.logs(), b.logs());
    let led = led.unwrap_or_else(|| panic!("b never led:\n{logs}"));
    (led, watch_left, logs)
}

#[test]
fn fresh_successor_counts_only_nodes_the_release_proves() {
    let (led, watch_left, logs) = proof_scenario(true);
    report(
        "fresh successor after a majority jump before the release: led after",
        format!("{led:?} (its watch had {watch_left:?} to run)"),
    );
    // It may lead only once its own watch lets it count a quorum (less the time between the
    // reading of `quorum_counts_in_ms` and the release).
    assert!(
        led + Duration::from_millis(150) >= watch_left,
        "b led {led:?} after the release, before its watch could count the stepped nodes \
         ({watch_left:?} left): it counted votes no proof backed\n{logs}"
    );
    assert!(
        logs.contains("\"reason\":\"clock_watch\""),
        "b did not say why it could not count a quorum:\n{logs}"
    );
    let (led, watch_left, logs) = proof_scenario(false);
    assert!(
        led + Duration::from_millis(150) < watch_left,
        "without the proof check b should lead at once on nodes nobody vouched for \
         (led {led:?}, watch {watch_left:?} left)\n{logs}"
    );
}

/// Issue 34's first trace, at the suite's settings (ttl 1 s, `redis.timeout` 50 ms). Follower
/// B's links to nodes 0 and 1 get 300 ms of request latency: its scripts time out there, but its
/// maintenance `TIME` reads succeed with a 300 ms request leg. Leader A renews, then its links to
/// nodes 0 and 1 are cut; nodes 0 and 1 step 200 ms forward and B's latency ends. A's keys there
/// expire 200 ms early, at about T + 800 ms, while A answers "leader" until about T + 988 ms.
///
/// Before the blind band was paid for, B's slow readings were the bases of its next comparisons
/// and their 300 ms allowance hid the step: B counted the nodes, won them at their early expiry
/// and led beside A. Now a slow reading is never a base: after a slow phase shorter than the
/// window the fast reading that follows is compared with the fast base before it, and after a
/// longer one the watch begins again. `slow_for`: how long B's links stay slow.
fn slow_readings_then_a_step(defence: bool, slow_for: Duration) -> (Report, f64, String) {
    let nodes = nodes();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let proxy = fault::proxy::Proxy::new(2, &ports);
    let mut o = opts(true);
    if !defence {
        o.extra.push("--unsafe-disable-blind-band".into());
    }
    let a = Sidecar::start_urls("a", &proxy.urls(0), &o);
    settled_leader(&[&a]);
    let b = Sidecar::start_urls("b", &proxy.urls(1), &o);
    b.wait_eligible(TTL * 4);
    let checker = Checker::start(&[a.api_port, b.api_port]);
    let slow = fault::proxy::LinkFault {
        latency: Duration::from_millis(300),
        blackhole: false,
    };
    proxy.set(1, 0, slow);
    proxy.set(1, 1, slow);
    std::thread::sleep(slow_for);
    just_after_renewal(&nodes[0]);
    let cut = fault::proxy::LinkFault {
        latency: Duration::ZERO,
        blackhole: true,
    };
    proxy.set(0, 0, cut);
    proxy.set(0, 1, cut);
    nodes[0].jump_clock(200);
    nodes[1].jump_clock(200);
    proxy.reset(1, 0);
    proxy.reset(1, 1);
    proxy.set(1, 0, fault::proxy::LinkFault::default());
    proxy.set(1, 1, fault::proxy::LinkFault::default());
    std::thread::sleep(Duration::from_secs(3));
    let (r, logs) = outcome(checker, &[&a, &b]);
    (r, jumps(&b), logs)
}

#[test]
fn a_step_behind_slow_readings_shortens_no_lease() {
    for slow_for in [Duration::from_millis(600), Duration::from_secs(2)] {
        let (safe, jumps_b, logs) = slow_readings_then_a_step(true, slow_for);
        assert!(
            safe.overlaps.is_empty(),
            "S1 violated with the blind band paid for ({slow_for:?} of slow readings):\n{}{logs}",
            describe(&safe)
        );
        assert!(safe.token_violations.is_empty(), "S2:\n{}", describe(&safe));
        report(
            &format!("jumps b counted after {slow_for:?} of slow readings, then +200 ms"),
            jumps_b,
        );
    }
    // With the switch, B's watch misses the step and B leads beside A. A scheduling hiccup
    // (B attempting after A's deadline) can spoil a run: allow three.
    let mut found = None;
    for attempt in 1..=3 {
        let (r, jumps_b, logs) = slow_readings_then_a_step(false, Duration::from_secs(2));
        if let Some(o) = r.overlaps.first() {
            found = Some((attempt, o.to.saturating_sub(o.from), jumps_b));
            break;
        }
        eprintln!("attempt {attempt} with the blind band unpaid found no overlap:\n{logs}");
    }
    let (attempt, overlap, jumps_b) =
        found.expect("with --unsafe-disable-blind-band the checker must find two leaders");
    report("attempts to show the hazard (blind band unpaid)", attempt);
    report(
        "overlap with the blind band unpaid (b's jump count)",
        format!("{overlap:?} ({jumps_b})"),
    );
}

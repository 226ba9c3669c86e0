//! Finding 9 (issue 52; found by the CI fault schedule, `FAULT_SEED=1`): a renewal that reads a
//! node while its clock is stepped back sets the key's expiry to that node's now + ttl, earlier
//! on its clock than the expiry the holder's deadline rests on. The forward step that undoes the
//! backward one then ends the key before the deadline, and a taker whose watch read the node only
//! before and after both steps sees net zero and counts it. The renewal script now only ever
//! lengthens a key (docs/concepts/clock-jumps.md, "The bound": expiries only grow).

use testkit::common;
use testkit::fault;

use std::time::{Duration, Instant};

use common::*;
use fault::checker::{Checker, Report, analyze};
use fault::describe;
use fault::proxy::{LinkFault, Proxy};

const TTL: Duration = Duration::from_secs(6);
const KEY: &str = "redlock-elector:test";
/// The step back and forth, ms: more than the renewal period (ttl/3), so that a key renewed
/// between the steps ends before the deadline of the renewal before them.
const STEP_MS: i64 = 4_000;
/// Nodes X and Y step (a majority of three); Z does not.
const X: usize = 0;
const Y: usize = 1;
const Z: usize = 2;

/// What one run saw.
struct Run {
    report: Report,
    /// P's and B's checker slots.
    p: usize,
    b: usize,
    /// P's key's time to live on X right after the undo, ms (the node's `PTTL`).
    pttl_after_undo: i64,
    logs: String,
}

/// P leads and B follows, on X, Y, Z through the proxy.
///
/// 1. Just after P's renewal, B is cut off from X and Y, and X and Y step back 4 s.
/// 2. P's next renewal reads X and Y stepped back (P sees the step and stops counting them, so
///    it keeps the deadline of the renewal before). Then P is cut off from X and Y, the two
///    step forward 4 s, and B's links heal.
/// 3. B's watch read X and Y only before and after both steps: net zero, it counts them and
///    takes the lease as soon as P's keys there are gone.
///
/// Where the renewal between the steps set the key to the stepped-back now + ttl
/// (`--unsafe-allow-renewal-to-shorten`), P's keys on X and Y end 4 s early on their clocks,
/// 2 s after that renewal, while P leads on until about a ttl after the renewal before: two
/// leaders. Where it kept the longer expiry, they end at that renewal's ttl, after P's deadline.
fn renewal_between_steps(defence: bool) -> Run {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start_shiftable()).collect();
    let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
    let proxy = Proxy::new(2, &ports);
    let mut extra = vec![];
    if !defence {
        extra.push("--unsafe-allow-renewal-to-shorten".to_string());
    }
    let o = Opts {
        ttl: "6s",
        extra,
        ..Opts::default()
    };
    let both: Vec<Sidecar> = ["p", "q"]
        .iter()
        .enumerate()
        .map(|(row, id)| Sidecar::start_urls(id, &proxy.urls(row), &o))
        .collect();
    for s in &both {
        s.wait_eligible(TTL * 2);
    }
    let (pi, bi) = leader_and_follower([&both[0], &both[1]], TTL);
    let (p, b) = (&both[pi], &both[bi]);
    let logs = || {
        format!(
            "--- P ({}):\n{}--- B ({}):\n{}",
            p.identity,
            p.logs(),
            b.identity,
            b.logs()
        )
    };
    let checker = Checker::start(&[both[0].api_port, both[1].api_port]);

    common::just_after_renewal(&nodes[X], KEY, TTL);
    let renewed = Instant::now();
    proxy.set(bi, X, LinkFault::CUT);
    proxy.set(bi, Y, LinkFault::CUT);
    nodes[X].jump_clock(-STEP_MS);
    nodes[Y].jump_clock(-STEP_MS);

    // P's next renewal (a third of the ttl later) reads both stepped back: P logs each step.
    let steps_seen = || {
        p.logs()
            .lines()
            .filter(|l| l.contains("wall clock jumped") && l.contains("\"backward\""))
            .count()
    };
    wait_for(TTL, Duration::from_millis(1), || {
        (steps_seen() >= 2).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "p never read X and Y stepped back ({:?} after its renewal):\n{}",
            renewed.elapsed(),
            logs()
        )
    });
    let renewal_between = renewed.elapsed();
    // Before P retries (it counts only Z now): no later write of P's reaches X or Y.
    proxy.set(pi, X, LinkFault::CUT);
    proxy.set(pi, Y, LinkFault::CUT);
    nodes[X].jump_clock(STEP_MS);
    nodes[Y].jump_clock(STEP_MS);
    let pttl_after_undo = nodes[X]
        .cli(&["PTTL", KEY])
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(-2);
    for n in [X, Y] {
        proxy.reset(bi, n);
        proxy.set(bi, n, LinkFault::default());
    }

    // B leads once P's keys on X and Y are gone: before P's deadline where the renewal cut them
    // short, after it where it did not. Either way past P's deadline (about a ttl after its
    // renewal before the steps) so that any overlap is in the record.
    wait_for(TTL * 2, Duration::from_millis(5), || {
        (b.leader().is_leader && !p.leader().is_leader).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "b never led alone (renewal between the steps {renewal_between:?} after the one \
             before; Z: {:?}):\n{}",
            nodes[Z].cli(&["GET", KEY]),
            logs()
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    let obs = checker.finish();
    Run {
        report: analyze(&obs.segments),
        p: pi,
        b: bi,
        pttl_after_undo,
        logs: logs(),
    }
}

#[test]
fn a_renewal_between_a_step_and_its_undo_keeps_the_key() {
    let run = renewal_between_steps(false);
    report(
        "P's key on X right after the undo, renewal allowed to shorten (ms)",
        run.pttl_after_undo,
    );
    let o = run.report.overlaps.first().unwrap_or_else(|| {
        panic!(
            "with --unsafe-allow-renewal-to-shorten the checker must find two leaders:\n{}{}",
            describe(&run.report),
            run.logs
        )
    });
    let pair = [o.a.0.min(o.b.0), o.a.0.max(o.b.0)];
    assert_eq!(
        pair,
        [run.p.min(run.b), run.p.max(run.b)],
        "the overlap should be P's term and B's:\n{}{}",
        describe(&run.report),
        run.logs
    );
    report(
        "overlap with the renewal allowed to shorten the key",
        format!("{:?}", o.to.saturating_sub(o.from)),
    );

    let run = renewal_between_steps(true);
    report(
        "P's key on X right after the undo, renewal only lengthens (ms)",
        run.pttl_after_undo,
    );
    assert!(
        run.report.overlaps.is_empty(),
        "S1 violated with renewals that only lengthen the key:\n{}{}",
        describe(&run.report),
        run.logs
    );
    assert!(
        run.report.token_violations.is_empty(),
        "S2:\n{}",
        describe(&run.report)
    );
}

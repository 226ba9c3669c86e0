//! Unit tests of the clock-jump detection ([`super`]).

use super::*;
use std::time::Duration;

const S: i64 = 1_000_000;
const MS: i64 = 1_000;
const T0: i64 = 1_700_000_000 * S;

fn policy() -> Policy {
    Policy::new(Duration::from_secs(1), 0.01, true)
}

/// A reading sent at local `at`, with a round trip of `rtt`, node read at the midpoint with
/// the node's clock `offset` ahead of true time.
fn reading(at: i64, rtt: i64, offset: i64) -> Reading {
    Reading {
        node_us: T0 + at + rtt / 2 + offset,
        sent_us: at,
        received_us: at + rtt,
    }
}

#[test]
fn window_is_ttl_plus_drift() {
    assert_eq!(policy().window_us, (1000 + 12) * MS);
}

#[test]
fn steady_clocks_are_not_jumps() {
    let p = policy();
    let mut w = Watch::default();
    assert_eq!(w.observe("a", reading(0, 200, 0), &p), Seen::First);
    for i in 1..50 {
        assert_eq!(
            w.observe("a", reading(i * 300 * MS, 200, 0), &p),
            Seen::Steady
        );
    }
}

#[test]
fn a_forward_step_is_a_jump_and_quarantines_from_the_arrival() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let r = reading(300 * MS, 100, 20 * S);
    match w.observe("a", r, &p) {
        Seen::Jumped { jump, until_us } => {
            assert_eq!(jump.direction, Direction::Forward);
            assert!((jump.size_us - 20 * S).abs() < MS, "{jump:?}");
            assert_eq!(until_us, r.received_us + p.window_us);
        }
        other => panic!("{other:?}"),
    }
    assert!(w.quarantined_at(r.received_us + p.window_us - 1));
    assert!(!w.counts_at(r.received_us + p.window_us - 1, &p));
    assert!(w.counts_at(r.received_us + p.window_us, &p));
    // The jumped reading is the new base: the next steady reading is no jump.
    assert_eq!(
        w.observe("a", reading(600 * MS, 100, 20 * S), &p),
        Seen::Steady
    );
}

#[test]
fn a_backward_step_is_a_jump_too() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let seen = w.observe("a", reading(300 * MS, 100, -5 * S), &p);
    assert!(matches!(seen, Seen::Jumped { jump, .. } if jump.direction == Direction::Backward));
}

#[test]
fn slow_replies_widen_the_allowance() {
    let p = policy();
    // A 40 ms step hidden in two 50 ms round trips (the node may have read its clock at
    // either end of each): not provable, so not a jump.
    let prev = Reading {
        node_us: T0,
        sent_us: 0,
        received_us: 50 * MS,
    };
    let next = Reading {
        node_us: T0 + 300 * MS + 40 * MS,
        sent_us: 300 * MS,
        received_us: 350 * MS,
    };
    assert_eq!(check(&prev, &next, &p), None);
    // The same step with fast round trips is one.
    let prev = Reading {
        node_us: T0,
        sent_us: 0,
        received_us: 100,
    };
    let next = Reading {
        node_us: T0 + 300 * MS + 40 * MS,
        sent_us: 300 * MS,
        received_us: 300 * MS + 100,
    };
    assert!(check(&prev, &next, &p).is_some());
}

#[test]
fn slewing_within_the_drift_is_allowed() {
    let p = policy();
    let mut w = Watch::default();
    // The node's clock runs 0.9 % fast (within driftFactor 1 %) for 100 s.
    let mut offset = 0;
    w.observe("a", reading(0, 100, 0), &p);
    for i in 1..=100 {
        offset += 9 * MS;
        assert_eq!(
            w.observe("a", reading(i * S, 100, offset), &p),
            Seen::Steady,
            "{i}"
        );
    }
    // 1.2 % fast is not.
    let seen = w.observe("a", reading(101 * S, 100, offset + 12 * MS), &p);
    assert!(matches!(seen, Seen::Jumped { .. }));
}

#[test]
fn a_one_ms_step_is_within_the_slack() {
    let p = policy();
    let prev = reading(0, 100, 0);
    // 1 ms over 10 ms: inside 1 ms slack + 0.1 ms of drift.
    assert_eq!(check(&prev, &reading(10 * MS, 100, MS), &p), None);
    assert_eq!(check(&prev, &reading(10 * MS, 100, -MS), &p), None);
    // 2 ms over 10 ms with 0.1 ms round trips: a jump.
    assert!(check(&prev, &reading(10 * MS, 100, 2 * MS), &p).is_some());
    assert!(check(&prev, &reading(10 * MS, 100, -2 * MS), &p).is_some());
}

#[test]
fn overlapping_readings_of_concurrent_commands() {
    let p = policy();
    // B was sent after A and arrived before it: the node may have read A's time after B's.
    let b = Reading {
        node_us: T0 + 2 * MS,
        sent_us: MS,
        received_us: 3 * MS,
    };
    let a = Reading {
        node_us: T0 + MS,
        sent_us: 0,
        received_us: 4 * MS,
    };
    assert_eq!(check(&b, &a, &p), None);
}

#[test]
fn a_reconnect_to_the_same_server_keeps_the_watch() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    // Half a window without a reading (reconnecting), same server: still compared.
    assert_eq!(w.observe("a", reading(500 * MS, 100, 0), &p), Seen::Steady);
    assert!(w.counts_at(2 * S, &p));
    let seen = w.observe("a", reading(S, 100, 30 * S), &p);
    assert!(matches!(seen, Seen::Jumped { .. }));
}

#[test]
fn a_long_gap_starts_the_watch_again() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    assert!(w.counts_at(2 * S, &p));
    // 100 s without a reading: a forward step of 900 ms hides inside ρ × gap = 1 s, far
    // more than the lease's drift margin (12 ms). Not provable, so the node must be watched
    // afresh before it counts again.
    let back = reading(100 * S, 100, 900 * MS);
    assert_eq!(check(&reading(0, 100, 0), &back, &p), None);
    assert_eq!(
        w.observe("a", back, &p),
        Seen::Resumed {
            gap_us: 100 * S + 100
        }
    );
    assert!(!w.counts_at(back.received_us + p.window_us - 1, &p));
    assert!(w.counts_at(back.received_us + p.window_us, &p));
    // Readings within the window keep it going, and a jump after the gap is still seen.
    assert_eq!(
        w.observe("a", reading(100 * S + 300 * MS, 100, 900 * MS), &p),
        Seen::Steady
    );
    let seen = w.observe("a", reading(101 * S, 100, 20 * S), &p);
    assert!(matches!(seen, Seen::Jumped { .. }));
    // Exactly the window apart is still one watch; just over it is not.
    let mut w = Watch::default();
    w.observe("a", reading(0, 0, 0), &p);
    assert_eq!(w.observe("a", reading(p.window_us, 0, 0), &p), Seen::Steady);
    assert!(matches!(
        w.observe("a", reading(2 * p.window_us + 1, 0, 0), &p),
        Seen::Resumed { .. }
    ));
}

#[test]
fn a_jump_after_a_long_gap_quarantines() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let r = reading(10 * S, 100, 30 * S);
    assert!(matches!(w.observe("a", r, &p), Seen::Jumped { .. }));
    assert!(!w.counts_at(r.received_us + p.window_us - 1, &p));
}

#[test]
fn a_new_run_id_starts_a_new_watch() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    assert!(w.counts_at(2 * S, &p));
    // The restarted server's clock differs wildly: not a jump, a new watch.
    assert_eq!(w.observe("b", reading(2 * S, 100, 50 * S), &p), Seen::First);
    assert!(!w.counts_at(2 * S + 100, &p));
    assert!(w.counts_at(2 * S + 100 + p.window_us, &p));
}

#[test]
fn observe_before_counting() {
    let p = policy();
    let mut w = Watch::default();
    assert_eq!(w.counts_from(&p), None);
    assert!(!w.counts_at(i64::MAX, &p));
    w.observe("a", reading(5 * S, 100, 0), &p);
    assert_eq!(w.counts_from(&p), Some(5 * S + 100 + p.window_us));
    assert!(!w.counts_at(5 * S + p.window_us, &p));
}

#[test]
fn a_vouch_for_the_current_watch_counts_from_its_reading() {
    let p = policy();
    let mut w = Watch::default();
    assert_eq!(w.epoch(), None);
    w.observe("a", reading(0, 100, 0), &p);
    let (run, epoch) = w.epoch().map(|(r, e)| (r.to_string(), e)).unwrap();
    assert_eq!(run, "a");
    w.observe("a", reading(10 * MS, 100, 0), &p);
    assert!(!w.counts_at(20 * MS, &p), "fresh: the window is not over");
    // Another server, or another watch, is not this one.
    assert!(!w.attest("b", epoch, 20 * MS));
    assert!(!w.attest("a", epoch + 1, 20 * MS));
    assert!(w.attest("a", epoch, 20 * MS));
    assert!(w.vouched());
    assert_eq!(w.counts_from(&p), Some(20 * MS));
    assert!(w.counts_at(20 * MS, &p) && !w.counts_at(20 * MS - 1, &p));
}

#[test]
fn a_new_watch_forgets_the_vouch_and_refuses_one_for_the_old_watch() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let old = w.epoch().unwrap().1;
    assert!(w.attest("a", old, 100));
    // A long gap: the watch begins again, with a new epoch.
    assert!(matches!(
        w.observe("a", reading(5 * S, 100, 0), &p),
        Seen::Resumed { .. }
    ));
    assert!(!w.vouched());
    assert_ne!(w.epoch().unwrap().1, old);
    assert!(!w.attest("a", old, 5 * S + 100));
    assert!(!w.counts_at(5 * S + 200, &p));
    // A restarted server too.
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let old = w.epoch().unwrap().1;
    w.observe("b", reading(MS, 100, 0), &p);
    assert!(!w.attest("b", old, MS + 100));
}

#[test]
fn a_jump_quarantine_outranks_a_vouch() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    let epoch = w.epoch().unwrap().1;
    let Seen::Jumped { until_us, .. } = w.observe("a", reading(100 * MS, 100, 5 * S), &p) else {
        panic!("a 5 s step is a jump");
    };
    assert!(!w.attest("a", epoch, 100 * MS + 100), "quarantined");
    assert!(!w.counts_at(until_us - 1, &p));
}

#[test]
fn only_a_sidecar_that_counts_the_node_at_the_reading_may_vouch() {
    let p = policy();
    let mut w = Watch::default();
    assert!(!w.may_vouch("a", 0, &p));
    w.observe("a", reading(0, 100, 0), &p);
    assert!(!w.may_vouch("a", 100, &p), "still watching");
    // Readings less than a window apart: the watch stays unbroken.
    w.observe("a", reading(p.window_us / 2, 100, 0), &p);
    w.observe("a", reading(p.window_us, 100, 0), &p);
    let at = p.window_us + 100;
    assert!(w.may_vouch("a", at, &p));
    assert!(!w.may_vouch("b", at, &p), "another server");
    // A jump revealed by this very reading: no vouch.
    w.observe("a", reading(p.window_us + 300 * MS, 100, 3 * S), &p);
    assert!(!w.may_vouch("a", p.window_us + 300 * MS + 100, &p));
    // The test-only switch vouches anyway.
    let off = Policy {
        attestation_check: false,
        ..p
    };
    assert!(w.may_vouch("a", p.window_us + 300 * MS + 100, &off));
}

#[test]
fn a_later_jump_extends_the_quarantine_never_shortens_it() {
    let p = policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    w.observe("a", reading(S, 100, 10 * S), &p);
    let first_end = S + 100 + p.window_us;
    w.observe("a", reading(S + 500 * MS, 100, 0), &p);
    assert_eq!(w.counts_from(&p), Some(S + 500 * MS + 100 + p.window_us));
    assert!(w.counts_from(&p) > Some(first_end));
}

#[test]
fn the_switch_turns_detection_off() {
    let p = Policy {
        enabled: false,
        ..policy()
    };
    let mut w = Watch::default();
    assert_eq!(w.counts_from(&p), Some(i64::MIN));
    w.observe("a", reading(0, 100, 0), &p);
    assert_eq!(w.observe("a", reading(S, 100, 20 * S), &p), Seen::Steady);
    assert!(w.counts_at(S, &p));
    assert_eq!(w.observe("a", reading(100 * S, 100, 0), &p), Seen::Steady);
}

#[test]
fn without_rewatching_a_long_gap_hides_a_step() {
    let p = Policy {
        rewatch_after_gap: false,
        ..policy()
    };
    let mut w = Watch::default();
    w.observe("a", reading(0, 100, 0), &p);
    assert_eq!(
        w.observe("a", reading(100 * S, 100, 900 * MS), &p),
        Seen::Steady
    );
    assert!(w.counts_at(100 * S + 100, &p));
}

#[test]
fn parses_time() {
    assert_eq!(parse_time("1700000000", "123456"), Some(T0 + 123_456));
    assert_eq!(parse_time("x", "1"), None);
}

mod band;
mod prop;

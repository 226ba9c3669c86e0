//! Unit tests of the blind band: which readings are bases, comparisons against every base,
//! and the band a reading leaves ([`crate::redlock::clock::Watch::band_us`]).

use super::*;

/// The suite's settings: ttl 1 s, `redis.timeout` 50 ms.
fn suite_policy() -> Policy {
    policy().with_base_rtt(Duration::from_millis(50))
}

/// A reading whose request leg is `up` and reply leg `down`, the node `offset` ahead.
fn legs(at: i64, up: i64, down: i64, offset: i64) -> Reading {
    Reading {
        node_us: T0 + at + up + offset,
        sent_us: at,
        received_us: at + up + down,
    }
}

#[test]
fn a_slow_reading_is_compared_but_never_a_base() {
    // Issue 34's trace: B's reads take a 300 ms request leg; then the node steps 200 ms
    // forward and the latency ends. Before, the slow reading became the base and the next fast
    // one, inside its 300 ms allowance, hid the step.
    for blind_check in [true, false] {
        let p = Policy {
            blind_check,
            ..suite_policy()
        };
        // A slow phase shorter than the window: the fast reading after the step is compared
        // with the fast base before it, and the step is seen.
        let mut w = Watch::default();
        w.observe("a", legs(0, 100, 100, 0), &p);
        for i in 1..=3 {
            let slow = legs(i * 200 * MS, 300 * MS, 100, 0);
            assert_eq!(w.observe("a", slow, &p), Seen::Steady);
        }
        let seen = w.observe("a", legs(950 * MS, 100, 100, 200 * MS), &p);
        assert_eq!(
            matches!(seen, Seen::Jumped { jump, .. } if jump.direction == Direction::Forward),
            blind_check,
            "blind_check {blind_check}: {seen:?}"
        );
        // A slow phase longer than the window: no base for a window, so the watch begins again
        // at the first fast reading and the node does not count for a window; before, it
        // counted at once.
        let mut w = Watch::default();
        w.observe("a", legs(0, 100, 100, 0), &p);
        for i in 1..=8 {
            w.observe("a", legs(i * 300 * MS, 300 * MS, 100, 0), &p);
        }
        let fast = legs(2_800 * MS, 100, 100, 200 * MS);
        w.observe("a", fast, &p);
        assert_eq!(
            w.counts_at(fast.received_us, &p),
            !blind_check,
            "blind_check {blind_check}"
        );
    }
}

#[test]
fn small_hidden_steps_do_not_add_up() {
    // 2.5 ms forward at every reading 150 ms apart, each within one comparison's allowance
    // (0.4 ms of round trips + 1.5 ms of drift + 1 ms of slack); against the bases of the
    // window they add up to a jump. Under the
    // switch (only the latest reading compared) they never do.
    let count = |blind_check: bool| {
        let p = Policy {
            blind_check,
            ..suite_policy()
        };
        let mut w = Watch::default();
        w.observe("a", reading(0, 400, 0), &p);
        (1..=40)
            .filter(|i| {
                let r = reading(i * 150 * MS, 400, i * 2_500);
                matches!(w.observe("a", r, &p), Seen::Jumped { .. })
            })
            .count()
    };
    assert!(count(true) > 0);
    assert_eq!(count(false), 0);
}

#[test]
fn the_band_is_both_round_trips_the_gap_drift_and_the_slack() {
    let p = suite_policy();
    let mut w = Watch::default();
    w.observe("a", reading(0, 2 * MS, 0), &p);
    assert_eq!(
        w.band_us(),
        p.max_band_us(2 * MS),
        "no base before the first"
    );
    w.observe("a", reading(300 * MS, 3 * MS, 0), &p);
    // Slowest base 2 ms + this reading's 3 ms, stretched by 1 %, + 1 % of the 303 ms gap + 1 ms.
    let want = ((5 * MS) as f64 * 1.01 + (303 * MS) as f64 * 0.01).ceil() as i64 + MS;
    assert_eq!(w.band_us(), want);
    // A slow reading's band counts its own round trip; the bases stay fast.
    w.observe("a", reading(600 * MS, 60 * MS, 0), &p);
    assert!(
        w.band_us() > 63 * MS && w.band_us() < 70 * MS,
        "{}",
        w.band_us()
    );
    w.observe("a", reading(900 * MS, 3 * MS, 0), &p);
    assert!(w.band_us() < 20 * MS, "{}", w.band_us());
    // The worst case the validator plans for: both round trips at the base bound, a gap of a
    // window.
    assert_eq!(
        p.max_band_us(50 * MS),
        ((100 * MS) as f64 * 1.01 + p.window_us as f64 * 0.01).ceil() as i64 + MS
    );
    let off = Policy {
        blind_check: false,
        ..p
    };
    assert_eq!(off.max_band_us(50 * MS), 0);
}

#[test]
fn a_slow_first_reading_begins_no_watch() {
    let p = suite_policy();
    let mut w = Watch::default();
    assert_eq!(w.observe("a", reading(0, 300 * MS, 0), &p), Seen::First);
    assert_eq!(w.counts_from(&p), None, "no base: nothing to compare with");
    assert_eq!(w.observe("a", reading(400 * MS, MS, 0), &p), Seen::First);
    assert_eq!(w.counts_from(&p), Some(401 * MS + p.window_us));
}

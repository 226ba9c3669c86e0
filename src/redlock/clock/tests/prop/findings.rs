//! The review's vectors for findings 1 to 3 ([`super`]), each shown overlapping with its fix
//! switched off and holding with it on.

use super::*;
/// Finding 2 (the review's port vector, 20 s later): forward steps each within `driftFactor`
/// of B's gap after it, just after A's renewal and B's next two readings, with A's clock at
/// 0.9901 × the node's. Off: 28 ms of two leaders.
fn finding_2() -> (Vector, Vec<(i64, i64)>) {
    let v = Vector {
        ttl_ms: 10_000,
        rates_ppm: [ppm(0.9901), ppm(1.0), ppm(1.0)],
        // A's bases 3.33 s apart, the renewal at 20 s.
        a: every(20 * SEC - 6 * 3_330_000 - 250, 3_330_000, 7, 500, 128),
        // B's readings 3.37 s apart, one 10 ms after A's renewal.
        b: every(20 * SEC - 16_840_000, 3_370_000, 14, 500, 128),
        c: every(0, SEC, 1, 500, 128),
        fresh: Fresh::Old,
        steps: Vec::new(),
        attempt: (0, 500, 128),
        in_key_life: false,
    };
    let steps = vec![
        (20 * SEC + 501, 35_205),
        (20 * SEC + 10_501, 33_700),
        (20 * SEC + 3_380_501, 33_700),
    ];
    (v, steps)
}

#[test]
fn finding_2_small_steps_that_add_up_are_paid_for() {
    let (v, steps) = finding_2();
    let off = Policy {
        span_check: false,
        ..policy(v.ttl_ms)
    };
    let why =
        check_steps(&v, &steps, &off).expect_err("the review's vector overlaps without the fix");
    eprintln!("span band off: {why}");
    check_steps(&v, &steps, &policy(v.ttl_ms)).unwrap();
}

/// Finding 1 (the review's interleaving, one node, 20 s later): B's watch reads the node every
/// 3.37 s; the node steps back 2 s at 20.10 s; A's watch begins at 20.15 s; C, the holder,
/// releases at 20.50 s with a proof (the node counted for it at sending); A's grant at 20.503 s
/// consumes it; the node steps forward 2 s at 20.52 s, before B's next reading. B's watch sees
/// nothing (−2 s + 2 s), A's key expires 2 s early. Off: about 1.7 s of two leaders.
fn finding_1() -> (Vector, Vec<(i64, i64)>) {
    let v = Vector {
        ttl_ms: 10_000,
        rates_ppm: [ppm(1.0), ppm(1.0), ppm(1.0)],
        a: Schedule {
            start: 20_150_000,
            gaps: vec![200_000, 153_000],
            legs: vec![(300, 128); 3],
        },
        b: every(20 * SEC - 5 * 3_370_000, 3_370_000, 9, 500, 128),
        c: every(20_500_000 - 6 * 3_300_000, 3_300_000, 7, 500, 128),
        fresh: Fresh::New,
        steps: Vec::new(),
        attempt: (0, 500, 128),
        in_key_life: false,
    };
    (v, vec![(20_100_000, -2 * SEC), (20_520_000, 2 * SEC)])
}

#[test]
fn finding_1_a_proof_for_a_fresh_watch_pays_for_a_step_back_before_it() {
    let (v, steps) = finding_1();
    let off = Policy {
        proof_continuity_check: false,
        ..policy(v.ttl_ms)
    };
    let why = check_steps(&v, &steps, &off)
        .expect_err("the review's interleaving overlaps without the fix");
    eprintln!("proof continuity off: {why}");
    check_steps(&v, &steps, &policy(v.ttl_ms)).unwrap();
}

/// Finding 3 (the review's vector, section 3): bases of 49 ms round trip (the node reading at
/// one end), a +148 ms step between the first two, slow readings (120 ms, never bases) between,
/// and a fast reading last. Every reading is steady, and the last one's band, which counted
/// the slowest base's round trip and its own (not the second base's), is 101.5 ms: 46.5 ms of
/// the step is missed. The fix pays what a band misses in every term's margin
/// ([`Policy::term_margin`]): with it, band and margin cover the step; without it, they
/// cover the band alone.
#[test]
fn finding_3_a_step_between_slow_bases_is_paid_for() {
    for span_check in [false, true] {
        let p = Policy {
            span_check,
            ..policy(10_000)
        };
        // (sent, rtt, node point 0..=255, step before the node's reading)
        let table = [
            (0, 49_000, 255, 0),
            (3_370_000, 120_000, 0, 148_000),
            (5_000_000, 49_000, 0, 148_000),
            (8_400_000, 120_000, 0, 148_000),
            (10_000_000, 500, 0, 148_000),
        ];
        let mut w = Watch::default();
        for (sent, rtt, point, step) in table {
            let node = T0 + sent + rtt * point / 255 + step;
            let r = Reading {
                node_us: node,
                sent_us: sent,
                received_us: sent + rtt,
            };
            let seen = w.observe("x", r, &p);
            assert!(matches!(seen, Seen::First | Seen::Steady), "{seen:?}");
        }
        let band = w.band_us();
        assert!((101_000..102_000).contains(&band), "{band}");
        let ttl = Duration::from_secs(10);
        let beyond_drift = (p.term_margin(ttl) - math::drift(ttl, 0.01)).as_micros() as i64;
        let paid = band + beyond_drift;
        assert_eq!(
            paid >= 148_000,
            span_check,
            "paid {paid} µs for a 148 ms step"
        );
    }
}

//! The generated vectors and the searches over them ([`super`]): 120 000 per CI run with the
//! fixes, and the searches that must find an overlap with each fix switched off.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestError, TestRunner};
/// A round trip: fast, at the base bound, or slow (never a base); the node's point at an end
/// or anywhere.
fn leg() -> impl Strategy<Value = (i64, u8)> {
    let rtt = prop_oneof![
        3 => 100i64..2_000,
        3 => (BASE_RTT_US - 2_000)..=BASE_RTT_US,
        1 => 0i64..=BASE_RTT_US,
        1 => (BASE_RTT_US + 1)..(3 * BASE_RTT_US),
    ];
    let point = prop_oneof![2 => Just(0u8), 2 => Just(255u8), 1 => any::<u8>()];
    (rtt, point)
}

/// Gaps in thousandths of the window: the watch's cadence (a third, an eighth), near the
/// window, or short.
fn gap(window: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        3 => (100i64..=340).prop_map(move |m| window * m / 1000),
        2 => (900i64..=1000).prop_map(move |m| window * m / 1000),
        2 => (1i64..=1000).prop_map(move |m| window * m / 1000),
        1 => 1_000i64..50_000,
    ]
}

fn schedule(window: i64, start: i64, n: std::ops::Range<usize>) -> impl Strategy<Value = Schedule> {
    // Irregular gaps, or the regular cadence of a watch (every gap the same).
    let gaps = move |n: usize| {
        prop_oneof![
            proptest::collection::vec(gap(window), n - 1),
            (window / 8..=window * 34 / 100).prop_map(move |g| vec![g; n - 1]),
        ]
    };
    let legs = |n: usize| {
        prop_oneof![
            proptest::collection::vec(leg(), n),
            leg().prop_map(move |l| vec![l; n]),
        ]
    };
    (n, Just(start)).prop_flat_map(move |(n, start)| {
        (Just(start), gaps(n), legs(n)).prop_map(|(start, gaps, legs)| Schedule {
            start,
            gaps,
            legs,
        })
    })
}

/// A step: anchored to a reading, just before or after it or further off; large (any size,
/// either sign) or small (within a comparison's allowance).
fn step(window: i64) -> impl Strategy<Value = (usize, i64, Size)> {
    let offset = prop_oneof![
        3 => -3_000i64..3_000,
        3 => 1i64..1_000,
        2 => (-window / 2)..(window / 2),
    ];
    let size = prop_oneof![
        2 => (-3_000_000i64..3_000_000).prop_map(Size::Abs),
        1 => (-60_000i64..60_000).prop_map(Size::Abs),
        3 => (500i64..=1_000).prop_map(Size::Rel),
        3 => (950i64..=1_000).prop_map(Size::Rel),
        2 => (-30_000i64..30_000).prop_map(Size::Undo),
    ];
    (any::<usize>(), offset, size)
}

fn rates() -> impl Strategy<Value = [i64; 3]> {
    // Each rate `lo + base + x` with `x` within 0.99 ρ: every pair within 0.99 ρ of each other,
    // and each within ρ of the node's rate 1 (`lo` just above 1 − ρ, `base + x` < 2 ρ). The
    // extremes favoured.
    let x = || prop_oneof![2 => Just(0i64), 2 => Just(9_890i64), 1 => 0i64..9_890];
    let base = prop_oneof![Just(0i64), Just(9_900i64), 0i64..9_900];
    (base, x(), x(), x()).prop_map(|(b, a, bb, c)| [b + a, b + bb, b + c])
}

fn vector(fresh: Fresh) -> impl Strategy<Value = Vector> {
    let ttl = prop_oneof![3 => Just(10_000u64), 1 => Just(1_000u64), 1 => Just(60_000u64)];
    (ttl, rates()).prop_flat_map(move |(ttl_ms, rates_ppm)| {
        let window = policy(ttl_ms).window_us;
        // A's term begins around two windows in: B's and C's watches count by then.
        let a_start = match fresh {
            Fresh::Old => Just(0i64).boxed(),
            Fresh::New => (2 * window..2 * window + window / 2).boxed(),
        };
        let a_len = match fresh {
            Fresh::Old => 6usize..14,
            Fresh::New => 1usize..5,
        };
        (
            a_start.prop_flat_map(move |s| schedule(window, s, a_len.clone())),
            schedule(window, 0, 14..30),
            schedule(window, 0, 8..24),
            proptest::collection::vec(step(window), 0..7),
            (0i64..5_000, leg()),
        )
            .prop_map(move |(a, b, c, steps, (delay, (rtt, point)))| Vector {
                ttl_ms,
                rates_ppm,
                a,
                b,
                c,
                fresh,
                steps,
                attempt: (delay, rtt, point),
                in_key_life: false,
            })
    })
}

/// Finding 2's and 3's family: a renewal's key, B's watch at a regular cadence (fast or
/// slow readings), A at the slow edge of the rates, and forward steps each just under what
/// the comparison of B's readings around it lets pass, just after readings.
fn small_steps() -> impl Strategy<Value = Vector> {
    let ttl = prop_oneof![3 => Just(10_000u64), 1 => Just(1_000u64), 1 => Just(60_000u64)];
    (ttl, 0i64..200, prop_oneof![Just(0i64), 0i64..9_890]).prop_flat_map(|(ttl_ms, lo, b_rate)| {
        let window = policy(ttl_ms).window_us;
        let cadence = move || window / 8..=window * 34 / 100;
        let rtt = || prop_oneof![3 => 100i64..2_000, 1 => (BASE_RTT_US - 2_000)..=BASE_RTT_US];
        let point = || prop_oneof![Just(0u8), Just(128u8), Just(255u8)];
        (
            (cadence(), 6usize..10, rtt(), point()),
            (cadence(), 0..window / 8, 14usize..30, rtt(), point()),
            proptest::collection::vec(
                (
                    any::<usize>(),
                    1i64..1_000,
                    (900i64..=1_000).prop_map(Size::Rel),
                ),
                1..5,
            ),
            (0i64..5_000, leg()),
        )
            .prop_map(move |(a, b, steps, (delay, attempt))| Vector {
                ttl_ms,
                rates_ppm: [lo, lo + b_rate, lo],
                a: every(0, a.0, a.1, a.2, a.3),
                b: every(b.1, b.0, b.2, b.3, b.4),
                c: every(0, 1, 1, 100, 0),
                fresh: Fresh::Old,
                steps,
                attempt: (delay, attempt.0, attempt.1),
                in_key_life: true,
            })
    })
}

/// Run `cases` vectors of kind `fresh` under `p(ttl)`; the minimal failing vector, if any.
fn search(fresh: Fresh, cases: u32, p: impl Fn(u64) -> Policy) -> Option<(String, Vector)> {
    search_in(vector(fresh).boxed(), cases, p)
}

/// Run `cases` vectors of `strategy` under `p(ttl)`; the minimal failing vector, if any.
fn search_in(
    strategy: BoxedStrategy<Vector>,
    cases: u32,
    p: impl Fn(u64) -> Policy,
) -> Option<(String, Vector)> {
    // A fixed seed: every CI run explores the same vectors, so a search that must find an
    // overlap finds it every time (CLOCK_PROP_SEED explores others).
    let seed: u64 = std::env::var("CLOCK_PROP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(52);
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = proptest::test_runner::TestRng::from_seed(
        proptest::test_runner::RngAlgorithm::ChaCha,
        &bytes,
    );
    let mut runner = TestRunner::new_with_rng(
        RunnerConfig {
            cases,
            failure_persistence: None,
            max_shrink_iters: 5_000,
            ..RunnerConfig::default()
        },
        rng,
    );
    let result = runner.run(&strategy, |v| {
        check(&v, &p(v.ttl_ms)).map_err(TestCaseError::fail)
    });
    match result {
        Ok(()) => None,
        Err(TestError::Fail(why, v)) => Some((why.to_string(), v)),
        Err(e) => panic!("{e}"),
    }
}

/// Vectors per search in CI (issue 52: at least 100 000 per run, over the searches below).
fn cases() -> u32 {
    std::env::var("CLOCK_PROP_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(40_000)
}

#[test]
fn the_margin_holds_for_a_renewal_or_a_takeover() {
    if let Some((why, v)) = search(Fresh::Old, cases(), policy) {
        panic!("{why}\n{v:#?}");
    }
}

#[test]
fn the_margin_holds_for_a_fresh_watch_on_a_vouch_or_a_proof() {
    if let Some((why, v)) = search(Fresh::New, cases(), policy) {
        panic!("{why}\n{v:#?}");
    }
}

#[test]
fn the_margin_holds_for_small_steps_that_add_up() {
    if let Some((why, v)) = search_in(small_steps().boxed(), cases(), policy) {
        panic!("{why}\n{v:#?}");
    }
}

#[test]
fn without_the_span_band_the_search_finds_an_overlap() {
    let off = |ttl| Policy {
        span_check: false,
        ..policy(ttl)
    };
    let (why, v) = search_in(small_steps().boxed(), cases(), off)
        .expect("no overlap found with the span band off");
    eprintln!("span band off: {why}\n{v:#?}");
}

#[test]
fn without_proof_continuity_the_search_finds_an_overlap() {
    let off = |ttl| Policy {
        proof_continuity_check: false,
        ..policy(ttl)
    };
    let (why, v) =
        search(Fresh::New, cases(), off).expect("no overlap found with proof continuity off");
    eprintln!("proof continuity off: {why}\n{v:#?}");
}

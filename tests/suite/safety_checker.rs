//! The checker itself, on synthetic histories: it reports what is provable and nothing else.
//! (That it fails on a real hazard is shown by `safety_empty_restart`.)

use testkit::fault;

use fault::checker::{Segment, analyze};

#[test]
fn provable_overlap_is_reported() {
    // Sidecar 0 leads with token 1 over [10, 100]; sidecar 1 answers leader with token 2 at some
    // instant in [50, 51], and again in [60, 61].
    let r = analyze(&[
        Segment::one(0, Some(1), 9, 10).to(100, 101),
        Segment::one(1, Some(2), 50, 51).to(60, 61),
    ]);
    assert_eq!(r.overlaps.len(), 1, "{r:?}");
    // A single answer whose whole window lies inside the other's proven interval is enough.
    let r = analyze(&[
        Segment::one(0, Some(1), 9, 10).to(100, 101),
        Segment::one(1, Some(2), 50, 51),
    ]);
    assert_eq!(r.overlaps.len(), 1, "{r:?}");
}

#[test]
fn handover_within_one_polling_window_is_not_an_overlap() {
    // 0's last "leader" answer was evaluated somewhere in [100, 102]; 1's first in [101, 103]:
    // 0 may have stepped down at 100.5 and 1 taken over at 101.5.
    let r = analyze(&[
        Segment::one(0, Some(1), 9, 10).to(100, 102),
        Segment::one(0, None, 104, 105),
        Segment::one(1, Some(2), 101, 103).to(200, 201),
    ]);
    assert!(r.overlaps.is_empty(), "{r:?}");
    assert!(r.token_violations.is_empty(), "{r:?}");
    assert_eq!(r.tokens, vec![1, 2]);
    // A slow answer (a paused sidecar) that might have been evaluated before the other took over.
    let r = analyze(&[
        Segment::one(0, Some(1), 9, 10).to(50, 3000),
        Segment::one(1, Some(2), 1000, 1001).to(4000, 4001),
    ]);
    assert!(r.overlaps.is_empty(), "{r:?}");
}

#[test]
fn tokens_must_increase_from_term_to_term() {
    let r = analyze(&[
        Segment::one(0, Some(5), 0, 1).to(50, 51),
        Segment::one(1, Some(5), 100, 101).to(150, 151),
    ]);
    assert_eq!(r.token_violations.len(), 1, "a repeated token: {r:?}");
    let r = analyze(&[
        Segment::one(0, Some(5), 0, 1).to(50, 51),
        Segment::one(1, Some(4), 100, 101).to(150, 151),
    ]);
    assert_eq!(r.token_violations.len(), 1, "a smaller token later: {r:?}");
    let r = analyze(&[
        Segment::one(0, Some(4), 0, 1).to(50, 51),
        Segment::one(1, Some(5), 100, 101).to(150, 151),
        Segment::one(0, Some(9), 200, 201).to(250, 251),
    ]);
    assert!(r.token_violations.is_empty(), "{r:?}");
    assert_eq!(r.terms, 3);
    // The same term seen in two runs (a failed poll in between) is one term, not a repeat.
    let mut second = Segment::one(0, Some(4), 60, 61).to(70, 71);
    second.generation = 1;
    let r = analyze(&[Segment::one(0, Some(4), 0, 1).to(50, 51), second]);
    assert!(r.token_violations.is_empty(), "{r:?}");
    assert_eq!(r.terms, 1);
    // ...but a restarted process reusing a token is a new term.
    let mut restarted = Segment::one(0, Some(4), 60, 61).to(70, 71);
    restarted.generation = 2;
    let r = analyze(&[Segment::one(0, Some(4), 0, 1).to(50, 51), restarted]);
    assert_eq!(r.token_violations.len(), 1, "{r:?}");
}

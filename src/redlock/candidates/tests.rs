//! Unit tests of the candidate records and the successor choice ([`super`]).

use super::*;

fn rank(priority: i64, revision: &str, created: i64) -> Rank {
    Rank {
        priority,
        revision: revision.into(),
        created,
    }
}

fn cand(id: &str, r: Rank, ready_ms: Option<u64>) -> Candidate {
    Candidate {
        identity: id.into(),
        rank: r,
        ready_for: ready_ms.map(Duration::from_millis),
        pending: false,
    }
}

fn rec(expiry: i64, since: i64, r: &Rank) -> String {
    format!(
        "{expiry}|{since}|{}|{}|0|{}",
        r.priority, r.created, r.revision
    )
}

fn answer(now_us: i64, entries: Vec<(String, String)>) -> NodeRecords {
    NodeRecords { now_us, entries }
}

#[test]
fn records_round_trip_and_reject_garbage() {
    let r = rank(-2, "abc|d", 1700);
    let back = parse_record(&rec(10, 5, &r)).unwrap();
    assert_eq!(
        back,
        Record {
            expiry_us: 10,
            ready_since_us: 5,
            rank: r,
            pending: false
        }
    );
    assert!(parse_record("1|2|x|0|0|").is_none());
    assert!(parse_record("1|2").is_none());
}

#[test]
fn merge_needs_a_quorum_and_a_quorum_of_readiness() {
    let r = rank(1, "", 0);
    let a = answer(
        1_000_000,
        vec![("a".to_string(), rec(2_000_000, 400_000, &r))],
    );
    let b = answer(
        5_000_000,
        vec![("a".to_string(), rec(6_000_000, 4_800_000, &r))],
    );
    let only_one = answer(1_000_000, vec![("b".to_string(), rec(2_000_000, 1, &r))]);
    let merged = merge(&[a.clone(), b.clone(), only_one], 2);
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0].identity, "a");
    // Node a: ready 600 ms; node b: 200 ms (each by its own clock). Both are needed for a
    // quorum of 2, so the shorter one counts.
    assert_eq!(merged[0].ready_for, Some(Duration::from_millis(200)));
    // Not ready on one of two: not ready.
    let c = answer(1_000_000, vec![("a".to_string(), rec(2_000_000, 0, &r))]);
    assert_eq!(merge(&[a.clone(), c.clone()], 2)[0].ready_for, None);
    // Ready on two of three (one node missed the refresh): ready, for as long as both agree.
    let m = merge(&[a.clone(), c, b.clone()], 2);
    assert_eq!(m[0].ready_for, Some(Duration::from_millis(200)));
    // Expired by the node's own clock: gone.
    let expired = answer(3_000_000, vec![("a".to_string(), rec(2_000_000, 1, &r))]);
    assert!(merge(&[a, expired], 2).is_empty());
}

#[test]
fn preference_orders_priority_then_revision() {
    let old = rank(0, "r1", 100);
    let new = rank(0, "r2", 200);
    let same_rev_later = rank(0, "r1", 300);
    assert!(better(&new, &old, Prefer::Newest));
    assert!(!better(&old, &new, Prefer::Newest));
    assert!(better(&old, &new, Prefer::Oldest));
    assert!(!better(&same_rev_later, &old, Prefer::Newest));
    assert!(!better(&new, &old, Prefer::None));
    // Priority first, under either preference.
    assert!(better(&rank(1, "r1", 0), &new, Prefer::Oldest));
    assert!(better(&rank(2, "", 0), &rank(1, "", 0), Prefer::Newest));
    assert!(!better(&rank(1, "", 0), &rank(1, "", 0), Prefer::Newest));
}

#[test]
fn successor_is_the_best_ready_other_candidate() {
    let cs = vec![
        cand("me", rank(5, "", 0), Some(10)),
        cand("low", rank(1, "", 0), Some(10)),
        cand("high-not-ready", rank(9, "", 0), None),
        cand("high", rank(3, "", 0), Some(0)),
    ];
    let pick = |_| 0;
    assert_eq!(
        successor(&cs, "me", Prefer::Newest, pick).unwrap().identity,
        "high"
    );
    let s = successor(&cs, "me", Prefer::None, |n| n - 1).unwrap();
    assert!(s.ready_for.is_some() && s.identity != "me");
    assert!(successor(&cs[..1], "me", Prefer::Newest, pick).is_none());
    let revs = vec![
        cand("a", rank(0, "r1", 100), Some(1)),
        cand("b", rank(0, "r2", 200), Some(1)),
    ];
    assert_eq!(
        successor(&revs, "x", Prefer::Newest, pick)
            .unwrap()
            .identity,
        "b"
    );
    assert_eq!(
        successor(&revs, "x", Prefer::Oldest, pick)
            .unwrap()
            .identity,
        "a"
    );
}

#[test]
fn handover_waits_for_the_settle_time() {
    let mine = rank(1, "", 0);
    let settle = Duration::from_secs(2);
    let cs = |ready| vec![cand("n", rank(2, "", 0), ready)];
    assert_eq!(
        handover(&cs(None), "me", &mine, Prefer::Newest, settle),
        Handover::None
    );
    assert_eq!(
        handover(&cs(Some(1999)), "me", &mine, Prefer::Newest, settle),
        Handover::Pending("n".into())
    );
    assert_eq!(
        handover(&cs(Some(2000)), "me", &mine, Prefer::Newest, settle),
        Handover::To("n".into())
    );
    assert_eq!(
        handover(&cs(Some(5000)), "me", &mine, Prefer::None, settle),
        Handover::None
    );
    // Under `oldest` the newer one is not better.
    assert_eq!(
        handover(
            &cs(Some(5000)),
            "me",
            &rank(2, "", 0),
            Prefer::Oldest,
            settle
        ),
        Handover::None
    );
}

#[test]
fn notices_name_the_successor() {
    assert_eq!(
        notice_successor(&notice_payload("a#1", Some("b"), None)),
        Some("b")
    );
    assert_eq!(notice_successor(&notice_payload("a#1", None, None)), None);
    assert_eq!(notice_successor("a#1"), None);
    // A single lease's notice is what it always was: the value and the successor.
    assert_eq!(notice_payload("a#1", Some("b"), None), "a#1\nb");
}

#[test]
fn a_shard_handed_over_tells_its_successor_how_often_it_moved() {
    let payload = notice_payload("a#1", Some("b"), Some(2));
    assert_eq!(payload, "a#1\nb\n2");
    assert_eq!(notice_successor(&payload), Some("b"));
    assert_eq!(notice_moved(&payload), Some(2));
    assert_eq!(notice_moved(&notice_payload("a#1", Some("b"), None)), None);
    assert_eq!(notice_moved("a#1"), None);
}

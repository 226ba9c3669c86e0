//! Table tests of the leader's decisions: naming a successor, `preferSettle`, the deadline,
//! renewals at the quorum edge, a stall, shutdown during an attempt.

use super::*;

#[test]
fn a_graceful_step_down_names_the_best_ready_candidate_from_a_fresh_read() {
    let mut b = Bench::new(Prefer::Newest);
    let lease = b.lead();
    let out = b.feed(Event::StepDown(1, StepDownReason::Requested));
    assert_eq!(ended(&out), Some(StepDownReason::Requested));
    assert!(matches!(out.last(), Some(Command::ReadCandidates { .. })));
    // The newest ready one; a newer one that is not ready is never named.
    let read = vec![
        candidate("old", 50, Some(MS)),
        candidate("newer", 300, Some(MS)),
        candidate("newest-not-ready", 400, None),
    ];
    let out = b.feed(Event::Candidates(Some(read)));
    assert_eq!(release(&out), Some(Some("newer".into())));
    assert!(out.contains(&Command::Count(Count::Handover(
        crate::metrics::HandoverReason::StepDown
    ))));
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Release { lease: l, .. } if *l == lease))
    );
    // Answered once released; then a ttl of cool-down before contending again.
    let out = b.feed(Event::Released);
    assert!(out.contains(&Command::Answer {
        request: 1,
        answer: StepDown::Released
    }));
    let released = b.now;
    assert_eq!(b.m.poll_timeout().map(|t| t > released), Some(true));
    assert!(attempts(&b.fire()).is_empty());
    assert_eq!(b.m.poll_timeout(), Some(released + TTL));
    assert_eq!(attempts(&b.fire()), [false]);
}

#[test]
fn a_successor_read_that_misses_a_quorum_names_from_the_last_read() {
    let mut b = Bench::new(Prefer::Newest);
    b.lead();
    b.renew(vec![candidate("seen", 50, Some(MS))]);
    b.feed(Event::Shutdown);
    let out = b.feed(Event::Candidates(None));
    assert_eq!(release(&out), Some(Some("seen".into())));
    let out = b.feed(Event::Released);
    assert_eq!(out.last(), Some(&Command::Withdraw));
    assert!(b.m.done());
}

#[test]
fn prefer_settle_hands_over_only_once_the_better_candidate_has_been_ready_long_enough() {
    let mut b = Bench::new(Prefer::Newest);
    b.lead();
    let renew =
        |b: &mut Bench, ready_for: Duration| b.renew(vec![candidate("new", 200, Some(ready_for))]);
    let out = renew(&mut b, Duration::from_secs(2));
    assert!(ended(&out).is_none(), "{out:#?}");
    assert!(
        out.iter()
            .any(|c| matches!(c, Command::Candidacy(v) if v.handover_pending))
    );
    // The next renewal's record says pending.
    b.advance(Duration::from_secs(3));
    match &b.fire()[..] {
        [Command::Renew { record, .. }] => assert_eq!(record.fields.as_ref().unwrap()[3], "1"),
        other => panic!("{other:?}"),
    }
    let out = b.feed(Event::Renewed {
        deadline: Some(b.now + TTL),
        candidates: Some(vec![candidate("new", 200, Some(Duration::from_secs(5)))]),
    });
    assert_eq!(ended(&out), Some(StepDownReason::Preferred));
    // Named directly: no second read.
    assert_eq!(release(&out), Some(Some("new".into())));
    // An older candidate, or a newer one of the own revision, never triggers it.
    let mut b = Bench::new(Prefer::Newest);
    b.lead();
    let mut same = candidate("same-rev", 200, Some(Duration::from_secs(60)));
    same.rank.revision = "rev-100".into();
    for c in [candidate("older", 50, Some(Duration::from_secs(60))), same] {
        let out = b.renew(vec![c]);
        assert!(ended(&out).is_none(), "{out:?}");
    }
}

#[test]
fn the_deadline_ends_a_term_whose_renewals_fail_and_outranks_everything_else() {
    let mut b = Bench::new(Prefer::None);
    let lease = b.lead();
    // Renewals that miss the quorum retry at a quarter period until the deadline.
    let mut last = b.now;
    while b.now + Duration::from_secs(1) < lease.deadline {
        let out = b.fire();
        assert!(matches!(out[..], [Command::Renew { until, .. }] if until == lease.deadline));
        b.advance(5 * MS);
        let out = b.feed(Event::Renewed {
            deadline: None,
            candidates: None,
        });
        assert!(ended(&out).is_none());
        assert!(b.m.leading());
        last = b.now;
    }
    assert_eq!(
        b.m.poll_timeout(),
        Some((last + Duration::from_millis(750)).min(lease.deadline))
    );
    // A shutdown that arrives after the deadline passed finds a lost lease, not a handover.
    b.now = lease.deadline;
    let out = b.feed(Event::Shutdown);
    assert_eq!(ended(&out), Some(StepDownReason::RenewalFailed));
    assert_eq!(release(&out), Some(None));
    let out = b.feed(Event::Released);
    assert_eq!(out.last(), Some(&Command::Withdraw));
}

#[test]
fn a_renewal_at_the_quorum_edge_keeps_the_term_and_extends_the_deadline() {
    let mut b = Bench::new(Prefer::None);
    let lease = b.lead();
    b.advance(Duration::from_secs(3));
    b.fire();
    // Failed (one node short of the quorum): the term holds; retried in a quarter period.
    b.feed(Event::Renewed {
        deadline: None,
        candidates: None,
    });
    assert_eq!(b.m.poll_timeout(), Some(b.now + Duration::from_millis(750)));
    b.fire();
    // Reached the quorum: the new deadline is published; the next renewal a period after the
    // round went out.
    let sent = b.now;
    b.advance(10 * MS);
    let out = b.feed(Event::Renewed {
        deadline: Some(sent + TTL),
        candidates: None,
    });
    assert!(out.iter().any(|c| matches!(c,
        Command::Publish { term: Some(t), .. } if t.deadline == sent + TTL && t.token == lease.token)));
    assert_eq!(b.m.poll_timeout(), Some(sent + Duration::from_secs(3)));
    // A late reply with an earlier deadline never shortens the term.
    b.fire();
    b.feed(Event::Renewed {
        deadline: Some(lease.deadline),
        candidates: None,
    });
    assert_eq!(b.m.term().unwrap().deadline, sent + TTL);
}

#[test]
fn a_stall_ends_the_term_and_keeps_a_follower_from_attempting() {
    // The renewal timer fired later than the stall margin (1.5 s at renewEvery 3 s).
    let mut b = Bench::new(Prefer::None);
    b.lead();
    b.advance(Duration::from_secs(3) + Duration::from_millis(1501));
    let out = b.feed(Event::Timer);
    assert!(out.contains(&Command::Count(Count::Stall)));
    assert_eq!(ended(&out), Some(StepDownReason::Stalled));
    assert_eq!(release(&out), Some(None));
    // The watchdog's stall: the same end.
    let mut b = Bench::new(Prefer::None);
    b.lead();
    let out = b.feed(Event::Stall);
    assert_eq!(ended(&out), Some(StepDownReason::Stalled));
    b.feed(Event::Released);
    // A stalled follower does not attempt; it looks again in 100 ms.
    b.stalled = true;
    b.advance(Duration::from_secs(2));
    assert!(attempts(&b.fire()).is_empty());
    assert_eq!(b.m.poll_timeout(), Some(b.now + Duration::from_millis(100)));
    b.stalled = false;
    assert_eq!(attempts(&b.fire()), [false]);
}

#[test]
fn a_shutdown_during_an_attempt_releases_a_won_lease_at_once() {
    let mut b = Bench::new(Prefer::None);
    assert_eq!(attempts(&b.fire()), [false]);
    assert!(b.feed(Event::Shutdown).is_empty());
    let lease = Lease {
        value: "me#1".into(),
        token: 3,
        deadline: b.now + TTL,
    };
    let out = b.feed(Event::Attempted {
        outcome: Acquire::Acquired(lease),
        candidates: None,
    });
    assert_eq!(ended(&out), Some(StepDownReason::Shutdown));
    assert!(matches!(out.last(), Some(Command::ReadCandidates { .. })));
    let out = b.feed(Event::Candidates(Some(vec![candidate(
        "next",
        1,
        Some(MS),
    )])));
    assert_eq!(release(&out), Some(Some("next".into())));
    assert_eq!(b.feed(Event::Released).last(), Some(&Command::Withdraw));
    // A lost attempt: withdraw, nothing to release.
    let mut b = Bench::new(Prefer::None);
    b.fire();
    b.feed(Event::Shutdown);
    let out = b.feed(Event::Attempted {
        outcome: Acquire::NoQuorum(Observed::default()),
        candidates: None,
    });
    assert_eq!(out.last(), Some(&Command::Withdraw));
    assert!(release(&out).is_none());
    assert!(b.m.done());
}

#[test]
fn a_notice_naming_it_ends_the_cool_down_after_a_child_exit_but_not_after_a_requested_step_down() {
    for (reason, named_ends) in [
        (StepDownReason::ChildExited, true),
        (StepDownReason::Requested, false),
    ] {
        let mut b = Bench::new(Prefer::None);
        b.lead();
        b.feed(Event::StepDown(1, reason));
        let out = b.feed(Event::Candidates(Some(vec![candidate(
            "other",
            50,
            Some(MS),
        )])));
        assert_eq!(release(&out), Some(Some("other".into())), "{out:?}");
        b.feed(Event::Released);
        // The other leads, then releases naming this sidecar, within the cool-down.
        b.advance(Duration::from_millis(300));
        let out = b.feed(Event::Notice {
            successor: Some("me".into()),
            copies: 2,
        });
        assert_eq!(
            attempts(&out),
            if named_ends { vec![true] } else { vec![] },
            "{reason:?}: {out:?}"
        );
    }
}

#[test]
fn a_hand_over_for_balance_names_the_given_ready_candidate_and_does_not_cool_down() {
    let mut b = Bench::new(Prefer::None);
    b.lead();
    b.renew(vec![
        candidate("fewer", 50, Some(MS)),
        candidate("not-ready", 60, None),
    ]);
    // A candidate that is not ready, or unknown, is not named: nothing changes.
    for to in ["not-ready", "unknown"] {
        let out = b.feed(Event::HandOver(1, to.into()));
        assert_eq!(
            out,
            [Command::Answer {
                request: 1,
                answer: StepDown::NotLeader
            }]
        );
        assert!(b.m.leading());
    }
    let out = b.feed(Event::HandOver(2, "fewer".into()));
    assert_eq!(ended(&out), Some(StepDownReason::Balance));
    assert_eq!(
        release(&out),
        Some(Some("fewer".into())),
        "no fresh read: named at once"
    );
    assert!(out.contains(&Command::Count(Count::Handover(
        crate::metrics::HandoverReason::Balance
    ))));
    let out = b.feed(Event::Released);
    assert!(out.contains(&Command::Answer {
        request: 2,
        answer: StepDown::Released
    }));
    // No cool-down: it contends again at its next retry (the reservation keeps it from the
    // named candidate's grace).
    let released = b.now;
    assert!(b.m.poll_timeout().is_some_and(|t| t < released + TTL));
}

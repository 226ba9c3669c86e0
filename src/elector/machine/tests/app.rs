//! Table tests of health-gated leadership (`lease.followApp`): hand over only to a candidate
//! whose app is healthy, after the grace; no deadlock without one; the cool-down; flapping.

use super::*;
use crate::elector::AppGate;
use crate::elector::machine::io::Record;
use crate::leadership::CandidacyView;

const APP_GRACE: Duration = Duration::from_secs(5);
const COOLDOWN: Duration = Duration::from_secs(30);

impl Bench {
    /// A bench whose leadership follows the app.
    fn following() -> Bench {
        let mut b = Bench::new(Prefer::None);
        b.m.preference.follow_app = Some(AppGate {
            grace: APP_GRACE,
            cooldown: COOLDOWN,
        });
        b
    }

    /// The app's health changes now.
    fn app(&mut self, healthy: bool) -> Vec<Command> {
        let standing = Standing {
            app_healthy: healthy,
            ..self.m.standing.clone()
        };
        self.feed(Event::Standing(standing))
    }
}

fn healthy_one() -> Vec<Candidate> {
    vec![
        candidate("sick", 300, None),
        candidate("healthy", 200, Some(MS)),
    ]
}

fn candidacy(out: &[Command]) -> Option<&CandidacyView> {
    out.iter().rev().find_map(|c| match c {
        Command::Candidacy(v) => Some(v),
        _ => None,
    })
}

/// Fire every timer up to `until`, answering renewals with `candidates` and watch rounds with a
/// free lease and `candidates`; every command given, in order.
fn run_until(b: &mut Bench, until: Instant, candidates: &[Candidate]) -> Vec<Command> {
    let mut all = Vec::new();
    while let Some(at) = b.m.poll_timeout().filter(|t| *t <= until) {
        let out = b.at(at);
        let answer = out.iter().find_map(|c| match c {
            Command::Renew { .. } => Some(Event::Renewed {
                deadline: Some(b.now + TTL),
                candidates: Some(candidates.to_vec()),
            }),
            Command::Watch { .. } => Some(Event::Watched {
                held: None,
                candidates: Some(candidates.to_vec()),
                answered: true,
            }),
            _ => None,
        });
        all.extend(out);
        if let Some(event) = answer {
            all.extend(b.feed(event));
        }
        if all
            .iter()
            .any(|c| matches!(c, Command::Attempt { .. } | Command::Release { .. }))
        {
            break;
        }
    }
    b.now = b.now.max(until);
    all
}

#[test]
fn a_leader_whose_app_stays_unhealthy_for_the_grace_hands_over_to_a_healthy_candidate() {
    let mut b = Bench::following();
    b.lead();
    b.renew(healthy_one());
    let since = b.now;
    b.app(false);
    // The leader wakes for the check at the grace, not at its next renewal only.
    let out = run_until(&mut b, since + APP_GRACE - MS, &healthy_one());
    assert!(ended(&out).is_none(), "not before the grace: {out:?}");
    assert!(b.m.leading());
    assert_eq!(b.m.poll_timeout(), Some(since + APP_GRACE));
    // At the grace it renews at once: that fresh read of the records decides.
    let out = b.fire();
    assert_eq!(b.now, since + APP_GRACE);
    assert!(ended(&out).is_none(), "{out:?}");
    assert!(
        out.iter().any(|c| matches!(c, Command::Renew { .. })),
        "{out:?}"
    );
    let out = b.feed(Event::Renewed {
        deadline: Some(b.now + TTL),
        candidates: Some(healthy_one()),
    });
    assert_eq!(ended(&out), Some(StepDownReason::AppUnhealthy));
    // Named directly, the healthy one, on the named-successor path; counted.
    assert_eq!(release(&out), Some(Some("healthy".into())));
    assert!(out.contains(&Command::Count(Count::Handover(
        crate::metrics::HandoverReason::AppUnhealthy
    ))));
    // And in the step-downs by reason (`step_down_reason="app_unhealthy"`).
    assert!(out.contains(&Command::Count(Count::StepDown(
        StepDownReason::AppUnhealthy
    ))));
    b.feed(Event::Released);
    // The cool-down: no attempt while a healthy candidate exists, even once the app is healthy
    // again; watch rounds instead.
    let out = b.app(true);
    let mut seen = out.clone();
    if out.iter().any(|c| matches!(c, Command::Watch { .. })) {
        seen.extend(b.feed(Event::Watched {
            held: None,
            candidates: Some(healthy_one()),
            answered: true,
        }));
    }
    let released = b.now;
    seen.extend(run_until(&mut b, released + COOLDOWN - MS, &healthy_one()));
    assert!(attempts(&seen).is_empty(), "{seen:?}");
    assert!(seen.iter().any(|c| matches!(c, Command::Watch { .. })));
    // After the cool-down it contends again.
    let out = run_until(
        &mut b,
        released + COOLDOWN + Duration::from_secs(2),
        &healthy_one(),
    );
    assert_eq!(attempts(&out), [false], "{out:?}");
}

#[test]
fn the_handover_for_health_is_decided_on_a_read_taken_after_the_grace_not_an_older_one() {
    // The last renewal's read says a candidate is healthy; by the grace its app failed too (its
    // record says so now). The leader keeps the lease instead of handing it to a sick one.
    let mut b = Bench::following();
    b.lead();
    b.renew(healthy_one());
    let since = b.now;
    b.app(false);
    run_until(&mut b, since + APP_GRACE - MS, &healthy_one());
    let out = b.fire();
    assert!(
        out.iter().any(|c| matches!(c, Command::Renew { .. })),
        "{out:?}"
    );
    let nobody = vec![
        candidate("sick", 300, None),
        candidate("healthy", 200, None),
    ];
    let out = b.feed(Event::Renewed {
        deadline: Some(b.now + TTL),
        candidates: Some(nobody.clone()),
    });
    assert!(
        ended(&out).is_none(),
        "handed over to a sick candidate: {out:?}"
    );
    assert!(b.m.leading());
    // Its app recovers on a later read: the next renewal's fresh read hands over.
    let recovered = healthy_one();
    let until = b.now + TTL;
    let out = run_until(&mut b, until, &recovered);
    assert_eq!(ended(&out), Some(StepDownReason::AppUnhealthy), "{out:?}");
    assert_eq!(release(&out), Some(Some("healthy".into())));
}

#[test]
fn with_no_healthy_candidate_the_leader_keeps_the_lease_and_says_so() {
    let mut b = Bench::following();
    b.lead();
    let nobody = vec![candidate("sick", 300, None)];
    b.renew(nobody.clone());
    let since = b.now;
    b.app(false);
    let out = run_until(&mut b, since + APP_GRACE * 3, &nobody);
    assert!(ended(&out).is_none(), "no deadlock: {out:?}");
    assert!(b.m.leading());
    // Shown in /leader: the own app unhealthy, no healthy candidate.
    let v = candidacy(&out).expect("a candidacy view");
    assert_eq!(
        (v.app_healthy, v.leader_app_healthy, v.healthy_candidates),
        (Some(false), Some(false), Some(0))
    );
    // The record it writes says not ready: nobody names it.
    let renewals: Vec<&Record> = out
        .iter()
        .filter_map(|c| match c {
            Command::Renew { record, .. } => Some(record),
            _ => None,
        })
        .collect();
    assert!(!renewals.is_empty());
    assert!(
        renewals
            .iter()
            .all(|r| r.fields.as_ref().unwrap()[0] == "0")
    );
    // A healthy candidate appears: a check after the next renewal hands over to it.
    let until = b.now + Duration::from_secs(7);
    let out = run_until(&mut b, until, &healthy_one());
    assert_eq!(ended(&out), Some(StepDownReason::AppUnhealthy), "{out:?}");
    assert_eq!(release(&out), Some(Some("healthy".into())));
}

#[test]
fn a_follower_whose_app_is_unhealthy_defers_to_a_healthy_candidate_but_takes_a_leaderless_lease() {
    let mut b = Bench::following();
    // Its first wake, its app unhealthy: no candidates known, nobody healthy: it attempts
    // (some leader beats no leader), with a record that says not ready.
    let mut out = b.app(false);
    if out.iter().any(|c| matches!(c, Command::Watch { .. })) {
        out = b.feed(Event::Watched {
            held: None,
            candidates: Some(vec![]),
            answered: true,
        });
    } else {
        out = b.fire();
    }
    match &out[..] {
        [
            ..,
            Command::Attempt {
                named: false,
                record,
            },
        ] => assert_eq!(record.fields.as_ref().unwrap()[0], "0"),
        other => panic!("{other:?}"),
    }
    b.feed(Event::Attempted {
        outcome: Acquire::NoQuorum(Observed::default()),
        candidates: Some(healthy_one()),
    });
    // Now a healthy candidate is known: it watches instead of attempting.
    let until = b.now + Duration::from_secs(10);
    let out = run_until(&mut b, until, &healthy_one());
    assert!(attempts(&out).is_empty(), "{out:?}");
    assert!(out.iter().any(|c| matches!(c, Command::Watch { .. })));
    // A notice naming it is followed (the leader names healthy candidates only).
    let out = b.feed(Event::Notice {
        successor: Some("me".into()),
        copies: 2,
    });
    assert_eq!(attempts(&out), [true], "{out:?}");
}

/// Run a leader for `secs` seconds, renewing with [`healthy_one`] whenever it renews, calling
/// `each_second` at the start of every second; how many times its term ended.
fn drive(
    b: &mut Bench,
    secs: u64,
    mut each_second: impl FnMut(&mut Bench, u64) -> Vec<Command>,
) -> usize {
    let start = b.now;
    let mut ends = 0;
    for s in 0..secs {
        ends += usize::from(ended(&each_second(b, s)).is_some());
        let next = start + Duration::from_secs(s + 1);
        while b.m.poll_timeout().is_some_and(|t| t <= next) {
            let out = b.fire();
            ends += usize::from(ended(&out).is_some());
            if out.iter().any(|c| matches!(c, Command::Renew { .. })) {
                let out = b.feed(Event::Renewed {
                    deadline: Some(b.now + TTL),
                    candidates: Some(healthy_one()),
                });
                ends += usize::from(ended(&out).is_some());
            }
        }
        b.now = next;
    }
    ends
}

#[test]
fn an_app_that_flaps_faster_than_the_grace_never_moves_the_lease() {
    let mut b = Bench::following();
    b.lead();
    b.renew(healthy_one());
    // Unhealthy every other second for a minute.
    let ends = drive(&mut b, 60, |b, s| b.app(s % 2 == 1));
    assert_eq!(ends, 0, "a flap shorter than the grace moved the lease");
    assert!(b.m.leading());
    // Unhealthy for 6 s (longer than the grace): one handover, then it follows.
    let mut b = Bench::following();
    b.lead();
    b.renew(healthy_one());
    let ends = drive(&mut b, 60, |b, s| b.app(s >= 6));
    assert_eq!(ends, 1);
}

#[test]
fn without_follow_app_the_app_health_changes_nothing() {
    let mut b = Bench::new(Prefer::None);
    b.lead();
    b.renew(healthy_one());
    let ends = drive(
        &mut b,
        60,
        |b, s| if s == 0 { b.app(false) } else { vec![] },
    );
    assert_eq!(ends, 0);
    assert!(b.m.leading());
}

/// Review finding 8: the renewal whose read decides the health handover asks for a read from a
/// round begun after the grace ended (a sharded lease would otherwise answer it from its shared
/// read, up to a quarter of the record's life old); so does each renewal after it while no
/// healthy candidate exists (each decides again), from its own timer's instant on. Before the
/// grace ends, a renewal's read may be shared.
#[test]
fn the_renewal_deciding_the_health_handover_asks_for_a_read_begun_after_the_grace() {
    let read_after = |out: &[Command]| {
        out.iter().find_map(|c| match c {
            Command::Renew { record, .. } => Some(record.read_after),
            _ => None,
        })
    };
    let mut b = Bench::following();
    b.lead();
    b.renew(healthy_one());
    let since = b.now;
    b.app(false);
    let during = run_until(&mut b, since + APP_GRACE - MS, &healthy_one());
    assert!(
        read_after(&during).is_some(),
        "renewed in the grace: {during:?}"
    );
    assert!(
        during.iter().all(|c| !matches!(
            c,
            Command::Renew {
                record: Record {
                    read_after: Some(_),
                    ..
                },
                ..
            }
        )),
        "{during:?}"
    );
    let out = b.fire();
    assert_eq!(b.now, since + APP_GRACE);
    assert_eq!(read_after(&out), Some(Some(b.now)), "{out:?}");
    // Nobody healthy: kept; the next renewal decides again on a read from its own timer on.
    let out = b.feed(Event::Renewed {
        deadline: Some(b.now + TTL),
        candidates: Some(vec![candidate("sick", 300, None)]),
    });
    assert!(ended(&out).is_none(), "{out:?}");
    let out = b.fire();
    assert_eq!(read_after(&out), Some(Some(b.now)), "{out:?}");
}

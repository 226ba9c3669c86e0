//! Table tests of the machine's decisions: no process, no socket, no real time. Each feeds
//! events at chosen instants and checks the commands and the next wake.

use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::Instant;

use super::follower::FAST_RETRIES;
use super::*;

mod app;
mod leader;
use crate::config::Prefer;
use crate::elector::{Preference, Standing, StepDown, StepDownReason, Timing};
use crate::redlock::candidates::{Candidate, Rank};
use crate::redlock::{Acquire, Lease, Observed, QuorumWait};

const MS: Duration = Duration::from_millis(1);
const TTL: Duration = Duration::from_secs(10);
const GRACE: Duration = Duration::from_millis(75);

/// One machine, its clock, its nodes and a seeded random source.
struct Bench {
    m: Machine,
    now: Instant,
    nodes: Nodes,
    stalled: bool,
    rng: StdRng,
}

fn preference(prefer: Prefer) -> Preference {
    Preference {
        prefer,
        priority: 0,
        settle: Duration::from_secs(5),
        grace: GRACE,
        name_successor: true,
        follow_app: None,
    }
}

fn nodes() -> Nodes {
    Nodes {
        wait: QuorumWait::default(),
        counts_at: None,
        successor_ready: true,
        notices_live: true,
        watch_period: Duration::from_secs(1),
    }
}

fn candidate(id: &str, created: i64, ready_for: Option<Duration>) -> Candidate {
    Candidate {
        identity: id.into(),
        rank: Rank {
            priority: 0,
            revision: format!("rev-{created}"),
            created,
        },
        ready_for,
        pending: false,
    }
}

impl Bench {
    fn new(prefer: Prefer) -> Bench {
        let now = Instant::now();
        let standing = Standing {
            revision: "rev-100".into(),
            created: 100,
            ready: true,
            known: true,
            app_healthy: true,
        };
        let timing = Timing::new(TTL, Duration::from_secs(3), Duration::from_secs(1));
        let m = Machine::new("me".into(), timing, preference(prefer), standing, 2, now);
        Bench {
            m,
            now,
            nodes: nodes(),
            stalled: false,
            rng: StdRng::seed_from_u64(7),
        }
    }

    /// Feed `event` now; the commands it gave.
    fn feed(&mut self, event: Event) -> Vec<Command> {
        let mut cx = Cx {
            now: self.now,
            nodes: self.nodes.clone(),
            stalled: self.stalled,
            rng: &mut self.rng,
        };
        self.m.handle(&mut cx, event);
        std::iter::from_fn(|| self.m.poll_command()).collect()
    }

    /// Move the clock to `at` and deliver the timer.
    fn at(&mut self, at: Instant) -> Vec<Command> {
        self.now = self.now.max(at);
        self.feed(Event::Timer)
    }

    /// Advance to the machine's next wake and deliver the timer.
    fn fire(&mut self) -> Vec<Command> {
        let at = self.m.poll_timeout().expect("a timer is set");
        self.at(at)
    }

    fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Win the first attempt: the machine leads with a lease valid for the ttl.
    fn lead(&mut self) -> Lease {
        assert!(matches!(
            self.fire()[..],
            [Command::Attempt { named: false, .. }]
        ));
        let lease = Lease {
            value: "me#1".into(),
            token: 7,
            deadline: self.now + TTL,
        };
        let out = self.feed(Event::Attempted {
            outcome: Acquire::Acquired(lease.clone()),
            candidates: Some(vec![]),
        });
        assert!(
            out.iter()
                .any(|c| matches!(c, Command::Publish { term: Some(t), .. } if t.token == 7))
        );
        assert!(self.m.leading());
        lease
    }

    /// A leader's next renewal goes out a period later and comes back with a new deadline and
    /// these candidates; the commands that answer gave.
    fn renew(&mut self, candidates: Vec<Candidate>) -> Vec<Command> {
        self.advance(Duration::from_secs(3));
        let out = self.fire();
        assert!(matches!(out[..], [Command::Renew { .. }]), "{out:?}");
        self.feed(Event::Renewed {
            deadline: Some(self.now + TTL),
            candidates: Some(candidates),
        })
    }

    /// A follower that saw `holder` hold the lease.
    fn follow(&mut self, holder: &str) {
        assert!(matches!(self.fire()[..], [Command::Attempt { .. }]));
        self.feed(Event::Attempted {
            outcome: Acquire::Contended(Observed {
                holder: Some(holder.into()),
                free_in: Some(TTL),
            }),
            candidates: Some(vec![]),
        });
    }
}

fn attempts(out: &[Command]) -> Vec<bool> {
    out.iter()
        .filter_map(|c| match c {
            Command::Attempt { named, .. } => Some(*named),
            _ => None,
        })
        .collect()
}

fn release(out: &[Command]) -> Option<Option<String>> {
    out.iter().find_map(|c| match c {
        Command::Release { successor, .. } => Some(successor.clone()),
        _ => None,
    })
}

fn ended(out: &[Command]) -> Option<StepDownReason> {
    out.iter().find_map(|c| match c {
        Command::PublishEnd(e) => Some(e.reason),
        _ => None,
    })
}

#[test]
fn a_notice_naming_someone_else_waits_the_grace_and_one_naming_nobody_a_jitter() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let start = b.now;
    let out = b.feed(Event::Notice {
        successor: Some("other".into()),
        copies: 1,
    });
    assert!(attempts(&out).is_empty(), "{out:?}");
    // The holder is no longer shown.
    assert!(out.contains(&Command::Publish {
        term: None,
        leader: None
    }));
    assert_eq!(b.m.poll_timeout(), Some(start + GRACE));
    b.at(start + GRACE - MS);
    assert_eq!(attempts(&b.at(start + GRACE)), [false]);

    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let start = b.now;
    b.feed(Event::Notice {
        successor: None,
        copies: 1,
    });
    let wake = b.m.poll_timeout().unwrap();
    assert!(wake < start + 2 * MS, "{:?}", wake - start);
    assert_eq!(attempts(&b.fire()), [false]);
}

#[test]
fn a_named_successor_attempts_at_a_quorum_of_copies_or_after_the_grace() {
    // Copies arrive: at the quorum-th (2 of 3), at once and on the release proof.
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let named = || Event::Notice {
        successor: Some("me".into()),
        copies: 1,
    };
    assert!(attempts(&b.feed(named())).is_empty());
    assert!(b.m.awaiting_copies());
    b.advance(MS);
    assert_eq!(attempts(&b.feed(Event::Copies(2))), [true]);

    // The quorum of copies already there with the first wake: no wait at all.
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let out = b.feed(Event::Notice {
        successor: Some("me".into()),
        copies: 2,
    });
    assert_eq!(attempts(&out), [true]);

    // A node down: the copies never reach a quorum; the grace ends the wait, still named.
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let start = b.now;
    b.feed(named());
    assert_eq!(b.m.poll_timeout(), Some(start + GRACE));
    assert_eq!(attempts(&b.fire()), [true]);
}

#[test]
fn a_follower_watches_while_someone_holds_the_lease_and_split_votes_retry_fast() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    assert!(matches!(b.fire()[..], [Command::Watch { .. }]));
    // Still held: watch again within a watch period (0.75..0.95 of it).
    let before = b.now;
    b.feed(Event::Watched {
        held: Some(Observed {
            holder: Some("old".into()),
            free_in: Some(TTL),
        }),
        candidates: Some(vec![]),
        answered: true,
    });
    let next = b.m.poll_timeout().unwrap() - before;
    assert!(next >= Duration::from_millis(750) && next < Duration::from_millis(950));
    b.fire();
    // Free: attempt at once.
    let out = b.feed(Event::Watched {
        held: None,
        candidates: None,
        answered: true,
    });
    assert_eq!(attempts(&out), [false]);
    // A split vote: three fast retries (1..15 ms), then the retry period.
    for _ in 0..FAST_RETRIES {
        let at = b.now;
        b.feed(Event::Attempted {
            outcome: Acquire::NoQuorum(Observed::default()),
            candidates: Some(vec![]),
        });
        assert!(b.m.poll_timeout().unwrap() - at < 15 * MS);
        assert_eq!(attempts(&b.fire()), [false]);
    }
    let at = b.now;
    b.feed(Event::Attempted {
        outcome: Acquire::NoQuorum(Observed::default()),
        candidates: Some(vec![]),
    });
    assert!(b.m.poll_timeout().unwrap() - at >= Duration::from_millis(750));
}

#[test]
fn attempts_that_no_node_answers_back_off_to_four_retry_periods_and_an_answer_resets_it() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    b.fire();
    b.feed(Event::Watched {
        held: None,
        candidates: None,
        answered: true,
    });
    // The retry period is 1 s, jittered 0.75..1.25: 1, 2, 4, then 4 periods again (never more),
    // also within the first ttl (no quick recheck of the record: none could be written).
    let ms = |d: Duration| d.as_millis();
    for periods in [1, 2, 4, 4, 4] {
        let at = b.now;
        b.feed(Event::Attempted {
            outcome: Acquire::Error,
            candidates: None,
        });
        let wait = b.m.poll_timeout().unwrap() - at;
        let (lo, hi) = (750 * periods, 1250 * periods);
        assert!((lo..hi).contains(&ms(wait)), "{periods} periods: {wait:?}");
        assert_eq!(attempts(&b.fire()), [false]);
    }
    // An answered attempt (here a split vote past its fast retries) starts the count again.
    b.m.schedule.fast_streak = FAST_RETRIES;
    b.feed(Event::Attempted {
        outcome: Acquire::NoQuorum(Observed::default()),
        candidates: Some(vec![]),
    });
    b.fire();
    let at = b.now;
    b.feed(Event::Attempted {
        outcome: Acquire::Error,
        candidates: None,
    });
    let wait = b.m.poll_timeout().unwrap() - at;
    assert!((750..1250).contains(&ms(wait)), "{wait:?}");
}

#[test]
fn a_watch_too_few_nodes_answered_is_no_reason_to_attempt_the_follower_watches_again_later() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    assert!(matches!(b.fire()[..], [Command::Watch { .. }]));
    let at = b.now;
    let out = b.feed(Event::Watched {
        held: None,
        candidates: None,
        answered: false,
    });
    assert_eq!(attempts(&out), Vec::<bool>::new());
    let wait = b.m.poll_timeout().unwrap() - at;
    assert!(wait >= Duration::from_millis(750), "{wait:?}");
    // The next wake watches again (someone was last seen holding it), and the one after a
    // second unanswered watch waits twice as long.
    assert!(matches!(b.fire()[..], [Command::Watch { .. }]));
    let at = b.now;
    b.feed(Event::Watched {
        held: None,
        candidates: None,
        answered: false,
    });
    let wait = b.m.poll_timeout().unwrap() - at;
    assert!(wait >= Duration::from_millis(1500), "{wait:?}");
    // Answered and free: attempt at once.
    b.fire();
    let out = b.feed(Event::Watched {
        held: None,
        candidates: Some(vec![]),
        answered: true,
    });
    assert_eq!(attempts(&out), [false]);
}

#[test]
fn an_attempt_denied_by_reservations_retries_when_they_expire_not_a_retry_later() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    b.fire();
    b.feed(Event::Watched {
        held: None,
        candidates: None,
        answered: true,
    });
    // Past the fast retries of a split vote, a loss to reservations that end in 40 ms retries
    // at their end (+ 1..8 ms), not at the retry period (750..1250 ms).
    for _ in 0..=FAST_RETRIES {
        b.feed(Event::Attempted {
            outcome: Acquire::NoQuorum(Observed::default()),
            candidates: Some(vec![]),
        });
        b.fire();
    }
    let at = b.now;
    b.feed(Event::Attempted {
        outcome: Acquire::NoQuorum(Observed {
            holder: None,
            free_in: Some(40 * MS),
        }),
        candidates: Some(vec![]),
    });
    let wait = b.m.poll_timeout().unwrap() - at;
    assert!(wait >= 41 * MS && wait < 48 * MS, "{wait:?}");
    assert_eq!(attempts(&b.fire()), [false]);
}

#[test]
fn a_follower_acts_at_once_when_a_quorum_counts_sooner_than_its_watch_said() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    assert!(matches!(b.fire()[..], [Command::Watch { .. }]));
    // A fresh sidecar: no quorum counts yet, the watch says in 9 s.
    b.nodes.wait = QuorumWait {
        reason: Some(crate::redlock::node::Wait::ClockWatch),
        at: Some(b.now + Duration::from_secs(9)),
    };
    b.nodes.counts_at = b.nodes.wait.at;
    b.feed(Event::Watched {
        held: Some(Observed {
            holder: Some("old".into()),
            free_in: Some(TTL),
        }),
        candidates: Some(vec![]),
        answered: true,
    });
    let scheduled = b.m.poll_timeout().unwrap();
    assert!(
        scheduled > b.now + Duration::from_millis(700),
        "a watch period away"
    );
    // A node counts sooner, but a quorum does not yet: nothing to do before the schedule.
    b.advance(10 * MS);
    assert!(b.feed(Event::Counting).is_empty());
    // Vouches made a quorum count: the follower writes its record (now ready) at once.
    b.nodes.wait = QuorumWait::default();
    b.nodes.counts_at = None;
    assert!(matches!(
        b.feed(Event::Counting)[..],
        [Command::Watch { .. }]
    ));
    // Not idle (a round in flight): the event is ignored, as an early timer is.
    assert!(b.feed(Event::Counting).is_empty());
}

#[test]
fn a_step_down_request_to_a_follower_is_answered_at_once() {
    let mut b = Bench::new(Prefer::None);
    b.follow("old");
    let out = b.feed(Event::StepDown(4, StepDownReason::Requested));
    assert_eq!(
        out,
        [Command::Answer {
            request: 4,
            answer: StepDown::NotLeader
        }]
    );
}

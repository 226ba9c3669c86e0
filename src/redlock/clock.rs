//! Wall-clock jumps on Redis nodes: pure detection logic.
//!
//! Redis expires a key by its own wall clock (`PX` stores an absolute time), so a node whose
//! clock steps forward deletes the lease early while the leader's monotonic deadline still runs.
//! Every reply from a node carries the node's `TIME`; this module compares successive readings
//! with the local monotonic clock and decides:
//! - a **jump**: the node's clock moved more (or less) than the monotonic clock allows, round
//!   trips of both readings and the rate drift (`driftFactor`) accounted for. The node is
//!   quarantined for `window` (ttl + margin) from the detection, so any key that vanished early
//!   would have expired by then anyway;
//! - **observe before counting**: a node counts only once this sidecar has watched its clock
//!   (same `run_id`) for `window`, so a jump just before the sidecar arrived cannot fool it.
//!
//! Times are plain microseconds: node time since the Unix epoch, local time on this process's
//! monotonic clock from any origin. That keeps the functions usable by a model checker.

/// One reading of a node's wall clock and the local interval it was taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reading {
    /// The node's `TIME`, µs since the Unix epoch.
    pub node_us: i64,
    /// Local monotonic µs just before the command was sent.
    pub sent_us: i64,
    /// Local monotonic µs just after the reply arrived.
    pub received_us: i64,
}

/// Which way a node's clock stepped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ahead of the monotonic clock: keys expire early (the hazard).
    Forward,
    /// Behind: harmless alone, but a later forward step could cancel it unseen.
    Backward,
}

impl Direction {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Forward => "forward",
            Direction::Backward => "backward",
        }
    }
}

/// A detected step of a node's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Jump {
    /// Forward or backward.
    pub direction: Direction,
    /// Estimated size: how far the node's clock moved beyond the local elapsed time (midpoint
    /// of the readings' intervals), in µs, always positive.
    pub size_us: i64,
}

/// The bounds jump detection works with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    /// Allowed relative rate difference between the node's clock and ours (`driftFactor`).
    pub drift_factor: f64,
    /// Fixed tolerance on top (timer granularity), µs.
    pub slack_us: i64,
    /// ttl + margin, µs: the quarantine after a jump, and how long a node must be watched
    /// before it counts.
    pub window_us: i64,
    /// Test-only switch: when false, no jump is ever detected and every node counts at once.
    pub enabled: bool,
    /// Test-only switch for the model check: when false, a reading after a gap longer than the
    /// window is compared like any other ([`Seen::Resumed`] never happens). Always true in the
    /// binary.
    pub rewatch_after_gap: bool,
}

/// Fixed tolerance added to every allowance: 1 ms (the resolution Redis keys expire at).
pub const SLACK_US: i64 = 1_000;

impl Policy {
    /// The policy for a lease: `margin` is the drift allowance `ttl·driftFactor + 2ms`, which
    /// covers the rate difference between this sidecar's clock and another's over the window.
    pub fn new(ttl: std::time::Duration, drift_factor: f64, enabled: bool) -> Self {
        let margin = super::math::drift(ttl, drift_factor);
        Policy {
            drift_factor,
            slack_us: SLACK_US,
            window_us: (ttl + margin).as_micros() as i64,
            enabled,
            rewatch_after_gap: true,
        }
    }
}

/// The range `[lo, hi]` (µs) within which the node's clock may move between two readings
/// without a jump: the local elapsed time between the two moments the node read its clock lies
/// in `[next.sent − prev.received, next.received − prev.sent]`, stretched by the rate drift,
/// plus the slack.
pub fn allowance(prev: &Reading, next: &Reading, p: &Policy) -> (i64, i64) {
    let min_elapsed = next.sent_us - prev.received_us;
    let max_elapsed = next.received_us - prev.sent_us;
    let slow = |e: i64| {
        e as f64
            * if e >= 0 {
                1.0 - p.drift_factor
            } else {
                1.0 + p.drift_factor
            }
    };
    let fast = |e: i64| {
        e as f64
            * if e >= 0 {
                1.0 + p.drift_factor
            } else {
                1.0 - p.drift_factor
            }
    };
    (
        slow(min_elapsed).floor() as i64 - p.slack_us,
        fast(max_elapsed).ceil() as i64 + p.slack_us,
    )
}

/// Compare two readings of one server's clock: `Some(jump)` when the node's clock moved outside
/// the [`allowance`].
pub fn check(prev: &Reading, next: &Reading, p: &Policy) -> Option<Jump> {
    let moved = next.node_us - prev.node_us;
    let (lo, hi) = allowance(prev, next, p);
    let mid = (next.sent_us + next.received_us - prev.sent_us - prev.received_us) / 2;
    let direction = if moved > hi {
        Direction::Forward
    } else if moved < lo {
        Direction::Backward
    } else {
        return None;
    };
    Some(Jump {
        direction,
        size_us: (moved - mid).abs(),
    })
}

/// What a reading told about the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The first reading of this server (new, restarted, or first since this sidecar started):
    /// the watch begins.
    First,
    /// Consistent with the previous reading.
    Steady,
    /// The same server read again after a gap longer than the window (a partition, a pause, a
    /// reply that took that long): the drift allowance over such a gap (ρ × gap) would hide a
    /// step larger than the lease's drift margin, so the watch begins again from this reading.
    Resumed {
        /// The longest the local clock may have advanced between the two readings, µs.
        gap_us: i64,
    },
    /// A jump: the node is quarantined until the given local µs.
    Jumped {
        /// The step.
        jump: Jump,
        /// End of the quarantine, local monotonic µs.
        until_us: i64,
    },
}

/// What one sidecar knows of one node's clock, for the server (`run_id`) it last reached.
/// (`Hash` for the model check, whose states hold watches.)
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Watch {
    /// The server the readings belong to; a new run_id starts a new watch.
    run_id: Option<String>,
    /// The latest reading, the base for the next comparison.
    last: Option<Reading>,
    /// Local µs when the current watch began (the first reading's arrival).
    since_us: Option<i64>,
    /// End of the quarantine after the latest jump, local µs.
    quarantined_until_us: Option<i64>,
}

impl Watch {
    /// Take a reading of server `run_id`. Readings of one server survive reconnects; a different
    /// run_id (a restart) starts over, and so does a reading more than the window after the
    /// previous one ([`Seen::Resumed`]): the caller must read each node's clock more often than
    /// that to keep counting it.
    pub fn observe(&mut self, run_id: &str, r: Reading, p: &Policy) -> Seen {
        let same_server = self.run_id.as_deref() == Some(run_id);
        let prev = self.last.filter(|_| same_server);
        self.last = Some(r);
        let Some(prev) = prev else {
            self.run_id = Some(run_id.to_string());
            self.since_us = Some(r.received_us);
            return Seen::First;
        };
        if !p.enabled {
            return Seen::Steady;
        }
        // Over a gap no longer than the window, the allowance hides at most ρ × window + slack
        // of a step: within the lease's drift margin. Beyond it, start watching again.
        let gap_us = r.received_us - prev.sent_us;
        let resumed = p.rewatch_after_gap && gap_us > p.window_us;
        if resumed {
            self.since_us = Some(r.received_us);
        }
        match check(&prev, &r, p) {
            None if resumed => Seen::Resumed { gap_us },
            None => Seen::Steady,
            Some(jump) => {
                // Measured from the arrival: the step happened before the node read its clock,
                // so no lease it shortened outlives received + window.
                let until_us =
                    (r.received_us + p.window_us).max(self.quarantined_until_us.unwrap_or(0));
                self.quarantined_until_us = Some(until_us);
                Seen::Jumped { jump, until_us }
            }
        }
    }

    /// From when (local µs) a vote of this node counts as far as its clock goes: once watched
    /// for the window and out of any jump quarantine. `None` before the first reading.
    pub fn counts_from(&self, p: &Policy) -> Option<i64> {
        if !p.enabled {
            return Some(i64::MIN);
        }
        let watched = self.since_us? + p.window_us;
        Some(watched.max(self.quarantined_until_us.unwrap_or(i64::MIN)))
    }

    /// Whether a vote of this node counts at local `now_us`, as far as its clock goes.
    pub fn counts_at(&self, now_us: i64, p: &Policy) -> bool {
        self.counts_from(p).is_some_and(|from| now_us >= from)
    }

    /// Whether the node is in a jump quarantine at `now_us`.
    pub fn quarantined_at(&self, now_us: i64) -> bool {
        self.quarantined_until_us.is_some_and(|u| now_us < u)
    }
}

/// Parse the `TIME` reply (`[seconds, microseconds]`) into µs since the epoch.
pub fn parse_time(secs: &str, micros: &str) -> Option<i64> {
    let s: i64 = secs.trim().parse().ok()?;
    let us: i64 = micros.trim().parse().ok()?;
    s.checked_mul(1_000_000)?.checked_add(us)
}

#[cfg(test)]
mod tests {
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
}

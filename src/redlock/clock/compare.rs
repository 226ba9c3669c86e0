//! One comparison of two readings of a node's clock ([`check`]), the readings and what it
//! finds, and the parsing of the node's `TIME`.

use super::Policy;

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

impl Reading {
    /// The round trip, µs.
    pub fn rtt_us(&self) -> i64 {
        self.received_us - self.sent_us
    }
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

/// The range `[lo, hi]` (µs) within which the node's clock may move between two readings
/// without a jump: the local elapsed time between the two moments the node read its clock lies
/// in `[next.sent − prev.received, next.received − prev.sent]`, stretched by the rate drift,
/// plus the slack.
pub fn allowance(prev: &Reading, next: &Reading, p: &Policy) -> std::ops::RangeInclusive<i64> {
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
    let lo = slow(min_elapsed).floor() as i64 - p.slack_us;
    let hi = fast(max_elapsed).ceil() as i64 + p.slack_us;
    lo..=hi
}

/// Compare two readings of one server's clock: `Some(jump)` when the node's clock moved outside
/// the [`allowance`].
pub fn check(prev: &Reading, next: &Reading, p: &Policy) -> Option<Jump> {
    let moved = next.node_us - prev.node_us;
    let allowed = allowance(prev, next, p);
    let mid = (next.sent_us + next.received_us - prev.sent_us - prev.received_us) / 2;
    let direction = if moved > *allowed.end() {
        Direction::Forward
    } else if moved < *allowed.start() {
        Direction::Backward
    } else {
        return None;
    };
    Some(Jump {
        direction,
        size_us: (moved - mid).abs(),
    })
}

/// Parse the `TIME` reply (`[seconds, microseconds]`) into µs since the epoch.
pub fn parse_time(secs: &str, micros: &str) -> Option<i64> {
    let s: i64 = secs.trim().parse().ok()?;
    let us: i64 = micros.trim().parse().ok()?;
    s.checked_mul(1_000_000)?.checked_add(us)
}

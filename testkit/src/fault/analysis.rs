//! The checker's analysis, a pure function of the recorded answers: which runs of answers
//! provably overlap (S1) and whether tokens of successive terms strictly increase (S2). The
//! pollers that record the answers are in [`super::checker`].
//!
//! **Model.** Consecutive answers of one process that say leader with the same token belong to
//! one term, and a term is one interval: the sidecar's deadline only moves forward while it
//! leads, and leading again needs a new acquisition, hence a new token. So a run of such answers
//! proves leadership at least over `[received(first), sent(last)]`, whatever the exact
//! evaluation instants were. A failed poll breaks the run (nothing is assumed across it).
//!
//! **S1.** Runs X and Y of two sidecars *provably* overlap iff `received(first X) ≤ sent(last Y)`
//! and `received(first Y) ≤ sent(last X)`: then every choice of evaluation instants makes the two
//! intervals intersect. Anything less certain (e.g. one sidecar's last answer and the other's
//! first answer had overlapping request windows) is not counted, so every reported overlap is
//! real; a handover faster than the polling resolution is simply not judged.
//!
//! **S2.** A term is (sidecar, process generation, token). Term Y provably came before term X iff
//! `received(first Y) < sent(last X)` and not the other way round. A violation is two distinct
//! terms with the same token, or a later term with a smaller token.

use std::time::Duration;

/// A stretch of consecutive, agreeing answers of one sidecar process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Sidecar slot.
    pub slot: usize,
    /// Process generation in the slot (a restarted sidecar is a new generation).
    pub generation: u32,
    /// The answers' `is_leader`.
    pub is_leader: bool,
    /// The answers' `fencing_token`.
    pub token: Option<u64>,
    /// (sent, received) of the first answer, since the checker's start.
    pub first: (Duration, Duration),
    /// (sent, received) of the last answer.
    pub last: (Duration, Duration),
    /// Answers in the stretch.
    pub answers: u64,
}

impl Segment {
    /// A segment of one answer (for building synthetic histories).
    pub fn one(slot: usize, leader: Option<u64>, sent_ms: u64, received_ms: u64) -> Segment {
        let at = (
            Duration::from_millis(sent_ms),
            Duration::from_millis(received_ms),
        );
        Segment {
            slot,
            generation: 1,
            is_leader: leader.is_some(),
            token: leader,
            first: at,
            last: at,
            answers: 1,
        }
    }

    /// Extend with a later answer (for synthetic histories).
    pub fn to(mut self, sent_ms: u64, received_ms: u64) -> Segment {
        self.last = (
            Duration::from_millis(sent_ms),
            Duration::from_millis(received_ms),
        );
        self.answers += 1;
        self
    }
}

/// Two sidecars provably leading at once.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// (slot, generation, token) of each.
    pub a: (usize, u32, Option<u64>),
    pub b: (usize, u32, Option<u64>),
    /// Bounds of the proven common stretch (a single instant somewhere inside when it is
    /// proven through one answer's window).
    pub from: Duration,
    pub to: Duration,
}

/// Two terms whose tokens do not increase.
#[derive(Clone, Debug)]
pub struct TokenViolation {
    /// (slot, generation, token, first received) of the earlier term.
    pub earlier: (usize, u32, u64, Duration),
    /// The same for the later term.
    pub later: (usize, u32, u64, Duration),
}

/// What the checker found.
#[derive(Debug, Default)]
pub struct Report {
    /// S1 violations.
    pub overlaps: Vec<Overlap>,
    /// S2 violations.
    pub token_violations: Vec<TokenViolation>,
    /// Distinct terms observed.
    pub terms: usize,
    /// Tokens in the order their terms were first seen.
    pub tokens: Vec<u64>,
    /// Per millisecond since the start: whether some sidecar answered leader around then.
    pub led: Vec<bool>,
}

/// Check S1 and S2 over the segments of every slot.
pub fn analyze(segments: &[Segment]) -> Report {
    let runs: Vec<&Segment> = segments.iter().filter(|s| s.is_leader).collect();
    let mut report = Report::default();
    for (i, x) in runs.iter().enumerate() {
        for y in &runs[i + 1..] {
            if x.slot == y.slot {
                continue;
            }
            if x.first.1 <= y.last.0 && y.first.1 <= x.last.0 {
                let from = x.first.1.max(y.first.1);
                let to = x.last.0.min(y.last.0);
                report.overlaps.push(Overlap {
                    a: (x.slot, x.generation, x.token),
                    b: (y.slot, y.generation, y.token),
                    from: from.min(to),
                    to: to.max(from),
                });
            }
        }
    }
    // Terms: (slot, generation, token) → (earliest received, latest sent).
    let mut terms: Vec<((usize, u32, u64), Duration, Duration)> = Vec::new();
    for s in &runs {
        let key = (s.slot, s.generation, s.token.unwrap_or(0));
        match terms.iter_mut().find(|(k, _, _)| *k == key) {
            Some(t) => {
                t.1 = t.1.min(s.first.1);
                t.2 = t.2.max(s.last.0);
            }
            None => terms.push((key, s.first.1, s.last.0)),
        }
    }
    terms.sort_by_key(|t| t.1);
    report.terms = terms.len();
    report.tokens = terms.iter().map(|t| t.0.2).collect();
    for (i, x) in terms.iter().enumerate() {
        for y in &terms[i + 1..] {
            let x_before_y = x.1 < y.2;
            let y_before_x = y.1 < x.2;
            let (earlier, later) = match (x_before_y, y_before_x) {
                (true, false) => (x, y),
                (false, true) => (y, x),
                // Unordered (too close to call) or overlapping (an S1 finding): only equal
                // tokens are certainly wrong.
                _ => (x, y),
            };
            let unordered = x_before_y == y_before_x;
            let bad = if unordered {
                earlier.0.2 == later.0.2
            } else {
                later.0.2 <= earlier.0.2
            };
            if bad {
                report.token_violations.push(TokenViolation {
                    earlier: (earlier.0.0, earlier.0.1, earlier.0.2, earlier.1),
                    later: (later.0.0, later.0.1, later.0.2, later.1),
                });
            }
        }
    }
    let end = segments.iter().map(|s| s.last.1).max().unwrap_or_default();
    let mut led = vec![false; end.as_millis() as usize + 1];
    for s in &runs {
        let a = ((s.first.0 + s.first.1) / 2).as_millis() as usize;
        let b = ((s.last.0 + s.last.1) / 2).as_millis() as usize;
        for slot in &mut led[a..=b] {
            *slot = true;
        }
    }
    report.led = led;
    report
}

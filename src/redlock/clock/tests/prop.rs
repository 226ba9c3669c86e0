//! The margin, checked by machine (issue 52): random fault vectors within the SPEC's
//! assumptions, run through the product's own clock code ([`Watch::observe`],
//! [`Watch::band_us`], [`Watch::counts_at`], [`Watch::prove`], [`Watch::attest`],
//! [`Watch::may_vouch`]) and the term arithmetic of [`crate::redlock::acquire`] and
//! [`crate::redlock::renew`] ([`math::validity`], the deadline `T1 + ttl − margin − lead`, the
//! hold of an unproved vote), against one invariant:
//!
//! > whenever a taker counts a node and leads, every earlier holder's deadline has passed in
//! > real time.
//!
//! One node suffices: any two quorums share a node, and each side's lead or hold covers the band
//! of every vote it counted, so the shared node's own bands are paid. The vector:
//! - **the node's wall clock** runs at the real rate (the reference) plus steps of any size and
//!   sign at any instant; a key lives until the node's clock reaches its expiry. One case is
//!   left out: a step and its exact reversal between two readings with the key expiring in
//!   between, which no reading shows (`docs/concepts/clock-jumps.md`, "Limits");
//! - **sidecars** A (the holder), B (the taker) and C (the previous holder P releasing with a
//!   proof, or a voucher V) with monotonic clocks whose rates differ pairwise, and from the
//!   node's, by less than `driftFactor` (the SPEC's assumption);
//! - **readings** of the node by each sidecar: gaps up to the window, round trips up to the
//!   base bound (`redis.timeout`) and beyond it (slow readings, never bases), the node reading
//!   its clock anywhere within the round trip (the extremes favoured);
//! - **A's term**: a renewal of an old watch, or a fresh watch that counts through a vouch or a
//!   release proof (a fresh named successor); A is cut off after its last reading (its term
//!   runs to its deadline);
//! - **B's attempts**: each of its readings after A's key was set; the first that finds the
//!   key gone and counts wins, and B leads after its hold.
//!
//! The invariant is checked for every vector; the test-only switches of the fixes
//! ([`Policy::span_check`], [`Policy::proof_continuity_check`]) turn the fixes off, and the
//! searches with them off must find findings 1 to 3 of the review (their minimal vectors are
//! kept as named tests below).

use super::*;
use crate::redlock::math;
use std::time::Duration;

mod findings;
mod vectors;

/// The lease tag of A's term (a process's lease number).
const TAG: u64 = 7;

/// One sidecar's reading schedule: gaps (µs, real), round trips (µs, real) and where in the
/// round trip the node read its clock (0 = at sending, 255 = at arrival).
#[derive(Clone, Debug)]
struct Schedule {
    /// Real µs of the first reading's sending.
    start: i64,
    /// Per reading after the first: the gap since the previous reading's sending.
    gaps: Vec<i64>,
    /// Per reading: round trip and the node's point in it.
    legs: Vec<(i64, u8)>,
}

/// Which way A's watch counts the node at its term's reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fresh {
    /// A's watch is as old as B's: it counts by itself (a renewal, or a takeover after expiry).
    Old,
    /// A's watch began shortly before its grant: it counts through a vouch of C's, or through
    /// C's release proof (C held the key and released it naming A).
    New,
}

#[derive(Clone, Debug)]
struct Vector {
    ttl_ms: u64,
    /// Clock rates: every rate lies in `[lo, lo + 0.99 ρ]`, `lo > 1 − ρ` (ppm from 1).
    rates_ppm: [i64; 3],
    a: Schedule,
    b: Schedule,
    c: Schedule,
    fresh: Fresh,
    /// Node clock steps: (anchor, offset µs, size µs): the anchor picks one of the readings'
    /// instants at the node (all sidecars', in time order, modulo their number), so steps fall
    /// just before or after readings, where they hide best.
    steps: Vec<(usize, i64, Size)>,
    /// B's attempt at the moment A's key is gone: (delay µs after it, round trip, point).
    attempt: (i64, i64, u8),
    /// Anchor the steps to A's last reading and B's next four only (the key's life).
    in_key_life: bool,
}

/// A step's size.
#[derive(Clone, Copy, Debug)]
enum Size {
    /// Any size, either sign, µs.
    Abs(i64),
    /// Forward, this many thousandths of `driftFactor` × the span from the step to B's next
    /// scheduled reading, and 2 ms of round trips: about what one comparison lets pass.
    Rel(i64),
    /// Undo the steps so far (their sum, negated), give or take this many µs.
    Undo(i64),
}

/// A sidecar's clock: local µs = rate × real µs.
#[derive(Clone, Copy, Debug)]
struct Clock(f64);

impl Clock {
    fn local(self, real: i64) -> i64 {
        (real as f64 * self.0).round() as i64
    }
    /// The first real µs at which the local clock shows `local` or more.
    fn real(self, local: i64) -> i64 {
        (local as f64 / self.0).ceil() as i64
    }
}

const T0: i64 = 1_700_000_000 * 1_000_000;

struct Node<'v> {
    steps: &'v [(i64, i64)],
}

impl Node<'_> {
    /// The node's wall clock at real `t`.
    fn at(&self, t: i64) -> i64 {
        T0 + t
            + self
                .steps
                .iter()
                .filter(|(at, _)| *at <= t)
                .map(|(_, s)| s)
                .sum::<i64>()
    }
}

/// One reading as the sidecar sees it, and the real instant the node read its clock.
#[derive(Clone, Copy, Debug)]
struct Taken {
    reading: Reading,
    node_real: i64,
}

fn take(node: &Node<'_>, clock: Clock, sent_real: i64, rtt: i64, at: u8) -> Taken {
    let node_real = sent_real + rtt * at as i64 / 255;
    Taken {
        reading: Reading {
            node_us: node.at(node_real),
            sent_us: clock.local(sent_real),
            received_us: clock.local(sent_real + rtt),
        },
        node_real,
    }
}

fn readings(node: &Node<'_>, clock: Clock, s: &Schedule) -> Vec<Taken> {
    let mut at = s.start;
    let mut out = Vec::new();
    for (i, &(rtt, point)) in s.legs.iter().enumerate() {
        if i > 0 {
            at += s.gaps[i - 1];
        }
        out.push(take(node, clock, at, rtt, point));
    }
    out
}

/// What a vector shows: `Err` with the overlap when a taker leads before a holder's deadline.
fn check(v: &Vector, p: &Policy) -> Result<(), String> {
    let lo = 1.0 - p.drift_factor + 1e-6;
    let rate = |i: usize| Clock(lo + v.rates_ppm[i] as f64 * 1e-6);
    let (ca, cb, cc) = (rate(0), rate(1), rate(2));
    // The readings' instants at the node without steps (a step moves the node's clock, not
    // when it reads it), then the steps anchored to them.
    let flat = Node { steps: &[] };
    let mut anchors: Vec<i64> = [(&v.a, ca), (&v.b, cb), (&v.c, cc)]
        .iter()
        .flat_map(|(s, c)| readings(&flat, *c, s).into_iter().map(|t| t.node_real))
        .collect();
    anchors.sort_unstable();
    if v.in_key_life {
        let grant = readings(&flat, ca, &v.a).last().map_or(0, |t| t.node_real);
        let b_after = readings(&flat, cb, &v.b)
            .into_iter()
            .map(|t| t.node_real)
            .filter(|t| *t > grant)
            .take(4);
        anchors = std::iter::once(grant).chain(b_after).collect();
    }
    let b_flat: Vec<i64> = readings(&flat, cb, &v.b)
        .iter()
        .map(|t| t.node_real)
        .collect();
    let mut steps: Vec<(i64, i64)> = Vec::new();
    let mut sum = 0;
    let mut placed: Vec<(i64, Size)> = v
        .steps
        .iter()
        .map(|&(k, off, size)| (anchors[k % anchors.len()] + off, size))
        .collect();
    placed.sort_by_key(|(at, _)| *at);
    for (at, size) in placed {
        let size = match size {
            Size::Abs(s) => s,
            Size::Rel(permille) => {
                // What the comparison of B's readings around the step lets pass: both round
                // trips and `driftFactor` × the span.
                let next = b_flat
                    .iter()
                    .position(|&b| b > at)
                    .unwrap_or(b_flat.len() - 1);
                let prev = next.saturating_sub(1);
                let rtt = |i: usize| v.b.legs[i].0;
                let span = (b_flat[next] - b_flat[prev]).max(0) as f64 * p.drift_factor
                    + (rtt(prev) + rtt(next)) as f64;
                (span * permille as f64 / 1000.0) as i64
            }
            Size::Undo(by) => -sum + by,
        };
        sum += size;
        steps.push((at, size));
    }
    check_steps(v, &steps, p)
}

/// [`check`] with the node's steps given as (real µs, size µs).
fn check_steps(v: &Vector, steps: &[(i64, i64)], p: &Policy) -> Result<(), String> {
    let ttl = Duration::from_millis(v.ttl_ms);
    let lo = 1.0 - p.drift_factor + 1e-6;
    let rate = |i: usize| Clock(lo + v.rates_ppm[i] as f64 * 1e-6);
    let (ca, cb, cc) = (rate(0), rate(1), rate(2));
    let margin = p.term_margin(ttl);
    let node = Node { steps };
    let a_reads = readings(&node, ca, &v.a);
    let b_reads = readings(&node, cb, &v.b);
    let c_reads = readings(&node, cc, &v.c);
    let Some(&a_last) = a_reads.last() else {
        return Ok(());
    };

    // C: a voucher of A's fresh watch, or the previous holder releasing with a proof. Its watch
    // runs from its schedule; what it did before A's grant is all that matters.
    let mut wc = Watch::default();
    let mut wa = Watch::default();
    // A's first reading writes its attestation request (a reading of its watch).
    let mut a_iter = a_reads.iter().peekable();
    let mut vouched_at: Option<i64> = None; // C's vouching reading's real node instant
    let mut proof = false;
    let mut request_at: Option<i64> = None;
    let mut c_released = false;
    for c in &c_reads {
        // A's readings up to this moment (node order), so that requests and vouches interleave
        // as the node ran them.
        while let Some(a) = a_iter.next_if(|a| a.node_real < c.node_real) {
            wa.observe("x", a.reading, p);
            if v.fresh == Fresh::New && request_at.is_none() && wa.epoch().is_some() {
                request_at = Some(a.node_real);
            }
            if let Some(at) = vouched_at
                && at < a.node_real
            {
                let (_, epoch) = wa
                    .epoch()
                    .map(|(r, e)| (r.to_string(), e))
                    .unwrap_or_default();
                wa.attest("x", epoch, a.reading.received_us);
            }
        }
        if c.node_real >= a_last.node_real {
            break;
        }
        // The proof is written when the node counts for C at sending; its reply is observed
        // after (review, finding 1). C releases at its last reading before A's grant.
        let counts_at_send = wc.counts_at(c.reading.sent_us, p);
        let seen = wc.observe("x", c.reading, p);
        if v.fresh == Fresh::New {
            let is_last = c_reads
                .iter()
                .find(|n| n.node_real > c.node_real)
                .is_none_or(|n| n.node_real >= a_last.node_real);
            if is_last && !c_released {
                c_released = true;
                proof = counts_at_send;
            } else if request_at.is_some_and(|q| q < c.node_real)
                && vouched_at.is_none()
                && !matches!(seen, Seen::Jumped { .. })
                && wc.may_vouch("x", c.reading.received_us, p)
            {
                vouched_at = Some(c.node_real);
            }
        }
    }
    for a in a_iter {
        let last = a.node_real == a_last.node_real;
        let seen = wa.observe("x", a.reading, p);
        if let Some(at) = vouched_at
            && at < a.node_real
            && !last
        {
            let (_, epoch) = wa
                .epoch()
                .map(|(r, e)| (r.to_string(), e))
                .unwrap_or_default();
            wa.attest("x", epoch, a.reading.received_us);
        }
        if last && matches!(seen, Seen::Jumped { .. }) {
            return Ok(());
        }
    }
    // A's term: counted at its last reading (by its own watch or a vouch; or on the proof).
    let at = a_last.reading.received_us;
    let counted = wa.counts_at(at, p)
        || (v.fresh == Fresh::New
            && proof
            && wa.counts_with_proof_from(p).is_some_and(|f| f <= at)
            && wa.prove(TAG, "x", at)
            && wa.counts_from_for(p, TAG).is_some_and(|f| f <= at));
    if !counted {
        return Ok(());
    }
    let lead_a = Duration::from_micros(wa.band_us().max(0) as u64);
    let t1 = a_last.reading.sent_us;
    let elapsed = Duration::from_micros((at - t1) as u64);
    if math::validity(ttl, elapsed, margin + lead_a).is_none() {
        return Ok(());
    }
    let deadline_local = t1 + (ttl.as_micros() as i64) - (margin + lead_a).as_micros() as i64;
    let a_ends = ca.real(deadline_local);
    let expiry = a_last.reading.node_us + ttl.as_micros() as i64;

    // B: every reading is observed; after A's grant each is also an attempt, and so is one
    // made just as the key is gone (a follower's timer set by the key's pttl, or a notice).
    let mut b_all = b_reads;
    if let Some(gone_at) = first_gone(&node, a_last.node_real, expiry) {
        let (delay, rtt, point) = v.attempt;
        let sent = gone_at + delay - rtt * point as i64 / 255;
        let attempt = take(&node, cb, sent, rtt, point).reading;
        b_all.retain(|t| {
            t.reading.received_us < attempt.sent_us || t.reading.sent_us > attempt.received_us
        });
        b_all.push(take(&node, cb, sent, rtt, point));
        b_all.sort_by_key(|t| t.reading.sent_us);
    }
    let mut wb = Watch::default();
    let mut last_received = i64::MIN;
    for b in &b_all {
        // One reading at a time on B's connection.
        if b.reading.sent_us < last_received {
            continue;
        }
        last_received = b.reading.received_us;
        let seen = wb.observe("x", b.reading, p);
        if b.node_real <= a_last.node_real {
            continue;
        }
        // Gone by the clock this reading sees. A key that expired and whose node's clock then
        // stepped back below its expiry before this reading (a step and its reversal between
        // two readings, the key expiring in between) is the limit the clock-jump docs name: no
        // reading shows it, so no margin can pay for it; the vectors leave it out.
        let gone = b.reading.node_us >= expiry;
        if !gone || matches!(seen, Seen::Jumped { .. }) {
            continue;
        }
        let got = b.reading.received_us;
        if !wb.counts_at(got, p) {
            continue;
        }
        let band = Duration::from_micros(wb.band_us().max(0) as u64);
        let hold = band;
        let elapsed = Duration::from_micros((got - b.reading.sent_us) as u64) + hold;
        if math::validity(ttl, elapsed, margin + band).is_none() {
            continue;
        }
        let b_leads = cb.real(got + hold.as_micros() as i64);
        if b_leads < a_ends {
            return Err(format!(
                "B leads at {b_leads} µs, {} µs before A's deadline at {a_ends} µs (A's lead {lead_a:?}, B's hold {hold:?})",
                a_ends - b_leads
            ));
        }
        return Ok(());
    }
    Ok(())
}

/// The first real instant after `from` at which the node's clock reaches `expiry`: Redis
/// deletes the key then, whatever the clock does after.
fn first_gone(node: &Node<'_>, from: i64, expiry: i64) -> Option<i64> {
    // Between steps the clock runs at the real rate: in each segment after `from`, the
    // instant it reaches the expiry, if it does.
    let mut bounds: Vec<i64> = node
        .steps
        .iter()
        .map(|(at, _)| *at)
        .filter(|at| *at > from)
        .collect();
    bounds.push(i64::MAX / 4);
    let mut start = from + 1;
    for end in bounds {
        let offset = node.at(start) - (T0 + start);
        let t = (expiry - T0 - offset).max(start);
        if t < end {
            return Some(t);
        }
        start = end;
    }
    None
}

/// The base bound of the vectors: the binary's default `redis.timeout`.
const BASE_RTT_US: i64 = 50_000;

fn policy(ttl_ms: u64) -> Policy {
    Policy::new(Duration::from_millis(ttl_ms), 0.01, true)
        .with_base_rtt(Duration::from_micros(BASE_RTT_US as u64))
}

/// Ppm above the vectors' lowest rate (`1 − ρ + 1e-6`) of a clock at `rate`.
fn ppm(rate: f64) -> i64 {
    ((rate - (1.0 - 0.01 + 1e-6)) * 1e6).round() as i64
}

/// Readings every `gap` from `start`, `n` of them, each with round trip `rtt`, the node
/// reading its clock at `point`.
fn every(start: i64, gap: i64, n: usize, rtt: i64, point: u8) -> Schedule {
    Schedule {
        start,
        gaps: vec![gap; n.saturating_sub(1)],
        legs: vec![(rtt, point); n],
    }
}

const SEC: i64 = 1_000_000;

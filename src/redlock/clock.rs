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
//!   (same `run_id`) for `window`, so a jump just before the sidecar arrived cannot fool it;
//! - **attestations** shorten that wait: another sidecar that counts the node at a reading
//!   taken after this watch began vouches for it ([`Watch::may_vouch`], [`Watch::attest`]).
//!   Its watch covers every step before its reading, this one every step after the start of
//!   this watch, and the start came first: no step falls between the two.
//!
//! - **the blind band**: a step no larger than the allowance is invisible, so it is paid for
//!   in time instead. Only a reading with a round trip within [`Policy::base_rtt_us`] becomes a
//!   *base*; every reading is compared with every base of the last window (not only the
//!   latest reading), and [`Watch::band_us`] is what the comparison of that reading could have
//!   missed beyond what every term's margin pays ([`Policy::term_margin`]). A leader ends its
//!   term that much sooner; a follower that wins a node without a release proof starts its
//!   term that much later ([`super::acquire`], [`super::renew`]). The derivation, once:
//!   `docs/concepts/clock-jumps.md`, "The bound"; checked by machine in `clock/tests/prop.rs`.
//!
//! Times are plain microseconds: node time since the Unix epoch, local time on this process's
//! monotonic clock from any origin. That keeps the functions usable by a model checker.

mod compare;
mod policy;

pub use compare::{Direction, Jump, Reading, allowance, check, parse_time};
use policy::band;
pub use policy::{DEFAULT_BASE_RTT_US, Policy, SLACK_US};

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
    /// The latest reading, whatever its round trip.
    last: Option<Reading>,
    /// The bases of the current watch, oldest first: readings within the base bound, about
    /// [`Policy::base_spacing_us`] apart, the oldest at least a window before the newest
    /// reading. Every reading is compared with each.
    bases: Vec<Reading>,
    /// [`Watch::band_us`] of the latest reading.
    band_us: i64,
    /// Local µs when the current watch began (the first reading's arrival).
    since_us: Option<i64>,
    /// End of the quarantine after the latest jump, local µs.
    quarantined_until_us: Option<i64>,
    /// Per lease (a tag the process gives each of its leases): local µs of a reading whose reply
    /// proved that no live holder of *that lease's* key was left on the node (a grant that
    /// consumed the previous holder's release proof, [`Watch::prove`]): from then on the
    /// current watch counts for that lease, and that lease alone, without waiting for the
    /// window (it says nothing of another lease's key, which an unseen step may have cut
    /// short). Cleared whenever the watch begins again (new server, long gap).
    proved: Vec<(u64, i64)>,
    /// Which watch of this sidecar the current one is: counts every beginning (first reading of
    /// a server, a long gap). An attestation request names it, so a vouch for an earlier watch
    /// is never taken for this one ([`Watch::attest`]).
    epoch: u32,
    /// Local µs of a reading that found another sidecar's vouch for this watch
    /// ([`Watch::attest`]): from then on it counts, as after a release proof. Cleared whenever
    /// the watch begins again.
    vouched_us: Option<i64>,
}

impl Watch {
    /// Take a reading of server `run_id`. Readings of one server survive reconnects; a different
    /// run_id (a restart) starts over, and so does a reading more than the window after the
    /// newest base ([`Seen::Resumed`]): the caller must read each node's clock within the base
    /// bound more often than that to keep counting it. A watch begins at a reading within the
    /// base bound: until one comes, the node does not count.
    pub fn observe(&mut self, run_id: &str, r: Reading, p: &Policy) -> Seen {
        if self.run_id.as_deref() != Some(run_id) {
            self.run_id = Some(run_id.to_string());
            self.bases.clear();
            self.since_us = None;
        }
        self.last = Some(r);
        // Under the test-only switch, every reading is a base (5375106).
        let base = !p.blind_check || r.rtt_us() <= p.base_rtt_us;
        let Some(&newest) = self.bases.last() else {
            // No base of this server yet: the watch begins here, if this reading can be one.
            self.band_us = p.max_band_us(r.rtt_us());
            if base {
                self.bases.push(r);
                self.begin(r.received_us);
            }
            return Seen::First;
        };
        if !p.enabled {
            self.band_us = 0;
            self.bases = vec![r];
            return Seen::Steady;
        }
        // Over a gap no longer than the window, the allowance hides at most ρ × window + slack
        // of a step beyond the round trips: paid for in the band. Beyond it, start watching
        // again.
        let gap_us = r.received_us - newest.sent_us;
        let resumed = p.rewatch_after_gap && gap_us > p.window_us;
        self.band_us = self.band_of(&r, p) + self.inherited_us(&r, p);
        // The largest step any base reveals.
        let jump = self
            .bases
            .iter()
            .filter_map(|b| check(b, &r, p))
            .max_by_key(|j| j.size_us);
        if resumed || jump.is_some() {
            // The bases no longer describe the node's clock: this reading (if it can be one)
            // is the only base; after a long gap the watch begins again from it.
            self.bases.clear();
            if base {
                self.bases.push(r);
            }
            if resumed {
                match base {
                    true => self.begin(r.received_us),
                    false => self.since_us = None,
                }
            } else if !base {
                // A jump seen by a slow reading: the next base starts a new watch, so that no
                // step between this reading and it goes uncompared.
                self.since_us = None;
            }
        } else if base {
            self.keep_base(r, p);
        }
        match jump {
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

    /// The band of reading `r` against the current bases: the slowest base, `r`'s own round
    /// trip, and the widest gap between consecutive bases (or the newest and `r`). What the
    /// comparisons may miss beyond it over a key's life (the rate over the span, a step between
    /// two slow bases) is in every term's margin: `docs/concepts/clock-jumps.md`, "The bound".
    fn band_of(&self, r: &Reading, p: &Policy) -> i64 {
        if !p.enabled || !p.blind_check {
            return 0;
        }
        let slowest = self.bases.iter().map(Reading::rtt_us).max().unwrap_or(0);
        let mut widest = 0;
        let mut prev: Option<&Reading> = None;
        for b in self.bases.iter().chain(std::iter::once(r)) {
            if let Some(a) = prev {
                widest = widest.max(b.received_us - a.sent_us);
            }
            prev = Some(b);
        }
        band(slowest, r.rtt_us(), widest, p)
    }

    /// What a watch that counts through a vouch owes besides its own band, at reading `r`:
    /// until it is a window old, the steps before the voucher's reading that the voucher's
    /// comparison could have missed are nobody else's to pay (review, finding 1). The voucher's
    /// band is not sent, so it is taken at the most a voucher vouches at
    /// ([`Policy::vouch_band_us`], [`Watch::may_vouch`]). Nothing once the watch counts by
    /// itself, or under the test-only switch.
    fn inherited_us(&self, r: &Reading, p: &Policy) -> i64 {
        let young = self
            .since_us
            .is_some_and(|since| r.received_us < since + p.window_us);
        match p.proof_continuity_check && self.vouched_us.is_some() && young {
            true => p.vouch_band_us(),
            false => 0,
        }
    }

    /// Keep base `r`: once the newest is [`Policy::base_spacing_us`] old (under the test-only
    /// switch, always, as the only one); then drop the bases a window older than another.
    fn keep_base(&mut self, r: Reading, p: &Policy) {
        if !p.blind_check {
            self.bases = vec![r];
            return;
        }
        let newest = self.bases.last().map_or(i64::MIN, |b| b.received_us);
        if r.received_us.saturating_sub(newest) < p.base_spacing_us() {
            return;
        }
        self.bases.push(r);
        let horizon = r.received_us - p.window_us;
        while self.bases.len() > 1 && self.bases[1].received_us <= horizon {
            self.bases.remove(0);
        }
    }

    /// The largest step of the node's clock since any base that the latest reading may have
    /// missed, µs (0 under the test-only switch or with detection off): what a term that
    /// counted this reading must make room for, beyond the rate drift. A reading with no base
    /// before it has the largest band its round trip allows ([`Policy::max_band_us`]).
    pub fn band_us(&self) -> i64 {
        self.band_us
    }

    /// A watch begins at local `received_us`: what the previous one earned goes.
    fn begin(&mut self, received_us: i64) {
        self.since_us = Some(received_us);
        self.proved.clear();
        self.vouched_us = None;
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// From when (local µs) a vote of this node counts as far as its clock goes, for any lease:
    /// once watched for the window (or since an attestation, [`Watch::attest`]) and out of any
    /// jump quarantine. `None` before the first reading. A release proof counts for its own
    /// lease only ([`Watch::counts_from_for`]).
    pub fn counts_from(&self, p: &Policy) -> Option<i64> {
        self.counts_from_with(p, None)
    }

    /// [`Watch::counts_from`] for `lease`: also since its release proof ([`Watch::prove`]).
    pub fn counts_from_for(&self, p: &Policy, lease: u64) -> Option<i64> {
        let proved = self.proved.iter().find(|(l, _)| *l == lease);
        self.counts_from_with(p, proved.map(|(_, at)| *at))
    }

    fn counts_from_with(&self, p: &Policy, proved_us: Option<i64>) -> Option<i64> {
        if !p.enabled {
            return Some(i64::MIN);
        }
        // A proof says nobody held the key; it says nothing of a step before this watch began,
        // which the next holder's watch may see undone as nothing (review, finding 1). Only
        // this watch's window, or a voucher's watch before it, covers that.
        let proved_us = proved_us.filter(|_| !p.proof_continuity_check);
        let mut watched = self.since_us? + p.window_us;
        for early in [proved_us, self.vouched_us].into_iter().flatten() {
            watched = watched.min(early);
        }
        Some(watched.max(self.quarantined_until_us.unwrap_or(i64::MIN)))
    }

    /// The current watch, for an attestation request: the server it watches and its epoch.
    /// `None` before the first reading.
    pub fn epoch(&self) -> Option<(&str, u32)> {
        self.since_us?;
        Some((self.run_id.as_deref()?, self.epoch))
    }

    /// The watch ([`Watch::epoch`]: server run id and epoch) to ask a vouch for at local
    /// `now_us`: a watch is running, it does not count yet and no jump quarantine runs (a vouch
    /// would lift neither). `None` otherwise, and always with detection off.
    pub fn attestation_wanted(&self, now_us: i64, p: &Policy) -> Option<(&str, u32)> {
        if !p.enabled || self.counts_at(now_us, p) || self.quarantined_at(now_us) {
            return None;
        }
        self.epoch()
    }

    /// Whether this sidecar may vouch for the watches of others whose attestation requests the
    /// reply read at local `received_us` from server `run_id` returned: that reply has been
    /// observed (no jump since the previous reading, or the quarantine says so), it is of the
    /// server this watch follows, and the node counts for this sidecar at that reading. Then no
    /// step of the node's clock before that reading can still matter, and every request it
    /// returned was written before it. Under the test-only switch, any reading of the same
    /// server vouches.
    pub fn may_vouch(&self, run_id: &str, received_us: i64, p: &Policy) -> bool {
        if self.run_id.as_deref() != Some(run_id) || self.since_us.is_none() {
            return false;
        }
        if !p.attestation_check {
            return true;
        }
        // The vouchee pays for this reading's band up to the bound, not beyond it.
        let paid = !p.proof_continuity_check || self.band_us <= p.vouch_band_us();
        self.counts_at(received_us, p) && paid
    }

    /// A reply read at local `received_us` from server `run_id` found another sidecar's vouch
    /// for this sidecar's watch `epoch` (its attestation request, written at a reading of that
    /// watch, was among those the voucher's counting reading returned, [`Watch::may_vouch`]).
    /// The voucher's watch covers every step of the node's clock before its reading; this
    /// watch, unbroken since before the request, every step after. So the node counts from this
    /// reading on, until the watch begins again. Returns whether the vouch was taken: not for
    /// another server or an earlier watch (a long gap or a restart since the request), nor
    /// while a jump quarantine runs.
    pub fn attest(&mut self, run_id: &str, epoch: u32, received_us: i64) -> bool {
        let same = self.run_id.as_deref() == Some(run_id)
            && self.epoch == epoch
            && self.since_us.is_some_and(|since| since <= received_us);
        if !same || self.quarantined_at(received_us) {
            return false;
        }
        self.vouched_us = Some(self.vouched_us.map_or(received_us, |v| v.min(received_us)));
        true
    }

    /// Whether the current watch counts early thanks to an attestation.
    pub fn vouched(&self) -> bool {
        self.vouched_us.is_some()
    }

    /// From when a vote of this node would count if it came with a release proof: the watch
    /// has begun and no jump quarantine runs; the window is not waited for. `None` before the
    /// first reading.
    pub fn counts_with_proof_from(&self, p: &Policy) -> Option<i64> {
        if !p.enabled {
            return Some(i64::MIN);
        }
        // The proof then only spares the hold ([`Watch::counts_from_with`]).
        if p.proof_continuity_check {
            return self.counts_from(p);
        }
        let since = self.since_us?;
        Some(since.max(self.quarantined_until_us.unwrap_or(i64::MIN)))
    }

    /// The node proved, in the reply read at local `received_us`, that no live holder was left
    /// on it: this sidecar's grant consumed the previous holder's release proof (the reservation
    /// a holder that still counted the node wrote in the same atomic step as deleting its own
    /// key, [`super::scripts::RELEASE`]). Nobody held the key, so the grant needs no hold. A
    /// step back before this watch began, undone after the grant, is another matter (it
    /// shortens this sidecar's own key unseen by older watches): under
    /// [`Policy::proof_continuity_check`] the proof makes the node count only where the watch
    /// counts anyway, by itself or through a vouch; under the test-only switch, from then on
    /// for `lease`, until the watch begins again. Returns whether the proof was taken: not when the reading
    /// is of another server than the watch's, nor while a jump quarantine runs.
    pub fn prove(&mut self, lease: u64, run_id: &str, received_us: i64) -> bool {
        let same = self.run_id.as_deref() == Some(run_id)
            && self.last.is_some_and(|l| l.received_us == received_us);
        if !same || self.quarantined_at(received_us) {
            return false;
        }
        match self.proved.iter_mut().find(|(l, _)| *l == lease) {
            Some((_, at)) => *at = (*at).min(received_us),
            None => self.proved.push((lease, received_us)),
        }
        true
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

#[cfg(test)]
mod tests;

//! What a won round pays for the steps its clock watch may have missed ([`Blind`]).

use std::time::Duration;

/// The blind bands ([`crate::redlock::clock::Watch::band_us`]) of a round's counted votes: how far a
/// node's clock may have stepped without this sidecar's watch seeing it, at each reading.
///
/// Two terms meet on a node: the previous holder set its key at one reading of its own, this
/// sidecar finds the key gone at one of its. A step forward between them that neither watch
/// could see shortens the previous key; a step back before the previous holder's reading, then
/// forward, also does, and its backward half is for the previous holder's watch (or the watch
/// that vouched for it) to see. So each side pays for its own watch, and every term's margin
/// for what no band sees (`docs/concepts/clock-jumps.md`, "The bound"):
/// - **lead**: every term ends the largest band of the votes it counted sooner (the backward
///   half, for whoever comes next);
/// - **hold**: a term won on votes without a release proof begins the largest band of those
///   votes later (the forward half). A proved vote needs none: its node had no live holder.
///
/// Any quorum of counted votes would do for the hold: a previous holder's quorum shares a node
/// with it, and the hold covers that node's band. So the hold is that of the best quorum among
/// the votes counted so far ([`Blind::hold`]): when a vote without the proof came among the
/// first, a proved one that follows a moment later ends the hold (a graceful handover whose
/// proof is on only a quorum of the nodes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Blind {
    /// The largest band of every counted vote.
    pub(super) lead: Duration,
    /// Per counted vote, the hold it asks for: its band, or zero with a release proof.
    holds: Vec<Duration>,
}

impl Blind {
    /// A counted vote read with `band`; `proved`: its grant consumed a release proof.
    pub(super) fn count(&mut self, band: Duration, proved: bool) {
        self.lead = self.lead.max(band);
        self.holds.push(if proved { Duration::ZERO } else { band });
    }

    /// The hold of the best `quorum` of the counted votes: the `quorum`-th smallest. With
    /// exactly a quorum counted, the largest band of the votes without a proof. Zero (no term
    /// is won) with fewer.
    pub(super) fn hold(&self, quorum: usize) -> Duration {
        let mut holds = self.holds.clone();
        holds.sort_unstable();
        match quorum.checked_sub(1).and_then(|q| holds.get(q)) {
            Some(hold) => *hold,
            None => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_hold_is_the_best_quorums() {
        let mut b = Blind::default();
        b.count(3 * MS, false);
        b.count(MS, true);
        // Exactly a quorum of 2: the unproved vote's band.
        assert_eq!(b.hold(2), 3 * MS);
        assert_eq!(b.lead, 3 * MS);
        // A proved vote a moment later: the two proved votes need no hold, and the lead still
        // covers every counted vote.
        b.count(2 * MS, true);
        assert_eq!(b.hold(2), Duration::ZERO);
        assert_eq!(b.lead, 3 * MS);
        // Fewer votes than a quorum: no term, no hold.
        assert_eq!(Blind::default().hold(2), Duration::ZERO);
    }

    #[test]
    fn an_unproved_quorum_holds_its_largest_band_until_a_better_one_counts() {
        let mut b = Blind::default();
        b.count(5 * MS, false);
        b.count(2 * MS, false);
        assert_eq!(b.hold(2), 5 * MS);
        b.count(4 * MS, false);
        assert_eq!(b.hold(2), 4 * MS);
    }
}

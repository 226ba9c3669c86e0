//! What a won round pays for the steps its clock watch may have missed ([`Blind`]).

use std::time::Duration;

/// The blind bands ([`crate::redlock::clock::Watch::band_us`]) of a round's counted votes: how far a
/// node's clock may have stepped without this sidecar's watch seeing it, at each reading.
///
/// Two terms meet on a node: the previous holder set its key at one reading of its own, this
/// sidecar finds the key gone at one of its. A step forward between them that neither watch
/// could see shortens the previous key; a step back before the previous holder's reading, then
/// forward, also does, and its backward half is for the previous holder's watch to see. So
/// each side pays for its own watch:
/// - **lead**: every term ends the largest band of the votes it counted sooner (the backward
///   half, for whoever comes next);
/// - **hold**: a term won on votes without a release proof begins the largest band of those
///   votes later (the forward half). A proved vote needs none: its node had no live holder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Blind {
    /// The largest band of every counted vote.
    pub(super) lead: Duration,
    /// The largest band of the counted votes without a release proof.
    pub(super) hold: Duration,
}

impl Blind {
    /// A counted vote read with `band`; `proved`: its grant consumed a release proof.
    pub(super) fn count(&mut self, band: Duration, proved: bool) {
        self.lead = self.lead.max(band);
        if !proved {
            self.hold = self.hold.max(band);
        }
    }
}

//! The bounds the clock watch works with ([`Policy`]) and the blind band they leave ([`band`]).

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
    /// The longest round trip of a reading that may serve as a base of later comparisons
    /// (`redis.timeout` in the binary). A slower reading is still compared, so it can reveal a
    /// jump, but it never becomes a base: its round trip would widen every later allowance.
    pub base_rtt_us: i64,
    /// Test-only switch: when false, no jump is ever detected and every node counts at once.
    pub enabled: bool,
    /// Test-only switch: when false, the watch behaves as before the blind band was paid for
    /// (5375106): the latest reading, however slow, is the only base, and [`super::Watch::band_us`] is
    /// 0, so neither side of a term makes room for a step the watch missed. Always true in the
    /// binary except under `--unsafe-disable-blind-band`.
    pub blind_check: bool,
    /// Test-only switch for the model check: when false, a reading after a gap longer than the
    /// window is compared like any other ([`super::Seen::Resumed`] never happens). Always true in the
    /// binary.
    pub rewatch_after_gap: bool,
    /// Test-only switch: when false, a named successor counts a grant as proved without the
    /// node confirming the previous holder's release proof ([`super::Watch::prove`]). Always true in
    /// the binary except under `--unsafe-disable-release-proof-check`.
    pub proof_check: bool,
    /// Test-only switch: when false, a sidecar vouches for another's watch of a node whether or
    /// not it counts the node itself at the reading ([`super::Watch::may_vouch`]). Always true in the
    /// binary except under `--unsafe-disable-attestation-check`.
    pub attestation_check: bool,
    /// Test-only switch (issue 52, findings 2 and 3): when false, a term pays no allowance for
    /// what the taker's watch may miss beyond its band ([`Policy::term_margin`]), as before. Always true in the
    /// binary except under `--unsafe-disable-span-band`.
    pub span_check: bool,
    /// Test-only switch (issue 52, finding 1): when false, a release proof counts for a watch
    /// that began moments ago, and a vouched watch reports its own band only, as before. Always
    /// true in the binary except under `--unsafe-disable-proof-continuity`.
    pub proof_continuity_check: bool,
}

/// Fixed tolerance added to every allowance: 1 ms (the resolution Redis keys expire at).
pub const SLACK_US: i64 = 1_000;

impl Policy {
    /// The policy for a lease: `margin` is the drift allowance `ttl·driftFactor + 2ms`, which
    /// covers the rate difference between this sidecar's clock and another's over the window.
    pub fn new(ttl: std::time::Duration, drift_factor: f64, enabled: bool) -> Self {
        let margin = crate::redlock::math::drift(ttl, drift_factor);
        Policy {
            drift_factor,
            slack_us: SLACK_US,
            window_us: (ttl + margin).as_micros() as i64,
            base_rtt_us: DEFAULT_BASE_RTT_US,
            enabled,
            blind_check: true,
            rewatch_after_gap: true,
            proof_check: true,
            attestation_check: true,
            span_check: true,
            proof_continuity_check: true,
        }
    }

    /// What every term takes off its end besides its blind band (`docs/concepts/clock-jumps.md`,
    /// "The bound"): `ttl·driftFactor + 2ms` for the holder's own clock running slow against the
    /// node (Redlock's drift, [`crate::redlock::math::drift`]), plus what the taker's watch may
    /// miss beyond its own band: it measures the node against its own clock, up to
    /// `driftFactor` fast, over the key's life and the gap before it (at most a window), so
    /// forward steps each within a comparison's allowance pass unseen up to `driftFactor × ttl`
    /// and `2 × driftFactor × window` more than its band charges. Paid here, by the holder,
    /// rather than in the taker's hold: a handover then waits no longer. The first term alone
    /// under the test-only switch.
    pub fn term_margin(&self, ttl: std::time::Duration) -> std::time::Duration {
        let drift = crate::redlock::math::drift(ttl, self.drift_factor);
        if !(self.span_check && self.enabled) {
            return drift;
        }
        let window = std::time::Duration::from_micros(self.window_us.max(0) as u64);
        drift
            + ttl.mul_f64(self.drift_factor)
            + window.mul_f64(2.0 * self.drift_factor * (1.0 + self.drift_factor))
    }

    /// The largest band at which a reading may vouch for another sidecar's watch, µs: the
    /// vouchee adds it to its own band until its watch is a window old (the voucher's misses
    /// are its to pay, [`super::Watch::band_us`]), so it is bounded: both round trips at half
    /// the base bound, bases a window apart. Typical bands are a tenth of it.
    pub fn vouch_band_us(&self) -> i64 {
        if !self.enabled || !self.blind_check {
            return 0;
        }
        band(
            self.base_rtt_us / 2,
            self.base_rtt_us / 2,
            self.window_us,
            self,
        )
    }

    /// The same policy with `base_rtt` as the base bound ([`Policy::base_rtt_us`]).
    pub fn with_base_rtt(self, base_rtt: std::time::Duration) -> Self {
        Policy {
            base_rtt_us: base_rtt.as_micros().max(1) as i64,
            ..self
        }
    }

    /// The spacing of the bases a watch keeps: a fast reading becomes a new base once the
    /// newest is this old, so a window holds about eight.
    pub(super) fn base_spacing_us(&self) -> i64 {
        (self.window_us / 8).max(1)
    }

    /// The largest [`super::Watch::band_us`] a reading of round trip `rtt_us` can have: bases within
    /// the base bound, bases at most the window apart (a longer gap starts the watch again), and
    /// the slack.
    pub fn max_band_us(&self, rtt_us: i64) -> i64 {
        if !self.enabled || !self.blind_check {
            return 0;
        }
        band(self.base_rtt_us, rtt_us, self.window_us, self)
    }
}

/// The base bound of [`Policy::new`]: the default `redis.timeout`.
pub const DEFAULT_BASE_RTT_US: i64 = 50_000;

/// The largest forward (or backward) step between a base of round trip `base_rtt_us` and a
/// reading of round trip `rtt_us`, `gap_us` apart (the later arrival minus the earlier
/// sending), that [`allowance`] does not reveal, beyond what every term's margin pays
/// ([`Policy::term_margin`]): the node read its clock anywhere within each round trip, so the
/// allowance is wider than the true elapsed time by up to both round trips; `driftFactor`
/// stretches the gap; plus the slack.
pub(super) fn band(base_rtt_us: i64, rtt_us: i64, gap_us: i64, p: &Policy) -> i64 {
    let rtts = (base_rtt_us.max(0) + rtt_us.max(0)) as f64 * (1.0 + p.drift_factor);
    (rtts + gap_us.max(0) as f64 * p.drift_factor).ceil() as i64 + p.slack_us
}

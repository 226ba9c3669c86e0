//! The settings of the state machine: timers, preference and this sidecar's standing as a
//! candidate.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{LeaseConfig, Prefer};

pub use crate::k8s::standing::Standing;
pub use crate::redlock::{GRACE_MARGIN, grace};

/// The stall margin never goes below this, however short the renewal period.
const MIN_STALL_MARGIN: Duration = Duration::from_millis(50);

/// The preference settings of the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Preference {
    /// `lease.prefer`.
    pub prefer: Prefer,
    /// `lease.priority`.
    pub priority: i64,
    /// `lease.preferSettle`.
    pub settle: Duration,
    /// How long followers not named wait after a notice ([`grace`]).
    pub grace: Duration,
    /// Whether a graceful release names a successor (off only for the benchmark's comparison).
    pub name_successor: bool,
    /// `lease.followApp`: leadership follows the app's health ([`AppGate`]); `None` when off.
    pub follow_app: Option<AppGate>,
}

/// Health-gated leadership (`lease.followApp`): a leader whose app has been unhealthy for
/// `grace` hands over to a candidate whose app is healthy; a follower whose app is unhealthy is
/// no ready candidate and does not attempt while a healthy one exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AppGate {
    /// `app.unhealthyGrace`: how long the app must have been unhealthy before a handover.
    pub grace: Duration,
    /// `app.cooldown`: after a handover for health, no attempt for this long.
    pub cooldown: Duration,
}

/// Timing settings of the state machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// Lease ttl (also the cool-down after a requested step-down).
    pub ttl: Duration,
    /// Renewal period.
    pub renew_every: Duration,
    /// Base follower retry period.
    pub retry_every: Duration,
    /// Timer slip beyond which the loop counts as stalled.
    pub stall_margin: Duration,
    /// Several leases in one process: the origin of the grid their renewals and watches are
    /// lined up on, so that the rounds of one period reach each node together and go out as one
    /// call ([`crate::redlock::node`]'s batching). `None` (one lease): no grid.
    pub grid: Option<Instant>,
}

impl Timing {
    /// Derive the stall margin from the renewal period: half of it, at least 50 ms.
    pub fn new(ttl: Duration, renew_every: Duration, retry_every: Duration) -> Self {
        Timing {
            ttl,
            renew_every,
            retry_every,
            stall_margin: (renew_every / 2).max(MIN_STALL_MARGIN),
            grid: None,
        }
    }

    /// The timing of every elector of a process that starts at `now`: with several leases on
    /// one grid from then, so that their rounds batch.
    pub fn of_process(lease: &LeaseConfig, now: Instant) -> Self {
        let timing = Timing::new(lease.ttl, lease.renew_every, lease.retry_every);
        match lease.names.len() > 1 {
            true => timing.on_grid(now),
            false => timing,
        }
    }

    /// The same timing on the process-wide grid from `origin` (several leases).
    pub fn on_grid(self, origin: Instant) -> Self {
        Timing {
            grid: Some(origin),
            ..self
        }
    }

    /// When to renew after a renewal sent at `sent` (or a term won then): `renew_every` later,
    /// or on the grid the last grid instant before that. Never later: a renewal only ever comes
    /// sooner than the period says, so no margin shrinks.
    pub fn renew_after(&self, sent: Instant) -> Instant {
        let due = sent + self.renew_every;
        match self.grid {
            Some(origin) => floor_on(origin, self.renew_every, due).max(sent),
            None => due,
        }
    }

    /// When an idle follower watches again: after `jittered` (its watch period, jittered), or
    /// on the grid at the first instant of `period` steps at least half a period away.
    pub fn watch_at(&self, now: Instant, jittered: Duration, period: Duration) -> Instant {
        match self.grid {
            Some(origin) => {
                let at = floor_on(origin, period, now + period / 2);
                match at < now + period / 2 {
                    true => at + period,
                    false => at,
                }
            }
            None => now + jittered,
        }
    }
}

/// The last instant of the grid (`origin` + k × `step`) at or before `t`; `t` itself before the
/// origin or with no step.
fn floor_on(origin: Instant, step: Duration, t: Instant) -> Instant {
    let (Some(since), false) = (t.checked_duration_since(origin), step.is_zero()) else {
        return t;
    };
    let steps = since.as_nanos() / step.as_nanos();
    origin + step * u32::try_from(steps).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_the_grid_renewals_come_sooner_never_later_and_line_up() {
        let origin = Instant::now();
        let every = Duration::from_millis(300);
        let t = Timing::new(Duration::from_secs(1), every, every).on_grid(origin);
        // Won between grid instants: the first renewal comes at the next one, sooner.
        let won = origin + Duration::from_millis(1_050);
        assert_eq!(t.renew_after(won), origin + Duration::from_millis(1_200));
        // A renewal sent on the grid (or a little after, by scheduling) renews a period later.
        for slip in [0, 1, 7] {
            let sent = origin + Duration::from_millis(1_200 + slip);
            assert_eq!(t.renew_after(sent), origin + Duration::from_millis(1_500));
        }
        // Two leases won apart renew together from their first renewal on.
        let other = origin + Duration::from_millis(1_190);
        assert_eq!(t.renew_after(won), t.renew_after(other));
        // Never later than the period, whatever the phase.
        for ms in 0..700 {
            let sent = origin + Duration::from_millis(ms);
            let at = t.renew_after(sent);
            assert!(at <= sent + every && at >= sent, "{ms}");
        }
        // Off the grid (one lease): exactly the period.
        let plain = Timing::new(Duration::from_secs(1), every, every);
        assert_eq!(plain.renew_after(won), won + every);
    }

    #[test]
    fn on_the_grid_watches_line_up_half_a_period_to_a_period_and_a_half_away() {
        let origin = Instant::now();
        let period = Duration::from_millis(400);
        let t = Timing::new(Duration::from_secs(1), period, period).on_grid(origin);
        for ms in [0, 1, 199, 200, 201, 399, 1_000] {
            let now = origin + Duration::from_millis(ms);
            let at = t.watch_at(now, Duration::ZERO, period);
            assert!(at >= now + period / 2 && at < now + period * 3 / 2, "{ms}");
            assert_eq!(at.duration_since(origin).as_millis() % 400, 0, "{ms}");
        }
        let plain = Timing::new(Duration::from_secs(1), period, period);
        let now = origin + Duration::from_millis(5);
        let jittered = Duration::from_millis(430);
        assert_eq!(plain.watch_at(now, jittered, period), now + jittered);
    }
}

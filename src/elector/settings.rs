//! The settings of the state machine: timers, preference and this sidecar's standing as a
//! candidate.

use std::time::Duration;

use crate::config::Prefer;

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
}

impl Timing {
    /// Derive the stall margin from the renewal period: half of it, at least 50 ms.
    pub fn new(ttl: Duration, renew_every: Duration, retry_every: Duration) -> Self {
        Timing {
            ttl,
            renew_every,
            retry_every,
            stall_margin: (renew_every / 2).max(MIN_STALL_MARGIN),
        }
    }
}

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

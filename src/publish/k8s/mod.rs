//! The Kubernetes publisher: the own pod's role label, an optional fencing-token annotation, and
//! Kubernetes Events. A consumer of the leadership `watch` and nothing else: it never talks to
//! the elector, so API-server errors, slowness or outages cannot delay or change the election.
//!
//! - At start it merge-patches `redlock-elector/lease=<lease>` and the follower role onto its pod.
//! - A new leader first lists the pods of its lease still labelled leader and demotes every
//!   other one (stale after a crash), then labels itself.
//! - It demotes itself when leadership ends: the publisher wakes at the term's deadline itself
//!   (evaluated with [`Leadership::at`]), so a renewal still in flight does not keep the label up.
//! - Updates retry with jittered exponential backoff until the label matches the *latest*
//!   desired state. An attempt for a state that is no longer wanted is dropped mid-flight, and
//!   every patch carries the `resourceVersion` it was computed from (and, on the own pod, a
//!   fresh [`UPDATED_ANNOTATION`] so that it always bumps that version), so a stale patch that
//!   still reaches the server is rejected (409) instead of overwriting a newer one.
//! - Events ("became leader", "lost leadership: `<reason>`") go through a small queue on their own
//!   task, best effort, so they never hold up a label.
//!
//! The rooms: [`converge`] (the loop that drives the label to the wanted role), [`patch`] (pure
//! merge-patch builders), `pods` (the pod calls, demote before promote), `events` (the Event
//! queue and its sender). The client, its settings and the counted API call are
//! [`crate::k8s`]'s, shared with the pod reader there (an input of the elector, not part of this
//! publisher).
//!
//! RBAC used: pods get, watch, list, patch; events create (core group), in the pod's own namespace.

use std::ops::Range;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::leadership::Leadership;

pub mod converge;
mod events;
pub mod patch;
mod pods;

pub use crate::k8s::{CallError, Settings, call};
pub use converge::Publisher;

/// Label that marks the pods of one lease; the demotion selector starts with it.
pub const LEASE_LABEL: &str = "redlock-elector/lease";
/// Annotation carrying the fencing token while leader (opt-in).
pub const TOKEN_ANNOTATION: &str = "redlock-elector/fencing-token";
/// Annotation with the time of the sidecar's last write to its own pod. It makes every such
/// write a real change: the API server does not bump `resourceVersion` for a no-op patch, so
/// without it a re-applied state could leave an earlier, still travelling patch valid.
pub const UPDATED_ANNOTATION: &str = "redlock-elector/role-updated-at";
/// First retry delay after a failed update or Event.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// Longest retry delay while the API server stays unreachable.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Each retry delay is scaled by a factor from this range, so that replicas that lost the API
/// server together do not come back in step.
const BACKOFF_JITTER: Range<f64> = 0.5..1.0;

/// The backoff of every retry against the API server (label updates and Events).
fn retry_backoff() -> Backoff {
    Backoff::new(BACKOFF_MIN, BACKOFF_MAX, BACKOFF_JITTER)
}

/// What the own pod's role label should say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Leader of the term with this fencing token.
    Leader {
        /// The term's fencing token.
        token: u64,
    },
    /// Not leader.
    Follower,
}

/// The role wanted at one instant, and how long it stays wanted on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The role the label should show.
    pub role: Role,
    /// The term's deadline while leader: the role ends there even if the elector says nothing.
    pub deadline: Option<Instant>,
}

impl Wanted {
    /// The role wanted at `now`, read from the published leadership at answer time.
    pub fn at(state: &Leadership, now: Instant) -> Wanted {
        match state.at(now).term {
            Some(t) => Wanted {
                role: Role::Leader { token: t.token },
                deadline: Some(t.deadline),
            },
            None => Wanted {
                role: Role::Follower,
                deadline: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Term;

    #[test]
    fn the_wanted_role_reads_the_deadline_at_answer_time() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(50);
        let s = Leadership::default().with(Some(Term { token: 3, deadline }), Some("a".into()));
        assert_eq!(
            Wanted::at(&s, now),
            Wanted {
                role: Role::Leader { token: 3 },
                deadline: Some(deadline),
            }
        );
        assert_eq!(
            Wanted::at(&s, deadline),
            Wanted {
                role: Role::Follower,
                deadline: None,
            }
        );
    }
}

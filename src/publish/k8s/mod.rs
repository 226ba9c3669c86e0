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
//! queue and its sender); with `kubernetes.endpointSlice`, [`endpoints`] (the loop that writes
//! the leader Service's EndpointSlice, on its own task), `follow` (a watch's copy of that slice) and [`slice`] (its fence, pure). The client, its settings and the counted API call are
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
pub mod endpoints;
mod events;
mod follow;
pub mod patch;
mod pods;
pub mod slice;

pub use crate::k8s::{CallError, Settings, call};
pub use converge::Publisher;

/// Label that marks the pods of one lease; the demotion selector starts with it.
pub const LEASE_LABEL: &str = "redlock-elector/lease";
/// Annotation carrying the fencing token while leader (opt-in).
pub const TOKEN_ANNOTATION: &str = "redlock-elector/fencing-token";
/// With several leases (`lease.names`): the leases the pod leads, comma-separated, in config
/// order; absent while it leads none. See [`crate::k8s::LedAnnotation`].
pub const LEASES_ANNOTATION: &str = "redlock-elector/leases";
/// With `lease.shards`: the indices of the shards the pod leads, comma-separated, ascending;
/// absent while it leads none. See [`crate::k8s::LedAnnotation`].
pub const SHARDS_ANNOTATION: &str = "redlock-elector/shards";
/// A change of the led leases or shards alone (the role label unchanged) is written at most
/// this often: while shards move (a replica starting or stopping, balancing) the set changes
/// many times a second, and each write is a pod update every watcher of the pod receives. A
/// change of the role label is written at once, with the set as it is then.
pub const LED_SPACING: Duration = Duration::from_millis(500);
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The role the label should show.
    pub role: Role,
    /// The term's deadline while leader: the role ends there even if the elector says nothing.
    pub deadline: Option<Instant>,
    /// With several leases: the value of the led-leases annotation ([`LEASES_ANNOTATION`] or
    /// [`SHARDS_ANNOTATION`]); `None` = absent (none led, or one lease).
    pub led: Option<String>,
    /// The earliest deadline of the led leases: the set changes on its own then.
    pub led_until: Option<Instant>,
}

impl Wanted {
    /// The role wanted at `now`, read from the published leadership at answer time.
    pub fn at(state: &Leadership, now: Instant) -> Wanted {
        let (role, deadline) = match state.at(now).term {
            Some(t) => (Role::Leader { token: t.token }, Some(t.deadline)),
            None => (Role::Follower, None),
        };
        Wanted {
            role,
            deadline,
            led: None,
            led_until: None,
        }
    }

    /// With several leases: the led set at `now` too, as `annotation` writes it.
    pub fn with_led(
        mut self,
        led: &crate::leadership::Led,
        annotation: &crate::k8s::LedAnnotation,
        now: Instant,
    ) -> Wanted {
        let (indices, until) = led.at(now);
        self.led = annotation.value(&indices);
        self.led_until = until;
        self
    }

    /// What the pod shows once this is applied.
    fn shown(&self) -> Shown {
        Shown {
            role: self.role,
            led: self.led.clone(),
        }
    }
}

/// What the own pod shows, as far as the publisher writes it: the role label and the led set.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shown {
    /// The role label.
    role: Role,
    /// The led-leases annotation's value.
    led: Option<String>,
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
                led: None,
                led_until: None,
            }
        );
        assert_eq!(
            Wanted::at(&s, deadline),
            Wanted {
                role: Role::Follower,
                deadline: None,
                led: None,
                led_until: None,
            }
        );
    }

    #[test]
    fn the_led_set_reads_each_deadline_at_answer_time() {
        use crate::k8s::LedAnnotation;
        use crate::leadership::Led;
        let now = Instant::now();
        let ms = |m| now + Duration::from_millis(m);
        let led = Led {
            leases: vec![(0, ms(50)), (2, ms(80))],
        };
        let names = LedAnnotation::Names(vec!["a".into(), "b".into(), "c".into()]);
        let w = Wanted::at(&Leadership::default(), now).with_led(&led, &names, now);
        assert_eq!((w.led.as_deref(), w.led_until), (Some("a,c"), Some(ms(50))));
        let w = Wanted::at(&Leadership::default(), ms(50)).with_led(&led, &names, ms(50));
        assert_eq!((w.led.as_deref(), w.led_until), (Some("c"), Some(ms(80))));
        let w = Wanted::at(&Leadership::default(), ms(80)).with_led(&led, &names, ms(80));
        assert_eq!((w.led, w.led_until), (None, None));
        let shards = Led {
            leases: (0..256).map(|i| (i, ms(50))).collect(),
        };
        let w =
            Wanted::at(&Leadership::default(), now).with_led(&shards, &LedAnnotation::Shards, now);
        let all = w.led.unwrap();
        assert!(
            all.starts_with("0,1,2,") && all.ends_with(",254,255"),
            "{all}"
        );
        assert!(all.len() < 1024, "256 shards fit in {} bytes", all.len());
    }
}

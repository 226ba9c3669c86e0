//! Step-down requests and reasons: what `POST /leader/step-down` sends the elector and gets
//! back, and what each reason means for the metrics and the log.

use tokio::sync::oneshot;

use crate::leadership::StepDownReason;
use crate::metrics::HandoverReason;

impl StepDownReason {
    /// Every reason, so that each `step_downs_total` series exists (at 0) from the start.
    pub const ALL: [StepDownReason; 8] = [
        StepDownReason::Requested,
        StepDownReason::RenewalFailed,
        StepDownReason::Stalled,
        StepDownReason::Shutdown,
        StepDownReason::Preferred,
        StepDownReason::ChildExited,
        StepDownReason::AppUnhealthy,
        StepDownReason::Balance,
    ];

    /// The `step_down_reason` label of `redlock_elector_step_downs_total`: [`Self::as_str`]
    /// with `_` for `-`, as Prometheus label values go.
    pub fn label(self) -> &'static str {
        match self {
            StepDownReason::Requested => "step_down",
            StepDownReason::RenewalFailed => "renewal_failed",
            StepDownReason::Stalled => "stalled",
            StepDownReason::Shutdown => "shutdown",
            StepDownReason::Preferred => "preferred",
            StepDownReason::ChildExited => "child_exited",
            StepDownReason::AppUnhealthy => "app_unhealthy",
            StepDownReason::Balance => "balance",
        }
    }

    /// A short machine-readable name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepDownReason::Requested => "step-down",
            StepDownReason::RenewalFailed => "renewal-failed",
            StepDownReason::Stalled => "stalled",
            StepDownReason::Shutdown => "shutdown",
            StepDownReason::Preferred => "preferred",
            StepDownReason::ChildExited => "child-exited",
            StepDownReason::AppUnhealthy => "app-unhealthy",
            StepDownReason::Balance => "balance",
        }
    }

    /// The graceful handover this step-down is (its release names a successor), for
    /// `redlock_elector_handovers_total`; `None` for a lost lease.
    pub fn handover(self) -> Option<HandoverReason> {
        match self {
            StepDownReason::Shutdown => Some(HandoverReason::Shutdown),
            StepDownReason::Requested => Some(HandoverReason::StepDown),
            StepDownReason::Preferred => Some(HandoverReason::Preferred),
            StepDownReason::ChildExited => Some(HandoverReason::ChildExited),
            StepDownReason::AppUnhealthy => Some(HandoverReason::AppUnhealthy),
            StepDownReason::Balance => Some(HandoverReason::Balance),
            StepDownReason::RenewalFailed | StepDownReason::Stalled => None,
        }
    }
}

/// Answer to a step-down request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepDown {
    /// Was leader; released.
    Released,
    /// Was not leader.
    NotLeader,
}

/// A step-down request: why, and where the answer goes.
#[derive(Debug)]
pub struct StepDownRequest {
    /// [`StepDownReason::Requested`] from the API; [`StepDownReason::ChildExited`] from `run`.
    pub reason: StepDownReason,
    /// The answer.
    pub reply: oneshot::Sender<StepDown>,
    /// The successor to name, for [`StepDownReason::Balance`]; otherwise the best ready
    /// candidate is named.
    pub successor: Option<String>,
    /// For [`StepDownReason::Balance`]: how often the shard has moved in a rollout so far, as
    /// this sidecar knows ([`crate::elector::balance::Seen::moved`]); the release notice carries
    /// it to the successor.
    pub moved: Option<u8>,
}

impl StepDownRequest {
    /// A request, and the receiver of its answer.
    pub fn new(reason: StepDownReason) -> (Self, oneshot::Receiver<StepDown>) {
        let (reply, rx) = oneshot::channel();
        (
            StepDownRequest {
                reason,
                reply,
                successor: None,
                moved: None,
            },
            rx,
        )
    }

    /// `lease.shards`: hand the shard over to `to`, a candidate that leads fewer shards; the
    /// shard has moved `moved` times in a rollout so far.
    pub fn hand_over(to: String, moved: u8) -> (Self, oneshot::Receiver<StepDown>) {
        let (mut request, rx) = StepDownRequest::new(StepDownReason::Balance);
        request.successor = Some(to);
        request.moved = Some(moved);
        (request, rx)
    }

    /// Whether a step-down for this reason keeps the sidecar from contending for a ttl after the
    /// release: one the app asked for, directly or by its command's exit.
    pub fn cools_down(reason: StepDownReason) -> bool {
        matches!(
            reason,
            StepDownReason::Requested | StepDownReason::ChildExited
        )
    }
}

//! Step-down requests and reasons: what `POST /leader/step-down` sends the elector and gets
//! back, and what each reason means for the metrics and the log.

use tokio::sync::oneshot;

use crate::leadership::StepDownReason;
use crate::metrics::HandoverReason;

impl StepDownReason {
    /// A short machine-readable name.
    pub fn as_str(self) -> &'static str {
        match self {
            StepDownReason::Requested => "step-down",
            StepDownReason::RenewalFailed => "renewal-failed",
            StepDownReason::Stalled => "stalled",
            StepDownReason::Shutdown => "shutdown",
            StepDownReason::Preferred => "preferred",
        }
    }

    /// The graceful handover this step-down is (its release names a successor), for
    /// `redlock_elector_handovers_total`; `None` for a lost lease.
    pub fn handover(self) -> Option<HandoverReason> {
        match self {
            StepDownReason::Shutdown => Some(HandoverReason::Shutdown),
            StepDownReason::Requested => Some(HandoverReason::StepDown),
            StepDownReason::Preferred => Some(HandoverReason::Preferred),
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

/// A step-down request with its reply channel.
pub type StepDownRequest = oneshot::Sender<StepDown>;

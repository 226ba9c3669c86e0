//! The follower ⇄ leader state machine and its timers. Owns the truth about leadership and
//! publishes it as a `watch` of [`Leadership`]; everything else only reads that channel.
//!
//! - `machine/`: every decision, with no I/O ([`machine::Machine`]): when to attempt, watch,
//!   renew, step down, whom to name, how long to wait after a notice, when to hand over to a
//!   preferred candidate. Its module doc lists the events, commands and states.
//! - `driver.rs`: runs the machine's commands against the nodes through [`Rounds`] ([`Live`]:
//!   the real [`Redlock`]) and turns the outside world into its events.
//! - `watchdog.rs`: the stall watchdog and [`LoopHealth`] for `/healthz`.
//! - `settings.rs`: [`Timing`], [`Preference`], [`Standing`].

mod driver;
pub mod machine;
#[cfg(test)]
mod memory;
mod settings;
mod watchdog;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

pub use self::driver::{Live, Rounds};
use self::machine::Machine;
pub use self::settings::{GRACE_MARGIN, Preference, Standing, Timing, grace};
pub use self::watchdog::{LoopHealth, watchdog};
pub use crate::leadership::CandidacyView;
use crate::leadership::Leadership;
pub use crate::leadership::StepDownReason;
use crate::metrics::{HandoverReason, Metrics};
use crate::redlock::{Notices, Redlock};

/// Step-down requests queued before the loop takes them (each waits for its answer anyway).
const REQUEST_QUEUE: usize = 16;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDown {
    /// Was leader; released.
    Released,
    /// Was not leader.
    NotLeader,
}

/// A step-down request with its reply channel.
pub type StepDownRequest = oneshot::Sender<StepDown>;

/// The elector: the [`Machine`] and its driver's channels.
pub struct Elector<R = Live> {
    /// The rounds the machine's commands run.
    rounds: R,
    /// Every decision.
    machine: Machine,
    /// Where leadership is published.
    tx: watch::Sender<Leadership>,
    /// Step-down requests from the API.
    requests: mpsc::Receiver<StepDownRequest>,
    /// Release notices from the subscriptions.
    notices: Arc<Notices>,
    /// Rank and readiness from outside (the Kubernetes pod reader, or fixed).
    standing: watch::Receiver<Standing>,
    /// What `/leader` shows about candidates.
    candidacy: watch::Sender<CandidacyView>,
    /// Loop liveness and stall flag.
    health: Arc<LoopHealth>,
    /// Counters.
    metrics: Metrics,
}

/// Handles the rest of the process needs.
pub struct Handles {
    /// Leadership state.
    pub leadership: watch::Receiver<Leadership>,
    /// Send step-down requests.
    pub step_down: mpsc::Sender<StepDownRequest>,
    /// Loop health for `/healthz`.
    pub health: Arc<LoopHealth>,
    /// Release notices (given to the subscription tasks).
    pub notices: Arc<Notices>,
    /// What `/leader` shows about candidates.
    pub candidacy: watch::Receiver<CandidacyView>,
}

impl Elector<Live> {
    /// Create the elector on the real nodes, and the handles the publishers use.
    pub fn new(
        redlock: Arc<Redlock>,
        identity: String,
        timing: Timing,
        preference: Preference,
        standing: watch::Receiver<Standing>,
        metrics: Metrics,
    ) -> (Self, Handles) {
        let quorum = redlock.quorum();
        let rounds = Live {
            redlock,
            identity: identity.clone(),
            retry_every: timing.retry_every,
        };
        Elector::with_rounds(
            rounds, identity, timing, preference, standing, metrics, quorum,
        )
    }
}

impl<R: Rounds> Elector<R> {
    /// Create the elector on any [`Rounds`] over nodes with this quorum.
    pub fn with_rounds(
        rounds: R,
        identity: String,
        timing: Timing,
        preference: Preference,
        standing: watch::Receiver<Standing>,
        metrics: Metrics,
        quorum: usize,
    ) -> (Self, Handles) {
        let (tx, rx) = watch::channel(Leadership::default());
        let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
        let (candidacy_tx, candidacy_rx) = watch::channel(CandidacyView::default());
        let health = Arc::new(LoopHealth::default());
        let notices = Arc::new(Notices::new(quorum));
        let now = tokio::time::Instant::now();
        let first = standing.borrow().clone();
        let machine = Machine::new(identity, timing, preference, first, quorum, now);
        let elector = Elector {
            rounds,
            machine,
            tx,
            requests: req_rx,
            notices: notices.clone(),
            standing,
            candidacy: candidacy_tx,
            health: health.clone(),
            metrics,
        };
        let handles = Handles {
            leadership: rx,
            step_down: req_tx,
            health,
            notices,
            candidacy: candidacy_rx,
        };
        (elector, handles)
    }
}

//! The follower ⇄ leader state machine and its timers. Owns the truth about leadership and
//! publishes it as a `watch` of [`Leadership`]; everything else only reads that channel.
//!
//! - `follower.rs`: attempt, then wait a jittered `retryEvery` (or until a
//!   quorum of keys can expire, or until a release notice arrives) and attempt again.
//! - `leader.rs`: renew every `renewEvery`; step down exactly at the deadline if no renewal
//!   reached a quorum, on `POST /leader/step-down`, on a stall, or on shutdown, then release
//!   with a notice so a follower takes over at once.
//! - `candidacy.rs`: each attempt also refreshes this sidecar's candidate record (rank,
//!   readiness) on the nodes, and each renewal the leader's. A graceful release names the best
//!   ready candidate by `lease.prefer` in its notice: that one attempts at once, the others
//!   after the [`grace`]. With `newest` / `oldest`, a leader that sees a better candidate ready
//!   for `lease.preferSettle` hands over to it (reason `preferred`). Preference only orders
//!   contenders; the winner still needs the Redlock quorum.
//! - `watchdog.rs`: the stall watchdog and [`LoopHealth`] for `/healthz`.
//! - `settings.rs`: [`Timing`], [`Preference`], [`Standing`].

mod candidacy;
mod follower;
mod leader;
mod settings;
mod watchdog;

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

pub use self::settings::{GRACE_MARGIN, Preference, Standing, Timing, grace};
pub use self::watchdog::{LoopHealth, watchdog};
pub use crate::leadership::CandidacyView;
pub use crate::leadership::StepDownReason;
use crate::leadership::{Ended, Leadership, Term};
use crate::metrics::{HandoverReason, Metrics};
use crate::redlock::candidates::Candidate;
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
#[derive(Debug, PartialEq, Eq)]
pub enum StepDown {
    /// Was leader; released.
    Released,
    /// Was not leader.
    NotLeader,
}

/// A step-down request with its reply channel.
pub type StepDownRequest = oneshot::Sender<StepDown>;

/// The election state machine.
pub struct Elector {
    /// Protocol over the nodes.
    redlock: Arc<Redlock>,
    /// This sidecar's identity.
    identity: String,
    /// Timers.
    timing: Timing,
    /// Where leadership is published.
    tx: watch::Sender<Leadership>,
    /// Step-down requests from the API.
    requests: mpsc::Receiver<StepDownRequest>,
    /// Release notices from the subscriptions.
    notices: Arc<Notices>,
    /// `lease.prefer`, priority, settle time, grace.
    preference: Preference,
    /// Rank and readiness from outside (kube pod poller, or fixed).
    standing: watch::Receiver<Standing>,
    /// What `/leader` shows about candidates.
    candidacy: watch::Sender<CandidacyView>,
    /// The candidates as last read (by a follower's attempt or a leader's renewal).
    last_candidates: Vec<Candidate>,
    /// Loop liveness and stall flag.
    health: Arc<LoopHealth>,
    /// Counters.
    metrics: Metrics,
    /// What the log last said about whether a quorum counts this sidecar's votes (`None`:
    /// nothing yet; `Some(None)`: it counts).
    said_wait: Option<Option<crate::redlock::node::Wait>>,
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

impl Elector {
    /// Create the elector and the handles the publishers use.
    pub fn new(
        redlock: Arc<Redlock>,
        identity: String,
        timing: Timing,
        preference: Preference,
        standing: watch::Receiver<Standing>,
        metrics: Metrics,
    ) -> (Self, Handles) {
        let (tx, rx) = watch::channel(Leadership::default());
        let (req_tx, req_rx) = mpsc::channel(REQUEST_QUEUE);
        let (candidacy_tx, candidacy_rx) = watch::channel(CandidacyView::default());
        let health = Arc::new(LoopHealth::default());
        let notices = Arc::new(Notices::new(redlock.quorum()));
        let elector = Elector {
            redlock,
            identity,
            timing,
            tx,
            requests: req_rx,
            notices: notices.clone(),
            preference,
            standing,
            candidacy: candidacy_tx,
            last_candidates: Vec::new(),
            said_wait: None,
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

    fn publish(&self, term: Option<Term>, leader: Option<String>) {
        self.tx.send_if_modified(|s| {
            let next = s.with(term, leader);
            let changed = next != *s;
            *s = next;
            changed
        });
    }

    /// Publish the end of the term with fencing token `token`, and why, in one value: a reader
    /// that sees "not leader" sees the reason with it.
    fn publish_end(&self, token: u64, reason: StepDownReason) {
        self.tx.send_modify(|s| {
            *s = s.with(None, None);
            s.ended = Some(Ended { token, reason });
        });
    }

    /// Run until `stop` is cancelled; on the way out, release the lease if held, and withdraw
    /// the own candidate record so that no leader names a sidecar that is gone.
    pub async fn run(mut self, stop: CancellationToken) {
        let _alive = self.health.alive();
        self.elect(&stop).await;
        self.redlock.withdraw(&self.identity).await;
    }
}

//! The leader: renew every `renewEvery`; step down exactly at the deadline if no renewal
//! reached a quorum, on `POST /leader/step-down`, on a stall, on shutdown, or to hand over to a
//! preferred candidate; then release with a notice naming the successor.

use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::candidacy::{CandidateRead, Seat};
use super::{Elector, StepDown, StepDownReason};
use crate::leadership::Term;
use crate::redlock::Lease;
use crate::redlock::candidates::{self, Handover};

/// After a failed renewal, retry at a quarter of the renewal period, but not more often than
/// this.
const MIN_RENEW_RETRY: Duration = Duration::from_millis(10);

/// The leader's state during a term.
struct Leading {
    /// The lease as last renewed.
    lease: Lease,
    /// When the next renewal round goes out.
    next_renew: Instant,
    /// A better candidate is ready and settling (shown in `/leader` and the own record).
    pending: bool,
}

/// How a term ends.
struct End {
    /// Why.
    reason: StepDownReason,
    /// The successor already chosen (a preferred handover), if any.
    successor: Option<String>,
}

impl End {
    fn lost(reason: StepDownReason) -> End {
        End {
            reason,
            successor: None,
        }
    }
}

impl Elector {
    /// Lead until a reason to stop; always ends with the step-down published and the lease
    /// released.
    pub(super) async fn lead(&mut self, lease: Lease, stop: &CancellationToken) -> StepDownReason {
        self.publish_term(&lease);
        tracing::info!(
            token = lease.token,
            valid_ms = lease
                .deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
            "became leader"
        );
        let mut t = Leading {
            lease,
            next_renew: Instant::now() + self.timing.renew_every,
            pending: false,
        };
        let mut stalls = self.health.stalls();
        self.apply_candidates(CandidateRead::none(true), Seat::Leading { pending: false });
        let end = loop {
            let deadline = t.lease.deadline;
            tokio::select! {
                biased;
                _ = sleep_until(deadline) => break End::lost(StepDownReason::RenewalFailed),
                _ = stop.cancelled() => break End::lost(StepDownReason::Shutdown),
                _ = stalls.changed() => break End::lost(StepDownReason::Stalled),
                Some(req) = self.requests.recv() => {
                    self.step_down(&t.lease, StepDownReason::Requested, None).await;
                    let _ = req.send(StepDown::Released);
                    return StepDownReason::Requested;
                }
                _ = sleep_until(t.next_renew) => {
                    if let Some(end) = self.renew_round(&mut t).await {
                        break end;
                    }
                }
            }
        };
        self.step_down(&t.lease, end.reason, end.successor).await;
        end.reason
    }

    fn publish_term(&self, lease: &Lease) {
        self.publish(
            Some(Term {
                token: lease.token,
                deadline: lease.deadline,
            }),
            Some(self.identity.clone()),
        );
    }

    /// One renewal round with the candidates read beside it; ends the term on a stall or a
    /// due preferred handover.
    async fn renew_round(&mut self, t: &mut Leading) -> Option<End> {
        if Instant::now().saturating_duration_since(t.next_renew) > self.timing.stall_margin {
            self.metrics.stall_detected();
            return Some(End::lost(StepDownReason::Stalled));
        }
        let started = Instant::now();
        let deadline = t.lease.deadline;
        // Never let an in-flight renewal delay the step-down at the deadline. The candidates
        // are read beside it, each node bounded by the same timeout.
        let redlock = self.redlock.clone();
        let seat = Seat::Leading { pending: t.pending };
        let round = async { tokio::join!(redlock.renew(&t.lease), self.read_candidates(seat)) };
        let (renewed, read) = tokio::select! {
            r = round => r,
            _ = sleep_until(deadline) => (None, CandidateRead::default()),
        };
        match renewed {
            Some(d) => self.renewed(t, d, started, read),
            None => {
                tracing::warn!(
                    left_ms = deadline
                        .saturating_duration_since(Instant::now())
                        .as_millis() as u64,
                    "renewal failed; retrying until the deadline"
                );
                t.next_renew = Instant::now() + (self.timing.renew_every / 4).max(MIN_RENEW_RETRY);
                None
            }
        }
    }

    /// A renewal reached a quorum: publish the new deadline, and decide on a preferred
    /// handover from the fresh read of the candidates.
    fn renewed(
        &mut self,
        t: &mut Leading,
        deadline: Instant,
        started: Instant,
        read: CandidateRead,
    ) -> Option<End> {
        t.lease.deadline = deadline.max(t.lease.deadline);
        self.publish_term(&t.lease);
        t.next_renew = started + self.timing.renew_every;
        let was_pending = t.pending;
        t.pending = false;
        if let (Some(fresh), Some(mine)) = (read.candidates.as_deref(), self.rank()) {
            let (prefer, settle) = (self.preference.prefer, self.preference.settle);
            match candidates::handover(fresh, &self.identity, &mine, prefer, settle) {
                Handover::To(to) => {
                    self.apply_candidates(read, Seat::Leading { pending: false });
                    return Some(End {
                        reason: StepDownReason::Preferred,
                        successor: Some(to),
                    });
                }
                Handover::Pending(to) => {
                    if !was_pending {
                        tracing::info!(
                            candidate = %to,
                            settle_ms = settle.as_millis() as u64,
                            "a preferred candidate is ready; handing over once it has been ready for the settle time"
                        );
                    }
                    t.pending = true;
                }
                Handover::None => {}
            }
        }
        self.apply_candidates(read, Seat::Leading { pending: t.pending });
        None
    }

    /// Publish "not leader" first, then release everywhere with a notice. A graceful step-down
    /// names a successor: `named`, else the best ready candidate by `lease.prefer` from a fresh
    /// read (the last read if too few nodes answer).
    async fn step_down(&mut self, lease: &Lease, reason: StepDownReason, named: Option<String>) {
        self.publish_end(lease.token, reason);
        let graceful = reason.handover();
        let successor = match (graceful, named) {
            (_, Some(n)) => Some(n),
            (Some(_), None) if self.preference.name_successor => self.choose_successor().await,
            _ => None,
        };
        tracing::info!(
            reason = reason.as_str(),
            token = lease.token,
            successor = successor.as_deref().unwrap_or(""),
            prefer = self.preference.prefer.as_str(),
            "lost leadership"
        );
        if let Some(handover) = graceful {
            self.metrics.handover(handover);
        }
        self.redlock.hand_over(lease, successor.as_deref()).await;
        self.apply_candidates(CandidateRead::none(false), Seat::Following);
    }

    /// The best ready candidate by `lease.prefer`, from a fresh read of the records.
    async fn choose_successor(&mut self) -> Option<String> {
        self.refresh_candidates().await;
        let prefer = self.preference.prefer;
        candidates::successor(&self.last_candidates, &self.identity, prefer, |n| {
            rand::Rng::random_range(&mut rand::rng(), 0..n)
        })
        .map(|c| c.identity.clone())
    }
}

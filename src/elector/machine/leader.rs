//! The leader: renew every `renewEvery`; step down exactly at the deadline if no renewal
//! reached a quorum, on `POST /leader/step-down`, on a stall, on shutdown, or to hand over to a
//! preferred candidate; then release with a notice naming the successor.

use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use super::candidacy::RECORD_LIFE_PERIODS;
use super::io::{Command, Count, Cx};
use super::{Ending, Leading, Machine, Phase};
use crate::elector::step_down::{StepDown, StepDownRequest};
use crate::leadership::{Ended, StepDownReason, Term};
use crate::redlock::Lease;
use crate::redlock::candidates::{self, Candidate, Handover};

/// After a failed renewal, retry at a quarter of the renewal period, but not more often than
/// this.
pub(super) const MIN_RENEW_RETRY: Duration = Duration::from_millis(10);

impl Machine {
    /// An attempt won: publish the term and lead.
    pub(super) fn lead(&mut self, cx: &mut Cx<'_>, lease: Lease) {
        tracing::info!(
            token = lease.token,
            valid_ms = lease.deadline.saturating_duration_since(cx.now).as_millis() as u64,
            "became leader"
        );
        self.publish_term(&lease);
        let term = Leading {
            lease,
            next_renew: self.timing.renew_after(cx.now),
            pending: false,
        };
        self.apply_candidates(None, true, Some(false));
        self.phase = Phase::Leading(term.clone());
        if std::mem::take(&mut self.stopping) {
            self.end(term.lease, StepDownReason::Shutdown, None, None);
        }
    }

    fn publish_term(&mut self, lease: &Lease) {
        let term = Term {
            token: lease.token,
            deadline: lease.deadline,
        };
        self.publish(Some(term), Some(self.identity.clone()));
    }

    /// The renewal timer fired: renew (with the own record beside it), unless the timer fired
    /// later than the stall margin.
    pub(super) fn renew(&mut self, cx: &mut Cx<'_>, term: Leading) {
        if cx.now.saturating_duration_since(term.next_renew) > self.timing.stall_margin {
            self.push(Command::Count(Count::Stall));
            return self.end(term.lease, StepDownReason::Stalled, None, None);
        }
        let (mut record, ready) = self.own_record(cx, Some(term.pending));
        // Past the health grace this read decides the handover: no shared read from before
        // the renewal (the grid instant its timer was set for, or now for the check itself).
        record.read_after = self.app.due.then(|| term.next_renew.min(cx.now));
        self.push(Command::Renew {
            lease: term.lease.clone(),
            record,
            until: term.lease.deadline,
        });
        self.phase = Phase::Renewing {
            term,
            started: cx.now,
            ready,
        };
    }

    /// A renewal is back: publish the new deadline and decide on a preferred handover, or retry
    /// soon until the deadline.
    pub(super) fn renewed(
        &mut self,
        cx: &mut Cx<'_>,
        deadline: Option<Instant>,
        candidates: Option<Vec<Candidate>>,
    ) {
        let Phase::Renewing {
            mut term,
            started,
            ready,
        } = self.phase.clone()
        else {
            return;
        };
        let Some(deadline) = deadline else {
            tracing::warn!(
                left_ms = term
                    .lease
                    .deadline
                    .saturating_duration_since(cx.now)
                    .as_millis() as u64,
                "renewal failed; retrying until the deadline"
            );
            term.next_renew = cx.now + (self.timing.renew_every / 4).max(MIN_RENEW_RETRY);
            self.phase = Phase::Leading(term);
            return;
        };
        term.lease.deadline = deadline.max(term.lease.deadline);
        self.publish_term(&term.lease);
        term.next_renew = self.timing.renew_after(started);
        let was_pending = std::mem::replace(&mut term.pending, false);
        let ready = ready && candidates.is_some();
        // The leader's app has been unhealthy for the grace: this fresh read decides.
        if let Some(to) = candidates
            .as_deref()
            .and_then(|fresh| self.app_successor(cx, fresh))
        {
            self.apply_candidates(candidates, ready, Some(false));
            return self.end(term.lease, StepDownReason::AppUnhealthy, Some(to), None);
        }
        if let (Some(fresh), Some(mine)) = (candidates.as_deref(), self.rank()) {
            let (prefer, settle) = (self.preference.prefer, self.preference.settle);
            match candidates::handover(fresh, &self.identity, &mine, prefer, settle) {
                Handover::To(to) => {
                    self.apply_candidates(candidates, ready, Some(false));
                    return self.end(term.lease, StepDownReason::Preferred, Some(to), None);
                }
                Handover::Pending(to) => {
                    if !was_pending {
                        tracing::info!(
                            candidate = %to,
                            settle_ms = settle.as_millis() as u64,
                            "a preferred candidate is ready; handing over once it has been ready for the settle time"
                        );
                    }
                    term.pending = true;
                }
                Handover::None => {}
            }
        }
        self.apply_candidates(candidates, ready, Some(term.pending));
        self.phase = Phase::Leading(term);
    }

    /// End the term: publish "not leader" with the reason first, then release. A graceful
    /// step-down names a successor: `named`, else the best ready candidate by `lease.prefer`
    /// from a fresh read of the records.
    pub(super) fn end(
        &mut self,
        lease: Lease,
        reason: StepDownReason,
        named: Option<String>,
        request: Option<u64>,
    ) {
        self.term = None;
        self.leader = None;
        self.push(Command::Count(Count::StepDown(reason)));
        self.push(Command::PublishEnd(Ended {
            token: lease.token,
            reason,
        }));
        let ending = Ending {
            lease,
            reason,
            request,
        };
        match (reason.handover(), named) {
            (_, Some(to)) => self.release(ending, Some(to)),
            (Some(_), None) if self.preference.name_successor => {
                let life = self.timing.retry_every * RECORD_LIFE_PERIODS;
                self.phase = Phase::Choosing(ending);
                self.push(Command::ReadCandidates { life });
            }
            _ => self.release(ending, None),
        }
    }

    /// The candidates for a successor are back: name the best ready one (the last read if too
    /// few nodes answered).
    pub(super) fn candidates_read(&mut self, cx: &mut Cx<'_>, read: Option<Vec<Candidate>>) {
        let Phase::Choosing(ending) = self.phase.clone() else {
            return;
        };
        if let Some(c) = read {
            self.last_candidates = c;
        }
        let successor = self.best_successor(cx, &self.last_candidates);
        self.release(ending, successor);
    }

    /// The best ready candidate in `from` to name, by `lease.prefer` (ties broken at random).
    pub(super) fn best_successor(&self, cx: &mut Cx<'_>, from: &[Candidate]) -> Option<String> {
        let prefer = self.preference.prefer;
        candidates::successor(from, &self.identity, prefer, |n| cx.rng.random_range(0..n))
            .map(|c| c.identity.clone())
    }

    fn release(&mut self, ending: Ending, successor: Option<String>) {
        tracing::info!(
            reason = ending.reason.as_str(),
            token = ending.lease.token,
            successor = successor.as_deref().unwrap_or(""),
            prefer = self.preference.prefer.as_str(),
            "lost leadership"
        );
        if let Some(handover) = ending.reason.handover() {
            self.push(Command::Count(Count::Handover(handover)));
        }
        self.push(Command::Release {
            lease: ending.lease.clone(),
            successor,
        });
        self.phase = Phase::Releasing(ending);
    }

    /// The release is back: follow again (after a requested step-down, not before a ttl), or
    /// stop.
    pub(super) fn released(&mut self, cx: &mut Cx<'_>) {
        let Phase::Releasing(ending) = self.phase.clone() else {
            return;
        };
        self.apply_candidates(None, false, None);
        if let Some(request) = ending.request {
            self.answer(request, StepDown::Released);
        }
        if ending.reason == StepDownReason::Shutdown || std::mem::take(&mut self.stopping) {
            return self.finish();
        }
        if StepDownRequest::cools_down(ending.reason) {
            self.schedule.cooldown_until = Some(cx.now + self.timing.ttl);
            self.schedule.cooldown_named_ends = ending.reason == StepDownReason::ChildExited;
        }
        if ending.reason == StepDownReason::AppUnhealthy {
            self.app_handed_over(cx.now);
        }
        self.schedule.next_attempt = cx.now + self.jittered_retry(cx);
        self.schedule.watching = false;
        self.phase = Phase::Idle;
    }
}

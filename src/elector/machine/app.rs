//! Health-gated leadership (`lease.followApp`): the lease follows the app's health.
//!
//! - A leader whose app has been unhealthy for `app.unhealthyGrace` hands over to a candidate
//!   whose app is healthy (its record says ready), on the named-successor path, reason
//!   `app-unhealthy`; it does not contend again for `app.cooldown` while a healthy candidate
//!   exists.
//! - A follower whose app is unhealthy writes a record that is not ready (so nobody names it),
//!   and does not attempt while a healthy candidate exists: it watches instead.
//! - No deadlock: with no healthy candidate, the leader keeps the lease, and a leaderless lease
//!   is still taken by whoever attempts. "Some leader" beats "no leader".
//!
//! Flapping is bounded by the grace: a handover needs the leader's app unhealthy for the whole
//! grace, so an app that flaps faster never moves the lease, and one that flaps slower moves it
//! at most once per grace (12 a minute at the default 5 s); a replica that handed over takes it
//! back at most once per cool-down (30 s) while another is healthy.

use tokio::time::Instant;

use super::io::Cx;
use super::{Leading, Machine};
use crate::redlock::candidates::Candidate;

/// What the machine keeps about the app's health.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(super) struct AppState {
    /// Since when the app is unhealthy (as this machine learnt it).
    pub(super) unhealthy_since: Option<Instant>,
    /// When a leader next checks whether to hand over for the app's health.
    pub(super) check_at: Option<Instant>,
    /// A handover for health: until then, no attempt while a healthy candidate exists.
    pub(super) cooldown_until: Option<Instant>,
    /// The leader keeps the lease with its app unhealthy, for want of a healthy candidate
    /// (logged once per spell).
    pub(super) kept: bool,
    /// The grace is over: each renewal's fresh read of the records decides the handover.
    pub(super) due: bool,
}

impl Machine {
    /// Whether this sidecar is a ready candidate as far as its standing goes: with
    /// `lease.followApp`, its app is healthy (the pod's Ready condition is not used: with
    /// `sidecar.readinessPath=/readyz/leader` only the leader's pod is Ready); without, its pod
    /// is Ready (always outside Kubernetes).
    pub(super) fn standing_ready(&self) -> bool {
        match self.preference.follow_app {
            Some(_) => self.standing.known && self.standing.app_healthy,
            None => self.standing.ready,
        }
    }

    /// How many other candidates' records say ready: with `lease.followApp`, their apps are
    /// healthy.
    pub(super) fn healthy_candidates(&self) -> usize {
        self.last_candidates
            .iter()
            .filter(|c| c.identity != self.identity && c.ready_for.is_some())
            .count()
    }

    /// Whether a follower leaves the lease to a healthy candidate instead of attempting: its
    /// own app is unhealthy, or it handed over for health within the cool-down; and another
    /// candidate's app is healthy.
    pub(super) fn defers_to_healthy(&self, now: Instant) -> bool {
        self.preference.follow_app.is_some()
            && (!self.standing.app_healthy || self.app.cooldown_until.is_some_and(|c| now < c))
            && self.healthy_candidates() > 0
    }

    /// The standing changed: note since when the app is unhealthy, and when the leader checks.
    pub(super) fn app_health_changed(&mut self, cx: &mut Cx<'_>) {
        let Some(gate) = self.preference.follow_app else {
            return;
        };
        if self.standing.app_healthy {
            if self.app.unhealthy_since.take().is_some() {
                tracing::info!("the app is healthy again");
            }
            self.app.check_at = None;
            self.app.kept = false;
            self.app.due = false;
        } else if self.app.unhealthy_since.is_none() {
            tracing::warn!(
                grace_ms = gate.grace.as_millis() as u64,
                leading = self.leading(),
                "the app is unhealthy; a leader hands over to a candidate whose app is healthy after the grace"
            );
            self.app.unhealthy_since = Some(cx.now);
            self.app.check_at = Some(cx.now + gate.grace);
        }
    }

    /// The leader's check: its app has been unhealthy for the grace. It renews at once, and
    /// that renewal's read of the candidates' records decides ([`Machine::app_successor`]): the
    /// last renewal's read may be up to a renewal period old, from before the others' apps
    /// turned unhealthy too.
    pub(super) fn app_check(&mut self, cx: &mut Cx<'_>, term: Leading) {
        self.app.check_at = None;
        self.app.due = true;
        self.renew(cx, term);
    }

    /// A renewal's fresh read, while the grace is over: the best candidate whose app is healthy,
    /// to hand over to; with none, the leader keeps the lease and decides again on the next
    /// renewal's read.
    pub(super) fn app_successor(&mut self, cx: &mut Cx<'_>, fresh: &[Candidate]) -> Option<String> {
        if !self.app.due || self.standing.app_healthy {
            return None;
        }
        let successor = self.best_successor(cx, fresh);
        match &successor {
            Some(to) => {
                tracing::warn!(
                    successor = %to,
                    unhealthy_ms = self
                        .app
                        .unhealthy_since
                        .map_or(0, |s| cx.now.saturating_duration_since(s).as_millis() as u64),
                    "the app has been unhealthy for the grace: handing over to a candidate whose app is healthy"
                );
                self.app.due = false;
            }
            None if !self.app.kept => {
                tracing::warn!(
                    "the app has been unhealthy for the grace, but no candidate's app is healthy: keeping the lease (some leader beats no leader)"
                );
                self.app.kept = true;
            }
            None => {}
        }
        successor
    }

    /// After a handover for health: the cool-down starts.
    pub(super) fn app_handed_over(&mut self, now: Instant) {
        if let Some(gate) = self.preference.follow_app {
            self.app.cooldown_until = Some(now + gate.cooldown);
        }
    }
}

//! The elector's decisions as a state machine with no I/O: it takes [`Event`]s and the current
//! instant ([`Cx`]) and returns [`Command`]s and the instant it next wants to be woken
//! ([`Machine::poll_timeout`]). It never awaits and never reads a clock or a random source of
//! its own; the driver ([`super::driver`]) runs its commands against the real
//! [`crate::redlock::Redlock`], the table tests ([`tests`]) against nothing, and the model check
//! (`tests/model`) against its own nodes.
//!
//! The shape is quinn-proto's `Connection`: `handle(cx, event)` feeds an input, the caller
//! drains `poll_command()` until empty, and asks `poll_timeout()` when to call again with
//! [`Event::Timer`]. Like quinn-proto, time and randomness come in with each call (here in
//! [`Cx`], with what the nodes' clock watch says at that instant), so the same inputs give the
//! same decisions, and tests can replay them.
//!
//! States ([`Phase`]): a follower is `Idle` (its timer decides between an attempt and a watch
//! round), waits after a release notice (`AfterNotice`, or `AwaitCopies` when named), or has a
//! round in flight (`Attempting`, `Watching`); a leader is `Leading` between renewals and
//! `Renewing` during one; a term ends through `Choosing` (reading the candidates for a
//! successor) and `Releasing`; `Done` after shutdown. Each round command is answered by exactly
//! one event; while one is in flight the machine takes other events (the model delivers them;
//! the runtime driver holds them until the round is back).
//!
//! - `follower.rs`: when to attempt or watch, and what a round's result means for the schedule.
//! - `leader.rs`: renewals, the deadline, step-downs, the successor, the release.
//! - `candidacy.rs`: the own candidate record and what `/leader` shows about candidates.

mod app;
mod candidacy;
mod follower;
pub mod io;
mod leader;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;

use tokio::time::Instant;

pub use self::io::{Command, Count, Cx, Event, Nodes, Record};
use crate::elector::settings::{Preference, Standing, Timing};
use crate::elector::step_down::StepDown;
use crate::leadership::StepDownReason;
use crate::leadership::Term;
use crate::redlock::Lease;
use crate::redlock::candidates::Candidate;
use crate::redlock::node::Wait;

/// The machine's state.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Phase {
    /// Following: the timer decides between an attempt and a watch.
    Idle,
    /// Named by a notice: attempt when a quorum of copies arrived, or at `until` (the grace).
    AwaitCopies {
        /// The grace's end.
        until: Instant,
    },
    /// After a notice: attempt at `at` (the grace if someone else is named, jitter if nobody).
    AfterNotice {
        /// When.
        at: Instant,
    },
    /// An attempt is in flight.
    Attempting {
        /// Right after a notice naming this sidecar.
        named: bool,
        /// When it went out.
        at: Instant,
        /// Whether the record it writes says ready.
        ready: bool,
    },
    /// A watch round is in flight.
    Watching {
        /// Whether the record it writes says ready.
        ready: bool,
    },
    /// Leading between renewals.
    Leading(Leading),
    /// Leading, a renewal in flight.
    Renewing {
        /// The term.
        term: Leading,
        /// When the round went out (the next one is `renewEvery` after it).
        started: Instant,
        /// Whether the record it writes says ready.
        ready: bool,
    },
    /// The term ended; reading the candidates for a successor.
    Choosing(Ending),
    /// The term ended; the release is in flight.
    Releasing(Ending),
    /// Shut down.
    Done,
}

/// A term in progress.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Leading {
    /// The lease as last renewed.
    lease: Lease,
    /// When the next renewal goes out.
    next_renew: Instant,
    /// A better candidate is ready and settling.
    pending: bool,
}

/// A term that is ending.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Ending {
    /// The lease to release.
    lease: Lease,
    /// Why it ends.
    reason: StepDownReason,
    /// The step-down request to answer once released.
    request: Option<u64>,
}

/// The follower's timers, kept across attempts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Schedule {
    /// When the next attempt (or watch) goes out.
    next_attempt: Instant,
    /// Split votes in a row.
    fast_streak: u32,
    /// Attempts in a row that no node answered, up to [`follower::ERROR_DOUBLINGS`] + 1: each
    /// doubles the wait before the next ([`follower::ERROR_DOUBLINGS`] at most).
    error_streak: u32,
    /// Until when a requested step-down keeps this sidecar from contending.
    cooldown_until: Option<Instant>,
    /// A release notice naming this sidecar ends the cool-down: after `run`'s command exited
    /// (the next leader's choice to name it back stands), not after a requested step-down.
    cooldown_named_ends: bool,
    /// Start of the current failover gap (for `acquire_wait`).
    free_since: Option<Instant>,
    /// When this sidecar started.
    started: Instant,
    /// Someone else holds the lease: when the timer fires, watch instead of attempting.
    watching: bool,
}

/// The elector's state machine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Machine {
    /// This sidecar's identity.
    identity: String,
    /// Timers.
    timing: Timing,
    /// `lease.prefer`, priority, settle, grace.
    preference: Preference,
    /// Copies of a notice that mean the key is gone on a quorum.
    quorum: usize,
    /// Rank and readiness from outside.
    standing: Standing,
    /// Where the machine is.
    phase: Phase,
    /// The follower's timers.
    schedule: Schedule,
    /// The term as published.
    term: Option<Term>,
    /// The holder as published.
    leader: Option<String>,
    /// The candidates as last read.
    last_candidates: Vec<Candidate>,
    /// What the log last said about whether a quorum counts this sidecar's votes.
    said_wait: Option<Option<Wait>>,
    /// Shutdown arrived while a round was in flight.
    stopping: bool,
    /// The app's health as leadership follows it (`lease.followApp`).
    app: app::AppState,
    /// Commands not yet taken.
    commands: VecDeque<Command>,
}

impl Machine {
    /// A follower that starts now and attempts at once.
    pub fn new(
        identity: String,
        timing: Timing,
        preference: Preference,
        standing: Standing,
        quorum: usize,
        now: Instant,
    ) -> Self {
        Machine {
            identity,
            timing,
            preference,
            quorum,
            standing,
            phase: Phase::Idle,
            schedule: Schedule {
                next_attempt: now,
                fast_streak: 0,
                error_streak: 0,
                cooldown_until: None,
                cooldown_named_ends: false,
                free_since: None,
                started: now,
                watching: false,
            },
            term: None,
            leader: None,
            last_candidates: Vec::new(),
            said_wait: None,
            stopping: false,
            app: app::AppState::default(),
            commands: VecDeque::new(),
        }
    }

    /// The next command, in order.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// When to deliver [`Event::Timer`] next; `None` while waiting for a round's answer or done.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Idle => Some(self.schedule.next_attempt),
            Phase::AwaitCopies { until } => Some(*until),
            Phase::AfterNotice { at } => Some(*at),
            Phase::Leading(t) => Some(
                t.lease
                    .deadline
                    .min(t.next_renew)
                    .min(self.app.check_at.unwrap_or(t.next_renew)),
            ),
            Phase::Renewing { term, .. } => Some(term.lease.deadline),
            _ => None,
        }
    }

    /// The published term, while leading.
    pub fn term(&self) -> Option<Term> {
        self.term
    }

    /// Whether a term is in progress (leading, a renewal in flight).
    pub fn leading(&self) -> bool {
        matches!(self.phase, Phase::Leading(_) | Phase::Renewing { .. })
    }

    /// Whether the machine has shut down.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Whether a follower waits for its timer (not for a round's answer): a release notice is
    /// taken now; one that arrives during a round is taken when the round is back.
    pub fn waiting(&self) -> bool {
        matches!(
            self.phase,
            Phase::Idle | Phase::AwaitCopies { .. } | Phase::AfterNotice { .. }
        )
    }

    /// Whether a named successor waits for a quorum of notice copies.
    pub fn awaiting_copies(&self) -> bool {
        matches!(self.phase, Phase::AwaitCopies { .. })
    }

    /// For a model checker's state hashing (the runtime never calls it): forget what decides
    /// nothing at `now` any more, so that states that behave alike hash alike. Timers already
    /// due read as due now (a due timer acts the same however late; only the renewal's stall
    /// check reads the lateness, and the model runs without a stall margin), and the failover
    /// gap's start, which only the `acquire_wait` metric reads, is dropped.
    pub fn forget_past(&mut self, now: Instant) {
        let s = &mut self.schedule;
        s.free_since = None;
        s.next_attempt = s.next_attempt.max(now);
        s.cooldown_until = s.cooldown_until.filter(|c| *c > now);
        match &mut self.phase {
            Phase::Attempting { at, .. } => *at = now,
            Phase::AwaitCopies { until } => *until = (*until).max(now),
            Phase::AfterNotice { at } => *at = (*at).max(now),
            Phase::Leading(t) => t.next_renew = t.next_renew.max(now),
            _ => {}
        }
    }

    /// Feed one input.
    pub fn handle(&mut self, cx: &mut Cx<'_>, event: Event) {
        if self.phase == Phase::Done {
            if let Event::StepDown(request, _) | Event::HandOver(request, _) = event {
                self.answer(request, StepDown::NotLeader);
            }
            return;
        }
        // Nothing outranks the deadline: a term whose deadline passed ends as a lost lease,
        // whatever else arrived at the same time.
        if let Phase::Leading(t) | Phase::Renewing { term: t, .. } = &self.phase
            && cx.now >= t.lease.deadline
        {
            let lease = t.lease.clone();
            self.end(lease, StepDownReason::RenewalFailed, None, None);
        }
        match event {
            Event::Standing(standing) => self.standing_changed(cx, standing),
            Event::Counting => self.counting(cx),
            Event::StepDown(request, reason) => self.step_down_requested(request, reason),
            Event::HandOver(request, to) => self.hand_over_requested(request, to),
            Event::Shutdown => self.shutdown(),
            Event::Stall => self.stalled(),
            Event::Timer => self.timer(cx),
            Event::Notice { successor, copies } => self.notice(cx, successor, copies),
            Event::Copies(copies) => self.copies(cx, copies),
            Event::Attempted {
                outcome,
                candidates,
            } => self.attempted(cx, outcome, candidates),
            Event::Watched {
                held,
                candidates,
                answered,
            } => self.watched(cx, held, candidates, answered),
            Event::Renewed {
                deadline,
                candidates,
            } => self.renewed(cx, deadline, candidates),
            Event::Candidates(candidates) => self.candidates_read(cx, candidates),
            Event::Released => self.released(cx),
        }
    }

    fn push(&mut self, command: Command) {
        self.commands.push_back(command);
    }

    fn answer(&mut self, request: u64, answer: StepDown) {
        self.push(Command::Answer { request, answer });
    }

    /// Publish a term and holder if either changed.
    fn publish(&mut self, term: Option<Term>, leader: Option<String>) {
        if self.term != term || self.leader != leader {
            self.term = term;
            self.leader = leader.clone();
            self.push(Command::Publish { term, leader });
        }
    }

    fn timer(&mut self, cx: &mut Cx<'_>) {
        match self.phase.clone() {
            Phase::Idle if cx.now >= self.schedule.next_attempt => self.woken(cx),
            Phase::AwaitCopies { until } if cx.now >= until => self.attempt(cx, true),
            Phase::AfterNotice { at } if cx.now >= at => self.attempt(cx, false),
            Phase::Leading(t) if self.app.check_at.is_some_and(|at| cx.now >= at) => {
                self.app_check(cx, t)
            }
            Phase::Leading(t) if cx.now >= t.next_renew => self.renew(cx, t),
            _ => {}
        }
    }

    /// A quorum may count this sidecar's votes sooner than its schedule assumed: an idle
    /// follower whose votes do count on a quorum now attempts (or, knowing the holder, writes
    /// its record, now ready) at once, instead of at its next scheduled round.
    fn counting(&mut self, cx: &mut Cx<'_>) {
        if self.phase == Phase::Idle
            && cx.nodes.wait.reason.is_none()
            && cx.now < self.schedule.next_attempt
        {
            self.schedule.next_attempt = cx.now;
            self.woken(cx);
        }
    }

    fn standing_changed(&mut self, cx: &mut Cx<'_>, standing: Standing) {
        self.standing = standing;
        self.app_health_changed(cx);
        // A follower refreshes its record at once (e.g. its pod became Ready, so it can be
        // named); elsewhere the next round writes it.
        if self.phase == Phase::Idle && self.gate(cx) {
            self.watch(cx);
        }
    }

    fn shutdown(&mut self) {
        match self.phase.clone() {
            Phase::Leading(t) | Phase::Renewing { term: t, .. } => {
                self.end(t.lease, StepDownReason::Shutdown, None, None)
            }
            Phase::Idle | Phase::AwaitCopies { .. } | Phase::AfterNotice { .. } => self.finish(),
            // A round in flight: decide when it is back (a won attempt is released at once).
            _ => self.stopping = true,
        }
    }

    fn stalled(&mut self) {
        if let Phase::Leading(t) | Phase::Renewing { term: t, .. } = self.phase.clone() {
            self.end(t.lease, StepDownReason::Stalled, None, None);
        }
    }

    fn step_down_requested(&mut self, request: u64, reason: StepDownReason) {
        match self.phase.clone() {
            Phase::Leading(t) | Phase::Renewing { term: t, .. } => {
                self.end(t.lease, reason, None, Some(request))
            }
            _ => self.answer(request, StepDown::NotLeader),
        }
    }

    fn hand_over_requested(&mut self, request: u64, to: String) {
        let ready = self
            .last_candidates
            .iter()
            .any(|c| c.identity == to && c.identity != self.identity && c.ready_for.is_some());
        match self.phase.clone() {
            Phase::Leading(t) | Phase::Renewing { term: t, .. } if ready => {
                self.end(t.lease, StepDownReason::Balance, Some(to), Some(request))
            }
            _ => self.answer(request, StepDown::NotLeader),
        }
    }

    /// Withdraw the own record and stop.
    fn finish(&mut self) {
        self.phase = Phase::Done;
        self.push(Command::Withdraw);
    }
}

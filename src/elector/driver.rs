//! The thin async driver of the [`Machine`]: the [`Elector`] runs the machine's commands against
//! the nodes through [`Rounds`] (the real [`Redlock`] in [`Live`], an in-memory lease in the tests), and
//! turns the outside world (the clock, release notices, step-down requests, the stall
//! watchdog, the pod's standing, shutdown) into the machine's [`Event`]s. It decides nothing.
//!
//! Commands run one at a time, in order; a round's answer is fed back before anything else is
//! taken, so the machine sees events between rounds only (as the async elector did). Two races
//! are kept here:
//! - the renewal against the deadline, which the command carries (`until`);
//! - a won attempt against its record round. The term is fed at once, and the record round
//!   finishes beside it ([`Elector::tail`]) before the next round runs. The winner need not wait
//!   for its record on every node: that round waits for the slowest node, and the term for a
//!   quorum only.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use super::machine::Machine;
use super::machine::io::{Command, Count, Cx, Event};
use super::rounds::{Live, Rounds};
use super::settings::{Preference, Standing, Timing};
use super::step_down::StepDownRequest;
use super::watchdog::LoopHealth;
use crate::leadership::{CandidacyView, Leadership};
use crate::metrics::Metrics;
use crate::redlock::candidates::Candidate;
use crate::redlock::{Acquire, Notices, Redlock};

/// An attempt's record round: the candidates a quorum holds.
type Records = Pin<Box<dyn Future<Output = Option<Vec<Candidate>>> + Send>>;

/// A renewal's record round is cut this long before the term's deadline, so that a renewal
/// that reached a quorum is fed to the machine before the deadline ends the term.
const RECORDS_BEFORE_DEADLINE: std::time::Duration = std::time::Duration::from_millis(10);

/// Step-down requests queued before the loop takes them (each waits for its answer anyway).
const REQUEST_QUEUE: usize = 16;

/// The elector: the [`Machine`] and its driver's channels.
pub struct Elector<R = Live> {
    /// The rounds the machine's commands run.
    rounds: Arc<R>,
    /// The record round of a won attempt, still running: polled beside the loop's waits, and
    /// finished before the next round starts (a withdrawal must not overtake the write).
    tail: Option<Records>,
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
    /// Set while a process runs under the term (`redlock-elector run`'s command): a release
    /// waits until it is clear, so the lease never passes on while that process lives.
    gate: Option<watch::Receiver<bool>>,
    /// The latest hand-over asked for a shard: to whom, and how often the shard has moved in
    /// a rollout (its release notice carries that).
    handing: Option<(String, u8)>,
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
            rounds: Arc::new(rounds),
            tail: None,
            machine,
            tx,
            requests: req_rx,
            notices: notices.clone(),
            standing,
            candidacy: candidacy_tx,
            health: health.clone(),
            metrics,
            gate: None,
            handing: None,
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

/// Run an attempt's acquire and record rounds together. A won acquire answers at once, without
/// the candidates (the term reads them again at its first renewal, or at its step-down): the
/// record round, which waits for every node, is left in `tail` to finish. Otherwise both answer.
async fn won_first(
    acquire: impl Future<Output = Acquire>,
    mut records: Records,
    tail: &mut Option<Records>,
) -> (Acquire, Option<Vec<Candidate>>) {
    tokio::pin!(acquire);
    // Biased: the acquire is polled first, so on every node its command goes out ahead of the
    // record round's and is not queued behind that script.
    tokio::select! {
        biased;
        outcome = &mut acquire => match outcome {
            Acquire::Acquired(_) => {
                *tail = Some(records);
                (outcome, None)
            }
            _ => (outcome, records.await),
        },
        candidates = &mut records => (acquire.await, candidates),
    }
}

/// Finish the won attempt's record round, if one is running.
async fn finish(tail: &mut Option<Records>) {
    if let Some(t) = tail.as_mut() {
        t.await;
    }
    *tail = None;
}

/// Whether the gate is clear (no process runs under the term) by `deadline`; at once without
/// a gate. A gate whose runner is gone while it was set stays shut.
async fn gate_clear(gate: &mut Option<watch::Receiver<bool>>, deadline: Instant) -> bool {
    let Some(gate) = gate else {
        return true;
    };
    matches!(
        tokio::time::timeout_at(deadline, gate.wait_for(|busy| !*busy)).await,
        Ok(Ok(_))
    )
}

/// Sleep until `at`; forever when there is nothing to wake for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl<R: Rounds> Elector<R> {
    /// Release no term while `gate` says a process still runs under it (`redlock-elector run`).
    pub fn set_gate(&mut self, gate: watch::Receiver<bool>) {
        self.gate = Some(gate);
    }

    /// Run until `stop` is cancelled; on the way out, release the lease if held, and withdraw
    /// the own candidate record so that no leader names a sidecar that is gone.
    pub async fn run(mut self, stop: CancellationToken) {
        let _alive = self.health.alive();
        let mut rng = StdRng::from_os_rng();
        let mut stalls = self.health.stalls();
        let mut requests: Vec<(u64, StepDownRequest)> = Vec::new();
        let mut next_request = 0u64;
        let mut stopped = false;
        let mut was_leading = false;
        loop {
            while let Some(command) = self.machine.poll_command() {
                if let Some(event) = self.execute(command, &mut requests).await {
                    self.feed(event, &mut rng);
                }
            }
            if self.machine.done() {
                return;
            }
            // A term counts only the stalls from its start on.
            let leading = self.machine.leading();
            if leading && !was_leading {
                stalls.borrow_and_update();
            }
            was_leading = leading;
            let timer = self.machine.poll_timeout();
            let awaiting_copies = self.machine.awaiting_copies();
            let event = tokio::select! {
                biased;
                _ = stop.cancelled(), if !stopped => {
                    stopped = true;
                    Event::Shutdown
                }
                Ok(()) = stalls.changed() => Event::Stall,
                Some(request) = self.requests.recv() => {
                    next_request += 1;
                    let (reason, to) = (request.reason, request.successor.clone());
                    self.handing = to.clone().zip(request.moved);
                    requests.push((next_request, request));
                    match to {
                        Some(to) => Event::HandOver(next_request, to),
                        None => Event::StepDown(next_request, reason),
                    }
                }
                _ = self.notices.notified() => Event::Notice {
                    successor: self.notices.successor(),
                    copies: self.notices.copies(),
                },
                _ = self.notices.quorum_reached(), if awaiting_copies => {
                    Event::Copies(self.notices.copies())
                }
                Ok(()) = self.standing.changed() => {
                    Event::Standing(self.standing.borrow_and_update().clone())
                }
                _ = self.rounds.counting_changed() => Event::Counting,
                () = finish(&mut self.tail), if self.tail.is_some() => continue,
                _ = sleep_until_some(timer) => Event::Timer,
            };
            self.feed(event, &mut rng);
        }
    }

    /// Hand one event to the machine with the instant, the nodes and the loop's health now.
    fn feed(&mut self, event: Event, rng: &mut StdRng) {
        let now = Instant::now();
        let mut cx = Cx {
            now,
            nodes: self.rounds.nodes(now),
            stalled: self.health.stalled.load(Ordering::SeqCst),
            rng,
        };
        self.machine.handle(&mut cx, event);
    }

    /// Run one command; a round's answer comes back as the event to feed.
    async fn execute(
        &mut self,
        command: Command,
        requests: &mut Vec<(u64, StepDownRequest)>,
    ) -> Option<Event> {
        if command.is_round() {
            finish(&mut self.tail).await;
        }
        let rounds = &self.rounds;
        match command {
            Command::Attempt { named, record } => {
                let shared = rounds.clone();
                let records: Records = Box::pin(async move {
                    let (fields, life) = (record.fields.as_ref(), record.life);
                    shared.records(fields, life, record.read_after).await
                });
                let (outcome, candidates) =
                    won_first(rounds.acquire(named), records, &mut self.tail).await;
                Some(Event::Attempted {
                    outcome,
                    candidates,
                })
            }
            Command::Watch { record } => {
                let w = rounds.watch(record.fields.as_ref(), record.life).await;
                Some(Event::Watched {
                    answered: w.answered,
                    held: w.held,
                    candidates: w.candidates,
                })
            }
            Command::Renew {
                lease,
                record,
                until,
            } => {
                // Never let an in-flight renewal delay the step-down at the deadline. The record
                // round beside it is cut on its own, a little before: a renewal that reached a
                // quorum is fed while its term still runs, not lost to a record round still
                // running (review finding 6); its read comes with the next renewal.
                let renew = async { timeout_at(until, rounds.renew(&lease)).await.ok().flatten() };
                let (fields, life) = (record.fields.as_ref(), record.life);
                let records = async {
                    let read = rounds.records(fields, life, record.read_after);
                    let cut = until.checked_sub(RECORDS_BEFORE_DEADLINE).unwrap_or(until);
                    timeout_at(cut, read).await.ok().flatten()
                };
                let (deadline, candidates) = tokio::join!(renew, records);
                Some(Event::Renewed {
                    deadline,
                    candidates,
                })
            }
            Command::ReadCandidates { life } => {
                Some(Event::Candidates(rounds.records(None, life, None).await))
            }
            Command::Release { lease, successor } => {
                // A shard's count of moves goes only with the hand-over that asked for it.
                let moved = self
                    .handing
                    .take()
                    .filter(|(to, _)| Some(to) == successor.as_ref())
                    .map(|(_, m)| m);
                if gate_clear(&mut self.gate, lease.deadline).await {
                    rounds.hand_over(&lease, successor.as_deref(), moved).await;
                } else {
                    tracing::error!(
                        token = lease.token,
                        "the command run under the term was still alive at the term's deadline; not releasing: the lease is left to expire"
                    );
                }
                Some(Event::Released)
            }
            Command::Publish { term, leader } => {
                self.tx.send_if_modified(|s| {
                    let next = s.with(term, leader);
                    let changed = next != *s;
                    *s = next;
                    changed
                });
                None
            }
            Command::PublishEnd(ended) => {
                self.tx.send_modify(|s| {
                    *s = s.with(None, None);
                    s.ended = Some(ended);
                });
                None
            }
            Command::Candidacy(view) => {
                self.metrics
                    .app_health(view.app_healthy, view.healthy_candidates);
                self.candidacy.send_if_modified(|v| {
                    let changed = *v != view;
                    *v = view;
                    changed
                });
                None
            }
            Command::Answer { request, answer } => {
                if let Some(i) = requests.iter().position(|(id, _)| *id == request) {
                    let _ = requests.swap_remove(i).1.reply.send(answer);
                }
                None
            }
            Command::Count(count) => {
                match count {
                    Count::BecameLeader(gap) => self.metrics.became_leader(gap),
                    Count::Stall => self.metrics.stall_detected(),
                    Count::Handover(reason) => self.metrics.handover(reason),
                    Count::StepDown(reason) => self.metrics.step_down(reason),
                }
                None
            }
            Command::Withdraw => {
                rounds.withdraw().await;
                None
            }
        }
    }
}

//! The thin async driver of the [`Machine`]: it runs the machine's commands against the nodes
//! through [`Rounds`] (the real [`Redlock`] in [`Live`], an in-memory lease in the tests), and
//! turns the outside world (the clock, release notices, step-down requests, the stall
//! watchdog, the pod's standing, shutdown) into the machine's [`Event`]s. It decides nothing.
//!
//! Commands run one at a time, in order; a round's answer is fed back before anything else is
//! taken, so the machine sees events between rounds only (as the async elector did). The one
//! race kept here is the renewal against the deadline, which the command carries (`until`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::machine::{Command, Count, Cx, Event, Nodes};
use super::{Elector, StepDownRequest};
use crate::redlock::candidates::Candidate;
use crate::redlock::{Acquire, Lease, OwnRecord, Redlock, Watched};

/// The rounds the machine's commands need, small enough to implement in memory for tests.
pub trait Rounds: Send + Sync + 'static {
    /// An acquire round (`named`: a notice named this sidecar).
    fn acquire(&self, named: bool) -> impl Future<Output = Acquire> + Send;
    /// A renewal round: the new deadline if a quorum renewed.
    fn renew(&self, lease: &Lease) -> impl Future<Output = Option<Instant>> + Send;
    /// Write the own record (when given) and read everyone's.
    fn records(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
    ) -> impl Future<Output = Option<Vec<Candidate>>> + Send;
    /// A follower's watch round, writing the own record (when given).
    fn watch(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
    ) -> impl Future<Output = Watched> + Send;
    /// Release with a notice naming `successor` (or every follower).
    fn hand_over(&self, lease: &Lease, successor: Option<&str>) -> impl Future<Output = ()> + Send;
    /// Withdraw the own record (shutdown).
    fn withdraw(&self) -> impl Future<Output = ()> + Send;
    /// What the nodes say at `now`.
    fn nodes(&self, now: Instant) -> Nodes;
}

/// The real rounds: this sidecar's identity on the [`Redlock`].
pub struct Live {
    /// The protocol over the nodes.
    pub redlock: Arc<Redlock>,
    /// This sidecar's identity.
    pub identity: String,
    /// `retryEvery`, of which the watch period is derived.
    pub retry_every: Duration,
}

impl Live {
    fn own<'a>(&'a self, fields: Option<&'a [String; 5]>) -> Option<OwnRecord<'a>> {
        fields.map(|fields| OwnRecord {
            identity: &self.identity,
            fields,
        })
    }
}

impl Rounds for Live {
    async fn acquire(&self, named: bool) -> Acquire {
        self.redlock.acquire(&self.identity, named).await
    }

    async fn renew(&self, lease: &Lease) -> Option<Instant> {
        self.redlock.renew(lease).await
    }

    async fn records(&self, own: Option<&[String; 5]>, life: Duration) -> Option<Vec<Candidate>> {
        self.redlock.candidates(self.own(own), life).await
    }

    async fn watch(&self, own: Option<&[String; 5]>, life: Duration) -> Watched {
        self.redlock.watch(self.own(own), life).await
    }

    async fn hand_over(&self, lease: &Lease, successor: Option<&str>) {
        self.redlock.hand_over(lease, successor).await
    }

    async fn withdraw(&self) {
        self.redlock.withdraw(&self.identity).await
    }

    fn nodes(&self, now: Instant) -> Nodes {
        let r = &self.redlock;
        Nodes {
            wait: r.quorum_wait(now),
            counts_at: r.quorum_counts_at(),
            successor_ready: r.eligible_as_successor(now),
            notices_live: r.notices_live(),
            watch_period: r.watch_period(self.retry_every),
        }
    }
}

/// Sleep until `at`; forever when there is nothing to wake for.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => sleep_until(at).await,
        None => std::future::pending().await,
    }
}

impl<R: Rounds> Elector<R> {
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
                    requests.push((next_request, request));
                    Event::StepDown(next_request)
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
        let rounds = &self.rounds;
        match command {
            Command::Attempt { named, record } => {
                let (outcome, candidates) = tokio::join!(
                    rounds.acquire(named),
                    rounds.records(record.fields.as_ref(), record.life)
                );
                Some(Event::Attempted {
                    outcome,
                    candidates,
                })
            }
            Command::Watch { record } => {
                let w = rounds.watch(record.fields.as_ref(), record.life).await;
                Some(Event::Watched {
                    held: w.held,
                    candidates: w.candidates,
                })
            }
            Command::Renew {
                lease,
                record,
                until,
            } => {
                // Never let an in-flight renewal delay the step-down at the deadline.
                let round = async {
                    tokio::join!(
                        rounds.renew(&lease),
                        rounds.records(record.fields.as_ref(), record.life)
                    )
                };
                let (deadline, candidates) = tokio::select! {
                    r = round => r,
                    _ = sleep_until(until) => (None, None),
                };
                Some(Event::Renewed {
                    deadline,
                    candidates,
                })
            }
            Command::ReadCandidates { life } => {
                Some(Event::Candidates(rounds.records(None, life).await))
            }
            Command::Release { lease, successor } => {
                rounds.hand_over(&lease, successor.as_deref()).await;
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
                self.candidacy.send_if_modified(|v| {
                    let changed = *v != view;
                    *v = view;
                    changed
                });
                None
            }
            Command::Answer { request, answer } => {
                if let Some(i) = requests.iter().position(|(id, _)| *id == request) {
                    let _ = requests.swap_remove(i).1.send(answer);
                }
                None
            }
            Command::Count(count) => {
                match count {
                    Count::BecameLeader(gap) => self.metrics.became_leader(gap),
                    Count::Stall => self.metrics.stall_detected(),
                    Count::Handover(reason) => self.metrics.handover(reason),
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

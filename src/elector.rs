//! The follower ⇄ leader state machine and its timers. Owns the truth about leadership and
//! publishes it as a `watch` of [`Leadership`]; everything else only reads that channel.
//!
//! Follower: attempt, then wait a jittered `retryEvery` (or until a quorum of keys can expire,
//! or until a release notice arrives) and attempt again. Leader: renew every `renewEvery`; step
//! down exactly at the deadline if no renewal reached a quorum, on `POST /leader/step-down`, on
//! a stall, or on shutdown, then release with a notice so a follower takes over at once.
//!
//! Candidates: each attempt also refreshes this sidecar's candidate record (rank, readiness) on
//! the nodes, and each renewal the leader's. A graceful release names the best ready candidate
//! by `lease.prefer` in its notice: that one attempts at once, the others after [`GRACE`]. With
//! `newest` / `oldest`, a leader that sees a better candidate ready for `lease.preferSettle`
//! hands over to it (reason `preferred`). Preference only orders contenders; the winner still
//! needs the Redlock quorum.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};

use crate::config::Prefer;
use crate::leadership::{Leadership, Term};
use crate::metrics::Metrics;
use crate::redlock::candidates::{self, Candidate, Handover, Rank};
use crate::redlock::{Acquire, Lease, Notices, Redlock, Successor};

/// How long followers not named by a release notice wait before contending, measured against
/// the named successor's acquisition (README "Rollouts"): on loopback the named one holds the
/// lease 1–3 ms after the notice; a round trip to distant nodes plus a slow node's reply stays
/// within one `redis.timeout`. So the grace is `redis.timeout` + this margin, and a named
/// successor that is gone delays the handover by at most that much.
pub const GRACE_MARGIN: Duration = Duration::from_millis(25);

/// The grace for a given per-node timeout: `redis.timeout + GRACE_MARGIN`.
pub fn grace(redis_timeout: Duration) -> Duration {
    redis_timeout + GRACE_MARGIN
}

/// Why this sidecar stopped leading (for logs and Kubernetes Events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepDownReason {
    /// `POST /leader/step-down`.
    Requested,
    /// The deadline passed without a renewal reaching a quorum.
    RenewalFailed,
    /// The election loop's timer slipped (CPU starvation, pause).
    Stalled,
    /// SIGTERM / SIGINT.
    Shutdown,
    /// A better candidate (by `lease.prefer`) had been ready for the settle time.
    Preferred,
}

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

    /// The `reason` label of `redlock_elector_handovers_total` for a graceful handover (the
    /// release names a successor); `None` for a lost lease.
    pub fn handover_label(self) -> Option<&'static str> {
        match self {
            StepDownReason::Shutdown => Some("shutdown"),
            StepDownReason::Requested => Some("step_down"),
            StepDownReason::Preferred => Some("preferred"),
            StepDownReason::RenewalFailed | StepDownReason::Stalled => None,
        }
    }
}

/// This sidecar's standing as a candidate, from outside the election: the `kube` pod poller in
/// Kubernetes, fixed elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The pod's revision label (empty outside Kubernetes).
    pub revision: String,
    /// The pod's creation time, Unix seconds (0 outside Kubernetes).
    pub created: i64,
    /// Whether the pod is Ready (always outside Kubernetes).
    pub ready: bool,
    /// Whether revision and creation time are known yet (never ready before).
    pub known: bool,
}

impl Standing {
    /// Outside Kubernetes: nothing to wait for.
    pub fn fixed() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: true,
            known: true,
        }
    }

    /// In Kubernetes, before the pod was read.
    pub fn unknown() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: false,
            known: false,
        }
    }
}

/// The preference settings of the state machine.
#[derive(Clone, Debug)]
pub struct Preference {
    /// `lease.prefer`.
    pub prefer: Prefer,
    /// `lease.priority`.
    pub priority: i64,
    /// `lease.preferSettle`.
    pub settle: Duration,
    /// How long followers not named wait after a notice ([`grace`]).
    pub grace: Duration,
    /// Whether a graceful release names a successor (off only for the benchmark's comparison).
    pub name_successor: bool,
}

/// What `/leader` shows about candidates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CandidacyView {
    /// This sidecar's rank, once known.
    pub rank: Option<Rank>,
    /// The current leader's rank as its record shows it (own rank while leading).
    pub leader_rank: Option<Rank>,
    /// Whether the leader sees a better candidate that is ready and settling.
    pub handover_pending: bool,
    /// Whether this sidecar's own record, as last written, says ready.
    pub candidate_ready: bool,
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

/// Liveness of the election loop, read by `/healthz`.
pub struct LoopHealth {
    /// Set while the loop's timers slip beyond the margin; cleared after a second on time.
    pub stalled: AtomicBool,
    /// Set while the election task runs.
    pub alive: AtomicBool,
    /// Counts detected stalls; the leader loop watches it to step down.
    stall_seq: watch::Sender<u64>,
    /// Origin of `last_tick_ms`.
    base: Instant,
    /// The watchdog's last tick, in ms since `base`.
    last_tick_ms: AtomicU64,
    /// A tick older than this (ms) is a stall in progress; 0 until the watchdog runs.
    stale_after_ms: AtomicU64,
}

impl Default for LoopHealth {
    fn default() -> Self {
        LoopHealth {
            stalled: AtomicBool::new(false),
            alive: AtomicBool::new(false),
            stall_seq: watch::channel(0).0,
            base: Instant::now(),
            last_tick_ms: AtomicU64::new(0),
            stale_after_ms: AtomicU64::new(0),
        }
    }
}

impl LoopHealth {
    /// Whether `/healthz` should answer 200, evaluated at `now`. Like leadership, this is
    /// judged at answer time: right after a pause (SIGSTOP, starvation) the HTTP handler may run
    /// before the watchdog has noticed, and must not answer from the stale flag alone.
    pub fn healthy_at(&self, now: Instant) -> bool {
        let stale_after = self.stale_after_ms.load(Ordering::SeqCst);
        let since_tick = (now.saturating_duration_since(self.base).as_millis() as u64)
            .saturating_sub(self.last_tick_ms.load(Ordering::SeqCst));
        self.alive.load(Ordering::SeqCst)
            && !self.stalled.load(Ordering::SeqCst)
            && (stale_after == 0 || since_tick <= stale_after)
    }

    /// Whether `/healthz` should answer 200 now.
    pub fn healthy(&self) -> bool {
        self.healthy_at(Instant::now())
    }

    fn tick(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.base).as_millis() as u64;
        self.last_tick_ms.store(ms, Ordering::SeqCst);
    }
}

/// Timing settings of the state machine.
#[derive(Clone, Debug)]
pub struct Timing {
    /// Lease ttl (also the cool-down after a requested step-down).
    pub ttl: Duration,
    /// Renewal period.
    pub renew_every: Duration,
    /// Base follower retry period.
    pub retry_every: Duration,
    /// Timer slip beyond which the loop counts as stalled.
    pub stall_margin: Duration,
}

impl Timing {
    /// Derive the stall margin from the renewal period: half of it, at least 50 ms.
    pub fn new(ttl: Duration, renew_every: Duration, retry_every: Duration) -> Self {
        Timing {
            ttl,
            renew_every,
            retry_every,
            stall_margin: (renew_every / 2).max(Duration::from_millis(50)),
        }
    }
}

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
    /// Why the last term ended; read by publishers that report reasons.
    reason_tx: watch::Sender<Option<StepDownReason>>,
}

/// Handles the rest of the process needs.
pub struct Handles {
    /// Leadership state.
    pub leadership: watch::Receiver<Leadership>,
    /// Why the last term ended.
    pub reason: watch::Receiver<Option<StepDownReason>>,
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
        let (reason_tx, reason_rx) = watch::channel(None);
        let (req_tx, req_rx) = mpsc::channel(16);
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
            health: health.clone(),
            metrics,
            reason_tx,
        };
        let handles = Handles {
            leadership: rx,
            reason: reason_rx,
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

    /// Run until `stop` turns true; on the way out, release the lease if held, and withdraw the
    /// own candidate record so that no leader names a sidecar that is gone.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.health.alive.store(true, Ordering::SeqCst);
        let _alive = AliveGuard(self.health.clone());
        self.elect(&mut stop).await;
        self.redlock.withdraw(&self.identity).await;
    }

    async fn elect(&mut self, stop: &mut watch::Receiver<bool>) {
        let mut next_attempt = Instant::now();
        let mut fast_streak = 0u32;
        let mut cooldown_until: Option<Instant> = None;
        // Start of the current failover gap (for `acquire_wait`): when the lease was last known
        // held by someone else, or the first attempt that found it free.
        let mut free_since: Option<Instant> = None;
        loop {
            // ---- follower: wait for the next attempt ----
            let woke_by_notice = tokio::select! {
                biased;
                _ = stop.changed() => return,
                Some(req) = self.requests.recv() => {
                    let _ = req.send(StepDown::NotLeader);
                    continue;
                }
                _ = self.notices.notified() => true,
                _ = sleep_until(next_attempt) => false,
            };
            if *stop.borrow() {
                return;
            }
            if cooldown_until.is_some_and(|c| Instant::now() < c) {
                next_attempt = cooldown_until.unwrap_or_else(Instant::now);
                continue;
            }
            if self.health.stalled.load(Ordering::SeqCst) {
                next_attempt = Instant::now() + Duration::from_millis(100);
                continue;
            }
            if woke_by_notice {
                // The holder released: it is no longer the leader. A little jitter keeps several
                // followers from splitting the vote.
                let cur = self.tx.borrow().leader.clone();
                if cur.is_some() && cur.as_deref() != Some(&self.identity) {
                    self.publish(None, None);
                }
                free_since = Some(Instant::now());
                match self.notices.successor() {
                    // Named: attempt as soon as the key is gone on a quorum (a quorum of nodes
                    // has sent the notice; the first copy may come from a node the release
                    // reached first, and an attempt then would find the key still held
                    // elsewhere). If copies are missing (a node down), attempt after the grace.
                    Some(named) if named == self.identity => {
                        let until = Instant::now() + self.preference.grace;
                        while self.notices.copies() < self.notices.quorum() {
                            tokio::select! {
                                _ = self.notices.quorum_reached() => {}
                                _ = sleep_until(until) => break,
                                _ = stop.changed() => return,
                            }
                        }
                        tracing::info!(
                            copies = self.notices.copies(),
                            "named successor by the release notice; attempting"
                        );
                    }
                    // Someone else is named: let it win first; if it is gone, this costs the
                    // grace at most.
                    Some(_) => {
                        tokio::select! {
                            _ = tokio::time::sleep(self.preference.grace) => {}
                            _ = stop.changed() => return,
                        }
                    }
                    None => {
                        let j = rand::rng().random_range(0..2_000u64);
                        tokio::time::sleep(Duration::from_micros(j)).await;
                    }
                }
            }
            let attempted_at = Instant::now();
            let redlock = self.redlock.clone();
            let (outcome, read) = tokio::join!(
                redlock.acquire(&self.identity),
                self.read_candidates(false, false)
            );
            self.apply_candidates(read, false, false);
            let retry = self.jittered_retry();
            match outcome {
                Acquire::Acquired(lease) => {
                    fast_streak = 0;
                    let since = free_since.take().unwrap_or(attempted_at);
                    self.metrics.acquire_wait.observe(
                        Instant::now()
                            .saturating_duration_since(since)
                            .as_secs_f64(),
                    );
                    let reason = self.lead(lease, stop).await;
                    self.reason_tx.send_replace(Some(reason));
                    if reason == StepDownReason::Shutdown {
                        return;
                    }
                    if reason == StepDownReason::Requested {
                        cooldown_until = Some(Instant::now() + self.timing.ttl);
                    }
                    next_attempt = Instant::now() + self.jittered_retry();
                }
                Acquire::Contended(obs) => {
                    fast_streak = 0;
                    free_since = Some(Instant::now() + obs.free_in.unwrap_or_default());
                    self.publish(None, obs.holder);
                    // Wake when a quorum of keys can have expired (a crashed leader), if sooner.
                    let at_expiry = obs
                        .free_in
                        .map(|d| d + Duration::from_micros(rand::rng().random_range(1_000..8_000)));
                    next_attempt = Instant::now() + at_expiry.map_or(retry, |d| d.min(retry));
                    // A fresh sidecar becomes a ready candidate when a quorum counts its votes:
                    // refresh its record then, not a retry later.
                    let now = Instant::now();
                    if let Some(at) = self.redlock.quorum_counts_at().filter(|at| *at > now) {
                        let at = at + Duration::from_micros(rand::rng().random_range(0..2_000));
                        next_attempt = next_attempt.min(at);
                    }
                }
                Acquire::NoQuorum(obs) => {
                    free_since.get_or_insert(attempted_at);
                    if obs.holder.is_none() {
                        let cur = self.tx.borrow().leader.clone();
                        if cur.is_some() {
                            self.publish(None, None);
                        }
                    }
                    // A split vote: every loser already released, so try again soon, a few times.
                    fast_streak += 1;
                    next_attempt = if fast_streak <= 3 {
                        Instant::now()
                            + Duration::from_micros(rand::rng().random_range(1_000..15_000))
                    } else {
                        Instant::now() + retry
                    };
                    // Fewer than a quorum count yet (this sidecar still watches the nodes'
                    // clocks, or they are quarantined): attempts before then only probe, so the
                    // next one that can win goes out the moment a quorum counts.
                    let now = Instant::now();
                    if let Some(at) = self.redlock.quorum_counts_at().filter(|at| *at > now) {
                        let at = at + Duration::from_micros(rand::rng().random_range(0..2_000));
                        next_attempt = at.min(now + retry);
                    }
                }
                Acquire::Error => {
                    fast_streak = 0;
                    free_since.get_or_insert(attempted_at);
                    next_attempt = Instant::now() + retry;
                }
            }
        }
    }

    /// This sidecar's rank, once its pod has been read (always outside Kubernetes).
    fn rank(&self) -> Option<Rank> {
        let s = self.standing.borrow();
        s.known.then(|| Rank {
            priority: self.preference.priority,
            revision: s.revision.clone(),
            created: s.created,
        })
    }

    /// Whether this sidecar is a ready candidate now: a quorum of nodes counts its votes (a
    /// successor that cannot win is never named) and its pod is Ready.
    fn ready(&self) -> bool {
        let ready = {
            let s = self.standing.borrow();
            s.known && s.ready
        };
        ready && self.redlock.eligible(Instant::now())
    }

    /// Refresh the own candidate record (once the rank is known) and read everyone's. A leader's
    /// record lives for three renewals, a follower's for three retries.
    /// Returns the read (if a quorum answered) and whether the record written says ready.
    async fn read_candidates(&self, leading: bool, pending: bool) -> Read {
        let life = if leading {
            self.timing.renew_every * 3
        } else {
            self.timing.retry_every * 3
        };
        match self.rank() {
            Some(rank) => {
                let ready = self.ready();
                let fields = candidates::fields(&rank, ready, pending);
                let read = self
                    .redlock
                    .candidates(
                        Some(crate::redlock::OwnRecord {
                            identity: &self.identity,
                            fields: &fields,
                        }),
                        life,
                    )
                    .await;
                // Written only if a quorum took it; either way, not ready is the safe answer.
                let ready = ready && read.is_some();
                (read, ready)
            }
            None => (self.redlock.candidates(None, life).await, false),
        }
    }

    /// Keep a read (if a quorum answered) and update what `/leader` shows.
    fn apply_candidates(&mut self, read: Read, leading: bool, pending: bool) {
        let (read, ready) = read;
        if let Some(c) = read {
            self.last_candidates = c;
        }
        let rank = self.rank();
        let view = if leading {
            CandidacyView {
                leader_rank: rank.clone(),
                rank,
                handover_pending: pending,
                candidate_ready: ready,
            }
        } else {
            let leader = self.tx.borrow().leader.clone();
            let record = leader.and_then(|l| self.last_candidates.iter().find(|c| c.identity == l));
            CandidacyView {
                rank,
                leader_rank: record.map(|c| c.rank.clone()),
                handover_pending: record.is_some_and(|c| c.pending),
                candidate_ready: ready,
            }
        };
        self.candidacy.send_if_modified(|v| {
            let changed = *v != view;
            *v = view;
            changed
        });
    }

    fn jittered_retry(&self) -> Duration {
        self.timing
            .retry_every
            .mul_f64(rand::rng().random_range(0.75..1.25))
    }

    /// Lead until a reason to stop; always ends with the step-down published and the lease
    /// released.
    async fn lead(&mut self, mut lease: Lease, stop: &mut watch::Receiver<bool>) -> StepDownReason {
        self.metrics.leader_transitions.inc();
        self.publish(
            Some(Term {
                token: lease.token,
                deadline: lease.deadline,
            }),
            Some(self.identity.clone()),
        );
        tracing::info!(
            token = lease.token,
            valid_ms = lease
                .deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64,
            "became leader"
        );
        let mut next_renew = Instant::now() + self.timing.renew_every;
        let mut stalls = self.health.stall_seq.subscribe();
        stalls.borrow_and_update();
        // A better candidate is ready and settling (shown in `/leader` and the own record).
        let mut pending = false;
        self.apply_candidates((None, true), true, false);
        let (reason, named) = loop {
            let deadline = lease.deadline;
            tokio::select! {
                biased;
                _ = sleep_until(deadline) => break (StepDownReason::RenewalFailed, None),
                _ = stop.changed() => break (StepDownReason::Shutdown, None),
                _ = stalls.changed() => break (StepDownReason::Stalled, None),
                Some(req) = self.requests.recv() => {
                    self.step_down(&lease, StepDownReason::Requested, None).await;
                    let _ = req.send(StepDown::Released);
                    return StepDownReason::Requested;
                }
                _ = sleep_until(next_renew) => {
                    if Instant::now().saturating_duration_since(next_renew) > self.timing.stall_margin {
                        self.metrics.stalls.inc();
                        break (StepDownReason::Stalled, None);
                    }
                    let started = Instant::now();
                    // Never let an in-flight renewal delay the step-down at the deadline. The
                    // candidates are read beside it, each node bounded by the same timeout.
                    let redlock = self.redlock.clone();
                    let (renewed, read) = tokio::select! {
                        r = async { tokio::join!(redlock.renew(&lease), self.read_candidates(true, pending)) } => r,
                        _ = sleep_until(deadline) => (None, (None, false)),
                    };
                    match renewed {
                        Some(d) => {
                            lease.deadline = d.max(lease.deadline);
                            self.publish(Some(Term { token: lease.token, deadline: lease.deadline }), Some(self.identity.clone()));
                            next_renew = started + self.timing.renew_every;
                            let fresh = read.0.is_some();
                            let was_pending = pending;
                            pending = false;
                            if let (true, Some(mine)) = (fresh, self.rank()) {
                                match candidates::handover(
                                    read.0.as_deref().unwrap_or_default(),
                                    &self.identity,
                                    &mine,
                                    self.preference.prefer,
                                    self.preference.settle,
                                ) {
                                    Handover::To(to) => {
                                        self.apply_candidates(read, true, false);
                                        break (StepDownReason::Preferred, Some(to));
                                    }
                                    Handover::Pending(to) => {
                                        if !was_pending {
                                            tracing::info!(candidate = %to, settle_ms = self.preference.settle.as_millis() as u64,
                                                "a preferred candidate is ready; handing over once it has been ready for the settle time");
                                        }
                                        pending = true;
                                    }
                                    Handover::None => {}
                                }
                            }
                            self.apply_candidates(read, true, pending);
                        }
                        None => {
                            tracing::warn!(left_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64, "renewal failed; retrying until the deadline");
                            next_renew = Instant::now() + (self.timing.renew_every / 4).max(Duration::from_millis(10));
                        }
                    }
                }
            }
        };
        self.step_down(&lease, reason, named).await;
        reason
    }

    /// Publish "not leader" first, then release everywhere with a notice. A graceful step-down
    /// names a successor: `named`, else the best ready candidate by `lease.prefer` from a fresh
    /// read (the last read if too few nodes answer).
    async fn step_down(&mut self, lease: &Lease, reason: StepDownReason, named: Option<String>) {
        self.publish(None, None);
        self.reason_tx.send_replace(Some(reason));
        let graceful = reason.handover_label();
        let successor = match (graceful, named) {
            (_, Some(n)) => Some(n),
            (Some(_), None) if self.preference.name_successor => {
                let life = self.timing.retry_every * 3;
                if let Some(c) = self.redlock.candidates(None, life).await {
                    self.last_candidates = c;
                }
                candidates::successor(
                    &self.last_candidates,
                    &self.identity,
                    self.preference.prefer,
                    |n| rand::rng().random_range(0..n),
                )
                .map(|c| c.identity.clone())
            }
            _ => None,
        };
        tracing::info!(
            reason = reason.as_str(),
            token = lease.token,
            successor = successor.as_deref().unwrap_or(""),
            prefer = self.preference.prefer.as_str(),
            "lost leadership"
        );
        if let Some(label) = graceful {
            self.metrics.handovers.with_label_values(&[label]).inc();
        }
        let successor = successor.as_deref().map(|identity| Successor {
            identity,
            grace: self.preference.grace,
        });
        let notice = successor.map_or(
            crate::redlock::Notice::Followers,
            crate::redlock::Notice::Successor,
        );
        self.redlock.release(&lease.value, notice).await;
        self.apply_candidates((None, false), false, false);
    }
}

/// A read of the candidates (if a quorum answered) and whether the own record written says
/// ready.
type Read = (Option<Vec<Candidate>>, bool);

struct AliveGuard(Arc<LoopHealth>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
    }
}

/// Tick every `margin / 2` (50 ms..=500 ms); when a tick is late by more than `margin`, mark the
/// loop stalled, tell the elector to step down, and keep `/healthz` failing until ticks have been
/// on time for a second.
pub async fn watchdog(
    health: Arc<LoopHealth>,
    metrics: Metrics,
    margin: Duration,
    mut stop: watch::Receiver<bool>,
) {
    // A pause longer than margin + period always shows as a late tick. Half the margin keeps
    // that close to the margin while sparing idle wake-ups at long ttls (2 per second at the
    // default ttl of 10 s instead of 20).
    let period = (margin / 2).clamp(Duration::from_millis(50), Duration::from_millis(500));
    let recover_after = Duration::from_secs(1);
    health.tick(Instant::now());
    health
        .stale_after_ms
        .store((period + margin).as_millis() as u64, Ordering::SeqCst);
    let mut next = Instant::now() + period;
    let mut last_stall: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = sleep_until(next) => {}
            _ = stop.changed() => return,
        }
        let now = Instant::now();
        let late = now.saturating_duration_since(next);
        if late > margin {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                "election loop stalled; stepping down until it recovers"
            );
            last_stall = Some(now);
            metrics.stalls.inc();
            metrics.stalled.set(1);
            health.stalled.store(true, Ordering::SeqCst);
            health.stall_seq.send_modify(|n| *n += 1);
        } else if last_stall.is_some_and(|t| now.duration_since(t) >= recover_after) {
            last_stall = None;
            metrics.stalled.set(0);
            health.stalled.store(false, Ordering::SeqCst);
            tracing::info!("election loop recovered");
        }
        // After the stall flag is set, so that no answer sees a fresh tick without it.
        health.tick(now);
        next = now + period;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_judged_at_answer_time() {
        let h = LoopHealth::default();
        h.alive.store(true, Ordering::SeqCst);
        let t = h.base + Duration::from_secs(10);
        h.tick(t);
        // Before the watchdog has started, only the flags count.
        assert!(h.healthy_at(t + Duration::from_secs(5)));
        h.stale_after_ms.store(200, Ordering::SeqCst);
        assert!(h.healthy_at(t + Duration::from_millis(200)));
        // The watchdog has not ticked for longer than period + margin: a stall in progress,
        // even though it has not run to set the flag yet.
        assert!(!h.healthy_at(t + Duration::from_millis(201)));
        h.tick(t + Duration::from_millis(300));
        assert!(h.healthy_at(t + Duration::from_millis(301)));
        h.stalled.store(true, Ordering::SeqCst);
        assert!(!h.healthy_at(t + Duration::from_millis(301)));
    }
}

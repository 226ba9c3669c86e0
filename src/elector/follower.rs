//! The follower: wait for the next attempt (a jittered `retryEvery`, the predicted expiry of
//! the holder's keys, the moment a quorum counts this sidecar's votes, or a release notice),
//! attempt, and lead when the attempt wins.
//!
//! While someone else holds the lease, the follower does not attempt: it watches
//! ([`crate::redlock::Redlock::watch`], one script call per node) every watch period and when
//! the holder's keys can have expired (a crash), which re-reads the holder and its keys'
//! lifetimes and refreshes the own candidate record; it attempts when a watch finds the lease
//! no longer held on a quorum, or when a release notice arrives. Without live release notices (subscriptions
//! down on too many nodes) it watches every `retryEvery`, so a missed notice costs no more than
//! an attempt cadence would.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::candidacy::Seat;
use super::{Elector, StepDown, StepDownReason};
use crate::backoff::{jitter, scale};
use crate::redlock::{Acquire, Observed};

/// Each retry period is scaled by a factor from this range, so followers drift apart.
const RETRY_JITTER: std::ops::Range<f64> = 0.75..1.25;
/// After a release notice that names nobody: a little jitter keeps several followers from
/// splitting the vote.
const NOTICE_JITTER: std::ops::Range<Duration> = Duration::ZERO..Duration::from_millis(2);
/// After the holder's keys are predicted to expire (a crashed leader): a small spread beyond.
const EXPIRY_JITTER: std::ops::Range<Duration> = Duration::from_millis(1)..Duration::from_millis(8);
/// After the moment a quorum of nodes counts this sidecar's votes.
const QUORUM_JITTER: std::ops::Range<Duration> = Duration::ZERO..Duration::from_millis(2);
/// After a split vote, whose losers all released at once: try again soon...
const SPLIT_VOTE_RETRY: std::ops::Range<Duration> =
    Duration::from_millis(1)..Duration::from_millis(15);
/// ...this many times in a row, then at the normal period.
const FAST_RETRIES: u32 = 3;
/// A fresh sidecar whose candidate record could not say ready yet (its connections were still
/// being verified) writes it again this soon, so that a rolling restart's new pod can be named
/// at once, not a retry period later.
const READY_RECHECK: Duration = Duration::from_millis(50);
/// While the loop is stalled, no attempt: look again after this.
const STALLED_RECHECK: Duration = Duration::from_millis(100);
/// Each watch period is scaled by a factor from this range: below 1, so that the watch's reply
/// is the clock reading each node needs (the node's own `TIME` read stays idle), and spread so
/// followers drift apart.
const WATCH_JITTER: std::ops::Range<f64> = 0.75..0.95;

/// The follower's timers, kept across attempts.
pub(super) struct Schedule {
    /// When the next attempt goes out.
    next_attempt: Instant,
    /// Split votes in a row; the first [`FAST_RETRIES`] are retried at once.
    fast_streak: u32,
    /// Until when a requested step-down keeps this sidecar from contending.
    cooldown_until: Option<Instant>,
    /// Start of the current failover gap (for `acquire_wait`): when the lease was last known
    /// held by someone else, or the first attempt that found it free.
    free_since: Option<Instant>,
    /// When this sidecar started following (for [`READY_RECHECK`]).
    started: Instant,
    /// Someone else holds the lease: when the timer fires, watch instead of attempting.
    watching: bool,
}

impl Schedule {
    pub(super) fn new() -> Self {
        Schedule {
            next_attempt: Instant::now(),
            fast_streak: 0,
            cooldown_until: None,
            free_since: None,
            started: Instant::now(),
            watching: false,
        }
    }
}

/// Why the follower woke.
enum Wake {
    /// Shut down.
    Stop,
    /// Nothing to attempt yet (answered a step-down request, cooling down, stalled).
    Again,
    /// The retry timer fired: attempt now (or watch, while someone else holds the lease).
    Timer,
    /// The own standing changed (e.g. the pod became Ready): refresh the own record now.
    Standing,
    /// A release notice arrived: attempt once its successor had its chance.
    Notice,
}

impl Elector {
    /// Follow, attempt, lead, and again, until `stop` is cancelled or a term ends in shutdown.
    pub(super) async fn elect(&mut self, stop: &CancellationToken) {
        let mut s = Schedule::new();
        loop {
            let named = match self.wait_for_attempt(&mut s, stop).await {
                Wake::Stop => return,
                Wake::Again => continue,
                Wake::Timer if !s.watching => false,
                Wake::Timer | Wake::Standing => {
                    if self.watch_round(&mut s).await {
                        continue;
                    }
                    false
                }
                Wake::Notice => match self.after_notice(&mut s, stop).await {
                    ControlFlow::Break(()) => return,
                    ControlFlow::Continue(named) => named,
                },
            };
            if self.attempt(&mut s, stop, named).await.is_break() {
                return;
            }
        }
    }

    async fn wait_for_attempt(&mut self, s: &mut Schedule, stop: &CancellationToken) -> Wake {
        let wake = tokio::select! {
            biased;
            _ = stop.cancelled() => return Wake::Stop,
            Some(req) = self.requests.recv() => {
                let _ = req.send(StepDown::NotLeader);
                return Wake::Again;
            }
            _ = self.notices.notified() => Wake::Notice,
            Ok(()) = self.standing.changed() => Wake::Standing,
            _ = sleep_until(s.next_attempt) => Wake::Timer,
        };
        if stop.is_cancelled() {
            return Wake::Stop;
        }
        if let Some(until) = s.cooldown_until.filter(|c| Instant::now() < *c) {
            s.next_attempt = until;
            return Wake::Again;
        }
        if self.health.stalled.load(Ordering::SeqCst) {
            s.next_attempt = Instant::now() + STALLED_RECHECK;
            return Wake::Again;
        }
        wake
    }

    /// The holder released: it is no longer the leader. Wait for the moment to attempt: at
    /// once if named, after the grace if someone else is, after a little jitter otherwise.
    /// Continues with whether this sidecar is the named successor (its attempt may then count
    /// nodes on the release proof, [`crate::redlock::proof`]).
    async fn after_notice(
        &mut self,
        s: &mut Schedule,
        stop: &CancellationToken,
    ) -> ControlFlow<(), bool> {
        let cur = self.tx.borrow().leader.clone();
        if cur.is_some() && cur.as_deref() != Some(&self.identity) {
            self.publish(None, None);
        }
        s.free_since = Some(Instant::now());
        match self.notices.successor() {
            // Named: attempt as soon as the key is gone on a quorum (a quorum of nodes has sent
            // the notice; the first copy may come from a node the release reached first, and an
            // attempt then would find the key still held elsewhere). If copies are missing (a
            // node down), attempt after the grace.
            Some(named) if named == self.identity => {
                let until = Instant::now() + self.preference.grace;
                while self.notices.copies() < self.notices.quorum() {
                    tokio::select! {
                        _ = self.notices.quorum_reached() => {}
                        _ = sleep_until(until) => break,
                        _ = stop.cancelled() => return ControlFlow::Break(()),
                    }
                }
                tracing::info!(
                    copies = self.notices.copies(),
                    "named successor by the release notice; attempting"
                );
                return ControlFlow::Continue(true);
            }
            // Someone else is named: let it win first; if it is gone, this costs the grace at
            // most.
            Some(_) => {
                tokio::select! {
                    _ = tokio::time::sleep(self.preference.grace) => {}
                    _ = stop.cancelled() => return ControlFlow::Break(()),
                }
            }
            None => tokio::time::sleep(jitter(NOTICE_JITTER)).await,
        }
        ControlFlow::Continue(false)
    }

    /// One attempt (with the candidate records read beside it), then the next one scheduled;
    /// breaks when a term ended in shutdown. `named`: right after a notice naming this sidecar.
    async fn attempt(
        &mut self,
        s: &mut Schedule,
        stop: &CancellationToken,
        named: bool,
    ) -> ControlFlow<()> {
        let attempted_at = Instant::now();
        let redlock = self.redlock.clone();
        let (outcome, read) = tokio::join!(
            redlock.acquire(&self.identity, named),
            self.read_candidates(Seat::Following)
        );
        let record_ready = read.ready;
        self.apply_candidates(read, Seat::Following);
        self.say_why();
        let retry = self.jittered_retry();
        s.watching = false;
        match outcome {
            Acquire::Acquired(lease) => {
                s.fast_streak = 0;
                let since = s.free_since.take().unwrap_or(attempted_at);
                self.metrics
                    .became_leader(Instant::now().saturating_duration_since(since));
                let reason = self.lead(lease, stop).await;
                if reason == StepDownReason::Shutdown {
                    return ControlFlow::Break(());
                }
                if reason == StepDownReason::Requested {
                    s.cooldown_until = Some(Instant::now() + self.timing.ttl);
                }
                s.next_attempt = Instant::now() + self.jittered_retry();
            }
            Acquire::Contended(obs) => self.after_contended(s, obs),
            Acquire::NoQuorum(obs) => self.after_no_quorum(s, obs, attempted_at, retry),
            Acquire::Error => {
                s.fast_streak = 0;
                s.free_since.get_or_insert(attempted_at);
                s.next_attempt = Instant::now() + retry;
            }
        }
        self.recheck_ready(s, record_ready);
        ControlFlow::Continue(())
    }

    /// A fresh sidecar whose record could not say ready (its connections were still being
    /// verified) writes it again within [`READY_RECHECK`] (by a watch, when someone holds the
    /// lease), during its first ttl.
    fn recheck_ready(&self, s: &mut Schedule, record_ready: bool) {
        let now = Instant::now();
        let pod_ready = self.standing.borrow().ready && self.rank().is_some();
        if !record_ready && pod_ready && now.saturating_duration_since(s.started) < self.timing.ttl
        {
            s.next_attempt = s.next_attempt.min(now + READY_RECHECK);
        }
    }

    /// One watch round; true while someone else holds the lease (it is shown, and the next
    /// wake planned), false when an attempt may win now.
    async fn watch_round(&mut self, s: &mut Schedule) -> bool {
        let (held, read) = self.watch_lease().await;
        let record_ready = read.ready;
        self.apply_candidates(read, Seat::Following);
        self.say_why();
        match held {
            Some(obs) => {
                self.after_contended(s, obs);
                self.recheck_ready(s, record_ready);
                true
            }
            None => false,
        }
    }

    /// Someone else holds the lease: show it, and watch again when a quorum of its keys can
    /// have expired (a crashed leader) if that comes before the next watch. Only a watch that
    /// finds the lease no longer held on a quorum leads to an attempt: a leader that renewed
    /// meanwhile costs one script call per node, not a denied attempt and its cleanup.
    fn after_contended(&mut self, s: &mut Schedule, obs: Observed) {
        s.fast_streak = 0;
        let now = Instant::now();
        s.free_since = Some(now + obs.free_in.unwrap_or_default());
        self.publish(None, obs.holder);
        let refresh = self.watch_refresh();
        let at_expiry = obs.free_in.map(|d| d + jitter(EXPIRY_JITTER));
        s.next_attempt = now + at_expiry.map_or(refresh, |d| d.min(refresh));
        s.watching = true;
        // A fresh sidecar becomes a ready candidate when a quorum counts its votes: refresh its
        // record then, not a watch period later.
        if let Some(at) = self.quorum_counts_soon(now) {
            s.next_attempt = s.next_attempt.min(at);
        }
    }

    /// Until the next watch: a jittered watch period while release notices arrive, else a
    /// jittered `retryEvery` (a release whose notice is lost is found by the next watch).
    fn watch_refresh(&self) -> Duration {
        match self.redlock.notices_live() {
            true => scale(self.watch_period(), WATCH_JITTER),
            false => self.jittered_retry(),
        }
    }

    /// Nobody reached a quorum: a split vote (every loser already released, so try again soon,
    /// a few times), or too few nodes count yet.
    fn after_no_quorum(&mut self, s: &mut Schedule, obs: Observed, at: Instant, retry: Duration) {
        s.free_since.get_or_insert(at);
        if obs.holder.is_none() {
            let known = self.tx.borrow().leader.is_some();
            if known {
                self.publish(None, None);
            }
        }
        s.fast_streak += 1;
        s.next_attempt = if s.fast_streak <= FAST_RETRIES {
            Instant::now() + jitter(SPLIT_VOTE_RETRY)
        } else {
            Instant::now() + retry
        };
        // Fewer than a quorum count yet (this sidecar still watches the nodes' clocks, or they
        // are quarantined): attempts before then only probe, so the next one that can win goes
        // out the moment a quorum counts.
        let now = Instant::now();
        if let Some(at) = self.quorum_counts_soon(now) {
            s.next_attempt = at.min(now + retry);
        }
    }

    /// Say once, at info, when a quorum of nodes does not count this sidecar's votes (and why,
    /// and when it will), and once when it does again: otherwise a fresh fleet that cannot
    /// elect yet is silent.
    fn say_why(&mut self) {
        let now = Instant::now();
        let wait = self.redlock.quorum_wait(now);
        if self.said_wait == Some(wait.reason)
            || (self.said_wait.is_none() && wait.reason.is_none())
        {
            return;
        }
        self.said_wait = Some(wait.reason);
        match wait.reason {
            None => tracing::info!(
                "a quorum of redis nodes counts this sidecar's votes; it can win the lease"
            ),
            Some(reason) => tracing::info!(
                reason = reason.as_str(),
                counts_in_ms = wait
                    .at
                    .map(|at| at.saturating_duration_since(now).as_millis() as u64),
                successor_ready = self.redlock.eligible_as_successor(now),
                "a quorum of redis nodes does not count this sidecar's votes yet, so it cannot win the lease by itself; a graceful handover that names it does not wait for the clock watch"
            ),
        }
    }

    /// When a quorum of nodes will count this sidecar's votes (jittered), if that is still
    /// ahead of `now`.
    fn quorum_counts_soon(&self, now: Instant) -> Option<Instant> {
        self.redlock
            .quorum_counts_at()
            .filter(|at| *at > now)
            .map(|at| at + jitter(QUORUM_JITTER))
    }

    pub(super) fn jittered_retry(&self) -> Duration {
        scale(self.timing.retry_every, RETRY_JITTER)
    }
}

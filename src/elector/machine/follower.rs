//! The follower: when to attempt or watch, and what a round's result means for the schedule.
//!
//! While someone else holds the lease, the follower does not attempt: its timer sends a watch
//! round ([`crate::redlock::Redlock::watch`]) every watch period and when the holder's keys can
//! have expired (a crash); it attempts when a watch finds the lease no longer held on a quorum,
//! or after a release notice: at once if named (once a quorum of copies arrived, or after the
//! grace), after the grace if someone else is named, after a little jitter otherwise. Without
//! live notices (subscriptions down on too many nodes) it watches every `retryEvery`.

use std::time::Duration;

use super::io::{Command, Count, Cx};
use super::{Machine, Phase};
use crate::backoff::{jitter_with, scale_with};
use crate::redlock::candidates::Candidate;
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
pub(super) const FAST_RETRIES: u32 = 3;
/// An attempt that no node answered (every command failed or timed out: the nodes, the network
/// or this process overloaded) waits a retry period before the next, doubled for each such
/// attempt in a row up to this many times. Every elector of a sidecar with many shards
/// contends every retry period while its shards are free: without the doubling, a machine too
/// loaded to answer within the timeout stays so (seen with 30 sidecars × 256 shards on 2 cores:
/// 7 680 electors, none leading after 5 minutes). Never beyond the ttl.
pub(super) const ERROR_DOUBLINGS: u32 = 2;
/// A fresh sidecar whose candidate record could not say ready yet (its connections were still
/// being verified) writes it again this soon, so that a rolling restart's new pod can be named
/// at once, not a retry period later.
pub(super) const READY_RECHECK: Duration = Duration::from_millis(50);
/// While the loop is stalled, no attempt: look again after this.
pub(super) const STALLED_RECHECK: Duration = Duration::from_millis(100);
/// Each watch period is scaled by a factor from this range: below 1, so that the watch's reply
/// is the clock reading each node needs (the node's own `TIME` read stays idle), and spread so
/// followers drift apart.
const WATCH_JITTER: std::ops::Range<f64> = 0.75..0.95;

impl Machine {
    /// Whether a woken follower may contend now; if not, when to look again (a requested
    /// step-down's cool-down, a stalled loop).
    pub(super) fn gate(&mut self, cx: &mut Cx<'_>) -> bool {
        if let Some(until) = self.schedule.cooldown_until.filter(|c| cx.now < *c) {
            self.schedule.next_attempt = until;
            return false;
        }
        if cx.stalled {
            self.schedule.next_attempt = cx.now + STALLED_RECHECK;
            return false;
        }
        true
    }

    /// The follower's timer fired: attempt, or watch while someone else holds the lease.
    pub(super) fn woken(&mut self, cx: &mut Cx<'_>) {
        if !self.gate(cx) {
            return;
        }
        match self.schedule.watching {
            true => self.watch(cx),
            false => self.attempt(cx, false),
        }
    }

    /// Send an attempt with the own record beside it.
    pub(super) fn attempt(&mut self, cx: &mut Cx<'_>, named: bool) {
        // `lease.followApp`: leave the lease to a candidate whose app is healthy; the next
        // watch round, a watch period on, reads the records (and so this decision) again.
        if !named && self.defers_to_healthy(cx.now) {
            self.phase = Phase::Idle;
            self.schedule.watching = true;
            self.schedule.next_attempt = cx.now + cx.nodes.watch_period;
            return;
        }
        let (record, ready) = self.own_record(cx, None);
        self.phase = Phase::Attempting {
            named,
            at: cx.now,
            ready,
        };
        self.push(Command::Attempt { named, record });
    }

    /// Send a watch round with the own record beside it.
    pub(super) fn watch(&mut self, cx: &mut Cx<'_>) {
        let (record, ready) = self.own_record(cx, None);
        self.phase = Phase::Watching { ready };
        self.push(Command::Watch { record });
    }

    /// A release notice: the holder released. Wait for the moment to attempt: at once if named,
    /// after the grace if someone else is, after a little jitter otherwise.
    pub(super) fn notice(&mut self, cx: &mut Cx<'_>, successor: Option<String>, copies: usize) {
        // Named after `run`'s command exited: the new leader's choice ends the cool-down (else
        // the lease waits out the grace for the others).
        if self.schedule.cooldown_named_ends && successor.as_deref() == Some(&self.identity) {
            self.schedule.cooldown_until = None;
        }
        if !self.waiting() || !self.gate(cx) {
            return;
        }
        if self.leader.as_ref().is_some_and(|l| *l != self.identity) {
            self.publish(None, None);
        }
        self.schedule.free_since = Some(cx.now);
        match successor {
            // Named: attempt as soon as the key is gone on a quorum (a quorum of nodes has sent
            // the notice; the first copy may come from a node the release reached first). If
            // copies are missing (a node down), attempt after the grace.
            Some(named) if named == self.identity => {
                self.phase = Phase::AwaitCopies {
                    until: cx.now + self.preference.grace,
                };
                self.copies(cx, copies);
            }
            // Someone else is named: let it win first; if it is gone, this costs the grace.
            Some(_) => {
                self.phase = Phase::AfterNotice {
                    at: cx.now + self.preference.grace,
                };
            }
            None => {
                self.phase = Phase::AfterNotice {
                    at: cx.now + jitter_with(cx.rng, NOTICE_JITTER),
                };
            }
        }
        self.timer(cx);
    }

    /// More copies of the notice: a named successor attempts once a quorum sent it.
    pub(super) fn copies(&mut self, cx: &mut Cx<'_>, copies: usize) {
        if matches!(self.phase, Phase::AwaitCopies { .. }) && copies >= self.quorum {
            tracing::info!(copies, "named successor by the release notice; attempting");
            self.attempt(cx, true);
        }
    }

    /// An attempt is back: lead, or plan the next wake.
    pub(super) fn attempted(
        &mut self,
        cx: &mut Cx<'_>,
        outcome: Acquire,
        candidates: Option<Vec<Candidate>>,
    ) {
        let Phase::Attempting { at, ready, .. } = self.phase else {
            return;
        };
        let record_ready = ready && candidates.is_some();
        self.apply_candidates(candidates, record_ready, None);
        self.say_why(cx);
        let retry = self.jittered_retry(cx);
        self.schedule.watching = false;
        self.phase = Phase::Idle;
        if !matches!(outcome, Acquire::Error) {
            self.schedule.error_streak = 0;
        }
        match outcome {
            Acquire::Acquired(lease) => {
                self.schedule.fast_streak = 0;
                let since = self.schedule.free_since.take().unwrap_or(at);
                self.push(Command::Count(Count::BecameLeader(
                    cx.now.saturating_duration_since(since),
                )));
                self.lead(cx, lease);
                return;
            }
            Acquire::Contended(obs) => self.contended(cx, obs),
            Acquire::NoQuorum(obs) => self.no_quorum(cx, obs, at, retry),
            Acquire::Error => {
                self.schedule.free_since.get_or_insert(at);
                self.unanswered(cx, retry);
            }
        }
        // No node answered: no record could be written either, so nothing to recheck soon.
        if self.schedule.error_streak == 0 {
            self.recheck_ready(cx, record_ready);
        }
        if std::mem::take(&mut self.stopping) {
            self.finish();
        }
    }

    /// No node answered an attempt, or fewer than a quorum a watch: wait a retry period,
    /// doubled for each such round in a row ([`ERROR_DOUBLINGS`]), never beyond the ttl.
    fn unanswered(&mut self, cx: &mut Cx<'_>, retry: Duration) {
        let s = &mut self.schedule;
        s.fast_streak = 0;
        s.error_streak = (s.error_streak + 1).min(ERROR_DOUBLINGS + 1);
        let backoff = retry * (1 << (s.error_streak - 1));
        s.next_attempt = cx.now + backoff.min(self.timing.ttl.max(retry));
    }

    /// A watch round is back: someone else holds the lease (show it, plan the next wake), an
    /// attempt may win now, or too few nodes answered (watch again later).
    pub(super) fn watched(
        &mut self,
        cx: &mut Cx<'_>,
        held: Option<Observed>,
        candidates: Option<Vec<Candidate>>,
        answered: bool,
    ) {
        let Phase::Watching { ready } = self.phase else {
            return;
        };
        let record_ready = ready && candidates.is_some();
        self.apply_candidates(candidates, record_ready, None);
        self.say_why(cx);
        self.phase = Phase::Idle;
        if std::mem::take(&mut self.stopping) {
            return self.finish();
        }
        if !answered {
            // Nothing says the lease is free: an attempt now would most likely go unanswered
            // too (with many shards, a batch that timed out on two nodes would otherwise send
            // an attempt for each of its shards at once). Watch again after the backoff.
            let retry = self.jittered_retry(cx);
            return self.unanswered(cx, retry);
        }
        self.schedule.error_streak = 0;
        match held {
            Some(obs) => {
                self.contended(cx, obs);
                self.recheck_ready(cx, record_ready);
            }
            None => self.attempt(cx, false),
        }
    }

    /// A fresh sidecar whose record could not say ready (its connections were still being
    /// verified) writes it again within [`READY_RECHECK`], during its first ttl.
    fn recheck_ready(&mut self, cx: &mut Cx<'_>, record_ready: bool) {
        let pod_ready = self.standing_ready() && self.rank().is_some();
        let fresh = cx.now.saturating_duration_since(self.schedule.started) < self.timing.ttl;
        if !record_ready && pod_ready && fresh {
            let s = &mut self.schedule;
            s.next_attempt = s.next_attempt.min(cx.now + READY_RECHECK);
        }
    }

    /// Someone else holds the lease: show it, and watch again when a quorum of its keys can
    /// have expired (a crashed leader) if that comes before the next watch.
    fn contended(&mut self, cx: &mut Cx<'_>, obs: Observed) {
        let now = cx.now;
        self.schedule.fast_streak = 0;
        self.schedule.free_since = Some(now + obs.free_in.unwrap_or_default());
        self.publish(None, obs.holder);
        let refresh = match cx.nodes.notices_live {
            true => {
                let jittered = scale_with(cx.rng, cx.nodes.watch_period, WATCH_JITTER);
                let at = self.timing.watch_at(now, jittered, cx.nodes.watch_period);
                at.saturating_duration_since(now)
            }
            false => self.jittered_retry(cx),
        };
        let at_expiry = obs.free_in.map(|d| d + jitter_with(cx.rng, EXPIRY_JITTER));
        let mut next = now + at_expiry.map_or(refresh, |d| d.min(refresh));
        // A fresh sidecar becomes a ready candidate when a quorum counts its votes: refresh its
        // record then, not a watch period later.
        if let Some(at) = self.quorum_counts_soon(cx) {
            next = next.min(at);
        }
        self.schedule.next_attempt = next;
        self.schedule.watching = true;
    }

    /// Nobody reached a quorum: a split vote (every loser already released, so try again soon,
    /// a few times), or too few nodes count yet.
    fn no_quorum(
        &mut self,
        cx: &mut Cx<'_>,
        obs: Observed,
        at: tokio::time::Instant,
        retry: Duration,
    ) {
        self.schedule.free_since.get_or_insert(at);
        if obs.holder.is_none() && self.leader.is_some() {
            self.publish(None, None);
        }
        self.schedule.fast_streak += 1;
        let now = cx.now;
        self.schedule.next_attempt = match self.schedule.fast_streak <= FAST_RETRIES {
            true => now + jitter_with(cx.rng, SPLIT_VOTE_RETRY),
            false => now + retry,
        };
        // Fewer than a quorum count yet: attempts before then only probe, so the next one that
        // can win goes out the moment a quorum counts.
        if let Some(at) = self.quorum_counts_soon(cx) {
            self.schedule.next_attempt = at.min(now + retry);
        }
        // What denied this attempt (reservations for a named successor, keys about to expire)
        // ends at a known moment, the scripts' PTTL: try again then, not a retry period later.
        // (A releaser descheduled between its nodes writes the reservations up to a scheduling
        // delay apart; an attempt one grace after the first copy can meet the later ones.)
        if let Some(free_in) = obs.free_in {
            let at = now + free_in + jitter_with(cx.rng, EXPIRY_JITTER);
            self.schedule.next_attempt = self.schedule.next_attempt.min(at);
        }
    }

    /// Say once, at info, when a quorum of nodes does not count this sidecar's votes (and why,
    /// and when it will), and once when it does again.
    fn say_why(&mut self, cx: &mut Cx<'_>) {
        let wait = cx.nodes.wait;
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
                    .map(|at| at.saturating_duration_since(cx.now).as_millis() as u64),
                successor_ready = cx.nodes.successor_ready,
                "a quorum of redis nodes does not count this sidecar's votes yet, so it cannot win the lease by itself; a graceful handover that names it does not wait for the clock watch"
            ),
        }
    }

    /// When a quorum of nodes will count this sidecar's votes (jittered), if still ahead.
    fn quorum_counts_soon(&self, cx: &mut Cx<'_>) -> Option<tokio::time::Instant> {
        let at = cx.nodes.counts_at.filter(|at| *at > cx.now)?;
        Some(at + jitter_with(cx.rng, QUORUM_JITTER))
    }

    /// `retryEvery`, jittered.
    pub(super) fn jittered_retry(&self, cx: &mut Cx<'_>) -> Duration {
        scale_with(cx.rng, self.timing.retry_every, RETRY_JITTER)
    }
}

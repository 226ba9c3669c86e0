//! The Redlock protocol over N independent Redis masters: acquire, renew, release.
//!
//! Knows nothing of HTTP or Kubernetes. Every round sends to all nodes in parallel, each with
//! the per-node timeout, and decides at the quorum-th counting yes or as soon as a quorum has
//! become impossible. Timings follow the algorithm in the README ("How it works"): T1 is taken
//! before sending; validity is `ttl − elapsed − drift`; the deadline is `T1 + ttl − drift`.

pub mod candidates;
pub mod clock;
pub mod connect;
pub mod math;
pub mod node;
pub mod scripts;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rand::RngCore;
use redis::Value;
use tokio::time::Instant;

use crate::config::Config;
use crate::metrics::Metrics;
use math::Tally;
use node::{CommandError, Node};
use scripts::scripts;

/// A held lease: what renew and release need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// `<identity>#<nonce>`, unique to this acquisition.
    pub value: String,
    /// Fencing token of this term.
    pub token: u64,
    /// Monotonic instant until which the lease is provably held.
    pub deadline: Instant,
}

/// Result of one acquire attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Acquire {
    /// Held, with a fencing token written to a quorum.
    Acquired(Lease),
    /// Someone else owns a quorum of nodes.
    Contended(Observed),
    /// Neither we nor anyone else reached a quorum (split vote, quarantine, nodes down).
    NoQuorum(Observed),
    /// No node answered at all.
    Error,
}

impl Acquire {
    /// The metric label of the result.
    pub fn label(&self) -> &'static str {
        self.result().label()
    }

    /// The result as the metrics count it.
    pub fn result(&self) -> crate::metrics::AcquireResult {
        use crate::metrics::AcquireResult;
        match self {
            Acquire::Acquired(_) => AcquireResult::Acquired,
            Acquire::Contended(_) => AcquireResult::Contended,
            Acquire::NoQuorum(_) => AcquireResult::NoQuorum,
            Acquire::Error => AcquireResult::Error,
        }
    }
}

/// What a failed attempt learned about the current holder.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The holder's identity as most nodes report it.
    pub holder: Option<String>,
    /// When enough keys will have expired for a quorum to be free.
    pub free_in: Option<Duration>,
}

/// The lock protocol over all nodes.
pub struct Redlock {
    /// The N masters.
    nodes: Vec<Arc<Node>>,
    /// `<keyPrefix><lease>`.
    key: String,
    /// `<keyPrefix><lease>:epoch`: the fencing epoch counter.
    epoch_key: String,
    /// `<keyPrefix><lease>:released`: the release-notice channel.
    channel: String,
    /// `<keyPrefix><lease>:candidates`: the contenders' records ([`candidates`]).
    candidates_key: String,
    /// `<keyPrefix><lease>:next`: the key's reservation for a named successor, for a grace
    /// after a graceful release ([`scripts::RELEASE`]).
    reservation_key: String,
    /// Lease ttl.
    ttl: Duration,
    /// `ttl·driftFactor + 2ms`.
    drift: Duration,
    /// Shared metrics.
    metrics: Metrics,
    /// The highest fencing epoch this process has seen in any node's reply or used itself. A
    /// lower bound for the next token besides the granting quorum's epochs: a follower that
    /// contended during a term learned that term's token, even if every node of its own granting
    /// quorum has since lost it (an empty restart of the only node the two quorums shared).
    epoch_seen: AtomicU64,
    /// Releases whose last commands still run in the background (see [`Redlock::release`]).
    releasing: tokio_util::task::TaskTracker,
}

/// Release notices as the subscriptions deliver them: a wake-up at the first copy of each
/// notice, the successor it names, and how many nodes have sent it. Every node publishes the
/// notice as it deletes the key there, so a quorum of copies means the key is gone on a quorum.
pub struct Notices {
    /// Wakes the elector at the first copy of a notice.
    notify: tokio::sync::Notify,
    /// Wakes a waiting named successor when a quorum of copies has arrived.
    quorum_reached: tokio::sync::Notify,
    /// Copies that mean "gone on a quorum".
    quorum: usize,
    /// (last payload, the successor it names, copies received).
    last: std::sync::Mutex<(String, Option<String>, usize)>,
}

impl Notices {
    /// Notices for a lease over nodes with this quorum.
    pub fn new(quorum: usize) -> Self {
        Notices {
            notify: tokio::sync::Notify::new(),
            quorum_reached: tokio::sync::Notify::new(),
            quorum,
            last: std::sync::Mutex::new((String::new(), None, 0)),
        }
    }

    /// Record one node's copy of a notice; wake the elector at the first copy, a waiting named
    /// successor at the quorum-th.
    pub fn post(&self, payload: &str) {
        let copies = {
            // A poisoned lock only means a panic elsewhere mid-update; the data is plain.
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            if last.0 == payload {
                last.2 += 1;
            } else {
                *last = (
                    payload.to_string(),
                    candidates::notice_successor(payload).map(String::from),
                    1,
                );
            }
            last.2
        };
        if copies == 1 {
            self.notify.notify_one();
        }
        if copies == self.quorum {
            self.quorum_reached.notify_one();
        }
    }

    /// Resolves at the first copy of the next notice.
    pub async fn notified(&self) {
        self.notify.notified().await
    }

    /// Resolves when a quorum of copies has arrived (possibly of an earlier notice: check
    /// [`Notices::copies`]).
    pub async fn quorum_reached(&self) {
        self.quorum_reached.notified().await
    }

    /// The successor the latest notice named, if any.
    pub fn successor(&self) -> Option<String> {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// How many nodes have sent the latest notice.
    pub fn copies(&self) -> usize {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).2
    }

    /// Copies that mean the key is gone on a quorum.
    pub fn quorum(&self) -> usize {
        self.quorum
    }
}

/// The follower a graceful release names, and how long the key stays reserved for it.
#[derive(Clone, Copy, Debug)]
pub struct Successor<'a> {
    /// Its identity.
    pub identity: &'a str,
    /// The reservation's lifetime on each node: the grace the other followers wait.
    pub grace: Duration,
}

/// The value stored in the key: `<identity>#<nonce>` with 192 random bits.
pub fn new_value(identity: &str) -> String {
    let mut nonce = [0u8; 24];
    rand::rng().fill_bytes(&mut nonce);
    format!("{identity}#{}", hex::encode(nonce))
}

/// The identity part of a lock value.
pub fn identity_of(value: &str) -> &str {
    value.rsplit_once('#').map_or(value, |(id, _)| id)
}

enum Vote {
    Yes {
        epoch: u64,
    },
    No {
        holder: String,
        pttl: Option<Duration>,
        epoch: u64,
    },
    Unknown,
}

/// What the replies of one acquire round say, beyond the tally: how many nodes answered, the
/// highest epoch they reported, and who holds the key where we were denied.
#[derive(Default)]
struct Replies {
    /// Nodes that answered (granted or denied).
    answered: usize,
    /// Highest epoch reported by any answer (0 if none).
    max_epoch: u64,
    /// (holder value, remaining lifetime) of every denial.
    denials: Vec<(String, Option<Duration>)>,
}

impl Replies {
    /// Record a reply; true iff the node granted.
    fn record(&mut self, vote: Vote) -> bool {
        match vote {
            Vote::Yes { epoch } => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(epoch);
                true
            }
            Vote::No {
                holder,
                pttl,
                epoch,
            } => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(epoch);
                self.denials.push((holder, pttl));
                false
            }
            Vote::Unknown => false,
        }
    }
}

impl Redlock {
    /// Build the node set from config (no I/O).
    pub fn new(config: &Config, metrics: Metrics) -> Result<Self, redis::RedisError> {
        let mut nodes = Vec::new();
        for ep in &config.redis.endpoints {
            nodes.push(Node::new(
                ep.clone(),
                &config.redis,
                config.lease.ttl,
                config.unsafe_switches.quarantine_off,
                clock::Policy::new(
                    config.lease.ttl,
                    config.lease.drift_factor,
                    !config.unsafe_switches.clock_check_off,
                ),
                metrics.clone(),
            )?);
        }
        let key = format!("{}{}", config.lease.key_prefix, config.lease.name);
        Ok(Redlock {
            epoch_key: format!("{key}:epoch"),
            channel: format!("{key}:released"),
            candidates_key: format!("{key}:candidates"),
            reservation_key: format!("{key}:next"),
            key,
            nodes,
            ttl: config.lease.ttl,
            drift: math::drift(config.lease.ttl, config.lease.drift_factor),
            metrics,
            epoch_seen: AtomicU64::new(0),
            releasing: tokio_util::task::TaskTracker::new(),
        })
    }

    /// The nodes, for the maintenance and subscription tasks.
    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// The release-notice channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Try to acquire the lease once.
    pub async fn acquire(&self, identity: &str) -> Acquire {
        let started = Instant::now();
        let outcome = self.acquire_inner(identity).await;
        self.metrics
            .acquire_duration
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .acquire_attempts
            .with_label_values(&[outcome.label()])
            .inc();
        outcome
    }

    async fn acquire_inner(&self, identity: &str) -> Acquire {
        let value = new_value(identity);
        let ttl_ms = self.ttl.as_millis().to_string();
        // Optimistic fencing token: one above every epoch this process has seen. Each granting
        // node stores it (set-if-greater) together with the key.
        let proposed = self.epoch_seen.load(Ordering::SeqCst) + 1;
        let proposed_arg = proposed.to_string();
        let acquire = &scripts().acquire;
        let t1 = Instant::now();
        // A node that cannot count (quarantined) gets no proposal to store: its vote is not
        // needed for the token, and failed attempts during a quarantine would otherwise raise
        // the epoch once per retry. Its yes is then never counted, even if the quarantine ends
        // before it answers. When fewer than a quorum can count, the attempt cannot win, so no
        // node gets a proposal: nodes leaving quarantine one by one must not inflate the epoch.
        // Nor does it take any key (a probe): it would only split the vote of contenders that
        // can win.
        let eligible: Vec<bool> = self.nodes.iter().map(|n| n.counts(t1)).collect();
        let can_win = eligible.iter().filter(|&&e| e).count() >= self.quorum();
        let mode = if can_win { "take" } else { "probe" };
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .zip(eligible)
            .map(|(n, eligible)| {
                let proposed = if eligible && can_win {
                    proposed_arg.as_str()
                } else {
                    "0"
                };
                let (value, ttl_ms) = (&value, &ttl_ms);
                async move {
                    let r = n
                        .eval(
                            acquire,
                            &[&self.key, &self.epoch_key, &self.reservation_key],
                            &[value, ttl_ms, proposed, mode, identity],
                        )
                        .await;
                    (n, eligible, parse_acquire(r))
                }
            })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        let mut replies = Replies::default();
        while let Some((node, eligible, vote)) = pending.next().await {
            if replies.record(vote) && eligible && node.counts(Instant::now()) {
                tally.yes += 1;
            } else {
                tally.not_yes += 1;
            }
            if tally.decided().is_some() {
                break;
            }
        }
        let decided_at = Instant::now();
        let valid = math::validity(self.ttl, decided_at - t1, self.drift);
        if tally.decided() == Some(true) && valid.is_some() {
            // Stragglers' commands were sent; their replies no longer matter.
            drop(pending);
            let token = math::next_token(replies.max_epoch, self.epoch_seen.load(Ordering::SeqCst));
            self.epoch_seen.fetch_max(token, Ordering::SeqCst);
            let mut lease = Lease {
                value,
                token,
                deadline: t1 + self.ttl - self.drift,
            };
            // The token must be on a quorum before this term may act. When every epoch seen in
            // this round was below the proposal, the token *is* the proposal, which each
            // granting node stored atomically with its key: it is on a quorum already.
            if token == proposed {
                return Acquire::Acquired(lease);
            }
            // Otherwise (this process was behind), the first renewal writes the token.
            match self.renew(&lease).await {
                Some(deadline) => {
                    lease.deadline = lease.deadline.max(deadline);
                    return Acquire::Acquired(lease);
                }
                None => {
                    self.release(&lease.value, false).await;
                    return Acquire::NoQuorum(Observed::default());
                }
            }
        }
        // Failed. Collect the stragglers' replies first (each bounded by the timeout): the
        // decision was made early, but telling "someone else holds a quorum" from "no quorum
        // anywhere" needs them. Only then clean up everywhere: a straggler's command may not
        // even have been sent yet (a future is sent when first polled, and the decision can
        // come before every future was), and a release that overtook its acquire on the
        // connection would leave this attempt's key on that node for a whole ttl.
        let mut stragglers = Vec::new();
        while let Some((_, _, vote)) = pending.next().await {
            stragglers.push(vote);
        }
        self.release(&value, false).await;
        for vote in stragglers {
            replies.record(vote);
        }
        self.epoch_seen
            .fetch_max(replies.max_epoch, Ordering::SeqCst);
        if replies.answered == 0 {
            return Acquire::Error;
        }
        let (observed, most) = observe(self.nodes.len(), &replies.denials);
        if most >= tally.quorum {
            Acquire::Contended(observed)
        } else {
            Acquire::NoQuorum(observed)
        }
    }

    /// Renew (and assert the epoch) on all nodes. Returns the new deadline if a quorum of
    /// counting nodes confirmed before the validity ran out.
    pub async fn renew(&self, lease: &Lease) -> Option<Instant> {
        let ttl_ms = self.ttl.as_millis().to_string();
        let token = lease.token.to_string();
        let renew = &scripts().renew;
        let t1 = Instant::now();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|n| {
                let (ttl_ms, token) = (&ttl_ms, &token);
                async move {
                    let r = n
                        .eval(
                            renew,
                            &[&self.key, &self.epoch_key],
                            &[&lease.value, ttl_ms, token],
                        )
                        .await;
                    (n, r)
                }
            })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        while let Some((node, r)) = pending.next().await {
            match r.as_deref() {
                Ok([Value::Int(1 | 2)]) if node.counts(Instant::now()) => tally.yes += 1,
                Ok([Value::Int(0)]) => {
                    tracing::warn!(endpoint = %node.name(), "renewal denied: the key belongs to someone else on this node");
                    tally.not_yes += 1;
                }
                _ => tally.not_yes += 1,
            }
            if tally.decided().is_some() {
                break;
            }
        }
        let ok = tally.decided() == Some(true)
            && math::validity(self.ttl, t1.elapsed(), self.drift).is_some();
        self.metrics
            .renewals
            .with_label_values(&[if ok { "ok" } else { "failed" }])
            .inc();
        ok.then(|| t1 + self.ttl - self.drift)
    }

    /// Write this sidecar's candidate record (when `mine` is given) and read everyone's, on every
    /// node in parallel. Returns the candidates a quorum of nodes holds, or `None` when fewer
    /// than a quorum answered. Each record lives for `life`.
    pub async fn candidates(
        &self,
        mine: Option<(&str, &[String; 5])>,
        life: Duration,
    ) -> Option<Vec<candidates::Candidate>> {
        let script = &scripts().candidates;
        let life_ms = life.as_millis().max(1).to_string();
        let mut args: Vec<&str> = vec![mine.map_or("", |(id, _)| id), &life_ms];
        match mine {
            Some((_, f)) => args.extend(f.iter().map(String::as_str)),
            None => args.extend(["0", "0", "0", "0", ""]),
        }
        let keys = [self.candidates_key.as_str()];
        let answers: Vec<candidates::NodeRecords> = self
            .nodes
            .iter()
            .map(|n| n.eval(script, &keys, &args))
            .collect::<FuturesUnordered<_>>()
            .filter_map(|r| async move { r.ok().map(parse_candidates) })
            .collect()
            .await;
        (answers.len() >= self.quorum()).then(|| candidates::merge(&answers, self.quorum()))
    }

    /// Remove this sidecar's candidate record on every node in parallel (graceful shutdown).
    pub async fn withdraw(&self, identity: &str) {
        let script = &scripts().candidates;
        let keys = [self.candidates_key.as_str()];
        let args = [identity, "1", "withdraw", "0", "0", "0", ""];
        self.nodes
            .iter()
            .map(|n| n.eval(script, &keys, &args))
            .collect::<FuturesUnordered<_>>()
            .for_each(|_| async {})
            .await;
    }

    /// Token-checked delete on every node in parallel; with `notify`, publish the release notice.
    ///
    /// Returns once a quorum of nodes confirmed (the key is ours no more there: deleted, or held
    /// by nobody or someone else), the moment no lease can need more of them; or once every node
    /// answered or timed out. The commands still out keep running in a background task, each
    /// bounded by the per-node timeout, so every node still gets its release: a slow or
    /// unreachable node delays neither a step-down nor the next attempt. [`Redlock::settled`]
    /// waits for them (shutdown does, before the process exits).
    pub async fn release(&self, value: &str, notify: bool) {
        self.release_naming(value, notify, None).await
    }

    /// [`Redlock::release`] whose notice names a successor: that follower attempts at once,
    /// the others after the grace, and each node keeps the key reserved for the successor for
    /// the grace.
    pub async fn release_naming(
        &self,
        value: &str,
        notify: bool,
        successor: Option<Successor<'_>>,
    ) {
        let release = &scripts().release;
        let channel = if notify { self.channel.as_str() } else { "" };
        let (named, grace_ms) = successor.map_or((None, 0), |s| {
            (Some(s.identity), s.grace.as_millis().max(1) as u64)
        });
        // Owned once for all nodes: the futures may outlive this call (see below).
        let args = Arc::new([
            self.key.clone(),
            self.reservation_key.clone(),
            value.to_string(),
            channel.to_string(),
            candidates::notice_payload(value, named),
            named.unwrap_or("").to_string(),
            grace_ms.to_string(),
        ]);
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|n| {
                let (node, args) = (n.clone(), args.clone());
                async move {
                    let [key, reservation, value, channel, payload, named, grace] = &*args;
                    node.eval(
                        release,
                        &[key, reservation],
                        &[value, channel, payload, named, grace],
                    )
                    .await
                    .is_ok()
                }
            })
            .collect();
        let quorum = self.quorum();
        let mut confirmed = 0;
        while let Some(ok) = pending.next().await {
            confirmed += usize::from(ok);
            if confirmed >= quorum {
                break;
            }
        }
        if pending.is_empty() {
            return;
        }
        self.releasing
            .spawn(async move { while pending.next().await.is_some() {} });
    }

    /// Resolves once no release is still running on any node (see [`Redlock::release`]).
    pub async fn settled(&self) {
        // Closing only lets `wait` resolve once empty; releases after this are still tracked.
        self.releasing.close();
        self.releasing.wait().await;
    }

    /// Votes needed for a quorum: ⌊N/2⌋ + 1 of all configured nodes.
    pub fn quorum(&self) -> usize {
        math::quorum(self.nodes.len())
    }

    /// Whether each node's yes would count now (endpoint name, counts), for `/leader`.
    pub fn eligibility(&self, now: Instant) -> Vec<(String, bool)> {
        self.nodes
            .iter()
            .map(|n| (n.name().to_string(), n.counts(now)))
            .collect()
    }

    /// Whether a quorum of nodes counts this sidecar's votes at `now`.
    pub fn eligible(&self, now: Instant) -> bool {
        self.nodes.iter().filter(|n| n.counts(now)).count() >= self.quorum()
    }

    /// When a quorum of nodes will count, if nothing changes meanwhile (a fresh sidecar's watch
    /// of the nodes' clocks, quarantines ending); `None` if that is not known yet.
    pub fn quorum_counts_at(&self) -> Option<Instant> {
        math::quorum_at(self.nodes.iter().map(|n| n.counts_from()), self.quorum())
    }
}

fn parse_candidates(items: Vec<Value>) -> candidates::NodeRecords {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    // `eval` has taken the leading TIME off; the script repeats it, so the entries are judged
    // by the time the node itself used.
    let mut it = items.into_iter();
    let now = match it.next() {
        Some(Value::Int(n)) => n,
        _ => 0,
    };
    let rest: Vec<Value> = it.collect();
    let entries = rest
        .chunks(2)
        .filter_map(|p| match p {
            [k, v] => Some((text(k)?, text(v)?)),
            _ => None,
        })
        .collect();
    (now, entries)
}

fn parse_acquire(r: Result<Vec<Value>, CommandError>) -> Vote {
    let Ok(items) = r else {
        return Vote::Unknown;
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(epoch)] => Vote::Yes {
            epoch: (*epoch).max(0) as u64,
        },
        [Value::Int(0), holder, Value::Int(pttl), rest @ ..] => {
            let holder = match holder {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => String::new(),
            };
            let pttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
            let epoch = match rest {
                [Value::Int(e), ..] => (*e).max(0) as u64,
                _ => 0,
            };
            Vote::No {
                holder,
                pttl,
                epoch,
            }
        }
        _ => Vote::Unknown,
    }
}

/// What the denials show, and how many of them name the most common holder (a quorum of those
/// means someone else holds the lease). The acquire script reads the holder in the same atomic
/// step as its failed `SET NX`, so a denial always names one.
fn observe(n: usize, denials: &[(String, Option<Duration>)]) -> (Observed, usize) {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for (h, _) in denials.iter().filter(|(h, _)| !h.is_empty()) {
        *counts.entry(h.as_str()).or_default() += 1;
    }
    let (holder, most) = counts
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map_or((None, 0), |(h, c)| (Some(identity_of(h).to_string()), c));
    let pttls: Vec<Duration> = denials.iter().filter_map(|(_, p)| *p).collect();
    let observed = Observed {
        holder,
        free_in: math::free_quorum_in(n, pttls),
    };
    (observed, most)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unique_and_carry_identity() {
        let a = new_value("pod-a");
        let b = new_value("pod-a");
        assert_ne!(a, b);
        assert!(a.starts_with("pod-a#"));
        assert_eq!(a.len(), "pod-a#".len() + 48);
        assert_eq!(identity_of(&a), "pod-a");
        assert_eq!(identity_of("we#ird#n0nce"), "we#ird");
    }

    #[test]
    fn denials_carry_the_node_epoch() {
        let deny = |rest: Vec<Value>| {
            let mut v = vec![
                Value::Int(0),
                Value::BulkString(b"b#1".to_vec()),
                Value::Int(40),
            ];
            v.extend(rest);
            parse_acquire(Ok(v))
        };
        assert!(
            matches!(deny(vec![Value::Int(7)]), Vote::No { epoch: 7, ref holder, .. } if holder == "b#1")
        );
        assert!(matches!(deny(vec![]), Vote::No { epoch: 0, .. }));
        let yes = parse_acquire(Ok(vec![Value::Int(1), Value::Int(3)]));
        assert!(matches!(yes, Vote::Yes { epoch: 3 }));
    }

    #[test]
    fn observe_picks_the_majority_holder() {
        let ms = Duration::from_millis;
        let (o, most) = observe(
            3,
            &[
                ("b#1".into(), Some(ms(50))),
                ("b#1".into(), Some(ms(40))),
                ("c#2".into(), Some(ms(10))),
            ],
        );
        assert_eq!(o.holder.as_deref(), Some("b"));
        assert_eq!(most, 2);
        assert_eq!(o.free_in, Some(ms(40)));
    }
}

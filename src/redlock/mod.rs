//! The Redlock protocol over N independent Redis masters: acquire, renew, release.
//!
//! Knows nothing of HTTP or Kubernetes. Every round sends to all nodes in parallel, each with
//! the per-node timeout, and decides at the quorum-th counting yes or as soon as a quorum has
//! become impossible. Timings follow the algorithm in the README ("How it works"): T1 is taken
//! before sending; validity is `ttl − elapsed − drift`; the deadline is `T1 + ttl − drift`.
//!
//! Rooms: the lease values and round results ([`lease`]), one file per round (`acquire`,
//! `renew`, `release`, `records` for the candidate records, `watch` for an idle follower's
//! refresh), the release notices as the
//! subscriptions deliver them ([`notices`]), and below them the nodes ([`node`]), their
//! connections ([`connect`]), scripts ([`scripts`]) and the pure parts ([`math`], [`clock`],
//! [`candidates`]).

mod acquire;
pub mod candidates;
pub mod clock;
pub mod connect;
pub mod lease;
pub mod math;
pub mod node;
pub mod notices;
pub mod proof;
mod records;
mod release;
mod renew;
pub mod scripts;
pub mod watch;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::metrics::Metrics;
use node::Node;

pub use lease::{Acquire, Lease, Observed, identity_of, new_value};
pub use notices::Notices;
pub use records::{OwnRecord, SharedRecords};
pub use release::{GRACE_MARGIN, Notice, Successor, grace};
pub use watch::Watched;

/// Whether a quorum counts this sidecar's votes; if not, why and from when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct QuorumWait {
    /// Why not (the reason of the node that decides); `None` when a quorum counts.
    pub reason: Option<node::Wait>,
    /// When a quorum will count if nothing changes meanwhile; `None` if not by waiting.
    pub at: Option<Instant>,
}

/// What every lease of the process shares: the N masters' connections, each node's clock watch,
/// quarantines and attestations, and the process's tasks. A process with several leases
/// (`lease.names`) builds one, and one [`Redlock`] per lease on it.
pub struct NodeSet {
    /// The N masters.
    nodes: Vec<Arc<Node>>,
    /// Every task of the process (the connections' drivers first; `run` adds its own).
    tasks: tokio_util::task::TaskTracker,
    /// Every lease's "a node counts sooner" signal.
    counting: Arc<node::Counting>,
    /// The candidates hash the shards of `lease.shards` share.
    shard_records: Arc<records::SharedRecords>,
}

/// The clock watch's policy for every node of `config`, the test-only switches applied.
fn clock_policy(config: &Config) -> clock::Policy {
    let u = &config.unsafe_switches;
    clock::Policy {
        proof_check: !u.release_proof_check_off,
        attestation_check: !u.attestation_check_off,
        blind_check: !u.blind_band_off,
        span_check: !u.span_band_off,
        proof_continuity_check: !u.proof_continuity_off,
        ..clock::Policy::new(
            config.lease.ttl,
            config.lease.drift_factor,
            !u.clock_check_off,
        )
        .with_base_rtt(config.redis.timeout)
    }
}

impl NodeSet {
    /// Build the node set from config (no I/O); `metrics`' per-endpoint series are the
    /// process's.
    pub fn new(config: &Config, metrics: Metrics) -> Result<Arc<Self>, redis::RedisError> {
        let tasks = tokio_util::task::TaskTracker::new();
        let counting = Arc::new(node::Counting::default());
        let mut nodes = Vec::new();
        for ep in &config.redis.endpoints {
            nodes.push(Node::new(
                ep.clone(),
                &config.redis,
                config.lease.ttl,
                match config.unsafe_switches.quarantine_off {
                    true => node::Quarantine::Ignored,
                    false => node::Quarantine::Enforced,
                },
                clock_policy(config),
                node::Shared {
                    metrics: metrics.clone(),
                    tasks: tasks.clone(),
                    counting: counting.clone(),
                    batch: config.lease.names.len() > 1,
                },
            )?);
        }
        Ok(Arc::new(NodeSet {
            nodes,
            tasks,
            counting,
            shard_records: Arc::default(),
        }))
    }

    /// The nodes, for the maintenance and subscription tasks.
    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// The tracker every task of the process is spawned on.
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        &self.tasks
    }

    /// Drop every node's connection (shutdown, once every lease is settled): their driver
    /// tasks end.
    pub fn disconnect(&self) {
        for node in &self.nodes {
            node.disconnect();
        }
    }
}

/// The next lease's tag ([`Redlock`]'s `tag`), unique in the process.
static NEXT_TAG: AtomicU64 = AtomicU64::new(0);

/// A process with more leases than this watches the others' candidate records of each lease
/// only on every [`BRIEF_EVERY`]-th watch.
pub const BRIEF_ABOVE: usize = 8;
/// How often a follower of many leases reads the other candidates' records of a lease: every
/// this many watches (its own record is written on every one). Between, the lease's view keeps
/// the records last read, judged by each new reply's `TIME`, so an expired record still drops
/// out on time; a candidate that appeared since shows in the lease's view up to this many
/// watch periods late (in the process's union of its leases' views, within one: a process's
/// leases read in turn).
pub const BRIEF_EVERY: u64 = 8;

/// The lock protocol of one lease over all nodes.
pub struct Redlock {
    /// The process's nodes, shared by every lease.
    set: Arc<NodeSet>,
    /// The N masters (the set's).
    nodes: Vec<Arc<Node>>,
    /// `<keyPrefix><lease>`.
    key: String,
    /// `<keyPrefix><lease>:epoch`: the fencing epoch counter.
    epoch_key: String,
    /// `<keyPrefix><lease>:released`: the release-notice channel.
    channel: String,
    /// `<keyPrefix><lease>:attest`: the attestation hash and channel ([`node::AttestKeys`]).
    attest_key: String,
    /// `<keyPrefix><lease>:candidates`: the contenders' records ([`candidates`]); for a shard
    /// of `lease.shards`, the sharded lease's `<keyPrefix><lease.name>:candidates`.
    candidates_key: String,
    /// A shard's records, shared with the process's other shards ([`records::SharedRecords`]).
    shared: Option<Arc<records::SharedRecords>>,
    /// `<keyPrefix><lease>:next`: the key's reservation for a named successor, for a grace
    /// after a graceful release ([`scripts::RELEASE`]).
    reservation_key: String,
    /// Lease ttl.
    ttl: Duration,
    /// What every term takes off its end besides its blind band: `ttl·driftFactor + 2ms`, and
    /// `ttl·driftFactor` more for the taker's watch ([`clock::Policy::term_margin`]).
    drift: Duration,
    /// How long a release's named successor has the key reserved ([`grace`]).
    grace: Duration,
    /// Shared metrics.
    metrics: Metrics,
    /// The highest fencing epoch this process has seen in any node's reply or used itself. A
    /// lower bound for the next token besides the granting quorum's epochs: a follower that
    /// contended during a term learned that term's token, even if every node of its own granting
    /// quorum has since lost it (an empty restart of the only node the two quorums shared).
    epoch_seen: AtomicU64,
    /// Releases whose last commands still run in the background (see [`Redlock::release`]).
    releasing: tokio_util::task::TaskTracker,
    /// The lock commands of the current term (or attempt) per node, for the release proof
    /// ([`proof`]).
    term_log: Arc<std::sync::Mutex<proof::TermLog>>,
    /// This lease among the process's: its release proofs count for it alone
    /// ([`node::Node::counts_for`]).
    tag: u64,
    /// The holder value the last watch saw on a quorum ([`Redlock::watch`]): the watch reads
    /// the epoch only when the holder changed.
    watched_holder: std::sync::Mutex<String>,
    /// Notified when a node begins to count sooner than its clock watch said (an attestation):
    /// this lease's own signal of the set's.
    counting: Arc<tokio::sync::Notify>,
    /// A process of more than [`BRIEF_ABOVE`] leases: [`BRIEF_EVERY`]; otherwise 1 (every
    /// watch reads every record).
    brief_every: u64,
    /// Watches so far, from this lease's tag (so the leases of one process read the records in
    /// turn, not all in one period).
    watches: AtomicU64,
    /// Per node, the records the last full watch read ([`Redlock::watch`]).
    records_seen: std::sync::Mutex<Vec<Option<candidates::NodeRecords>>>,
    /// Test-only `--unsafe-disable-reconnect-taint`: lock commands are not bound to a
    /// connection, a reconnect does not taint a node with a command out, and a renewal heals
    /// a missing key over a reservation for someone else (5375106).
    reconnect_taint_off: bool,
    /// Test-only `--unsafe-allow-renewal-to-shorten`: [`scripts::RENEW`] sets the expiry to
    /// now + ttl even where that shortens the key (finding 9).
    renewal_may_shorten: bool,
}

impl Redlock {
    /// Build the node set and the lease `lease.name` on it from config (no I/O): a process
    /// with one lease.
    pub fn new(config: &Config, metrics: Metrics) -> Result<Self, redis::RedisError> {
        let set = NodeSet::new(config, metrics.clone())?;
        Ok(Redlock::on(&set, config, &config.lease.name, metrics))
    }

    /// The lease `lease` over the process's nodes `set`; `metrics` carry its `lease` label.
    pub fn on(set: &Arc<NodeSet>, config: &Config, lease: &str, metrics: Metrics) -> Self {
        let key = format!("{}{}", config.lease.key_prefix, lease);
        let tag = NEXT_TAG.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let sharded = config.lease.sharded_name();
        Redlock {
            epoch_key: format!("{key}:epoch"),
            channel: format!("{key}:released"),
            candidates_key: match sharded {
                Some(name) => format!("{}{name}:candidates", config.lease.key_prefix),
                None => format!("{key}:candidates"),
            },
            shared: sharded.map(|_| set.shard_records.clone()),
            attest_key: format!("{key}:attest"),
            reservation_key: format!("{key}:next"),
            key,
            set: set.clone(),
            nodes: set.nodes.clone(),
            ttl: config.lease.ttl,
            drift: clock_policy(config).term_margin(config.lease.ttl),
            grace: grace(config.redis.timeout),
            metrics,
            epoch_seen: AtomicU64::new(0),
            releasing: tokio_util::task::TaskTracker::new(),
            term_log: Arc::new(std::sync::Mutex::new(proof::TermLog::default())),
            watched_holder: std::sync::Mutex::new(String::new()),
            counting: set.counting.listener(),
            tag,
            brief_every: match config.lease.names.len() > BRIEF_ABOVE {
                true => BRIEF_EVERY,
                false => 1,
            },
            watches: AtomicU64::new(tag),
            records_seen: std::sync::Mutex::new(vec![None; set.nodes.len()]),
            reconnect_taint_off: config.unsafe_switches.reconnect_taint_off,
            renewal_may_shorten: config.unsafe_switches.renewal_may_shorten,
        }
    }

    /// The tracker every task of the process is spawned on (`run` adds its own): the
    /// connections' drivers are, and shutdown awaits it after [`Redlock::disconnect`].
    pub fn tasks(&self) -> &tokio_util::task::TaskTracker {
        self.set.tasks()
    }

    /// Drop every node's connection (shutdown, once [`Redlock::settled`]): their driver tasks
    /// end.
    pub fn disconnect(&self) {
        self.set.disconnect()
    }

    /// The nodes, for the maintenance and subscription tasks.
    pub fn nodes(&self) -> &[Arc<Node>] {
        &self.nodes
    }

    /// The release-notice channel.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The attestation hash and channel ([`node::AttestKeys`]); requests live for the clock
    /// window (ttl + margin, the margin being the drift), after which a watch counts anyway.
    pub fn attest_keys(&self) -> node::AttestKeys {
        node::AttestKeys {
            hash: self.attest_key.clone(),
            channel: self.attest_key.clone(),
            life: self.ttl + self.drift,
        }
    }

    /// Resolves when a node began to count sooner than [`Redlock::quorum_counts_at`] said.
    pub async fn counting_changed(&self) {
        self.counting.notified().await
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The term log; a poisoned lock only means a panic elsewhere mid-update of plain data.
    fn term_log(&self) -> std::sync::MutexGuard<'_, proof::TermLog> {
        self.term_log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lock command carrying `value` goes to node `i` of `n`.
    /// Returns its sequence number and the connection it must go out on
    /// ([`node::Node::eval_read_on`]): the current one, bound so that the log knows which
    /// connection each command is on. Under the test-only `--unsafe-disable-reconnect-taint`,
    /// neither: every connection is logged as one, as before.
    fn log_sent(&self, value: &str, i: usize, n: usize) -> (u64, Option<u64>) {
        if self.reconnect_taint_off {
            return (self.term_log().sent(value, i, n, 0), None);
        }
        let generation = self.nodes[i].generation();
        (
            self.term_log().sent(value, i, n, generation),
            Some(generation),
        )
    }

    /// Its reply arrived; `counted`: the yes counted toward a quorum.
    fn log_answered(&self, value: &str, i: usize, seq: u64, counted: bool) {
        self.term_log().answered(value, i, seq, counted)
    }

    /// It failed or timed out.
    fn log_failed(&self, value: &str, i: usize) {
        self.term_log().failed(value, i)
    }

    /// Whether a named successor could win now: a quorum of nodes counts, or would count with
    /// the release proof of a graceful handover.
    pub fn eligible_as_successor(&self, now: Instant) -> bool {
        self.nodes
            .iter()
            .filter(|n| n.counts_for(self.tag, now) || n.counts_with_proof(now))
            .count()
            >= self.quorum()
    }

    /// Votes needed for a quorum: ⌊N/2⌋ + 1 of all configured nodes.
    pub fn quorum(&self) -> usize {
        math::quorum(self.nodes.len())
    }

    /// Whether each node's yes would count now, by endpoint name, for `/leader`.
    pub fn eligibility(&self, now: Instant) -> std::collections::BTreeMap<String, bool> {
        self.nodes
            .iter()
            .map(|n| (n.name().to_string(), n.counts_for(self.tag, now)))
            .collect()
    }

    /// Whether a quorum counts this sidecar's votes at `now`, and if not, why and when it will:
    /// for the log line, `/leader` and the `quorum_wait_seconds` gauge.
    pub fn quorum_wait(&self, now: Instant) -> QuorumWait {
        let waits: Vec<_> = self
            .nodes
            .iter()
            .map(|n| n.wait_for(Some(self.tag), now))
            .collect();
        let counting = waits.iter().filter(|w| w.is_none()).count();
        if counting >= self.quorum() {
            return QuorumWait::default();
        }
        let at = math::quorum_at(
            waits.iter().map(|w| match w {
                None => Some(now),
                Some((_, at)) => *at,
            }),
            self.quorum(),
        );
        // The reason is that of the node whose wait decides (the quorum-th to count), else the
        // most common one among the nodes that do not count.
        let deciding = waits
            .iter()
            .flatten()
            .find(|(_, from)| from.is_some() && *from == at)
            .map(|(w, _)| *w);
        let mut reasons: Vec<node::Wait> = waits.iter().flatten().map(|(w, _)| *w).collect();
        reasons.sort();
        let common = reasons
            .chunk_by(|a, b| a == b)
            .max_by_key(|c| c.len())
            .map(|c| c[0]);
        QuorumWait {
            reason: deciding.or(common),
            at,
        }
    }

    /// Whether a quorum of nodes counts this sidecar's votes at `now`.
    pub fn eligible(&self, now: Instant) -> bool {
        self.nodes
            .iter()
            .filter(|n| n.counts_for(self.tag, now))
            .count()
            >= self.quorum()
    }

    /// When a quorum of nodes will count, if nothing changes meanwhile (a fresh sidecar's watch
    /// of the nodes' clocks, quarantines ending); `None` if that is not known yet.
    pub fn quorum_counts_at(&self) -> Option<Instant> {
        math::quorum_at(
            self.nodes.iter().map(|n| n.counts_from_for(self.tag)),
            self.quorum(),
        )
    }

    /// How often a follower that knows the holder refreshes what it knows ([`Redlock::watch`]):
    /// every `retryEvery`, but no more often than the nodes' clocks need a reading (a third of
    /// the clock window), since that reading is what the round's replies also give.
    pub fn watch_period(&self, retry_every: Duration) -> Duration {
        let clock = self.nodes.iter().map(|n| n.clock_refresh()).min();
        clock.map_or(retry_every, |c| c.max(retry_every))
    }

    /// Whether release notices reach this sidecar: its subscription is up on a quorum of nodes.
    /// Then a graceful release wakes it, and it need not poll for one.
    pub fn notices_live(&self) -> bool {
        self.nodes.iter().filter(|n| n.subscribed()).count() >= self.quorum()
    }
}

//! One Redis master: a persistent, verified connection and the node's health.
//!
//! A connection is published for voting only after its handshake ran on it: `INFO` (run_id,
//! uptime, role, maxmemory-policy → quarantine) and `SCRIPT LOAD` of every script. A node that
//! restarts drops its TCP connections, so any vote it gives after a restart arrives over a new
//! connection whose handshake has already put the node in quarantine. That is why this module
//! manages its own reconnects instead of a transparently reconnecting connection manager.
//!
//! Every reply also reads the node's wall clock (`TIME`): scripts return it first, the
//! handshake and the INFO refresh ask for it. [`clock::Watch`] turns the readings into jump
//! detection and the observe-before-counting rule.
//!
//! Rooms: the pure INFO rules ([`info`]), the health and quarantine state (`health`), the
//! connection lifecycle and INFO/clock watcher (`connection`), command calls (`command`) and
//! the release-notice and attestation subscription (`subscription`), and attestations of the
//! clock watch (`attest`).

mod attest;
mod batch;
mod command;
mod connection;
mod health;
pub mod info;
mod subscription;

pub use attest::{AttestKeys, RECHECK_EVERY, REQUEST_EVERY};
pub use batch::WINDOW as BATCH_WINDOW;
pub use command::{CommandError, Reply};
pub use health::Wait;
pub use info::{Exclusion, Info, Quarantine, classify, classify_at, counts_from_at, parse_info};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::clock;
use super::connect::{Connector, FailureLog, Reason};
use super::scripts::scripts;
use crate::config::{Endpoint, RedisConfig};
use crate::metrics::{EndpointLabels, Metrics};
use connection::Verified;
use health::Health;

/// Every label value an endpoint's series can take, from the modules that own each set: what
/// [`Metrics::new_endpoint`] creates at 0 for every configured endpoint.
pub fn endpoint_labels() -> EndpointLabels {
    EndpointLabels {
        directions: [clock::Direction::Forward, clock::Direction::Backward]
            .map(|d| d.as_str())
            .to_vec(),
        connect_reasons: Reason::ALL.map(|r| r.label()).to_vec(),
        commands: scripts().all().map(|s| s.name).to_vec(),
        command_error_kinds: CommandError::KINDS.to_vec(),
    }
}

/// Origin of the local monotonic µs that [`clock`] works with.
static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// Local monotonic µs of `t` (all instants used are later than the origin, fixed when the first
/// node is created).
pub fn mono_us(t: Instant) -> i64 {
    t.saturating_duration_since(*ORIGIN).as_micros() as i64
}

/// The instant of local monotonic µs `us`.
fn instant_of(us: i64) -> Instant {
    *ORIGIN + Duration::from_micros(us.max(0) as u64)
}

/// "A node counts sooner than its clock watch said" (an attestation): one signal per lease over
/// the process's shared nodes ([`super::Redlock::counting_changed`]).
#[derive(Default)]
pub struct Counting(Mutex<Vec<Arc<Notify>>>);

impl Counting {
    /// A new lease's signal.
    pub fn listener(&self) -> Arc<Notify> {
        let n = Arc::new(Notify::new());
        lock(&self.0).push(n.clone());
        n
    }

    /// Wake every lease (each keeps the wake-up until it next waits).
    pub fn notify(&self) {
        for n in lock(&self.0).iter() {
            n.notify_one();
        }
    }
}

/// What every node of the process shares, whatever lease it serves.
pub struct Shared {
    /// The process's metrics.
    pub metrics: Metrics,
    /// The process's task tracker (the connections' drivers are spawned on it).
    pub tasks: tokio_util::task::TaskTracker,
    /// Every lease's "a node counts sooner" signal ([`super::Redlock::counting_changed`]).
    pub counting: Arc<Counting>,
    /// Whether the leases' rounds are batched ([`batch`]): the process has several leases.
    pub batch: bool,
}

/// One Redis master and its connection.
pub struct Node {
    /// Where it is; `name` is the metric label.
    pub endpoint: Endpoint,
    /// Opens connections (address, credentials, TLS) and classifies their failures.
    connector: Connector,
    /// Warns (rate-limited) and counts failures to connect and verify.
    connect_failures: FailureLog,
    /// The same for the release-notice subscription.
    subscribe_failures: FailureLog,
    /// The verified connection, if any.
    conn: Mutex<Option<Verified>>,
    /// How many connections were verified so far: the latest one's generation.
    generation: AtomicU64,
    /// Handshake results.
    health: Mutex<Health>,
    /// Wakes the maintenance task when a command saw the connection break.
    broken: Notify,
    /// Whether the release-notice subscription is up (an idle follower relies on it).
    subscribed: AtomicBool,
    /// This process among the sidecars: names its attestation requests ([`attest`]).
    instance: u64,
    /// Wakes the attestation task: a message on the attestation channel.
    attest_wake: Notify,
    /// Someone published an attestation request since the task last looked.
    attest_requests: AtomicBool,
    /// Every lease's "a node counts sooner" signal ([`super::Redlock::counting_changed`]).
    counting: Arc<Counting>,
    /// Per-command timeout.
    timeout: Duration,
    /// Connect + handshake timeout.
    connect_timeout: Duration,
    /// Lease ttl, for the quarantine window.
    ttl: Duration,
    /// Whether a restart quarantine keeps the node from counting (test-only switch).
    quarantine: Quarantine,
    /// Clock-jump detection bounds (and its test-only switch).
    clock_policy: clock::Policy,
    /// Shared metrics.
    metrics: Metrics,
    /// The ops waiting for the next batch; `None`: one lease, nothing is batched ([`batch`]).
    batch: Option<batch::Queue>,
}

impl Node {
    /// Create a node (no I/O yet; [`Node::maintain`] connects).
    pub fn new(
        endpoint: Endpoint,
        redis: &RedisConfig,
        ttl: Duration,
        quarantine: Quarantine,
        clock_policy: clock::Policy,
        shared: Shared,
    ) -> Result<Arc<Node>, redis::RedisError> {
        let Shared {
            metrics,
            tasks,
            counting,
            batch,
        } = shared;
        LazyLock::force(&ORIGIN);
        let connector = Connector::new(&endpoint, redis, tasks).map_err(|e| {
            let detail = e.to_string();
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis.tls", detail))
        })?;
        metrics.new_endpoint(&endpoint.name, &endpoint_labels());
        Ok(Arc::new(Node {
            connect_failures: FailureLog::new(&endpoint.name, "redis connection", metrics.clone()),
            subscribe_failures: FailureLog::new(
                &endpoint.name,
                "release-notice subscription",
                metrics.clone(),
            ),
            endpoint,
            connector,
            conn: Mutex::new(None),
            generation: AtomicU64::new(0),
            health: Mutex::new(Health::default()),
            broken: Notify::new(),
            subscribed: AtomicBool::new(false),
            instance: rand::random(),
            attest_wake: Notify::new(),
            attest_requests: AtomicBool::new(false),
            counting,
            timeout: redis.timeout,
            connect_timeout: redis.connect_timeout,
            ttl,
            quarantine,
            clock_policy,
            metrics,
            batch: batch.then(batch::Queue::default),
        }))
    }

    /// The generation of the current connection (0 before the first): a lock command bound to
    /// it ([`Node::eval_read_on`]) goes out on that connection or not at all.
    pub fn generation(&self) -> u64 {
        lock(&self.conn).as_ref().map_or(0, |v| v.generation)
    }

    /// The `host:port` name.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// Whether a yes from this node counts toward a quorum at `now`: not quarantined (restart,
    /// clock jump), not a replica or evicting, and its clock watched long enough.
    pub fn counts(&self, now: Instant) -> bool {
        self.counts_from().is_some_and(|from| now >= from)
    }

    /// From when a yes from this node counts, if nothing changes meanwhile; `None` while that is
    /// unknown (no clock reading yet) or never (replica, evicting policy).
    pub fn counts_from(&self) -> Option<Instant> {
        let h = lock(&self.health);
        self.counts_from_locked(&h)
    }

    fn counts_from_locked(&self, h: &Health) -> Option<Instant> {
        counts_from_at(
            h.exclusion.as_ref(),
            self.quarantine,
            h.clock.counts_from(&self.clock_policy).map(instant_of),
        )
    }

    /// [`Node::counts`] for one lease of the process (`lease`: its [`crate::redlock::Redlock`]'s
    /// tag): also since that lease's own release proof ([`Node::prove`]), which says nothing of
    /// the other leases' keys on the node.
    pub fn counts_for(&self, lease: u64, now: Instant) -> bool {
        self.counts_from_for(lease).is_some_and(|from| now >= from)
    }

    /// [`Node::counts_from`] for one lease ([`Node::counts_for`]).
    pub fn counts_from_for(&self, lease: u64) -> Option<Instant> {
        let h = lock(&self.health);
        counts_from_at(
            h.exclusion.as_ref(),
            self.quarantine,
            h.clock
                .counts_from_for(&self.clock_policy, lease)
                .map(instant_of),
        )
    }

    /// From when a yes from this node would count if it came with a release proof (the clock
    /// watch need not have run for the window; everything else is as [`Node::counts_from`]).
    pub fn counts_with_proof_from(&self) -> Option<Instant> {
        let h = lock(&self.health);
        counts_from_at(
            h.exclusion.as_ref(),
            self.quarantine,
            h.clock
                .counts_with_proof_from(&self.clock_policy)
                .map(instant_of),
        )
    }

    /// Whether a yes with a release proof would count at `now`.
    pub fn counts_with_proof(&self, now: Instant) -> bool {
        self.counts_with_proof_from()
            .is_some_and(|from| now >= from)
    }

    /// Take a release proof that server `run_id` gave lease `lease` in the reply that arrived at
    /// `received` ([`clock::Watch::prove`]); true if the node counts for that lease from then on.
    pub fn prove(&self, lease: u64, run_id: &str, received: Instant) -> bool {
        lock(&self.health)
            .clock
            .prove(lease, run_id, mono_us(received))
    }

    /// Whether the release-proof check is on (off only under the test-only switch).
    pub fn proof_check(&self) -> bool {
        self.clock_policy.proof_check
    }

    /// Whether a verified connection is up.
    pub fn is_up(&self) -> bool {
        lock(&self.conn).is_some()
    }

    /// Whether the release-notice subscription is up.
    pub fn subscribed(&self) -> bool {
        self.subscribed.load(Ordering::SeqCst)
    }
}

/// Lock a std mutex; a poisoned lock only means another task panicked while holding it, and the
/// data (an Option or small struct) is still consistent, so carry on with it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

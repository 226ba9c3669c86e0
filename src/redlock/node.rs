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

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use rand::Rng;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::clock::{self, Reading, Seen};
use super::connect::{ConnectError, Connector, FailureLog, Reason};
use super::scripts::{Script, scripts};
use crate::config::{Endpoint, RedisConfig};
use crate::metrics::Metrics;

/// How one command on one node ended.
#[derive(Debug)]
pub enum CommandError {
    /// No verified connection right now (connecting, or backing off).
    NotConnected,
    /// No reply within the per-node timeout. The command may still have run: callers treat the
    /// outcome as unknown (never counted, always cleaned up).
    Timeout,
    /// Redis or the connection answered with an error.
    Redis(redis::RedisError),
    /// The reply did not have the script's shape (no leading `TIME`).
    Malformed,
}

impl CommandError {
    fn kind(&self) -> &'static str {
        match self {
            CommandError::NotConnected => "not_connected",
            CommandError::Timeout => "timeout",
            CommandError::Redis(_) | CommandError::Malformed => "error",
        }
    }
}

/// Why a node does not count toward a quorum right now. Generic over the time type only so the
/// model check (`tests/model.rs`) can run [`classify_at`] and [`counts_from_at`] on integer time;
/// the sidecar uses the default, `Instant`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Exclusion<T = Instant> {
    /// Restarted recently (uptime below ttl + 1 s, or run_id changed): until this instant.
    Restarted { until: T },
    /// The node is a replica.
    Replica,
    /// Its maxmemory-policy may evict keys with a TTL.
    Evicting(String),
}

/// What the handshake learned about the node.
#[derive(Clone, Debug, Default)]
struct Health {
    /// run_id of the server behind the current connection.
    run_id: Option<String>,
    /// Why the node does not count, if it does not.
    exclusion: Option<Exclusion>,
    /// The node's clock as this sidecar has watched it.
    clock: clock::Watch,
}

/// A connection whose handshake ran, and the server it reached.
#[derive(Clone)]
struct Verified {
    /// Cloning a multiplexed connection is cheap.
    conn: MultiplexedConnection,
    /// run_id of the server, from the handshake's INFO: the clock readings' owner.
    run_id: Arc<str>,
}

/// Origin of the local monotonic µs that [`clock`] works with.
static ORIGIN: LazyLock<Instant> = LazyLock::new(Instant::now);

/// How often a connected node's INFO is read again (uptime, run_id, role, eviction policy).
const INFO_REFRESH: Duration = Duration::from_secs(1);

/// The reply to a refresh pipeline: `[INFO,] TIME`.
struct RefreshReply {
    info: Option<String>,
    node_us: Option<i64>,
}

impl RefreshReply {
    /// `None` when the reply does not have the expected shape (the connection is then dropped).
    fn parse(items: Vec<Value>, with_info: bool) -> Option<Self> {
        let mut items = items.into_iter();
        let info = match with_info {
            true => Some(redis::from_redis_value::<String>(items.next()?).ok()?),
            false => None,
        };
        let (secs, micros) = redis::from_redis_value::<(String, String)>(items.next()?).ok()?;
        Some(RefreshReply {
            info,
            node_us: clock::parse_time(&secs, &micros),
        })
    }
}

/// Local monotonic µs of `t` (all instants used are later than the origin, fixed when the first
/// node is created).
pub fn mono_us(t: Instant) -> i64 {
    t.saturating_duration_since(*ORIGIN).as_micros() as i64
}

/// The instant of local monotonic µs `us`.
fn instant_of(us: i64) -> Instant {
    *ORIGIN + Duration::from_micros(us.max(0) as u64)
}

/// Parsed fields of `INFO`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// `run_id`: changes on every restart.
    pub run_id: String,
    /// `uptime_in_seconds` (one-second resolution).
    pub uptime_secs: u64,
    /// `role`: master | slave.
    pub role: String,
    /// `maxmemory_policy`.
    pub maxmemory_policy: String,
}

/// Parse the fields we need from an `INFO` reply.
pub fn parse_info(text: &str) -> Info {
    let mut info = Info::default();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        match k {
            "run_id" => info.run_id = v.to_string(),
            // Uptime is computed from the wall clock: after a backward step it is negative, which
            // says nothing about a restart (run_id does, and the clock watch quarantines the
            // step itself), so it reads as long. Anything else unreadable reads as a restart.
            "uptime_in_seconds" => {
                info.uptime_secs = match v.trim().parse::<i64>() {
                    Ok(secs) if secs < 0 => u64::MAX,
                    Ok(secs) => secs as u64,
                    Err(_) => 0,
                }
            }
            "role" => info.role = v.to_string(),
            "maxmemory_policy" => info.maxmemory_policy = v.to_string(),
            _ => {}
        }
    }
    info
}

/// Whether a node with this INFO may count, and until when it is quarantined.
///
/// `previous_run_id` is the run_id seen on the previous connection. Uptime has one-second
/// resolution and is truncated, so the real uptime may be up to 1 s more than reported; treating
/// it as the reported value errs on the side of a longer quarantine.
pub fn classify(
    info: &Info,
    previous_run_id: Option<&str>,
    ttl: Duration,
    now: Instant,
) -> Option<Exclusion> {
    classify_at(info, previous_run_id, ttl, now)
}

/// [`classify`] on any time type (the model check runs it on integer µs).
pub fn classify_at<T: std::ops::Add<Duration, Output = T>>(
    info: &Info,
    previous_run_id: Option<&str>,
    ttl: Duration,
    now: T,
) -> Option<Exclusion<T>> {
    if info.role == "slave" || info.role == "replica" {
        return Some(Exclusion::Replica);
    }
    let p = info.maxmemory_policy.as_str();
    if p.starts_with("allkeys-") || p.starts_with("volatile-") {
        return Some(Exclusion::Evicting(p.to_string()));
    }
    let window = ttl + Duration::from_secs(1);
    let by_uptime = window
        .checked_sub(Duration::from_secs(info.uptime_secs))
        .filter(|d| !d.is_zero());
    let restarted = previous_run_id.is_some_and(|prev| prev != info.run_id);
    let wait = match (by_uptime, restarted) {
        (_, true) => Some(window),
        (Some(d), false) => Some(d),
        (None, false) => None,
    };
    wait.map(|d| Exclusion::Restarted { until: now + d })
}

/// From when a yes of a node counts: the later of the end of its restart quarantine (ignored with
/// the test-only `ignore_quarantine`) and `clock_from`, what its clock watch allows
/// ([`clock::Watch::counts_from`]); `None` while unknown (no clock reading yet) or never
/// (replica, evicting). Pure, on any time type: [`Node::counts_from`] and the model check run it.
pub fn counts_from_at<T: Ord + Copy>(
    exclusion: Option<&Exclusion<T>>,
    ignore_quarantine: bool,
    clock_from: Option<T>,
) -> Option<T> {
    let restarted = match exclusion {
        _ if ignore_quarantine => None,
        None => None,
        Some(Exclusion::Restarted { until }) => Some(*until),
        Some(_) => return None,
    };
    let clock = clock_from?;
    Some(restarted.map_or(clock, |r| r.max(clock)))
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
    /// Handshake results.
    health: Mutex<Health>,
    /// Wakes the maintenance task when a command saw the connection break.
    broken: Notify,
    /// Per-command timeout.
    timeout: Duration,
    /// Connect + handshake timeout.
    connect_timeout: Duration,
    /// Lease ttl, for the quarantine window.
    ttl: Duration,
    /// Test-only: count the node even while it is quarantined.
    ignore_quarantine: bool,
    /// Clock-jump detection bounds (and its test-only switch).
    clock_policy: clock::Policy,
    /// Shared metrics.
    metrics: Metrics,
}

impl Node {
    /// Create a node (no I/O yet; [`Node::maintain`] connects).
    pub fn new(
        endpoint: Endpoint,
        redis: &RedisConfig,
        ttl: Duration,
        ignore_quarantine: bool,
        clock_policy: clock::Policy,
        metrics: Metrics,
    ) -> Result<Arc<Node>, redis::RedisError> {
        LazyLock::force(&ORIGIN);
        let connector = Connector::new(&endpoint, redis).map_err(|e| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "redis.tls", e))
        })?;
        metrics.redis_up.with_label_values(&[&endpoint.name]).set(0);
        metrics
            .redis_quarantined
            .with_label_values(&[&endpoint.name])
            .set(0);
        metrics
            .redis_eligible
            .with_label_values(&[&endpoint.name])
            .set(0);
        for direction in [clock::Direction::Forward, clock::Direction::Backward] {
            metrics
                .redis_clock_jumps
                .with_label_values(&[&endpoint.name, direction.as_str()]);
        }
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
            health: Mutex::new(Health::default()),
            broken: Notify::new(),
            timeout: redis.timeout,
            connect_timeout: redis.connect_timeout,
            ttl,
            ignore_quarantine,
            clock_policy,
            metrics,
        }))
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
        counts_from_at(
            h.exclusion.as_ref(),
            self.ignore_quarantine,
            h.clock.counts_from(&self.clock_policy).map(instant_of),
        )
    }

    /// Take a reading of the node's clock; a jump quarantines the node (logged and counted).
    fn observe(&self, run_id: &str, node_us: i64, sent: Instant, received: Instant) {
        let reading = Reading {
            node_us,
            sent_us: mono_us(sent),
            received_us: mono_us(received),
        };
        let seen = lock(&self.health)
            .clock
            .observe(run_id, reading, &self.clock_policy);
        if let Seen::Resumed { gap_us } = seen {
            tracing::debug!(
                endpoint = %self.endpoint.name,
                gap_ms = gap_us / 1000,
                "no clock reading of the redis node for longer than ttl + margin; watching it afresh before it counts"
            );
        }
        if let Seen::Jumped { jump, until_us } = seen {
            let direction = jump.direction.as_str();
            tracing::warn!(
                endpoint = %self.endpoint.name,
                direction,
                size_ms = jump.size_us as f64 / 1000.0,
                quarantine_ms = (until_us - reading.received_us) / 1000,
                "redis node's wall clock jumped; it does not count toward a quorum until the quarantine ends"
            );
            self.metrics
                .redis_clock_jumps
                .with_label_values(&[&self.endpoint.name, direction])
                .inc();
        }
    }

    /// Whether a verified connection is up.
    pub fn is_up(&self) -> bool {
        lock(&self.conn).is_some()
    }

    /// Run a script by SHA with the per-node timeout; records latency and errors. The node's
    /// `TIME`, which every script returns first, is taken as a clock reading (before the caller
    /// looks at the vote, so a reply that reveals a jump never counts); the rest is returned.
    pub async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Vec<Value>, CommandError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.sha).arg(keys.len()).arg(keys).arg(args);
        let started = Instant::now();
        let result = self.run(&cmd).await.and_then(|(value, run_id)| {
            let Value::Array(mut items) = value else {
                return Err(CommandError::Malformed);
            };
            match items.first() {
                Some(&Value::Int(node_us)) => {
                    self.observe(&run_id, node_us, started, Instant::now());
                    items.remove(0);
                    Ok(items)
                }
                _ => Err(CommandError::Malformed),
            }
        });
        self.record(script.name, started, &result);
        result
    }

    async fn run(&self, cmd: &redis::Cmd) -> Result<(Value, Arc<str>), CommandError> {
        let Some(Verified { mut conn, run_id }) = lock(&self.conn).clone() else {
            return Err(CommandError::NotConnected);
        };
        match tokio::time::timeout(self.timeout, cmd.query_async::<Value>(&mut conn)).await {
            Err(_) => Err(CommandError::Timeout),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.mark_broken();
                }
                // An ACL that lets the handshake through but denies a script (or a command
                // inside one) makes the endpoint as unusable as a failed connect.
                let classified = ConnectError::from_redis(&e, self.connector.is_tls());
                if classified.reason == Reason::Noperm {
                    self.connect_failures.failed(&classified);
                }
                Err(CommandError::Redis(e))
            }
            Ok(Ok(v)) => Ok((v, run_id)),
        }
    }

    fn record<T>(&self, command: &'static str, started: Instant, result: &Result<T, CommandError>) {
        let name = self.endpoint.name.as_str();
        match &result {
            Ok(_) => self
                .metrics
                .redis_command_duration
                .with_label_values(&[name, command])
                .observe(started.elapsed().as_secs_f64()),
            Err(e) => self
                .metrics
                .redis_command_errors
                .with_label_values(&[name, command, e.kind()])
                .inc(),
        }
    }

    fn mark_broken(&self) {
        if lock(&self.conn).take().is_some() {
            self.metrics
                .redis_up
                .with_label_values(&[&self.endpoint.name])
                .set(0);
            tracing::warn!(endpoint = %self.endpoint.name, "redis connection lost; reconnecting");
        }
        self.broken.notify_one();
    }

    /// How often [`Node::maintain`] reads the node's clock: a third of the clock window (at most
    /// a second), so that a node stays watched between replies ([`Seen::Resumed`] after a gap
    /// longer than the window).
    fn clock_refresh(&self) -> Duration {
        Duration::from_micros((self.clock_policy.window_us / 3).max(1) as u64).min(INFO_REFRESH)
    }

    /// Keep a verified connection up and the health fresh until `stop` fires: connect with
    /// jittered exponential backoff, re-check INFO every second (also detects a silent server)
    /// and the node's clock every [`Node::clock_refresh`].
    pub async fn maintain(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut backoff = Duration::from_millis(50);
        let mut info_read: Option<Instant> = None;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let connected = lock(&self.conn).clone();
            let wait = match connected {
                None => match self.handshake().await {
                    Ok(()) => {
                        self.connect_failures.succeeded();
                        backoff = Duration::from_millis(50);
                        info_read = Some(Instant::now());
                        self.clock_refresh()
                    }
                    Err(e) => {
                        self.connect_failures.failed(&e);
                        let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.5));
                        backoff = (backoff * 2).min(Duration::from_secs(2));
                        jittered
                    }
                },
                Some(Verified { mut conn, run_id }) => {
                    let sent = Instant::now();
                    let with_info = info_read.is_none_or(|at| sent - at >= INFO_REFRESH);
                    // INFO (when due) and TIME in one round trip; TIME alone in between.
                    let mut refresh = redis::pipe();
                    if with_info {
                        refresh.cmd("INFO");
                    }
                    refresh.cmd("TIME");
                    let reply = tokio::time::timeout(
                        self.connect_timeout,
                        refresh.query_async::<Vec<Value>>(&mut conn),
                    )
                    .await;
                    let received = Instant::now();
                    match reply
                        .ok()
                        .and_then(|r| r.ok())
                        .and_then(|items| RefreshReply::parse(items, with_info))
                    {
                        Some(reply) => {
                            if let Some(text) = reply.info {
                                info_read = Some(sent);
                                self.apply_info(&parse_info(&text));
                            }
                            if let Some(t) = reply.node_us {
                                self.observe(&run_id, t, sent, received);
                            }
                        }
                        None => self.mark_broken(),
                    }
                    self.clock_refresh()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.broken.notified() => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    async fn handshake(&self) -> Result<(), ConnectError> {
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let tls = self.connector.is_tls();
        let classify = |e: redis::RedisError| ConnectError::from_redis(&e, tls);
        let fut = async {
            let mut conn = self.connector.multiplexed(cfg).await?;
            let text: String = redis::cmd("INFO")
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            for s in scripts().all() {
                let sha: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(s.source)
                    .query_async(&mut conn)
                    .await
                    .map_err(classify)?;
                if sha != s.sha {
                    return Err(ConnectError::new(Reason::Other, "script sha mismatch"));
                }
            }
            let sent = Instant::now();
            let (secs, micros): (String, String) = redis::cmd("TIME")
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            let time = (clock::parse_time(&secs, &micros), sent, Instant::now());
            Ok::<_, ConnectError>((conn, text, time))
        };
        let (conn, text, (node_us, sent, received)) =
            tokio::time::timeout(self.connect_timeout * 2, fut)
                .await
                .map_err(|_| ConnectError::new(Reason::Timeout, "handshake timed out"))??;
        let info = parse_info(&text);
        self.apply_info(&info);
        let node_us =
            node_us.ok_or_else(|| ConnectError::new(Reason::Other, "unreadable TIME reply"))?;
        self.observe(&info.run_id, node_us, sent, received);
        *lock(&self.conn) = Some(Verified {
            conn,
            run_id: info.run_id.into(),
        });
        self.metrics
            .redis_up
            .with_label_values(&[&self.endpoint.name])
            .set(1);
        tracing::info!(endpoint = %self.endpoint.name, "redis connection verified");
        Ok(())
    }

    fn apply_info(&self, info: &Info) {
        let now = Instant::now();
        let mut h = lock(&self.health);
        let mut exclusion = classify(info, h.run_id.as_deref(), self.ttl, now);
        // A quarantine already running is never shortened by a later, more relaxed reading.
        if let Some(Exclusion::Restarted { until: old }) = h
            .exclusion
            .clone()
            .filter(|_| self.restarted_until(&h, now))
        {
            match &mut exclusion {
                Some(Exclusion::Restarted { until }) => *until = (*until).max(old),
                None => exclusion = Some(Exclusion::Restarted { until: old }),
                Some(_) => {}
            }
        }
        // Log changes of kind, not every refresh of a running quarantine's end.
        let changed = match (&h.exclusion, &exclusion) {
            (Some(Exclusion::Restarted { .. }), Some(Exclusion::Restarted { .. })) => {
                h.run_id.as_deref().is_some_and(|r| r != info.run_id)
            }
            (old, new) => old != new,
        };
        if changed {
            match &exclusion {
                Some(Exclusion::Restarted { until }) => tracing::warn!(
                    endpoint = %self.endpoint.name,
                    uptime_secs = info.uptime_secs,
                    quarantine_ms = until.saturating_duration_since(now).as_millis() as u64,
                    "redis node restarted recently; it does not count toward a quorum until the quarantine ends"
                ),
                Some(Exclusion::Replica) => {
                    tracing::error!(endpoint = %self.endpoint.name, "redis node is a replica; it never counts toward a quorum")
                }
                Some(Exclusion::Evicting(p)) => tracing::error!(
                    endpoint = %self.endpoint.name,
                    policy = %p,
                    "redis node's maxmemory-policy can evict lock keys; it never counts toward a quorum (use noeviction)"
                ),
                None => tracing::info!(
                    endpoint = %self.endpoint.name,
                    "redis node counts toward a quorum again"
                ),
            }
        }
        h.exclusion = exclusion;
        h.run_id = Some(info.run_id.clone());
    }

    fn restarted_until(&self, h: &Health, now: Instant) -> bool {
        matches!(h.exclusion, Some(Exclusion::Restarted { until }) if until > now)
    }

    /// Whether the node is quarantined at `now` (restart, clock jump, replica, evicting).
    pub fn quarantined(&self, now: Instant) -> bool {
        let h = lock(&self.health);
        let excluded = match &h.exclusion {
            None => false,
            Some(Exclusion::Restarted { until }) => now < *until,
            Some(_) => true,
        };
        excluded || (self.clock_policy.enabled && h.clock.quarantined_at(mono_us(now)))
    }

    /// Refresh the quarantine and eligibility gauges (called at scrape time).
    pub fn publish_quarantine(&self, now: Instant) {
        let name = [self.endpoint.name.as_str()];
        self.metrics
            .redis_quarantined
            .with_label_values(&name)
            .set(i64::from(self.quarantined(now)));
        self.metrics
            .redis_eligible
            .with_label_values(&name)
            .set(i64::from(self.is_up() && self.counts(now)));
    }

    /// A failed subscription attempt is news only while the main connection works: otherwise
    /// the connection's own warning already says why, and counting both would double the rate.
    fn subscription_failed(&self, e: &ConnectError) {
        if self.is_up() {
            self.subscribe_failures.failed(e);
        } else {
            tracing::debug!(endpoint = %self.endpoint.name, error = %e, "release-notice subscription failed");
        }
    }

    /// Subscribe to `channel` on this node and post each message to `notices`, reconnecting
    /// with backoff, until `stop` fires.
    pub async fn subscribe(
        self: Arc<Self>,
        channel: String,
        notices: Arc<super::Notices>,
        stop: tokio_util::sync::CancellationToken,
    ) {
        use futures::StreamExt;
        let mut backoff = Duration::from_millis(100);
        loop {
            let session = async {
                let mut ps = tokio::time::timeout(self.connect_timeout, self.connector.pubsub())
                    .await
                    .map_err(|_| ConnectError::new(Reason::Timeout, "connect timed out"))
                    .and_then(|r| r)
                    .inspect_err(|e| self.subscription_failed(e))
                    .map_err(|e| e.to_string())?;
                ps.subscribe(&channel)
                    .await
                    .map_err(|e| ConnectError::from_redis(&e, self.connector.is_tls()))
                    .inspect_err(|e| self.subscription_failed(e))
                    .map_err(|e| e.to_string())?;
                self.subscribe_failures.succeeded();
                let mut stream = ps.into_on_message();
                while let Some(msg) = stream.next().await {
                    notices.post(&msg.get_payload::<String>().unwrap_or_default());
                }
                Err::<(), String>("subscription closed".into())
            };
            tokio::select! {
                r = session => {
                    if let Err(e) = r {
                        tracing::debug!(endpoint = %self.endpoint.name, error = %e, "release-notice subscription ended");
                    }
                }
                _ = stop.cancelled() => return,
            }
            let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.5));
            backoff = (backoff * 2).min(Duration::from_secs(2));
            tokio::select! {
                _ = tokio::time::sleep(jittered) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Lock a std mutex; a poisoned lock only means another task panicked while holding it, and the
/// data (an Option or small struct) is still consistent, so carry on with it.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(uptime: u64, run_id: &str) -> Info {
        Info {
            run_id: run_id.into(),
            uptime_secs: uptime,
            role: "master".into(),
            maxmemory_policy: "noeviction".into(),
        }
    }

    #[test]
    fn parses_info() {
        let i = parse_info(
            "# Server\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n# Replication\r\nrole:master\r\nmaxmemory_policy:noeviction\r\n",
        );
        assert_eq!(i, info(42, "abc"));
    }

    #[test]
    fn negative_uptime_after_a_backward_clock_step_is_not_a_restart() {
        let i = parse_info("run_id:abc\r\nuptime_in_seconds:-24\r\nrole:master\r\n");
        assert_eq!(i.uptime_secs, u64::MAX);
        let ttl = Duration::from_secs(1);
        assert_eq!(classify(&i, Some("abc"), ttl, Instant::now()), None);
        assert_eq!(parse_info("uptime_in_seconds:x\r\n").uptime_secs, 0);
    }

    #[test]
    fn counts_from_is_the_later_of_quarantine_and_clock() {
        let r = Exclusion::Restarted { until: 50 };
        assert_eq!(counts_from_at(Some(&r), false, Some(20)), Some(50));
        assert_eq!(counts_from_at(Some(&r), false, Some(70)), Some(70));
        assert_eq!(counts_from_at(Some(&r), true, Some(20)), Some(20));
        assert_eq!(counts_from_at(None, false, Some(20)), Some(20));
        assert_eq!(counts_from_at(Some(&r), false, None), None);
        assert_eq!(
            counts_from_at(Some(&Exclusion::Replica), false, Some(1)),
            None
        );
        assert_eq!(
            counts_from_at(Some(&Exclusion::Replica), true, Some(1)),
            Some(1)
        );
    }

    #[test]
    fn quarantine_rules() {
        let now = Instant::now();
        let ttl = Duration::from_secs(1);
        assert_eq!(classify(&info(100, "a"), None, ttl, now), None);
        assert_eq!(
            classify(&info(0, "a"), None, ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(2)
            })
        );
        assert_eq!(
            classify(&info(1, "a"), None, ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(1)
            })
        );
        assert_eq!(classify(&info(2, "a"), None, ttl, now), None);
        // A changed run_id quarantines for the whole window even if uptime looks long.
        assert_eq!(
            classify(&info(100, "b"), Some("a"), ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(2)
            })
        );
        assert_eq!(classify(&info(100, "a"), Some("a"), ttl, now), None);
        let mut r = info(100, "a");
        r.role = "slave".into();
        assert_eq!(classify(&r, None, ttl, now), Some(Exclusion::Replica));
        let mut e = info(100, "a");
        e.maxmemory_policy = "volatile-lru".into();
        assert_eq!(
            classify(&e, None, ttl, now),
            Some(Exclusion::Evicting("volatile-lru".into()))
        );
    }
}

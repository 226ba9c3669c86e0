//! Prometheus metrics: one registry, created once, shared by the elector and the node tasks
//! (which count events through the domain methods below) and the ops server (which sets the
//! answer-time gauges and renders). Label values are bounded: `lease` (one per process),
//! `endpoint` (`host:port`, ≤ 16), `command`, `result` and `reason` (fixed sets, spelled once by
//! the enums here and in the modules that own them).
//!
//! Names, help texts and label sets are a documented interface: `docs/reference/metrics.md` is
//! generated from [`Metrics::descriptors`] (regenerate it with the change), and the dashboard,
//! the alerts and tests/observability use them.

mod builder;
mod labels;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Registry, TextEncoder,
};

pub use self::builder::MetricDoc;
use self::builder::{Builder, LATENCY_BUCKETS, Scope, WAIT_BUCKETS};
use self::labels::renewal_label;
pub use self::labels::{AcquireResult, HandoverReason, LeadershipGauges};
use crate::leadership::StepDownReason;

/// The label values one Redis endpoint's series can take, each set spelled by the module that
/// owns it (`redlock::node::endpoint_labels`); [`Metrics::new_endpoint`] creates every
/// combination at 0.
#[derive(Clone, Debug)]
pub struct EndpointLabels {
    /// `direction` of `redis_clock_jumps_total`.
    pub directions: Vec<&'static str>,
    /// `reason` of `redis_connect_errors_total`.
    pub connect_reasons: Vec<&'static str>,
    /// `command` of `redis_command_duration_seconds` and `redis_command_errors_total`.
    pub commands: Vec<&'static str>,
    /// `kind` of `redis_command_errors_total`.
    pub command_error_kinds: Vec<&'static str>,
}

/// `kind` of `endpoint_slice_writes_total`.
pub const SLICE_WRITES: [&str; 3] = ["list", "empty", "create"];

/// `kind` of `redis_attestations_total`.
pub const ATTESTATION_KINDS: [&str; 2] = ["given", "taken"];

/// All metrics of the process. The fields stay public for the call sites that still count
/// directly; new code uses the methods.
#[derive(Clone)]
pub struct Metrics {
    /// Where everything is registered; rendered by `/metrics`.
    registry: Registry,
    /// What was registered, in registration order.
    docs: Arc<[MetricDoc]>,
    /// 1 while leader, evaluated at scrape time against the deadline.
    is_leader: IntGauge,
    /// Times this sidecar became leader.
    leader_transitions: IntCounter,
    /// Acquire attempts by result: acquired | contended | no_quorum | error.
    acquire_attempts: IntCounterVec,
    /// Renewal rounds by result: ok | failed.
    renewals: IntCounterVec,
    /// Seconds of validity left, evaluated at scrape time.
    lease_valid_seconds: Gauge,
    /// Fencing token of the current term; 0 when not leader.
    fencing_token: IntGauge,
    /// Duration of acquire attempts (all results).
    acquire_duration: Histogram,
    /// Failover gap seen by a new leader: from when the lease was last known held by someone
    /// else (the expiry its last `contended` reply predicted, or the release notice) — or from
    /// the first attempt, when it saw no holder — to this acquisition.
    acquire_wait: Histogram,
    /// 1 while this sidecar knows a current holder (itself, or the holder it last observed).
    leader_known: IntGauge,
    /// Votes needed for a quorum (⌊N/2⌋+1); compared with `redis_endpoints_usable`.
    quorum: IntGauge,
    /// Endpoints that are connected and not quarantined, evaluated at scrape time.
    redis_endpoints_usable: IntGauge,
    /// Seconds until a quorum of nodes counts this sidecar's votes (0: it does; +Inf: waiting
    /// alone will not do it), evaluated at scrape time.
    quorum_wait: Gauge,
    /// `{lease, identity}` = 1: joins identity and lease onto per-endpoint series. Set by the
    /// ops server, which knows the identity.
    lease_info: IntGaugeVec,
    /// 1 while a verified connection to the endpoint is up.
    redis_up: IntGaugeVec,
    /// 1 while the endpoint does not count toward a quorum (restart, clock jump, replica,
    /// evicting policy).
    redis_quarantined: IntGaugeVec,
    /// 1 while this sidecar counts the endpoint's vote: connected, not quarantined, and its clock
    /// watched long enough (evaluated at scrape time).
    redis_eligible: IntGaugeVec,
    /// Wall-clock jumps detected on the endpoint, by direction: forward | backward.
    redis_clock_jumps: IntCounterVec,
    /// Attestations of the endpoint's clock watch, by kind: given (this sidecar vouched for
    /// others' fresh watches) | taken (a vouch let this sidecar's watch count early).
    redis_attestations: IntCounterVec,
    /// Per-endpoint command latency.
    redis_command_duration: HistogramVec,
    /// Per-endpoint command failures by kind: timeout | error | not_connected.
    redis_command_errors: IntCounterVec,
    /// Failed connection attempts (connect, TLS, AUTH, handshake, subscription) per endpoint by
    /// reason: tls | auth | noperm | refused | timeout | dns | other.
    redis_connect_errors: IntCounterVec,
    /// 1 while the election loop is stalled (timer slipped beyond the margin).
    stalled: IntGauge,
    /// Times the election loop's timer slipped beyond the margin.
    stalls: IntCounter,
    /// Kubernetes API requests of the `kube` publisher by verb (get | list | patch | create)
    /// and result (ok | conflict | forbidden | not_found | server_error | client_error |
    /// timeout | transport | cancelled).
    kube_requests: IntCounterVec,
    /// Graceful handovers this sidecar made as leader (its release named a successor), by
    /// reason: shutdown | step_down | preferred | child_exited | app_unhealthy.
    handovers: IntCounterVec,
    /// Terms this sidecar ended as leader, by `step_down_reason` (every end: graceful, lost,
    /// stalled; [`StepDownReason::label`]).
    step_downs: IntCounterVec,
    /// Writes to the leader Service's EndpointSlice that landed, by kind: list (the own
    /// address) | empty (the own address removed) | create (the slice re-created).
    endpoint_slice_writes: IntCounterVec,
    /// Writes to the EndpointSlice the server refused with 409 (written since it was read).
    endpoint_slice_conflicts: IntCounter,
    /// Writes to the EndpointSlice not sent because it carries a later term's token.
    endpoint_slice_refusals: IntCounter,
    /// `lease.followApp`: 1 while this sidecar's app is healthy (always 1 when off).
    app_healthy: IntGauge,
    /// `lease.followApp`: other candidates whose app is healthy, as the records last read say.
    healthy_candidates: IntGauge,
}

impl Metrics {
    /// Create every metric for `lease` and register it in `registry`. Fails only if a name is
    /// registered there already (or a definition below is malformed).
    pub fn register(registry: &Registry, lease: &str) -> prometheus::Result<Self> {
        Self::build(registry, lease, None)
    }

    /// Another lease of the same process (`lease.names`): its own per-lease series, with its
    /// `lease` label, on the same registry; the per-process ones (endpoints, Kubernetes
    /// requests, build info) are this one's.
    pub fn for_lease(&self, lease: &str) -> prometheus::Result<Self> {
        Self::build(&self.registry, lease, Some(self))
    }

    #[rustfmt::skip] // One line per metric: the table reads best unwrapped.
    fn build(registry: &Registry, lease: &str, process: Option<&Metrics>) -> prometheus::Result<Self> {
        use Scope::{Lease, Process};
        let b = Builder { registry, lease, docs: RefCell::default() };
        // A per-process metric: built with the first lease, shared by the others.
        macro_rules! process {
            ($field:ident, $made:expr) => {
                match process {
                    Some(p) => p.$field.clone(),
                    None => $made?,
                }
            };
        }
        let mut m = Metrics {
            registry: registry.clone(),
            docs: Arc::new([]),
            is_leader: b.int_gauge("redlock_elector_is_leader", "1 while this sidecar holds the lease")?,
            leader_transitions: b.counter("redlock_elector_leader_transitions_total", "Times this sidecar became leader; the sum over pods counts every term")?,
            acquire_attempts: b.counter_vec(Lease, "redlock_elector_acquire_attempts_total", "Acquire attempts by result", &["result"])?,
            renewals: b.counter_vec(Lease, "redlock_elector_renewals_total", "Lease renewal rounds by result", &["result"])?,
            lease_valid_seconds: b.gauge("redlock_elector_lease_valid_seconds", "Seconds until the lease deadline; 0 when not leader")?,
            fencing_token: b.int_gauge("redlock_elector_fencing_token", "Fencing token of the current term; 0 when not leader")?,
            acquire_duration: b.histogram("redlock_elector_acquire_duration_seconds", "Duration of acquire attempts", LATENCY_BUCKETS)?,
            acquire_wait: b.histogram("redlock_elector_acquire_wait_seconds", "Failover gap seen by a new leader: from when the lease was last known held by another sidecar (or the first failed attempt) to acquiring it", WAIT_BUCKETS)?,
            leader_known: b.int_gauge("redlock_elector_leader_known", "1 while this sidecar knows a current holder of the lease (itself or the holder it last observed)")?,
            quorum: b.int_gauge("redlock_elector_quorum", "Redis endpoints needed for a quorum (N/2+1)")?,
            redis_endpoints_usable: b.int_gauge("redlock_elector_redis_endpoints_usable", "Redis endpoints that are connected and not quarantined (a quorum needs redlock_elector_quorum)")?,
            quorum_wait: b.gauge("redlock_elector_quorum_wait_seconds", "Seconds until a quorum of Redis nodes counts this sidecar's votes (its clock watch, a restart or jump quarantine); 0 when it does, +Inf when waiting alone will not (nodes unreachable, replicas). A graceful handover does not wait for the clock watch")?,
            lease_info: b.gauge_vec(Lease, "redlock_elector_lease_info", "Lease and identity of this sidecar; always 1 (join on job, instance to add lease to per-endpoint series)", &["identity"])?,
            redis_up: process!(redis_up, b.gauge_vec(Process, "redlock_elector_redis_up", "1 while a verified connection to the endpoint is up", &["endpoint"])),
            redis_quarantined: process!(redis_quarantined, b.gauge_vec(Process, "redlock_elector_redis_quarantined", "1 while the endpoint does not count toward a quorum (recent restart, clock jump, replica, evicting maxmemory-policy)", &["endpoint"])),
            redis_eligible: process!(redis_eligible, b.gauge_vec(Process, "redlock_elector_redis_eligible", "1 while this sidecar counts the endpoint's vote toward a quorum (connected, not quarantined, clock watched for ttl + margin)", &["endpoint"])),
            redis_attestations: process!(redis_attestations, b.counter_vec(Process, "redlock_elector_redis_attestations_total", "Attestations of the endpoint's clock watch: given (this sidecar, counting the endpoint, vouched for other sidecars' fresh watches) or taken (another sidecar's vouch let this one count the endpoint without waiting for the window)", &["endpoint", "kind"])),
            redis_clock_jumps: process!(redis_clock_jumps, b.counter_vec(Process, "redlock_elector_redis_clock_jumps_total", "Wall-clock jumps detected on the endpoint (its TIME moved more or less than the monotonic clock allows)", &["endpoint", "direction"])),
            redis_command_duration: process!(redis_command_duration, b.histogram_vec("redlock_elector_redis_command_duration_seconds", "Redis command latency per endpoint", &["endpoint", "command"])),
            redis_command_errors: process!(redis_command_errors, b.counter_vec(Process, "redlock_elector_redis_command_errors_total", "Redis command failures per endpoint", &["endpoint", "command", "kind"])),
            redis_connect_errors: process!(redis_connect_errors, b.counter_vec(Process, "redlock_elector_redis_connect_errors_total", "Failed connection attempts per endpoint by reason (tls, auth, noperm, refused, timeout, dns, other)", &["endpoint", "reason"])),
            stalled: b.int_gauge("redlock_elector_stalled", "1 while the election loop is stalled (timer slipped)")?,
            stalls: b.counter("redlock_elector_stalls_total", "Times the election loop's timer slipped beyond the stall margin")?,
            kube_requests: process!(kube_requests, b.counter_vec(Process, "redlock_elector_kube_requests_total", "Kubernetes API requests by verb and result", &["verb", "result"])),
            handovers: b.counter_vec(Lease, "redlock_elector_handovers_total", "Graceful handovers by the leader (its release notice names a successor), by reason", &["reason"])?,
            step_downs: b.counter_vec(Lease, "redlock_elector_step_downs_total", "Terms this sidecar ended as leader, by why: graceful (a handover) or not (renewal_failed, stalled)", &["step_down_reason"])?,
            endpoint_slice_writes: b.counter_vec(Lease, "redlock_elector_endpoint_slice_writes_total", "Writes to the leader Service's EndpointSlice (kubernetes.endpointSlice) that landed, by kind: list (this leader's address), empty (its address removed after its term), create (the missing slice re-created)", &["kind"])?,
            endpoint_slice_conflicts: b.counter("redlock_elector_endpoint_slice_conflicts_total", "Writes to the EndpointSlice the API server refused (409) because it changed since it was read; each is read again and decided again")?,
            endpoint_slice_refusals: b.counter("redlock_elector_endpoint_slice_refusals_total", "Writes of this sidecar's address to the EndpointSlice not sent because the slice carries a later term's fencing token (a stale leader kept off the Service)")?,
            app_healthy: b.int_gauge("redlock_elector_app_healthy", "1 while this sidecar's app is healthy (lease.followApp: its app containers, or app.healthUrl); always 1 when leadership does not follow the app")?,
            healthy_candidates: b.int_gauge("redlock_elector_healthy_candidates", "Other candidates whose app is healthy, as the candidate records last read say (lease.followApp); a leader whose app is unhealthy hands over to one of them")?,
        };
        m.app_healthy.set(1);
        if process.is_none() {
            let build_info = b.gauge_vec(
                Process,
                "redlock_elector_build_info",
                "Build information; always 1",
                &["version"],
            )?;
            build_info
                .with_label_values(&[env!("CARGO_PKG_VERSION")])
                .set(1);
        }
        // Every series of a fixed label set exists from the start, at 0.
        for r in HandoverReason::ALL {
            m.handovers.with_label_values(&[r.label()]);
        }
        for r in StepDownReason::ALL {
            m.step_downs.with_label_values(&[r.label()]);
        }
        for r in AcquireResult::ALL {
            m.acquire_attempts.with_label_values(&[r.label()]);
        }
        for ok in [true, false] {
            m.renewals.with_label_values(&[renewal_label(ok)]);
        }
        for kind in SLICE_WRITES {
            m.endpoint_slice_writes.with_label_values(&[kind]);
        }
        m.docs = match process {
            Some(p) => p.docs.clone(),
            None => b.docs.into_inner().into(),
        };
        Ok(m)
    }

    /// Every metric registered, in registration order, as the registry describes it.
    pub fn descriptors(&self) -> &[MetricDoc] {
        &self.docs
    }

    /// An acquire attempt ended with `result` after `elapsed`.
    pub fn acquire_finished(&self, result: AcquireResult, elapsed: Duration) {
        self.acquire_duration.observe(elapsed.as_secs_f64());
        self.acquire_attempts
            .with_label_values(&[result.label()])
            .inc();
    }

    /// This sidecar became leader after a failover gap of `gap` (see `acquire_wait`).
    pub fn became_leader(&self, gap: Duration) {
        self.acquire_wait.observe(gap.as_secs_f64());
        self.leader_transitions.inc();
    }

    /// A renewal round ended: `ok` if a quorum renewed in time.
    pub fn renewal(&self, ok: bool) {
        self.renewals.with_label_values(&[renewal_label(ok)]).inc();
    }

    /// The leader's release named a successor.
    pub fn handover(&self, reason: HandoverReason) {
        self.handovers.with_label_values(&[reason.label()]).inc();
    }

    /// A term ended, for `reason`.
    pub fn step_down(&self, reason: StepDownReason) {
        self.step_downs.with_label_values(&[reason.label()]).inc();
    }

    /// What the elector last saw of the apps' health (`lease.followApp`).
    pub fn app_health(&self, healthy: Option<bool>, healthy_candidates: Option<u32>) {
        self.app_healthy.set(i64::from(healthy.unwrap_or(true)));
        self.healthy_candidates
            .set(i64::from(healthy_candidates.unwrap_or(0)));
    }

    /// A timer of the election loop slipped beyond the margin.
    pub fn stall_detected(&self) {
        self.stalls.inc();
    }

    /// The watchdog's verdict: stalled until the loop has been on time for a while.
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.set(i64::from(stalled));
    }

    /// The answer-time leadership gauges.
    pub fn set_leadership(&self, g: LeadershipGauges) {
        self.is_leader.set(i64::from(g.is_leader));
        // Milliseconds, as `/leader` shows them.
        self.lease_valid_seconds
            .set(g.valid_for.as_millis() as f64 / 1000.0);
        self.fencing_token
            .set(g.fencing_token.map_or(0, |t| t as i64));
        self.leader_known.set(i64::from(g.leader_known));
    }

    /// Joins `identity` onto the per-endpoint series (`lease_info`).
    pub fn set_identity(&self, identity: &str) {
        self.lease_info.with_label_values(&[identity]).set(1);
    }

    /// Seconds until a quorum counts this sidecar's votes; `None`: not by waiting.
    pub fn set_quorum_wait(&self, wait: Option<Duration>) {
        self.quorum_wait
            .set(wait.map_or(f64::INFINITY, |d| d.as_secs_f64()));
    }

    /// Votes needed, and endpoints that could give one now.
    pub fn set_quorum(&self, needed: usize, usable: usize) {
        self.quorum.set(needed as i64);
        self.redis_endpoints_usable.set(usable as i64);
    }

    /// A configured endpoint: its series start at 0 (down, not quarantined, not eligible, no
    /// clock jump, connect error or command error of any known label value, no command timed),
    /// so dashboards and alerts see every endpoint from the start rather than "No data".
    pub fn new_endpoint(&self, endpoint: &str, known: &EndpointLabels) {
        self.set_redis_up(endpoint, false);
        self.set_redis_quarantined(endpoint, false);
        self.set_redis_eligible(endpoint, false);
        for direction in &known.directions {
            self.redis_clock_jumps
                .with_label_values(&[endpoint, direction]);
        }
        for kind in ATTESTATION_KINDS {
            self.redis_attestations.with_label_values(&[endpoint, kind]);
        }
        for reason in &known.connect_reasons {
            self.redis_connect_errors
                .with_label_values(&[endpoint, reason]);
        }
        for command in &known.commands {
            self.redis_command_duration
                .with_label_values(&[endpoint, command]);
            for kind in &known.command_error_kinds {
                self.redis_command_errors
                    .with_label_values(&[endpoint, command, kind]);
            }
        }
    }

    /// Whether a verified connection to `endpoint` is up.
    pub fn set_redis_up(&self, endpoint: &str, up: bool) {
        self.redis_up
            .with_label_values(&[endpoint])
            .set(i64::from(up));
    }

    /// Whether `endpoint` is quarantined (does not count toward any quorum).
    pub fn set_redis_quarantined(&self, endpoint: &str, quarantined: bool) {
        self.redis_quarantined
            .with_label_values(&[endpoint])
            .set(i64::from(quarantined));
    }

    /// Whether `endpoint`'s vote counts for this sidecar now.
    pub fn set_redis_eligible(&self, endpoint: &str, eligible: bool) {
        self.redis_eligible
            .with_label_values(&[endpoint])
            .set(i64::from(eligible));
    }

    /// A wall-clock jump of `endpoint` in `direction` (forward | backward).
    pub fn clock_jump(&self, endpoint: &str, direction: &str) {
        self.redis_clock_jumps
            .with_label_values(&[endpoint, direction])
            .inc();
    }

    /// An attestation of `endpoint`'s clock watch, of `kind` (one of [`ATTESTATION_KINDS`]).
    pub fn attestation(&self, endpoint: &str, kind: &str) {
        self.redis_attestations
            .with_label_values(&[endpoint, kind])
            .inc();
    }

    /// A command on `endpoint` answered after `elapsed`.
    pub fn command_finished(&self, endpoint: &str, command: &str, elapsed: Duration) {
        self.redis_command_duration
            .with_label_values(&[endpoint, command])
            .observe(elapsed.as_secs_f64());
    }

    /// A command on `endpoint` failed (`kind`: timeout | error | not_connected).
    pub fn command_failed(&self, endpoint: &str, command: &str, kind: &str) {
        self.redis_command_errors
            .with_label_values(&[endpoint, command, kind])
            .inc();
    }

    /// A connection attempt to `endpoint` failed for `reason`.
    pub fn connect_failed(&self, endpoint: &str, reason: &str) {
        self.redis_connect_errors
            .with_label_values(&[endpoint, reason])
            .inc();
    }

    /// The Kubernetes publisher starts: every `verb` × `result` series at 0.
    pub fn new_kube_requests(&self, verbs: &[&str], results: &[&str]) {
        for verb in verbs {
            for result in results {
                self.kube_requests.with_label_values(&[verb, result]);
            }
        }
    }

    /// A Kubernetes API request ended.
    pub fn kube_request(&self, verb: &str, result: &str) {
        self.kube_requests.with_label_values(&[verb, result]).inc();
    }

    /// A write to the EndpointSlice landed; `kind` is one of [`SLICE_WRITES`].
    pub fn slice_written(&self, kind: &'static str) {
        self.endpoint_slice_writes.with_label_values(&[kind]).inc();
    }

    /// A write to the EndpointSlice met a 409.
    pub fn slice_conflict(&self) {
        self.endpoint_slice_conflicts.inc();
    }

    /// A write to the EndpointSlice was refused by the fence.
    pub fn slice_refused(&self) {
        self.endpoint_slice_refusals.inc();
    }

    /// Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_once_per_registry() {
        let registry = Registry::new();
        let m = Metrics::register(&registry, "l").expect("first registration");
        assert!(
            Metrics::register(&registry, "l").is_err(),
            "names are unique"
        );
        m.acquire_finished(AcquireResult::NoQuorum, Duration::from_millis(2));
        m.handover(HandoverReason::StepDown);
        m.renewal(false);
        let text = m.render();
        for line in [
            "redlock_elector_acquire_attempts_total{lease=\"l\",result=\"no_quorum\"} 1",
            "redlock_elector_acquire_attempts_total{lease=\"l\",result=\"acquired\"} 0",
            "redlock_elector_handovers_total{lease=\"l\",reason=\"step_down\"} 1",
            "redlock_elector_renewals_total{lease=\"l\",result=\"failed\"} 1",
            "redlock_elector_renewals_total{lease=\"l\",result=\"ok\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }
}

//! Prometheus metrics: one registry, created once, shared by the elector (which counts events)
//! and the ops server (which sets the answer-time gauges and renders). Label values are bounded:
//! `lease` (one per process), `endpoint` (`host:port`, ≤ 16), `command` and `result` (fixed sets).

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// All metrics of the process.
#[derive(Clone)]
pub struct Metrics {
    /// Where everything is registered; rendered by `/metrics`.
    pub registry: Registry,
    /// 1 while leader, evaluated at scrape time against the deadline.
    pub is_leader: IntGauge,
    /// Times this sidecar became leader.
    pub leader_transitions: prometheus::IntCounter,
    /// Acquire attempts by result: acquired | contended | no_quorum | error.
    pub acquire_attempts: IntCounterVec,
    /// Renewal rounds by result: ok | failed.
    pub renewals: IntCounterVec,
    /// Seconds of validity left, evaluated at scrape time.
    pub lease_valid_seconds: prometheus::Gauge,
    /// Fencing token of the current term; 0 when not leader.
    pub fencing_token: IntGauge,
    /// Duration of acquire attempts (all results).
    pub acquire_duration: Histogram,
    /// Failover gap seen by a new leader: from when the lease was last known held by someone
    /// else (the expiry its last `contended` reply predicted, or the release notice) — or from
    /// the first attempt, when it saw no holder — to this acquisition.
    pub acquire_wait: Histogram,
    /// 1 while this sidecar knows a current holder (itself, or the holder it last observed).
    pub leader_known: IntGauge,
    /// Votes needed for a quorum (⌊N/2⌋+1); compared with `redis_endpoints_usable`.
    pub quorum: IntGauge,
    /// Endpoints that are connected and not quarantined, evaluated at scrape time.
    pub redis_endpoints_usable: IntGauge,
    /// `{lease, identity}` = 1: joins identity and lease onto per-endpoint series. Set by the
    /// ops server, which knows the identity.
    pub lease_info: IntGaugeVec,
    /// 1 while a verified connection to the endpoint is up.
    pub redis_up: IntGaugeVec,
    /// 1 while the endpoint does not count toward a quorum (restart, clock jump, replica,
    /// evicting policy).
    pub redis_quarantined: IntGaugeVec,
    /// 1 while this sidecar counts the endpoint's vote: connected, not quarantined, and its clock
    /// watched long enough (evaluated at scrape time).
    pub redis_eligible: IntGaugeVec,
    /// Wall-clock jumps detected on the endpoint, by direction: forward | backward.
    pub redis_clock_jumps: IntCounterVec,
    /// Per-endpoint command latency.
    pub redis_command_duration: HistogramVec,
    /// Per-endpoint command failures by kind: timeout | error | not_connected.
    pub redis_command_errors: IntCounterVec,
    /// Failed connection attempts (connect, TLS, AUTH, handshake, subscription) per endpoint by
    /// reason: tls | auth | noperm | refused | timeout | dns | other.
    pub redis_connect_errors: IntCounterVec,
    /// 1 while the election loop is stalled (timer slipped beyond the margin).
    pub stalled: IntGauge,
    /// Times the election loop's timer slipped beyond the margin.
    pub stalls: prometheus::IntCounter,
    /// Kubernetes API requests of the `kube` publisher by verb (get | list | patch | create)
    /// and result (ok | conflict | forbidden | not_found | server_error | client_error |
    /// timeout | transport | cancelled).
    pub kube_requests: IntCounterVec,
    /// Graceful handovers this sidecar made as leader (its release named a successor), by
    /// reason: shutdown | step_down | preferred.
    pub handovers: IntCounterVec,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Failover gaps: milliseconds for a graceful handover, up to ttl + retryEvery after a crash.
const WAIT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

impl Metrics {
    /// Create and register every metric for `lease`.
    pub fn new(lease: &str) -> Self {
        let registry = Registry::new();
        let c = |name: &str, help: &str| Opts::new(name, help).const_label("lease", lease);
        let is_leader = IntGauge::with_opts(c(
            "redlock_elector_is_leader",
            "1 while this sidecar holds the lease",
        ))
        .unwrap();
        let leader_transitions = prometheus::IntCounter::with_opts(c(
            "redlock_elector_leader_transitions_total",
            "Times this sidecar became leader; the sum over pods counts every term",
        ))
        .unwrap();
        let acquire_attempts = IntCounterVec::new(
            c(
                "redlock_elector_acquire_attempts_total",
                "Acquire attempts by result",
            ),
            &["result"],
        )
        .unwrap();
        let renewals = IntCounterVec::new(
            c(
                "redlock_elector_renewals_total",
                "Lease renewal rounds by result",
            ),
            &["result"],
        )
        .unwrap();
        let lease_valid_seconds = prometheus::Gauge::with_opts(c(
            "redlock_elector_lease_valid_seconds",
            "Seconds until the lease deadline; 0 when not leader",
        ))
        .unwrap();
        let fencing_token = IntGauge::with_opts(c(
            "redlock_elector_fencing_token",
            "Fencing token of the current term; 0 when not leader",
        ))
        .unwrap();
        let acquire_duration = Histogram::with_opts(
            HistogramOpts::new(
                "redlock_elector_acquire_duration_seconds",
                "Duration of acquire attempts",
            )
            .const_label("lease", lease)
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .unwrap();
        let acquire_wait = Histogram::with_opts(
            HistogramOpts::new(
                "redlock_elector_acquire_wait_seconds",
                "Failover gap seen by a new leader: from when the lease was last known held by another sidecar (or the first failed attempt) to acquiring it",
            )
            .const_label("lease", lease)
            .buckets(WAIT_BUCKETS.to_vec()),
        )
        .unwrap();
        let leader_known = IntGauge::with_opts(c(
            "redlock_elector_leader_known",
            "1 while this sidecar knows a current holder of the lease (itself or the holder it last observed)",
        ))
        .unwrap();
        let quorum = IntGauge::with_opts(c(
            "redlock_elector_quorum",
            "Redis endpoints needed for a quorum (N/2+1)",
        ))
        .unwrap();
        let redis_endpoints_usable = IntGauge::with_opts(c(
            "redlock_elector_redis_endpoints_usable",
            "Redis endpoints that are connected and not quarantined (a quorum needs redlock_elector_quorum)",
        ))
        .unwrap();
        let lease_info = IntGaugeVec::new(
            c(
                "redlock_elector_lease_info",
                "Lease and identity of this sidecar; always 1 (join on job, instance to add lease to per-endpoint series)",
            ),
            &["identity"],
        )
        .unwrap();
        let redis_up = IntGaugeVec::new(
            Opts::new(
                "redlock_elector_redis_up",
                "1 while a verified connection to the endpoint is up",
            ),
            &["endpoint"],
        )
        .unwrap();
        let redis_quarantined = IntGaugeVec::new(
            Opts::new(
                "redlock_elector_redis_quarantined",
                "1 while the endpoint does not count toward a quorum (recent restart, clock jump, replica, evicting maxmemory-policy)",
            ),
            &["endpoint"],
        )
        .unwrap();
        let redis_eligible = IntGaugeVec::new(
            Opts::new(
                "redlock_elector_redis_eligible",
                "1 while this sidecar counts the endpoint's vote toward a quorum (connected, not quarantined, clock watched for ttl + margin)",
            ),
            &["endpoint"],
        )
        .unwrap();
        let redis_clock_jumps = IntCounterVec::new(
            Opts::new(
                "redlock_elector_redis_clock_jumps_total",
                "Wall-clock jumps detected on the endpoint (its TIME moved more or less than the monotonic clock allows)",
            ),
            &["endpoint", "direction"],
        )
        .unwrap();
        let redis_command_duration = HistogramVec::new(
            HistogramOpts::new(
                "redlock_elector_redis_command_duration_seconds",
                "Redis command latency per endpoint",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["endpoint", "command"],
        )
        .unwrap();
        let redis_command_errors = IntCounterVec::new(
            Opts::new(
                "redlock_elector_redis_command_errors_total",
                "Redis command failures per endpoint",
            ),
            &["endpoint", "command", "kind"],
        )
        .unwrap();
        let redis_connect_errors = IntCounterVec::new(
            Opts::new(
                "redlock_elector_redis_connect_errors_total",
                "Failed connection attempts per endpoint by reason (tls, auth, noperm, refused, timeout, dns, other)",
            ),
            &["endpoint", "reason"],
        )
        .unwrap();
        let stalled = IntGauge::with_opts(c(
            "redlock_elector_stalled",
            "1 while the election loop is stalled (timer slipped)",
        ))
        .unwrap();
        let stalls = prometheus::IntCounter::with_opts(c(
            "redlock_elector_stalls_total",
            "Times the election loop's timer slipped beyond the stall margin",
        ))
        .unwrap();
        let kube_requests = IntCounterVec::new(
            Opts::new(
                "redlock_elector_kube_requests_total",
                "Kubernetes API requests by verb and result",
            ),
            &["verb", "result"],
        )
        .unwrap();
        let handovers = IntCounterVec::new(
            c(
                "redlock_elector_handovers_total",
                "Graceful handovers by the leader (its release notice names a successor), by reason",
            ),
            &["reason"],
        )
        .unwrap();
        for reason in ["shutdown", "step_down", "preferred"] {
            handovers.with_label_values(&[reason]);
        }
        let build_info = IntGaugeVec::new(
            Opts::new("redlock_elector_build_info", "Build information; always 1"),
            &["version"],
        )
        .unwrap();
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        for result in ["acquired", "contended", "no_quorum", "error"] {
            acquire_attempts.with_label_values(&[result]);
        }
        for result in ["ok", "failed"] {
            renewals.with_label_values(&[result]);
        }
        // Registration fails only on duplicate names, which this fixed list does not have.
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(is_leader.clone()),
            Box::new(leader_transitions.clone()),
            Box::new(acquire_attempts.clone()),
            Box::new(renewals.clone()),
            Box::new(lease_valid_seconds.clone()),
            Box::new(fencing_token.clone()),
            Box::new(acquire_duration.clone()),
            Box::new(acquire_wait.clone()),
            Box::new(leader_known.clone()),
            Box::new(quorum.clone()),
            Box::new(redis_endpoints_usable.clone()),
            Box::new(lease_info.clone()),
            Box::new(redis_up.clone()),
            Box::new(redis_quarantined.clone()),
            Box::new(redis_eligible.clone()),
            Box::new(redis_clock_jumps.clone()),
            Box::new(redis_command_duration.clone()),
            Box::new(redis_command_errors.clone()),
            Box::new(redis_connect_errors.clone()),
            Box::new(stalled.clone()),
            Box::new(stalls.clone()),
            Box::new(kube_requests.clone()),
            Box::new(handovers.clone()),
            Box::new(build_info),
        ];
        for col in collectors {
            registry.register(col).unwrap();
        }
        Metrics {
            registry,
            is_leader,
            leader_transitions,
            acquire_attempts,
            renewals,
            lease_valid_seconds,
            fencing_token,
            acquire_duration,
            acquire_wait,
            leader_known,
            quorum,
            redis_endpoints_usable,
            lease_info,
            redis_up,
            redis_quarantined,
            redis_eligible,
            redis_clock_jumps,
            redis_command_duration,
            redis_command_errors,
            redis_connect_errors,
            stalled,
            stalls,
            kube_requests,
            handovers,
        }
    }

    /// Prometheus text exposition of everything registered.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metric families.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }
}

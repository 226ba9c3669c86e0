//! Label values of the fixed label sets, spelled once, and the answer-time gauges' input.

use std::time::Duration;

/// The result of an acquire attempt: the `result` label of `acquire_attempts_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcquireResult {
    /// Held, with a fencing token written to a quorum.
    Acquired,
    /// Someone else owns a quorum of nodes.
    Contended,
    /// Nobody reached a quorum.
    NoQuorum,
    /// No node answered.
    Error,
}

impl AcquireResult {
    /// Every result, so that each series exists (at 0) from the start.
    pub const ALL: [AcquireResult; 4] = [
        AcquireResult::Acquired,
        AcquireResult::Contended,
        AcquireResult::NoQuorum,
        AcquireResult::Error,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            AcquireResult::Acquired => "acquired",
            AcquireResult::Contended => "contended",
            AcquireResult::NoQuorum => "no_quorum",
            AcquireResult::Error => "error",
        }
    }
}

/// Why a leader handed over gracefully: the `reason` label of `handovers_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandoverReason {
    /// SIGTERM / SIGINT.
    Shutdown,
    /// `POST /leader/step-down`.
    StepDown,
    /// A better candidate had been ready for the settle time.
    Preferred,
    /// The command of `redlock-elector run` ended while leading.
    ChildExited,
    /// The app had been unhealthy for the grace (`lease.followApp`).
    AppUnhealthy,
    /// `lease.shards`: this sidecar led more shards than its share, and handed one to a
    /// candidate that led fewer.
    Balance,
}

impl HandoverReason {
    /// Every reason, so that each series exists (at 0) from the start.
    pub const ALL: [HandoverReason; 6] = [
        HandoverReason::Shutdown,
        HandoverReason::StepDown,
        HandoverReason::Preferred,
        HandoverReason::ChildExited,
        HandoverReason::AppUnhealthy,
        HandoverReason::Balance,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            HandoverReason::Shutdown => "shutdown",
            HandoverReason::StepDown => "step_down",
            HandoverReason::Preferred => "preferred",
            HandoverReason::ChildExited => "child_exited",
            HandoverReason::AppUnhealthy => "app_unhealthy",
            HandoverReason::Balance => "balance",
        }
    }
}

/// The `result` label of `renewals_total`, by whether the round reached a quorum in time.
pub(super) fn renewal_label(ok: bool) -> &'static str {
    if ok { "ok" } else { "failed" }
}

/// The leadership gauges as evaluated at scrape time.
#[derive(Clone, Copy, Debug)]
pub struct LeadershipGauges {
    /// Whether this sidecar leads now.
    pub is_leader: bool,
    /// How long the lease is provably held; zero when not leader.
    pub valid_for: Duration,
    /// The term's fencing token, when leading.
    pub fencing_token: Option<u64>,
    /// Whether a current holder is known.
    pub leader_known: bool,
}

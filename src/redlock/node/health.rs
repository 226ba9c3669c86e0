//! A node's health: what the handshake and the INFO refreshes learned (restart quarantine,
//! replica, evicting policy) and its clock watch, with the log lines and gauges they drive.

use tokio::time::Instant;

use super::info::{Exclusion, Info, classify, exclusion_changed, keep_running_quarantine};
use super::{Node, lock, mono_us};
use crate::redlock::clock::{self, Reading, Seen};

/// Why a node's vote does not count (yet), for the log, `/leader` and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Wait {
    /// This sidecar is still watching the node's clock (ttl + margin after its first reading):
    /// a fresh sidecar, a node that restarted, or a long gap between readings.
    ClockWatch,
    /// The node's clock jumped; quarantined for ttl + margin from the detection.
    ClockJump,
    /// The node restarted recently (uptime below ttl + 1 s, or a new run_id).
    RestartQuarantine,
    /// No verified connection.
    Unreachable,
    /// The node is a replica: never counts.
    Replica,
    /// The node's maxmemory-policy can evict keys: never counts.
    EvictionPolicy,
}

impl Wait {
    /// The name in logs, `/leader` and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Wait::ClockWatch => "clock_watch",
            Wait::ClockJump => "clock_jump",
            Wait::RestartQuarantine => "restart_quarantine",
            Wait::Unreachable => "unreachable",
            Wait::Replica => "replica",
            Wait::EvictionPolicy => "eviction_policy",
        }
    }
}

/// What the handshake learned about the node.
#[derive(Clone, Debug, Default)]
pub(super) struct Health {
    /// run_id of the server behind the current connection.
    pub(super) run_id: Option<String>,
    /// Why the node does not count, if it does not.
    pub(super) exclusion: Option<Exclusion>,
    /// The node's clock as this sidecar has watched it.
    pub(super) clock: clock::Watch,
    /// When the latest clock reading was sent (any reply's `TIME`): the maintenance task reads
    /// the clock itself only when no other reply did for a while.
    pub(super) last_reading: Option<Instant>,
}

impl Node {
    /// Take a reading of the node's clock; a jump quarantines the node (logged and counted).
    /// Returns the reading's blind band ([`clock::Watch::band_us`]): the largest step of the
    /// node's clock this reading may have missed.
    pub(super) fn observe(
        &self,
        run_id: &str,
        node_us: i64,
        sent: Instant,
        received: Instant,
    ) -> std::time::Duration {
        let reading = Reading {
            node_us,
            sent_us: mono_us(sent),
            received_us: mono_us(received),
        };
        let (seen, band_us) = {
            let mut h = lock(&self.health);
            // Only a reading that can be a base keeps the maintenance task from reading the
            // clock itself: a slow reply must not stretch the gap between bases.
            if reading.rtt_us() <= self.clock_policy.base_rtt_us {
                h.last_reading = h.last_reading.max(Some(sent));
            }
            let seen = h.clock.observe(run_id, reading, &self.clock_policy);
            (seen, h.clock.band_us())
        };
        if matches!(seen, Seen::First | Seen::Resumed { .. }) {
            // A watch began: the attestation task asks for a vouch of it.
            self.attest_wake.notify_one();
        }
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
            self.metrics.clock_jump(&self.endpoint.name, direction);
        }
        std::time::Duration::from_micros(band_us.max(0) as u64)
    }

    /// Take a fresh INFO reading: classify the node, keeping a running quarantine, and log
    /// changes of kind (not every refresh of a running quarantine's end).
    pub(super) fn apply_info(&self, info: &Info) {
        let now = Instant::now();
        let mut h = lock(&self.health);
        let fresh = classify(info, h.run_id.as_deref(), self.ttl, now);
        let exclusion = keep_running_quarantine(h.exclusion.as_ref(), fresh, now);
        let run_id_changed = h.run_id.as_deref().is_some_and(|r| r != info.run_id);
        if exclusion_changed(h.exclusion.as_ref(), exclusion.as_ref(), run_id_changed) {
            self.log_exclusion(exclusion.as_ref(), info, now);
        }
        h.exclusion = exclusion;
        h.run_id = Some(info.run_id.clone());
    }

    fn log_exclusion(&self, exclusion: Option<&Exclusion>, info: &Info, now: Instant) {
        match exclusion {
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

    /// Why this node's vote does not count at `now`, if it does not, and when it will (if
    /// nothing changes meanwhile; `None`: not by waiting).
    pub fn wait(&self, now: Instant) -> Option<(Wait, Option<Instant>)> {
        self.wait_for(None, now)
    }

    /// [`Node::wait`] for one lease of the process ([`Node::counts_for`]), or for any (`None`).
    pub fn wait_for(&self, lease: Option<u64>, now: Instant) -> Option<(Wait, Option<Instant>)> {
        if !self.is_up() {
            return Some((Wait::Unreachable, None));
        }
        let from = match lease {
            Some(lease) => self.counts_from_for(lease),
            None => self.counts_from(),
        };
        if from.is_some_and(|from| now >= from) {
            return None;
        }
        let h = lock(&self.health);
        let reason = match &h.exclusion {
            Some(Exclusion::Replica) => return Some((Wait::Replica, None)),
            Some(Exclusion::Evicting(_)) => return Some((Wait::EvictionPolicy, None)),
            Some(Exclusion::Restarted { until })
                if self.quarantine == super::Quarantine::Enforced
                    && super::info::quarantine_decides(*until, now, from) =>
            {
                Wait::RestartQuarantine
            }
            _ if self.clock_policy.enabled && h.clock.quarantined_at(mono_us(now)) => {
                Wait::ClockJump
            }
            _ => Wait::ClockWatch,
        };
        Some((reason, from))
    }

    /// Refresh the quarantine and eligibility gauges (called at scrape time).
    pub fn publish_quarantine(&self, now: Instant) {
        let name = self.endpoint.name.as_str();
        self.metrics
            .set_redis_quarantined(name, self.quarantined(now));
        self.metrics
            .set_redis_eligible(name, self.is_up() && self.counts(now));
    }
}

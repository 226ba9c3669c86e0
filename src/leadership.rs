//! Leadership state as the elector publishes it, and the view every publisher answers with.
//!
//! Leadership is a monotonic deadline, not a flag: [`Leadership::view`] evaluates `now < deadline`
//! at the moment of answering, so a sidecar that was paused past its deadline never says
//! "leader", even before the elector's own timer has fired.
//!
//! [`Shared`] is what the answering publishers ([`crate::api`], [`crate::ops`]) read: the
//! elector's watches plus the nodes' eligibility, turned into a [`View`] at answer time.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::redlock::candidates::Rank;

mod any;
pub use any::{Led, any_led};

/// The current term while this sidecar leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    /// Fencing token of the term.
    pub token: u64,
    /// Until when the lease is provably held.
    pub deadline: Instant,
}

/// Why this sidecar stopped leading (for logs and Kubernetes Events).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepDownReason {
    /// `POST /leader/step-down`.
    Requested,
    /// The deadline passed without a renewal reaching a quorum.
    RenewalFailed,
    /// The election loop's timer slipped (CPU starvation, pause).
    Stalled,
    /// SIGTERM / SIGINT.
    Shutdown,
    /// A better candidate (by `lease.prefer`) had been ready for the settle time.
    Preferred,
    /// The command of `redlock-elector run` ended while this sidecar led: it exited by itself,
    /// or the guard stopped it as the term's deadline came near.
    ChildExited,
    /// The app had been unhealthy for `app.unhealthyGrace` and a candidate's app was healthy
    /// (`lease.followApp`).
    AppUnhealthy,
    /// `lease.shards`: the shard went to a candidate leading fewer shards.
    Balance,
}

/// A term that ended, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ended {
    /// The ended term's fencing token.
    pub token: u64,
    /// Why it ended.
    pub reason: StepDownReason,
}

/// What the elector publishes on its `watch` channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    /// Starts at 1; +1 whenever `is_leader`, `leader` or `fencing_token` changes.
    pub version: u64,
    /// Set while this sidecar holds the lease.
    pub term: Option<Term>,
    /// The holder's identity as last observed (own identity while leading).
    pub leader: Option<String>,
    /// Wall-clock time of the last change of version (`last_update` of `GET /`).
    pub changed_at: std::time::SystemTime,
    /// The last term this sidecar led that ended, and why: published with the step-down
    /// itself, so a reader never sees one without the other.
    pub ended: Option<Ended>,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership {
            version: 1,
            term: None,
            leader: None,
            changed_at: std::time::SystemTime::now(),
            ended: None,
        }
    }
}

/// The answer to `GET /leader`, also sent on the SSE stream. Every field is always present
/// (`null` when unknown).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct View {
    /// Lease name.
    pub lease: String,
    /// This sidecar's identity.
    pub identity: String,
    /// Whether this sidecar leads right now.
    pub is_leader: bool,
    /// The holder as last observed.
    pub leader: Option<String>,
    /// Token of the current term; null when not leader.
    pub fencing_token: Option<u64>,
    /// Milliseconds until the deadline; 0 when not leader.
    pub valid_for_ms: u64,
    /// Change counter.
    pub version: u64,
    /// Whether this sidecar's votes from a quorum of nodes count right now (so it could win):
    /// false while it watches the nodes' clocks after starting, or while nodes are quarantined.
    pub eligible: bool,
    /// Per Redis endpoint (`host:port`): whether its vote counts for this sidecar right now.
    pub nodes: BTreeMap<String, bool>,
    /// Why a quorum of nodes does not count this sidecar's votes yet: `clock_watch` (a fresh
    /// sidecar watches each node's clock for ttl + margin; a graceful handover does not wait
    /// for it), `clock_jump`, `restart_quarantine`, `unreachable`, `replica` or
    /// `eviction_policy`; null when a quorum counts.
    pub waiting_for: Option<&'static str>,
    /// Milliseconds until a quorum counts if nothing changes meanwhile: 0 when it counts now,
    /// null when waiting will not do it (nodes unreachable, replicas, evicting).
    pub quorum_counts_in_ms: Option<u64>,
    /// The leader's rank (priority, revision, creation time) as its candidate record shows it;
    /// null while unknown.
    pub leader_rank: Option<Rank>,
    /// Whether the leader sees a better candidate (by `lease.prefer`) ready and settling: a
    /// preferred handover is pending.
    pub handover_pending: bool,
    /// Whether this sidecar's own candidate record says ready: a quorum counts its votes, or
    /// would on a graceful release's proof (a fresh sidecar still watching the nodes' clocks),
    /// and, in Kubernetes, its pod is Ready (with `lease.followApp`: its app is healthy). Only a
    /// ready candidate is named as a successor.
    pub candidate_ready: bool,
    /// With `lease.followApp`: whether this sidecar's app is healthy (its app containers are
    /// running and ready, or `app.healthUrl` answers); null when leadership does not follow the
    /// app.
    pub app_healthy: Option<bool>,
    /// With `lease.followApp`: whether the leader's app is healthy, as far as its candidate
    /// record says (this sidecar's own while it leads); null when unknown or off.
    pub leader_app_healthy: Option<bool>,
    /// With `lease.followApp`: how many other candidates' apps are healthy (their records say
    /// ready). A leader whose app is unhealthy hands over to one of them after
    /// `app.unhealthyGrace`; with none it keeps the lease. Null when off.
    pub healthy_candidates: Option<u32>,
}

/// What `/leader` shows about candidates, as the elector last saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CandidacyView {
    /// This sidecar's rank, once known.
    pub rank: Option<Rank>,
    /// The current leader's rank as its record shows it (own rank while leading).
    pub leader_rank: Option<Rank>,
    /// Whether the leader sees a better candidate that is ready and settling.
    pub handover_pending: bool,
    /// Whether this sidecar's own record, as last written, says ready.
    pub candidate_ready: bool,
    /// `lease.followApp`: whether this sidecar's app is healthy; `None` when off.
    pub app_healthy: Option<bool>,
    /// `lease.followApp`: whether the leader's app is healthy, as its record says.
    pub leader_app_healthy: Option<bool>,
    /// `lease.followApp`: other candidates whose records say ready (their apps healthy).
    pub healthy_candidates: Option<u32>,
    /// The candidates whose records, as last read, say ready (this sidecar's own included),
    /// by identity, with their ranks: whom `lease.shards` balances over, newest revision first.
    pub ready: Vec<(String, Rank)>,
}

/// Which Redis nodes' votes count for this sidecar at a given instant, and when a quorum will.
pub type Eligibility = Arc<dyn Fn(Instant) -> Nodes + Send + Sync>;

/// The nodes as one answer shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Nodes {
    /// Endpoint → whether its vote counts now.
    pub counts: BTreeMap<String, bool>,
    /// Why a quorum does not count yet (`clock_watch`, `clock_jump`, `restart_quarantine`,
    /// `unreachable`, `replica`, `eviction_policy`); `None` when it does.
    pub waiting_for: Option<&'static str>,
    /// Milliseconds until a quorum counts if nothing changes: 0 when it does now; `None` when
    /// waiting will not do it (nodes down, replicas).
    pub quorum_in_ms: Option<u64>,
}

/// What every answering publisher reads (the API and the ops server).
#[derive(Clone)]
pub struct Shared {
    /// Lease name for the answers.
    pub lease: Arc<str>,
    /// Own identity for the answers.
    pub identity: Arc<str>,
    /// Leadership as the elector publishes it.
    pub leadership: watch::Receiver<Leadership>,
    /// The nodes' eligibility, for the `eligible` and `nodes` fields.
    pub eligibility: Eligibility,
    /// The leader's rank and whether a preferred handover is pending.
    pub candidacy: watch::Receiver<CandidacyView>,
}

impl Shared {
    /// The answer right now.
    pub fn view(&self) -> View {
        let now = Instant::now();
        let view = self
            .leadership
            .borrow()
            .view(&self.lease, &self.identity, now);
        self.with_nodes(view, now)
    }

    /// Fill in the nodes' eligibility and the candidacy at `now`.
    pub fn with_nodes(&self, mut view: View, now: Instant) -> View {
        let nodes = (self.eligibility)(now);
        view.nodes = nodes.counts;
        view.waiting_for = nodes.waiting_for;
        view.quorum_counts_in_ms = nodes.quorum_in_ms;
        let counting = view.nodes.values().filter(|&&c| c).count();
        view.eligible = counting >= crate::redlock::math::quorum(view.nodes.len());
        let c = self.candidacy.borrow();
        view.candidate_ready = c.candidate_ready;
        view.app_healthy = c.app_healthy;
        view.healthy_candidates = c.healthy_candidates;
        // The rank shown is the current leader's: none while nobody is known to lead.
        if view.leader.is_some() {
            view.leader_rank = c.leader_rank.clone();
            view.handover_pending = c.handover_pending;
            view.leader_app_healthy = c.leader_app_healthy;
        }
        view
    }
}

impl Leadership {
    /// The state as it holds at `now`. A term whose deadline has passed reads as the step-down
    /// the elector is about to publish: not leader, holder unknown, version + 1.
    pub fn at(&self, now: Instant) -> Leadership {
        match self.term {
            Some(t) if now >= t.deadline => Leadership {
                version: self.version + 1,
                term: None,
                leader: None,
                changed_at: std::time::SystemTime::now()
                    .checked_sub(now.saturating_duration_since(t.deadline))
                    .unwrap_or(self.changed_at),
                // The elector has not said why yet (it will: renewal failed, or a stall).
                ended: self.ended,
            },
            _ => self.clone(),
        }
    }

    /// The answer at `now`.
    pub fn view(&self, lease: &str, identity: &str, now: Instant) -> View {
        let s = self.at(now);
        View {
            lease: lease.to_string(),
            identity: identity.to_string(),
            is_leader: s.term.is_some(),
            leader: s.leader.clone(),
            fencing_token: s.term.map(|t| t.token),
            valid_for_ms: s.term.map_or(0, |t| {
                t.deadline.saturating_duration_since(now).as_millis() as u64
            }),
            version: s.version,
            eligible: false,
            nodes: BTreeMap::new(),
            waiting_for: None,
            quorum_counts_in_ms: None,
            leader_rank: None,
            handover_pending: false,
            candidate_ready: false,
            app_healthy: None,
            leader_app_healthy: None,
            healthy_candidates: None,
        }
    }

    /// Apply a change; bumps the version iff an observable field changed.
    pub fn with(&self, term: Option<Term>, leader: Option<String>) -> Leadership {
        let changed = self.term.map(|t| t.token) != term.map(|t| t.token)
            || self.term.is_some() != term.is_some()
            || self.leader != leader;
        Leadership {
            version: self.version + u64::from(changed),
            term,
            leader,
            changed_at: if changed {
                std::time::SystemTime::now()
            } else {
                self.changed_at
            },
            ended: self.ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn expired_term_reads_as_step_down() {
        let now = Instant::now();
        let s = Leadership::default().with(
            Some(Term {
                token: 7,
                deadline: now + Duration::from_millis(100),
            }),
            Some("a".into()),
        );
        assert_eq!(s.version, 2);
        let v = s.view("l", "a", now);
        assert!(v.is_leader);
        assert_eq!(v.fencing_token, Some(7));
        assert_eq!(v.valid_for_ms, 100);
        let late = s.view("l", "a", now + Duration::from_millis(100));
        assert!(!late.is_leader);
        assert_eq!(late.fencing_token, None);
        assert_eq!(late.leader, None);
        assert_eq!(late.valid_for_ms, 0);
        assert_eq!(late.version, 3);
        // The elector's own step-down publishes the same version.
        assert_eq!(s.with(None, None).version, 3);
    }

    #[test]
    fn deadline_moves_do_not_bump_version() {
        let now = Instant::now();
        let t = Term {
            token: 1,
            deadline: now,
        };
        let s = Leadership::default().with(Some(t), Some("a".into()));
        let s2 = s.with(
            Some(Term {
                deadline: now + Duration::from_secs(1),
                ..t
            }),
            Some("a".into()),
        );
        assert_eq!(s.version, s2.version);
        assert_eq!(s2.with(Some(t), Some("b".into())).version, s.version + 1);
    }
}

//! This sidecar as a candidate: its rank and readiness, the record it writes beside each
//! attempt, watch and renewal, and what `/leader` shows about candidates.

use super::Machine;
use super::io::{Command, Cx, Record};
use crate::leadership::CandidacyView;
use crate::redlock::candidates::{self, Candidate, Rank};

/// A leader's record lives for this many renewal periods, a follower's for this many watch
/// periods: one missed refresh does not make a candidate vanish.
pub(super) const RECORD_LIFE_PERIODS: u32 = 3;

impl Machine {
    /// This sidecar's rank, once its pod has been read (always outside Kubernetes).
    pub(super) fn rank(&self) -> Option<Rank> {
        self.standing.known.then(|| Rank {
            priority: self.preference.priority,
            revision: self.standing.revision.clone(),
            created: self.standing.created,
        })
    }

    /// The own record for a round, and whether it says ready: the pod is Ready and, if named,
    /// this sidecar could win (a quorum counts its votes, or would on a release proof).
    /// `leading`: `Some(pending)` for a leader's renewal.
    pub(super) fn own_record(&self, cx: &Cx<'_>, leading: Option<bool>) -> (Record, bool) {
        let period = match leading {
            Some(_) => self.timing.renew_every,
            None => cx.nodes.watch_period,
        };
        let life = period * RECORD_LIFE_PERIODS;
        let Some(rank) = self.rank() else {
            return (
                Record {
                    fields: None,
                    life,
                    read_after: None,
                },
                false,
            );
        };
        let ready = self.standing_ready() && cx.nodes.successor_ready;
        let fields = candidates::fields(candidates::OwnFields {
            rank: &rank,
            ready,
            pending: leading.unwrap_or(false),
        });
        let record = Record {
            fields: Some(fields),
            life,
            read_after: None,
        };
        (record, ready)
    }

    /// Keep a read (if a quorum answered) and update what `/leader` shows. `ready`: whether the
    /// own record, as written, says ready; `leading`: `Some(pending)` while leading.
    pub(super) fn apply_candidates(
        &mut self,
        read: Option<Vec<Candidate>>,
        ready: bool,
        leading: Option<bool>,
    ) {
        if let Some(c) = read {
            self.last_candidates = c;
        }
        let rank = self.rank();
        let follow = self.preference.follow_app.is_some();
        let app_healthy = follow.then_some(self.standing.app_healthy);
        let healthy_candidates = follow.then(|| self.healthy_candidates() as u32);
        let ready_ids: Vec<(String, Rank)> = self
            .last_candidates
            .iter()
            .filter(|c| c.ready_for.is_some())
            .map(|c| (c.identity.clone(), c.rank.clone()))
            .collect();
        let view = match leading {
            Some(pending) => CandidacyView {
                leader_rank: rank.clone(),
                rank,
                handover_pending: pending,
                candidate_ready: ready,
                app_healthy,
                leader_app_healthy: app_healthy,
                healthy_candidates,
                ready: ready_ids,
            },
            None => {
                let record = self
                    .leader
                    .as_ref()
                    .and_then(|l| self.last_candidates.iter().find(|c| c.identity == *l));
                CandidacyView {
                    rank,
                    leader_rank: record.map(|c| c.rank.clone()),
                    handover_pending: record.is_some_and(|c| c.pending),
                    candidate_ready: ready,
                    app_healthy,
                    // A leader's record says ready while its app is healthy.
                    leader_app_healthy: record.filter(|_| follow).map(|c| c.ready_for.is_some()),
                    healthy_candidates,
                    ready: ready_ids,
                }
            }
        };
        // The driver publishes it only if it changed.
        self.push(Command::Candidacy(view));
    }
}

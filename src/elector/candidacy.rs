//! This sidecar as a candidate: its rank and readiness, the candidate records it writes and
//! reads beside each attempt and renewal, and what `/leader` shows about them.

use tokio::time::Instant;

use super::Elector;
use crate::leadership::CandidacyView;
use crate::redlock::candidates::{self, Candidate, Rank};
use crate::redlock::{Observed, OwnRecord};

/// A leader's record lives for this many renewal periods, a follower's for this many retry
/// periods: one missed refresh does not make a candidate vanish.
const RECORD_LIFE_PERIODS: u32 = 3;

/// A read of the candidates and what this sidecar's own record said.
#[derive(Debug, Default)]
pub(super) struct CandidateRead {
    /// The candidates a quorum of nodes holds; `None` if fewer than a quorum answered (or no
    /// read was made).
    pub(super) candidates: Option<Vec<Candidate>>,
    /// Whether the own record, as written, says ready.
    pub(super) ready: bool,
}

impl CandidateRead {
    /// No read; the own record's readiness as given (a leader always counts as ready).
    pub(super) fn none(ready: bool) -> Self {
        CandidateRead {
            candidates: None,
            ready,
        }
    }
}

/// Where this sidecar sits when it writes its record and updates what `/leader` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seat {
    /// This sidecar leads: its own rank is the leader's. `pending`: it sees a better candidate
    /// ready and settling (a preferred handover is pending).
    Leading { pending: bool },
    /// Someone else (or nobody) leads.
    Following,
}

impl Elector {
    /// This sidecar's rank, once its pod has been read (always outside Kubernetes).
    pub(super) fn rank(&self) -> Option<Rank> {
        let s = self.standing.borrow();
        s.known.then(|| Rank {
            priority: self.preference.priority,
            revision: s.revision.clone(),
            created: s.created,
        })
    }

    /// Whether this sidecar is a ready candidate now: its pod is Ready and, if named, it could
    /// win: a quorum of nodes counts its votes, or would on a graceful release's proof (a fresh
    /// sidecar still watching the nodes' clocks takes a handover at once; a successor that
    /// cannot win is never named).
    fn ready(&self) -> bool {
        let ready = {
            let s = self.standing.borrow();
            s.known && s.ready
        };
        ready && self.redlock.eligible_as_successor(Instant::now())
    }

    /// Refresh the own candidate record (once the rank is known) and read everyone's.
    pub(super) async fn read_candidates(&self, seat: Seat) -> CandidateRead {
        let (period, pending) = match seat {
            Seat::Leading { pending } => (self.timing.renew_every, pending),
            Seat::Following => (self.watch_period(), false),
        };
        let life = period * RECORD_LIFE_PERIODS;
        match self.rank() {
            Some(rank) => {
                let ready = self.ready();
                let fields = candidates::fields(candidates::OwnFields {
                    rank: &rank,
                    ready,
                    pending,
                });
                let candidates = self
                    .redlock
                    .candidates(
                        Some(OwnRecord {
                            identity: &self.identity,
                            fields: &fields,
                        }),
                        life,
                    )
                    .await;
                // Written only if a quorum took it; either way, not ready is the safe answer.
                let ready = ready && candidates.is_some();
                CandidateRead { candidates, ready }
            }
            None => CandidateRead {
                candidates: self.redlock.candidates(None, life).await,
                ready: false,
            },
        }
    }

    /// A follower's refresh period ([`crate::redlock::Redlock::watch_period`]); its record
    /// lives for [`RECORD_LIFE_PERIODS`] of them.
    pub(super) fn watch_period(&self) -> std::time::Duration {
        self.redlock.watch_period(self.timing.retry_every)
    }

    /// A follower's watch round ([`crate::redlock::Redlock::watch`]): who holds the lease on a
    /// quorum (if anyone), and everyone's records with the own one refreshed (once the rank is
    /// known), in one script call per node.
    pub(super) async fn watch_lease(&self) -> (Option<Observed>, CandidateRead) {
        let life = self.watch_period() * RECORD_LIFE_PERIODS;
        let rank = self.rank();
        let ready = rank.is_some() && self.ready();
        let fields = rank.as_ref().map(|rank| {
            candidates::fields(candidates::OwnFields {
                rank,
                ready,
                pending: false,
            })
        });
        let mine = fields.as_ref().map(|fields| OwnRecord {
            identity: &self.identity,
            fields,
        });
        let watched = self.redlock.watch(mine, life).await;
        // Written only if a quorum took it; either way, not ready is the safe answer.
        let ready = ready && watched.candidates.is_some();
        let read = CandidateRead {
            candidates: watched.candidates,
            ready,
        };
        (watched.held, read)
    }

    /// A fresh read of everyone's records without writing the own one (a leader choosing its
    /// successor); keeps the last read if too few nodes answer.
    pub(super) async fn refresh_candidates(&mut self) {
        let life = self.timing.retry_every * RECORD_LIFE_PERIODS;
        if let Some(c) = self.redlock.candidates(None, life).await {
            self.last_candidates = c;
        }
    }

    /// Keep a read (if a quorum answered) and update what `/leader` shows.
    pub(super) fn apply_candidates(&mut self, read: CandidateRead, seat: Seat) {
        if let Some(c) = read.candidates {
            self.last_candidates = c;
        }
        let rank = self.rank();
        let view = match seat {
            Seat::Leading { pending } => CandidacyView {
                leader_rank: rank.clone(),
                rank,
                handover_pending: pending,
                candidate_ready: read.ready,
            },
            Seat::Following => {
                let leader = self.tx.borrow().leader.clone();
                let record =
                    leader.and_then(|l| self.last_candidates.iter().find(|c| c.identity == l));
                CandidacyView {
                    rank,
                    leader_rank: record.map(|c| c.rank.clone()),
                    handover_pending: record.is_some_and(|c| c.pending),
                    candidate_ready: read.ready,
                }
            }
        };
        self.candidacy.send_if_modified(|v| {
            let changed = *v != view;
            *v = view;
            changed
        });
    }
}

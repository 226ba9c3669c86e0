//! What each node did with a named successor's attempt that lost: the one case where a graceful
//! handover turns into a ttl-long gap, so the log says why, node by node.

use std::sync::Arc;

use super::{Mode, Vote};
use crate::redlock::node::Node;

/// What one node did with an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Granted, and the yes counted.
    Counted,
    /// Granted on the release proof, but the proof could not be taken at that reading.
    ProofNotTaken,
    /// Granted, but the node does not count yet (no proof was asked for).
    NotCounting,
    /// Granted after the attempt was already lost.
    Late,
    /// Denied: someone's key is there.
    Held,
    /// Denied with the key free: reserved for someone else, or no proof for this sidecar.
    NoProof,
    /// No answer.
    NoAnswer,
}

impl Outcome {
    /// The node's `vote` on an attempt in `mode`; `counted`: whether a yes counted, `None` for
    /// a reply that came after the decision.
    pub(super) fn of(mode: Mode, vote: &Vote, counted: Option<bool>) -> Self {
        match (vote, counted) {
            (Vote::Unknown, _) => Outcome::NoAnswer,
            (Vote::Yes { .. }, Some(true)) => Outcome::Counted,
            (Vote::Yes { proved: true, .. }, Some(false)) if mode == Mode::Proof => {
                Outcome::ProofNotTaken
            }
            (Vote::Yes { .. }, Some(false)) => Outcome::NotCounting,
            (Vote::Yes { .. }, None) => Outcome::Late,
            (Vote::No(d), _) if !d.holder.is_empty() => Outcome::Held,
            (Vote::No(_), _) => Outcome::NoProof,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Counted => "granted",
            Outcome::ProofNotTaken => "granted on the proof, proof not taken",
            Outcome::NotCounting => "granted, does not count yet",
            Outcome::Late => "granted after the attempt was lost",
            Outcome::Held => "held",
            Outcome::NoProof => "free, no proof for this sidecar",
            Outcome::NoAnswer => "no answer",
        }
    }
}

/// Each node's answer, in the nodes' order, for the log.
fn answers(nodes: &[Arc<Node>], outcomes: &[Outcome]) -> String {
    let nodes: Vec<String> = nodes
        .iter()
        .zip(outcomes)
        .map(|(n, o)| format!("{}: {}", n.name(), o.as_str()))
        .collect();
    nodes.join(", ")
}

/// Warn that a named successor's attempt lost, with each node's answer.
pub(super) fn log_lost_named(nodes: &[Arc<Node>], outcomes: &[Outcome]) {
    tracing::warn!(
        nodes = %answers(nodes, outcomes),
        "named by the release notice, but the attempt did not win a quorum; if a quorum does not count this sidecar's votes yet, it leads when its clock watch ends or another follower does"
    );
}

/// At debug level, any other attempt that could have won and lost, with each node's answer:
/// why a follower that counts a quorum still does not lead.
pub(super) fn log_lost(nodes: &[Arc<Node>], outcomes: &[Outcome]) {
    tracing::debug!(
        nodes = %answers(nodes, outcomes),
        "the attempt did not win a quorum"
    );
}

#[cfg(test)]
mod tests {
    use super::super::votes::Denial;
    use super::*;

    #[test]
    fn each_answer_is_named_for_the_log() {
        let yes = |proved| Vote::Yes { epoch: 0, proved };
        let no = |holder: &str| {
            Vote::No(Denial {
                holder: holder.into(),
                pttl: None,
                epoch: 0,
            })
        };
        let of = Outcome::of;
        assert_eq!(of(Mode::Take, &yes(false), Some(true)), Outcome::Counted);
        assert_eq!(
            of(Mode::Proof, &yes(true), Some(false)),
            Outcome::ProofNotTaken
        );
        assert_eq!(
            of(Mode::Proof, &yes(false), Some(false)),
            Outcome::NotCounting
        );
        assert_eq!(
            of(Mode::Spare, &yes(false), Some(false)),
            Outcome::NotCounting
        );
        assert_eq!(of(Mode::Proof, &yes(true), None), Outcome::Late);
        assert_eq!(of(Mode::Proof, &no("a#1"), None), Outcome::Held);
        assert_eq!(of(Mode::Proof, &no(""), Some(false)), Outcome::NoProof);
        assert_eq!(of(Mode::Take, &Vote::Unknown, None), Outcome::NoAnswer);
    }
}

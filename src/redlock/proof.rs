//! The release proof: on which nodes a graceful release may tell the named successor that no
//! live holder is left, so that a fresh successor counts that node's grant at once instead of
//! watching its clock for ttl + margin first.
//!
//! The releaser writes the proof on a node (in the same atomic step as deleting its own key,
//! [`super::scripts::RELEASE`]) only when all of these hold as it sends the release:
//! - its lease is still valid (`now < deadline`): no other holder can be valid at that moment,
//!   so wherever its own key still is when the release runs, nobody else can hold that node;
//! - the node counts for it ([`super::node::Node::counts`]): its own watch of the node's clock
//!   is sound, so its key there cannot have been replaced after a jump it did not see;
//! - every lock command (acquire, renew) it sent to the node in this term was answered, and the
//!   latest one counted ([`TermLog`]): no straggler of its own can still arrive and re-create
//!   its key on the node (a renewal heals a missing key) after somebody else's key vanished
//!   there. Commands on one connection run in order, so one answered command proves that every
//!   earlier one on *that connection* has run; a failed or timed-out command taints the node for
//!   the rest of the term (it may still run later, on a connection the client already gave up),
//!   and so does a command sent on a new connection while one on an older connection is still
//!   unanswered (a straggler still out, then a reconnect: the client may still write
//!   it, and Redis may still run it, after the new connection's replies). Each command is bound
//!   to the connection it was logged on ([`super::node::Node::eval_read_on`]).
//!
//! The successor's grant consumes the proof in the same atomic step as its `SET NX`, and the
//! reservation that carries it denies everyone else meanwhile, so between the release and the
//! grant no other key can have been on the node. `tests/model` checks the rule with the same
//! [`TermLog`] and [`may_prove`].

/// What the releaser knows of one node's lock commands in the current term.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NodeLog {
    /// Lock commands sent in this term (a sequence number per command).
    sent: u64,
    /// The highest sequence number answered.
    answered: u64,
    /// Whether the command answered last counted toward a quorum.
    counted: bool,
    /// A command failed or timed out: the node gives no proof for the rest of the term.
    tainted: bool,
    /// The connection (generation) the commands still unanswered went out on.
    generation: u64,
}

/// The lock commands of one lease value (one term, or one attempt) on every node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct TermLog {
    /// The lock value the commands carried; a new value starts a new log.
    value: String,
    /// Per node, in the nodes' order.
    nodes: Vec<NodeLog>,
}

impl TermLog {
    /// The log for `value` over `n` nodes, starting afresh if it held another value.
    fn for_value(&mut self, value: &str, n: usize) -> &mut Vec<NodeLog> {
        if self.value != value || self.nodes.len() != n {
            self.value = value.to_string();
            self.nodes = vec![NodeLog::default(); n];
        }
        &mut self.nodes
    }

    /// A lock command carrying `value` goes to node `i` of `n` on its connection `generation`;
    /// returns its sequence number. While an earlier command is unanswered on another
    /// connection, the node is tainted: no reply on this one says whether that one has run.
    pub fn sent(&mut self, value: &str, i: usize, n: usize, generation: u64) -> u64 {
        let node = &mut self.for_value(value, n)[i];
        if node.answered < node.sent && node.generation != generation {
            node.tainted = true;
        }
        node.generation = generation;
        node.sent += 1;
        node.sent
    }

    /// The command `seq` to node `i` was answered; `counted`: its yes counted toward a quorum.
    pub fn answered(&mut self, value: &str, i: usize, seq: u64, counted: bool) {
        if self.value != value {
            return;
        }
        if let Some(node) = self.nodes.get_mut(i)
            && seq >= node.answered
        {
            node.answered = seq;
            node.counted = counted;
        }
    }

    /// The command to node `i` failed or timed out: it may still run, later.
    pub fn failed(&mut self, value: &str, i: usize) {
        if self.value != value {
            return;
        }
        if let Some(node) = self.nodes.get_mut(i) {
            node.tainted = true;
        }
    }

    /// Node `i`'s entry (for a model checker's symmetry reduction, which hashes and permutes
    /// per-node state).
    pub fn node(&self, i: usize) -> Option<&NodeLog> {
        self.nodes.get(i)
    }

    /// Reorder the nodes: entry `j` becomes the old entry `order[j]` (the model's symmetry
    /// reduction permutes the nodes).
    pub fn permute(&mut self, order: &[usize]) {
        if self.nodes.len() == order.len() {
            self.nodes = order.iter().map(|&i| self.nodes[i].clone()).collect();
        }
    }

    /// Whether every lock command with `value` sent to node `i` was answered, the latest one
    /// counted, and none failed.
    pub fn settled(&self, value: &str, i: usize) -> bool {
        self.value == value
            && self
                .nodes
                .get(i)
                .is_some_and(|n| !n.tainted && n.sent > 0 && n.answered == n.sent && n.counted)
    }
}

/// Whether a release of `value` may carry the proof on node `i`: the lease is valid at the
/// moment of sending (`valid`), the node counts for the releaser now (`counts`), and its lock
/// commands on that node are settled.
pub fn may_prove(log: &TermLog, value: &str, i: usize, valid: bool, counts: bool) -> bool {
    valid && counts && log.settled(value, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_proves_only_when_every_command_was_answered_and_the_last_counted() {
        let mut log = TermLog::default();
        let a = log.sent("v", 0, 3, 1);
        let b = log.sent("v", 1, 3, 1);
        let c = log.sent("v", 2, 3, 1);
        log.answered("v", 0, a, true);
        log.answered("v", 1, b, false);
        // Node 2's reply is still out (a straggler of a round decided early).
        assert!(may_prove(&log, "v", 0, true, true));
        assert!(
            !may_prove(&log, "v", 1, true, true),
            "last yes did not count"
        );
        assert!(
            !may_prove(&log, "v", 2, true, true),
            "a command is still out"
        );
        assert!(
            !may_prove(&log, "v", 0, false, true),
            "the lease is no longer valid"
        );
        assert!(
            !may_prove(&log, "v", 0, true, false),
            "the node does not count now"
        );
        // A later command answered settles the earlier one (one connection runs in order).
        let c2 = log.sent("v", 2, 3, 1);
        log.answered("v", 2, c2, true);
        assert!(may_prove(&log, "v", 2, true, true));
        // An old reply arriving after a newer one does not change what the newer one said.
        log.answered("v", 2, c, false);
        assert!(may_prove(&log, "v", 2, true, true));
        // A failure taints the node for the rest of the term.
        let a2 = log.sent("v", 0, 3, 1);
        log.failed("v", 0);
        log.answered("v", 0, a2 + 1, true);
        assert!(!may_prove(&log, "v", 0, true, true));
        // A straggler dropped on connection 1, then a command on connection 2: whatever the
        // new connection answers, the old command may still run after it.
        let mut log = TermLog::default();
        let _straggler = log.sent("v", 1, 3, 1);
        let fresh = log.sent("v", 1, 3, 2);
        log.answered("v", 1, fresh, true);
        assert!(
            !may_prove(&log, "v", 1, true, true),
            "reconnect with a command out"
        );
        // Every command answered before the reconnect: the new connection settles the node.
        let mut log = TermLog::default();
        let a = log.sent("v", 0, 3, 1);
        log.answered("v", 0, a, true);
        let b = log.sent("v", 0, 3, 2);
        log.answered("v", 0, b, true);
        assert!(may_prove(&log, "v", 0, true, true));
        // Another value is another term: nothing is known of it.
        assert!(!may_prove(&log, "w", 2, true, true));
        log.sent("w", 2, 3, 1);
        assert!(!may_prove(&log, "v", 2, true, true), "the log moved on");
    }
}

//! What a round hands back: the held lease, the result of an acquire attempt, and the lock
//! values that make each acquisition unique.

use std::time::Duration;

use rand::RngCore;
use tokio::time::Instant;

/// A held lease: what renew and release need.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// `<identity>#<nonce>`, unique to this acquisition.
    pub value: String,
    /// Fencing token of this term.
    pub token: u64,
    /// Monotonic instant until which the lease is provably held.
    pub deadline: Instant,
}

/// Result of one acquire attempt.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Acquire {
    /// Held, with a fencing token written to a quorum.
    Acquired(Lease),
    /// Someone else owns a quorum of nodes.
    Contended(Observed),
    /// Neither we nor anyone else reached a quorum (split vote, quarantine, nodes down).
    NoQuorum(Observed),
    /// No node answered at all.
    Error,
}

impl Acquire {
    /// The metric label of the result.
    pub fn label(&self) -> &'static str {
        self.result().label()
    }

    /// The result as the metrics count it.
    pub fn result(&self) -> crate::metrics::AcquireResult {
        use crate::metrics::AcquireResult;
        match self {
            Acquire::Acquired(_) => AcquireResult::Acquired,
            Acquire::Contended(_) => AcquireResult::Contended,
            Acquire::NoQuorum(_) => AcquireResult::NoQuorum,
            Acquire::Error => AcquireResult::Error,
        }
    }
}

/// What a failed attempt learned about the current holder.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Observed {
    /// The holder's identity as most nodes report it.
    pub holder: Option<String>,
    /// When enough keys will have expired for a quorum to be free.
    pub free_in: Option<Duration>,
}

/// The value stored in the key: `<identity>#<nonce>` with 192 random bits.
pub fn new_value(identity: &str) -> String {
    let mut nonce = [0u8; 24];
    rand::rng().fill_bytes(&mut nonce);
    format!("{identity}#{}", hex::encode(nonce))
}

/// The identity part of a lock value.
pub fn identity_of(value: &str) -> &str {
    value.rsplit_once('#').map_or(value, |(id, _)| id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unique_and_carry_identity() {
        let a = new_value("pod-a");
        let b = new_value("pod-a");
        assert_ne!(a, b);
        assert!(a.starts_with("pod-a#"));
        assert_eq!(a.len(), "pod-a#".len() + 48);
        assert_eq!(identity_of(&a), "pod-a");
        assert_eq!(identity_of("we#ird#n0nce"), "we#ird");
    }
}

//! Pure Redlock arithmetic: quorum, drift, validity, and the running tally of votes that decides
//! as soon as the outcome is known.

use std::time::Duration;

/// Majority of `n` nodes: ⌊n/2⌋ + 1.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Clock-drift allowance: `ttl·driftFactor + 2ms` (the 2 ms cover the timer granularity of Redis).
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.mul_f64(drift_factor) + Duration::from_millis(2)
}

/// Validity left after `elapsed` since T1: `ttl − elapsed − drift`, or `None` when not positive.
pub fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// The fencing token of a new term: one above the highest epoch the granting replies carried
/// and the highest this process has ever seen (so a contender that saw a term's token never
/// repeats it, even if every node of its own quorum lost it).
pub fn next_token(max_epoch_in_replies: u64, epoch_seen: u64) -> u64 {
    max_epoch_in_replies.max(epoch_seen) + 1
}

/// Running count of node replies for one round (acquire or renew).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tally {
    /// Nodes in the round.
    pub n: usize,
    /// Votes needed.
    pub quorum: usize,
    /// Yes votes that count (not quarantined).
    pub yes: usize,
    /// Replies that cannot count: no, error, timeout, or yes from a quarantined node.
    pub not_yes: usize,
}

impl Tally {
    /// A new round over `n` nodes.
    pub fn new(n: usize) -> Self {
        Tally {
            n,
            quorum: quorum(n),
            yes: 0,
            not_yes: 0,
        }
    }

    /// Nodes that have not answered yet.
    pub fn pending(&self) -> usize {
        self.n - self.yes - self.not_yes
    }

    /// `Some(true)` once a quorum said yes, `Some(false)` once a quorum became impossible,
    /// `None` while it can still go either way.
    pub fn decided(&self) -> Option<bool> {
        if self.yes >= self.quorum {
            Some(true)
        } else if self.yes + self.pending() < self.quorum {
            Some(false)
        } else {
            None
        }
    }
}

/// When a quorum of nodes can next be free: given the remaining lifetimes of the keys that
/// denied us, the moment the (quorum − free)-th of them expires. `None` if already possible or
/// if not enough denials carry a lifetime.
pub fn free_quorum_in(n: usize, mut denied_pttl: Vec<Duration>) -> Option<Duration> {
    let q = quorum(n);
    let free_now = n.saturating_sub(denied_pttl.len());
    if free_now >= q {
        return None;
    }
    denied_pttl.sort();
    denied_pttl.get(q - free_now - 1).copied()
}

/// The moment `quorum` of the given per-node instants have passed: the quorum-th earliest.
/// `None` entries (never, or unknown) do not count.
pub fn quorum_at<T: Ord + Copy>(from: impl Iterator<Item = Option<T>>, quorum: usize) -> Option<T> {
    let mut known: Vec<T> = from.flatten().collect();
    known.sort();
    known.get(quorum.checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn quorum_is_a_majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(4), 3);
        assert_eq!(quorum(5), 3);
        assert_eq!(quorum(16), 9);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let d = drift(Duration::from_secs(10), 0.01);
        assert_eq!(d, MS(102));
        assert_eq!(
            validity(Duration::from_secs(10), MS(8), d),
            Some(MS(10_000 - 8 - 102))
        );
        assert_eq!(validity(MS(100), MS(98), MS(2)), None);
        assert_eq!(validity(MS(100), MS(200), MS(2)), None);
        assert_eq!(drift(MS(1000), 0.0), MS(2));
    }

    #[test]
    fn tally_decides_early() {
        let mut t = Tally::new(5);
        assert_eq!(t.decided(), None);
        t.yes = 3;
        assert_eq!(t.decided(), Some(true));
        let mut t = Tally::new(5);
        t.not_yes = 2;
        assert_eq!(t.decided(), None);
        t.not_yes = 3;
        assert_eq!(
            t.decided(),
            Some(false),
            "3 of 5 failed: a quorum of 3 is impossible"
        );
        let mut t = Tally::new(3);
        t.yes = 1;
        t.not_yes = 1;
        assert_eq!(t.decided(), None);
        t.yes = 2;
        assert_eq!(t.decided(), Some(true));
    }

    #[test]
    fn quorum_at_is_the_quorum_th_earliest() {
        assert_eq!(quorum_at([Some(3), None, Some(1)].into_iter(), 2), Some(3));
        assert_eq!(quorum_at([Some(3), None, None].into_iter(), 2), None);
        assert_eq!(
            quorum_at([Some(5), Some(4), Some(9)].into_iter(), 1),
            Some(4)
        );
    }

    #[test]
    fn free_quorum() {
        // 3 nodes, all held: the second expiry frees a quorum of 2.
        assert_eq!(
            free_quorum_in(3, vec![MS(30), MS(10), MS(20)]),
            Some(MS(20))
        );
        // 3 nodes, 1 free: one more expiry is enough.
        assert_eq!(free_quorum_in(3, vec![MS(30), MS(10)]), Some(MS(10)));
        assert_eq!(free_quorum_in(3, vec![MS(30)]), None);
        assert_eq!(free_quorum_in(5, vec![MS(5); 5]), Some(MS(5)));
    }
}

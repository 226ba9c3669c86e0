//! One acquire round's votes: each node's answer to the acquire script, and what the replies
//! of a round, and the denials of a failed one, show.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::super::lease::{Observed, identity_of};
use super::super::math;
use super::super::node::CommandError;

/// One node's answer to the acquire script.
pub(super) enum Vote {
    /// Granted.
    Yes {
        /// The node's epoch before it stored the proposal.
        epoch: u64,
        /// The grant consumed a release proof for this identity ([`super::proof`]).
        proved: bool,
    },
    /// Denied, naming the holder.
    No(Denial),
    /// No answer, or one of the wrong shape: the outcome on that node is unknown.
    Unknown,
}

/// A node's denial: who holds the key there, for how long, and the node's epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Denial {
    /// The holder's lock value (empty: the key is free but reserved, or a probe found it free).
    pub(super) holder: String,
    /// The key's (or reservation's) remaining lifetime, if it has one.
    pub(super) pttl: Option<Duration>,
    /// The node's fencing epoch.
    pub(super) epoch: u64,
}

/// What the replies of one acquire round say, beyond the tally: how many nodes answered, the
/// highest epoch they reported, and who holds the key where we were denied.
#[derive(Default)]
pub(super) struct Replies {
    /// Nodes that answered (granted or denied).
    pub(super) answered: usize,
    /// Highest epoch reported by any answer (0 if none).
    pub(super) max_epoch: u64,
    /// Every denial.
    pub(super) denials: Vec<Denial>,
}

impl Replies {
    /// Record a reply.
    pub(super) fn record(&mut self, vote: Vote) {
        match vote {
            Vote::Yes { epoch, .. } => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(epoch);
            }
            Vote::No(denial) => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(denial.epoch);
                self.denials.push(denial);
            }
            Vote::Unknown => {}
        }
    }
}

/// What the denials of a failed attempt show.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Holders {
    /// The most common holder and when a quorum will be free.
    pub(super) observed: Observed,
    /// How many denials name that holder: a quorum of them means someone else holds the lease.
    pub(super) most: usize,
}

pub(super) fn parse_acquire(r: Result<Vec<Value>, CommandError>) -> Vote {
    let Ok(items) = r else {
        return Vote::Unknown;
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(epoch), rest @ ..] => Vote::Yes {
            epoch: (*epoch).max(0) as u64,
            proved: matches!(rest, [Value::Int(1), ..]),
        },
        [Value::Int(0), holder, Value::Int(pttl), rest @ ..] => {
            let holder = match holder {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => String::new(),
            };
            let epoch = match rest {
                [Value::Int(e), ..] => (*e).max(0) as u64,
                _ => 0,
            };
            Vote::No(Denial {
                holder,
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                epoch,
            })
        }
        _ => Vote::Unknown,
    }
}

/// What the denials show, and how many of them name the most common holder. The acquire script
/// reads the holder in the same atomic step as its failed `SET NX`, so a denial always names one.
pub(super) fn observe(n: usize, denials: &[Denial]) -> Holders {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for d in denials.iter().filter(|d| !d.holder.is_empty()) {
        *counts.entry(d.holder.as_str()).or_default() += 1;
    }
    let (holder, most) = counts
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map_or((None, 0), |(h, c)| (Some(identity_of(h).to_string()), c));
    let pttls: Vec<Duration> = denials.iter().filter_map(|d| d.pttl).collect();
    Holders {
        observed: Observed {
            holder,
            free_in: math::free_quorum_in(n, pttls),
        },
        most,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_carry_the_node_epoch() {
        let deny = |rest: Vec<Value>| {
            let mut v = vec![
                Value::Int(0),
                Value::BulkString(b"b#1".to_vec()),
                Value::Int(40),
            ];
            v.extend(rest);
            parse_acquire(Ok(v))
        };
        assert!(
            matches!(deny(vec![Value::Int(7)]), Vote::No(Denial { epoch: 7, ref holder, .. }) if holder == "b#1")
        );
        assert!(matches!(deny(vec![]), Vote::No(Denial { epoch: 0, .. })));
        let yes = parse_acquire(Ok(vec![Value::Int(1), Value::Int(3)]));
        assert!(matches!(
            yes,
            Vote::Yes {
                epoch: 3,
                proved: false
            }
        ));
        let proved = parse_acquire(Ok(vec![Value::Int(1), Value::Int(3), Value::Int(1)]));
        assert!(matches!(proved, Vote::Yes { proved: true, .. }));
    }

    #[test]
    fn observe_picks_the_majority_holder() {
        let ms = Duration::from_millis;
        let deny = |holder: &str, pttl| Denial {
            holder: holder.into(),
            pttl: Some(ms(pttl)),
            epoch: 0,
        };
        let h = observe(3, &[deny("b#1", 50), deny("b#1", 40), deny("c#2", 10)]);
        assert_eq!(h.observed.holder.as_deref(), Some("b"));
        assert_eq!(h.most, 2);
        assert_eq!(h.observed.free_in, Some(ms(40)));
    }
}

//! Candidate records and handover preference: pure functions, no I/O.
//!
//! While it contends, each sidecar keeps a record of its own in a hash beside the lease key
//! (`<key>:candidates`, field = identity), written by [`super::scripts::CANDIDATES`] as it
//! retries. The value is `expiry_us|ready_since_us|priority|created|pending|revision`, all times
//! in the node's own `TIME` (µs), so expiry and "ready for how long" never compare two clocks.
//! The script drops expired entries as it reads.
//!
//! A record counts only when a quorum of nodes holds it; it is ready when a quorum says so, for
//! as long as a quorum agrees. Preference only orders contenders: whoever is named still has to win the
//! Redlock quorum like anyone else.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use crate::config::Prefer;

/// What a candidate is compared by.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
pub struct Rank {
    /// `lease.priority`: compared first, higher preferred whatever the preference.
    pub priority: i64,
    /// The pod's revision (`pod-template-hash` / `controller-revision-hash`); empty outside
    /// Kubernetes. Candidates of one revision are never preferred over each other.
    pub revision: String,
    /// The pod's `creationTimestamp`, Unix seconds; 0 outside Kubernetes. Orders revisions.
    pub created: i64,
}

/// One candidate as a quorum of nodes reports it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Candidate {
    /// The sidecar's identity.
    pub identity: String,
    /// Its rank.
    pub rank: Rank,
    /// How long it has been ready (the shortest any node reports); `None` = not ready.
    pub ready_for: Option<Duration>,
    /// Set by a leader that sees a better candidate settling: a preferred handover is pending.
    pub pending: bool,
}

/// One node's answer to the candidates script.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRecords {
    /// The node's `TIME` (µs) when it answered: records are judged by the node's own clock.
    pub now_us: i64,
    /// The live entries: (identity, encoded record), as the hash holds them.
    pub entries: Vec<(String, String)>,
}

/// One decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// When it expires, by the node's clock (µs).
    pub expiry_us: i64,
    /// Since when the candidate has been ready, by the node's clock (µs); 0 = not ready.
    pub ready_since_us: i64,
    /// The candidate's rank.
    pub rank: Rank,
    /// A preferred handover is pending (set by a leader).
    pub pending: bool,
}

/// What a sidecar says of itself in its candidate record.
#[derive(Clone, Copy, Debug)]
pub struct OwnFields<'a> {
    /// Its rank.
    pub rank: &'a Rank,
    /// Whether it is ready to lead (its standing, e.g. the pod's Ready condition).
    pub ready: bool,
    /// It is the leader and a preferred handover is pending.
    pub pending: bool,
}

/// Where [`fields`] puts the ready flag.
pub const READY: usize = 0;
/// Where [`fields`] puts the pending flag.
pub const PENDING: usize = 3;

/// Encode the fields a sidecar writes (the script adds expiry and ready-since): ready
/// ([`READY`]), priority, created, pending ([`PENDING`]), revision.
pub fn fields(own: OwnFields<'_>) -> [String; 5] {
    let flag = |b: bool| if b { "1" } else { "0" }.to_string();
    [
        flag(own.ready),
        own.rank.priority.to_string(),
        own.rank.created.to_string(),
        flag(own.pending),
        own.rank.revision.clone(),
    ]
}

/// Parse one record value; `None` if malformed.
pub fn parse_record(value: &str) -> Option<Record> {
    let mut it = value.splitn(6, '|');
    let expiry = it.next()?.parse().ok()?;
    let since = it.next()?.parse().ok()?;
    let priority = it.next()?.parse().ok()?;
    let created = it.next()?.parse().ok()?;
    let pending = it.next()? == "1";
    let revision = it.next()?.to_string();
    Some(Record {
        expiry_us: expiry,
        ready_since_us: since,
        rank: Rank {
            priority,
            revision,
            created,
        },
        pending,
    })
}

/// Merge the nodes' answers: candidates held by at least `quorum` nodes, live by each node's
/// own clock. A candidate is ready when a quorum of nodes says so, for as long as a quorum
/// agrees (the quorum-th longest of their readiness times): one node that missed the latest
/// refresh (a slow reply) neither hides a ready candidate nor makes one look settled sooner.
pub fn merge(answers: &[NodeRecords], quorum: usize) -> Vec<Candidate> {
    struct Acc {
        nodes: usize,
        rank: Rank,
        ready: Vec<Duration>,
        pending: bool,
    }
    let mut by_id: BTreeMap<&str, Acc> = BTreeMap::new();
    for answer in answers {
        let now = answer.now_us;
        for (id, value) in &answer.entries {
            let Some(Record {
                expiry_us: expiry,
                ready_since_us: since,
                rank,
                pending,
            }) = parse_record(value)
            else {
                continue;
            };
            if expiry <= now {
                continue;
            }
            let acc = by_id.entry(id.as_str()).or_insert_with(|| Acc {
                nodes: 0,
                rank,
                ready: Vec::new(),
                pending: false,
            });
            acc.nodes += 1;
            acc.pending |= pending;
            if since > 0 {
                acc.ready
                    .push(Duration::from_micros((now - since).max(0) as u64));
            }
        }
    }
    by_id
        .into_iter()
        .filter(|(_, a)| a.nodes >= quorum)
        .map(|(id, mut a)| {
            a.ready.sort_unstable_by(|x, y| y.cmp(x));
            Candidate {
                identity: id.to_string(),
                rank: a.rank,
                ready_for: a.ready.get(quorum.max(1) - 1).copied(),
                pending: a.pending,
            }
        })
        .collect()
}

/// Whether `a` is preferred over `b`: a higher priority always; at equal priority, under
/// `newest` (`oldest`) a different revision created later (earlier). `none` prefers nobody.
pub fn better(a: &Rank, b: &Rank, prefer: Prefer) -> bool {
    if prefer == Prefer::None {
        return false;
    }
    if a.priority != b.priority {
        return a.priority > b.priority;
    }
    if a.revision == b.revision {
        return false;
    }
    match prefer {
        Prefer::Newest => a.created > b.created,
        Prefer::Oldest => a.created < b.created,
        Prefer::None => false,
    }
}

/// A total order for picking among candidates: priority, then creation time in the preferred
/// direction, then identity (so every leader picks the same one).
fn order(a: &Candidate, b: &Candidate, prefer: Prefer) -> Ordering {
    let created = match prefer {
        Prefer::Oldest => b.rank.created.cmp(&a.rank.created),
        _ => a.rank.created.cmp(&b.rank.created),
    };
    a.rank
        .priority
        .cmp(&b.rank.priority)
        .then(created)
        .then_with(|| b.identity.cmp(&a.identity))
}

/// The successor a graceful release names: the best ready candidate other than `me`. Under
/// `none`, any ready one (`pick` chooses among them, e.g. at random: today's race).
pub fn successor<'a>(
    candidates: &'a [Candidate],
    me: &str,
    prefer: Prefer,
    pick: impl FnOnce(usize) -> usize,
) -> Option<&'a Candidate> {
    let ready: Vec<&Candidate> = candidates
        .iter()
        .filter(|c| c.identity != me && c.ready_for.is_some())
        .collect();
    if ready.is_empty() {
        return None;
    }
    if prefer == Prefer::None {
        return ready.get(pick(ready.len()).min(ready.len() - 1)).copied();
    }
    ready.into_iter().max_by(|a, b| order(a, b, prefer))
}

/// What a leader of rank `mine` should do about the candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Handover {
    /// Nobody better is ready.
    None,
    /// A better candidate is ready but has not been for `settle` yet.
    Pending(String),
    /// Hand over to this one now.
    To(String),
}

/// The preferred-handover decision: the best ready candidate better than `mine`, once it has
/// been ready for `settle`.
pub fn handover(
    candidates: &[Candidate],
    me: &str,
    mine: &Rank,
    prefer: Prefer,
    settle: Duration,
) -> Handover {
    let best = candidates
        .iter()
        .filter(|c| c.identity != me && c.ready_for.is_some() && better(&c.rank, mine, prefer))
        .max_by(|a, b| order(a, b, prefer));
    match best {
        None => Handover::None,
        Some(c) if c.ready_for.is_some_and(|r| r >= settle) => Handover::To(c.identity.clone()),
        Some(c) => Handover::Pending(c.identity.clone()),
    }
}

/// The release notice's payload: the released value, a newline, the named successor (empty if
/// none); for a shard handed over to balance, a newline and how often it has moved in a
/// rollout so far (`moved`). Identities hold no whitespace, so the split is unambiguous. A
/// single lease's notice never has the third line, so it reads as before to every version.
pub fn notice_payload(value: &str, successor: Option<&str>, moved: Option<u8>) -> String {
    match moved {
        Some(m) => format!("{value}\n{}\n{m}", successor.unwrap_or("")),
        None => format!("{value}\n{}", successor.unwrap_or("")),
    }
}

/// The successor a release notice names, if any (an old-style notice names none).
pub fn notice_successor(payload: &str) -> Option<&str> {
    payload
        .split('\n')
        .nth(1)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// How often the shard a notice hands over has moved in a rollout, if it says
/// ([`notice_payload`]).
pub fn notice_moved(payload: &str) -> Option<u8> {
    payload.split('\n').nth(2)?.trim().parse().ok()
}

#[cfg(test)]
mod tests;

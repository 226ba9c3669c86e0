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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
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
#[derive(Clone, Debug, PartialEq, Eq)]
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

/// Encode the fields a sidecar writes (the script adds expiry and ready-since).
pub fn fields(rank: &Rank, ready: bool, pending: bool) -> [String; 5] {
    [
        if ready { "1" } else { "0" }.to_string(),
        rank.priority.to_string(),
        rank.created.to_string(),
        if pending { "1" } else { "0" }.to_string(),
        rank.revision.clone(),
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
/// none). Identities hold no whitespace, so the split is unambiguous.
pub fn notice_payload(value: &str, successor: Option<&str>) -> String {
    format!("{value}\n{}", successor.unwrap_or(""))
}

/// The successor a release notice names, if any (an old-style notice names none).
pub fn notice_successor(payload: &str) -> Option<&str> {
    payload
        .split_once('\n')
        .map(|(_, s)| s.trim())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(priority: i64, revision: &str, created: i64) -> Rank {
        Rank {
            priority,
            revision: revision.into(),
            created,
        }
    }

    fn cand(id: &str, r: Rank, ready_ms: Option<u64>) -> Candidate {
        Candidate {
            identity: id.into(),
            rank: r,
            ready_for: ready_ms.map(Duration::from_millis),
            pending: false,
        }
    }

    fn rec(expiry: i64, since: i64, r: &Rank) -> String {
        format!(
            "{expiry}|{since}|{}|{}|0|{}",
            r.priority, r.created, r.revision
        )
    }

    fn answer(now_us: i64, entries: Vec<(String, String)>) -> NodeRecords {
        NodeRecords { now_us, entries }
    }

    #[test]
    fn records_round_trip_and_reject_garbage() {
        let r = rank(-2, "abc|d", 1700);
        let back = parse_record(&rec(10, 5, &r)).unwrap();
        assert_eq!(
            back,
            Record {
                expiry_us: 10,
                ready_since_us: 5,
                rank: r,
                pending: false
            }
        );
        assert!(parse_record("1|2|x|0|0|").is_none());
        assert!(parse_record("1|2").is_none());
    }

    #[test]
    fn merge_needs_a_quorum_and_a_quorum_of_readiness() {
        let r = rank(1, "", 0);
        let a = answer(
            1_000_000,
            vec![("a".to_string(), rec(2_000_000, 400_000, &r))],
        );
        let b = answer(
            5_000_000,
            vec![("a".to_string(), rec(6_000_000, 4_800_000, &r))],
        );
        let only_one = answer(1_000_000, vec![("b".to_string(), rec(2_000_000, 1, &r))]);
        let merged = merge(&[a.clone(), b.clone(), only_one], 2);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].identity, "a");
        // Node a: ready 600 ms; node b: 200 ms (each by its own clock). Both are needed for a
        // quorum of 2, so the shorter one counts.
        assert_eq!(merged[0].ready_for, Some(Duration::from_millis(200)));
        // Not ready on one of two: not ready.
        let c = answer(1_000_000, vec![("a".to_string(), rec(2_000_000, 0, &r))]);
        assert_eq!(merge(&[a.clone(), c.clone()], 2)[0].ready_for, None);
        // Ready on two of three (one node missed the refresh): ready, for as long as both agree.
        let m = merge(&[a.clone(), c, b.clone()], 2);
        assert_eq!(m[0].ready_for, Some(Duration::from_millis(200)));
        // Expired by the node's own clock: gone.
        let expired = answer(3_000_000, vec![("a".to_string(), rec(2_000_000, 1, &r))]);
        assert!(merge(&[a, expired], 2).is_empty());
    }

    #[test]
    fn preference_orders_priority_then_revision() {
        let old = rank(0, "r1", 100);
        let new = rank(0, "r2", 200);
        let same_rev_later = rank(0, "r1", 300);
        assert!(better(&new, &old, Prefer::Newest));
        assert!(!better(&old, &new, Prefer::Newest));
        assert!(better(&old, &new, Prefer::Oldest));
        assert!(!better(&same_rev_later, &old, Prefer::Newest));
        assert!(!better(&new, &old, Prefer::None));
        // Priority first, under either preference.
        assert!(better(&rank(1, "r1", 0), &new, Prefer::Oldest));
        assert!(better(&rank(2, "", 0), &rank(1, "", 0), Prefer::Newest));
        assert!(!better(&rank(1, "", 0), &rank(1, "", 0), Prefer::Newest));
    }

    #[test]
    fn successor_is_the_best_ready_other_candidate() {
        let cs = vec![
            cand("me", rank(5, "", 0), Some(10)),
            cand("low", rank(1, "", 0), Some(10)),
            cand("high-not-ready", rank(9, "", 0), None),
            cand("high", rank(3, "", 0), Some(0)),
        ];
        let pick = |_| 0;
        assert_eq!(
            successor(&cs, "me", Prefer::Newest, pick).unwrap().identity,
            "high"
        );
        let s = successor(&cs, "me", Prefer::None, |n| n - 1).unwrap();
        assert!(s.ready_for.is_some() && s.identity != "me");
        assert!(successor(&cs[..1], "me", Prefer::Newest, pick).is_none());
        let revs = vec![
            cand("a", rank(0, "r1", 100), Some(1)),
            cand("b", rank(0, "r2", 200), Some(1)),
        ];
        assert_eq!(
            successor(&revs, "x", Prefer::Newest, pick)
                .unwrap()
                .identity,
            "b"
        );
        assert_eq!(
            successor(&revs, "x", Prefer::Oldest, pick)
                .unwrap()
                .identity,
            "a"
        );
    }

    #[test]
    fn handover_waits_for_the_settle_time() {
        let mine = rank(1, "", 0);
        let settle = Duration::from_secs(2);
        let cs = |ready| vec![cand("n", rank(2, "", 0), ready)];
        assert_eq!(
            handover(&cs(None), "me", &mine, Prefer::Newest, settle),
            Handover::None
        );
        assert_eq!(
            handover(&cs(Some(1999)), "me", &mine, Prefer::Newest, settle),
            Handover::Pending("n".into())
        );
        assert_eq!(
            handover(&cs(Some(2000)), "me", &mine, Prefer::Newest, settle),
            Handover::To("n".into())
        );
        assert_eq!(
            handover(&cs(Some(5000)), "me", &mine, Prefer::None, settle),
            Handover::None
        );
        // Under `oldest` the newer one is not better.
        assert_eq!(
            handover(
                &cs(Some(5000)),
                "me",
                &rank(2, "", 0),
                Prefer::Oldest,
                settle
            ),
            Handover::None
        );
    }

    #[test]
    fn notices_name_the_successor() {
        assert_eq!(
            notice_successor(&notice_payload("a#1", Some("b"))),
            Some("b")
        );
        assert_eq!(notice_successor(&notice_payload("a#1", None)), None);
        assert_eq!(notice_successor("a#1"), None);
    }
}

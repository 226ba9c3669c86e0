//! The watch round of an idle follower: one [`scripts::WATCH`] call per node reads the holder,
//! its keys' lifetimes and the candidate records, and refreshes this sidecar's own record. Its
//! reply, like every script's, carries the node's `TIME`, so the round also keeps the clock
//! watch fed ([`super::node::Node::maintain`] then reads `TIME` only when no reply did).
//!
//! A follower that sees someone else hold a quorum has nothing to attempt until those keys can
//! expire (a crash: the round says when) or a release notice arrives; an attempt meanwhile
//! could only be denied, and would cost the acquire script, its cleanup and a candidates round
//! on every node.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Value;

use super::Redlock;
use super::candidates::{self, Candidate};
use super::lease::{Observed, identity_of};
use super::math;
use super::records::{OwnRecord, parse_candidates};
use super::scripts::scripts;

/// What one node's watch reply says about the lock key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeySeen {
    /// The holder's lock value; empty when the key is free.
    pub holder: String,
    /// The key's remaining lifetime, when held and it has one.
    pub pttl: Option<Duration>,
    /// The node's fencing epoch, when read (a holder other than the one last seen).
    pub epoch: Option<u64>,
}

/// What a watch round saw.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// Someone holds the key on a quorum of nodes: who, and when a quorum of its keys can have
    /// expired. `None`: nobody does (free, split, or too few nodes answered), so an attempt may
    /// win.
    pub held: Option<Observed>,
    /// The candidates a quorum of nodes holds; `None` if fewer than a quorum answered.
    pub candidates: Option<Vec<Candidate>>,
    /// A quorum of nodes answered the key's round: `held: None` then means the lease may be
    /// free. For a shard, whose records come from a round of their own, this says nothing of
    /// that round.
    pub answered: bool,
}

impl Redlock {
    /// One watch round on every node in parallel: the holder and the candidates, the own record
    /// written when `mine` is given (each record lives for `life`). A shard of a sharded lease
    /// watches its key alone and has the records from the round its process's shards share
    /// ([`super::SharedRecords`]); the candidates are then `None` unless a quorum answered both,
    /// and the round is answered when the key's is: a failed record round alone must not keep
    /// a follower from attempting on a free key.
    pub async fn watch(&self, mine: Option<OwnRecord<'_>>, life: Duration) -> Watched {
        if self.shared.is_none() {
            return self.watch_round(mine, life).await;
        }
        let (key, records) = tokio::join!(
            self.watch_round(None, life),
            self.candidates(mine, life, None)
        );
        shard_watched(key, records)
    }

    /// [`Redlock::watch`] on the lease's own keys; a shard's reads the key alone.
    async fn watch_round(&self, mine: Option<OwnRecord<'_>>, life: Duration) -> Watched {
        let script = &scripts().watch;
        let life_ms = life.as_millis().max(1).to_string();
        let mut args: Vec<&str> = vec![mine.map_or("", |m| m.identity), &life_ms];
        match mine {
            Some(m) => args.extend(m.fields.iter().map(String::as_str)),
            None => args.extend(["0", "0", "0", "0", ""]),
        }
        let known = lock_seen(&self.watched_holder).clone();
        args.push(&known);
        // Brief: the own record only, the others' as the last full watch read them.
        let turn = self.watches.fetch_add(1, Ordering::Relaxed);
        let brief = mine.is_some()
            && !turn.is_multiple_of(self.brief_every)
            && lock_records(&self.records_seen).iter().all(Option::is_some);
        let key_only = self.shared.is_some();
        args.push(match (key_only, brief) {
            (true, _) => "2",
            (false, true) => "1",
            (false, false) => "0",
        });
        let keys = [
            self.key.as_str(),
            self.candidates_key.as_str(),
            self.epoch_key.as_str(),
        ];
        let (keys_ref, args_ref) = (&keys, &args);
        let answers: Vec<(usize, KeySeen, candidates::NodeRecords)> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| async move { (i, n.eval_joined(None, script, keys_ref, args_ref).await) })
            .collect::<FuturesUnordered<_>>()
            .filter_map(|(i, r)| async move {
                let (seen, records) = r.ok().map(|r| r.items).and_then(parse_watch)?;
                Some((i, seen, records))
            })
            .collect()
            .await;
        let quorum = self.quorum();
        if answers.len() < quorum {
            return Watched::default();
        }
        let mut last = lock_records(&self.records_seen);
        let (keys_seen, records): (Vec<KeySeen>, Vec<_>) = answers
            .into_iter()
            .map(|(i, seen, records)| match (brief, last[i].as_ref()) {
                _ if key_only => (seen, records),
                (true, Some(before)) => (seen, with_own(before, records)),
                _ => {
                    last[i] = Some(records.clone());
                    (seen, records)
                }
            })
            .unzip();
        drop(last);
        let epoch = keys_seen.iter().filter_map(|k| k.epoch).max().unwrap_or(0);
        self.epoch_seen.fetch_max(epoch, Ordering::SeqCst);
        let held = held(self.nodes.len(), &keys_seen);
        if let Some(value) = held.as_ref().and(majority_value(&keys_seen)) {
            *lock_seen(&self.watched_holder) = value;
        }
        Watched {
            held,
            candidates: Some(candidates::merge(&records, quorum)),
            answered: true,
        }
    }
}

/// A shard's watch: its key's round, and the records from the round its process's shards share.
fn shard_watched(key: Watched, records: Option<Vec<Candidate>>) -> Watched {
    Watched {
        candidates: key.candidates.and(records),
        ..key
    }
}

/// A brief reply (its `TIME`, the own record, the other identities still in the hash with
/// empty values) over the records a full watch read `before`: the records read before of the
/// identities still there, and the own one as just written. A record withdrawn since is gone;
/// one that appeared since waits for the next full read.
fn with_own(
    before: &candidates::NodeRecords,
    brief: candidates::NodeRecords,
) -> candidates::NodeRecords {
    let (own, present): (Vec<_>, Vec<_>) =
        brief.entries.into_iter().partition(|(_, v)| !v.is_empty());
    let mut entries: Vec<(String, String)> = before
        .entries
        .iter()
        .filter(|(id, _)| present.iter().any(|(p, _)| p == id))
        .filter(|(id, _)| !own.iter().any(|(o, _)| o == id))
        .cloned()
        .collect();
    entries.extend(own);
    candidates::NodeRecords {
        now_us: brief.now_us,
        entries,
    }
}

fn lock_records(
    m: &Mutex<Vec<Option<candidates::NodeRecords>>>,
) -> std::sync::MutexGuard<'_, Vec<Option<candidates::NodeRecords>>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The holder value most nodes report (non-empty), if any.
fn majority_value(seen: &[KeySeen]) -> Option<String> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in seen.iter().filter(|s| !s.holder.is_empty()) {
        *counts.entry(s.holder.as_str()).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map(|(v, _)| v.to_string())
}

/// The last holder value a watch saw. A poisoned lock only means a panic elsewhere mid-update;
/// the value is plain.
fn lock_seen(m: &Mutex<String>) -> std::sync::MutexGuard<'_, String> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node's reply (its leading `TIME` already taken by `eval`): pttl, holder, epoch, then the
/// records as the candidates script returns them.
fn parse_watch(items: Vec<Value>) -> Option<(KeySeen, candidates::NodeRecords)> {
    let mut it = items.into_iter();
    let Value::Int(pttl) = it.next()? else {
        return None;
    };
    let holder = match it.next()? {
        Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        Value::SimpleString(s) => s,
        _ => return None,
    };
    let Value::Int(epoch) = it.next()? else {
        return None;
    };
    let seen = KeySeen {
        pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        holder,
        epoch: u64::try_from(epoch).ok(),
    };
    Some((seen, parse_candidates(it.collect())))
}

/// Whether one holder has the key on a quorum of all `n` nodes, and when a quorum of the held
/// keys can have expired: the same reading a denied attempt gives
/// ([`super::Acquire::Contended`]), from nodes that merely answered.
pub fn held(n: usize, seen: &[KeySeen]) -> Option<Observed> {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for s in seen.iter().filter(|s| !s.holder.is_empty()) {
        *counts.entry(s.holder.as_str()).or_default() += 1;
    }
    let (holder, most) = counts.into_iter().max_by_key(|(_, c)| *c)?;
    if most < math::quorum(n) {
        return None;
    }
    let pttls = seen
        .iter()
        .filter(|s| !s.holder.is_empty())
        .filter_map(|s| s.pttl)
        .collect();
    Some(Observed {
        holder: Some(identity_of(holder).to_string()),
        free_in: math::free_quorum_in(n, pttls),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(holder: &str, pttl: i64) -> KeySeen {
        KeySeen {
            holder: holder.into(),
            pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
            epoch: None,
        }
    }

    #[test]
    fn a_quorum_of_one_holder_is_held_and_says_when_it_can_expire() {
        let h = held(3, &[key("b#1", 900), key("b#1", 400), key("", -2)]).expect("held");
        assert_eq!(h.holder.as_deref(), Some("b"));
        // One node is free already: a quorum is free once the shorter of the two expires.
        assert_eq!(h.free_in, Some(Duration::from_millis(400)));
        let all = held(3, &[key("b#1", 900), key("b#1", 400), key("b#1", 700)]).expect("held");
        assert_eq!(all.free_in, Some(Duration::from_millis(700)));
    }

    /// Review finding 8: a shard's key round answered and found the lease free; its shared
    /// record round failed. The watch is still answered (the follower attempts), without
    /// candidates.
    #[test]
    fn a_shard_watch_is_answered_by_its_key_round_alone() {
        let key = Watched {
            held: None,
            candidates: Some(Vec::new()),
            answered: true,
        };
        let w = shard_watched(key, None);
        assert!(
            w.answered && w.held.is_none() && w.candidates.is_none(),
            "{w:?}"
        );
        assert!(!shard_watched(Watched::default(), Some(Vec::new())).answered);
    }

    #[test]
    fn free_split_or_too_few_is_not_held() {
        assert_eq!(held(3, &[key("", -2), key("", -2), key("b#1", 50)]), None);
        assert_eq!(
            held(3, &[key("a#1", 50), key("b#1", 50), key("", -2)]),
            None
        );
        // Two of five answered, both naming b: not a quorum of all nodes.
        assert_eq!(held(5, &[key("b#1", 50), key("b#1", 50)]), None);
    }

    #[test]
    fn replies_parse_holder_pttl_and_records() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let (seen, records) = parse_watch(vec![
            Value::Int(750),
            bulk("b#1"),
            Value::Int(7),
            Value::Int(5),
            bulk("c"),
            bulk("9|0|0|0|0|"),
        ])
        .expect("parses");
        assert_eq!(
            seen,
            KeySeen {
                epoch: Some(7),
                ..key("b#1", 750)
            }
        );
        assert_eq!(records.now_us, 5);
        assert_eq!(records.entries, vec![("c".into(), "9|0|0|0|0|".into())]);
        let (free, _) = parse_watch(vec![
            Value::Int(-2),
            bulk(""),
            Value::Int(-1),
            Value::Int(5),
        ])
        .expect("free");
        assert_eq!(free, key("", -2));
        assert_eq!(parse_watch(vec![Value::Int(1)]), None);
    }

    #[test]
    fn a_brief_reply_keeps_the_records_read_before_of_those_still_there_and_the_own_one_new() {
        let rec = |id: &str, v: &str| (id.to_string(), v.to_string());
        let before = candidates::NodeRecords {
            now_us: 1,
            entries: vec![
                rec("me", "old"),
                rec("you", "yours"),
                rec("gone", "withdrawn"),
            ],
        };
        let brief = candidates::NodeRecords {
            now_us: 2,
            entries: vec![rec("me", "new"), rec("you", ""), rec("fresh", "")],
        };
        let merged = with_own(&before, brief);
        assert_eq!(merged.now_us, 2);
        assert_eq!(merged.entries, [rec("you", "yours"), rec("me", "new")]);
    }
}

//! The candidate-record rounds: write this sidecar's record and read everyone's on every node,
//! and withdraw the record at shutdown. What the records mean is in [`super::candidates`].

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use redis::Value;
use tokio::time::Instant;

use super::Redlock;
use super::candidates::{self, Candidate, NodeRecords};
use super::scripts::scripts;

/// This sidecar's own candidate record, as [`Redlock::candidates`] writes it.
#[derive(Clone, Copy, Debug)]
pub struct OwnRecord<'a> {
    /// This sidecar's identity: the record's field in the hash.
    pub identity: &'a str,
    /// The encoded fields ([`candidates::fields`]).
    pub fields: &'a [String; 5],
}

/// The one candidates hash of a sharded lease (`lease.shards`), shared by the process's
/// shards. Every replica contends for every shard, so its record says the same of it on each;
/// the process keeps one record in `<keyPrefix><lease.name>:candidates` instead of one per
/// shard, and its shards' rounds share the writes and reads of it: a round whose own record
/// says what the last write said, and which comes within a quarter of the record's life of
/// that write, is answered from the write's read, without a command; one that comes while a
/// round writing the same is under way joins that round. A read alone (a leader choosing a
/// successor) always goes to the nodes.
///
/// No lock is held across a round: shards asking while a round fails or waits on a slow node
/// share that round, instead of each running its own in turn behind it (M shards × up to
/// `redis.timeout`, review finding 6).
#[derive(Debug, Default)]
pub struct SharedRecords {
    state: std::sync::Mutex<Shared>,
}

/// A round of the shared record, which every shard asking meanwhile awaits.
type Round = futures::future::Shared<BoxFuture<'static, Option<Vec<Candidate>>>>;

#[derive(Default)]
struct Shared {
    /// Per shard (its [`Redlock`] tag), what its last round said of this sidecar: ready,
    /// pending. The record says ready while every shard says so, and pending while any does.
    said: BTreeMap<u64, (bool, bool)>,
    /// The last write and what it read.
    last: Option<Written>,
    /// The round under way, if any.
    flight: Option<Flight>,
    /// Rounds begun so far: the one that ends clears only itself.
    flights: u64,
    /// The record was withdrawn (shutdown): later rounds only read.
    withdrawn: bool,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("said", &self.said)
            .field("last", &self.last)
            .field("flight", &self.flight.as_ref().map(|f| (f.id, f.started)))
            .field("withdrawn", &self.withdrawn)
            .finish()
    }
}

#[derive(Debug)]
struct Written {
    /// When the round that wrote it began.
    started: Instant,
    fields: [String; 5],
    read: Vec<Candidate>,
}

/// The round under way.
struct Flight {
    id: u64,
    /// When it began: a read that must be newer than an instant joins it only if it began
    /// after.
    started: Instant,
    /// What it writes.
    fields: [String; 5],
    read: Round,
}

/// What a shard asking for the shared round does, decided under the lock and done without it.
enum Step {
    /// The record is withdrawn: read only, on the nodes.
    Read,
    /// Await this round, and take its read.
    Join(Round),
    /// Await this round (it writes something else, or began too early), then ask again.
    After(Round),
}

impl Shared {
    /// The record the process writes for `tag`'s round saying `fields`.
    fn combined(&mut self, tag: u64, fields: &[String; 5]) -> [String; 5] {
        let flag = |f: &String| f == "1";
        let said = (
            flag(&fields[candidates::READY]),
            flag(&fields[candidates::PENDING]),
        );
        self.said.insert(tag, said);
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        let mut out = fields.clone();
        out[candidates::READY] = flag(self.said.values().all(|s| s.0));
        out[candidates::PENDING] = flag(self.said.values().any(|s| s.1));
        out
    }
}

impl SharedRecords {
    /// A poisoned lock only means a panic elsewhere mid-update of plain data.
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Redlock {
    /// Write this sidecar's candidate record (when `mine` is given) and read everyone's, on every
    /// node in parallel. Returns the candidates a quorum of nodes holds, or `None` when fewer
    /// than a quorum answered. Each record lives for `life`. A shard of a sharded lease shares
    /// the round with its process's other shards ([`SharedRecords`]); `read_after`: a decision
    /// rests on this read (the health handover), so it comes from a round begun at or after
    /// that instant, never from an older shared one.
    pub async fn candidates(
        &self,
        mine: Option<OwnRecord<'_>>,
        life: Duration,
        read_after: Option<Instant>,
    ) -> Option<Vec<Candidate>> {
        let (Some(shared), Some(mine)) = (self.shared.as_ref(), mine) else {
            return self.candidates_round(mine, life).await;
        };
        let new_enough = |started: Instant| read_after.is_none_or(|t| started >= t);
        loop {
            let step = {
                let mut s = shared.lock();
                if s.withdrawn {
                    Step::Read
                } else {
                    let fields = s.combined(self.tag, mine.fields);
                    if let Some(last) = s.last.as_ref()
                        && last.fields == fields
                        && last.started.elapsed() < life / 4
                        && new_enough(last.started)
                    {
                        return Some(last.read.clone());
                    }
                    match s.flight.as_ref() {
                        Some(f) if f.fields == fields && new_enough(f.started) => {
                            Step::Join(f.read.clone())
                        }
                        // One write at a time: two rounds writing different fields could land in
                        // either order on a node.
                        Some(f) => Step::After(f.read.clone()),
                        None => {
                            s.flights += 1;
                            let (id, started) = (s.flights, Instant::now());
                            let round =
                                self.round(Some((mine.identity.to_string(), fields.clone())), life);
                            let (shared, writes) = (shared.clone(), fields.clone());
                            let read = async move {
                                let read = round.await;
                                let mut s = shared.lock();
                                if s.flight.as_ref().is_some_and(|f| f.id == id) {
                                    s.flight = None;
                                }
                                s.last = read.clone().map(|read| Written {
                                    started,
                                    fields: fields.clone(),
                                    read,
                                });
                                read
                            }
                            .boxed()
                            .shared();
                            s.flight = Some(Flight {
                                id,
                                started,
                                fields: writes,
                                read: read.clone(),
                            });
                            Step::Join(read)
                        }
                    }
                }
            };
            match step {
                Step::Read => return self.candidates_round(None, life).await,
                Step::Join(round) => return round.await,
                Step::After(round) => {
                    round.await;
                }
            }
        }
    }

    /// One candidates round on every node: [`Redlock::candidates`] without the sharing.
    async fn candidates_round(
        &self,
        mine: Option<OwnRecord<'_>>,
        life: Duration,
    ) -> Option<Vec<Candidate>> {
        let mine = mine.map(|m| (m.identity.to_string(), m.fields.clone()));
        self.round(mine, life).await
    }

    /// A candidates round writing `mine` (identity, fields), owning what it needs: a shared
    /// round outlives the shard that began it.
    fn round(
        &self,
        mine: Option<(String, [String; 5])>,
        life: Duration,
    ) -> impl Future<Output = Option<Vec<Candidate>>> + Send + 'static {
        let (nodes, key, quorum) = (
            self.nodes.clone(),
            self.candidates_key.clone(),
            self.quorum(),
        );
        async move {
            let script = &scripts().candidates;
            let life_ms = life.as_millis().max(1).to_string();
            let mut args: Vec<&str> = vec![mine.as_ref().map_or("", |m| m.0.as_str()), &life_ms];
            match &mine {
                Some((_, fields)) => args.extend(fields.iter().map(String::as_str)),
                None => args.extend(["0", "0", "0", "0", ""]),
            }
            let keys = [key.as_str()];
            let answers: Vec<NodeRecords> = nodes
                .iter()
                .map(|n| n.eval_joined(None, script, &keys, &args))
                .collect::<FuturesUnordered<_>>()
                .filter_map(|r| async move { r.ok().map(|r| r.items).map(parse_candidates) })
                .collect()
                .await;
            (answers.len() >= quorum).then(|| candidates::merge(&answers, quorum))
        }
    }

    /// Remove this sidecar's candidate record on every node in parallel (graceful shutdown).
    /// A sharded lease's shared record is withdrawn once, by the first of its shards, after the
    /// round under way (its write must not land after the withdrawal); the others' rounds then
    /// only read.
    pub async fn withdraw(&self, identity: &str) {
        let Some(shared) = self.shared.as_ref() else {
            return self.withdraw_round(identity).await;
        };
        let first = loop {
            let round = {
                let mut s = shared.lock();
                match s.flight.as_ref() {
                    Some(f) => f.read.clone(),
                    None => {
                        s.last = None;
                        break !std::mem::replace(&mut s.withdrawn, true);
                    }
                }
            };
            round.await;
        };
        if first {
            self.withdraw_round(identity).await;
        }
    }

    async fn withdraw_round(&self, identity: &str) {
        let script = &scripts().candidates;
        let keys = [self.candidates_key.as_str()];
        let args = [identity, "1", "withdraw", "0", "0", "0", ""];
        self.nodes
            .iter()
            .map(|n| n.eval(script, &keys, &args))
            .collect::<FuturesUnordered<_>>()
            .for_each(|_| async {})
            .await;
    }
}

pub(super) fn parse_candidates(items: Vec<Value>) -> NodeRecords {
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    // `eval` has taken the leading TIME off; the script repeats it, so the entries are judged
    // by the time the node itself used.
    let mut it = items.into_iter();
    let now = match it.next() {
        Some(Value::Int(n)) => n,
        _ => 0,
    };
    let rest: Vec<Value> = it.collect();
    let entries = rest
        .chunks(2)
        .filter_map(|p| match p {
            [k, v] => Some((text(k)?, text(v)?)),
            _ => None,
        })
        .collect();
    NodeRecords {
        now_us: now,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(ready: bool, pending: bool) -> [String; 5] {
        let flag = |b: bool| if b { "1" } else { "0" }.to_string();
        [
            flag(ready),
            "2".into(),
            "7".into(),
            flag(pending),
            "rev".into(),
        ]
    }

    #[test]
    fn a_shared_record_says_ready_while_every_shard_does_and_pending_while_any_does() {
        let mut s = Shared::default();
        assert_eq!(s.combined(1, &fields(true, false)), fields(true, false));
        assert_eq!(s.combined(2, &fields(false, true)), fields(false, true));
        // Shard 2's last word still counts when shard 1 speaks again.
        assert_eq!(s.combined(1, &fields(true, false)), fields(false, true));
        assert_eq!(s.combined(2, &fields(true, false)), fields(true, false));
    }
}

//! The candidate-record rounds: write this sidecar's record and read everyone's on every node,
//! and withdraw the record at shutdown. What the records mean is in [`super::candidates`].

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Value;

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

impl Redlock {
    /// Write this sidecar's candidate record (when `mine` is given) and read everyone's, on every
    /// node in parallel. Returns the candidates a quorum of nodes holds, or `None` when fewer
    /// than a quorum answered. Each record lives for `life`.
    pub async fn candidates(
        &self,
        mine: Option<OwnRecord<'_>>,
        life: Duration,
    ) -> Option<Vec<Candidate>> {
        let script = &scripts().candidates;
        let life_ms = life.as_millis().max(1).to_string();
        let mut args: Vec<&str> = vec![mine.map_or("", |m| m.identity), &life_ms];
        match mine {
            Some(m) => args.extend(m.fields.iter().map(String::as_str)),
            None => args.extend(["0", "0", "0", "0", ""]),
        }
        let keys = [self.candidates_key.as_str()];
        let answers: Vec<NodeRecords> = self
            .nodes
            .iter()
            .map(|n| n.eval_joined(None, script, &keys, &args))
            .collect::<FuturesUnordered<_>>()
            .filter_map(|r| async move { r.ok().map(|r| r.items).map(parse_candidates) })
            .collect()
            .await;
        (answers.len() >= self.quorum()).then(|| candidates::merge(&answers, self.quorum()))
    }

    /// Remove this sidecar's candidate record on every node in parallel (graceful shutdown).
    pub async fn withdraw(&self, identity: &str) {
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

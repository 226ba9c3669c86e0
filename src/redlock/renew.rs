//! The renew round: extend the key (healing it where a node lost it) and assert the term's
//! fencing token, decided at the quorum-th counting yes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Value;
use tokio::time::Instant;

use super::Redlock;
use super::lease::Lease;
use super::math::{self, Tally};
use super::node::{CommandError, Node, Reply};
use super::proof::TermLog;
use super::scripts::scripts;

impl Redlock {
    /// Renew (and assert the epoch) on all nodes. Returns the new deadline if a quorum of
    /// counting nodes confirmed before the validity ran out.
    pub async fn renew(&self, lease: &Lease) -> Option<Instant> {
        let ttl_ms = self.ttl.as_millis().to_string();
        let token = lease.token.to_string();
        let renew = &scripts().renew;
        // Under the test-only `--unsafe-disable-reconnect-taint`, a reservation key that never
        // exists: a renewal heals a missing key whatever is reserved (5375106).
        let unreserved = format!("{}:unsafe-no-reservation", self.key);
        let reservation = match self.reconnect_taint_off {
            true => unreserved.as_str(),
            false => self.reservation_key.as_str(),
        };
        // Owned: the replies still out when the round is decided are read in the background.
        let keys = Arc::new([
            self.key.clone(),
            self.epoch_key.clone(),
            reservation.to_string(),
        ]);
        // ARGV[4] `1` only under the test-only `--unsafe-allow-renewal-to-shorten`.
        let shorten = if self.renewal_may_shorten { "1" } else { "0" };
        let args = Arc::new([lease.value.clone(), ttl_ms, token, shorten.to_string()]);
        let t1 = Instant::now();
        let n_nodes = self.nodes.len();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (seq, generation) = self.log_sent(&lease.value, i, n_nodes);
                let (node, keys, args) = (n.clone(), keys.clone(), args.clone());
                async move {
                    let keys = keys.each_ref().map(String::as_str);
                    let args = args.each_ref().map(String::as_str);
                    let r = node.eval_joined(generation, renew, &keys, &args).await;
                    (i, node, seq, r)
                }
            })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        // The largest blind band of the counted replies: the term ends that much sooner
        // (`acquire::Blind`).
        let mut band = Duration::ZERO;
        while let Some((i, node, seq, r)) = pending.next().await {
            let reply_band = r.as_ref().map_or(Duration::ZERO, |reply| reply.band);
            let counted = log_renewal(&self.term_log, self.tag, &lease.value, i, &node, seq, &r);
            if counted {
                tally.yes += 1;
                band = band.max(reply_band);
            } else {
                tally.not_yes += 1;
            }
            if tally.decided().is_some() {
                break;
            }
        }
        // The stragglers' replies are read (each bounded by the timeout) and their answers
        // logged, as the ones before the decision: a node whose last renewal was answered is settled for the
        // release proof ([`super::proof`]). Dropped unread, the slowest node of every round
        // stayed unsettled, and a graceful release proved only a quorum of the nodes.
        if !pending.is_empty() {
            let (log, value, tag) = (self.term_log.clone(), lease.value.clone(), self.tag);
            self.releasing.spawn(async move {
                while let Some((i, node, seq, r)) = pending.next().await {
                    // A straggler that fails or times out stays unanswered, as when the round
                    // dropped it: a later answer on the same connection settles its node (the
                    // connection runs commands in order), a reconnect taints it
                    // (`TermLog::sent`). Taken as a failure it would taint the node for the
                    // rest of the term, and under `--unsafe-disable-reconnect-taint` hide the
                    // hazard that switch exists to show.
                    if r.is_ok() {
                        log_renewal(&log, tag, &value, i, &node, seq, &r);
                    }
                }
            });
        }
        let ok = tally.decided() == Some(true)
            && math::validity(self.ttl, t1.elapsed(), self.drift + band).is_some();
        self.metrics.renewal(ok);
        ok.then(|| t1 + self.ttl - self.drift - band)
    }
}

/// Log one renewal's reply in the term log; returns whether its yes counts (`1` or `2` from a
/// node that counts now for lease `tag`).
fn log_renewal(
    log: &Mutex<TermLog>,
    tag: u64,
    value: &str,
    i: usize,
    node: &Node,
    seq: u64,
    r: &Result<Reply, CommandError>,
) -> bool {
    let counted = match r.as_ref().map(|reply| reply.items.as_slice()) {
        Ok([Value::Int(1 | 2)]) => node.counts_for(tag, Instant::now()),
        Ok([Value::Int(0)]) => {
            tracing::warn!(endpoint = %node.name(), "renewal denied: the key belongs to someone else on this node");
            false
        }
        _ => false,
    };
    let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
    match r {
        Ok(_) => log.answered(value, i, seq, counted),
        Err(_) => log.failed(value, i),
    }
    counted
}

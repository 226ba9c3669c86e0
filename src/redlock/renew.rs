//! The renew round: extend the key (healing it where a node lost it) and assert the term's
//! fencing token, decided at the quorum-th counting yes.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Value;
use tokio::time::Instant;

use super::Redlock;
use super::lease::Lease;
use super::math::{self, Tally};
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
        let keys = [self.key.as_str(), self.epoch_key.as_str(), reservation];
        let args = [lease.value.as_str(), &ttl_ms, &token];
        let t1 = Instant::now();
        let n_nodes = self.nodes.len();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let (seq, generation) = self.log_sent(&lease.value, i, n_nodes);
                let r = n.eval_read_on(generation, renew, &keys, &args);
                async move { (i, n, seq, r.await) }
            })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        // The largest blind band of the counted replies: the term ends that much sooner
        // (`acquire::Blind`).
        let mut band = Duration::ZERO;
        while let Some((i, node, seq, r)) = pending.next().await {
            let reply_band = r.as_ref().map_or(Duration::ZERO, |reply| reply.band);
            let r = r.map(|reply| reply.items);
            let counted = match r.as_deref() {
                Ok([Value::Int(1 | 2)]) if node.counts(Instant::now()) => true,
                Ok([Value::Int(0)]) => {
                    tracing::warn!(endpoint = %node.name(), "renewal denied: the key belongs to someone else on this node");
                    false
                }
                _ => false,
            };
            match r {
                Ok(_) => self.log_answered(&lease.value, i, seq, counted),
                Err(_) => self.log_failed(&lease.value, i),
            }
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
        let ok = tally.decided() == Some(true)
            && math::validity(self.ttl, t1.elapsed(), self.drift + band).is_some();
        self.metrics.renewal(ok);
        ok.then(|| t1 + self.ttl - self.drift - band)
    }
}

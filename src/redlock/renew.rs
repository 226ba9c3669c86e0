//! The renew round: extend the key (healing it where a node lost it) and assert the term's
//! fencing token, decided at the quorum-th counting yes.

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
        let keys = [self.key.as_str(), self.epoch_key.as_str()];
        let args = [lease.value.as_str(), &ttl_ms, &token];
        let t1 = Instant::now();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .map(|n| async move { (n, n.eval(renew, &keys, &args).await) })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        while let Some((node, r)) = pending.next().await {
            match r.as_deref() {
                Ok([Value::Int(1 | 2)]) if node.counts(Instant::now()) => tally.yes += 1,
                Ok([Value::Int(0)]) => {
                    tracing::warn!(endpoint = %node.name(), "renewal denied: the key belongs to someone else on this node");
                    tally.not_yes += 1;
                }
                _ => tally.not_yes += 1,
            }
            if tally.decided().is_some() {
                break;
            }
        }
        let ok = tally.decided() == Some(true)
            && math::validity(self.ttl, t1.elapsed(), self.drift).is_some();
        self.metrics.renewal(ok);
        ok.then(|| t1 + self.ttl - self.drift)
    }
}

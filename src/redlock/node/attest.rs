//! Attestations: a fresh sidecar asks the sidecars that already count a node to vouch for its
//! watch of that node's clock, so it counts the node within milliseconds instead of a window.
//!
//! The exchange, on the node itself ([`crate::redlock::scripts::ATTEST`]), per watch of this
//! sidecar:
//! 1. **request**: while the clock watch is all that keeps the node from counting, this
//!    sidecar writes a request naming its current watch (`<instance>-<epoch>`) to the lease's
//!    attestation hash, in a reply that is itself a reading of the watch, and publishes
//!    `request` on the lease's attestation channel. It repeats the request every
//!    [`REQUEST_EVERY`] until the node counts (a lost message costs no more than that).
//! 2. **vouch**: a sidecar that receives `request` and counts the node reads the pending
//!    requests (the script's `pending` mode). Its reply is a reading too: observed first, so a
//!    step since its previous reading is caught there. Only if the node still counts for it at
//!    that reading ([`crate::redlock::clock::Watch::may_vouch`]) does it vouch for exactly the
//!    requests that reading returned, and publishes `vouched`.
//! 3. **check**: the requester reads its request's state; a vouch counts for the watch it names
//!    and no other ([`crate::redlock::clock::Watch::attest`]).
//!
//! Why it is safe: the voucher counts the node at its reading, so no step of the node's clock
//! before that reading can still shorten a live lease (its own watch would have caught it, or
//! waited it out). The request was written during the requester's watch and before that
//! reading, so the requester's watch, unbroken since, catches every step after. There is no
//! moment between the two watches. What a vouch cannot replace: the restart quarantine, the
//! replica and eviction rules, and a running jump quarantine, which the requester applies as
//! before. With nobody counting the node yet (a cold start of the whole fleet, or every
//! sidecar's watch broken by the same partition), nobody can vouch and the window stays.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Node, lock, mono_us};
use crate::redlock::scripts::scripts;

/// How often a sidecar whose watch of a node does not count yet reads whether it was vouched
/// for, in case a `vouched` message (which wakes it at once) was lost...
pub const RECHECK_EVERY: Duration = Duration::from_millis(500);
/// ...and how often it repeats its request (and its `request` message). While nobody can vouch
/// (a cold start of the whole fleet) that is three commands a second per node, for one window.
pub const REQUEST_EVERY: Duration = Duration::from_secs(1);

/// The lease's attestation hash and channel, both `<keyPrefix><lease>:attest`.
#[derive(Clone, Debug)]
pub struct AttestKeys {
    /// The hash of requests: `<instance>-<epoch>` → `p|<expiry>` (pending) or `v|<expiry>`.
    pub hash: String,
    /// The channel `request` and `vouched` are published on.
    pub channel: String,
    /// How long a request lives: the clock window (after it, the watch counts anyway).
    pub life: Duration,
}

/// The state of this sidecar's request for the current watch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Requested {
    /// The server and watch it names.
    run_id: String,
    epoch: u32,
    /// When it was last written.
    at: Instant,
}

impl Node {
    /// The request name of this process's watch `epoch`.
    fn nonce(&self, epoch: u32) -> String {
        format!("{}{epoch}", self.nonce_prefix())
    }

    /// What every request name of this process starts with.
    fn nonce_prefix(&self) -> String {
        format!("{:016x}-", self.instance)
    }

    /// The watch this sidecar would ask a vouch for at `now`: the node is connected and its
    /// clock watch is all that keeps it from counting (no jump quarantine; a restart quarantine
    /// or exclusion does not stop a request, but a vouch does not lift it either).
    fn attestation_wanted(&self, now: Instant) -> Option<(String, u32)> {
        if !self.is_up() {
            return None;
        }
        let h = lock(&self.health);
        h.clock
            .attestation_wanted(mono_us(now), &self.clock_policy)
            .map(|(run, epoch)| (run.to_string(), epoch))
    }

    /// Keep asking for, and giving, attestations of this node's clock until `stop`.
    pub async fn attest(self: Arc<Self>, keys: AttestKeys, stop: CancellationToken) {
        let script = &scripts().attest;
        let life_ms = keys.life.as_millis().max(1).to_string();
        let hash = [keys.hash.as_str()];
        let mut requested: Option<Requested> = None;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let now = Instant::now();
            let wanted = self.attestation_wanted(now);
            if let Some((run_id, epoch)) = &wanted {
                let nonce = self.nonce(*epoch);
                let fresh = requested
                    .as_ref()
                    .is_some_and(|r| &r.run_id == run_id && r.epoch == *epoch);
                if fresh {
                    self.check_vouch(&hash, &nonce, *epoch).await;
                }
                let due = !fresh
                    || requested
                        .as_ref()
                        .is_some_and(|r| now >= r.at + REQUEST_EVERY);
                if due && self.attestation_wanted(Instant::now()).is_some() {
                    let args = ["request", nonce.as_str(), &life_ms, keys.channel.as_str()];
                    if self.eval(script, &hash, &args).await.is_ok() {
                        requested = Some(Requested {
                            run_id: run_id.clone(),
                            epoch: *epoch,
                            at: now,
                        });
                    }
                }
            }
            if self.attest_requests.swap(false, Ordering::SeqCst) {
                self.vouch(&hash, &keys.channel).await;
            }
            let wait = match wanted {
                Some(_) => RECHECK_EVERY,
                None => self.clock_refresh(),
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.attest_wake.notified() => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Read whether the request for watch `epoch` was vouched for, and take the vouch.
    async fn check_vouch(&self, hash: &[&str], nonce: &str, epoch: u32) {
        let script = &scripts().attest;
        let Ok(reply) = self.eval_read(script, hash, &["check", nonce]).await else {
            return;
        };
        let vouched = matches!(reply.items.first(), Some(Value::BulkString(b)) if b == b"v");
        if !vouched {
            return;
        }
        let taken = lock(&self.health)
            .clock
            .attest(&reply.run_id, epoch, mono_us(reply.received));
        if taken {
            tracing::info!(
                endpoint = %self.endpoint.name,
                "another sidecar that counts this redis node vouched for this sidecar's watch of its clock; the node counts without waiting for the window"
            );
            self.metrics.attestation(&self.endpoint.name, "taken");
            self.counting.notify();
        }
    }

    /// Someone asked for a vouch: if this node counts for this sidecar, read the pending
    /// requests and vouch for exactly those, provided the node still counts at that reading.
    async fn vouch(&self, hash: &[&str], channel: &str) {
        let check = self.clock_policy.attestation_check;
        if check && !self.counts(Instant::now()) {
            return;
        }
        let script = &scripts().attest;
        let Ok(reply) = self.eval_read(script, hash, &["pending"]).await else {
            return;
        };
        let own = self.nonce_prefix();
        let nonces: Vec<String> = reply
            .items
            .iter()
            .filter_map(|v| match v {
                Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
                _ => None,
            })
            .filter(|n| !n.starts_with(&own))
            .collect();
        if nonces.is_empty() {
            return;
        }
        let may = lock(&self.health).clock.may_vouch(
            &reply.run_id,
            mono_us(reply.received),
            &self.clock_policy,
        );
        if !may || (check && !self.counts(reply.received)) {
            tracing::debug!(endpoint = %self.endpoint.name, "not vouching: the redis node does not count for this sidecar at the reading");
            return;
        }
        let mut args: Vec<&str> = vec!["vouch", channel];
        args.extend(nonces.iter().map(String::as_str));
        if self.eval(script, hash, &args).await.is_ok() {
            tracing::debug!(endpoint = %self.endpoint.name, requests = nonces.len(), "vouched for other sidecars' watches of the redis node's clock");
            self.metrics.attestation(&self.endpoint.name, "given");
        }
    }

    /// The subscription saw a message on the attestation channel: `request` (someone wants a
    /// vouch) or `vouched` (maybe for this sidecar).
    pub(super) fn attestation_message(&self, payload: &str) {
        if payload == "request" {
            self.attest_requests.store(true, Ordering::SeqCst);
        }
        self.attest_wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redlock::clock;

    #[test]
    fn a_lost_message_costs_at_most_a_second() {
        assert!(RECHECK_EVERY < REQUEST_EVERY && REQUEST_EVERY <= Duration::from_secs(1));
    }

    #[test]
    fn the_policy_default_checks_attestations() {
        let p = clock::Policy::new(Duration::from_secs(10), 0.01, true);
        assert!(p.attestation_check);
    }
}

//! The release round: a token-checked delete on every node that returns at the quorum-th
//! confirmation, the rest finishing in the background; optionally a release notice, naming a
//! successor for whom the key stays reserved for a grace.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use tokio::time::Instant;

use super::Redlock;
use super::candidates;
use super::proof;
use super::scripts::scripts;

/// How long followers not named by a release notice wait before contending, measured against
/// the named successor's acquisition (README "Rollouts"): on loopback the named one holds the
/// lease 1–3 ms after the notice; a round trip to distant nodes plus a slow node's reply stays
/// within one `redis.timeout`. So the grace is `redis.timeout` + this margin, and a named
/// successor that is gone delays the handover by at most that much.
pub const GRACE_MARGIN: Duration = Duration::from_millis(25);

/// The grace for a given per-node timeout: `redis.timeout + GRACE_MARGIN`.
pub fn grace(redis_timeout: Duration) -> Duration {
    redis_timeout + GRACE_MARGIN
}

/// Whom a release tells that the key is free.
#[derive(Clone, Copy, Debug)]
pub enum Notice<'a> {
    /// Nobody: the cleanup of a failed attempt, which no follower waits for.
    Silent,
    /// Every follower, through the release-notice channel: they attempt at once.
    Followers,
    /// The followers, naming a successor: it attempts at once, the others after the grace,
    /// and each node keeps the key reserved for it for the grace.
    Successor(Successor<'a>),
}

/// The follower a graceful release names, and how long the key stays reserved for it.
#[derive(Clone, Copy, Debug)]
pub struct Successor<'a> {
    /// Its identity.
    pub identity: &'a str,
    /// The reservation's lifetime on each node: the grace the other followers wait.
    pub grace: Duration,
    /// The releasing lease's deadline: the release carries the proof that no live holder is
    /// left ([`super::proof`]) only while it is still ahead.
    pub valid_until: Instant,
}

impl Redlock {
    /// The graceful release of `lease` at a step-down: the notice goes to every follower, and
    /// names `successor` when the elector chose one (the key stays reserved for it for the
    /// [`grace`] on each node, with the release proof while the lease is valid). The notice is
    /// built here; the elector only decides whom it names.
    pub async fn hand_over(&self, lease: &super::Lease, successor: Option<&str>) {
        let notice = match successor {
            Some(identity) => Notice::Successor(Successor {
                identity,
                grace: self.grace,
                valid_until: lease.deadline,
            }),
            None => Notice::Followers,
        };
        self.release(&lease.value, notice).await;
    }

    /// Token-checked delete on every node in parallel, publishing the release notice as
    /// `notice` says.
    ///
    /// Returns once a quorum of nodes confirmed (the key is ours no more there: deleted, or held
    /// by nobody or someone else), the moment no lease can need more of them; or once every node
    /// answered or timed out. The commands still out keep running in a background task, each
    /// bounded by the per-node timeout, so every node still gets its release: a slow or
    /// unreachable node delays neither a step-down nor the next attempt. [`Redlock::settled`]
    /// waits for them (shutdown does, before the process exits).
    pub async fn release(&self, value: &str, notice: Notice<'_>) {
        let release = &scripts().release;
        // Owned once for all nodes: the futures may outlive this call (see below).
        let args = Arc::new(self.release_args(value, notice));
        let proofs = self.proofs(value, notice);
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .zip(proofs)
            .map(|(n, proof)| {
                let (node, args) = (n.clone(), args.clone());
                async move {
                    let [key, reservation, value, channel, payload, named, grace] = &*args;
                    let proof = if proof { "1" } else { "0" };
                    node.eval(
                        release,
                        &[key, reservation],
                        &[value, channel, payload, named, grace, proof],
                    )
                    .await
                    .is_ok()
                }
            })
            .collect();
        let quorum = self.quorum();
        let mut confirmed = 0;
        while let Some(ok) = pending.next().await {
            confirmed += usize::from(ok);
            if confirmed >= quorum {
                break;
            }
        }
        if pending.is_empty() {
            return;
        }
        self.releasing
            .spawn(async move { while pending.next().await.is_some() {} });
    }

    /// The release script's keys and arguments: key, reservation; value, channel ('' = do not
    /// publish), payload, successor ('' = none), grace ms.
    fn release_args(&self, value: &str, notice: Notice<'_>) -> [String; 7] {
        let channel = match notice {
            Notice::Silent => "",
            Notice::Followers | Notice::Successor(_) => self.channel.as_str(),
        };
        let (named, grace_ms) = match notice {
            Notice::Successor(s) => (Some(s.identity), s.grace.as_millis().max(1) as u64),
            Notice::Silent | Notice::Followers => (None, 0),
        };
        [
            self.key.clone(),
            self.reservation_key.clone(),
            value.to_string(),
            channel.to_string(),
            candidates::notice_payload(value, named),
            named.unwrap_or("").to_string(),
            grace_ms.to_string(),
        ]
    }

    /// Per node, whether this release may carry the proof that no live holder is left
    /// ([`proof::may_prove`]): only a release naming a successor, of a lease still valid.
    fn proofs(&self, value: &str, notice: Notice<'_>) -> Vec<bool> {
        let Notice::Successor(s) = notice else {
            return vec![false; self.nodes.len()];
        };
        let now = Instant::now();
        let valid = now < s.valid_until;
        let log = self.term_log();
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| proof::may_prove(&log, value, i, valid, n.counts(now)))
            .collect()
    }

    /// Resolves once no release is still running on any node (see [`Redlock::release`]).
    pub async fn settled(&self) {
        // Closing only lets `wait` resolve once empty; releases after this are still tracked.
        self.releasing.close();
        self.releasing.wait().await;
    }
}

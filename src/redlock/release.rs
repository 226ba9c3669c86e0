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
    /// For a shard handed over to balance: how often it has moved in a rollout so far (the
    /// notice's third line, [`candidates::notice_payload`]).
    pub moved: Option<u8>,
}

impl Redlock {
    /// The graceful release of `lease` at a step-down: the notice goes to every follower, and
    /// names `successor` when the elector chose one (the key stays reserved for it for the
    /// [`grace`] on each node, with the release proof while the lease is valid). The notice is
    /// built here; the elector only decides whom it names (and, for a shard, tells it how
    /// often the shard has moved: `moved`).
    pub async fn hand_over(
        &self,
        lease: &super::Lease,
        successor: Option<&str>,
        moved: Option<u8>,
    ) {
        let notice = match successor {
            Some(identity) => Notice::Successor(Successor {
                identity,
                grace: self.grace,
                valid_until: lease.deadline,
                moved,
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
        let quorum = self.quorum();
        let held_back = hold_back(&proofs, quorum);
        let releases = self
            .nodes
            .iter()
            .zip(proofs)
            .map(|(n, proof)| {
                let (node, args) = (n.clone(), args.clone());
                async move {
                    let [key, reservation, value, channel, payload, named, grace] = &*args;
                    let proof_arg = if proof { "1" } else { "0" };
                    let ok = node
                        .eval(
                            release,
                            &[key, reservation],
                            &[value, channel, payload, named, grace, proof_arg],
                        )
                        .await
                        .is_ok();
                    (proof, ok)
                }
            })
            .zip(held_back);
        // The nodes held back go out once a quorum of the proof's nodes confirmed, or once too
        // few of them are left to make one: see [`hold_back`].
        let (later, first): (Vec<_>, Vec<_>) = releases.partition(|(_, held)| *held);
        let mut later: Vec<_> = later.into_iter().map(|(f, _)| f).collect();
        let mut pending: FuturesUnordered<_> = first.into_iter().map(|(f, _)| f).collect();
        let (mut confirmed, mut proved) = (0, 0);
        while let Some((proof, ok)) = pending.next().await {
            confirmed += usize::from(ok);
            proved += usize::from(ok && proof);
            // While some are held back, every release still pending is a proof node's.
            let hopeless = proved + pending.len() < quorum;
            if !later.is_empty() && (proved >= quorum || hopeless) {
                pending.extend(later.drain(..));
            }
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
        let (named, grace_ms, moved) = match notice {
            Notice::Successor(s) => (Some(s.identity), s.grace.as_millis().max(1) as u64, s.moved),
            Notice::Silent | Notice::Followers => (None, 0, None),
        };
        [
            self.key.clone(),
            self.reservation_key.clone(),
            value.to_string(),
            channel.to_string(),
            candidates::notice_payload(value, named, moved),
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
            .map(|(i, n)| proof::may_prove(&log, value, i, valid, n.counts_for(self.tag, now)))
            .collect()
    }

    /// Resolves once no release is still running on any node (see [`Redlock::release`]).
    pub async fn settled(&self) {
        // Closing only lets `wait` resolve once empty; releases after this are still tracked.
        self.releasing.close();
        self.releasing.wait().await;
    }
}

/// Which nodes' releases wait until a quorum of the nodes that carry the release proof confirmed
/// theirs: the nodes without the proof, when the proof is on at least a quorum but not on every
/// node. The named successor attempts at the quorum-th copy of the notice, and a fresh one wins
/// only on proofs. If a node without the proof (a `Spare` grant at the term's start, a command
/// that timed out) could publish its copy first, those copies could make a quorum while the
/// release to a proof node is still on its way (a slow connection, a descheduled releaser): the
/// successor's attempt would then find the old key there and lose, and with it the proofs it
/// consumed elsewhere, and wait out its clock watch (a ttl without a leader). Held back, every
/// copy from such a node comes after a quorum of proof nodes was released, so a quorum of copies
/// always finds a quorum of proofs. It costs those nodes one round trip; the release still
/// returns at the quorum-th confirmation, which the proof nodes give. Only when one of exactly a
/// quorum of proof nodes hangs does the wait for it (up to `redis.timeout`) delay the rest, and
/// with them the quorum-th confirmation and the notice's quorum of copies.
fn hold_back(proofs: &[bool], quorum: usize) -> Vec<bool> {
    let proved = proofs.iter().filter(|p| **p).count();
    let staged = proved >= quorum && proved < proofs.len();
    proofs.iter().map(|p| staged && !p).collect()
}

#[cfg(test)]
mod tests {
    use super::hold_back;

    #[test]
    fn only_nodes_without_the_proof_wait_and_only_when_the_proof_can_win() {
        // Proof everywhere, or nowhere: nothing waits.
        assert_eq!(hold_back(&[true, true, true], 2), [false, false, false]);
        assert_eq!(hold_back(&[false, false, false], 2), [false, false, false]);
        // A quorum of proofs: the rest wait.
        assert_eq!(hold_back(&[true, false, true], 2), [false, true, false]);
        assert_eq!(
            hold_back(&[true, true, false, true, false], 3),
            [false, false, true, false, true]
        );
        // Fewer proofs than a quorum: a fresh successor cannot win on them, nothing waits.
        assert_eq!(hold_back(&[true, false, false], 2), [false, false, false]);
    }
}

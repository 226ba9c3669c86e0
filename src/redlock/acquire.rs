//! The acquire round: `SET NX` with a proposed fencing token on every node, decided at the
//! quorum-th counting yes; a failed attempt cleans up everywhere and reports who holds the key.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

use super::Redlock;
use super::lease::{Acquire, Lease, Observed, new_value};
use super::math::{self, Tally};
use super::node::Node;
use super::release::Notice;
use super::scripts::scripts;

mod blind;
mod outcome;
mod votes;

use blind::Blind;
use outcome::Outcome;
use votes::{Replies, Vote, observe, parse_acquire};

/// What an attempt asks of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Take the key: the node counts on its own.
    Take,
    /// Take the key only on a release proof for this identity (a named successor that has not
    /// watched the node's clock long enough).
    Proof,
    /// Take the key, but its yes never counts (the node does not count yet): as before the
    /// release proof, an attempt that can win sets its key on every node, so the first renewal
    /// finds it everywhere.
    Spare,
    /// Take nothing; report who holds the key.
    Probe,
}

impl Mode {
    fn of(counts: bool, provable: bool) -> Mode {
        match (counts, provable) {
            (true, _) => Mode::Take,
            (false, true) => Mode::Proof,
            (false, false) => Mode::Spare,
        }
    }

    /// The script's `mode` argument. Under the test-only `releaseProofCheckOff` a node asked
    /// on a proof is asked to take the key outright.
    fn arg(self, node: &Node) -> &'static str {
        match self {
            Mode::Take => "take",
            Mode::Proof if !node.proof_check() => "take",
            Mode::Proof => "proof",
            Mode::Spare => "take",
            Mode::Probe => "probe",
        }
    }
}

impl Redlock {
    /// Try to acquire the lease once. `named`: a release notice named this sidecar as the
    /// successor, so nodes whose clock it has not watched long enough may still count, each
    /// only if its grant consumes the previous holder's release proof ([`super::proof`]).
    pub async fn acquire(&self, identity: &str, named: bool) -> Acquire {
        let started = Instant::now();
        let outcome = self.acquire_inner(identity, named).await;
        self.metrics
            .acquire_finished(outcome.result(), started.elapsed());
        outcome
    }

    async fn acquire_inner(&self, identity: &str, named: bool) -> Acquire {
        let value = new_value(identity);
        let ttl_ms = self.ttl.as_millis().to_string();
        // Optimistic fencing token: one above every epoch this process has seen. Each granting
        // node stores it (set-if-greater) together with the key.
        let proposed = self.epoch_seen.load(Ordering::SeqCst) + 1;
        let proposed_arg = proposed.to_string();
        let acquire = &scripts().acquire;
        let t1 = Instant::now();
        // A node that cannot count (quarantined) gets no proposal to store: its vote is not
        // needed for the token, and failed attempts during a quarantine would otherwise raise
        // the epoch once per retry. Its yes is then never counted, even if the quarantine ends
        // before it answers. When fewer than a quorum can count, the attempt cannot win, so no
        // node gets a proposal: nodes leaving quarantine one by one must not inflate the epoch.
        // Nor does it take any key (a probe): it would only split the vote of contenders that
        // can win. A named successor may also win on nodes that would count with a release
        // proof: those are asked to take the key only if the proof is there.
        let modes: Vec<Mode> = self
            .nodes
            .iter()
            .map(|n| Mode::of(n.counts_for(self.tag, t1), named && n.counts_with_proof(t1)))
            .collect();
        let can_win = modes
            .iter()
            .filter(|m| matches!(m, Mode::Take | Mode::Proof))
            .count()
            >= self.quorum();
        let n_nodes = self.nodes.len();
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .zip(modes)
            .enumerate()
            .map(|(i, (n, mode))| {
                let mode = if can_win { mode } else { Mode::Probe };
                let proposed = match mode {
                    Mode::Take | Mode::Proof => proposed_arg.as_str(),
                    Mode::Spare | Mode::Probe => "0",
                };
                let (seq, generation) = self.log_sent(&value, i, n_nodes);
                let (value, ttl_ms) = (&value, ttl_ms.as_str());
                async move {
                    let keys =
                        [&self.key, &self.epoch_key, &self.reservation_key].map(String::as_str);
                    let args = [value.as_str(), ttl_ms, proposed, mode.arg(n), identity];
                    let r = n.eval_read_on(generation, acquire, &keys, &args).await;
                    (i, n, mode, seq, r)
                }
            })
            .collect();
        let mut tally = Tally::new(self.nodes.len());
        let mut replies = Replies::default();
        let mut outcomes = vec![Outcome::NoAnswer; n_nodes];
        let mut blind = Blind::default();
        // Once a quorum counted: when the term may begin, its best quorum's hold after the
        // vote that made that quorum ([`Blind::hold`]). Until then the replies still out are
        // read, in case a better quorum ends the hold sooner.
        let mut begin: Option<Instant> = None;
        // Whether the quorum that decided asked for a hold: the term is then checked again
        // once it begins.
        let mut held = false;
        loop {
            let next = match begin {
                None => pending.next().await,
                Some(at) => tokio::time::timeout_at(at, pending.next())
                    .await
                    .ok()
                    .flatten(),
            };
            let Some((i, node, mode, seq, r)) = next else {
                break;
            };
            let (vote, reading, band) = match r {
                Ok(reply) => (
                    parse_acquire(Ok(reply.items)),
                    Some((reply.run_id, reply.received)),
                    reply.band,
                ),
                Err(e) => {
                    self.log_failed(&value, i);
                    (parse_acquire(Err(e)), None, Duration::ZERO)
                }
            };
            let proved = matches!(vote, Vote::Yes { proved: true, .. });
            let answered = reading.is_some();
            let granted = matches!(vote, Vote::Yes { .. });
            let counted = granted && self.counts_vote(node, mode, proved, reading);
            outcomes[i] = Outcome::of(mode, &vote, Some(counted));
            replies.record(vote);
            // A reply read during the hold is left out of the term log, as the model drops a
            // straggler of a decided round unread: its node proves nothing until a later
            // command there is answered (fewer proofs, never a false one).
            if answered && begin.is_none() {
                self.log_answered(&value, i, seq, counted);
            }
            if counted {
                tally.yes += 1;
                blind.count(band, proved);
            } else {
                tally.not_yes += 1;
            }
            match tally.decided() {
                Some(true) => {
                    let hold = blind.hold(tally.quorum);
                    held |= begin.is_none() && !hold.is_zero();
                    let at = Instant::now() + hold;
                    let at = begin.map_or(at, |b| b.min(at));
                    begin = Some(at);
                    if at <= Instant::now() {
                        break;
                    }
                }
                Some(false) => break,
                None => {}
            }
        }
        // The term's validity as of its beginning.
        let valid = begin.and_then(|at| math::validity(self.ttl, at - t1, self.drift + blind.lead));
        if let (Some(at), Some(_)) = (begin, valid) {
            // Stragglers' replies no longer matter. A command its connection had not written
            // yet is dropped with them (redis skips a command whose reply nobody awaits): that
            // node gets the key at the first renewal, which sets it where it is missing.
            drop(pending);
            if held {
                tracing::debug!(
                    begins_after_ms = at.saturating_duration_since(t1).as_secs_f64() * 1000.0,
                    "won without a release proof on a quorum: leading once a step of a node's clock the watch could have missed has run out"
                );
                tokio::time::sleep_until(at).await;
                // A pause during the hold (SIGSTOP, a stalled host) can outlast the term, and
                // another sidecar may have led with a higher token meanwhile: a term already
                // over must not be published after it.
                if math::validity(self.ttl, t1.elapsed(), self.drift + blind.lead).is_none() {
                    self.release(&value, Notice::Silent).await;
                    return Acquire::NoQuorum(Observed::default());
                }
            }
            return self
                .won(value, replies.max_epoch, proposed, t1, blind.lead)
                .await;
        }
        // Failed. Collect the stragglers' replies first (each bounded by the timeout): the
        // decision was made early, but telling "someone else holds a quorum" from "no quorum
        // anywhere" needs them. Only then clean up everywhere: a straggler's command may not
        // even have been sent yet (a future is sent when first polled, and the decision can
        // come before every future was), and a release that overtook its acquire on the
        // connection would leave this attempt's key on that node for a whole ttl.
        let stragglers: Vec<Vote> = pending
            .map(|(i, _, mode, _, r)| {
                let vote = parse_acquire(r.map(|reply| reply.items));
                outcomes[i] = Outcome::of(mode, &vote, None);
                vote
            })
            .collect()
            .await;
        if named {
            outcome::log_lost_named(&self.nodes, &outcomes);
        } else if can_win {
            outcome::log_lost(&self.nodes, &outcomes);
        }
        self.release(&value, Notice::Silent).await;
        self.lost(replies, stragglers, tally.quorum)
    }

    /// Whether a granted vote counts: a node that counts on its own (its clock watched long
    /// enough) counts as ever; one asked to take the key on a release proof counts if the
    /// grant consumed the proof and the node takes it at that reading. Under the test-only
    /// `--unsafe-disable-release-proof-check`, a named successor takes every such grant as
    /// proved.
    fn counts_vote(
        &self,
        node: &Node,
        mode: Mode,
        proved: bool,
        reading: Option<(std::sync::Arc<str>, Instant)>,
    ) -> bool {
        match mode {
            Mode::Take => node.counts_for(self.tag, Instant::now()),
            // The test-only switch: every grant is taken as proved, without the node's word.
            Mode::Proof => {
                (proved || !node.proof_check())
                    && reading.is_some_and(|(run_id, at)| node.prove(self.tag, &run_id, at))
                    && node.counts_for(self.tag, Instant::now())
            }
            Mode::Spare | Mode::Probe => false,
        }
    }

    /// A quorum granted in time: fix the term's token and make sure a quorum holds it. `band`:
    /// the blind band of the counted votes ([`Blind::lead`]), taken off the term's end.
    async fn won(
        &self,
        value: String,
        max_epoch: u64,
        proposed: u64,
        t1: Instant,
        band: Duration,
    ) -> Acquire {
        let token = math::next_token(max_epoch, self.epoch_seen.load(Ordering::SeqCst));
        self.epoch_seen.fetch_max(token, Ordering::SeqCst);
        let mut lease = Lease {
            value,
            token,
            deadline: t1 + self.ttl - self.drift - band,
        };
        // The token must be on a quorum before this term may act. When every epoch seen in
        // this round was below the proposal, the token *is* the proposal, which each granting
        // node stored atomically with its key: it is on a quorum already.
        if token == proposed {
            return Acquire::Acquired(lease);
        }
        // Otherwise (this process was behind), the first renewal writes the token.
        match self.renew(&lease).await {
            Some(deadline) => {
                lease.deadline = lease.deadline.max(deadline);
                Acquire::Acquired(lease)
            }
            None => {
                self.release(&lease.value, Notice::Silent).await;
                Acquire::NoQuorum(Observed::default())
            }
        }
    }

    /// The attempt failed (and was cleaned up): learn the epochs and tell contention from no
    /// quorum anywhere.
    fn lost(&self, mut replies: Replies, stragglers: Vec<Vote>, quorum: usize) -> Acquire {
        for vote in stragglers {
            replies.record(vote);
        }
        self.epoch_seen
            .fetch_max(replies.max_epoch, Ordering::SeqCst);
        if replies.answered == 0 {
            return Acquire::Error;
        }
        let holders = observe(self.nodes.len(), &replies.denials);
        if holders.most >= quorum {
            Acquire::Contended(holders.observed)
        } else {
            Acquire::NoQuorum(holders.observed)
        }
    }
}

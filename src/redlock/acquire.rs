//! The acquire round: `SET NX` with a proposed fencing token on every node, decided at the
//! quorum-th counting yes; a failed attempt cleans up everywhere and reports who holds the key.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::Value;
use tokio::time::Instant;

use super::Redlock;
use super::lease::{Acquire, Lease, Observed, identity_of, new_value};
use super::math::{self, Tally};
use super::node::{CommandError, Node};
use super::release::Notice;
use super::scripts::scripts;

mod blind;
mod outcome;

use blind::Blind;
use outcome::Outcome;

/// One node's answer to the acquire script.
enum Vote {
    /// Granted.
    Yes {
        /// The node's epoch before it stored the proposal.
        epoch: u64,
        /// The grant consumed a release proof for this identity ([`super::proof`]).
        proved: bool,
    },
    /// Denied, naming the holder.
    No(Denial),
    /// No answer, or one of the wrong shape: the outcome on that node is unknown.
    Unknown,
}

/// A node's denial: who holds the key there, for how long, and the node's epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Denial {
    /// The holder's lock value (empty: the key is free but reserved, or a probe found it free).
    holder: String,
    /// The key's (or reservation's) remaining lifetime, if it has one.
    pttl: Option<Duration>,
    /// The node's fencing epoch.
    epoch: u64,
}

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

/// What the replies of one acquire round say, beyond the tally: how many nodes answered, the
/// highest epoch they reported, and who holds the key where we were denied.
#[derive(Default)]
struct Replies {
    /// Nodes that answered (granted or denied).
    answered: usize,
    /// Highest epoch reported by any answer (0 if none).
    max_epoch: u64,
    /// Every denial.
    denials: Vec<Denial>,
}

impl Replies {
    /// Record a reply.
    fn record(&mut self, vote: Vote) {
        match vote {
            Vote::Yes { epoch, .. } => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(epoch);
            }
            Vote::No(denial) => {
                self.answered += 1;
                self.max_epoch = self.max_epoch.max(denial.epoch);
                self.denials.push(denial);
            }
            Vote::Unknown => {}
        }
    }
}

/// What the denials of a failed attempt show.
#[derive(Debug, PartialEq, Eq)]
struct Holders {
    /// The most common holder and when a quorum will be free.
    observed: Observed,
    /// How many denials name that holder: a quorum of them means someone else holds the lease.
    most: usize,
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
            .map(|n| Mode::of(n.counts(t1), named && n.counts_with_proof(t1)))
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
            Mode::Take => node.counts(Instant::now()),
            // The test-only switch: every grant is taken as proved, without the node's word.
            Mode::Proof => {
                (proved || !node.proof_check())
                    && reading.is_some_and(|(run_id, at)| node.prove(&run_id, at))
                    && node.counts(Instant::now())
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

fn parse_acquire(r: Result<Vec<Value>, CommandError>) -> Vote {
    let Ok(items) = r else {
        return Vote::Unknown;
    };
    match items.as_slice() {
        [Value::Int(1), Value::Int(epoch), rest @ ..] => Vote::Yes {
            epoch: (*epoch).max(0) as u64,
            proved: matches!(rest, [Value::Int(1), ..]),
        },
        [Value::Int(0), holder, Value::Int(pttl), rest @ ..] => {
            let holder = match holder {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => String::new(),
            };
            let epoch = match rest {
                [Value::Int(e), ..] => (*e).max(0) as u64,
                _ => 0,
            };
            Vote::No(Denial {
                holder,
                pttl: u64::try_from(*pttl).ok().map(Duration::from_millis),
                epoch,
            })
        }
        _ => Vote::Unknown,
    }
}

/// What the denials show, and how many of them name the most common holder. The acquire script
/// reads the holder in the same atomic step as its failed `SET NX`, so a denial always names one.
fn observe(n: usize, denials: &[Denial]) -> Holders {
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for d in denials.iter().filter(|d| !d.holder.is_empty()) {
        *counts.entry(d.holder.as_str()).or_default() += 1;
    }
    let (holder, most) = counts
        .into_iter()
        .max_by_key(|(_, c)| *c)
        .map_or((None, 0), |(h, c)| (Some(identity_of(h).to_string()), c));
    let pttls: Vec<Duration> = denials.iter().filter_map(|d| d.pttl).collect();
    Holders {
        observed: Observed {
            holder,
            free_in: math::free_quorum_in(n, pttls),
        },
        most,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denials_carry_the_node_epoch() {
        let deny = |rest: Vec<Value>| {
            let mut v = vec![
                Value::Int(0),
                Value::BulkString(b"b#1".to_vec()),
                Value::Int(40),
            ];
            v.extend(rest);
            parse_acquire(Ok(v))
        };
        assert!(
            matches!(deny(vec![Value::Int(7)]), Vote::No(Denial { epoch: 7, ref holder, .. }) if holder == "b#1")
        );
        assert!(matches!(deny(vec![]), Vote::No(Denial { epoch: 0, .. })));
        let yes = parse_acquire(Ok(vec![Value::Int(1), Value::Int(3)]));
        assert!(matches!(
            yes,
            Vote::Yes {
                epoch: 3,
                proved: false
            }
        ));
        let proved = parse_acquire(Ok(vec![Value::Int(1), Value::Int(3), Value::Int(1)]));
        assert!(matches!(proved, Vote::Yes { proved: true, .. }));
    }

    #[test]
    fn observe_picks_the_majority_holder() {
        let ms = Duration::from_millis;
        let deny = |holder: &str, pttl| Denial {
            holder: holder.into(),
            pttl: Some(ms(pttl)),
            epoch: 0,
        };
        let h = observe(3, &[deny("b#1", 50), deny("b#1", 40), deny("c#2", 10)]);
        assert_eq!(h.observed.holder.as_deref(), Some("b"));
        assert_eq!(h.most, 2);
        assert_eq!(h.observed.free_in, Some(ms(40)));
    }
}

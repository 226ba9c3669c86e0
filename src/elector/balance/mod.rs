//! `lease.shards`: the shards of one lease spread evenly over the replicas.
//!
//! Every replica contends for every shard; each shard is a lease of its own, with its own
//! elector. What balances them is this process-wide task: every `renewEvery` (jittered) it
//! counts, from what its shards' electors know, how many shards each ready candidate leads
//! (the holder each shard's elector last observed), and while this sidecar leads at least two
//! more than the candidate that leads the fewest, it hands one of its shards to that candidate
//! on the named-successor path: a graceful release whose notice names it, which it takes within
//! milliseconds. Pairwise moves of one shard from a replica with at least two more converge to
//! an assignment where the most and the fewest differ by at most one, so no replica leads more
//! than ⌈M/R⌉ of M shards over R ready replicas; a replica joining or leaving moves about M/R.
//!
//! At shutdown ([`spread`]) a sidecar hands each shard it leads to the ready candidate leading
//! the fewest, so its shards spread over the survivors instead of following one successor.
//!
//! Safety is the shards' own: a handover is an ordinary graceful release with a named
//! successor, which must still win its Redlock quorum. Balance only decides who is named.

mod plan;
#[cfg(test)]
mod tests;

pub use plan::*;

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::step_down::{StepDown, StepDownRequest};
use crate::config::Prefer;
use crate::leadership::{CandidacyView, Leadership};
use crate::redlock::candidates::{Rank, better};

/// One shard's elector, as the balancer reads and steers it.
#[derive(Clone)]
pub struct Shard {
    /// Its leadership (leading, and the holder last observed).
    pub leadership: watch::Receiver<Leadership>,
    /// Its candidates as last read (who is ready).
    pub candidacy: watch::Receiver<CandidacyView>,
    /// Where hand-over requests go.
    pub step_down: mpsc::Sender<StepDownRequest>,
    /// Its release notices: the one that handed this sidecar the shard says how often the
    /// shard had moved in a rollout.
    pub notices: std::sync::Arc<crate::redlock::notices::Notices>,
}

/// What the balancer remembers between its looks, to tell how far each shard has come in a
/// rollout: shared by the balancing task and the spread at shutdown.
#[derive(Debug, Default)]
pub struct Memory {
    /// Per shard: the last holder other than this sidecar seen.
    before: Vec<Option<String>>,
    /// Per shard this sidecar leads: the holder it took the shard from, as last seen before.
    from: Vec<Option<String>>,
    /// Per shard: whether this sidecar led it at the last look.
    led: Vec<bool>,
    /// Per shard this sidecar leads: how often it had moved in a rollout, with the move to this
    /// sidecar, as the notice that handed it over said ([`moved`]).
    carried: Vec<Option<u8>>,
    /// Every candidate's rank as last seen, also of those gone (a shard's previous holder).
    ranks: BTreeMap<String, Rank>,
    /// Since when some ready candidate ranks better than this sidecar (a rollout past it).
    began: Option<std::time::SystemTime>,
}

/// The memory shared by [`balance`] and [`spread_out`].
pub type Shared = std::sync::Arc<std::sync::Mutex<Memory>>;

/// What the shards' electors know now, with the moves made in the last `recent` counted for
/// their target until the shard's elector has seen a holder; and the ready candidates with
/// their ranks (this sidecar's own, once known, included).
fn seen(
    me: &str,
    shards: &[Shard],
    recent: &BTreeMap<usize, String>,
    prefer: Prefer,
    memory: &Shared,
) -> (Vec<Seen>, BTreeMap<String, Rank>) {
    let now = Instant::now();
    let mut memory = memory.lock().unwrap_or_else(|e| e.into_inner());
    let m = &mut *memory;
    m.before.resize(shards.len(), None);
    m.from.resize(shards.len(), None);
    m.led.resize(shards.len(), false);
    m.carried.resize(shards.len(), None);
    let mut ready = BTreeMap::new();
    let mut own: Option<Rank> = None;
    let views: Vec<Leadership> = shards
        .iter()
        .map(|s| {
            let c = s.candidacy.borrow();
            ready.extend(c.ready.iter().cloned());
            own = own.take().or_else(|| c.rank.clone());
            s.leadership.borrow().at(now)
        })
        .collect();
    if let Some(rank) = &own {
        ready.insert(me.to_string(), rank.clone());
    }
    m.ranks
        .extend(ready.iter().map(|(id, r)| (id.clone(), r.clone())));
    let view = Ready {
        ranks: &ready,
        prefer,
    };
    let old = own.as_ref().is_some_and(|r| view.rolling_past(r));
    match (old, m.began) {
        (true, None) => m.began = Some(std::time::SystemTime::now()),
        (false, Some(_)) => m.began = None,
        _ => {}
    }
    let seen = views
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let mine = l.term.is_some();
            if mine && !m.led[i] {
                m.from[i] = m.before[i].clone();
                m.carried[i] = shards[i].notices.moved_for(me).map(|c| c.saturating_add(1));
            }
            if !mine {
                m.from[i] = None;
                m.carried[i] = None;
                if let Some(h) = l.leader.as_ref().filter(|h| *h != me) {
                    m.before[i] = Some(h.clone());
                }
            }
            m.led[i] = mine;
            let from_old = m.from[i].as_ref().map(|f| match (&own, m.ranks.get(f)) {
                (Some(mine), Some(theirs)) => better(mine, theirs, prefer),
                _ => true,
            });
            Seen {
                mine,
                since: l.changed_at,
                holder: l.leader.or_else(|| recent.get(&i).cloned()),
                moved: if mine {
                    moved(old, l.changed_at, m.began, from_old, m.carried[i])
                } else {
                    0
                },
            }
        })
        .collect();
    (seen, ready)
}

/// Send the moves and wait (up to `within`) for their answers; the moves that released. Each
/// hand-over tells its successor how often the shard has moved in the rollout so far (`seen`).
async fn send(
    shards: &[Shard],
    seen: &[Seen],
    moves: Vec<(usize, String)>,
    within: Duration,
) -> Vec<(usize, String)> {
    let mut answers: Vec<(usize, String, oneshot::Receiver<StepDown>)> = Vec::new();
    for (i, to) in moves {
        let (request, rx) = StepDownRequest::hand_over(to.clone(), seen[i].moved);
        if shards[i].step_down.try_send(request).is_ok() {
            answers.push((i, to, rx));
        }
    }
    let until = Instant::now() + within;
    let mut done = Vec::new();
    for (i, to, rx) in answers {
        if let Ok(Ok(StepDown::Released)) = tokio::time::timeout_at(until, rx).await {
            done.push((i, to));
        }
    }
    done
}

/// What a quiet view compares: who leads each shard (this sidecar, or its holder), and who is
/// ready.
type View = (Vec<(bool, Option<String>)>, BTreeMap<String, Rank>);

/// Balance until `stop`: once what this sidecar sees of the shards (who leads each, who is
/// ready) has been quiet for `every` to twice that (random, so that the replicas rarely plan
/// at once), the moves of [`plan`]; then quiet again. Planning only on a quiet view keeps a
/// replica from acting on a move that the others' electors have not seen yet.
pub async fn balance(
    me: String,
    shards: Vec<Shard>,
    prefer: Prefer,
    memory: Shared,
    every: Duration,
    stop: CancellationToken,
) {
    // Moves not yet seen by the shard's elector as its holder, and when they were made.
    let mut recent: BTreeMap<usize, (String, Instant)> = BTreeMap::new();
    let quiet = || every.mul_f64(rand::rng().random_range(1.0..2.0));
    let mut wait = quiet();
    let mut last: Option<View> = None;
    let mut quiet_since = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(every / 4) => {}
            _ = stop.cancelled() => return,
        }
        // A move counts for its target until the shard's elector sees a holder, or for three
        // periods at most.
        let now = Instant::now();
        recent.retain(|i, (_, at)| {
            shards[*i].leadership.borrow().leader.is_none()
                && now.saturating_duration_since(*at) < every * 3
        });
        let counted = recent.iter().map(|(i, (to, _))| (*i, to.clone())).collect();
        let (seen, ready) = seen(&me, &shards, &counted, prefer, &memory);
        let view = (
            seen.iter().map(|s| (s.mine, s.holder.clone())).collect(),
            ready.clone(),
        );
        if last.as_ref() != Some(&view) {
            last = Some(view);
            quiet_since = now;
            continue;
        }
        if now.saturating_duration_since(quiet_since) < wait {
            continue;
        }
        // A shard with no holder known is in flight (released, its taker not seen yet): its
        // taker looks lighter than it is. Plan once every holder is known, or after a long
        // quiet (a shard nobody takes).
        let unknown = seen.iter().any(|s| !s.mine && s.holder.is_none());
        if unknown && now.saturating_duration_since(quiet_since) < every * 4 {
            continue;
        }
        let moves = plan(
            &me,
            &seen,
            Ready {
                ranks: &ready,
                prefer,
            },
        );
        if moves.is_empty() {
            continue;
        }
        let led = seen.iter().filter(|s| s.mine).count();
        for (i, to) in send(&shards, &seen, moves, every).await {
            let moved = seen[i].moved;
            tracing::info!(shard = i, to = %to, led, moved, "handed a shard over to balance the replicas");
            recent.insert(i, (to, Instant::now()));
        }
        wait = quiet();
        quiet_since = Instant::now();
    }
}

/// At shutdown, before the electors stop: hand every shard this sidecar leads to the ready
/// candidate leading the fewest, and wait (up to `within`) for the releases. What is left is
/// released by the electors' own shutdown.
pub async fn spread_out(
    me: &str,
    shards: &[Shard],
    prefer: Prefer,
    memory: &Shared,
    settle: Duration,
    within: Duration,
) {
    let within_settle = settle;
    let within_send = within;
    // A shard in flight (released, its taker not seen yet) makes its taker look lighter than
    // it is: wait a little (a follower's watch period at most) for every holder to be known.
    let until = Instant::now() + within_settle;
    let (seen, ready) = loop {
        let (seen, ready) = seen(me, shards, &BTreeMap::new(), prefer, memory);
        if Instant::now() >= until || seen.iter().all(|s| s.mine || s.holder.is_some()) {
            break (seen, ready);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let moves = spread(
        me,
        &seen,
        Ready {
            ranks: &ready,
            prefer,
        },
    );
    if moves.is_empty() {
        return;
    }
    let asked = moves.len();
    let done = send(shards, &seen, moves, within_send).await;
    tracing::info!(
        shards = asked,
        handed_over = done.len(),
        to = ?done,
        "shutting down: handed the shards over across the ready candidates"
    );
}

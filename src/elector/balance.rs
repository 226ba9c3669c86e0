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

use std::collections::{BTreeMap, BTreeSet};
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
}

/// One shard as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// This sidecar leads it now.
    pub mine: bool,
    /// Since when this sidecar's view of the shard last changed (for a shard it leads: since it
    /// took it); the shard led longest is handed over first, so a shard that has just moved is
    /// not moved again.
    pub since: std::time::SystemTime,
    /// Who else holds it, as last observed (or as last handed to); `None` if unknown.
    pub holder: Option<String>,
    /// For a shard this sidecar leads, while candidates of two ranks are ready (a rollout): how
    /// often it has moved since the rollout began, as far as this sidecar can tell ([`moved`]):
    /// 0, 1, or 2 (it may have moved twice). 0 outside a rollout.
    pub moved: u8,
}

/// The ready candidates by identity, with their ranks (this sidecar's own among them, when
/// known), and how ranks compare (`lease.prefer`).
#[derive(Clone, Copy, Debug)]
pub struct Ready<'a> {
    /// Identity → rank.
    pub ranks: &'a BTreeMap<String, Rank>,
    /// How ranks compare: under `none` every candidate ranks alike.
    pub prefer: Prefer,
}

impl Ready<'_> {
    /// The candidates of the preferred rank (nobody ready is better), excluding `except`; `None`
    /// when they all rank alike (no rollout under way): then balance ignores rank.
    fn preferred(&self, except: Option<&str>) -> Option<BTreeSet<&str>> {
        let ranks: Vec<(&str, &Rank)> = self
            .ranks
            .iter()
            .filter(|(id, _)| Some(id.as_str()) != except)
            .map(|(id, r)| (id.as_str(), r))
            .collect();
        let best: BTreeSet<&str> = ranks
            .iter()
            .filter(|(_, r)| !ranks.iter().any(|(_, o)| better(o, r, self.prefer)))
            .map(|(id, _)| *id)
            .collect();
        (best.len() < ranks.len()).then_some(best)
    }

    /// Whether someone ready ranks better than `me` (whose rank is `mine`).
    pub fn rolling_past(&self, mine: &Rank) -> bool {
        self.ranks.values().any(|o| better(o, mine, self.prefer))
    }
}

/// How often a shard this sidecar leads has moved since the rollout began, as far as it can
/// tell, for [`Seen::moved`]. `old`: someone ready ranks better than this sidecar, since
/// `began`; `since`: when it took the shard; `from_old`: whether the holder it took the shard
/// from ranks below it (`None`: it took a free shard).
///
/// - A replica of the old rank has seen every move of its own shards since the rollout began:
///   a shard it took after that has moved once (old to old, at a spread); it must go to a
///   replica of the new rank next.
/// - A replica of the new rank knows whom it took a shard from: from an old one, the shard has
///   moved once as far as it knows (it may have moved from old to old before, unseen); from one
///   of its own rank, it has moved twice and should not move again.
pub fn moved(
    old: bool,
    since: std::time::SystemTime,
    began: Option<std::time::SystemTime>,
    from_old: Option<bool>,
) -> u8 {
    if old {
        return u8::from(began.is_some_and(|b| since >= b));
    }
    match from_old {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    }
}

/// The moves that balance this sidecar against the others: (shard, to). Over R replicas (the
/// ready candidates and this one) M shards make a share of ⌊M/R⌋ or ⌈M/R⌉.
///
/// With every candidate of one rank: this sidecar hands a shard to the ready candidate leading
/// the fewest (ties: the smallest identity, so every replica picks alike) while it leads more
/// than ⌈M/R⌉, or more than ⌊M/R⌋ while that candidate leads fewer than ⌊M/R⌋ and at least two
/// fewer than this one. Every replica doing so in any order ends with the most and the fewest
/// within one, and a replica never hands over below its share.
///
/// During a rollout (some ready candidates rank better by `lease.prefer`: the new ones), the
/// same bounds hold, and the shards go where they stay:
/// - an old replica above ⌊M/R⌋ hands a shard to the new one leading the fewest while that one
///   leads fewer than ⌈M/R⌉ (unless a new one is above ⌈M/R⌉: it gives first), so the new
///   replicas take the ⌈M/R⌉ places and the old ones keep ⌊M/R⌋;
/// - a new replica gives only while it is above ⌈M/R⌉ (to a new one below it if any), or to
///   raise one leading fewer than ⌊M/R⌋ that no old replica can raise;
/// - the shard given is the one that has moved least in the rollout ([`Seen::moved`]), then the
///   one led longest.
pub fn plan<'a>(me: &'a str, shards: &[Seen], ready: Ready<'a>) -> Vec<(usize, String)> {
    let replicas = ready.ranks.keys().filter(|c| *c != me).count() + 1;
    let (floor, ceil) = (shards.len() / replicas, shards.len().div_ceil(replicas));
    let newest = ready.preferred(None);
    let is_new = |id: &str| newest.as_ref().is_none_or(|p| p.contains(id));
    // The next move of `donor`, leading `n`, with the others leading `load`.
    let next = |donor: &str, n: usize, load: &BTreeMap<&'a str, usize>| -> Option<&'a str> {
        let least = fewest(load, |_| true, &is_new)?;
        let raise = |t: usize| n > floor && t < floor && n >= t + 2;
        if newest.is_none() {
            return (n > ceil || raise(least.1)).then_some(least.0);
        }
        if !is_new(donor) {
            let over = load.iter().any(|(id, l)| is_new(id) && *l > ceil);
            if let Some((to, l)) = fewest(load, |id| is_new(id), &is_new)
                && l < ceil
                && n > floor
                && !over
            {
                return Some(to);
            }
            return (n > ceil || raise(least.1)).then_some(least.0);
        }
        if n > ceil {
            let below = fewest(load, |id| is_new(id), &is_new).filter(|(_, l)| *l < ceil);
            return Some(below.unwrap_or(least).0);
        }
        let an_old_one_can = load
            .iter()
            .any(|(id, l)| *id != least.0 && !is_new(id) && *l > floor && *l >= least.1 + 2);
        (raise(least.1) && !an_old_one_can).then_some(least.0)
    };
    // Every replica's moves on this view, in identity order, until nobody moves: the same plan
    // on every replica that sees the same, so replicas planning at once do not all hand shards
    // to the same one. This sidecar's part is its own.
    let mut load: BTreeMap<&'a str, usize> = ready.ranks.keys().map(|c| (c.as_str(), 0)).collect();
    load.insert(me, 0);
    for s in shards {
        let holder = if s.mine {
            Some(me)
        } else {
            s.holder.as_deref()
        };
        if let Some(n) = holder.and_then(|h| load.get_mut(h)) {
            *n += 1;
        }
    }
    let donors: Vec<&'a str> = load.keys().copied().collect();
    let mut mine = Vec::new();
    // Each round moves a shard or ends the plan; the rule converges well within this bound.
    let mut budget = 4 * shards.len() + donors.len();
    'rounds: loop {
        let mut any = false;
        for donor in &donors {
            loop {
                let n = load[donor];
                if n == 0 || budget == 0 {
                    break;
                }
                let others: BTreeMap<&'a str, usize> = load
                    .iter()
                    .filter(|(id, _)| *id != donor)
                    .map(|(id, l)| (*id, *l))
                    .collect();
                let Some(to) = next(donor, n, &others) else {
                    break;
                };
                budget -= 1;
                *load.get_mut(donor).expect("a donor") -= 1;
                *load.get_mut(to).expect("a candidate") += 1;
                if *donor == me {
                    mine.push(to);
                }
                any = true;
            }
        }
        if !any || budget == 0 {
            break 'rounds;
        }
    }
    let rolling = newest.is_some();
    assign(shards, mine, |_| {
        if rolling {
            Order::LeastMovedLongestLed
        } else {
            Order::LongestLed
        }
    })
}

/// At shutdown: every shard this sidecar leads, each to the ready candidate leading the fewest
/// at that moment (counting the moves before it; ties: a new one first). During a rollout, the
/// shards that have moved (and the ones taken last) go to new candidates, the others to old
/// ones, so a shard moved from old to old once goes to a new one next.
pub fn spread(me: &str, shards: &[Seen], ready: Ready<'_>) -> Vec<(usize, String)> {
    let newest = ready.preferred(Some(me));
    let is_new = |id: &str| newest.as_ref().is_none_or(|p| p.contains(id));
    let targets = targets(me, shards, ready, |n, load| {
        (n > 0).then_some(fewest(load, |_| true, &is_new)?.0)
    });
    let rolling = newest.is_some();
    assign(shards, targets, |to| {
        if rolling && is_new(to) {
            Order::MostMovedLatest
        } else if rolling {
            Order::LeastMovedLongestLed
        } else {
            Order::LongestLed
        }
    })
}

/// The ready candidate (other than this sidecar) leading the fewest among those `keep` lets
/// through; ties: one of the preferred rank first, then the smallest identity.
fn fewest<'a>(
    load: &BTreeMap<&'a str, usize>,
    keep: impl Fn(&str) -> bool,
    is_new: &impl Fn(&str) -> bool,
) -> Option<(&'a str, usize)> {
    load.iter()
        .filter(|(id, _)| keep(id))
        .min_by_key(|(id, n)| (**n, !is_new(id), **id))
        .map(|(id, n)| (*id, *n))
}

/// The targets, one per shard to hand over: while `next(led, loads)` names one (counting the
/// moves before it).
fn targets<'a>(
    me: &str,
    shards: &[Seen],
    ready: Ready<'a>,
    next: impl Fn(usize, &BTreeMap<&'a str, usize>) -> Option<&'a str>,
) -> Vec<&'a str> {
    let mut load: BTreeMap<&str, usize> = ready
        .ranks
        .keys()
        .filter(|c| *c != me)
        .map(|c| (c.as_str(), 0))
        .collect();
    let mut led = 0;
    for s in shards {
        if s.mine {
            led += 1;
        } else if let Some(n) = s.holder.as_deref().and_then(|h| load.get_mut(h)) {
            *n += 1;
        }
    }
    let mut out = Vec::new();
    while led > 0 {
        let Some(to) = next(led, &load) else { break };
        out.push(to);
        *load.get_mut(to).expect("a candidate") += 1;
        led -= 1;
    }
    out
}

/// Which of its shards a sidecar hands over first.
#[derive(Clone, Copy)]
enum Order {
    /// The one led longest (ties: the highest index).
    LongestLed,
    /// The one that has moved least in the rollout, then the one led longest.
    LeastMovedLongestLed,
    /// The one that has moved most in the rollout, then the one taken last.
    MostMovedLatest,
}

/// The shards for `targets`, in turn, each the first by the order `order(target)` names.
fn assign(
    shards: &[Seen],
    targets: Vec<&str>,
    order: impl Fn(&str) -> Order,
) -> Vec<(usize, String)> {
    let mut left: Vec<usize> = (0..shards.len()).filter(|i| shards[*i].mine).collect();
    let mut out = Vec::new();
    for to in targets {
        let order = order(to);
        let key = |i: &usize| {
            let s = &shards[*i];
            let at = s
                .since
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as i128);
            let i = std::cmp::Reverse(*i);
            match order {
                Order::LongestLed => (0, at, i),
                Order::LeastMovedLongestLed => (s.moved, at, i),
                Order::MostMovedLatest => (u8::MAX - s.moved, -at, i),
            }
        };
        let Some(pos) = (0..left.len()).min_by_key(|p| key(&left[*p])) else {
            break;
        };
        out.push((left.swap_remove(pos), to.to_string()));
    }
    out
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
            }
            if !mine {
                m.from[i] = None;
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
                    moved(old, l.changed_at, m.began, from_old)
                } else {
                    0
                },
            }
        })
        .collect();
    (seen, ready)
}

/// Send the moves and wait (up to `within`) for their answers; the moves that released.
async fn send(
    shards: &[Shard],
    moves: Vec<(usize, String)>,
    within: Duration,
) -> Vec<(usize, String)> {
    let mut answers: Vec<(usize, String, oneshot::Receiver<StepDown>)> = Vec::new();
    for (i, to) in moves {
        let (request, rx) = StepDownRequest::hand_over(to.clone());
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
        for (i, to) in send(&shards, moves, every).await {
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
    let done = send(shards, moves, within_send).await;
    tracing::info!(
        shards = asked,
        handed_over = done.len(),
        to = ?done,
        "shutting down: handed the shards over across the ready candidates"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(ids: &[&str]) -> BTreeMap<String, Rank> {
        ids.iter()
            .map(|s| (s.to_string(), Rank::default()))
            .collect()
    }

    /// Candidates of one rank: balance is rank-blind.
    fn alike(ranks: &BTreeMap<String, Rank>) -> Ready<'_> {
        Ready {
            ranks,
            prefer: Prefer::None,
        }
    }

    fn shards(holders: &[&str]) -> Vec<Seen> {
        holders
            .iter()
            .map(|h| Seen {
                mine: *h == "me",
                since: std::time::UNIX_EPOCH,
                holder: (!h.is_empty()).then(|| h.to_string()),
                moved: 0,
            })
            .collect()
    }

    /// Apply every replica's plan in turn until nobody moves; the loads.
    fn settle(mut holders: Vec<String>, replicas: &[&str]) -> (BTreeMap<String, usize>, usize) {
        let ids = ready(replicas);
        let mut moved = 0;
        loop {
            let mut any = false;
            for me in replicas {
                let seen: Vec<Seen> = holders
                    .iter()
                    .map(|h| Seen {
                        mine: h == me,
                        since: std::time::UNIX_EPOCH,
                        holder: Some(h.clone()),
                        moved: 0,
                    })
                    .collect();
                for (i, to) in plan(me, &seen, alike(&ids)) {
                    holders[i] = to;
                    moved += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        let mut load: BTreeMap<String, usize> =
            replicas.iter().map(|r| (r.to_string(), 0)).collect();
        for h in holders {
            *load.get_mut(&h).unwrap() += 1;
        }
        (load, moved)
    }

    #[test]
    fn a_replica_leading_two_more_hands_one_to_the_fewest() {
        // me 3, a 1, b 2 (share 2): one to a.
        let s = shards(&["me", "me", "me", "a", "b", "b"]);
        assert_eq!(
            plan("me", &s, alike(&ready(&["me", "a", "b"]))),
            [(2, "a".to_string())]
        );
        // me 2, a 1: balanced within one.
        let s = shards(&["me", "me", "a"]);
        assert!(plan("me", &s, alike(&ready(&["me", "a"]))).is_empty());
        // Another holder that is no ready candidate counts for nobody: me 3 of 4 over 2.
        let s = shards(&["me", "me", "me", "gone"]);
        assert_eq!(plan("me", &s, alike(&ready(&["me", "b"]))).len(), 1);
        assert!(
            plan("me", &s, alike(&ready(&["me"]))).is_empty(),
            "nobody to hand to"
        );
    }

    #[test]
    fn one_replica_with_every_shard_gives_each_newcomer_its_share_at_once() {
        let s: Vec<Seen> = (0..32)
            .map(|_| Seen {
                mine: true,
                since: std::time::UNIX_EPOCH,
                holder: Some("me".into()),
                moved: 0,
            })
            .collect();
        let moves = plan("me", &s, alike(&ready(&["me", "a", "b", "c", "d"])));
        let mut to: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, t) in &moves {
            *to.entry(t.as_str()).or_default() += 1;
        }
        // 32 over 5: me keeps 7 (⌈32/5⌉), the others get 6 or 7.
        assert_eq!(32 - moves.len(), 7, "{moves:?}");
        assert!(to.values().all(|n| (6..=7).contains(n)), "{to:?}");
    }

    #[test]
    fn every_replica_planning_in_turn_converges_within_one() {
        for (m, r) in [(32usize, 5usize), (64, 3), (7, 3), (256, 30), (3, 5)] {
            let replicas: Vec<String> = (0..r).map(|i| format!("r{i}")).collect();
            let refs: Vec<&str> = replicas.iter().map(String::as_str).collect();
            // The worst start: the first replica leads everything.
            let (load, moved) = settle(vec![replicas[0].clone(); m], &refs);
            let (max, min) = (load.values().max().unwrap(), load.values().min().unwrap());
            assert!(max - min <= 1, "{m} over {r}: {load:?}");
            assert!(*max <= m.div_ceil(r), "{m} over {r}: {load:?}");
            // Each move takes a shard off the first replica: no shard moves twice.
            assert!(moved <= m, "{m} over {r}: {moved} moves");
        }
    }

    #[test]
    fn a_newcomer_takes_about_its_share_and_nothing_else_moves() {
        // 30 shards balanced over 3 (10 each); a fourth joins.
        let mut holders: Vec<String> = (0..30).map(|i| format!("r{}", i % 3)).collect();
        holders.sort();
        let (load, moved) = settle(holders, &["r0", "r1", "r2", "r3"]);
        assert!(load.values().all(|n| (7..=8).contains(n)), "{load:?}");
        assert!((7..=9).contains(&moved), "about M/R moves: {moved}");
    }

    #[test]
    fn the_shard_led_longest_goes_first() {
        let at = |s: u64| std::time::UNIX_EPOCH + Duration::from_secs(s);
        let s: Vec<Seen> = [(true, 30), (true, 10), (true, 20), (false, 0)]
            .into_iter()
            .map(|(mine, t)| Seen {
                mine,
                since: at(t),
                holder: Some(if mine { "me" } else { "a" }.into()),
                moved: 0,
            })
            .collect();
        // me 3, a 1 over 2 (share 2): one moves, the one taken at 10.
        assert_eq!(
            plan("me", &s, alike(&ready(&["me", "a"]))),
            [(1, "a".to_string())]
        );
    }

    #[test]
    fn at_shutdown_the_shards_spread_over_the_candidates() {
        let s = shards(&["me", "me", "me", "me", "a", "b", "b"]);
        let moves = spread("me", &s, alike(&ready(&["me", "a", "b", "c"])));
        let to: Vec<&str> = moves.iter().map(|(_, t)| t.as_str()).collect();
        // c (0), then a and c, ...: each time to the one leading the fewest.
        assert_eq!(to, ["c", "a", "c", "a"]);
        assert!(
            spread("me", &s, alike(&ready(&["me"]))).is_empty(),
            "nobody to hand to"
        );
    }

    /// A fleet of replicas planning in turn, as the balancers do on quiet views: who leads
    /// each shard, since when, whom from, and how often each shard moved.
    struct Fleet {
        prefer: Prefer,
        ranks: BTreeMap<String, Rank>,
        live: Vec<String>,
        holders: Vec<String>,
        since: Vec<u64>,
        from: Vec<Option<String>>,
        moves: Vec<usize>,
        /// When the first replica of the new rank joined (the old ones' `began`).
        began: Option<u64>,
        clock: u64,
        /// Every replica plans on the same view, and all the moves are made at once (replicas
        /// whose quiet views end together), instead of one after the other.
        together: bool,
    }

    fn at(t: u64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_secs(t)
    }

    impl Fleet {
        /// `r` replicas `<old><i>` of priority 0 leading `m` shards, balanced (the moves not
        /// counted).
        fn balanced(m: usize, r: usize, prefer: Prefer, old: &str) -> Fleet {
            let live: Vec<String> = (0..r).map(|i| format!("{old}{i}")).collect();
            let mut f = Fleet {
                prefer,
                ranks: live
                    .iter()
                    .map(|id| (id.clone(), Rank::default()))
                    .collect(),
                holders: (0..m).map(|i| live[i % r].clone()).collect(),
                live,
                since: vec![0; m],
                from: vec![None; m],
                moves: vec![0; m],
                began: None,
                clock: 0,
                together: false,
            };
            f.settle(None);
            f.moves = vec![0; m];
            f
        }

        fn ready(&self) -> BTreeMap<String, Rank> {
            self.live
                .iter()
                .map(|id| (id.clone(), self.ranks[id].clone()))
                .collect()
        }

        /// What `me` sees, [`Seen::moved`] as the balancer works it out.
        fn seen(&self, me: &str) -> Vec<Seen> {
            let ready = self.ready();
            let view = Ready {
                ranks: &ready,
                prefer: self.prefer,
            };
            let mine = &self.ranks[me];
            let old = view.rolling_past(mine);
            (0..self.holders.len())
                .map(|i| {
                    let is_mine = self.holders[i] == me;
                    let from_old = self.from[i]
                        .as_ref()
                        .map(|f| better(mine, &self.ranks[f], self.prefer));
                    Seen {
                        mine: is_mine,
                        since: at(self.since[i]),
                        holder: Some(self.holders[i].clone()),
                        moved: if is_mine {
                            moved(old, at(self.since[i]), self.began.map(at), from_old)
                        } else {
                            0
                        },
                    }
                })
                .collect()
        }

        fn apply(&mut self, moves: Vec<(usize, String)>) -> bool {
            let any = !moves.is_empty();
            for (i, to) in moves {
                assert!(self.live.contains(&to), "a move to {to}, not live");
                self.clock += 1;
                self.from[i] = Some(std::mem::replace(&mut self.holders[i], to));
                self.since[i] = self.clock;
                self.moves[i] += 1;
            }
            any
        }

        /// Every replica plans in turn (in a shuffled order each round with `rng`) until
        /// nobody moves; then the assignment must be balanced.
        fn settle(&mut self, mut rng: Option<&mut rand::rngs::StdRng>) {
            use rand::seq::SliceRandom;
            for _ in 0..1000 {
                let mut order = self.live.clone();
                if let Some(rng) = rng.as_deref_mut() {
                    order.shuffle(rng);
                }
                let mut any = false;
                let mut at_once = Vec::new();
                for me in &order {
                    let ready = self.ready();
                    let moves = plan(
                        me,
                        &self.seen(me),
                        Ready {
                            ranks: &ready,
                            prefer: self.prefer,
                        },
                    );
                    if self.together {
                        at_once.extend(moves);
                    } else {
                        any |= self.apply(moves);
                    }
                }
                any |= self.apply(at_once);
                if !any {
                    let loads = self.loads();
                    let (max, min) = (loads.values().max(), loads.values().min());
                    let ceil = self.holders.len().div_ceil(self.live.len());
                    assert!(
                        max.zip(min).is_some_and(|(a, b)| a - b <= 1 && *a <= ceil),
                        "not balanced: {loads:?}"
                    );
                    return;
                }
            }
            panic!("no quiet after 1000 rounds: {:?}", self.loads());
        }

        fn loads(&self) -> BTreeMap<&str, usize> {
            let mut n: BTreeMap<&str, usize> = self.live.iter().map(|r| (r.as_str(), 0)).collect();
            for h in &self.holders {
                *n.get_mut(h.as_str()).expect("a live holder") += 1;
            }
            n
        }

        /// `id` joins with `rank`, and everyone plans until quiet.
        fn join(&mut self, id: &str, rank: Rank, rng: Option<&mut rand::rngs::StdRng>) {
            self.ranks.insert(id.to_string(), rank);
            self.live.push(id.to_string());
            self.began.get_or_insert(self.clock);
            self.settle(rng);
        }

        /// `id` stops: it spreads its shards, and the rest plan until quiet.
        fn stop(&mut self, id: &str, rng: Option<&mut rand::rngs::StdRng>) {
            let ready = self.ready();
            let moves = spread(
                id,
                &self.seen(id),
                Ready {
                    ranks: &ready,
                    prefer: self.prefer,
                },
            );
            self.apply(moves);
            self.live.retain(|r| r != id);
            assert!(
                self.holders.iter().all(|h| self.live.contains(h)),
                "{id} stopped leading a shard"
            );
            self.settle(rng);
        }

        /// Shards by how often they moved: (moves, shards).
        fn histogram(&self) -> BTreeMap<usize, usize> {
            let mut h = BTreeMap::new();
            for n in &self.moves {
                *h.entry(*n).or_default() += 1;
            }
            h
        }
    }

    /// In which order the old replicas stop.
    #[derive(Clone, Copy, Debug)]
    enum Stops {
        OldestFirst,
        NewestFirst,
        /// A seeded shuffle, and the replicas plan in a shuffled order every round.
        Random(u64),
    }

    /// A rolling restart as a Deployment with `maxSurge: 1` does it, replayed on the pure plan:
    /// `r` old replicas (priority 0) leading `m` shards, balanced; `r` times, a new replica
    /// (priority 1) joins and every replica plans in turn until quiet, then an old one stops
    /// (its spread) and the rest plan until quiet. Every quiet assignment must be balanced.
    /// `names`: the prefixes of the old and the new replicas' identities (ties between equal
    /// loads go to the smallest identity, so which sorts first matters to a rank-blind plan).
    fn rolling_restart(
        m: usize,
        r: usize,
        prefer: Prefer,
        stops: Stops,
        (old_name, new_name): (&str, &str),
        together: bool,
    ) -> Fleet {
        use rand::SeedableRng;
        use rand::seq::SliceRandom;
        let mut fleet = Fleet::balanced(m, r, prefer, old_name);
        fleet.together = together;
        let mut old: Vec<String> = fleet.live.clone();
        let mut rng = match stops {
            Stops::OldestFirst => None,
            Stops::NewestFirst => {
                old.reverse();
                None
            }
            Stops::Random(seed) => {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
                old.shuffle(&mut rng);
                Some(rng)
            }
        };
        let new = Rank {
            priority: 1,
            ..Rank::default()
        };
        for (i, gone) in old.iter().enumerate() {
            fleet.join(&format!("{new_name}{i}"), new.clone(), rng.as_mut());
            fleet.stop(gone, rng.as_mut());
        }
        assert!(fleet.live.iter().all(|id| id.starts_with(new_name)));
        fleet
    }

    #[test]
    fn rank_blind_a_rolling_restart_moves_shards_more_than_twice() {
        // Today's rule (and what `prefer: none` keeps): a stopping replica's shards go to the
        // replicas leading the fewest, old or new; a shard given to an old one moves again.
        // (Old replicas a0..a4, new b0..b4: on equal loads the old sort first.)
        let fleet = rolling_restart(32, 5, Prefer::None, Stops::OldestFirst, ("a", "b"), false);
        let h = fleet.histogram();
        println!("rank-blind, 32 shards over 5, oldest first: moves per shard {h:?}");
        assert!(h.keys().max() > Some(&2), "{h:?}");
    }

    #[test]
    fn preferring_the_newest_a_rolling_restart_moves_each_shard_at_most_twice() {
        for (m, r) in [
            (32, 5),
            (64, 3),
            (7, 3),
            (16, 4),
            (10, 4),
            (20, 3),
            (256, 3),
            (9, 2),
        ] {
            let mut orders = vec![Stops::OldestFirst, Stops::NewestFirst];
            orders.extend((0..30).map(Stops::Random));
            let mut total: BTreeMap<usize, usize> = BTreeMap::new();
            // The new replicas' identities sorting after the old ones', and before; the
            // replicas planning one after the other, and all at once on the same view.
            for (stops, names, together) in orders.into_iter().flat_map(|o| {
                [("a", "b"), ("b", "a")]
                    .into_iter()
                    .flat_map(move |n| [(o, n, false), (o, n, true)])
            }) {
                let fleet = rolling_restart(m, r, Prefer::Newest, stops, names, together);
                let h = fleet.histogram();
                if matches!(stops, Stops::OldestFirst | Stops::NewestFirst) && !together {
                    let blind =
                        rolling_restart(m, r, Prefer::None, stops, names, false).histogram();
                    println!(
                        "{m} shards over {r}, {stops:?}, old {}* new {}*: moves per shard {h:?} \
                         (rank-blind: {blind:?})",
                        names.0, names.1
                    );
                }
                assert!(
                    h.keys().all(|n| (1..=2).contains(n)),
                    "{m} over {r}, {stops:?}, {names:?}, together {together}: moves per shard {h:?}"
                );
                for (n, shards) in h {
                    *total.entry(n).or_default() += shards;
                }
            }
            println!("{m} shards over {r}, 128 rollouts: moves per shard {total:?}");
        }
    }

    #[test]
    fn replicas_of_two_ranks_converge_within_one_and_under_the_ceiling() {
        use rand::{Rng, SeedableRng};
        // Any start, any mix of ranks: quiet means balanced (checked by `settle`).
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for (m, r) in [
            (32usize, 5usize),
            (64, 3),
            (7, 3),
            (256, 30),
            (3, 5),
            (33, 6),
        ] {
            for _ in 0..20 {
                let mut fleet = Fleet::balanced(m, 1, Prefer::Newest, "r");
                fleet.live.clear();
                for i in 0..r {
                    let id = format!("r{i}");
                    let rank = Rank {
                        priority: rng.random_range(0..2),
                        ..Rank::default()
                    };
                    fleet.ranks.insert(id.clone(), rank);
                    fleet.live.push(id);
                }
                fleet.holders = (0..m)
                    .map(|_| fleet.live[rng.random_range(0..r)].clone())
                    .collect();
                fleet.began = Some(0);
                fleet.together = rng.random_bool(0.5);
                fleet.settle(Some(&mut rng));
            }
        }
    }

    #[test]
    fn moved_counts_what_each_side_can_see() {
        let (before, after) = (Some(at(5)), at(9));
        // An old replica: a shard taken after the rollout began has moved (old to old).
        assert_eq!(moved(true, at(1), before, Some(true)), 0);
        assert_eq!(moved(true, after, before, Some(true)), 1);
        assert_eq!(moved(true, after, None, Some(true)), 0);
        // A new one: from an old holder once; from one of its own rank twice; a free shard not.
        assert_eq!(moved(false, after, None, Some(true)), 1);
        assert_eq!(moved(false, after, None, Some(false)), 2);
        assert_eq!(moved(false, after, None, None), 0);
    }

    #[test]
    fn during_a_rollout_an_old_replica_gives_to_the_new_and_a_moved_shard_goes_new() {
        let mut ranks = ready(&["me", "a", "n"]);
        ranks.insert(
            "n".into(),
            Rank {
                priority: 1,
                ..Rank::default()
            },
        );
        let view = Ready {
            ranks: &ranks,
            prefer: Prefer::Newest,
        };
        // 9 over 3 (3 each): me (old) 4, a (old) 3, n (new) 2: me hands one to n, not to a.
        let mut s = shards(&["me", "me", "me", "me", "a", "a", "a", "n", "n"]);
        assert_eq!(plan("me", &s, view), [(3, "n".to_string())]);
        // At shutdown a shard that moved (old to old) goes to the new one, the others to a.
        s[1].moved = 1;
        let moves = spread("me", &s, view);
        assert!(moves.contains(&(1, "n".to_string())), "{moves:?}");
        // Rank-blind, the same shards go to the fewest whoever it is.
        assert_eq!(plan("me", &s, alike(&ranks)).len(), 1);
    }
}

//! The pure plan of [`super`]: which shards this sidecar hands over, and to whom, from its view
//! of the shards and of the ready candidates (and at shutdown, [`spread`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::config::Prefer;
use crate::redlock::candidates::{Rank, better};

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
/// from ranks below it (`None`: it took a free shard); `carried`: what the release notice that
/// handed it the shard said (the giver's count and this move: [`super::send`]), if one did.
///
/// - The count a hand-over carried is exact: every giver knows its own shard's count.
/// - A replica of the old rank has seen every move of its own shards since the rollout began:
///   a shard it took before that has not moved in the rollout (whatever an earlier rollout's
///   notice said); one taken after it, without a count, has moved once.
/// - A replica of the new rank without a count (a shard taken after an expiry, or handed over
///   by the elector's own release) knows only whom it took it from: from an old one, once as
///   far as it knows; from one of its own rank, twice.
pub fn moved(
    old: bool,
    since: std::time::SystemTime,
    began: Option<std::time::SystemTime>,
    from_old: Option<bool>,
    carried: Option<u8>,
) -> u8 {
    if old {
        if began.is_none_or(|b| since < b) {
            return 0;
        }
        return carried.unwrap_or(1);
    }
    if let Some(count) = carried {
        return count;
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
/// same bounds hold, and every replica computes one plan for all of them on its view
/// ([`rollout_moves`]): the ⌈M/R⌉ places go to the new replicas first, so the shards go where
/// they stay, and a new replica hands over only what it must. The shard an old replica gives a
/// new one is the one that has moved most in the rollout ([`Seen::moved`]: it has moved from
/// old to old, and moves for the last time), then the one taken last; every other move gives
/// the one that has moved least, then the one led longest.
pub fn plan<'a>(me: &'a str, shards: &[Seen], ready: Ready<'a>) -> Vec<(usize, String)> {
    let replicas = ready.ranks.keys().filter(|c| *c != me).count() + 1;
    let (floor, ceil) = (shards.len() / replicas, shards.len().div_ceil(replicas));
    let newest = ready.preferred(None);
    let is_new = |id: &str| newest.as_ref().is_none_or(|p| p.contains(id));
    if newest.is_some() {
        let mine = own_rollout_moves(me, shards, ready, &is_new, false);
        return assign(shards, mine, |to| rollout_order(is_new(me), is_new(to)));
    }
    // The next move of `donor`, leading `n`, with the others leading `load`.
    let next = |n: usize, load: &BTreeMap<&'a str, usize>| -> Option<&'a str> {
        let least = fewest(load, |_| true, &is_new)?;
        let raise = |t: usize| n > floor && t < floor && n >= t + 2;
        (n > ceil || raise(least.1)).then_some(least.0)
    };
    // Every replica's moves on this view, in identity order, until nobody moves: the same plan
    // on every replica that sees the same, so replicas planning at once do not all hand shards
    // to the same one. This sidecar's part is its own.
    let mut load = loads(me, shards, ready);
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
                let Some(to) = next(n, &others) else {
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
    assign(shards, mine, |_| Order::LongestLed)
}

/// How many shards each replica leads on this view: the ready candidates and this sidecar
/// (`me`), a shard counted for its holder.
fn loads<'a>(me: &'a str, shards: &[Seen], ready: Ready<'a>) -> BTreeMap<&'a str, usize> {
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
    load
}

/// This sidecar's part of [`rollout_moves`] on its view: the replicas it hands a shard to, one
/// per shard; `stopping`: it leaves (its target is none).
fn own_rollout_moves<'a>(
    me: &'a str,
    shards: &[Seen],
    ready: Ready<'a>,
    is_new: &impl Fn(&str) -> bool,
    stopping: bool,
) -> Vec<&'a str> {
    let created = |id: &str| ready.ranks.get(id).map_or(0, |r| r.created);
    let load = loads(me, shards, ready);
    let gone = stopping.then_some(me);
    rollout_moves(&load, shards.len(), is_new, &created, gone)
        .into_iter()
        .filter(|(donor, _)| *donor == me)
        .map(|(_, to)| to)
        .collect()
}

/// The order an old or new replica gives its shards in, to an old or a new one, during a
/// rollout: old to new, the shard that has moved most (it moves for the last time); otherwise
/// the one that has moved least.
fn rollout_order(from_new: bool, to_new: bool) -> Order {
    match (from_new, to_new) {
        (false, true) => Order::MostMovedLatest,
        _ => Order::LeastMovedLongestLed,
    }
}

/// During a rollout, every replica's moves on one view, as (donor, to): the same on every
/// replica that sees the same, so each one's part is its own. `load`: what each replica leads
/// (`gone`, stopping, among them); `total`: the shards, M.
///
/// The targets: over the R replicas that stay, `M mod R` of them lead ⌈M/R⌉ and the rest
/// ⌊M/R⌋; the ⌈M/R⌉ places go to the new replicas first, then to those leading the most (so
/// fewer move), then to those created first (`created`: a pod's creation time, 0 outside
/// Kubernetes), then by identity; `gone` leads none. So among new replicas of one load, the one
/// that joined last gives: the rollout simulation (`tests::rollout`) finds every shard within
/// two moves that way, and a few shards moving three times when identities that do not sort in
/// the order of joining decide instead. Each replica above its target gives the
/// excess, each one below takes what it lacks, paired so that a shard a new replica gives goes
/// to a new one (it has moved already, and stays there), an old replica's go to the new ones
/// next, then to old ones; a new replica's go to an old one last, only if nothing else balances.
fn rollout_moves<'a>(
    load: &BTreeMap<&'a str, usize>,
    total: usize,
    is_new: &impl Fn(&str) -> bool,
    created: &impl Fn(&str) -> i64,
    gone: Option<&str>,
) -> Vec<(&'a str, &'a str)> {
    let mut staying: Vec<&'a str> = load
        .keys()
        .copied()
        .filter(|id| Some(*id) != gone)
        .collect();
    if staying.is_empty() {
        return Vec::new();
    }
    let (floor, extra) = (total / staying.len(), total % staying.len());
    staying.sort_by_key(|id| (!is_new(id), std::cmp::Reverse(load[id]), created(id), *id));
    let target: BTreeMap<&'a str, usize> = staying
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, floor + usize::from(i < extra)))
        .collect();
    let target = |id: &str| target.get(id).copied().unwrap_or(0);
    // The donors: `gone` first, then by identity; each once per shard it gives.
    let mut donors: Vec<(&'a str, usize)> = load
        .iter()
        .filter(|(id, l)| **l > target(id))
        .map(|(id, l)| (*id, l - target(id)))
        .collect();
    donors.sort_by_key(|(id, _)| (Some(*id) != gone, *id));
    // The takers: the fewest first, then by identity.
    let mut takers: Vec<(&'a str, usize)> = staying
        .iter()
        .filter(|id| load[*id] < target(id))
        .map(|id| (*id, target(id) - load[*id]))
        .collect();
    takers.sort_by_key(|(id, _)| (load[id], *id));
    let mut moves = Vec::new();
    for (from_new, to_new) in [(true, true), (false, true), (false, false), (true, false)] {
        for (donor, left) in donors.iter_mut().filter(|(d, _)| is_new(d) == from_new) {
            for (taker, lacks) in takers.iter_mut().filter(|(t, _)| is_new(t) == to_new) {
                while *left > 0 && *lacks > 0 {
                    moves.push((*donor, *taker));
                    *left -= 1;
                    *lacks -= 1;
                }
            }
        }
    }
    moves
}

/// At shutdown: every shard this sidecar leads, each to the ready candidate leading the fewest
/// at that moment (counting the moves before it; ties: a new one first). During a rollout, the
/// targets of [`rollout_moves`] over the replicas that stay decide whom each shard goes to: the
/// new ones first while below their share; the shards that have moved (and the ones taken last)
/// go to new candidates, the others to old ones, so a shard moved from old to old once goes to a
/// new one next.
pub fn spread(me: &str, shards: &[Seen], ready: Ready<'_>) -> Vec<(usize, String)> {
    let newest = ready.preferred(Some(me));
    let is_new = |id: &str| newest.as_ref().is_none_or(|p| p.contains(id));
    if newest.is_some() {
        let mine = own_rollout_moves(me, shards, ready, &is_new, true);
        return assign(shards, mine, |to| rollout_order(false, is_new(to)));
    }
    let targets = targets(me, shards, ready, |n, load| {
        (n > 0).then_some(fewest(load, |_| true, &is_new)?.0)
    });
    assign(shards, targets, |_| Order::LongestLed)
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

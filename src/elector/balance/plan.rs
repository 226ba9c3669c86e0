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

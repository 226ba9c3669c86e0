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
use crate::leadership::{CandidacyView, Leadership};

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
}

/// The moves that balance this sidecar against the others: (shard, to). `ready` are the ready
/// candidates by identity (this sidecar's own may be among them). Over R replicas (the ready
/// candidates and this one) M shards make a share of ⌊M/R⌋ or ⌈M/R⌉. This sidecar hands a
/// shard (the highest index first) to the ready candidate leading the fewest (ties: the
/// smallest identity, so every replica picks alike) while it leads more than ⌈M/R⌉, or more
/// than ⌊M/R⌋ while that candidate leads fewer than ⌊M/R⌋ and at least two fewer than this
/// one. Every replica doing so in any order ends with the most and the fewest within one, and
/// a replica never hands over below its share.
pub fn plan(me: &str, shards: &[Seen], ready: &BTreeSet<String>) -> Vec<(usize, String)> {
    let replicas = ready.iter().filter(|c| *c != me).count() + 1;
    let (floor, ceil) = (shards.len() / replicas, shards.len().div_ceil(replicas));
    moves(me, shards, ready, |mine, fewest| {
        mine > ceil || (mine > floor && fewest < floor && mine >= fewest + 2)
    })
}

/// At shutdown: every shard this sidecar leads, each to the ready candidate leading the fewest
/// at that moment (counting the moves before it).
pub fn spread(me: &str, shards: &[Seen], ready: &BTreeSet<String>) -> Vec<(usize, String)> {
    moves(me, shards, ready, |mine, _| mine > 0)
}

/// Hand shards, one at a time, to the ready candidate leading the fewest while `more(mine,
/// fewest)` says so.
fn moves(
    me: &str,
    shards: &[Seen],
    ready: &BTreeSet<String>,
    more: impl Fn(usize, usize) -> bool,
) -> Vec<(usize, String)> {
    let mut load: BTreeMap<&str, usize> = ready
        .iter()
        .filter(|c| *c != me)
        .map(|c| (c.as_str(), 0))
        .collect();
    let mut mine: Vec<usize> = Vec::new();
    for (i, s) in shards.iter().enumerate() {
        if s.mine {
            mine.push(i);
        } else if let Some(n) = s.holder.as_deref().and_then(|h| load.get_mut(h)) {
            *n += 1;
        }
    }
    // Popped from the end: the one led longest (ties: the highest index) first.
    mine.sort_by_key(|i| (std::cmp::Reverse(shards[*i].since), *i));
    let mut out = Vec::new();
    while let Some((to, n)) = load
        .iter()
        .min_by_key(|(id, n)| (**n, **id))
        .map(|(id, n)| (*id, *n))
    {
        if mine.is_empty() || !more(mine.len(), n) {
            break;
        }
        let shard = mine.pop().expect("not empty");
        out.push((shard, to.to_string()));
        *load.get_mut(to).expect("a candidate") += 1;
    }
    out
}

/// What the shards' electors know now, with the moves made in the last `recent` counted for
/// their target until the shard's elector has seen a holder.
fn seen(shards: &[Shard], recent: &BTreeMap<usize, String>) -> (Vec<Seen>, BTreeSet<String>) {
    let now = Instant::now();
    let mut ready = BTreeSet::new();
    let seen = shards
        .iter()
        .enumerate()
        .map(|(i, s)| {
            ready.extend(s.candidacy.borrow().ready.iter().cloned());
            let l = s.leadership.borrow().at(now);
            Seen {
                mine: l.term.is_some(),
                since: l.changed_at,
                holder: l.leader.or_else(|| recent.get(&i).cloned()),
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
type View = (Vec<(bool, Option<String>)>, BTreeSet<String>);

/// Balance until `stop`: once what this sidecar sees of the shards (who leads each, who is
/// ready) has been quiet for `every` to twice that (random, so that the replicas rarely plan
/// at once), the moves of [`plan`]; then quiet again. Planning only on a quiet view keeps a
/// replica from acting on a move that the others' electors have not seen yet.
pub async fn balance(me: String, shards: Vec<Shard>, every: Duration, stop: CancellationToken) {
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
        let (seen, ready) = seen(&shards, &counted);
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
        let moves = plan(&me, &seen, &ready);
        if moves.is_empty() {
            continue;
        }
        let led = seen.iter().filter(|s| s.mine).count();
        for (i, to) in send(&shards, moves, every).await {
            tracing::info!(shard = i, to = %to, led, "handed a shard over to balance the replicas");
            recent.insert(i, (to, Instant::now()));
        }
        wait = quiet();
        quiet_since = Instant::now();
    }
}

/// At shutdown, before the electors stop: hand every shard this sidecar leads to the ready
/// candidate leading the fewest, and wait (up to `within`) for the releases. What is left is
/// released by the electors' own shutdown.
pub async fn spread_out(me: &str, shards: &[Shard], within: Duration) {
    let (seen, ready) = seen(shards, &BTreeMap::new());
    let moves = spread(me, &seen, &ready);
    if moves.is_empty() {
        return;
    }
    let asked = moves.len();
    let done = send(shards, moves, within).await;
    tracing::info!(
        shards = asked,
        handed_over = done.len(),
        "shutting down: handed the shards over across the ready candidates"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(ids: &[&str]) -> BTreeSet<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn shards(holders: &[&str]) -> Vec<Seen> {
        holders
            .iter()
            .map(|h| Seen {
                mine: *h == "me",
                since: std::time::UNIX_EPOCH,
                holder: (!h.is_empty()).then(|| h.to_string()),
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
                    })
                    .collect();
                for (i, to) in plan(me, &seen, &ids) {
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
            plan("me", &s, &ready(&["me", "a", "b"])),
            [(2, "a".to_string())]
        );
        // me 2, a 1: balanced within one.
        let s = shards(&["me", "me", "a"]);
        assert!(plan("me", &s, &ready(&["me", "a"])).is_empty());
        // Another holder that is no ready candidate counts for nobody: me 3 of 4 over 2.
        let s = shards(&["me", "me", "me", "gone"]);
        assert_eq!(plan("me", &s, &ready(&["me", "b"])).len(), 1);
        assert!(
            plan("me", &s, &ready(&["me"])).is_empty(),
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
            })
            .collect();
        let moves = plan("me", &s, &ready(&["me", "a", "b", "c", "d"]));
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
            })
            .collect();
        // me 3, a 1 over 2 (share 2): one moves, the one taken at 10.
        assert_eq!(plan("me", &s, &ready(&["me", "a"])), [(1, "a".to_string())]);
    }

    #[test]
    fn at_shutdown_the_shards_spread_over_the_candidates() {
        let s = shards(&["me", "me", "me", "me", "a", "b", "b"]);
        let moves = spread("me", &s, &ready(&["me", "a", "b", "c"]));
        let to: Vec<&str> = moves.iter().map(|(_, t)| t.as_str()).collect();
        // c (0), then a and c, ...: each time to the one leading the fewest.
        assert_eq!(to, ["c", "a", "c", "a"]);
        assert!(
            spread("me", &s, &ready(&["me"])).is_empty(),
            "nobody to hand to"
        );
    }
}

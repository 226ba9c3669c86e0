//! The plan, one rank: convergence, newcomers, shutdown.

mod rollout;

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
    let mut load: BTreeMap<String, usize> = replicas.iter().map(|r| (r.to_string(), 0)).collect();
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

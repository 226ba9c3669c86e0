//! The plan during rollouts: a simulated fleet of two ranks.

mod fleet;
mod sizes;

use super::*;
use fleet::*;

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
                let blind = rolling_restart(m, r, Prefer::None, stops, names, false).histogram();
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
    assert_eq!(moved(true, at(1), before, Some(true), None), 0);
    assert_eq!(moved(true, after, before, Some(true), None), 1);
    assert_eq!(moved(true, after, None, Some(true), None), 0);
    // A new one: from an old holder once; from one of its own rank twice; a free shard not.
    assert_eq!(moved(false, after, None, Some(true), None), 1);
    assert_eq!(moved(false, after, None, Some(false), None), 2);
    assert_eq!(moved(false, after, None, None, None), 0);
    // What a hand-over's notice carried wins: it is the giver's own count and this move.
    assert_eq!(moved(false, after, None, Some(true), Some(2)), 2);
    assert_eq!(moved(true, after, before, Some(true), Some(2)), 2);
    // An old replica's shard taken before the rollout began has not moved in it, whatever an
    // earlier rollout's notice said.
    assert_eq!(moved(true, at(1), before, Some(true), Some(2)), 0);
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

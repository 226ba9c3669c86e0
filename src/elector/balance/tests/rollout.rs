//! The plan during rollouts: a simulated fleet of two ranks.

use super::*;

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
    /// Per shard: the count its last hand-over's notice carried (the giver's [`Seen::moved`]
    /// and that move), as the balancer reads it.
    carried: Vec<Option<u8>>,
    /// When the first replica of the new rank joined (the old ones' `began`).
    began: Option<u64>,
    clock: u64,
    /// Every replica plans on the same view, and all the moves are made at once (replicas
    /// whose quiet views end together), instead of one after the other.
    together: bool,
    /// The takers read the count of moves that the hand-overs' notices carry (the default);
    /// off, they estimate it from whom they took the shard from, as without a notice.
    notices: bool,
    /// The new replicas' ranks carry their creation times, in the order they join, as pods'
    /// do (the default); off, every rank's is 0, as outside Kubernetes.
    stamped: bool,
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
            carried: vec![None; m],
            began: None,
            clock: 0,
            together: false,
            notices: true,
            stamped: true,
        };
        f.settle(None);
        f.moves = vec![0; m];
        f.carried = vec![None; m];
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
        (0..self.holders.len())
            .map(|i| {
                let is_mine = self.holders[i] == me;
                Seen {
                    mine: is_mine,
                    since: at(self.since[i]),
                    holder: Some(self.holders[i].clone()),
                    moved: if is_mine { self.moved(me, i) } else { 0 },
                }
            })
            .collect()
    }

    /// [`Seen::moved`] of shard `i` for its holder `me`, as the balancer works it out.
    fn moved(&self, me: &str, i: usize) -> u8 {
        let ready = self.ready();
        let view = Ready {
            ranks: &ready,
            prefer: self.prefer,
        };
        let mine = &self.ranks[me];
        let old = view.rolling_past(mine);
        let from_old = self.from[i]
            .as_ref()
            .map(|f| better(mine, &self.ranks[f], self.prefer));
        let carried = self.carried[i].filter(|_| self.notices);
        moved(
            old,
            at(self.since[i]),
            self.began.map(at),
            from_old,
            carried,
        )
    }

    fn apply(&mut self, moves: Vec<(usize, String)>) -> bool {
        let any = !moves.is_empty();
        for (i, to) in moves {
            assert!(self.live.contains(&to), "a move to {to}, not live");
            // The hand-over's notice carries the giver's count, and the taker adds this move.
            self.carried[i] = Some(self.moved(&self.holders[i].clone(), i).saturating_add(1));
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
        // The rollout begins after every move before it (the last one not at the same tick).
        self.clock += 1;
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
    names: (&str, &str),
    together: bool,
) -> Fleet {
    rolling_restart_in(
        Fleet::balanced(m, r, prefer, names.0),
        stops,
        names,
        together,
    )
}

/// [`rolling_restart`] preferring the newest, the takers reading the notices' count or not,
/// the new replicas' ranks carrying creation times or not.
fn rolling_restart_with(
    m: usize,
    r: usize,
    stops: Stops,
    names: (&str, &str),
    together: bool,
    (notices, stamped): (bool, bool),
) -> Fleet {
    let mut fleet = Fleet::balanced(m, r, Prefer::Newest, names.0);
    fleet.notices = notices;
    fleet.stamped = stamped;
    rolling_restart_in(fleet, stops, names, together)
}

/// [`rolling_restart`] of `fleet`.
fn rolling_restart_in(
    mut fleet: Fleet,
    stops: Stops,
    (_, new_name): (&str, &str),
    together: bool,
) -> Fleet {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
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
        // In Kubernetes a replica's rank carries its pod's creation time; elsewhere none.
        let new = Rank {
            created: if fleet.stamped { i as i64 + 1 } else { 0 },
            ..new.clone()
        };
        fleet.join(&format!("{new_name}{i}"), new, rng.as_mut());

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

/// The rollouts of [`rolling_restart`] for `m` shards over `r` replicas: the stop orders
/// (oldest first, newest first and `seeds` shuffles), both name orders, one after the other
/// and all at once; the moves per shard over all of them.
fn every_rollout(
    m: usize,
    r: usize,
    seeds: u64,
    notices: bool,
    stamped: bool,
) -> BTreeMap<usize, usize> {
    let mut orders = vec![Stops::OldestFirst, Stops::NewestFirst];
    orders.extend((0..seeds).map(Stops::Random));
    let mut total: BTreeMap<usize, usize> = BTreeMap::new();
    for stops in orders {
        for names in [("a", "b"), ("b", "a")] {
            for together in [false, true] {
                let fleet = rolling_restart_with(m, r, stops, names, together, (notices, stamped));
                for (n, shards) in fleet.histogram() {
                    *total.entry(n).or_default() += shards;
                }
            }
        }
    }
    total
}

#[test]
fn every_size_up_to_forty_shards_over_eight_rolls_with_at_most_two_moves_per_shard() {
    let mut worst = (0, 0, 0);
    for r in 2..=8 {
        for m in 1..=40 {
            let h = every_rollout(m, r, 2, true, true);
            let most = *h.keys().max().expect("a shard");
            assert!(most <= 2, "{m} shards over {r}: moves per shard {h:?}");
            worst = worst.max((most, m, r));
        }
    }
    println!(
        "every M <= 40 over R <= 8: at most {} moves per shard",
        worst.0
    );
}

#[test]
fn larger_sizes_roll_with_at_most_two_moves_per_shard() {
    for (m, r) in [
        (100, 7),
        (64, 10),
        (33, 5),
        (12, 5),
        (20, 10),
        (256, 10),
        (128, 16),
        (256, 30),
        (64, 30),
    ] {
        let h = every_rollout(m, r, 1, true, true);
        println!("{m} shards over {r}: moves per shard {h:?}");
        assert!(h.keys().all(|n| *n <= 2), "{m} shards over {r}: {h:?}");
    }
}

#[test]
fn without_creation_times_from_sixteen_replicas_a_few_shards_move_three_times() {
    // Outside Kubernetes the ranks carry no creation time, and the ⌈M/R⌉ places among the
    // new replicas go by identity: with identities that do not sort in the order the replicas
    // joined (b10 before b2), a new replica above its new share may have to give a joiner a
    // shard that has moved twice. Printed, and bounded.
    for (m, r) in [(128, 16), (256, 30)] {
        let h = every_rollout(m, r, 1, true, false);
        let shards: usize = h.values().sum();
        let thrice: usize = h.iter().filter(|(n, _)| **n > 2).map(|(_, s)| s).sum();
        println!(
            "{m} shards over {r}, no creation times, 12 rollouts: moves per shard {h:?}; more \
             than twice: {thrice} of {shards} shard-rollouts"
        );
        assert!(h.keys().all(|n| *n <= 3), "{m} shards over {r}: {h:?}");
    }
}

#[test]
fn without_the_count_the_notices_carry_shards_move_more_than_twice() {
    // The switch off: the takers estimate a shard's moves from whom they took it, and one
    // that moved from old to old before a new replica took it looks as if it moved once.
    let bad: Vec<(usize, usize, usize)> = [(32, 5), (19, 3), (14, 4), (20, 10)]
        .into_iter()
        .map(|(m, r)| {
            (
                m,
                r,
                *every_rollout(m, r, 2, false, true)
                    .keys()
                    .max()
                    .expect("a shard"),
            )
        })
        .filter(|(_, _, most)| *most > 2)
        .collect();
    println!("without the notices' count: {bad:?}");
    assert!(
        !bad.is_empty(),
        "every size stayed within two moves without the count"
    );
}

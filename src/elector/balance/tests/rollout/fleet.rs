//! The simulated fleet the rollout tests replay: replicas of two ranks planning in turn.

use super::*;

/// A fleet of replicas planning in turn, as the balancers do on quiet views: who leads
/// each shard, since when, whom from, and how often each shard moved.
pub(super) struct Fleet {
    pub(super) prefer: Prefer,
    pub(super) ranks: BTreeMap<String, Rank>,
    pub(super) live: Vec<String>,
    pub(super) holders: Vec<String>,
    pub(super) since: Vec<u64>,
    pub(super) from: Vec<Option<String>>,
    pub(super) moves: Vec<usize>,
    /// Per shard: the count its last hand-over's notice carried (the giver's [`Seen::moved`]
    /// and that move), as the balancer reads it.
    pub(super) carried: Vec<Option<u8>>,
    /// When the first replica of the new rank joined (the old ones' `began`).
    pub(super) began: Option<u64>,
    pub(super) clock: u64,
    /// Every replica plans on the same view, and all the moves are made at once (replicas
    /// whose quiet views end together), instead of one after the other.
    pub(super) together: bool,
    /// The takers read the count of moves that the hand-overs' notices carry (the default);
    /// off, they estimate it from whom they took the shard from, as without a notice.
    pub(super) notices: bool,
    /// The new replicas' ranks carry their creation times, in the order they join, as pods'
    /// do (the default); off, every rank's is 0, as outside Kubernetes.
    pub(super) stamped: bool,
}

pub(super) fn at(t: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + Duration::from_secs(t)
}

impl Fleet {
    /// `r` replicas `<old><i>` of priority 0 leading `m` shards, balanced (the moves not
    /// counted).
    pub(super) fn balanced(m: usize, r: usize, prefer: Prefer, old: &str) -> Fleet {
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

    pub(super) fn ready(&self) -> BTreeMap<String, Rank> {
        self.live
            .iter()
            .map(|id| (id.clone(), self.ranks[id].clone()))
            .collect()
    }

    /// What `me` sees, [`Seen::moved`] as the balancer works it out.
    pub(super) fn seen(&self, me: &str) -> Vec<Seen> {
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
    pub(super) fn moved(&self, me: &str, i: usize) -> u8 {
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

    pub(super) fn apply(&mut self, moves: Vec<(usize, String)>) -> bool {
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
    pub(super) fn settle(&mut self, mut rng: Option<&mut rand::rngs::StdRng>) {
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

    pub(super) fn loads(&self) -> BTreeMap<&str, usize> {
        let mut n: BTreeMap<&str, usize> = self.live.iter().map(|r| (r.as_str(), 0)).collect();
        for h in &self.holders {
            *n.get_mut(h.as_str()).expect("a live holder") += 1;
        }
        n
    }

    /// `id` joins with `rank`, and everyone plans until quiet.
    pub(super) fn join(&mut self, id: &str, rank: Rank, rng: Option<&mut rand::rngs::StdRng>) {
        self.ranks.insert(id.to_string(), rank);
        self.live.push(id.to_string());
        // The rollout begins after every move before it (the last one not at the same tick).
        self.clock += 1;
        self.began.get_or_insert(self.clock);
        self.settle(rng);
    }

    /// `id` stops: it spreads its shards, and the rest plan until quiet.
    pub(super) fn stop(&mut self, id: &str, rng: Option<&mut rand::rngs::StdRng>) {
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
    pub(super) fn histogram(&self) -> BTreeMap<usize, usize> {
        let mut h = BTreeMap::new();
        for n in &self.moves {
            *h.entry(*n).or_default() += 1;
        }
        h
    }
}

/// In which order the old replicas stop.
#[derive(Clone, Copy, Debug)]
pub(super) enum Stops {
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
pub(super) fn rolling_restart(
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
pub(super) fn rolling_restart_with(
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
pub(super) fn rolling_restart_in(
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

//! # A model check of the election (issue 17)
//!
//! [Stateright](https://docs.rs/stateright/0.31) explores every interleaving of a small system
//! — real time, 3 Redis nodes, 2 sidecars, the messages between them and a bounded number of
//! faults — and checks in every reachable state:
//!
//! - **S1** (`always`): no two sidecars answer `is_leader: true` at the same real instant. Each
//!   sidecar's answer is `Leadership::at(its own clock)`, the function `/leader` calls, so a
//!   state where two answer "leader" is a real instant inside both of their intervals.
//! - **S2** (`always`): each newly published term's token exceeds every earlier term's.
//! - **liveness sanity** (`sometimes`): some state has a leader.
//!
//! ## How to read it
//! - `model/system.rs` is the system: [`system::State`] (what the checker hashes),
//!   [`system::Action`] (every transition, faults included), and `next_state`. Start with
//!   `Action`'s variants, then `start_acquire`, `deliver` and `maybe_finish`: they follow
//!   `Redlock::acquire_inner`, `Node::eval` and `Redlock::renew` line by line; `feed` is where
//!   the elector's commands meet them.
//! - This file holds the checks: one test per hazard, each run twice — with the defence off
//!   (the checker must find the violation; the trace is printed) and on (it must find none
//!   within the bound) — and one check with every defence on and every fault allowed.
//!
//! ## What runs the sidecar's own code
//! Every decision goes through the functions the binary runs: `math::quorum`, `Tally::decided`
//! (decide at the quorum-th yes or once a quorum is impossible), `math::validity` and
//! `math::drift` (validity and deadline), `math::next_token` (the token), `node::parse_info`
//! and `node::classify_at` (restart quarantine; `classify` is that function on `Instant`),
//! `node::counts_from_at` (whether a yes counts; `Node::counts_from` calls it),
//! `clock::Policy::new`, `clock::Watch::observe` / `counts_from` (jump detection, quarantine,
//! observe-before-counting), `clock::Watch::may_vouch` / `attest` (attestations: whether a
//! sidecar may vouch for another's fresh watch at a reading, and whether a vouch counts for the
//! watch it names), and `Leadership::with` / `Leadership::at` (the answer).
//!
//! ## What the model approximates
//! - **The scripts' node-side effects are mirrored**, not run (`System::run_script`): Lua
//!   cannot run here. ACQUIRE (`SET NX PX` + set-if-greater epoch, probe mode), RENEW (PEXPIRE
//!   ours / heal a missing key / set-if-greater epoch), RELEASE (token-checked delete), and
//!   ATTEST (`System::attestations`: request, pending + vouch in one step, check; each a clock
//!   reading, taken instantly; requests kept until the node restarts).
//! - **The elector is the binary's own** ([`redlock_elector::elector::machine::Machine`], the
//!   sans-IO state machine the driver runs in production): each sidecar holds one, the model
//!   hands it round results, notices, step-down requests and timer wakes at the sidecar's
//!   clock, and runs the commands it gives (`System::feed`). What is the model's: *when* a
//!   round may start (any unit, at most one start per sidecar per unit and `max_rounds` in all,
//!   so its timers run at 1 µs with no stall margin, no grace and no cool-down after a
//!   step-down: a superset of the jittered `retryEvery` and `renewEvery`); a watch round is
//!   answered "free" (the follower then attempts); a step-down's successor read shows the other
//!   sidecar ready; a failed attempt is `NoQuorum`. A round may time out once a unit has passed
//!   on the sidecar's clock; the deadline is the elector's timer, delivered on the first tick at
//!   or after it unless the sidecar is paused. The stall watchdog and the preference settle are
//!   not exercised (none is needed for S1/S2).
//! - **Time is discrete**: one unit is 1 s, ttl is 10 units, every event happens at a unit
//!   instant. An overlap shorter than a unit cannot be seen, so `driftFactor` is 0.2 (not 0.01)
//!   and sidecar clocks run at 0.9, 1 or 1.1 times real time, so that rate drift amounts to
//!   whole units within a ttl. Node wall clocks run at the real rate between jumps.
//! - **Messages**: one FIFO connection per sidecar and node (as in production: one multiplexed
//!   connection, Redis runs its commands in order), reordered freely across connections,
//!   delayed without bound, replies lost by a fault; release replies and stragglers of a
//!   finished round are not read. A crashed sidecar's sent commands may still run.
//! - **Clock readings**: every reply, every handshake, and a refresh of every connected node
//!   on every unit tick (`Node::maintain` refreshes INFO + TIME every second). Handshakes and
//!   refreshes read instantly (sent = received).
//! - **Start**: every sidecar has run for 14 units and watched every node's clock, nodes have
//!   been up for 100 units; no key, epoch 0. A crashed sidecar restarts fresh.
//!
//! ## Bounds and searches
//! Per test below; `docs/model.md` has the numbers (states, depth, time). A violation is
//! searched breadth-first (shortest trace); "no violation" is checked depth-first with symmetry
//! reduction over the nodes ([`system::canonical`]). The checks are `#[ignore]`d in unoptimized
//! builds (about 5x slower) and run with `cargo test --release --test model` (scripts/test.sh).
//! `MODEL_HORIZON`, `MODEL_FAULTS`, `MODEL_ROUNDS` and `MODEL_THREADS` make the full check
//! deeper; `MODEL_EXPLORER=host:port` serves Stateright's Explorer on the full model (the
//! `explorer` test, `#[ignore]`d).

#[path = "model/system.rs"]
mod system;

use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};
use system::{Defences, Faults, Rate, System};

/// A model check: run by `scripts/test.sh` with `cargo test --release --test model`, and
/// `#[ignore]`d in unoptimized builds, where its search takes minutes.
macro_rules! model_test {
    ($(#[$m:meta])* fn $name:ident() $body:block) => {
        $(#[$m])*
        #[test]
        #[cfg_attr(
            debug_assertions,
            ignore = "minutes unoptimized: scripts/test.sh runs it with cargo test --release --test model"
        )]
        fn $name() $body
    };
}

const S1: &str = "S1 mutual exclusion";
const S2: &str = "S2 fencing tokens increase";
const LIVE: &str = "a leader is reachable";

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn threads() -> usize {
    env_num("MODEL_THREADS", 2)
}

/// Check `sys`. With `expect_violation`, search breadth-first (the shortest trace) and stop at
/// the first failure, returning its trace; otherwise explore everything within the bound,
/// depth-first with symmetry reduction over the nodes ([`system::canonical`]).
fn check(label: &str, sys: System, expect_violation: bool) -> Option<String> {
    check_with(label, sys, expect_violation, false)
}

/// [`check`]; `deep`: search for the violation depth-first (it need not be the shortest trace),
/// for a scenario whose breadth-first search to the violation's depth needs more memory than CI
/// has.
fn check_with(label: &str, sys: System, expect_violation: bool, deep: bool) -> Option<String> {
    let started = Instant::now();
    let builder = sys.clone().checker().threads(threads());
    let run = if expect_violation && deep {
        Run::of(
            builder
                .finish_when(HasDiscoveries::AnyFailures)
                .spawn_dfs()
                .join(),
        )
    } else if expect_violation {
        Run::of(
            builder
                .finish_when(HasDiscoveries::AnyFailures)
                .spawn_bfs()
                .join(),
        )
    } else {
        Run::of(builder.symmetry_fn(system::canonical).spawn_dfs().join())
    };
    let elapsed = started.elapsed();
    eprintln!(
        "[model] {label}: {} states ({} unique{}), depth {}, {:.1} s; S1 {}, S2 {}, leader {}",
        run.states,
        run.unique,
        if expect_violation {
            ""
        } else {
            " up to node symmetry"
        },
        run.depth,
        elapsed.as_secs_f64(),
        if run.s1.is_some() {
            "VIOLATED"
        } else {
            "holds"
        },
        if run.s2.is_some() {
            "VIOLATED"
        } else {
            "holds"
        },
        if run.live {
            "reachable"
        } else if expect_violation {
            "(search stopped early)"
        } else {
            "NOT REACHED"
        },
    );
    let found = run.s1.or(run.s2).map(|steps| {
        let trace = sys.render(&steps);
        eprintln!(
            "[model] {label}: counterexample, {} steps\n{trace}",
            steps.len() - 1
        );
        trace
    });
    if !expect_violation {
        assert!(run.done, "{label}: the search did not finish");
        assert!(
            run.live,
            "{label}: no leader is reachable (the model is vacuous)"
        );
    }
    found
}

/// What a finished search found (BFS and DFS checkers are different types).
struct Run {
    states: usize,
    unique: usize,
    depth: usize,
    done: bool,
    s1: Option<Vec<(system::State, Option<system::Action>)>>,
    s2: Option<Vec<(system::State, Option<system::Action>)>>,
    live: bool,
}

impl Run {
    fn of(c: impl Checker<System>) -> Run {
        Run {
            states: c.state_count(),
            unique: c.unique_state_count(),
            depth: c.max_depth(),
            done: c.is_done(),
            s1: c.discovery(S1).map(|p| p.into_vec()),
            s2: c.discovery(S2).map(|p| p.into_vec()),
            live: c.discovery(LIVE).is_some(),
        }
    }
}

/// Run a hazard's scenario with its defence off (a violation must be found) and then, within
/// the same bound, with every defence on (none may be found).
fn hazard(label: &str, off: System) -> String {
    let on = System {
        defences: Defences::ALL,
        ..off.clone()
    };
    let trace = check(&format!("{label}, defence off"), off, true)
        .unwrap_or_else(|| panic!("{label}: no violation found with the defence off"));
    assert!(trace.contains("is_leader: true"));
    if let Some(trace) = check(&format!("{label}, defence on"), on, false) {
        panic!("{label}: violation with every defence on:\n{trace}");
    }
    trace
}

/// The hazards' common bound: horizon `horizon`, the given faults and defences, one round per
/// sidecar, and B idle until `b_from` (so A can lead first).
fn scenario(horizon: u8, f: Faults, d: Defences, b_from: u8) -> System {
    let mut sys = System::new(horizon, f, d);
    sys.a_first_until = b_from;
    sys.max_rounds = 1;
    sys
}

/// The release-proof hazard's system (issue 25): B fresh and starting at unit 2, graceful
/// handovers, two forward jumps of 12 units, two rounds each.
fn fresh_successor_hazard(defences: Defences) -> System {
    let mut sys = System::new(2, faults(2, |f| f.jump_forward = true), defences);
    sys.fresh = vec![false, true];
    sys.connect_at = vec![0, 2];
    sys.handovers = true;
    sys.jump_units = 12;
    sys.max_rounds = 2;
    sys
}

/// The attestation hazard's system (issue 25): A leads from unit 0; B is a fresh process that
/// starts at unit 1 and asks for attestations; two forward jumps of 12 units (more than a ttl).
fn vouch_hazard(defences: Defences, jumps: u8) -> System {
    let mut sys = System::new(1, faults(jumps, |f| f.jump_forward = true), defences);
    sys.fresh = vec![false, true];
    sys.connect_at = vec![0, 1];
    sys.attestations = true;
    sys.jump_units = 12;
    sys.max_rounds = 2;
    sys
}

/// Every fault allowed, at most `max` in one behaviour.
fn every_fault(max: u8) -> Faults {
    Faults {
        pause: true,
        sidecar_crash: true,
        node_restart: true,
        reply_loss: true,
        jump_forward: true,
        jump_backward: true,
        max,
    }
}

/// Every defence but those `off` switches off.
fn all_but(off: impl Fn(&mut Defences)) -> Defences {
    let mut d = Defences::ALL;
    off(&mut d);
    d
}

fn faults(max: u8, set: impl Fn(&mut Faults)) -> Faults {
    let mut f = Faults {
        max,
        ..Faults::default()
    };
    set(&mut f);
    f
}

/// The symmetry reduction is sound only if `canonical` maps the states of one node permutation
/// class to one representative and keeps every state in its class: a jump or an empty restart
/// on any one of the three nodes, after A has sent its commands, gives one representative.
#[test]
fn canonical_identifies_node_permutations() {
    use system::{Action, canonical};
    let sys = System::new(
        2,
        faults(2, |f| {
            f.jump_forward = true;
            f.node_restart = true;
        }),
        Defences::ALL,
    );
    let start = sys.init_states().remove(0);
    let sent = sys
        .next_state(&start, Action::StartAcquire(0))
        .expect("A starts");
    for fault in [
        |node| Action::Jump {
            node,
            forward: true,
        },
        Action::NodeRestart,
    ] {
        let after: Vec<_> = (0..3)
            .map(|i| sys.next_state(&sent, fault(i)).expect("a fault"))
            .collect();
        assert_ne!(after[0], after[1]);
        let reps: Vec<_> = after.iter().map(canonical).collect();
        assert!(reps.iter().all(|r| *r == reps[0]));
        for (s, r) in after.iter().zip(&reps) {
            let mut a = s.redis.clone();
            let mut b = r.redis.clone();
            a.sort_by_key(|n| format!("{n:?}"));
            b.sort_by_key(|n| format!("{n:?}"));
            assert_eq!(a, b, "the representative permutes the nodes, nothing else");
        }
    }
}

model_test! {
    /// (1) A node restarts empty after granting A's lease; B wins it and another node. The restart
    /// quarantine holds the node out; so does observe-before-counting (a new run_id starts a new
    /// watch), so the unsafe run switches both off, as `safety_empty_restart` does.
    fn empty_restart_needs_the_quarantine() {
        let f = faults(1, |f| f.node_restart = true);
        let off = all_but(|d| (d.quarantine, d.clock_check) = (false, false));
        hazard("empty restart, quarantine off", scenario(2, f, off, 1));
    }
}

/// Each of the two defences against an empty restart alone suffices within the same bound
/// (about a minute each, so not in CI).
#[test]
#[ignore = "about half a minute in release; not needed for the acceptance"]
fn empty_restart_each_defence_alone() {
    let f = faults(1, |f| f.node_restart = true);
    for (what, d) in [
        (
            "empty restart, quarantine only",
            Defences {
                clock_check: false,
                ..Defences::ALL
            },
        ),
        (
            "empty restart, new-run_id watch only",
            Defences {
                quarantine: false,
                ..Defences::ALL
            },
        ),
    ] {
        assert!(check(what, scenario(2, f, d, 1), false).is_none());
    }
}

model_test! {
    /// (2) After A's acquisition, the wall clocks of two of the three nodes jump forward: A's keys
    /// there expire early while A's deadline still runs, and B wins those two nodes. Jump detection
    /// (the clock watch on every reply and every refresh) quarantines them.
    fn forward_jump_on_a_majority_needs_jump_detection() {
        let f = faults(2, |f| f.jump_forward = true);
        let sys = scenario(7, f, all_but(|d| d.clock_check = false), 7);
        hazard("forward jump on a majority, detection off", sys);
    }
}

model_test! {
    /// (3) A leads and is paused; its deadline passes while it sleeps, the keys expire, B wins.
    /// When A resumes, an answer computed from the flag set at decision time says "leader" until
    /// the elector's timer catches up; `Leadership::at(now)` says no from the first answer.
    fn pause_needs_answer_time_deadline() {
        let f = faults(1, |f| f.pause = true);
        let sys = scenario(11, f, all_but(|d| d.answer_time = false), 11);
        hazard("pause, deadline at decision time", sys);
    }
}

model_test! {
    /// (4) A's clock runs 10 % slow. Without the drift term its deadline, `T1 + ttl` on its own
    /// clock, is 11.1 units of real time later, but the nodes drop its keys after 10 units: B wins
    /// while A still answers "leader".
    fn slow_clock_needs_the_drift_term() {
        let off = all_but(|d| d.drift_term = false);
        let mut sys = scenario(11, faults(0, |_| {}), off, 11);
        sys.rates = vec![vec![Rate::Slow], vec![Rate::Exact]];
        hazard("slow clock, drift term off", sys);
    }
}

model_test! {
    /// (5) The release proof (issue 25). A leads and hands over gracefully, naming B, a rollout's
    /// new pod that is not running yet (it starts at unit 2, as a fresh process that has watched no
    /// node's clock). B does not take the handover in time: the reservations expire at the next
    /// unit, and A, as a follower again, wins the lease back. Then the wall clocks of two nodes jump
    /// forward by more than a ttl, so A's keys there vanish while A still leads; B starts after the
    /// jumps, so its own watch cannot see them. Without the proof check, B's attempt after the notice
    /// counts every grant: it wins the two stepped nodes beside A. With the check, B counts a node
    /// it has not watched for ttl + margin only if its grant consumed A's proof there, and none is
    /// left.
    fn fresh_successor_needs_the_release_proof() {
        let unsafe_sys = fresh_successor_hazard(all_but(|d| d.release_proof = false));
        let trace = check_with(
            "fresh successor, release proof check off",
            unsafe_sys,
            true,
            true,
        )
        .expect("no violation found with the release proof check off");
        assert!(trace.contains("is_leader: true"));
    }
}

/// The release-proof hazard's bound with every defence on: no violation. Not in CI: the
/// exhaustive search at this bound (two jumps beyond the ttl, a successor starting at unit 2)
/// did not finish within 20 minutes here. CI checks the defence on the hazard's own trace
/// (`fresh_successor_hazard_replayed`).
#[test]
#[ignore = "the exhaustive on-check at the hazard's bound: more than 20 minutes"]
fn fresh_successor_release_proof_on_at_the_hazards_bound() {
    let sys = fresh_successor_hazard(Defences::ALL);
    if let Some(trace) = check("fresh successor, release proof check on", sys, false) {
        panic!("violation with every defence on:\n{trace}");
    }
}

model_test! {
    /// The proof's purpose: a fresh successor named by a graceful release takes the lease at once (a
    /// state where B leads is reachable within one unit, long before its clock watch of 12 units
    /// would let it count a node).
    fn fresh_successor_takes_a_graceful_handover_at_once() {
        let scenario = |f: Faults| {
            let mut sys = System::new(1, f, Defences::ALL);
            sys.fresh = vec![false, true];
            sys.handovers = true;
            sys.max_rounds = 2;
            sys
        };
        let quiet = scenario(faults(0, |_| {}));
        let steps = system::reachable(&quiet, |s| quiet.leaders(s) == vec![1])
            .expect("a fresh B named by A's graceful release never leads within the bound");
        eprintln!("[model] fresh successor: B leads after {steps} steps, before its clock watch ends");
    }
}

/// With every defence on, no overlap is reachable in the handover scenario with a forward jump or
/// a lost reply anywhere (horizon 1). Not in CI: the exhaustive search ran more than 4 minutes
/// here without finishing.
#[test]
#[ignore = "exhaustive on-check with faults: more than 4 minutes"]
fn fresh_successor_handover_with_faults_on() {
    let mut sys = System::new(
        1,
        faults(1, |f| {
            f.jump_forward = true;
            f.reply_loss = true;
        }),
        Defences::ALL,
    );
    sys.fresh = vec![false, true];
    sys.handovers = true;
    sys.max_rounds = 2;
    if let Some(trace) = check("fresh successor, every defence on", sys, false) {
        panic!("violation with every defence on:\n{trace}");
    }
}

/// FINDING, now fixed in `clock::Watch::observe`: a reading taken after a long gap hid a jump.
/// The watch compares two readings with an allowance that grows with the gap between them
/// (`driftFactor` × gap). B is paused for 13 units (a partition from the nodes does the same);
/// meanwhile A renews, and two nodes' clocks jump forward by 4 units — more than A's drift
/// allowance (2.002), less than B's allowance over the gap (0.2 × 14.3). The nodes drop A's keys
/// 4 units early; B resumes, its first readings look steady, it wins them while A still leads.
/// The binary now starts the watch again after a gap longer than the window
/// (`Policy.rewatch_after_gap`); the model runs with that off (`Defences.rewatch`: it has no
/// background clock refresh), and this test asserts the checker finds the overlap. Checking the
/// fix itself needs the refresh modelled: the next step for the model.
/// UNCONFIRMED by the checker: the hazard comes from reading `clock::check` (and is shown by
/// `clock::tests::without_rewatching_a_long_gap_hides_a_step`); this search (BFS, 3 faults,
/// horizon 13) did not finish within 240 s here, so it is `#[ignore]`d until it has been run
/// to the end (`cargo test --release --test model finding -- --ignored --nocapture`).
#[test]
#[ignore = "not yet confirmed: its search did not finish within 240 s here"]
fn finding_a_long_gap_between_readings_hides_a_jump() {
    let f = faults(3, |f| {
        f.pause = true;
        f.jump_forward = true;
    });
    let mut sys = System::new(13, f, Defences::ALL);
    sys.rates = vec![vec![Rate::Exact], vec![Rate::Fast]];
    sys.a_first_until = 13;
    sys.max_rounds = 2;
    let trace = check("long gap hides a jump, rewatch off", sys, true)
        .expect("the long-gap hazard is not found with rewatching off");
    assert!(trace.contains("is_leader: true"));
}

model_test! {
    /// (6) Attestations (issue 25). A leads; the wall clocks of two nodes jump forward by more than
    /// a ttl, so A's keys there vanish while A still leads. B starts after the jumps: its own watch
    /// cannot see them, and it asks for vouches. A's next reading of those nodes reveals the jumps
    /// (quarantine). Without the attestation check A vouches anyway; B counts the two stepped nodes
    /// at once and wins them beside A. With the check, A vouches only where the node counts for it
    /// at the reading that returned B's request, which is the third node alone: B cannot win.
    fn fresh_follower_needs_the_attestation_check() {
        let sys = vouch_hazard(all_but(|d| d.attestation = false), 2);
        let trace = check_with("fresh follower, attestation check off", sys, true, true)
            .expect("no violation found with the attestation check off");
        assert!(trace.contains("is_leader: true"));
        assert!(trace.contains("vouches"), "the violation should go through a vouch:\n{trace}");
    }
}

model_test! {
    /// The attestation hazard's bound with one jump, every defence on: no violation (the two-jump
    /// bound is checked on its trace, `fresh_follower_vouch_hazard_replayed`).
    fn fresh_follower_attestation_check_on() {
        if let Some(trace) = check("fresh follower, attestation check on", vouch_hazard(Defences::ALL, 1), false) {
            panic!("violation with every defence on:\n{trace}");
        }
    }
}

model_test! {
    /// The attestations' purpose: a fresh follower counts every node within a unit of its start,
    /// long before its own watch of 12 units ends, when a sidecar that counts the nodes vouches
    /// for it. Without attestations it cannot.
    fn fresh_follower_counts_at_once_when_vouched() {
        let quiet = vouch_hazard(Defences::ALL, 0);
        let steps = system::reachable(&quiet, |s| s.now == 1 && quiet.counting(s, 1) == 3)
            .expect("a fresh B never counts the nodes within a unit, though A vouches");
        eprintln!("[model] fresh follower: B counts all three nodes after {steps} steps, at unit 1");
        let alone = System {
            attestations: false,
            ..quiet.clone()
        };
        assert_eq!(
            system::reachable(&alone, |s| alone.counting(s, 1) > 0),
            None,
            "without attestations a fresh B counts no node within the bound"
        );
    }
}

/// Replay `steps` from the first initial state. An action that is not enabled is skipped when
/// `skippable` says so (a round decided early leaves nothing to apply or read; a refused vouch
/// leaves nothing to check), and fails the test otherwise. The final state and the trace.
fn replay(
    sys: &System,
    steps: Vec<system::Action>,
    skippable: impl Fn(&system::Action) -> bool,
) -> (system::State, String) {
    let mut s = sys.init_states().remove(0);
    let mut path = vec![];
    for a in steps {
        let mut allowed = vec![];
        sys.actions(&s, &mut allowed);
        let next = sys.next_state(&s, a).filter(|_| allowed.contains(&a));
        match next {
            Some(n) => {
                path.push((s.clone(), Some(a)));
                s = n;
            }
            None if skippable(&a) => continue,
            None => panic!("{a:?} not allowed:\n{}", sys.describe(&s)),
        }
    }
    path.push((s.clone(), None));
    let trace = sys.render(&path);
    (s, trace)
}

/// Forward jumps on nodes 0 and 1.
fn two_forward_jumps() -> [system::Action; 2] {
    [0, 1].map(|node| system::Action::Jump {
        node,
        forward: true,
    })
}

/// The attestation hazard's trace, replayed step by step: with the check off the fresh follower
/// ends up leading beside A; with it on, the same steps leave B counting one node, a follower.
#[test]
fn fresh_follower_vouch_hazard_replayed() {
    use system::Action::*;
    let run = |check: bool| {
        let sys = vouch_hazard(all_but(|d| d.attestation = check), 2);
        let mut steps = vec![StartAcquire(0)];
        steps.extend((0..3).map(|node| Apply { sidecar: 0, node }));
        steps.extend((0..2).map(|node| Deliver { sidecar: 0, node }));
        steps.extend(two_forward_jumps());
        steps.push(Tick);
        for node in 0..3 {
            steps.push(Request { sidecar: 1, node });
            steps.push(Vouch { sidecar: 0, node });
            steps.push(Check { sidecar: 1, node });
        }
        steps.push(StartAcquire(1));
        // The acquire round, then the renewal that confirms a token above B's proposal.
        for _ in 0..2 {
            steps.extend((0..3).map(|node| Apply { sidecar: 1, node }));
            steps.extend((0..3).map(|node| Deliver { sidecar: 1, node }));
        }
        let (s, trace) = replay(&sys, steps, |a| {
            matches!(
                a,
                Apply { .. } | Deliver { .. } | Check { .. } | Vouch { .. }
            )
        });
        (sys.leaders(&s), sys.counting(&s, 1), trace)
    };
    let (leaders, _, trace) = run(false);
    assert_eq!(
        leaders,
        vec![0, 1],
        "check off: the trace should end with two leaders:\n{trace}"
    );
    eprintln!("[model] fresh follower, attestation check off, replayed:\n{trace}");
    let (leaders, counting, trace) = run(true);
    assert_eq!(
        leaders,
        vec![0],
        "check on: only A leads at the end:\n{trace}"
    );
    assert_eq!(
        counting, 1,
        "check on: B counts the one node A vouched for:\n{trace}"
    );
}

/// Every defence on, every fault allowed (up to `MODEL_FAULTS`, default 1), both sidecars free
/// from the start: S1 and S2 hold, and a leader is reachable. Too large for CI at a useful
/// horizon (see docs/model.md): `MODEL_HORIZON=3 cargo test --release --test model
/// all_defences -- --ignored --nocapture`.
#[test]
#[ignore = "the deeper, unrestricted check: minutes to hours"]
fn all_defences_all_faults() {
    let f = every_fault(env_num("MODEL_FAULTS", 1));
    let mut sys = System::new(env_num("MODEL_HORIZON", 4), f, Defences::ALL);
    sys.max_rounds = env_num("MODEL_ROUNDS", 2);
    if let Some(trace) = check("all defences, all faults", sys, false) {
        panic!("violation with every defence on:\n{trace}");
    }
}

/// Stateright's Explorer on the full model: `MODEL_EXPLORER=localhost:3000 cargo test --release
/// --test model explorer -- --ignored --nocapture`, then open http://localhost:3000.
#[test]
#[ignore = "serves a web UI until interrupted"]
fn explorer() {
    let addr = std::env::var("MODEL_EXPLORER").unwrap_or_else(|_| "localhost:3000".into());
    let f = every_fault(env_num("MODEL_FAULTS", 2));
    let sys = System::new(env_num("MODEL_HORIZON", 14), f, Defences::ALL);
    eprintln!("[model] Explorer on http://{addr}");
    sys.checker().serve(addr);
}

/// The release-proof hazard's trace, replayed step by step (the breadth-first search for it
/// needs more memory than CI has): with the proof check off the fresh successor ends up leading
/// beside A; with it on, the same steps leave B a follower.
#[test]
fn fresh_successor_hazard_replayed() {
    use system::Action::*;
    let run = |release_proof: bool| {
        let sys = fresh_successor_hazard(all_but(|d| d.release_proof = release_proof));
        let apply = |k: u8| (0..3).map(move |node| Apply { sidecar: k, node });
        let deliver = |k: u8, nodes: &[u8]| {
            nodes
                .iter()
                .map(|&node| Deliver { sidecar: k, node })
                .collect::<Vec<_>>()
        };
        let mut steps = vec![StartAcquire(0)];
        steps.extend(apply(0));
        steps.extend(deliver(0, &[0, 1]));
        steps.push(Handover { from: 0, to: 1 });
        steps.extend(apply(0));
        steps.push(Tick);
        steps.push(StartAcquire(0));
        steps.extend(apply(0));
        steps.extend(deliver(0, &[0, 1]));
        steps.extend(two_forward_jumps());
        steps.push(Tick);
        steps.push(StartAcquire(1));
        steps.extend(apply(1));
        steps.extend(deliver(1, &[0, 1, 2]));
        steps.extend(apply(1));
        steps.extend(deliver(1, &[0, 1, 2]));
        let (s, trace) = replay(&sys, steps, |a| matches!(a, Apply { .. } | Deliver { .. }));
        (sys.leaders(&s), trace)
    };
    let (leaders, trace) = run(false);
    assert_eq!(
        leaders,
        vec![0, 1],
        "proof check off: the trace should end with two leaders:\n{trace}"
    );
    eprintln!("[model] fresh successor, release proof check off, replayed:\n{trace}");
    let (leaders, trace) = run(true);
    assert_eq!(
        leaders,
        vec![0],
        "proof check on: only A leads at the end:\n{trace}"
    );
}

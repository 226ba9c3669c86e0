//! # A model check of the election (issue 17)
//!
//! [Stateright](https://docs.rs/stateright/0.31) explores every interleaving of a small system
//! — real time, 3 Redis nodes, 2 sidecars (3 in the three-sidecar checks), the messages
//! between them and a bounded number of faults — and checks in every reachable state:
//!
//! - **S1** (`always`): no two sidecars answer `is_leader: true` at the same real instant. Each
//!   sidecar's answer is `Leadership::at(its own clock)`, the function `/leader` calls, so a
//!   state where two answer "leader" is a real instant inside both of their intervals.
//! - **S2** (`always`): each newly published term's token exceeds every earlier term's.
//! - **the proof's invariant** (`always`, issue 34): a graceful release writes a release proof
//!   on a node only where no lock command of its term can still arrive (`src/redlock/proof.rs`).
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
//!   within the bound) — and one check with every defence on and every fault allowed. The
//!   blind band's check (issue 34) is `slow_reading_needs_the_blind_band`: a slow refresh, then
//!   forward steps the old watch cannot see.
//!
//! ## What runs the sidecar's own code
//! Every decision goes through the functions the binary runs: `math::quorum`, `Tally::decided`
//! (decide at the quorum-th yes or once a quorum is impossible), `math::validity` and
//! `math::drift` (validity and deadline), `math::next_token` (the token), `node::parse_info`
//! and `node::classify_at` (restart quarantine; `classify` is that function on `Instant`),
//! `node::counts_from_at` (whether a yes counts; `Node::counts_from` calls it),
//! `clock::Policy::new`, `clock::Watch::observe` / `counts_from` (jump detection, quarantine,
//! observe-before-counting, and since issue 34 the bases and the blind band), `Watch::band_us`
//! (each reply's band), `clock::Watch::may_vouch` / `attest` (attestations: whether a
//! sidecar may vouch for another's fresh watch at a reading, and whether a vouch counts for the
//! watch it names), and `Leadership::with` / `Leadership::at` (the answer). What
//! `acquire_inner` / `renew` do with the bands (`Blind`: `lead` = the largest band of the
//! counted votes, `hold` = the largest of the counted votes without a release proof; deadline
//! `T1 + ttl − drift − lead`, validity of `elapsed + hold` against `drift + lead`, and an
//! acquisition reported only once `hold` has passed) is mirrored in `System::maybe_finish`.
//!
//! ## What the model approximates
//! - **The scripts' node-side effects are mirrored**, not run (`System::run_script`): Lua
//!   cannot run here. ACQUIRE (`SET NX PX` + set-if-greater epoch, probe mode), RENEW (PEXPIRE
//!   ours where that lengthens it / heal a missing key / set-if-greater epoch), RELEASE
//!   (token-checked delete), and ATTEST (`System::attestations`: request, pending + vouch in
//!   one step, check; each a clock reading, taken instantly; requests kept until the node
//!   restarts).
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
//! - **Clock readings**: every reply, every handshake, and at a tick a read of a connected
//!   node's clock when no fast reading came for a third of the window (`Node::maintain`'s
//!   cadence: every 5 ticks at 1×); the long-gap rule is on. Handshakes and
//!   refreshes read instantly (sent = received); a reply's reading runs from its round's T1 to
//!   its delivery, the node reading its clock when it runs the command. The policy's base bound
//!   is the binary's default `redis.timeout`, 50 ms (`system::BASE_RTT`): a reading taken
//!   within one step (round trip 0) is a base, one that spans a tick (≥ 0.9 unit) is not. A
//!   *slow refresh* (`Faults.slow_refresh`, or scheduled by `System.slow_refresh_at`) reads
//!   every connected node with a round trip of `slow_units`, the node's clock read at its end:
//!   a reply that slow would time out in the binary (its readings stay within `redis.timeout`);
//!   the model needs it because a hidden step must beat the whole units of its drift margin.
//! - **The blind band** (issue 34, `Defences.blind` = `Policy.blind_check`): bands come from
//!   the binary's watch; a hold ends at the first step (a tick, a resume) at which the
//!   sidecar's clock has passed decision + hold, and the validity is checked again then (as
//!   `acquire_inner` does), so at the model's resolution an acquisition without a release
//!   proof leads one or two units after its decision. With the model's `driftFactor` a band
//!   is large: `0.2 ×` the widest gap between bases (4–5 units at the binary's cadence) +
//!   `1.2 ×` the round trips + 1 ms, i.e. 0.8–1.0 unit for an instant reading.
//! - **Reconnects** (issue 34, `Faults.reconnect`): a running sidecar replaces a connection with
//!   commands queued on it; they move to the link's `stale` queue, which the node may run at
//!   any later time. `Defences.reconnect_taint` logs each command with its connection and
//!   guards RENEW against healing over a reservation.
//! - **Start**: every sidecar not fresh has read every node's clock every 4 units for 16 units,
//!   nodes have been up for 100 units; no key, epoch 0. A crashed sidecar restarts fresh.
//! - **Leases** (issue 37, `System.leases`, 1 but in the two-lease checks): per lease the keys
//!   and epoch on every node, and per sidecar the elector, rounds, term log and S1/S2; per
//!   sidecar the connections, clock watches and restart quarantine, and per node the
//!   attestations, shared by every lease (`NodeSet`). The two-lease checks are phased
//!   (`System.starts`) and run on prompt links (`System.prompt`) to stay small.
//!
//! - **Issue 52's clock faults** (the margin review's findings 1-3): scheduled node clock
//!   steps of any size and sign (`System.steps`, the checker picks where in its unit each
//!   falls; no symmetry reduction where steps name nodes), readings at a sidecar's own rate
//!   (`System.read_every`), a leader at the slow edge (`Rate::Slower`, 0.85; `Rate::Slow91`,
//!   0.91), readings with a round trip at the base bound (`System.timed_reads`,
//!   `System.base_rtt`, `System.history`), a rescaled clock (`System.ttl`,
//!   `System.drift_factor`: at 0.2 the span check's margin leaves no term, so its checks run
//!   at 0.1 and ttl 25 units), and the switches `Defences.span` (`Policy.span_check`; the
//!   model's drift is then `Policy::term_margin`) and `Defences.proof_continuity`
//!   (`Policy.proof_continuity_check`). Finding 1: `proof_between_steps_needs_proof_continuity`
//!   (three sidecars); finding 2: `small_steps_over_gaps_need_the_span_check`; finding 3:
//!   `slow_bases_need_the_span_check`. Each off (found) and on (holds). Finding 9 (the CI
//!   fault schedule's): a renewal between a backward step and its undo,
//!   `renewal_between_steps_needs_lengthening_only` (`Defences.renewal_lengthens_only`).
//!
//! ## Bounds and searches
//! Per test below; `docs/model.md` has the numbers (states, depth, time). With the blind band
//! modelled, the pause, attestation and release-proof scenarios were re-timed for the hold,
//! and the drift-term and release-proof "off" searches switch the band off too (see each
//! test). A violation is searched breadth-first (shortest trace), depth-first, or by seeded
//! random walks ([`walk`]) where they meet it far sooner; where an exhaustive "on" check does
//! not finish within CI's time, random walks sample its bound and the test says so. "No
//! violation" is otherwise checked depth-first with symmetry
//! reduction over the nodes ([`system::canonical`]). The checks are `#[ignore]`d in unoptimized
//! builds (about 5x slower) and run with `cargo test --release --test model` (scripts/test.sh).
//! `MODEL_HORIZON`, `MODEL_FAULTS`, `MODEL_ROUNDS` and `MODEL_THREADS` make the full check
//! deeper; `MODEL_EXPLORER=host:port` serves Stateright's Explorer on the full model (the
//! `explorer` test, `#[ignore]`d).

#[path = "model/system.rs"]
mod system;

/// States are cloned per transition: mimalloc rather than glibc's malloc (docs/model.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
const PROOF: &str = "a release proof only where nothing of the term can still arrive";

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
    let mut builder = sys.clone().checker().threads(threads());
    // For sizing a bound by hand: stop after this many states (the search then does not finish,
    // and an "on" check fails on that).
    if let Some(cap) = std::env::var("MODEL_STATE_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        builder = builder.target_state_count(cap);
    }
    // The symmetry reduction over the nodes, where it is sound: a violation's class is reached
    // iff the violation is (the model and its properties do not depend on a node's index), and
    // the path kept is the real one (stateright continues with the state before
    // canonicalization). Scheduled steps name nodes: not there.
    let symmetric = sys.symmetric();
    let reduce = |b: stateright::CheckerBuilder<System>| match symmetric {
        true => b.symmetry_fn(system::canonical),
        false => b,
    };
    let run = if expect_violation && deep {
        Run::of(
            reduce(builder.finish_when(HasDiscoveries::AnyFailures))
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
        Run::of(reduce(builder).spawn_dfs().join())
    };
    let elapsed = started.elapsed();
    eprintln!(
        "[model] {label}: {} states ({} unique{}), depth {}, {:.1} s; S1 {}, S2 {}, proof {}, leader {}",
        run.states,
        run.unique,
        if (expect_violation && !deep) || !symmetric {
            ""
        } else {
            " up to node symmetry"
        },
        run.depth,
        elapsed.as_secs_f64(),
        verdict(&run.s1),
        verdict(&run.s2),
        verdict(&run.proof),
        if run.live {
            "reachable"
        } else if expect_violation {
            "(search stopped early)"
        } else {
            "NOT REACHED"
        },
    );
    let found = run.counterexample(label, &sys);
    if !expect_violation {
        assert!(run.done, "{label}: the search did not finish");
        assert!(
            std::env::var("MODEL_STATE_CAP").is_err(),
            "{label}: MODEL_STATE_CAP stopped the search early: no result (unset it for a check)"
        );
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
    proof: Option<Vec<(system::State, Option<system::Action>)>>,
    live: bool,
}

/// How a report names a property's result.
fn verdict<T>(found: &Option<T>) -> &'static str {
    if found.is_some() { "VIOLATED" } else { "holds" }
}

impl Run {
    /// The trace of the first violation found (S1, else S2, else the proof's invariant),
    /// printed step by step.
    fn counterexample(&self, label: &str, sys: &System) -> Option<String> {
        let found = self
            .s1
            .as_ref()
            .or(self.s2.as_ref())
            .or(self.proof.as_ref());
        found.map(|steps| {
            let mut trace = sys.render(steps);
            // With several leases, name the lease whose S1 broke (the last state's overlap).
            if sys.leases > 1
                && let Some(j) = self.s1.as_ref().and_then(|p| sys.overlap(&p.last()?.0))
            {
                trace = format!("S1 violated on lease {j}\n{trace}");
            }
            eprintln!(
                "[model] {label}: counterexample, {} steps\n{trace}",
                steps.len() - 1
            );
            trace
        })
    }

    fn of(c: impl Checker<System>) -> Run {
        Run {
            states: c.state_count(),
            unique: c.unique_state_count(),
            depth: c.max_depth(),
            done: c.is_done(),
            s1: c.discovery(S1).map(|p| p.into_vec()),
            s2: c.discovery(S2).map(|p| p.into_vec()),
            proof: c.discovery(PROOF).map(|p| p.into_vec()),
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

/// [`hazard`], the violation searched depth-first ([`check_with`]): for a scenario whose
/// breadth-first search to the violation's depth needs more memory than a 14 GB machine has.
fn hazard_deep(label: &str, off: System) -> String {
    let on = System {
        defences: Defences::ALL,
        ..off.clone()
    };
    let trace = check_with(&format!("{label}, defence off"), off, true, true)
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

/// The release-proof hazard's system (issue 25): B fresh and starting at unit 3, graceful
/// handovers, two forward jumps of 12 units, two rounds each. (Horizon 4: each acquisition
/// without a release proof is held back a unit by its blind band, A's two and B's.)
fn fresh_successor_hazard(defences: Defences) -> System {
    let mut sys = System::new(4, faults(2, |f| f.jump_forward = true), defences);
    sys.fresh = vec![false, true];
    sys.connect_at = vec![0, 3];
    sys.handovers = true;
    sys.jump_units = 12;
    sys.max_rounds = 2;
    sys
}

/// The attestation hazard's system (issue 25): A leads from unit 0; B is a fresh process that
/// starts at unit 1 and asks for attestations; two forward jumps of 12 units (more than a ttl).
fn vouch_hazard(defences: Defences, jumps: u8) -> System {
    vouch_hazard_until(1, defences, jumps)
}

/// [`vouch_hazard`] up to real time `horizon`: the overlap itself needs 4, as B's win at unit 1
/// is held back to 3.462 (its blind band, `hold`, with the largest band a voucher's reading can
/// have: issue 52's proof continuity; 2 without it).
fn vouch_hazard_until(horizon: u8, defences: Defences, jumps: u8) -> System {
    let mut sys = System::new(horizon, faults(jumps, |f| f.jump_forward = true), defences);
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
        slow_refresh: true,
        reconnect: true,
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
        .next_state(&start, Action::StartAcquire(0, 0))
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
        // The violation is searched by random walks: they meet it within a few thousand states,
        // where the breadth-first search took 22 M states and about 2 minutes (2026-11-26).
        let label = "forward jump on a majority, detection off";
        let trace = walk(&format!("{label}, defence off"), sys.clone(), 10_000_000, true)
            .expect("forward jump: no violation found with detection off");
        assert!(trace.contains("is_leader: true"));
        let on = System {
            defences: Defences::ALL,
            ..sys
        };
        if let Some(trace) = check(&format!("{label}, defence on"), on, false) {
            panic!("{label}: violation with every defence on:\n{trace}");
        }
    }
}

/// (3) A leads and is paused; its deadline passes while it sleeps, the keys expire, B wins.
/// When A resumes, an answer computed from the flag set at decision time says "leader" until
/// the elector's timer catches up; `Leadership::at(now)` says no from the first answer.
#[test]
fn pause_needs_answer_time_deadline() {
    let f = faults(1, |f| f.pause = true);
    // Horizon 13: B's win at unit 11 is held back past unit 12 (its blind band, `hold`:
    // 0.2 × the 5-unit gap between its bases at the binary's read cadence + 1 ms). The
    // breadth-first search for the overlap at horizon 12 ran out of 14 GB (2026-11-26):
    // searched depth-first, as the release-proof hazard is.
    let off = scenario(13, f, all_but(|d| d.answer_time = false), 11);
    let on = System {
        defences: Defences::ALL,
        ..off.clone()
    };
    let trace = check_with(
        "pause, deadline at decision time, defence off",
        off,
        true,
        true,
    )
    .expect("pause: no violation found with the answer at decision time");
    assert!(trace.contains("is_leader: true"));
    // Found here with the band modelled (2026-11-26): A paused during its hold resumed after
    // B published token 2 and published its own term, token 1, after it (S2). Fixed in
    // `acquire_inner` (2ab6e4a): after the hold the validity is checked again; the model's
    // `end_hold` mirrors it, and the "on" search now checks S1 and S2 both.
    if let Some(trace) = check("pause, deadline at decision time, defence on", on, false) {
        panic!("pause: violation with every defence on:\n{trace}");
    }
}

model_test! {
    /// (4) A's clock runs 10 % slow. Without the drift term its deadline, `T1 + ttl` on its own
    /// clock, is 11.1 units of real time later, but the nodes drop its keys after 10 units: B wins
    /// while A still answers "leader".
    fn slow_clock_needs_the_drift_term() {
        // The blind band off too: its lead (0.401 unit for A's instant votes, ρ × the 2-unit
        // spacing of its bases + 1 ms) takes A's last leading instant from unit 11 to 10, below
        // the keys' expiry: at the model's time resolution the 1.1-unit overrun of A's slow clock
        // no longer shows once any lead is paid. The "on" run keeps every defence.
        let off = all_but(|d| (d.drift_term, d.blind) = (false, false));
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
        // Searched with the blind band off, at the pre-band timing (horizon 2, B from unit 2):
        // with the band on, both acquisitions are held back a unit and the overlap needs horizon
        // 4, whose depth-first search had not found it after 6 minutes (2026-11-26). The band
        // on, the hazard is shown by `fresh_successor_hazard_replayed`. Issue 52's proof
        // continuity off too: it closes the same path (a fresh watch counts on no proof at all).
        let mut unsafe_sys = fresh_successor_hazard(all_but(|d| {
            (d.release_proof, d.blind, d.proof_continuity) = (false, false, false)
        }));
        unsafe_sys.horizon = 2;
        unsafe_sys.connect_at = vec![0, 2];
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
/// did not finish within 25 minutes here (2026-11-27). CI checks the defence on the hazard's own trace
/// (`fresh_successor_hazard_replayed`).
#[test]
#[ignore = "the exhaustive on-check at the hazard's bound: more than 25 minutes"]
fn fresh_successor_release_proof_on_at_the_hazards_bound() {
    let sys = fresh_successor_hazard(Defences::ALL);
    if let Some(trace) = check("fresh successor, release proof check on", sys, false) {
        panic!("violation with every defence on:\n{trace}");
    }
}

model_test! {
    /// The proof's purpose: a fresh successor named by a graceful release takes the lease at once (a
    /// state where B leads is reachable within one unit, long before its clock watch of 12 units
    /// would let it count a node), as it did before issue 52. Since its proof continuity a proof
    /// counts only for a watch that counts by itself or through a vouch: without a vouch B no
    /// longer leads within the bound (the price of finding 1's fix; the binary's fresh
    /// successor waits for a vouch or its watch, `fresh_handover`), with continuity off it
    /// does, on the proof alone. (With attestations on, the breadth-first search for B
    /// leading had grown past 18 GB after 14 minutes under load and was stopped: not checked.)
    fn fresh_successor_takes_a_graceful_handover_at_once() {
        let scenario = |d: Defences| {
            let mut sys = System::new(1, faults(0, |_| {}), d);
            sys.fresh = vec![false, true];
            sys.handovers = true;
            sys.max_rounds = 2;
            sys
        };
        let alone = scenario(Defences::ALL);
        assert_eq!(
            system::reachable(&alone, |s| alone.leaders(s) == vec![1]),
            None,
            "with proof continuity a fresh B counts on no proof without a vouch"
        );
        let before_52 = scenario(all_but(|d| d.proof_continuity = false));
        let steps = system::reachable(&before_52, |s| before_52.leaders(s) == vec![1])
            .expect("proof continuity off: a fresh B named by A's graceful release never leads within the bound");
        eprintln!("[model] fresh successor, proof continuity off: B leads after {steps} steps on the proof alone");
    }
}

/// The release proof's on-check: with every defence on, no overlap and no false proof is
/// reachable in the handover scenario (a fresh successor named by a graceful release) with a
/// forward jump or a lost reply anywhere (horizon 1). About 17 s idle (6.4 M states) before
/// issue 52; with its proof continuity the fresh successor counts on no proof without a vouch,
/// so the replay (`fresh_successor_hazard_replayed`) keeps the release proof's on side in CI.
#[test]
#[ignore = "outside CI (the model step's 5 minutes): 922 k unique states up to symmetry (3.87 M), 41 s at load 15 (20 s CPU); docs/model.md, 'Outside CI'"]
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
/// (`Policy.rewatch_after_gap`, on in `Defences::ALL` since issue 34, with the binary's read
/// cadence modelled); this test switches it off and asserts the checker finds the overlap.
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
    let mut sys = System::new(13, f, all_but(|d| d.rewatch = false));
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
        // Horizon 4: with issue 52's proof continuity B's vouched young watch adds the largest
        // band a voucher's reading can have, so its win at 1 is held to 3.462.
        let sys = vouch_hazard_until(4, all_but(|d| d.attestation = false), 2);
        // Random walks meet the overlap within about a million states (3 s), where the
        // depth-first search took 79 M states and 3.5 minutes (2026-11-26).
        let trace = walk("fresh follower, attestation check off", sys, 10_000_000, true)
            .expect("no violation found with the attestation check off");
        assert!(trace.contains("is_leader: true"));
        assert!(trace.contains("vouches"), "the violation should go through a vouch:\n{trace}");
    }
}

/// The attestation hazard's bound with one jump, every defence on: no violation (the two-jump
/// bound is checked on its trace, `fresh_follower_vouch_hazard_replayed`).
#[test]
#[ignore = "outside CI (the model step's 5 minutes): 5.67 M unique states, 87 s idle (2026-11-27), 95 s at load 7; docs/model.md, 'Outside CI'"]
fn fresh_follower_attestation_check_on() {
    if let Some(trace) = check(
        "fresh follower, attestation check on",
        vouch_hazard(Defences::ALL, 1),
        false,
    ) {
        panic!("violation with every defence on:\n{trace}");
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

/// The base bound of the model's policy separates its two kinds of reading: one taken within a
/// step (round trip 0: handshakes, refreshes, a reply read in the unit it was sent) is a base;
/// one that spans a tick (0.9 unit at the slowest clock) is not.
#[test]
fn base_bound_separates_instant_from_slow_readings() {
    let sys = System::new(1, faults(0, |_| {}), Defences::ALL);
    let p = sys.policy();
    assert!(p.blind_check);
    assert!(
        0 <= p.base_rtt_us && p.base_rtt_us < 900_000,
        "{}",
        p.base_rtt_us
    );
    let off = System::new(1, faults(0, |_| {}), all_but(|d| d.blind = false));
    assert!(!off.policy().blind_check);
}

/// The blind-band hazard's system (issue 34): the forward-jump hazard's bound (horizon 7, two
/// forward jumps of 4 units, one round each, B first at 7), and B's refresh at unit 2 slow: a
/// reading of every node that took `slow_units` = 4 (scheduled, not a fault).
fn blind_hazard(defences: Defences) -> System {
    let f = faults(2, |f| f.jump_forward = true);
    let mut sys = scenario(7, f, defences, 7);
    sys.slow_units = 4;
    sys.slow_refresh_at = Some((1, 2));
    sys
}

model_test! {
    /// (7) The blind band (issue 34). B's refresh of the nodes at unit 2 is slow (4 units); just
    /// after it the wall clocks of two nodes step forward by 4 units, within the allowance of the
    /// next comparison with that slow reading (1.2 × 5 units against 1 moved + 4). The old watch
    /// (every reading a base, only the latest compared) sees nothing; A's keys there vanish 4
    /// units early, more than A's drift margin leaves (3 units at the model's time resolution):
    /// B wins them at unit 7 while A still leads. With the band, the slow reading is no base: B's next
    /// refresh is compared with the last fast one and reveals the step.
    fn slow_reading_needs_the_blind_band() {
        let off = blind_hazard(all_but(|d| d.blind = false));
        hazard_deep("slow reading, blind band off", off);
    }
}

/// The blind-band hazard's trace, replayed step by step: with the band off B ends up leading
/// beside A at unit 7; with it on, B's refresh at unit 3 reveals the steps (compared with its
/// last fast reading) and B, counting one node, stays a follower.
#[test]
fn slow_reading_hazard_replayed() {
    use system::Action::*;
    let run = |blind: bool| {
        let sys = blind_hazard(all_but(|d| d.blind = blind));
        let mut steps = vec![StartAcquire(0, 0)];
        steps.extend((0..3).map(|node| Apply { sidecar: 0, node }));
        steps.extend((0..3).map(|node| Deliver { sidecar: 0, node }));
        steps.extend([Tick, Tick]);
        steps.extend(two_forward_jumps());
        steps.extend([Tick; 5]);
        steps.push(StartAcquire(1, 0));
        // The acquire round, then the renewal that confirms a token above B's proposal.
        for _ in 0..2 {
            steps.extend((0..3).map(|node| Apply { sidecar: 1, node }));
            steps.extend((0..3).map(|node| Deliver { sidecar: 1, node }));
        }
        let (s, trace) = replay(&sys, steps, |a| matches!(a, Apply { .. } | Deliver { .. }));
        (sys.leaders(&s), sys.counting(&s, 1), trace)
    };
    let (leaders, _, trace) = run(false);
    assert_eq!(
        leaders,
        vec![0, 1],
        "band off: two leaders at the end:\n{trace}"
    );
    eprintln!("[model] slow reading, blind band off, replayed:\n{trace}");
    let (leaders, counting, trace) = run(true);
    assert_eq!(
        leaders,
        vec![0],
        "band on: only A leads at the end:\n{trace}"
    );
    assert_eq!(
        counting, 1,
        "band on: B counts the unstepped node only:\n{trace}"
    );
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
/// Up to unit 4: with issue 52's proof continuity a vouched watch younger than a window adds
/// the largest band a voucher's reading can have, so B's hold ends at 3.462, not 1.8 (the
/// attestation check is still needed beside it).
#[test]
fn fresh_follower_vouch_hazard_replayed() {
    use system::Action::*;
    let run = |check: bool| {
        let sys = vouch_hazard_until(4, all_but(|d| d.attestation = check), 2);
        let mut steps = vec![StartAcquire(0, 0)];
        steps.extend((0..3).map(|node| Apply { sidecar: 0, node }));
        steps.extend((0..2).map(|node| Deliver { sidecar: 0, node }));
        steps.extend(two_forward_jumps());
        steps.push(Tick);
        for node in 0..3 {
            steps.push(Request { sidecar: 1, node });
            steps.push(Vouch { sidecar: 0, node });
            steps.push(Check { sidecar: 1, node });
        }
        steps.push(StartAcquire(1, 0));
        // The acquire round, its hold (to unit 4), then the renewal that confirms a token above
        // B's proposal.
        steps.extend((0..3).map(|node| Apply { sidecar: 1, node }));
        steps.extend((0..3).map(|node| Deliver { sidecar: 1, node }));
        steps.extend([Tick; 3]);
        steps.extend((0..3).map(|node| Apply { sidecar: 1, node }));
        steps.extend((0..3).map(|node| Deliver { sidecar: 1, node }));
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
/// beside A; with it on, the same steps leave B a follower. The hazard is the proof check's,
/// so both runs keep issue 52's proof continuity off: it closes the same path a second way (a
/// fresh watch counts on no proof at all), which the third run shows (proof check off,
/// continuity on: B a follower).
#[test]
fn fresh_successor_hazard_replayed() {
    use system::Action::*;
    let run = |release_proof: bool, proof_continuity: bool| {
        let sys = fresh_successor_hazard(all_but(|d| {
            d.release_proof = release_proof;
            d.proof_continuity = proof_continuity;
        }));
        let apply = |k: u8| (0..3).map(move |node| Apply { sidecar: k, node });
        let deliver = |k: u8, nodes: &[u8]| {
            nodes
                .iter()
                .map(|&node| Deliver { sidecar: k, node })
                .collect::<Vec<_>>()
        };
        // A wins at 0 and leads from 1 (its hold), hands over to B (not running yet), wins the
        // lease back at 2 and leads from 3; the jumps at 2; B starts at 3, wins, leads from 4.
        let mut steps = vec![StartAcquire(0, 0)];
        steps.extend(apply(0));
        steps.extend(deliver(0, &[0, 1]));
        steps.push(Tick);
        steps.push(Handover {
            from: 0,
            to: 1,
            lease: 0,
        });
        steps.extend(apply(0));
        steps.push(Tick);
        steps.push(StartAcquire(0, 0));
        steps.extend(apply(0));
        steps.extend(deliver(0, &[0, 1]));
        steps.extend(two_forward_jumps());
        steps.push(Tick);
        steps.push(StartAcquire(1, 0));
        steps.extend(apply(1));
        steps.extend(deliver(1, &[0, 1, 2]));
        steps.push(Tick);
        steps.extend(apply(1));
        steps.extend(deliver(1, &[0, 1, 2]));
        let (s, trace) = replay(&sys, steps, |a| matches!(a, Apply { .. } | Deliver { .. }));
        (sys.leaders(&s), trace)
    };
    let (leaders, trace) = run(false, false);
    assert_eq!(
        leaders,
        vec![0, 1],
        "proof check off: the trace should end with two leaders:\n{trace}"
    );
    eprintln!("[model] fresh successor, release proof check off, replayed:\n{trace}");
    let (leaders, trace) = run(true, false);
    assert_eq!(
        leaders,
        vec![0],
        "proof check on: only A leads at the end:\n{trace}"
    );
    let (leaders, trace) = run(false, true);
    assert_eq!(
        leaders,
        vec![0],
        "proof check off, proof continuity on: only A leads at the end:\n{trace}"
    );
}

/// The reconnect hazard's system (issue 34): A alone acts (B, the successor it may name, starts
/// no round within the bound), graceful handovers, an acquire and a renewal, and one reconnect
/// of a live A with a command in flight.
fn reconnect_hazard(defences: Defences) -> System {
    let mut sys = System::new(2, faults(1, |f| f.reconnect = true), defences);
    sys.a_first_until = 3;
    sys.handovers = true;
    sys.max_rounds = 2;
    sys
}

model_test! {
    /// (8) The reconnect taint (issue 34). A's acquisition is decided by two nodes; its command
    /// to the third is still queued when A replaces that connection (a maintenance read timed
    /// out), so the node may run it later. A's renewal goes out on the new connection and is
    /// answered there. Without the taint the term log takes that answer as proof that every
    /// earlier command has run (true on one connection, not across two) and the handover writes
    /// a release proof on that node while the old ACQUIRE can still arrive: after the
    /// reservation, it would re-create A's key under a proof that says no holder is left. With
    /// the taint (each command logged with its connection), the node gives no proof.
    fn reconnect_needs_the_taint() {
        let off = reconnect_hazard(all_but(|d| d.reconnect_taint = false));
        let trace = check("reconnect, taint off", off, true)
            .expect("no false release proof found with the reconnect taint off");
        assert!(trace.contains("replaces its connection"), "{trace}");
        let on = reconnect_hazard(Defences::ALL);
        if let Some(trace) = check("reconnect, taint on", on, false) {
            panic!("reconnect: violation with every defence on:\n{trace}");
        }
    }
}

/// Three sidecars in one scenario (issue 34): A leads from unit 0 and may hand over to B; B and
/// C are fresh processes (no watch yet) that start at unit 1: B may count a node only through
/// A's release proof, C only through a vouch (it asks for attestations; anyone counting a node
/// may vouch); graceful handovers and attestations both on, with `f`'s faults.
fn three_sidecars(horizon: u8, f: Faults, defences: Defences) -> System {
    let mut sys = System::new(horizon, f, defences);
    sys.sidecars = 3;
    sys.rates = vec![vec![Rate::Exact]; 3];
    sys.fresh = vec![false, true, true];
    sys.connect_at = vec![0, 1, 1];
    sys.handovers = true;
    sys.attestations = true;
    sys.requesters = Some(vec![false, false, true]);
    sys.successor = Some(1);
    sys.jump_units = 12;
    sys.max_rounds = 1;
    sys
}

/// Three sidecars, the release proof and attestations together, with every defence on: the
/// exhaustive check. Not in CI: at horizon 1 without any fault it explored 1.46 M unique states
/// (10 M generated, depth 40) in 97 s and was still growing; it did not finish within 10 minutes
/// (2026-11-26). CI runs the seeded random walks of `three_sidecars_random_walks` instead.
#[test]
#[ignore = "the exhaustive three-sidecar check: more than 10 minutes"]
fn three_sidecars_proof_and_attestations_on() {
    let f = faults(env_num("MODEL_3_FAULTS", 0), |f| {
        f.reconnect = true;
        f.jump_forward = true;
    });
    let sys = three_sidecars(1, f, Defences::ALL);
    if let Some(trace) = check("three sidecars, every defence on", sys, false) {
        panic!("three sidecars: violation with every defence on:\n{trace}");
    }
}

/// Seeded random walks over `sys` (uniform choice of the next action) until `states` states
/// were visited, or, with `expect_violation`, until the first violation; each walk is checked
/// for S1, S2 and the proof's invariant. Returns the trace of a violation met.
fn walk(label: &str, sys: System, states: usize, expect_violation: bool) -> Option<String> {
    let seed = env_num("MODEL_WALK_SEED", 34);
    let started = Instant::now();
    let mut builder = sys
        .clone()
        .checker()
        .threads(threads())
        .target_state_count(states);
    if expect_violation {
        builder = builder.finish_when(HasDiscoveries::AnyFailures);
    }
    let run = Run::of(
        builder
            .spawn_simulation(seed, stateright::UniformChooser)
            .join(),
    );
    eprintln!(
        "[model] {label}, random walks (seed {seed}): {} states, depth {}, {:.1} s; S1 {}, S2 {}, proof {}, leader {}",
        run.states,
        run.depth,
        started.elapsed().as_secs_f64(),
        verdict(&run.s1),
        verdict(&run.s2),
        verdict(&run.proof),
        if run.live { "reached" } else { "NOT REACHED" },
    );
    if !expect_violation {
        assert!(
            run.live,
            "{label}: no walk reached a leader (the walks are vacuous)"
        );
    }
    run.counterexample(label, &sys)
}

/// The three-sidecar walks' system: horizon 3, two rounds each, and two faults among a
/// reconnect, a forward jump of 12 units, a lost reply and a pause.
fn three_sidecars_walked(defences: Defences) -> System {
    let f = faults(2, |f| {
        f.reconnect = true;
        f.jump_forward = true;
        f.reply_loss = true;
        f.pause = true;
    });
    let mut sys = three_sidecars(3, f, defences);
    sys.max_rounds = 2;
    sys
}

/// Three sidecars, the release proof and attestations together (issue 34), sampled: the
/// space is beyond the exhaustive check (`three_sidecars_proof_and_attestations_on`), so
/// seeded random walks (`MODEL_WALK_STATES`, default 10 M states) check S1, S2 and the
/// proof's invariant with every defence on, and must meet the false proof with the
/// reconnect taint off (the walks do reach that hazard). Not exhaustive: a pass says no walk
/// met a violation, not that none exists within the bound.
#[test]
fn three_sidecars_random_walks() {
    let states = env_num("MODEL_WALK_STATES", 10_000_000);
    let off = three_sidecars_walked(all_but(|d| d.reconnect_taint = false));
    let trace = walk("three sidecars, reconnect taint off", off, states, true)
        .expect("three sidecars: no walk met the false proof with the reconnect taint off");
    assert!(trace.contains("replaces its connection"), "{trace}");
    let on = three_sidecars_walked(Defences::ALL);
    if let Some(trace) = walk("three sidecars, every defence on", on, states, false) {
        panic!("three sidecars: violation with every defence on:\n{trace}");
    }
}

/// The release proof's and the attestations' hazard bounds with every defence on, sampled
/// (their exhaustive on-checks do not finish within CI's time, see above): seeded random
/// walks over the release-proof hazard's bound (horizon 4, two forward jumps of 12 units,
/// B fresh and named) and the attestation hazard's two-jump bound (horizon 4),
/// `MODEL_WALK_STATES` states each (default 10 M). The walks do reach the attestation
/// hazard with its check off (`fresh_follower_needs_the_attestation_check`); at the
/// release-proof bound they did not meet the overlap with the check off within 10 M states
/// (2026-11-26), so there they sample without that evidence of reach.
#[test]
#[ignore = "outside CI (the model step's 5 minutes): 2 x 10 M walked states, 36 s idle (2026-11-27), 192 s at load 15; docs/model.md, 'Outside CI'"]
fn hazard_bounds_random_walks() {
    let states = env_num("MODEL_WALK_STATES", 10_000_000);
    for (label, sys) in [
        ("release-proof bound", fresh_successor_hazard(Defences::ALL)),
        (
            "attestation bound, two jumps",
            vouch_hazard_until(4, Defences::ALL, 2),
        ),
    ] {
        if let Some(trace) = walk(&format!("{label}, every defence on"), sys, states, false) {
            panic!("{label}: violation with every defence on:\n{trace}");
        }
    }
}

/// Two leases per sidecar (issue 37): one set of connections, one clock watch, one restart
/// quarantine per node and one attestation hash per node serve both leases; each lease has its
/// own keys and epoch on every node, its own elector, rounds and term log, and S1 and S2 are
/// checked per lease. The bound keeps the search small: A may start its rounds of both leases
/// at unit 0 only, B at unit 1 only (both leases' rounds of a sidecar run concurrently, on the
/// same connections), one round per lease (and the renewal a won token needs), horizon 2, and
/// prompt links (`System.prompt`: a command runs and its reply is read within the unit it was
/// sent; without it a like bound had not finished at 4.2 M unique states, 15 M generated).
fn two_leases(f: Faults, d: Defences) -> System {
    let mut sys = System::new(2, f, d);
    sys.leases = 2;
    sys.max_rounds = 1;
    sys.prompt = true;
    sys.starts = Some(vec![vec![(0, 1); 2], vec![(1, 2); 2]]);
    sys
}

/// The shared watch's hazard: the wall clocks of two nodes step forward by 12 units, more than
/// a ttl, so A's keys there vanish at once, on both leases.
fn two_leases_jump(defences: Defences) -> System {
    let mut sys = two_leases(faults(2, |f| f.jump_forward = true), defences);
    sys.jump_units = 12;
    sys
}

model_test! {
    /// (9) Two leases, one clock watch per sidecar (issue 37): the forward-jump hazard on both
    /// leases at once. With the clock check switched off (`Policy.enabled`, the shared watch's:
    /// off for every lease of the process), B wins a lease's two stepped nodes while A still
    /// leads it: S1 broken on that lease. With every defence on, a step that any reading of a
    /// node reveals (a reply of either lease, a handshake, a refresh) quarantines the node for
    /// both leases, and neither lease ever has two leaders.
    fn two_leases_share_the_clock_check() {
        let off = two_leases_jump(all_but(|d| d.clock_check = false));
        let trace = check("two leases, forward jumps, clock check off", off, true)
            .expect("two leases: no violation found with the shared clock check off");
        assert!(trace.starts_with("S1 violated on lease "), "{trace}");
        assert!(trace.contains("jumps forward"), "{trace}");
        let on = two_leases_jump(Defences::ALL);
        if let Some(trace) = check("two leases, forward jumps, every defence on", on, false) {
            panic!("two leases: violation with every defence on:\n{trace}");
        }
    }
}

model_test! {
    /// Two leases (issue 37), every defence on, every fault kind (a pause, a sidecar crash, a
    /// node restarting empty, a lost reply, a forward or backward step of 4 units, a slow
    /// refresh, a reconnect with both leases' commands in flight), at most one per behaviour,
    /// within [`two_leases`]' bound: S1 and S2 hold on both leases.
    fn two_leases_every_fault_on() {
        let sys = two_leases(every_fault(1), Defences::ALL);
        if let Some(trace) = check("two leases, every fault kind, every defence on", sys, false) {
            panic!("two leases: violation with every defence on:\n{trace}");
        }
    }
}

/// The clock watch is the process's (issue 37), replayed: A leads lease 0; two nodes' clocks
/// step forward 12 units; B tries lease 1 first, and its lease-1 replies from the stepped
/// nodes reveal the steps. With the clock check on, that quarantines the two nodes for lease
/// 0 too before B sends anything on lease 0, and B's lease-0 attempt cannot win; off, B leads
/// lease 0 beside A.
#[test]
fn two_leases_one_watch_replayed() {
    use system::Action::*;
    let run = |clock_check: bool| {
        let sys = two_leases_jump(all_but(|d| d.clock_check = clock_check));
        let round = |k: u8| -> Vec<system::Action> {
            let mut steps: Vec<_> = (0..3).map(|node| Apply { sidecar: k, node }).collect();
            steps.extend((0..3).map(|node| Deliver { sidecar: k, node }));
            steps
        };
        let mut steps = vec![StartAcquire(0, 0)];
        steps.extend(round(0));
        steps.extend(two_forward_jumps());
        steps.push(Tick);
        steps.push(StartAcquire(1, 1));
        steps.extend(round(1));
        let skip = |a: &system::Action| matches!(a, Apply { .. } | Deliver { .. });
        let (after_lease_1, _) = replay(&sys, steps.clone(), skip);
        // B's lease-0 attempt, then the renewal that confirms a token above its proposal.
        steps.push(StartAcquire(1, 0));
        steps.extend(round(1));
        steps.extend(round(1));
        let (s, trace) = replay(&sys, steps, skip);
        (
            sys.counting(&after_lease_1, 1),
            sys.leaders_of(&s, 0),
            trace,
        )
    };
    let (_, leaders, trace) = run(false);
    assert_eq!(
        leaders,
        vec![0, 1],
        "clock check off: two leaders of lease 0 at the end:\n{trace}"
    );
    eprintln!("[model] two leases, clock check off, replayed:\n{trace}");
    let (counting, leaders, trace) = run(true);
    assert_eq!(
        counting, 1,
        "clock check on: after B's lease-1 replies, the stepped nodes count for no lease:\n{trace}"
    );
    assert_eq!(
        leaders,
        vec![0],
        "clock check on: only A leads lease 0:\n{trace}"
    );
}

model_test! {
    /// Two leases on one connection per node (issue 37): the reconnect hazard's bound
    /// ([`reconnect_hazard`]: A alone acts, an acquire and a renewal per lease, graceful
    /// handovers, one reconnect of a live A) with two leases and prompt links. A reconnect moves
    /// the commands of both leases still queued on the replaced connection to its stale queue,
    /// and each lease's term log must see the taint of the shared connection's new generation.
    /// With the taint off, a handover writes a release proof on a node where one of the term's
    /// commands can still arrive; with it on, it never does.
    fn two_leases_reconnect_needs_the_taint() {
        let sys = |d: Defences| System {
            leases: 2,
            prompt: true,
            ..reconnect_hazard(d)
        };
        let off = sys(all_but(|d| d.reconnect_taint = false));
        let trace = check("two leases, reconnect, taint off", off, true)
            .expect("two leases: no false release proof found with the reconnect taint off");
        assert!(trace.contains("replaces its connection"), "{trace}");
        if let Some(trace) = check("two leases, reconnect, taint on", sys(Defences::ALL), false) {
            panic!("two leases, reconnect: violation with every defence on:\n{trace}");
        }
    }
}

/// FINDING (issue 37, found by this replay 2026-11-27): **a release proof of one lease makes a
/// node count for every lease of the process**, and that breaks S1 with every defence on.
/// `Watch::prove` marks the node's watch, and the watch is the process's (`NodeSet`): a fresh
/// sidecar that took lease 0 on A's release proof then counts the node for lease 1 too. The
/// proof says that no live holder of *lease 0's* key is left on the node; A still holds lease
/// 1 there, and a step of the node's clock that B's young watch cannot have seen (it happened
/// before B's first reading) cuts A's lease-1 key short.
///
/// A leads lease 1 from unit 1 (deadline 7.197) and wins lease 0 at 3; right after A read
/// their replies, nodes 0 and 1 step forward 6 units (A's next reading of them is due at 7).
/// B, a fresh process, starts at 4; A hands lease 0 to B with release proofs (it counts every
/// node: it has not seen the step), B's grants consume them. At 5 A's lease-1 keys on nodes 0
/// and 1 are gone (wall 11 > 10); B's lease-1 attempt wins them, counted through lease 0's
/// proofs (its own watch is one unit old, the window is 12), and at 6 B leads lease 1 beside
/// A. A fix, for the lead to decide: keep the proof per lease (a proved node counts at once
/// only for the lease whose reservation the grant consumed). This test pins the finding (it
/// asserts the overlap); flip it when the proof is per lease, in the binary and the model.
fn proof_crossing_replayed(defences: Defences) -> (System, system::State, String, usize) {
    use system::Action::*;
    let mut sys = System::new(6, faults(2, |f| f.jump_forward = true), defences);
    sys.leases = 2;
    sys.handovers = true;
    sys.fresh = vec![false, true];
    sys.connect_at = vec![0, 4];
    sys.jump_units = 6;
    sys.max_rounds = 2;
    sys.successor = Some(1);
    let round = |k: u8| -> Vec<system::Action> {
        let mut steps: Vec<_> = (0..3).map(|node| Apply { sidecar: k, node }).collect();
        steps.extend((0..3).map(|node| Deliver { sidecar: k, node }));
        steps
    };
    // A: lease 1 at 0, lease 0 at 3; the steps; A hands lease 0 to B at 4.
    let mut steps = vec![StartAcquire(0, 1)];
    steps.extend(round(0));
    steps.extend([Tick, Tick, Tick]);
    steps.push(StartAcquire(0, 0));
    steps.extend(round(0));
    steps.extend(two_forward_jumps());
    steps.push(Tick);
    steps.push(Handover {
        from: 0,
        to: 1,
        lease: 0,
    });
    steps.extend((0..3).map(|node| Apply { sidecar: 0, node }));
    // B: lease 0 on the proofs (the acquire, then the renewal that confirms its token).
    steps.push(StartAcquire(1, 0));
    steps.extend(round(1));
    steps.extend(round(1));
    let skip = |a: &system::Action| matches!(a, Apply { .. } | Deliver { .. });
    let (before, _) = replay(&sys, steps.clone(), skip);
    // B, a fresh process since unit 4: how many nodes count for its lease 1 (lease 0's
    // proofs are on the two stepped nodes).
    let counting = sys.counting_for(&before, 1, 1);
    // B: lease 1 at 5, held back by its band to 6, then the renewal that confirms its token.
    steps.push(Tick);
    steps.push(StartAcquire(1, 1));
    steps.extend(round(1));
    steps.push(Tick);
    steps.extend(round(1));
    let (s, trace) = replay(&sys, steps, skip);
    (sys, s, trace, counting)
}
/// The finding replayed both ways. With the proof shared by the leases (`proof_per_lease`
/// off, the binary before the fix), B counts the two stepped nodes for lease 1 through lease
/// 0's proofs and leads lease 1 beside A. With the proof per lease (every defence on), B
/// counts neither for lease 1, its attempt cannot win, and A alone leads lease 1.
#[test]
fn finding_a_release_proof_counts_for_every_lease() {
    // Issue 52's proof continuity off in both runs: under it a fresh watch counts on no proof
    // at all, so the replay (B fresh on lease 0's proofs) would not reach the cross-lease step.
    let before_52 = Defences {
        proof_continuity: false,
        ..Defences::ALL
    };
    let shared = Defences {
        proof_per_lease: false,
        ..before_52
    };
    let (sys, s, trace, counting) = proof_crossing_replayed(shared);
    eprintln!("[model] a release proof shared by the leases (proof_per_lease off):\n{trace}");
    assert_eq!(counting, 2, "lease 0's proofs count for lease 1:\n{trace}");
    assert_eq!(
        sys.leaders_of(&s, 1),
        vec![0, 1],
        "the finding: A and B both lead lease 1 at unit 6:\n{trace}"
    );
    assert_eq!(sys.leaders_of(&s, 0), vec![1], "{trace}");
    assert_eq!(s.now, 6);
    let (sys, s, trace, counting) = proof_crossing_replayed(before_52);
    eprintln!("[model] a release proof per lease (every defence on):\n{trace}");
    assert_eq!(
        counting, 0,
        "lease 0's proofs must not count for lease 1:\n{trace}"
    );
    assert_eq!(sys.leaders_of(&s, 1), vec![0], "{trace}");
    assert_eq!(sys.leaders_of(&s, 0), vec![1], "{trace}");
}

/// The cross-lease proof finding's bound (every defence on), phased as its replay: A may start
/// lease 1 at unit 0 and lease 0 at 3, B (fresh, running from 4) lease 0 at 4 and lease 1 at
/// 5; two forward steps of 6 units, graceful handovers naming B, one round per lease (plus the
/// confirming renewal), prompt links, horizon 6.
fn proof_crossing(defences: Defences) -> System {
    let mut sys = System::new(6, faults(2, |f| f.jump_forward = true), defences);
    sys.leases = 2;
    sys.handovers = true;
    sys.fresh = vec![false, true];
    sys.connect_at = vec![0, 4];
    sys.jump_units = 6;
    sys.max_rounds = 1;
    sys.successor = Some(1);
    sys.prompt = true;
    sys.starts = Some(vec![vec![(3, 4), (0, 1)], vec![(4, 5), (5, 6)]]);
    sys
}

/// [`finding_a_release_proof_counts_for_every_lease`], found by the checker: with every defence
/// on, the depth-first search (symmetry reduction over the nodes) finds S1 broken on lease 1
/// (2026-11-27, two runs under load: after 1.70 M and 2.83 M unique states, 6.07 M and 10.2 M
/// generated, 12 s and 43 s; traces of 50 and 47 steps). Seeded random walks did not meet it
/// within 20 M states. Not in CI (the replay pins the finding there); flip it with the replay.
#[test]
#[ignore = "the finding's search, 12-45 s: cargo test --release --test model finding_a_release -- --ignored"]
fn finding_a_release_proof_counts_for_every_lease_searched() {
    let trace = check_with(
        "a release proof shared by the leases (proof_per_lease off)",
        proof_crossing(Defences {
            proof_per_lease: false,
            ..Defences::ALL
        }),
        true,
        true,
    )
    .expect("the cross-lease proof overlap is not found");
    assert!(trace.starts_with("S1 violated on lease 1"), "{trace}");
    assert!(trace.contains("hands lease 0 over"), "{trace}");
}

// Issue 52: the clock faults of the margin review (`../shared/reviews/
// clock-margin-and-run-review.md`, findings 1-3), as scheduled steps of any size and sign
// (`System.steps`), readings at a sidecar's own rate (`System.read_every`), a leader at the slow
// edge of `driftFactor` (`Rate::Slower`, `Rate::Slow91`), three sidecars around a graceful
// handover, slow bases (`System.timed_reads`, `System.history`, `System.base_rtt`), and, for
// the span check, a rescaled clock (`System.ttl`, `System.drift_factor`).

/// Finding 1's system (the review's section 1): sidecar A is the leader that releases with
/// proof (the review's P), B the fresh named successor (the review's A), C a long-running
/// follower (the review's B). A may start a round in unit 0 only, B (running from unit 1) in
/// unit 1, C in unit 5; one round each (plus the renewal a token above the proposal needs),
/// prompt links, handovers naming B. Nodes 0 and 1 step back 6.5 units in unit 0 and forward
/// 6.5 units in unit 1 (scheduled: the checker places each step anywhere in its unit).
fn proof_between_steps(defences: Defences) -> System {
    let mut sys = System::new(7, faults(0, |_| {}), defences);
    sys.sidecars = 3;
    sys.rates = vec![vec![Rate::Exact]; 3];
    sys.fresh = vec![false, true, false];
    sys.connect_at = vec![0, 1, 0];
    sys.handovers = true;
    sys.successor = Some(1);
    sys.max_rounds = 1;
    sys.prompt = true;
    sys.starts = Some(vec![vec![(0, 1)], vec![(1, 2)], vec![(5, 6)]]);
    let d = 6 * system::UNIT_US + system::UNIT_US / 2;
    sys.steps = [(0, -d), (1, d)]
        .into_iter()
        .flat_map(|(at, us)| (0..2).map(move |node| system::Step { at, node, us }))
        .collect();
    sys
}

/// Finding 2's system (the review's section 2): A's clock runs at 0.85 (the slow edge of the
/// model's `driftFactor` 0.2 that A's own watch allows), B's and the nodes' at 1. A reads the
/// nodes every 2 units (its bases 1.7 local units apart: band 0.341), B every 4 (band 0.801).
/// A may acquire in unit 3 only, B in unit 11 only; one round each, prompt links. Nodes 0 and 1
/// step forward 0.8 units in unit 3, 0.8 in unit 4 and 0.6 in unit 8 (scheduled): each step,
/// and every sum of them, within the allowance of every comparison of B's (`driftFactor` × the
/// gap since a base), so B's watch sees none; together they cut A's keys there 2.2 units short.
fn small_steps_over_gaps(defences: Defences) -> System {
    let mut sys = System::new(12, faults(0, |_| {}), defences);
    sys.rates = vec![vec![Rate::Slower], vec![Rate::Exact]];
    sys.read_every = Some(vec![2, 4]);
    sys.max_rounds = 1;
    sys.prompt = true;
    sys.starts = Some(vec![vec![(3, 4)], vec![(11, 12)]]);
    let unit = system::UNIT_US;
    sys.steps = [(3, 8 * unit / 10), (4, 8 * unit / 10), (8, 6 * unit / 10)]
        .into_iter()
        .flat_map(|(at, us)| (0..2).map(move |node| system::Step { at, node, us }))
        .collect();
    sys
}

model_test! {
    /// (10) Finding 1 of the margin review (issue 52): a release proof between a backward and
    /// a forward step. Nodes 0 and 1 step back 6.5 units after A's last reading of them; B, a
    /// fresh process, starts after the step (its watch begins there); A, which has not seen
    /// the step, hands over to B with proofs; B's grants consume them and B leads at once (lead
    /// 0.001: its readings all came after the step). Then the nodes step forward 6.5 units:
    /// B's keys there expire 6.5 units early, and C, whose watch spans both steps with no
    /// reading between them, sees the nodes moving normally (net zero), wins them and leads
    /// beside B. With the proof continuity check (`Policy.proof_continuity_check`), a proof
    /// counts only for a watch that counts by itself or through a vouch: B cannot win.
    fn proof_between_steps_needs_proof_continuity() {
        let off = proof_between_steps(all_but(|d| d.proof_continuity = false));
        let trace = check("proof between steps, defence off", off, true)
            .expect("finding 1: no violation found with the proof continuity check off");
        assert!(trace.contains("is_leader: true"), "{trace}");
        assert!(trace.contains("steps backward"), "{trace}");
        assert!(trace.contains("hands over"), "{trace}");
        if let Some(trace) = check("proof between steps, defence on", proof_between_steps(Defences::ALL), false) {
            panic!("finding 1: violation with every defence on:\n{trace}");
        }
    }
}

/// The span check's rescaled clock (issue 52, findings 2 and 3): `driftFactor` 0.1 and ttl 25
/// units (window 27.502, base spacing 3.44, the maintenance cadence 9.17), where the span
/// check's term margin, 2.502 + 2.5 + 0.22 × 27.502 = 11.05 units, leaves a term (at 0.2 and
/// 10 units it is 9.763 of 10). A, at the slow edge of 0.1 (0.91), reads every node every 2
/// units (its lead 0.365) and may acquire in unit 2 only: without the span check its deadline
/// is local 1.82 + 25 − 2.502 − 0.365 = 23.953, real 26.32, so it still leads at 26; with it,
/// local 15.4, real 16.9. B (1×) may acquire in unit `b_at` only; prompt links, one round each
/// (plus the renewal a token above the proposal needs), horizon 26.
fn rescaled(defences: Defences, b_at: u8) -> System {
    let mut sys = System::new(26, faults(0, |_| {}), defences);
    sys.ttl = std::time::Duration::from_secs(25);
    sys.drift_factor = 0.1;
    sys.rates = vec![vec![Rate::Slow91], vec![Rate::Exact]];
    sys.read_every = Some(vec![2, 0]);
    sys.max_rounds = 1;
    sys.prompt = true;
    sys.starts = Some(vec![vec![(2, 3)], vec![(b_at, b_at + 1)]]);
    sys
}

/// Scheduled steps of nodes 0 and 1: `(unit, units)`.
fn steps_on_two_nodes(steps: &[(u8, f64)]) -> Vec<system::Step> {
    steps
        .iter()
        .flat_map(|&(at, units)| {
            (0..2).map(move |node| system::Step {
                at,
                node,
                us: (units * system::UNIT_US as f64).round() as i64,
            })
        })
        .collect()
}

/// Finding 2 at the rescaled clock ([`rescaled`]): B reads every 8 units (its hold 0.801); nodes
/// 0 and 1 step forward 0.79 units in units 2 (after A's grants), 8 and 16 (after B's
/// readings there), each within `driftFactor` × the gap to B's next reading and every sum
/// within `driftFactor` × the span since any base (its reading at 0 against its acquire at 25:
/// 27.37 moved, 27.501 allowed). A's keys there (wall expiry 27) are gone at 25 (27.37); B
/// wins them and leads at 26, where A's clock reads 23.66 < 23.953.
fn small_steps_rescaled(defences: Defences) -> System {
    let mut sys = rescaled(defences, 25);
    sys.read_every = Some(vec![2, 8]);
    sys.steps = steps_on_two_nodes(&[(2, 0.79), (8, 0.79), (16, 0.79)]);
    sys
}

model_test! {
    /// (11) Finding 2 of the margin review (issue 52): forward steps each within the allowance
    /// of every comparison B makes, repeated over gaps, add up to more than B's band (its
    /// hold), which charges `driftFactor` × its widest gap; A, at the slow edge, spends its
    /// drift term on its own rate. At the model's scale (0.2, ttl 10): three steps of 0.8,
    /// 0.8 and 0.6 against B's hold of 0.801; A's keys expire at 11 (wall 13.2 > 13), B leads
    /// at 12 while A leads until its local 10.207 (10.2 at 12). There the span check
    /// (`Policy.span_check`) leaves no term, so its on-check runs at the rescaled clock
    /// ([`small_steps_rescaled`]): found with it off, none with it on.
    fn small_steps_over_gaps_need_the_span_check() {
        let off = small_steps_over_gaps(all_but(|d| d.span = false));
        let trace = check("small steps over gaps, defence off", off, true)
            .expect("finding 2: no violation found with the span check off");
        assert!(trace.contains("is_leader: true"), "{trace}");
        let off = small_steps_rescaled(all_but(|d| d.span = false));
        let trace = check("small steps over gaps (driftFactor 0.1, ttl 25), defence off", off, true)
            .expect("finding 2: no violation found at the rescaled clock with the span check off");
        assert!(trace.contains("is_leader: true"), "{trace}");
        let on = small_steps_rescaled(all_but(|d| d.span = true));
        if let Some(trace) = check("small steps over gaps (driftFactor 0.1, ttl 25), defence on", on, false) {
            panic!("finding 2: violation with every defence on:\n{trace}");
        }
    }
}

/// Finding 3 at the rescaled clock ([`rescaled`]; the review's section 3): B's readings are
/// slow bases, each taking 2 units (`System.base_rtt` 2 units, so they are bases), every 5 units
/// (its history before 0, and at 5, 10, 15 and 20), the node reading its clock at the end of
/// the round trip before the step and at the start after it. Nodes 0 and 1 step forward 4.4
/// units in unit 2, after A's grants, between B's base at 0 and the one sent at 3: within that
/// comparison (2 × 2 round trips + 0.1 × 7 = 4.701) and within the one of B's acquire at 23
/// against the base at 0 (2 + 0.1 × 25 = 4.501), but B's band at 23 counts the slowest base's
/// round trip once and its own (instant) one: 1.1 × 2 + 0.1 × 7 + 0.001 = 2.901. A's keys there
/// (wall expiry 27) are gone at 23 (27.4); B wins them, holds 2.901, and leads at 26 beside A.
fn slow_bases(defences: Defences) -> System {
    let mut sys = rescaled(defences, 23);
    sys.base_rtt = std::time::Duration::from_secs(2);
    sys.history = Some(vec![(2, 0), (5, 2)]);
    sys.timed_reads = [5, 10, 15, 20]
        .into_iter()
        .map(|at| system::TimedRead {
            at,
            sidecar: 1,
            nodes: 0b111,
            rtt_units: 2,
            node_at_start: true,
        })
        .collect();
    sys.steps = steps_on_two_nodes(&[(2, 4.4)]);
    sys
}

model_test! {
    /// (12) Finding 3 of the margin review (issue 52): a step between two slow bases, bounded
    /// by both their round trips, hides against a band that counts the slowest base's round
    /// trip once ([`slow_bases`]: 4.4 units against a band of 2.901). The span check's term
    /// margin pays what the band misses: found with it off, none with it on.
    fn slow_bases_need_the_span_check() {
        let off = slow_bases(all_but(|d| d.span = false));
        let trace = check("a step between slow bases, defence off", off, true)
            .expect("finding 3: no violation found with the span check off");
        assert!(trace.contains("is_leader: true"), "{trace}");
        assert!(trace.contains("hold 2.901"), "{trace}");
        // The control: the same step against B's readings taken instantly (every 5 units) is
        // seen at B's next reading (5 + 4.4 moved, 5.501 allowed), and B never wins.
        let instant = System {
            timed_reads: Vec::new(),
            history: None,
            read_every: Some(vec![2, 5]),
            ..slow_bases(all_but(|d| d.span = false))
        };
        assert_eq!(check("a step between instant readings, span check off", instant, true), None);
        if let Some(trace) = check("a step between slow bases, defence on", slow_bases(all_but(|d| d.span = true)), false) {
            panic!("finding 3: violation with every defence on:\n{trace}");
        }
    }
}

/// Finding 9's system (issue 52; found by the CI fault schedule, `FAULT_SEED=1`): A may start
/// in units 0 to 2 (two rounds: its acquire and one renewal), B in unit 5 only; prompt links,
/// horizon 6. Nodes 0 and 1 step back 8 units in unit 1 and forward 8 units in unit 3
/// (scheduled). B reads every node every 4 units (its history, and at 4): before the backward
/// step and after the forward one, never between them.
fn renewal_between_steps(defences: Defences) -> System {
    let mut sys = System::new(6, faults(0, |_| {}), defences);
    sys.read_every = Some(vec![0, 4]);
    sys.max_rounds = 2;
    sys.prompt = true;
    sys.starts = Some(vec![vec![(0, 3)], vec![(5, 6)]]);
    sys.steps = steps_on_two_nodes(&[(1, -8.0), (3, 8.0)]);
    sys
}

model_test! {
    /// (13) Finding 9 (issue 52, the CI fault schedule's): a renewal between a backward step
    /// and its undo ([`renewal_between_steps`]). A acquires at 0 (lead 0.801, deadline 7.197)
    /// and leads from 1. Nodes 0 and 1 step back 8 units in unit 1; A's renewal at 1 or 2 runs
    /// there, and each sets A's key to its now + ttl (wall 3 or 4), where A's acquire put it at
    /// 10. A's watch sees the step and counts neither node: the renewal fails and A leads on to
    /// its acquire's deadline. The nodes step forward 8 units in unit 3, and the keys there end
    /// at 3 or 4 of real time. B's watch read the nodes at 0 and at 4 (net zero): at 5 it wins
    /// nodes 0 and 1, holds 0.801 and leads at 6 beside A. With renewals that only lengthen a
    /// key (`PEXPIRE` only where `PTTL` < ttl) the keys keep their expiry of 10 and B cannot win.
    fn renewal_between_steps_needs_lengthening_only() {
        let off = renewal_between_steps(all_but(|d| d.renewal_lengthens_only = false));
        let trace = check("a renewal between steps, defence off", off.clone(), true)
            .expect("finding 9: no violation found with renewals that may shorten a key");
        assert!(trace.contains("is_leader: true"), "{trace}");
        assert!(trace.contains("steps backward"), "{trace}");
        assert!(trace.contains("steps forward"), "{trace}");
        assert!(trace.contains("A starts a renewal"), "{trace}");
        // The renewal (at 1 or 2) shortened A's key on a stepped node from 10.
        assert!(
            ["A#1 until 3.000", "A#1 until 4.000"].iter().any(|k| trace.contains(k)),
            "{trace}"
        );
        // The control: the same steps without A's renewal (one round each) cut nothing short.
        let no_renewal = System { max_rounds: 1, ..off };
        assert_eq!(check("the steps without a renewal, defence off", no_renewal, true), None);
        if let Some(trace) = check("a renewal between steps, defence on", renewal_between_steps(Defences::ALL), false) {
            panic!("finding 9: violation with every defence on:\n{trace}");
        }
    }
}

//! Upgrades across the release proof (issue 25, item 8). During a `helm upgrade`, sidecars of
//! this release and of the previous one (`main` at 6b69a60, built from git by the harness,
//! [`testkit::previous`]) contend for one lease; old and new scripts, keys, reservations and
//! notices must never give two leaders, whichever side releases or takes over.
//!
//! Two old and two new sidecars take turns on one lease over 3 real redis-server nodes (ttl 1 s),
//! under the checker (S1: never two leaders; S2: tokens of successive terms increase):
//! - graceful handovers (SIGTERM and `POST /leader/step-down`) old → new and new → old, to a
//!   successor that has watched the nodes' clocks long enough (warm) and to one that has just
//!   started (fresh), and new → new to a fresh successor beside a fresh old sidecar;
//! - crashes (SIGKILL) of an old and of a new leader, to a warm follower of the other release,
//!   and to fresh followers of both releases started right after the crash;
//! - then rounds of SIGTERM, step-down and SIGKILL with all four running, each replaced by a
//!   fresh process.
//!
//! What each direction costs is printed (`[figure]`), not asserted: new → old waits out the
//! reservation's grace, because the old acquire script does not know the `<id> proof` form of a
//! reservation and denies its own successor until it expires; old → new gives a fresh new
//! successor no proof (an old release writes the plain form), so it waits for its clock watch,
//! as every sidecar did before. One thing is asserted about the mechanism, because it is
//! safety: a fresh new sidecar named by an old release must not lead before its own watch of a
//! quorum is complete (the fast path only on a proof in the new form).
//! docs/operating/upgrade-mixed-fleet.md states the figures.

use testkit::common;
use testkit::fault;
use testkit::previous;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use fault::checker::{Checker, analyze};
use fault::describe;

const TTL: Duration = Duration::from_secs(1);
/// Every handover and failover must complete within this. The slowest expected ones take about
/// ttl: a fresh successor's clock watch (ttl + margin from its start) or a crashed leader's keys
/// expiring; the rest covers a loaded CI machine.
const COMPLETE_WITHIN: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    Old,
    New,
}

/// How the leader leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leave {
    Term,
    StepDown,
    Kill,
}

impl Leave {
    fn name(self) -> &'static str {
        match self {
            Leave::Term => "SIGTERM",
            Leave::StepDown => "step-down",
            Leave::Kill => "SIGKILL",
        }
    }
}

struct Slot {
    identity: &'static str,
    release: Release,
    sidecar: Option<Sidecar>,
    /// When the running process started.
    started: Instant,
    /// A sidecar that stepped down on request sits out a ttl: no successor before then.
    cooling_until: Option<Instant>,
}

/// One measured change of leader.
struct Change {
    what: String,
    /// Slots of the leader that left and of the next one.
    from: usize,
    to: usize,
    leave: Leave,
    /// From the leader being told to leave to the next one answering leader.
    took: Duration,
    /// How long the next leader had been running when the leader left (`None`: it started
    /// after).
    age: Option<Duration>,
    /// Whether the next leader (a new sidecar) was seen leading before its own clock watch of
    /// a quorum could have ended, i.e. on a release proof (`None`: not known: an old sidecar,
    /// whose `/leader` does not say when its watch ends, or not measured).
    before_watch: Option<bool>,
}

struct Fleet {
    urls: Vec<String>,
    bins: [PathBuf; 2],
    slots: Vec<Slot>,
    checker: Checker,
    tokens: Vec<u64>,
    changes: Vec<Change>,
}

impl Fleet {
    fn bin(&self, r: Release) -> &Path {
        &self.bins[(r == Release::New) as usize]
    }

    fn running(&self, i: usize) -> &Sidecar {
        self.slots[i].sidecar.as_ref().expect("running")
    }

    fn live(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.slots[i].sidecar.is_some())
            .collect()
    }

    /// Start slot `i` afresh (SIGKILL its process first, if one runs).
    fn start(&mut self, i: usize) {
        self.stop(i);
        let s = Sidecar::start_bin(
            self.bin(self.slots[i].release),
            self.slots[i].identity,
            &self.urls,
            &Opts::default(),
        );
        self.checker.point(i, s.api_port);
        let slot = &mut self.slots[i];
        slot.started = Instant::now();
        slot.cooling_until = None;
        slot.sidecar = Some(s);
    }

    /// SIGKILL slot `i` (a follower here: the tests kill leaders through [`Fleet::leave`]).
    fn stop(&mut self, i: usize) {
        if let Some(mut s) = self.slots[i].sidecar.take() {
            s.kill();
            self.checker.down(i);
        }
    }

    /// The one leader among the running sidecars, and its token.
    fn leader(&self) -> (usize, u64) {
        let live = self.live();
        let i = wait_for(COMPLETE_WITHIN, Duration::from_millis(5), || {
            let refs: Vec<&Sidecar> = live.iter().map(|&i| self.running(i)).collect();
            sole_leader(&refs).map(|k| live[k])
        })
        .unwrap_or_else(|| panic!("no sole leader among {live:?}:\n{}", self.logs()));
        let token = self
            .running(i)
            .leader()
            .fencing_token
            .expect("a leader has a token");
        (i, token)
    }

    /// Wait until slot `i` could be named and win on its own: its votes count on a quorum, its
    /// record says ready, and it is not sitting out a step-down.
    fn warm(&mut self, i: usize) {
        if self.slots[i].sidecar.is_none() {
            self.start(i);
        }
        if let Some(until) = self.slots[i].cooling_until.take() {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
        }
        let s = self.running(i);
        wait_for(TTL * 3, Duration::from_millis(10), || {
            let v = s.leader();
            (v.eligible && v.candidate_ready).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{} never became a ready candidate:\n{}",
                s.identity,
                s.logs()
            )
        });
    }

    /// The leader `from` leaves; returns when it was told to.
    fn leave(&mut self, from: usize, how: Leave) -> Instant {
        let s = self.slots[from].sidecar.as_mut().expect("running");
        let at = Instant::now();
        match how {
            Leave::Term => s.signal("TERM"),
            Leave::Kill => {
                s.kill();
                self.slots[from].sidecar = None;
                self.checker.down(from);
            }
            Leave::StepDown => {
                let (status, body) =
                    http("POST", s.api_port, "/leader/step-down").expect("step-down answered");
                assert_eq!(status, 200, "step-down of {}: {body}", s.identity);
                // It sits out a ttl from its release (plus the renewal jitter's worth).
                self.slots[from].cooling_until = Some(at + TTL + Duration::from_millis(100));
            }
        }
        at
    }

    /// After [`Fleet::leave`]: a terminated leader has exited.
    fn left(&mut self, from: usize, how: Leave) {
        if how == Leave::Term
            && let Some(mut s) = self.slots[from].sidecar.take()
        {
            s.reap();
            self.checker.down(from);
        }
    }

    /// The first of `among` to answer leader with a new token after `since`: its slot, how long
    /// it took, and that answer.
    fn next_leader(&self, among: &[usize], since: Instant) -> (usize, Duration, View) {
        let last = self.tokens.last().copied().unwrap_or(0);
        let found = wait_for(COMPLETE_WITHIN, Duration::from_millis(1), || {
            among.iter().find_map(|&i| {
                let v = self.slots[i].sidecar.as_ref()?.try_leader()?;
                (v.is_leader && v.fencing_token.is_some_and(|t| t != last))
                    .then(|| (i, since.elapsed(), v))
            })
        });
        found.unwrap_or_else(|| {
            panic!(
                "no new leader among {among:?} within {COMPLETE_WITHIN:?}: the change did not \
                 complete\n{}",
                self.logs()
            )
        })
    }

    /// Keep only the sidecars in `keep` running (SIGKILL the others, all followers).
    fn only(&mut self, keep: &[usize]) {
        for i in self.live() {
            if !keep.contains(&i) {
                self.stop(i);
            }
        }
    }

    /// Record a change of leader (`v`: the next leader's first answer as leader).
    fn record(&mut self, c: Change, v: &View) {
        // The checker must see every term, however soon the scenario ends it.
        self.checker.sync(c.to);
        let token = v.fencing_token.expect("a leader has a token");
        self.tokens.push(token);
        let age = c.age.map_or("started after that".to_string(), |a| {
            format!("running for {a:?}")
        });
        let proof = match c.before_watch {
            Some(true) => "; before its own clock watch ended, on the release proof",
            Some(false) => "; after its own clock watch ended",
            None => "",
        };
        report(
            &format!("mixed fleet: {}", c.what),
            format!(
                "{:?} (next leader {} {age}{proof})",
                c.took, self.slots[c.to].identity
            ),
        );
        self.changes.push(c);
    }

    fn describe(&self, from: usize, to: usize, how: Leave, successor: &str) -> String {
        format!(
            "{:?} -> {:?} {}, {successor}",
            self.slots[from].release,
            self.slots[to].release,
            how.name()
        )
    }

    /// A graceful handover (or a crash) from the leader `from` to `to`, the only other ready
    /// candidate: `to` fresh (started just before) or warm.
    fn handover(&mut self, from: usize, to: usize, how: Leave, fresh: bool) {
        assert_eq!(self.leader().0, from, "the scenario expects {from} to lead");
        if fresh {
            self.start(to);
            if self.slots[to].release == Release::New {
                // A fresh new sidecar says ready once its watch counts a quorum: through a
                // vouch (ms, where a sidecar that counts the nodes vouches) or after its watch
                // (since issue 52 a proof alone no longer makes a fresh watch count); a fresh
                // old one only after its watch, so an old leader or a new one names nobody.
                let s = self.running(to);
                wait_for(TTL * 3, Duration::from_millis(5), || {
                    s.leader().candidate_ready.then_some(())
                })
                .unwrap_or_else(|| panic!("{} never said ready:\n{}", s.identity, s.logs()));
            }
        } else {
            self.warm(to);
        }
        let age = self.slots[to].started.elapsed();
        // When the successor's own watch of a quorum ends at the latest (a new sidecar says how
        // long it still has to run; evaluated after `asked`).
        let asked = Instant::now();
        let watch_end = self
            .running(to)
            .leader()
            .quorum_counts_in_ms
            .map(|ms| asked + Duration::from_millis(ms));
        let at = self.leave(from, how);
        let (_, took, v) = self.next_leader(&[to], at);
        // `to` led by the time its answer arrived.
        let before_watch = watch_end.map(|end| at + took < end);
        if self.slots[from].release == Release::Old && how != Leave::Kill {
            // An old release writes the plain reservation, never the proof: a new successor can
            // only have won on its own watch. Whatever the machine's load, it cannot be seen
            // leading before that watch ended unless it counted a node without a proof.
            assert_ne!(
                before_watch,
                Some(true),
                "{} led {took:?} after an old leader's {}, before its own clock watch could have \
                 ended ({:?} later): it counted a node on a proof an old release never writes\n{}",
                self.slots[to].identity,
                how.name(),
                watch_end.map(|e| e.saturating_duration_since(at)),
                self.logs()
            );
        }
        self.left(from, how);
        let successor = if fresh {
            "fresh successor"
        } else {
            "warm successor"
        };
        let what = self.describe(from, to, how, successor);
        let c = Change {
            what,
            from,
            to,
            leave: how,
            took,
            age: Some(age),
            before_watch,
        };
        self.record(c, &v);
    }

    fn logs(&self) -> String {
        self.slots
            .iter()
            .filter_map(|s| s.sidecar.as_ref())
            .map(|s| format!("--- {}:\n{}", s.identity, s.logs()))
            .collect()
    }
}

const OLD_A: usize = 0;
const OLD_B: usize = 1;
const NEW_A: usize = 2;
const NEW_B: usize = 3;

/// The previous release's binary, built from git on first use (`testkit::previous`), checked to
/// be a release from before the release proof.
fn previous_binary() -> PathBuf {
    let built = previous::previous();
    report(
        &format!("previous release {} binary", &built.commit[..7]),
        format!(
            "{} in {:?} ({})",
            if built.cached { "cached" } else { "built" },
            built.took,
            built.path.display()
        ),
    );
    let new = Path::new(binary());
    assert!(
        !accepts_release_proof_switch(&built.path) && accepts_release_proof_switch(new),
        "{} is not a release from before the release proof, or {} is not this one",
        built.path.display(),
        new.display()
    );
    built.path.clone()
}

/// A manifest of this tree's shape, for the helpers that adapt the previous release's.
const MANIFEST: &str = "[package]\nname = \"x\"\n\n[dependencies]\ntokio = { version = \"1\", features = [\"full\"] }\n# a comment = here\nserde = \"1\"\n\n[profile.dev]\ndebug = \"line-tables-only\"\n\n[dev-dependencies]\ntokio = { version = \"1\", features = [\"full\", \"test-util\"] }\nregex = \"1\"\n\n[[bench]]\nname = \"b\"\n";

#[test]
fn sections_are_found_up_to_the_next_header() {
    assert_eq!(
        previous::section_body(MANIFEST, "[dependencies]"),
        "tokio = { version = \"1\", features = [\"full\"] }\n# a comment = here\nserde = \"1\"\n\n"
    );
    assert_eq!(previous::section_body(MANIFEST, "[workspace]"), "");
    assert_eq!(
        previous::profiles(MANIFEST),
        "\n[profile.dev]\ndebug = \"line-tables-only\"\n\n"
    );
}

#[test]
fn merged_dev_dependencies_name_each_crate_once_with_the_dev_entry() {
    let merged = previous::merged_dependencies(
        previous::section_body(MANIFEST, "[dependencies]"),
        previous::section_body(MANIFEST, "[dev-dependencies]"),
    );
    assert_eq!(merged.matches("tokio =").count(), 1, "{merged}");
    assert!(merged.contains("\"test-util\""), "{merged}");
    assert!(
        merged.contains("serde = \"1\"") && merged.contains("regex = \"1\""),
        "{merged}"
    );
    let replaced = previous::replace_section(MANIFEST, "[dev-dependencies]", &merged);
    assert!(
        replaced.contains("[[bench]]") && replaced.contains("[profile.dev]"),
        "{replaced}"
    );
    assert_eq!(
        replaced.matches("[dev-dependencies]").count(),
        1,
        "{replaced}"
    );
}

/// Building the previous release on its own: `scripts/test.sh` can run this first, so that the
/// build (about 70 s in release on 2 cores, once) does not share the machine with tests.
#[test]
fn previous_release_builds_from_git() {
    previous_binary();
}

#[test]
fn old_and_new_sidecars_share_a_lease_through_handovers_and_crashes() {
    let old = previous_binary();
    let scenario = Instant::now();
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let slot = |identity, release| Slot {
        identity,
        release,
        sidecar: None,
        started: Instant::now(),
        cooling_until: None,
    };
    let mut f = Fleet {
        urls: nodes.iter().map(Redis::url).collect(),
        bins: [old, PathBuf::from(binary())],
        slots: vec![
            slot("old-a", Release::Old),
            slot("old-b", Release::Old),
            slot("new-a", Release::New),
            slot("new-b", Release::New),
        ],
        checker: Checker::start(&[0; 4]),
        tokens: Vec::new(),
        changes: Vec::new(),
    };
    // An old leader (the nodes' start-up quarantine and its own watch run together).
    f.start(OLD_A);
    let (l, token) = f.leader();
    assert_eq!(l, OLD_A);
    f.tokens.push(token);

    // Graceful handovers, both directions, to fresh and to warm successors.
    f.handover(OLD_A, NEW_A, Leave::Term, true);
    // New -> new on the proof, beside a fresh old sidecar that must not get in the way.
    f.start(OLD_B);
    f.handover(NEW_A, NEW_B, Leave::Term, true);
    f.handover(NEW_B, OLD_B, Leave::StepDown, false);
    f.handover(OLD_B, NEW_B, Leave::StepDown, false);
    f.only(&[NEW_B]);
    f.handover(NEW_B, OLD_A, Leave::Term, true);
    f.handover(OLD_A, NEW_A, Leave::Term, false);
    f.handover(NEW_A, OLD_A, Leave::Term, false);

    // Crashes: to a warm follower of the other release, then to fresh followers of both.
    f.handover(OLD_A, NEW_B, Leave::Kill, false);
    f.handover(NEW_B, OLD_A, Leave::Kill, false);
    f.only(&[OLD_A]);
    let at = f.leave(OLD_A, Leave::Kill);
    let fresh = [OLD_B, NEW_B];
    for &i in &fresh {
        f.start(i);
    }
    let (next, took, v) = f.next_leader(&fresh, at);
    let what = f.describe(
        OLD_A,
        next,
        Leave::Kill,
        "fresh old and new followers started after the crash",
    );
    let c = Change {
        what,
        from: OLD_A,
        to: next,
        leave: Leave::Kill,
        took,
        age: None,
        before_watch: None,
    };
    f.record(c, &v);

    // All four, every way of leaving, each one replaced by a fresh process.
    for i in [OLD_A, NEW_A] {
        f.start(i);
    }
    for round in 0..6 {
        let (l, _) = f.leader();
        let how = [Leave::Term, Leave::StepDown, Leave::Kill][round % 3];
        let ages: Vec<Duration> = f.slots.iter().map(|s| s.started.elapsed()).collect();
        let at = f.leave(l, how);
        let others: Vec<usize> = f.live().into_iter().filter(|&i| i != l).collect();
        let (next, took, v) = f.next_leader(&others, at);
        f.left(l, how);
        let what = f.describe(l, next, how, &format!("round {round} of four sidecars"));
        let c = Change {
            what,
            from: l,
            to: next,
            leave: how,
            took,
            age: Some(ages[next]),
            before_watch: None,
        };
        f.record(c, &v);
        if f.slots[l].sidecar.is_none() {
            f.start(l);
        }
    }

    let obs = f.checker.finish();
    let r = analyze(&obs.segments);
    report("mixed fleet: tokens", format!("{:?}", f.tokens));
    report("mixed fleet: terms observed", r.terms);
    report(
        "mixed fleet: scenario wall time",
        format!("{:?}", scenario.elapsed()),
    );
    for (from, to) in [
        (Release::Old, Release::New),
        (Release::New, Release::Old),
        (Release::New, Release::New),
        (Release::Old, Release::Old),
    ] {
        for crash in [false, true] {
            let took: Vec<String> = f
                .changes
                .iter()
                .filter(|c| (f.slots[c.from].release, f.slots[c.to].release) == (from, to))
                .filter(|c| (c.leave == Leave::Kill) == crash)
                .map(|c| format!("{:?} ({})", c.took, c.what))
                .collect();
            if !took.is_empty() {
                let kind = if crash { "crash" } else { "graceful" };
                report(
                    &format!("mixed fleet, {kind} {from:?} -> {to:?}"),
                    took.join("; "),
                );
            }
        }
    }
    assert!(
        r.overlaps.is_empty() && r.token_violations.is_empty(),
        "{}",
        describe(&r)
    );
    assert!(
        f.tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens did not strictly increase: {:?}",
        f.tokens
    );
    assert!(r.terms >= f.tokens.len(), "{}", describe(&r));
}

/// Whether `bin` knows this release's test-only switch of the release proof (clap rejects an
/// unknown flag before it reads `--help`).
fn accepts_release_proof_switch(bin: &Path) -> bool {
    let out = std::process::Command::new(bin)
        .args(["--unsafe-disable-release-proof-check", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => true,
        Some(2) if stderr.contains("unexpected argument") => false,
        other => panic!("{} --help exited {other:?}:\n{stderr}", bin.display()),
    }
}

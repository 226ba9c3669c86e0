//! Many leases in one sidecar (issue 37): what a lease costs a Redis node when one process holds
//! many, at the binary's defaults (ttl 10s, retryEvery 1s) on the three dedicated nodes.
//!
//! Part 1, in one run: one sidecar leading one lease, then a follower of it; one sidecar leading
//! 32 leases, then a follower of all 32 (`--leases`, so nothing balances them apart); one
//! sidecar leading 32 shards, then a follower of all 32 (`--shards`, the follower not a ready
//! candidate, so the balancer gives it none). The
//! rounds of a process's leases go to a node as one script call per period (batching), so
//! what grows with the leases is the commands inside that call, not the calls: the figures give
//! both, top-level (what a client sends) and all (inside scripts included), and the floor the
//! SPEC's renewal puts under the leader's. Part 1b (full mode): the Redis CPU one sidecar adds,
//! one lease against 32 shards, 8 sidecars at once (one alone is within the idle node's own
//! variation).
//!
//! Part 2: sharded fleets, 3 sidecars × 64 shards and 30 sidecars × 256 (quick mode: 10 ×
//! 256; the smoke: 4 leases, fleets 2 × 8 and 3 × 16): the time to a balanced assignment, then commands/s per node, per sidecar and per lease,
//! and the sidecars' CPU and RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::{Redis, Sidecar};
use crate::harness::{
    clock_ticks, command_counts, cpu_ticks, redis_cpu_secs, rss_kib, script_usec, sidecar, wait_for,
};
use crate::report::{Report, Spec};

const SECTION: &str = "shards";

/// What the nodes did over a window, each the mean over the nodes.
#[derive(Clone, Copy, Default)]
struct Rates {
    /// Commands/s clients sent.
    top: f64,
    /// Commands/s, those inside scripts included.
    all: f64,
    /// The server's time executing scripts, µs per second (`INFO commandstats`).
    exec_us: f64,
    /// The server's CPU time, µs per second (`INFO cpu`): its idle work and the reading and
    /// writing of the connections included (too coarse for one sidecar's share).
    cpu_us: f64,
}

impl std::ops::Sub for Rates {
    type Output = Rates;
    fn sub(self, o: Rates) -> Rates {
        Rates {
            top: self.top - o.top,
            all: self.all - o.all,
            exec_us: self.exec_us - o.exec_us,
            cpu_us: self.cpu_us - o.cpu_us,
        }
    }
}

impl std::ops::Div<f64> for Rates {
    type Output = Rates;
    fn div(self, k: f64) -> Rates {
        Rates {
            top: self.top / k,
            all: self.all / k,
            exec_us: self.exec_us / k,
            cpu_us: self.cpu_us / k,
        }
    }
}

fn rates(nodes: &[&Redis], window: Duration) -> Rates {
    let read = || -> Vec<((u64, u64), u64, f64)> {
        nodes
            .iter()
            .map(|n| (command_counts(n), script_usec(n), redis_cpu_secs(n)))
            .collect()
    };
    let before = read();
    let t0 = Instant::now();
    std::thread::sleep(window);
    let after = read();
    let secs = t0.elapsed().as_secs_f64();
    let n = nodes.len() as f64;
    // Our own three INFO calls at the start of the window (commandstats twice, then cpu) are
    // counted in it, on each node; their CPU is in every window alike, so the baselines remove
    // it.
    let mut r = Rates::default();
    for (b, a) in before.iter().zip(&after) {
        r.top += a.0.0.saturating_sub(b.0.0).saturating_sub(3) as f64 / secs;
        r.all += a.0.1.saturating_sub(b.0.1).saturating_sub(3) as f64 / secs;
        r.exec_us += a.1.saturating_sub(b.1) as f64 / secs;
        r.cpu_us += (a.2 - b.2) * 1e6 / secs;
    }
    Rates {
        top: r.top / n,
        all: r.all / n,
        exec_us: r.exec_us / n,
        cpu_us: r.cpu_us / n,
    }
}

/// How many of `names` each sidecar leads, if every one of them has exactly one leader.
fn assignment(sidecars: &[Sidecar], names: usize) -> Option<Vec<usize>> {
    let mut owner: BTreeMap<String, usize> = BTreeMap::new();
    let mut led = vec![0; sidecars.len()];
    for (i, s) in sidecars.iter().enumerate() {
        for v in s.try_leases()?.into_iter().filter(|v| v.is_leader) {
            if owner.insert(v.lease, i).is_some() {
                return None;
            }
            led[i] += 1;
        }
    }
    (owner.len() == names).then_some(led)
}

/// Every named lease led by `leader` and followed (leader named, eligible) by `follower`.
fn follows_all(leader: &Sidecar, follower: &Sidecar, n: usize) -> bool {
    let (Some(l), Some(f)) = (leader.try_leases(), follower.try_leases()) else {
        return false;
    };
    l.iter().filter(|v| v.is_leader).count() == n
        && f.iter()
            .filter(|v| v.leader.as_deref() == Some(leader.identity.as_str()))
            .count()
            == n
}

/// Wait until a quorum counts the votes of every lease of every one of `sidecars` (its clock
/// watch past the start-up ttl + margin), then `settle`: a window then sees the steady state,
/// not the start-up's attempts and attestations.
fn steady(sidecars: &[&Sidecar], settle: Duration) {
    let counted = wait_for(Duration::from_secs(60), || {
        sidecars
            .iter()
            .all(|s| {
                s.try_leases()
                    .is_some_and(|v| !v.is_empty() && v.iter().all(|v| v.eligible))
            })
            .then_some(())
    });
    assert!(counted.is_some(), "a sidecar's votes still do not count");
    std::thread::sleep(settle);
}

/// The flags of a leader of `shards` shards, and of a follower of them that is no ready
/// candidate, so the balancer leaves it every shard: its app's health check fails at once
/// (nothing listens on port 1).
fn sharded_flags(shards: &str) -> ([&str; 2], [&str; 6]) {
    (
        ["--shards", shards],
        [
            "--shards",
            shards,
            "--follow-app",
            "true",
            "--app-health-url",
            "http://127.0.0.1:1/",
        ],
    )
}

fn leases_flags(n: usize) -> Vec<String> {
    (0..n)
        .flat_map(|i| ["--leases".to_string(), format!("many-{i}")])
        .collect()
}

/// What a leader adds to a node, then what a follower of it adds, each with its flags; the
/// follower follows the `n` leases the leader leads. Measured on `k` pairs at once and divided
/// by `k` (each pair on its own lease, `<lease>-<i>`, when `k` > 1): one sidecar's share of the
/// node's CPU is within the idle node's own variation, `k` of them are not.
fn leader_then_follower(
    nodes: &[&Redis],
    window: Duration,
    (lease, n, k): (&str, usize, usize),
    lead: &[&str],
    follow: &[&str],
) -> [Rates; 2] {
    let settle = Duration::from_secs(3);
    let start = |role: &str, i: usize, flags: &[&str]| {
        let name = if k == 1 {
            lease.to_string()
        } else {
            format!("{lease}-{i}")
        };
        sidecar(&format!("{lease}{n}-{role}{i}"), &name, nodes, flags)
    };
    let base = rates(nodes, window);
    let leaders: Vec<Sidecar> = (0..k).map(|i| start("a", i, lead)).collect();
    wait_for(Duration::from_secs(90), || {
        leaders
            .iter()
            .all(|s| {
                s.try_leases()
                    .is_some_and(|v| v.iter().filter(|v| v.is_leader).count() == n)
            })
            .then_some(())
    })
    .expect("every leader leads every lease");
    steady(&leaders.iter().collect::<Vec<_>>(), settle);
    let led = rates(nodes, window);
    let followers: Vec<Sidecar> = (0..k).map(|i| start("b", i, follow)).collect();
    wait_for(Duration::from_secs(90), || {
        leaders
            .iter()
            .zip(&followers)
            .all(|(l, f)| follows_all(l, f, n))
            .then_some(())
    })
    .expect("every follower follows every lease");
    steady(
        &leaders.iter().chain(&followers).collect::<Vec<_>>(),
        settle,
    );
    let both = rates(nodes, window);
    drop((leaders, followers));
    std::thread::sleep(Duration::from_secs(2));
    [(led - base) / k as f64, (both - led) / k as f64]
}

/// Part 1: (leader, follower) of one lease, of `n` leases (`--leases`) and of `n` shards
/// (`--shards`; the follower's app is unhealthy, so it is not a ready candidate and the
/// balancer leaves it every shard to follow).
fn one_against_many(nodes: &[&Redis], window: Duration, n: usize) -> [[Rates; 2]; 3] {
    let one = leader_then_follower(nodes, window, ("one", 1, 1), &[], &[]);
    let flags = leases_flags(n);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let many = leader_then_follower(nodes, window, ("", n, 1), &flags, &flags);
    let shards = n.to_string();
    let (lead, unhealthy) = sharded_flags(&shards);
    let sharded = leader_then_follower(nodes, window, ("sharded", n, 1), &lead, &unhealthy);
    [one, many, sharded]
}

/// What a sharded fleet did: the time to balance and the window's figures.
struct Fleet {
    balanced_after: Option<Duration>,
    loads: Vec<usize>,
    top: f64,
    all: f64,
    cpu: f64,
    rss: f64,
    redis_cpu: f64,
}

fn fleet(nodes: &[&Redis], window: Duration, sidecars: usize, shards: usize) -> Fleet {
    let flags = ["--shards".to_string(), shards.to_string()];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let started = Instant::now();
    let fleet: Vec<Sidecar> = (0..sidecars)
        .map(|i| sidecar(&format!("s{sidecars}x{shards}-{i}"), "part", nodes, &flags))
        .collect();
    let last_start = started.elapsed();
    let (lo, hi) = (shards / sidecars, shards.div_ceil(sidecars));
    // Each look asks every sidecar for all its shards: at 30 × 256, ten looks a second would be
    // 300 answers of 256 shards each, a load of its own on the machine being measured.
    let look_every = Duration::from_millis(if sidecars * shards > 1000 { 1000 } else { 100 });
    let balanced = wait_for(Duration::from_secs(300), || {
        std::thread::sleep(look_every);
        assignment(&fleet, shards).filter(|l| l.iter().all(|n| (lo..=hi).contains(n)))
    });
    let balanced_after = balanced.as_ref().map(|_| started.elapsed() - last_start);
    std::thread::sleep(Duration::from_secs(3));
    let pids: Vec<u32> = fleet.iter().map(Sidecar::pid).collect();
    let k0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).collect();
    let t0 = Instant::now();
    let Rates {
        top, all, cpu_us, ..
    } = rates(nodes, window);
    let secs = t0.elapsed().as_secs_f64();
    let k1: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).collect();
    let cpu = k0
        .iter()
        .zip(&k1)
        .map(|(a, b)| b.saturating_sub(*a) as f64 / clock_ticks() / secs * 100.0)
        .sum::<f64>()
        / sidecars as f64;
    let rss = pids
        .iter()
        .map(|p| rss_kib(*p).unwrap_or(f64::NAN) / 1024.0)
        .sum::<f64>()
        / sidecars as f64;
    let loads = assignment(&fleet, shards).unwrap_or_default();
    Fleet {
        balanced_after,
        loads,
        top,
        all,
        cpu,
        rss,
        redis_cpu: cpu_us / 1e4,
    }
}

/// The binary's defaults, as [`sidecar`] runs it: ttl 10 s, `renewEvery` ttl/3.
const RENEW_EVERY_SECS: f64 = 10.0 / 3.0;

/// What the SPEC leaves no way around for a leader of `n` shards, against twice one lease's
/// commands (`one`): each led shard is a lease with its own key on every node, extended on
/// every renewal (one `PEXPIRE` at least), its fencing epoch re-asserted (a read, `GET`) after
/// the holder's check (`GET`).
fn floors(rep: &mut Report, one: f64, n: usize) {
    let extend = n as f64 / RENEW_EVERY_SECS;
    let renew = 3.0 * extend;
    let twice = format!(
        "2 × one lease's commands is {:.1}/s; ttl 10 s, renewEvery ttl/3",
        2.0 * one
    );
    for (what, v, note) in [
        (
            "key extensions alone (one PEXPIRE per led shard per renewal)",
            extend,
            twice.as_str(),
        ),
        (
            "renewals as the SPEC has them (the key checked and extended, the epoch re-asserted)",
            renew,
            "",
        ),
    ] {
        rep.push(
            SECTION,
            Spec::info(
                &format!("{n} shards, leader: floor of commands/s per node, {what}"),
                v,
                "cmd/s",
                note,
            ),
        );
        rep.push(
            SECTION,
            Spec::info(
                &format!("{n} shards / 1 lease, leader: floor, {what}"),
                v / one,
                "×",
                "",
            ),
        );
    }
}

/// Part 1b (full mode): the Redis CPU a sidecar adds, 8 at once, one lease against `n` shards.
fn cpu_per_sidecar(rep: &mut Report, nodes: &[&Redis], window: Duration, n: usize) {
    const K: usize = 8;
    eprintln!(
        "  Redis CPU per sidecar: {K} leaders and {K} followers of 1 lease, then of {n} shards"
    );
    let cpu = |r: [Rates; 2]| r.map(|r| r.cpu_us);
    let one = cpu(leader_then_follower(
        nodes,
        window,
        ("cpu-one", 1, K),
        &[],
        &[],
    ));
    let shards = n.to_string();
    let (lead, unhealthy) = sharded_flags(&shards);
    let many = cpu(leader_then_follower(
        nodes,
        window,
        ("cpu-sharded", n, K),
        &lead,
        &unhealthy,
    ));
    let note = format!(
        "INFO cpu deltas, node mean, {K} sidecars at once (each pair on its own lease) divided by {K}"
    );
    for (i, role) in ["leader", "follower"].into_iter().enumerate() {
        for (what, v) in [("1 lease", one[i]), (&format!("{n} shards")[..], many[i])] {
            rep.push(
                SECTION,
                Spec::info(
                    &format!("{what}, {role}: Redis CPU per sidecar per node"),
                    v,
                    "µs/s",
                    &note,
                ),
            );
        }
        rep.push(
            SECTION,
            Spec::at_most(
                &format!("{n} shards / 1 lease, {role}: Redis CPU"),
                many[i] / one[i],
                "×",
                2.0,
                "issue 37's 2×, in the node's CPU (the reading and writing of the calls included)",
            ),
        );
    }
}

pub fn run(o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    // An idle lease costs a node well under one command a second: a quick window shorter than
    // 10 s sees a handful, or none.
    let window = Duration::from_secs(o.n(20, 10) as u64);
    // The smoke takes the same code through with fewer leases and smaller fleets.
    let n: usize = o.pick(32, 32, 4);
    eprintln!(
        "== shards: one lease against {n} in one sidecar, then sharded fleets, at the defaults (ttl 10s) on 3 dedicated nodes, {}s windows",
        window.as_secs()
    );
    let [[one_l, one_f], many, sharded] = one_against_many(nodes, window, n);
    let push = |rep: &mut Report, what: &str, v: f64, note: &str| {
        rep.push(SECTION, Spec::info(what, v, "cmd/s", note));
    };
    let note = "INFO commandstats deltas, node mean; top-level = what the sidecar sends";
    for (what, r, note) in [
        ("1 lease, leader", one_l, note),
        ("1 lease, follower", one_f, ""),
    ] {
        push(
            rep,
            &format!("{what}: top-level commands/s per node"),
            r.top,
            note,
        );
        push(rep, &format!("{what}: all commands/s per node"), r.all, "");
    }
    // No command at all in a short (quick) window: no ratio, rather than a division by zero.
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let us = "µs/s";
    let script_note =
        "INFO commandstats usec of EVALSHA/EVAL, node mean; the calls' I/O not included";
    for (what, r) in [("1 lease, leader", one_l), ("1 lease, follower", one_f)] {
        rep.push(
            SECTION,
            Spec::info(
                &format!("{what}: Redis time in scripts per node"),
                r.exec_us,
                us,
                script_note,
            ),
        );
    }
    for (kind, [l, f], notes) in [
        (
            "leases",
            many,
            ["one sidecar leading all", "one sidecar following all"],
        ),
        (
            "shards",
            sharded,
            [
                "one sidecar leading all (alone, so no balancing)",
                "one sidecar following all: its app unhealthy, so not a ready candidate and given no shard; a ready one writes the same record, plus one HGET per write",
            ],
        ),
    ] {
        let what = |role: &str| format!("{n} {kind}, {role}");
        for (role, r, one, note) in [
            ("leader", l, one_l, notes[0]),
            ("follower", f, one_f, notes[1]),
        ] {
            push(
                rep,
                &format!("{}: top-level commands/s per node", what(role)),
                r.top,
                note,
            );
            push(
                rep,
                &format!("{}: all commands/s per node", what(role)),
                r.all,
                "",
            );
            rep.push(
                SECTION,
                Spec::at_most(
                    &format!("{n} {kind} / 1 lease, {role}: top-level commands"),
                    ratio(r.top, one.top),
                    "×",
                    2.0,
                    "issue 37: at most 2× one lease, leading or following",
                ),
            );
            rep.push(
                SECTION,
                Spec::info(
                    &format!("{n} {kind} / 1 lease, {role}: all commands"),
                    ratio(r.all, one.all),
                    "×",
                    "each lease's key is still extended every period, inside the one call",
                ),
            );
            rep.push(
                SECTION,
                Spec::info(
                    &format!("{}: Redis time in scripts per node", what(role)),
                    r.exec_us,
                    us,
                    "",
                ),
            );
            rep.push(
                SECTION,
                Spec::info(
                    &format!("{n} {kind} / 1 lease, {role}: Redis time in scripts"),
                    ratio(r.exec_us, one.exec_us),
                    "×",
                    "",
                ),
            );
        }
    }
    floors(rep, one_l.all, n);
    if !o.quick {
        cpu_per_sidecar(rep, nodes, window, n);
    }
    let fleets = o.pick(
        [(3, 64), (30, 256)],
        [(3, 64), (10, 256)],
        [(2, 8), (3, 16)],
    );
    for (sidecars, shards) in fleets {
        eprintln!("  {sidecars} sidecars × {shards} shards");
        let f = fleet(nodes, window, sidecars, shards);
        let name = format!("{sidecars} × {shards}");
        let balanced = f.balanced_after.map_or(f64::NAN, |d| d.as_secs_f64());
        let loads = format!("shards per sidecar at the end: {:?}", f.loads);
        rep.push(
            SECTION,
            Spec::info(
                &format!("{name}: balanced after the last start"),
                balanced,
                "s",
                &loads,
            ),
        );
        let per = |v: f64, by: usize| v / by as f64;
        push(
            rep,
            &format!("{name}: top-level commands/s per node"),
            f.top,
            "",
        );
        push(rep, &format!("{name}: all commands/s per node"), f.all, "");
        push(
            rep,
            &format!("{name}: top-level commands/s per node, per sidecar"),
            per(f.top, sidecars),
            "",
        );
        push(
            rep,
            &format!("{name}: all commands/s per node, per sidecar"),
            per(f.all, sidecars),
            "",
        );
        push(
            rep,
            &format!("{name}: all commands/s per node, per shard"),
            per(f.all, shards),
            "",
        );
        rep.push(
            SECTION,
            Spec::info(&format!("{name}: sidecar CPU (mean)"), f.cpu, "% core", ""),
        );
        rep.push(
            SECTION,
            Spec::info(&format!("{name}: sidecar RSS (mean)"), f.rss, "MiB", ""),
        );
        rep.push(
            SECTION,
            Spec::info(
                &format!("{name}: Redis CPU per node"),
                f.redis_cpu,
                "% core",
                "INFO cpu, node mean, the idle node included",
            ),
        );
    }
}

//! A fleet at rest (issue 25): many leases on three shared nodes, every sidecar a real process
//! with the binary's defaults (ttl 10s, retryEvery 1s). What an idle fleet costs each Redis node
//! (commands/s from `INFO commandstats`, CPU from `INFO cpu`) and the sidecars (`/proc`), and
//! that every lease has exactly one leader throughout.
//!
//! Phase 1: `LEASES` leases × 3 sidecars (90 processes). Phase 2: one more follower per lease;
//! the difference is what an idle follower costs each node. Phase 3: a lease at ttl 1s, the
//! idle follower's own CPU.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::{Redis, Sidecar, View};
use crate::harness::{clock_ticks, command_stats, cpu_ticks, sidecar, wait_for, wait_quarantine};
use crate::report::{Report, Spec};

/// Leases in the fleet.
const LEASES: usize = 30;
/// Sidecars per lease in phase 1.
const PER_LEASE: usize = 3;
/// The commands broken out per sidecar (the rest are summed in the totals).
const SHOWN: &[&str] = &[
    "time", "get", "evalsha", "pttl", "info", "hset", "hgetall", "hget", "pexpire", "set", "del",
];

/// One node's counters at an instant.
struct Sample {
    /// `INFO commandstats` calls per command (inside scripts included).
    calls: BTreeMap<String, u64>,
    /// used_cpu_sys + used_cpu_user, seconds.
    cpu: f64,
}

fn sample(node: &Redis) -> Sample {
    let text = node.cli(&["INFO", "cpu"]).unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .and_then(|v| v.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Sample {
        cpu: field("used_cpu_sys") + field("used_cpu_user"),
        calls: command_stats(node),
    }
}

/// What the nodes and the sidecars did over a window.
struct Window {
    /// Seconds.
    secs: f64,
    /// Per node: commands/s by command (our own two INFO calls per sample taken off).
    per_node: Vec<BTreeMap<String, f64>>,
    /// Per node: Redis CPU, % of one core.
    redis_cpu: Vec<f64>,
    /// Per sidecar: CPU, % of one core, in the order given.
    sidecar_cpu: Vec<f64>,
}

impl Window {
    /// All commands/s on node `i`.
    fn total(&self, i: usize) -> f64 {
        self.per_node[i].values().sum()
    }

    /// Commands/s of one name, averaged over the nodes.
    fn mean_of(&self, name: &str) -> f64 {
        let n = self.per_node.len() as f64;
        self.per_node
            .iter()
            .map(|m| m.get(name).copied().unwrap_or(0.0))
            .sum::<f64>()
            / n
    }

    /// All commands/s averaged over the nodes.
    fn mean_total(&self) -> f64 {
        (0..self.per_node.len()).map(|i| self.total(i)).sum::<f64>() / self.per_node.len() as f64
    }
}

fn measure(nodes: &[&Redis], pids: &[u32], window: Duration) -> Window {
    let s0: Vec<Sample> = nodes.iter().map(|n| sample(n)).collect();
    let k0: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).collect();
    let t0 = Instant::now();
    std::thread::sleep(window);
    let k1: Vec<u64> = pids.iter().map(|p| cpu_ticks(*p).unwrap_or(0)).collect();
    let secs = t0.elapsed().as_secs_f64();
    let s1: Vec<Sample> = nodes.iter().map(|n| sample(n)).collect();
    let per_node = s0
        .iter()
        .zip(&s1)
        .map(|(a, b)| {
            b.calls
                .iter()
                .map(|(name, calls)| {
                    let mut d = calls.saturating_sub(a.calls.get(name).copied().unwrap_or(0));
                    // The sample's own INFO cpu and INFO commandstats at the start.
                    if name == "info" {
                        d = d.saturating_sub(2);
                    }
                    (name.clone(), d as f64 / secs)
                })
                .collect()
        })
        .collect();
    let redis_cpu = s0
        .iter()
        .zip(&s1)
        .map(|(a, b)| (b.cpu - a.cpu) / secs * 100.0)
        .collect();
    let tick = clock_ticks();
    let sidecar_cpu = k0
        .iter()
        .zip(&k1)
        .map(|(a, b)| b.saturating_sub(*a) as f64 / tick / secs * 100.0)
        .collect();
    Window {
        secs,
        per_node,
        redis_cpu,
        sidecar_cpu,
    }
}

/// Per lease: its sidecars' views. Exactly one says leader and every other names it.
fn one_leader_each(leases: &[Vec<&Sidecar>]) -> (usize, Vec<String>) {
    let mut ok = 0;
    let mut bad = Vec::new();
    for (i, group) in leases.iter().enumerate() {
        let views: Vec<Option<View>> = group.iter().map(|s| s.try_leader()).collect();
        let leaders: Vec<&str> = views
            .iter()
            .flatten()
            .filter(|v| v.is_leader)
            .map(|v| v.identity.as_str())
            .collect();
        let agree = leaders.len() == 1
            && views
                .iter()
                .all(|v| v.as_ref().and_then(|v| v.leader.as_deref()) == Some(leaders[0]));
        if agree {
            ok += 1;
        } else {
            let seen: Vec<String> = views
                .iter()
                .map(|v| match v {
                    Some(v) => format!("{}:{}->{:?}", v.identity, v.is_leader, v.leader),
                    None => "no answer".into(),
                })
                .collect();
            bad.push(format!("lease {i}: {}", seen.join(", ")));
        }
    }
    (ok, bad)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.iter().sum::<f64>() / v.len() as f64
}

pub fn run(o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    let window = Duration::from_secs(o.n(30, 5) as u64);
    let sidecars_n = LEASES * PER_LEASE;
    eprintln!(
        "== fleet: {sidecars_n} sidecars ({LEASES} leases × {PER_LEASE}) at the defaults (ttl 10s, retryEvery 1s) on 3 dedicated nodes, {}s windows",
        window.as_secs()
    );
    wait_quarantine(nodes, Duration::from_secs(10));
    let started = Instant::now();
    let mut leases: Vec<Vec<Sidecar>> = (0..LEASES)
        .map(|l| {
            (0..PER_LEASE)
                .map(|k| sidecar(&format!("f{l}-{k}"), &format!("fleet-{l}"), nodes, &[]))
                .collect()
        })
        .collect();
    let all_led = |leases: &[Vec<Sidecar>]| {
        let groups: Vec<Vec<&Sidecar>> = leases.iter().map(|g| g.iter().collect()).collect();
        one_leader_each(&groups)
    };
    let led = wait_for(Duration::from_secs(60), || {
        std::thread::sleep(Duration::from_millis(200));
        (all_led(&leases).0 == LEASES).then_some(())
    });
    if led.is_none() {
        let (ok, bad) = all_led(&leases);
        panic!(
            "fleet: only {ok} of {LEASES} leases have exactly one leader after 60s:\n{}",
            bad.join("\n")
        );
    }
    eprintln!(
        "  every lease led {:.1}s after the first start; settling 3s",
        started.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(3));
    let pids: Vec<u32> = leases.iter().flatten().map(Sidecar::pid).collect();
    let leaders: Vec<bool> = leases
        .iter()
        .flatten()
        .map(|s| s.try_leader().is_some_and(|v| v.is_leader))
        .collect();
    let w1 = measure(nodes, &pids, window);
    let (ok1, bad1) = all_led(&leases);
    for b in &bad1 {
        eprintln!("  NOT ONE LEADER: {b}");
    }

    // Phase 2: one more follower per lease; what it adds is an idle follower's cost.
    for (l, group) in leases.iter_mut().enumerate() {
        group.push(sidecar(
            &format!("f{l}-{PER_LEASE}"),
            &format!("fleet-{l}"),
            nodes,
            &[],
        ));
    }
    // The newcomers see their leader once their first attempt is denied.
    wait_for(Duration::from_secs(30), || {
        std::thread::sleep(Duration::from_millis(200));
        (all_led(&leases).0 == LEASES).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    let newcomers: Vec<u32> = leases.iter().map(|g| g[PER_LEASE].pid()).collect();
    let w2 = measure(nodes, &newcomers, window);
    let (ok2, bad2) = all_led(&leases);
    for b in &bad2 {
        eprintln!("  NOT ONE LEADER: {b}");
    }
    drop(leases);

    // Phase 3: an idle follower at ttl 1s.
    let (cpu_ttl1, cmds_ttl1) = idle_follower_ttl1(nodes, window);

    let n = sidecars_n as f64;
    let leader_cpu: Vec<f64> = w1
        .sidecar_cpu
        .iter()
        .zip(&leaders)
        .filter(|(_, l)| **l)
        .map(|(c, _)| *c)
        .collect();
    let follower_cpu: Vec<f64> = w1
        .sidecar_cpu
        .iter()
        .zip(&leaders)
        .filter(|(_, l)| !**l)
        .map(|(c, _)| *c)
        .collect();
    let follower_cmds = (w2.mean_total() - w1.mean_total()) / LEASES as f64;
    let over = format!(
        "{sidecars_n} sidecars, {LEASES} leases; INFO commandstats deltas over {:.0}s, scripts' inner commands included",
        w1.secs
    );
    let sec = "fleet";
    for (i, node) in nodes.iter().enumerate() {
        let note = if i == 0 { over.as_str() } else { "" };
        rep.push(
            sec,
            Spec::info(
                &format!("node {}: commands/s", i + 1),
                w1.total(i),
                "cmd/s",
                note,
            ),
        );
        let note = format!("INFO cpu used_cpu_sys+user deltas, port {}", node.port);
        rep.push(
            sec,
            Spec::info(
                &format!("node {}: Redis CPU", i + 1),
                w1.redis_cpu[i],
                "% core",
                &note,
            ),
        );
    }
    let all = "every sidecar (a third of them leaders): node mean / sidecars";
    rep.push(
        sec,
        Spec::info(
            "per sidecar: commands/s per node",
            w1.mean_total() / n,
            "cmd/s",
            all,
        ),
    );
    for name in SHOWN {
        let what = format!("per sidecar: {} /s per node", name.to_uppercase());
        rep.push(sec, Spec::info(&what, w1.mean_of(name) / n, "cmd/s", ""));
    }
    let note = format!("phase 2 ({LEASES} more followers) minus phase 1, node mean / {LEASES}");
    rep.push(
        sec,
        Spec::at_most(
            "idle follower: commands/s per node",
            follower_cmds,
            "cmd/s",
            3.0,
            &note,
        ),
    );
    for name in SHOWN {
        let what = format!("idle follower: {} /s per node", name.to_uppercase());
        let d = (w2.mean_of(name) - w1.mean_of(name)) / LEASES as f64;
        rep.push(sec, Spec::info(&what, d, "cmd/s", ""));
    }
    let sum: f64 = w1.sidecar_cpu.iter().sum();
    rep.push(
        sec,
        Spec::info(
            "sidecar CPU, sum of all",
            sum,
            "% core",
            "utime+stime from /proc/PID/stat",
        ),
    );
    rep.push(
        sec,
        Spec::info("leader CPU (mean)", mean(&leader_cpu), "% core", ""),
    );
    rep.push(
        sec,
        Spec::info(
            "idle follower CPU (mean), ttl 10s",
            mean(&follower_cpu),
            "% core",
            "",
        ),
    );
    let note = "one follower of a ttl 1s lease (retryEvery 1s), same nodes";
    rep.push(
        sec,
        Spec::at_most("idle follower CPU, ttl 1s", cpu_ttl1, "% core", 0.5, note),
    );
    let note = "(leader + follower) - leader, node mean";
    rep.push(
        sec,
        Spec::info(
            "idle follower at ttl 1s: commands/s per node",
            cmds_ttl1,
            "cmd/s",
            note,
        ),
    );
    let leases_n = LEASES as f64;
    let note = format!("of {LEASES}, at the end of the window; every follower names it");
    rep.push(
        sec,
        Spec::at_least(
            "leases with exactly one leader (phase 1)",
            ok1 as f64,
            "leases",
            leases_n,
            &note,
        ),
    );
    rep.push(
        sec,
        Spec::at_least(
            "leases with exactly one leader (phase 2)",
            ok2 as f64,
            "leases",
            leases_n,
            &note,
        ),
    );
}

/// An idle follower of a ttl 1s lease: its CPU (% core) and the commands/s per node it adds
/// (leader and follower together, minus the leader alone).
fn idle_follower_ttl1(nodes: &[&Redis], window: Duration) -> (f64, f64) {
    eprintln!("  idle follower at ttl 1s");
    let lease = "fleet-ttl1";
    let a = sidecar("t1-a", lease, nodes, &["--ttl", "1s"]);
    wait_for(Duration::from_secs(15), || {
        a.try_leader().filter(|v| v.is_leader)
    })
    .expect("the ttl 1s sidecar leads");
    std::thread::sleep(Duration::from_millis(500));
    let alone = measure(nodes, &[a.pid()], window);
    let b = sidecar("t1-b", lease, nodes, &["--ttl", "1s"]);
    wait_for(Duration::from_secs(15), || {
        b.try_leader()
            .filter(|v| v.leader.as_deref() == Some("t1-a") && v.eligible)
    })
    .expect("the ttl 1s follower sees the leader");
    std::thread::sleep(Duration::from_secs(1));
    let both = measure(nodes, &[b.pid()], window);
    (both.sidecar_cpu[0], both.mean_total() - alone.mean_total())
}

//! Footprint and Redis load, on dedicated nodes with production defaults; binary size.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::{Redis, binary};
use crate::harness::{
    clock_ticks, command_counts, cpu_ticks, rss_kib, sidecar, wait_for, wait_quarantine,
};
use crate::report::{Report, Spec};

/// What a sidecar costs over a window.
struct Cost {
    /// CPU, % of one core.
    cpu: f64,
    /// RSS at the end, MiB.
    rss: f64,
    /// Redis client commands/s, summed over the nodes.
    commands: f64,
    /// All Redis commands/s including those inside scripts, summed over the nodes.
    ops: f64,
}

/// Over `window`: the cost of process `pid` and the command rate on `nodes`.
fn observe(pid: u32, nodes: &[&Redis], window: Duration) -> Cost {
    let c0: Vec<(u64, u64)> = nodes.iter().map(|n| command_counts(n)).collect();
    let t0 = Instant::now();
    let k0 = cpu_ticks(pid).unwrap_or(0);
    std::thread::sleep(window);
    let k1 = cpu_ticks(pid).unwrap_or(0);
    let el = t0.elapsed().as_secs_f64();
    let c1: Vec<(u64, u64)> = nodes.iter().map(|n| command_counts(n)).collect();
    // Our own INFO at the start is counted in the delta: subtract it.
    let delta = |f: fn(&(u64, u64)) -> u64| -> f64 {
        c0.iter()
            .zip(&c1)
            .map(|(a, b)| f(b).saturating_sub(f(a)).saturating_sub(1))
            .sum::<u64>() as f64
            / el
    };
    Cost {
        cpu: (k1 - k0) as f64 / clock_ticks() / el * 100.0,
        rss: rss_kib(pid).unwrap_or(f64::NAN) / 1024.0,
        commands: delta(|c| c.0),
        ops: delta(|c| c.1),
    }
}

pub fn run(o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    let window = Duration::from_secs(o.n(30, 3) as u64);
    eprintln!(
        "== footprint and Redis load: defaults (ttl 10s, retryEvery 1s), 3 dedicated nodes, {}s windows",
        window.as_secs()
    );
    wait_quarantine(nodes, Duration::from_secs(10));
    let lease = "bench-idle";
    let a = sidecar("idle-a", lease, nodes, &[]);
    wait_for(Duration::from_secs(15), || {
        a.try_leader().filter(|v| v.is_leader)
    })
    .expect("the idle sidecar leads");
    std::thread::sleep(Duration::from_millis(500));
    let leader = observe(a.pid(), nodes, window);
    let b = sidecar("idle-b", lease, nodes, &[]);
    wait_for(Duration::from_secs(15), || {
        b.try_leader()
            .filter(|v| v.leader.as_deref() == Some("idle-a"))
    })
    .expect("the follower sees the leader");
    std::thread::sleep(Duration::from_secs(2));
    // Its RSS and CPU are its own; its Redis load is what both together cause minus the leader's.
    let follower = observe(b.pid(), nodes, window);
    let (fcmd, fops) = (
        follower.commands - leader.commands,
        follower.ops - leader.ops,
    );
    let cpu_note = format!("utime+stime over {}s", window.as_secs());
    #[rustfmt::skip]
    rep.add("footprint", vec![
        Spec::at_most("idle follower RSS", follower.rss, "MiB", 16.0, "VmRSS at the end of the window"),
        Spec::at_most("leader RSS", leader.rss, "MiB", 16.0, ""),
        Spec::at_most("idle follower CPU", follower.cpu, "% core", 0.5, &cpu_note),
        Spec::at_most("leader CPU", leader.cpu, "% core", 0.5, ""),
    ]);
    #[rustfmt::skip]
    rep.add("redis-load", vec![
        Spec::info("leader: commands sent/s (sum over 3 nodes)", leader.commands, "cmd/s", "INFO commandstats deltas of top-level commands: renew and candidates scripts every ttl/3 + INFO every third of ttl + margin, per node"),
        Spec::info("leader: Redis ops/s incl. inside scripts", leader.ops, "ops/s", "every command Redis ran, also GET/PEXPIRE/SET inside the Lua scripts"),
        Spec::info("follower: commands sent/s (sum over 3 nodes)", fcmd, "cmd/s", "(leader+follower) - leader: one watch script per watch period (~2.9 s at the defaults) + INFO every ~3.4 s, per node"),
        Spec::info("follower: Redis ops/s incl. inside scripts", fops, "ops/s", ""),
    ]);
}

/// The release binary's size as built and stripped.
pub fn binary_size(rep: &mut Report) {
    eprintln!("== binary size");
    let path = Path::new(binary());
    let size = std::fs::metadata(path).map_or(f64::NAN, |m| m.len() as f64 / 1e6);
    let tmp = std::env::temp_dir().join(format!(
        "redlock-elector-bench-strip-{}",
        std::process::id()
    ));
    let stripped = std::fs::copy(path, &tmp)
        .ok()
        .and_then(|_| Command::new("strip").arg(&tmp).status().ok())
        .filter(|s| s.success())
        .and_then(|_| std::fs::metadata(&tmp).ok())
        .map_or(f64::NAN, |m| m.len() as f64 / 1e6);
    let _ = std::fs::remove_file(&tmp);
    rep.add(
        "binary",
        vec![
            Spec::info("release binary as built", size, "MB", binary()),
            Spec::at_most(
                "stripped release binary",
                stripped,
                "MB",
                20.0,
                "strip(1) of the release binary",
            ),
        ],
    );
}

//! The bench's side of the integration tests' harness (real redis-server, the real binary):
//! sidecars with the binary's defaults, library locks on the same nodes, watchers of `/leader`
//! and of the release notices, and what `/proc` and `INFO` say about cost.

use std::process::Command;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use redlock_elector::metrics::Metrics;
use redlock_elector::redlock::Redlock;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::common::{self, Opts as SidecarOpts, Redis, Sidecar, View, library_config};
use crate::resp::{self, Conn};

/// Start the real sidecar with the binary's own defaults (ttl 10s, retryEvery 1s, timeout 50ms);
/// `extra` flags come last and win.
pub fn sidecar(identity: &str, lease: &str, nodes: &[&Redis], extra: &[&str]) -> Sidecar {
    let opts = SidecarOpts {
        lease: lease.to_string(),
        ttl: "10s",
        retry_every: "1s",
        timeout: "50ms",
        extra: extra.iter().map(|s| s.to_string()).collect(),
        env: vec![],
    };
    Sidecar::start(identity, nodes, &opts)
}

/// Poll `f` every 5 ms until it yields, or `None` after `timeout`.
pub fn wait_for<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    common::wait_for(timeout, Duration::from_millis(5), f)
}

/// The library's lock on `urls` (identity `bench`, no Kubernetes), its nodes maintained on `rt`
/// until `stop`; `extra` flags are added to the configuration.
pub fn library_lock(
    rt: &tokio::runtime::Runtime,
    stop: &CancellationToken,
    lease: &str,
    urls: &[String],
    extra: &[&str],
) -> Arc<Redlock> {
    #[rustfmt::skip]
    let mut args = vec!["--lease", lease, "--ttl", "1s", "--identity", "bench", "--kubernetes", "false"];
    for u in urls {
        args.extend(["--redis", u.as_str()]);
    }
    args.extend(extra);
    let cfg = library_config(&args);
    let metrics =
        Metrics::register(&prometheus::Registry::new(), &cfg.lease.name).expect("metrics");
    let redlock = Arc::new(Redlock::new(&cfg, metrics).expect("redlock"));
    for node in redlock.nodes() {
        rt.spawn(node.clone().maintain(stop.clone()));
    }
    redlock
}

/// Wait until every node of every lock is connected and counts towards a quorum.
pub fn wait_connected(locks: &[&Redlock], what: &str) {
    let ready = wait_for(Duration::from_secs(10), || {
        locks
            .iter()
            .flat_map(|r| r.nodes())
            .all(|n| n.is_up() && n.counts(tokio::time::Instant::now()))
            .then_some(())
    });
    assert!(ready.is_some(), "{what} did not connect");
}

/// Sleep until every node is out of the start-up quarantine for `ttl` (uptime ≥ ttl + 1 s, and
/// uptime is truncated to whole seconds: a little more to be sure).
pub fn wait_quarantine(nodes: &[&Redis], ttl: Duration) {
    let need = ttl + Duration::from_millis(1100);
    if let Some(latest) = nodes.iter().map(|n| n.started).max() {
        let until = latest + need;
        let now = Instant::now();
        if until > now {
            eprintln!(
                "  (waiting {:.1}s for the nodes' start-up quarantine, ttl + 1s)",
                (until - now).as_secs_f64()
            );
            std::thread::sleep(until - now);
        }
    }
}

/// An event seen by a watcher: when it arrived and what it said.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the event's line arrived.
    pub at: Instant,
    /// Which watcher saw it (fan-out counts distinct watchers).
    pub watcher: usize,
    /// The event.
    pub view: View,
}

/// Follow `GET /leader/watch` and send every event with its arrival time, until the stream ends.
pub async fn sse_watch(port: u16, watcher: usize, tx: tokio::sync::mpsc::UnboundedSender<Seen>) {
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return;
    };
    let _ = s.set_nodelay(true);
    let req = "GET /leader/watch HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n";
    if s.write_all(req.as_bytes()).await.is_err() {
        return;
    }
    let mut lines = tokio::io::BufReader::new(s).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let at = Instant::now();
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        if let Ok(view) = serde_json::from_str::<View>(data.trim())
            && tx.send(Seen { at, watcher, view }).is_err()
        {
            return;
        }
    }
}

/// Subscribe to `channel` on a node; send the arrival time of every message.
/// The release notices of `lease` from every node, each copy's arrival time on one channel.
pub fn lease_notices(nodes: &[&Redis], lease: &str) -> mpsc::Receiver<Instant> {
    let (tx, rx) = mpsc::channel();
    for n in nodes {
        subscribe_notices(
            n.port,
            &format!("redlock-elector:{lease}:released"),
            tx.clone(),
        );
    }
    rx
}

pub fn subscribe_notices(port: u16, channel: &str, tx: mpsc::Sender<Instant>) {
    let subscribe = resp::command(&["SUBSCRIBE", channel]);
    std::thread::spawn(move || {
        let Ok(mut c) = Conn::connect(&format!("127.0.0.1:{port}")) else {
            return;
        };
        if c.send(&subscribe).is_err() {
            return;
        }
        // Every push is `*3 $7 message $len channel $len payload`; the subscription's
        // confirmation is `*3 $9 subscribe ...`.
        while let Some(push) = c.reply() {
            if push.starts_with(b"*3\r\n$7\r\nmessage\r\n") && tx.send(Instant::now()).is_err() {
                return;
            }
        }
    });
}

/// `INFO commandstats`: calls per command (lower case), those run inside scripts included.
pub fn command_stats(node: &Redis) -> std::collections::BTreeMap<String, u64> {
    let text = node.cli(&["INFO", "commandstats"]).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .trim()
                .parse()
                .ok()?;
            Some((name.to_string(), calls))
        })
        .collect()
}

/// `INFO cpu`: the CPU time the server has used, system and user, in seconds (getrusage, so
/// finer than the clock ticks of `/proc`).
pub fn redis_cpu_secs(node: &Redis) -> f64 {
    let text = node.cli(&["INFO", "cpu"]).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            matches!(k, "used_cpu_sys" | "used_cpu_user").then(|| v.trim().parse::<f64>().ok())?
        })
        .sum()
}

/// From `INFO commandstats`: the microseconds the node spent executing scripts (`EVALSHA`,
/// `EVAL`; the commands inside them included), what a sidecar's calls cost it beside their
/// reading and writing.
pub fn script_usec(node: &Redis) -> u64 {
    let text = node.cli(&["INFO", "commandstats"]).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            matches!(name, "evalsha" | "eval").then_some(())?;
            rest.split(',')
                .find_map(|f| f.strip_prefix("usec="))?
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// From `INFO commandstats`: (commands clients sent, all commands including those run inside
/// scripts). Client commands are the ones a sidecar sends at top level.
pub fn command_counts(node: &Redis) -> (u64, u64) {
    #[rustfmt::skip]
    const TOP_LEVEL: &[&str] = &[
        "evalsha", "eval", "info", "script", "subscribe", "unsubscribe", "ping", "client",
        "hello", "select", "auth",
    ];
    let stats = command_stats(node);
    let top = stats
        .iter()
        .filter(|(name, _)| TOP_LEVEL.contains(&name.as_str()))
        .map(|(_, c)| c)
        .sum();
    (top, stats.values().sum())
}

/// Resident memory of process `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// utime + stime in clock ticks.
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after the closing parenthesis are fixed.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Clock ticks per second, the unit of [`cpu_ticks`].
pub fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

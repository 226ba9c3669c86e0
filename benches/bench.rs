//! The benchmark suite: what users feel (handover, failover, `/leader` latency, fan-out) and what
//! the sidecar costs (memory, CPU, binary size, Redis commands), with the `rslock` crate side by
//! side for the raw lock round trip. Real `redis-server` processes on loopback ports and the real
//! release binary; every figure is printed next to its target as met / not met.
//!
//!   cargo bench --bench bench -- [--quick] [--json] [--only SECTION,...]
//!   ./scripts/bench.sh [--quick] [--json]
//!
//! Sections: `acquire`, `handover`, `failover`, `load`, `fanout`, `footprint`, `binary`.
//! `--quick` runs few iterations (CI); figures are printed, nothing ever fails on timing. The
//! process exits non-zero only when the benchmark itself breaks (a sidecar that never leads, a
//! missing `redis-server`). Run by `cargo test --all-targets` (a debug build, no arguments) it
//! does nothing. See the README (Performance) and docs/performance.md.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_elector::config;
use redlock_elector::metrics::Metrics;
use redlock_elector::redlock::{Acquire, Notice, Redlock, math, scripts};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

// ---------------------------------------------------------------------------------------------
// Options and results

struct Opts {
    quick: bool,
    json: bool,
    only: Option<Vec<String>>,
}

impl Opts {
    /// `None` when started without `--bench` and without any option of ours: that is
    /// `cargo test --all-targets`, which builds bench targets in the test profile and runs them
    /// with no arguments. A benchmark in a debug build measures nothing; it is skipped.
    fn parse() -> Option<Opts> {
        let mut o = Opts {
            quick: false,
            json: false,
            only: None,
        };
        let mut asked = false;
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            match a.as_str() {
                "--quick" => o.quick = true,
                "--json" => o.json = true,
                "--full" => {}
                "--only" => {
                    o.only = args
                        .next()
                        .map(|s| s.split(',').map(str::to_string).collect())
                }
                // `cargo bench` passes `--bench`.
                "--bench" => {}
                _ => continue,
            }
            asked = true;
        }
        asked.then_some(o)
    }

    fn wants(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|v| v.iter().any(|s| s == section))
    }

    /// Iterations: full or quick.
    fn n(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }
}

/// One printed figure.
#[derive(Serialize, Clone)]
struct Row {
    section: &'static str,
    name: String,
    value: f64,
    unit: &'static str,
    /// The target as text, e.g. "<= 10 ms".
    target: Option<String>,
    met: Option<bool>,
    note: String,
}

/// One row for [`Report::add`]: (name, value, unit, target `(limit, at_least)`, note).
type Spec<'a> = (&'a str, f64, &'static str, Option<(f64, bool)>, &'a str);

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
}

impl Report {
    fn info(
        &mut self,
        section: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
        note: impl Into<String>,
    ) {
        let row = Row {
            section,
            name: name.into(),
            value,
            unit,
            target: None,
            met: None,
            note: note.into(),
        };
        eprintln!("  {:<52} {:>12} {}", row.name, fmt_val(value), unit);
        self.rows.push(row);
    }

    /// A figure with a target `value <= limit` (or `>=` when `at_least`).
    #[allow(clippy::too_many_arguments)]
    fn target(
        &mut self,
        section: &'static str,
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
        limit: f64,
        at_least: bool,
        note: impl Into<String>,
    ) {
        let met = if at_least {
            value >= limit
        } else {
            value <= limit
        };
        let row = Row {
            section,
            name: name.into(),
            value,
            unit,
            target: Some(format!(
                "{} {}",
                if at_least { ">=" } else { "<=" },
                fmt_val(limit)
            )),
            met: Some(met),
            note: note.into(),
        };
        eprintln!(
            "  {:<52} {:>12} {} (target {}: {})",
            row.name,
            fmt_val(value),
            unit,
            row.target.as_deref().unwrap_or(""),
            if met { "met" } else { "NOT MET" }
        );
        self.rows.push(row);
    }

    /// Rows of one section, in order: (name, value, unit, target, note), where a target
    /// `Some((limit, at_least))` makes a [`Report::target`] row and `None` an info row.
    fn add(&mut self, section: &'static str, rows: &[Spec]) {
        for &(name, value, unit, goal, note) in rows {
            match goal {
                None => self.info(section, name, value, unit, note),
                Some((limit, at_least)) => {
                    self.target(section, name, value, unit, limit, at_least, note)
                }
            }
        }
    }

    fn print_table(&self, out: &mut dyn Write) {
        let _ = writeln!(
            out,
            "| section | figure | value | target | status | note |\n|---|---|---:|---|---|---|"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "| {} | {} | {} {} | {} | {} | {} |",
                r.section,
                r.name,
                fmt_val(r.value),
                r.unit,
                r.target
                    .as_deref()
                    .map(|t| format!("{t} {}", r.unit))
                    .unwrap_or_default(),
                match r.met {
                    Some(true) => "met",
                    Some(false) => "NOT MET",
                    None => "",
                },
                r.note
            );
        }
    }
}

fn fmt_val(v: f64) -> String {
    if v.is_nan() {
        "n/a".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// The q-quantile (0..=1) of `v` in the unit of `v`, NaN if empty.
fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Signed milliseconds from `a` to `b`.
fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a { ms(b - a) } else { -ms(a - b) }
}

// ---------------------------------------------------------------------------------------------
// Processes: the integration tests' harness (real redis-server, the real binary)

use testkit::common;

use common::{
    Opts as SidecarOpts, Pki, Redis, Sidecar, View, binary, http, library_config, resp_encode,
};

/// Start the real sidecar with the binary's own defaults (ttl 10s, retryEvery 1s, timeout 50ms);
/// `extra` flags come last and win.
fn sidecar(identity: &str, lease: &str, nodes: &[&Redis], extra: &[&str]) -> Sidecar {
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

fn wait_for<T>(timeout: Duration, f: impl FnMut() -> Option<T>) -> Option<T> {
    common::wait_for(timeout, Duration::from_millis(5), f)
}

/// From `INFO commandstats`: (commands clients sent, all commands including those run inside
/// scripts). Client commands are the ones a sidecar sends at top level.
fn command_counts(node: &Redis) -> (u64, u64) {
    const TOP_LEVEL: &[&str] = &[
        "evalsha",
        "eval",
        "info",
        "script",
        "subscribe",
        "unsubscribe",
        "ping",
        "client",
        "hello",
        "select",
        "auth",
    ];
    let text = node.cli(&["INFO", "commandstats"]).unwrap_or_default();
    let (mut top, mut all) = (0, 0);
    for l in text.lines() {
        let Some((name, rest)) = l.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else {
            continue;
        };
        let calls: u64 = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        all += calls;
        if TOP_LEVEL.contains(&name) {
            top += calls;
        }
    }
    (top, all)
}

/// Sleep until every node is out of the start-up quarantine for `ttl` (uptime ≥ ttl + 1 s, and
/// uptime is truncated to whole seconds: a little more to be sure).
fn wait_quarantine(nodes: &[&Redis], ttl: Duration) {
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
struct Seen {
    at: Instant,
    watcher: usize,
    view: View,
}

/// Follow `GET /leader/watch` and send every event with its arrival time, until the stream ends.
async fn sse_watch(port: u16, watcher: usize, tx: tokio::sync::mpsc::UnboundedSender<Seen>) {
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
fn subscribe_notices(port: u16, channel: &str, tx: mpsc::Sender<Instant>) {
    let channel = channel.to_string();
    std::thread::spawn(move || {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
            return;
        };
        let req = resp_encode(&["SUBSCRIBE", &channel]);
        if s.write_all(req.as_bytes()).is_err() {
            return;
        }
        let mut r = BufReader::new(s);
        let mut line = String::new();
        // Every push is `*3 $7 message $len channel $len payload`; the word "message" marks one.
        loop {
            line.clear();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.trim_end() == "message" && tx.send(Instant::now()).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// 1. acquire + release: ours (library) vs rslock on the same nodes

fn lib_config(lease: &str, urls: &[String], ttl: &str) -> config::Config {
    let mut args = vec![
        "--lease",
        lease,
        "--ttl",
        ttl,
        "--identity",
        "bench",
        "--kubernetes",
        "false",
    ];
    for u in urls {
        args.extend(["--redis", u.as_str()]);
    }
    library_config(&args)
}

/// A TCP proxy to the node on `port` that delays every chunk towards the node by `delay` from
/// its arrival, like a longer network path: pipelined commands overlap, replies are not
/// delayed. Plain threads and blocking sleeps, because a tokio timer rounds up to whole
/// milliseconds. Returns the port to connect to; runs until the process ends.
fn latency_proxy(port: u16, delay: Duration) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("proxy listener");
    let local = listener.local_addr().expect("proxy address").port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)) else {
                continue;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (Ok(mut cr), Ok(mut cw), Ok(mut sr)) =
                (client.try_clone(), client.try_clone(), server.try_clone())
            else {
                continue;
            };
            let mut sw = server;
            let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                while let Ok(n @ 1..) = cr.read(&mut buf) {
                    if tx
                        .send((Instant::now() + delay, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            });
            std::thread::spawn(move || {
                while let Ok((due, bytes)) = rx.recv() {
                    let now = Instant::now();
                    if due > now {
                        std::thread::sleep(due - now);
                    }
                    if sw.write_all(&bytes).is_err() {
                        return;
                    }
                }
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut sr, &mut cw);
            });
        }
    });
    local
}

/// The floor under any client: the same two rounds (SET NX PX, then DEL) over plain blocking
/// sockets with TCP_NODELAY, no runtime, no library, no script: write to every node, then read
/// every reply. Nothing that takes and releases a lock on these nodes can be faster here.
struct Bare {
    socks: Vec<(TcpStream, BufReader<TcpStream>)>,
    set: Vec<u8>,
    del: Vec<u8>,
}

impl Bare {
    fn connect(urls: &[String], key: &str) -> Bare {
        let socks = urls
            .iter()
            .map(|u| {
                let addr = u.trim_start_matches("redis://");
                let s = TcpStream::connect(addr).expect("bare client connect");
                s.set_nodelay(true).expect("TCP_NODELAY");
                let r = BufReader::new(s.try_clone().expect("clone socket"));
                (s, r)
            })
            .collect();
        Bare {
            socks,
            set: resp_encode(&["SET", key, "bare", "NX", "PX", "1000"]).into_bytes(),
            del: resp_encode(&["DEL", key]).into_bytes(),
        }
    }

    /// One round: the command to every node, then one single-line reply from each.
    fn round(&mut self, cmd: &[u8]) {
        for (s, _) in &mut self.socks {
            s.write_all(cmd).expect("bare write");
        }
        let mut line = String::new();
        for (_, r) in &mut self.socks {
            line.clear();
            r.read_line(&mut line).expect("bare read");
            assert!(
                line.starts_with('+') || line.starts_with(':'),
                "bare client: unexpected reply {line:?}"
            );
        }
    }

    fn acquire_release(&mut self) {
        let (set, del) = (std::mem::take(&mut self.set), std::mem::take(&mut self.del));
        self.round(&set);
        self.round(&del);
        (self.set, self.del) = (set, del);
    }
}

/// The library's acquire and release commands for the floor clients that run our scripts, with
/// its arguments: a fresh value and a rising fencing proposal per acquisition, so every grant
/// also writes the epoch. The scripts are on the nodes already: the library's handshake loaded
/// them (the script cache is per server) before any floor client runs.
struct ScriptedCommands {
    key: String,
    epoch_key: String,
    proposed: u64,
}

impl ScriptedCommands {
    fn new(key: &str) -> ScriptedCommands {
        ScriptedCommands {
            key: key.to_string(),
            epoch_key: format!("{key}:epoch"),
            proposed: 0,
        }
    }

    /// The next (acquire, release) pair. A grant replies `*3 :time :1 :epoch`, a release
    /// `*2 :time :1`.
    fn next(&mut self) -> (String, String) {
        let scripts = scripts::scripts();
        let (acquire, release) = (&scripts.acquire, &scripts.release);
        self.proposed += 1;
        let (value, proposed) = (
            format!("bench#{:048x}", self.proposed),
            self.proposed.to_string(),
        );
        let (key, epoch_key) = (self.key.as_str(), self.epoch_key.as_str());
        let next_key = format!("{key}:next");
        (
            resp_encode(&[
                "EVALSHA",
                &acquire.sha,
                "3",
                key,
                epoch_key,
                &next_key,
                &value,
                "1000",
                &proposed,
                "take",
                "bench",
            ]),
            resp_encode(&[
                "EVALSHA",
                &release.sha,
                "2",
                key,
                &next_key,
                &value,
                "",
                "",
                "",
                "0",
            ]),
        )
    }
}

/// The same floor, deciding each round at the quorum-th reply like a Redlock client may:
/// non-blocking sockets, busy-polled (faster to notice a reply than any readiness wait). Replies
/// still owed by slower nodes are collected by the next round's poll, untimed between rounds.
/// `scripted` runs our acquire and release scripts instead of `SET`/`DEL`.
struct BareQuorum {
    socks: Vec<TcpStream>,
    /// Reply lines still owed per node.
    owed: Vec<usize>,
    set: Vec<u8>,
    del: Vec<u8>,
    scripted: Option<ScriptedCommands>,
}

impl BareQuorum {
    fn connect(urls: &[String], key: &str, scripted: bool) -> BareQuorum {
        let bare = Bare::connect(urls, key);
        let socks: Vec<TcpStream> = bare.socks.into_iter().map(|(s, _)| s).collect();
        for s in &socks {
            s.set_nonblocking(true).expect("non-blocking");
        }
        BareQuorum {
            owed: vec![0; socks.len()],
            socks,
            set: bare.set,
            del: bare.del,
            scripted: scripted.then(|| ScriptedCommands::new(key)),
        }
    }

    /// Read whatever arrived, counting reply lines.
    fn poll(&mut self) {
        let mut buf = [0u8; 256];
        for (s, owed) in self.socks.iter_mut().zip(&mut self.owed) {
            match s.read(&mut buf) {
                Ok(0) => panic!("bare client: node closed the connection"),
                Ok(n) => {
                    let lines = buf[..n].iter().filter(|&&b| b == b'\n').count();
                    *owed = owed
                        .checked_sub(lines)
                        .expect("bare client: a reply longer than expected");
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("bare client read: {e}"),
            }
        }
    }

    /// Send `cmd` (whose reply has `lines` lines) everywhere and return once a quorum of nodes
    /// owes nothing.
    fn round(&mut self, cmd: &[u8], lines: usize) {
        let quorum = math::quorum(self.socks.len());
        for (s, owed) in self.socks.iter_mut().zip(&mut self.owed) {
            s.write_all(cmd).expect("bare write");
            *owed += lines;
        }
        while self.owed.iter().filter(|&&o| o == 0).count() < quorum {
            self.poll();
            std::hint::spin_loop();
        }
    }

    fn acquire_release(&mut self) {
        if let Some(commands) = &mut self.scripted {
            // A grant is 4 lines (time, 1, epoch), a release 3 (time, 1).
            let (take, give) = commands.next();
            self.round(take.as_bytes(), 4);
            self.round(give.as_bytes(), 3);
            return;
        }
        let (set, del) = (std::mem::take(&mut self.set), std::mem::take(&mut self.del));
        self.round(&set, 1);
        self.round(&del, 1);
        (self.set, self.del) = (set, del);
    }

    /// Collect every reply still owed (between timed runs).
    fn settle(&mut self) {
        while self.owed.iter().any(|&o| o > 0) {
            self.poll();
        }
    }
}

/// What a hand-written async client reaches with *our* scripts: tokio sockets with readiness
/// waits (no busy-polling), no driver task per connection, no per-command timer, each round
/// decided at the quorum-th reply, and the library's acquire and release scripts with the same
/// arguments (a rising fencing proposal, so every grant also writes the epoch). It answers
/// "would replacing redis-rs's multiplexed connection meet the target?". Replies still owed by
/// slower nodes are collected untimed between runs, as for `BareQuorum`.
struct Direct {
    conns: Vec<DirectConn>,
    commands: ScriptedCommands,
}

struct DirectConn {
    stream: tokio::net::TcpStream,
    buf: Vec<u8>,
    owed: usize,
}

/// Where the RESP2 reply starting at `at` ends, if all of it has arrived.
fn resp_frame_end(b: &[u8], at: usize) -> Option<usize> {
    let nl = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let len = || -> i64 {
        std::str::from_utf8(&b[at + 1..nl])
            .ok()
            .and_then(|n| n.parse().ok())
            .expect("RESP length")
    };
    match b[at] {
        b'$' => match usize::try_from(len()) {
            Ok(n) => Some(nl + 2 + n + 2).filter(|&end| b.len() >= end),
            Err(_) => Some(nl + 2),
        },
        b'*' => (0..len().max(0)).try_fold(nl + 2, |pos, _| resp_frame_end(b, pos)),
        _ => Some(nl + 2),
    }
}

impl DirectConn {
    async fn send(&mut self, cmd: &[u8]) {
        self.stream.write_all(cmd).await.expect("direct write");
        self.owed += 1;
    }

    /// Read until every reply owed on this connection is in; the last is the latest command's.
    /// Cancel-safe: a dropped call leaves the rest owed to the next one.
    async fn reply(&mut self) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut last = Vec::new();
        loop {
            while let Some(end) = resp_frame_end(&self.buf, 0) {
                last = self.buf.drain(..end).collect();
                self.owed -= 1;
            }
            if self.owed == 0 {
                return last;
            }
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .expect("direct read");
            assert!(n > 0, "direct client: node closed the connection");
        }
    }

    async fn call(&mut self, cmd: &[u8]) -> Vec<u8> {
        self.send(cmd).await;
        self.reply().await
    }
}

impl Direct {
    async fn connect(urls: &[String], key: &str) -> Direct {
        let mut conns = Vec::new();
        for u in urls {
            let stream = tokio::net::TcpStream::connect(u.trim_start_matches("redis://"))
                .await
                .expect("direct client connect");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            conns.push(DirectConn {
                stream,
                buf: Vec::new(),
                owed: 0,
            });
        }
        Direct {
            conns,
            commands: ScriptedCommands::new(key),
        }
    }

    /// Send `cmd` to every node; return at the quorum-th reply, each of which must have `:1`
    /// at line `yes_line` (the grant: `*3 :time :1 :epoch` has it at 2, a bare `:1` at 0).
    async fn round(&mut self, cmd: &[u8], yes_line: usize) {
        let quorum = math::quorum(self.conns.len());
        // Every node gets the command before any reply is read: a reply read early must not
        // end the round before a slower node was even sent to.
        for c in &mut self.conns {
            c.send(cmd).await;
        }
        let mut pending: FuturesUnordered<_> = self.conns.iter_mut().map(|c| c.reply()).collect();
        let mut yes = 0;
        while let Some(reply) = pending.next().await {
            assert!(
                reply.split(|&b| b == b'\n').nth(yes_line) == Some(b":1\r"),
                "direct client: unexpected reply {:?}",
                String::from_utf8_lossy(&reply)
            );
            yes += 1;
            if yes == quorum {
                return;
            }
        }
    }

    async fn acquire_release(&mut self) {
        let (take, give) = self.commands.next();
        self.round(take.as_bytes(), 2).await;
        self.round(give.as_bytes(), 2).await;
    }

    /// The cost of carrying the node's `TIME` in every reply: p50 (ms) of an acquire round and
    /// of a renew round with the scripts as they were before ([`NO_TIME`]) and as they are,
    /// interleaved on the same connections: `[acquire before, acquire after, renew before,
    /// renew after]`.
    async fn time_cost(&mut self, key: &str, iters: usize) -> [f64; 4] {
        let old: Vec<String> = NO_TIME
            .iter()
            .map(|src| redis::Script::new(src).get_hash().to_string())
            .collect();
        for src in NO_TIME {
            let load = resp_encode(&["SCRIPT", "LOAD", src]);
            for c in &mut self.conns {
                c.call(load.as_bytes()).await;
            }
        }
        let new = scripts::scripts();
        let epoch_key = format!("{key}:epoch");
        let next_key = format!("{key}:next");
        let mut samples: [Vec<f64>; 4] = Default::default();
        for i in 0..iters {
            for with_time in [false, true] {
                let (acquire, renew, release) = if with_time {
                    (&new.acquire.sha, &new.renew.sha, &new.release.sha)
                } else {
                    (&old[0], &old[1], &old[2])
                };
                let value = format!("bench#{i}");
                // Today's scripts also take the reservation key (named successors) and the
                // identity / successor arguments; the reservation is never set here.
                let take = if with_time {
                    vec![
                        "EVALSHA", acquire, "3", key, &epoch_key, &next_key, &value, "1000", "0",
                        "take", "bench",
                    ]
                } else {
                    vec![
                        "EVALSHA", acquire, "2", key, &epoch_key, &value, "1000", "0",
                    ]
                };
                let keep =
                    resp_encode(&["EVALSHA", renew, "2", key, &epoch_key, &value, "1000", "0"]);
                let give = if with_time {
                    resp_encode(&[
                        "EVALSHA", release, "2", key, &next_key, &value, "", "", "", "0",
                    ])
                } else {
                    resp_encode(&["EVALSHA", release, "1", key, &value, ""])
                };
                // The grant: `*3 :time :1 :epoch` now, `*2 :1 :epoch` before; renew and release:
                // `*2 :time :1` now, `:1` before.
                let (acq_line, other_line) = if with_time { (2, 2) } else { (1, 0) };
                let t0 = Instant::now();
                self.round(resp_encode(&take).as_bytes(), acq_line).await;
                let t1 = Instant::now();
                self.round(keep.as_bytes(), other_line).await;
                let t2 = Instant::now();
                self.round(give.as_bytes(), other_line).await;
                self.settle().await;
                let k = usize::from(with_time);
                samples[k].push(ms(t1 - t0));
                samples[2 + k].push(ms(t2 - t1));
            }
        }
        samples.map(|s| pct(&s, 0.5))
    }

    /// Collect every reply still owed (between timed runs).
    async fn settle(&mut self) {
        let ping = resp_encode(&["PING"]);
        for c in &mut self.conns {
            c.call(ping.as_bytes()).await;
        }
    }
}

/// The acquire, renew and release scripts as they were before every reply carried the node's
/// `TIME` (`d029b92`): the "before" of [`Direct::time_cost`].
const NO_TIME: [&str; 3] = [
    r#"
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if tonumber(ARGV[3]) > e then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return {1, e}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), e}
"#,
    r#"
local v = redis.call('GET', KEYS[1])
local r
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  r = 1
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  r = 2
else
  return 0
end
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > e then
  redis.call('SET', KEYS[2], ARGV[3])
end
return r
"#,
    r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
return 0
"#,
];

/// Per-iteration times (ms) of one acquire scenario.
#[derive(Default)]
struct Samples {
    /// Ours: acquire + release, acquire alone, release alone, one renew round.
    ours: Vec<f64>,
    acq: Vec<f64>,
    rel: Vec<f64>,
    ren: Vec<f64>,
    /// rslock: lock + unlock.
    theirs: Vec<f64>,
    /// Floors: bare blocking, bare busy-polled, tokio + our scripts, busy-polled + our scripts.
    floor: Vec<f64>,
    floor_q: Vec<f64>,
    floor_d: Vec<f64>,
    floor_qs: Vec<f64>,
    /// Acquire and renew round p50 without and with the node's TIME (see `Direct::time_cost`).
    time_cost: [f64; 4],
}

fn bench_acquire(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[Redis]) {
    eprintln!("== acquire + release (library API) vs rslock 0.10");
    let iters = o.n(2000, 200);
    let urls = |n: usize| nodes.iter().take(n).map(Redis::url).collect::<Vec<_>>();
    // Real deployments spread nodes over zones: one node 2 ms further away (one way) shows what
    // deciding at the quorum is worth.
    let mut slow = urls(4);
    slow.push(format!(
        "redis://127.0.0.1:{}",
        latency_proxy(nodes[4].port, Duration::from_millis(2))
    ));
    let scenarios = [
        ("1 node", urls(1)),
        ("3 nodes", urls(3)),
        ("5 nodes", urls(5)),
        ("5 nodes, one +2ms", slow),
    ];
    for (i, (label, urls)) in scenarios.into_iter().enumerate() {
        let cfg = lib_config(&format!("bench-acq-{i}"), &urls, "1s");
        let redlock = Arc::new(
            Redlock::new(
                &cfg,
                Metrics::register(&prometheus::Registry::new(), &cfg.lease.name).expect("metrics"),
            )
            .expect("redlock"),
        );
        let stop = tokio_util::sync::CancellationToken::new();
        for node in redlock.nodes() {
            rt.spawn(node.clone().maintain(stop.clone()));
        }
        let ready = wait_for(Duration::from_secs(10), || {
            redlock
                .nodes()
                .iter()
                .all(|n| n.is_up() && n.counts(tokio::time::Instant::now()))
                .then_some(())
        });
        assert!(ready.is_some(), "library nodes did not connect");
        let mut bare = Bare::connect(&urls, &format!("bench-bare-{i}"));
        let mut bare_q = BareQuorum::connect(&urls, &format!("bench-bare-q-{i}"), false);
        let mut bare_qs = BareQuorum::connect(&urls, &format!("bench-bare-qs-{i}"), true);
        let mut direct = rt.block_on(Direct::connect(&urls, &format!("bench-direct-{i}")));
        let rs = rslock::LockManager::new(urls);
        let rs_key = format!("bench-rslock-{i}");
        let ttl = Duration::from_secs(1);
        let s = rt.block_on(async {
            let mut s = Samples::default();
            for i in 0..iters + iters / 10 {
                let warm = i < iters / 10;
                // Ours: acquire (one SET NX round that also stores the fencing token), then release.
                let t0 = Instant::now();
                let lease = match redlock.acquire("bench").await {
                    Acquire::Acquired(l) => l,
                    other => panic!("our acquire failed on free nodes: {other:?}"),
                };
                let t1 = Instant::now();
                redlock.release(&lease.value, Notice::Silent).await;
                let t2 = Instant::now();
                // rslock: SET NX round, then release.
                let lock = rs
                    .lock(rs_key.as_str(), ttl)
                    .await
                    .expect("rslock lock on free nodes");
                rs.unlock(&lock).await;
                let t3 = Instant::now();
                // The floor: blocking, so it holds this runtime thread for its two rounds.
                bare.acquire_release();
                let t4 = Instant::now();
                bare_q.acquire_release();
                let t5 = Instant::now();
                bare_q.settle();
                let t6 = Instant::now();
                direct.acquire_release().await;
                let t7 = Instant::now();
                direct.settle().await;
                let t8 = Instant::now();
                bare_qs.acquire_release();
                let t9 = Instant::now();
                bare_qs.settle();
                if !warm {
                    s.ours.push(ms(t2 - t0));
                    s.acq.push(ms(t1 - t0));
                    s.rel.push(ms(t2 - t1));
                    s.theirs.push(ms(t3 - t2));
                    s.floor.push(ms(t4 - t3));
                    s.floor_q.push(ms(t5 - t4));
                    s.floor_d.push(ms(t7 - t6));
                    s.floor_qs.push(ms(t9 - t8));
                }
            }
            s.time_cost = direct
                .time_cost(&format!("bench-time-{i}"), iters / 2)
                .await;
            // One renew round alone, for reference: the cost of one script round on every node.
            if let Acquire::Acquired(lease) = redlock.acquire("bench").await {
                for _ in 0..iters / 2 {
                    let t = Instant::now();
                    let _ = redlock.renew(&lease).await;
                    s.ren.push(ms(t.elapsed()));
                }
                redlock.release(&lease.value, Notice::Silent).await;
            }
            s
        });
        stop.cancel();
        let (o50, o99, t50, t99) = (
            pct(&s.ours, 0.5),
            pct(&s.ours, 0.99),
            pct(&s.theirs, 0.5),
            pct(&s.theirs, 0.99),
        );
        let (fl50, flq50) = (pct(&s.floor, 0.5), pct(&s.floor_q, 0.5));
        let (fd50, fqs50) = (pct(&s.floor_d, 0.5), pct(&s.floor_qs, 0.5));
        // The lower of the two floors: what no lock client can beat on these nodes.
        let f50 = fl50.min(flq50);
        let rounds = format!(
            "release p50 {} ms, renew round p50 {} ms",
            fmt_val(pct(&s.rel, 0.5)),
            fmt_val(pct(&s.ren, 0.5))
        );
        let floor_note = if f50 / t50 > 0.5 {
            "above 0.5: the halving target is below what the hardware allows here"
        } else {
            "below 0.5: the halving target is physically possible here"
        };
        // Only the 5-node run carries the target, and the floor ratio that says if it is reachable.
        let five = label == "5 nodes";
        #[rustfmt::skip]
        let mut rows: Vec<Spec> = vec![
            ("ours acquire+release p50", o50, "ms", None, "acquire = one SET NX round storing the fencing token (a second round only when behind)"),
            ("ours acquire+release p99", o99, "ms", None, ""),
            ("rslock lock+unlock p50", t50, "ms", None, "rslock: SET NX round (waits for all nodes) + unlock"),
            ("rslock lock+unlock p99", t99, "ms", None, ""),
            ("ours acquire / release / one renew round p50", pct(&s.acq, 0.5), "ms", None, &rounds),
            ("floor, bare blocking sockets, every reply p50", fl50, "ms", None, "SET NX + DEL; no runtime, no library, no script"),
            ("floor, bare busy-polled sockets, quorum p50", flq50, "ms", None, "SET NX + DEL, each round decided at the quorum-th reply"),
            ("floor, tokio sockets + our scripts, quorum p50", fd50, "ms", None, "a hand-written async client: our acquire + release scripts, each round decided at the quorum-th reply"),
            ("floor, bare busy-polled sockets + our scripts, quorum p50", fqs50, "ms", None, "as the busy-polled floor, with our acquire + release scripts"),
        ];
        let [acq_before, acq_after, ren_before, ren_after] = s.time_cost;
        let time_note = format!(
            "tokio sockets, our scripts before/after every reply carried TIME: acquire {} -> {} ms, renew {} -> {} ms",
            fmt_val(acq_before),
            fmt_val(acq_after),
            fmt_val(ren_before),
            fmt_val(ren_after)
        );
        rows.push((
            "cost of TIME: acquire round p50",
            acq_after - acq_before,
            "ms",
            None,
            &time_note,
        ));
        rows.push((
            "cost of TIME: renew round p50",
            ren_after - ren_before,
            "ms",
            None,
            "",
        ));
        if five {
            rows.push(("floor / rslock p50", f50 / t50, "x", None, floor_note));
            rows.push((
                "tokio sockets + our scripts / rslock p50",
                fd50 / t50,
                "x",
                None,
                "what replacing redis-rs's connection could reach with our scripts",
            ));
            rows.push((
                "busy-polled + our scripts / rslock p50",
                fqs50 / t50,
                "x",
                None,
                "what spinning a core could reach with our scripts",
            ));
            rows.push((
                "ratio ours/rslock p50",
                o50 / t50,
                "x",
                Some((0.5, false)),
                "target: at most half of rslock's p50",
            ));
        } else {
            rows.push(("ratio ours/rslock p50", o50 / t50, "x", None, ""));
        }
        rows.push(("ratio ours/rslock p99", o99 / t99, "x", None, ""));
        for (what, value, unit, goal, note) in rows {
            rep.add(
                "acquire",
                &[(&format!("{label}: {what}"), value, unit, goal, note)],
            );
        }
    }
}

/// Acquire and renewal over TLS against plain TCP, same run, interleaved so that both see the
/// same machine load: three TLS-only nodes (certificates from `openssl`) beside three plain ones.
fn bench_tls(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, plain: &[&Redis]) {
    eprintln!("== TLS vs plain TCP: acquire + renew (library API), 3 nodes each");
    let iters = o.n(1000, 100);
    let pki = Pki::new();
    let tls_nodes: Vec<Redis> = (0..3).map(|_| Redis::start_tls(&pki, false, &[])).collect();
    wait_quarantine(
        &tls_nodes.iter().collect::<Vec<_>>(),
        Duration::from_secs(1),
    );
    let ca = pki.arg("ca.crt");
    let setups = [
        (
            "tcp",
            plain.iter().map(|n| n.url()).collect::<Vec<_>>(),
            vec![],
        ),
        (
            "tls",
            tls_nodes
                .iter()
                .map(|n| format!("rediss://localhost:{}", n.port))
                .collect(),
            vec!["--redis-tls-ca-file", ca.as_str()],
        ),
    ];
    let stop = tokio_util::sync::CancellationToken::new();
    let locks: Vec<Arc<Redlock>> = setups
        .iter()
        .map(|(name, urls, extra)| {
            let lease = format!("bench-tls-{name}");
            let mut args = vec![
                "--lease",
                &lease,
                "--ttl",
                "1s",
                "--identity",
                "bench",
                "--kubernetes",
                "false",
            ];
            for u in urls {
                args.extend(["--redis", u.as_str()]);
            }
            args.extend(extra.iter().copied());
            let cfg = library_config(&args);
            let redlock = Arc::new(
                Redlock::new(
                    &cfg,
                    Metrics::register(&prometheus::Registry::new(), &cfg.lease.name)
                        .expect("metrics"),
                )
                .expect("redlock"),
            );
            for node in redlock.nodes() {
                rt.spawn(node.clone().maintain(stop.clone()));
            }
            redlock
        })
        .collect();
    let ready = wait_for(Duration::from_secs(10), || {
        locks
            .iter()
            .flat_map(|r| r.nodes())
            .all(|n| n.is_up() && n.counts(tokio::time::Instant::now()))
            .then_some(())
    });
    assert!(
        ready.is_some(),
        "TCP and TLS library nodes did not all connect"
    );
    let (mut acq, mut ren) = (vec![vec![]; 2], vec![vec![]; 2]);
    rt.block_on(async {
        for i in 0..iters + iters / 10 {
            for (k, redlock) in locks.iter().enumerate() {
                let t0 = Instant::now();
                let lease = match redlock.acquire("bench").await {
                    Acquire::Acquired(l) => l,
                    other => panic!(
                        "acquire over {} failed on free nodes: {other:?}",
                        setups[k].0
                    ),
                };
                let t1 = Instant::now();
                let renewed = redlock.renew(&lease).await;
                let t2 = Instant::now();
                assert!(renewed.is_some(), "renewal over {} failed", setups[k].0);
                redlock.release(&lease.value, Notice::Silent).await;
                if i >= iters / 10 {
                    acq[k].push(ms(t1 - t0));
                    ren[k].push(ms(t2 - t1));
                }
            }
        }
    });
    stop.cancel();
    let (a_tcp, a_tls) = (pct(&acq[0], 0.5), pct(&acq[1], 0.5));
    let (r_tcp, r_tls) = (pct(&ren[0], 0.5), pct(&ren[1], 0.5));
    let n = format!("{} rounds each, interleaved", acq[0].len());
    #[rustfmt::skip]
    let rows: Vec<Spec> = vec![
        ("acquire p50, plain TCP", a_tcp, "ms", None, &n),
        ("acquire p50, TLS", a_tls, "ms", None, "TLS 1.3 (rustls, ring), CA from redis.tls.caFile"),
        ("acquire p99, plain TCP", pct(&acq[0], 0.99), "ms", None, ""),
        ("acquire p99, TLS", pct(&acq[1], 0.99), "ms", None, ""),
        ("renewal round p50, plain TCP", r_tcp, "ms", None, ""),
        ("renewal round p50, TLS", r_tls, "ms", None, ""),
        ("TLS / TCP acquire p50", a_tls / a_tcp, "x", None, ""),
        ("TLS / TCP renewal p50", r_tls / r_tcp, "x", None, ""),
    ];
    rep.add("tls", &rows);
}

// ---------------------------------------------------------------------------------------------
// 2. graceful handover and 3. crash failover: three real sidecars on three nodes

/// Three sidecars of one lease, each followed over SSE.
struct Trio {
    lease: String,
    sidecars: Vec<Sidecar>,
    events: tokio::sync::mpsc::UnboundedReceiver<Seen>,
    tx: tokio::sync::mpsc::UnboundedSender<Seen>,
    started: usize,
    extra: Vec<String>,
}

impl Trio {
    fn start(rt: &tokio::runtime::Runtime, lease: &str, nodes: &[&Redis], extra: &[&str]) -> Trio {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let mut t = Trio {
            lease: lease.to_string(),
            sidecars: vec![],
            events,
            tx,
            started: 0,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..3 {
            t.spawn(rt, nodes);
        }
        t
    }

    fn spawn(&mut self, rt: &tokio::runtime::Runtime, nodes: &[&Redis]) {
        self.started += 1;
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let s = sidecar(
            &format!("{}-{}", self.lease, self.started),
            &self.lease,
            nodes,
            &extra,
        );
        rt.spawn(sse_watch(s.api_port, self.started, self.tx.clone()));
        self.sidecars.push(s);
    }

    /// Drain queued events; the latest view per identity.
    fn drain(&mut self, latest: &mut HashMap<String, View>) {
        while let Ok(e) = self.events.try_recv() {
            latest.insert(e.view.identity.clone(), e.view);
        }
    }

    /// Wait until exactly one sidecar leads, every other one has observed it (it attempted,
    /// so its subscriptions are up too) and counts a quorum of nodes (a fresh sidecar watches
    /// the nodes' clocks for ttl + margin first: a handover to it would measure that wait, not
    /// the handover). Returns the leader's index.
    fn steady(&mut self, latest: &mut HashMap<String, View>) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.drain(latest);
            let views: Vec<Option<&View>> = self
                .sidecars
                .iter()
                .map(|s| latest.get(&s.identity))
                .collect();
            let leaders: Vec<usize> = views
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_some_and(|v| v.is_leader))
                .map(|(i, _)| i)
                .collect();
            if let [l] = leaders[..] {
                let id = &self.sidecars[l].identity;
                if views
                    .iter()
                    .all(|v| v.is_some_and(|v| v.leader.as_deref() == Some(id)))
                    && self
                        .sidecars
                        .iter()
                        .all(|s| s.try_leader().is_some_and(|v| v.eligible))
                {
                    return l;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the {} sidecars did not settle on one leader",
                self.lease
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The first `is_leader: true` event from someone other than `old`, arriving after `after`.
    fn next_leader(
        &mut self,
        old: &str,
        after: Instant,
        latest: &mut HashMap<String, View>,
    ) -> Option<Seen> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.events.try_recv() {
                Ok(e) => {
                    latest.insert(e.view.identity.clone(), e.view.clone());
                    if e.view.is_leader && e.view.identity != old && e.at >= after {
                        return Some(e);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        None
    }
}

/// Rolling replacements (3 sidecars of priority 1 by 3 of priority 2, surge 1, the leader
/// terminated at each position of the order in turn), the driver `tests/rollout.rs` uses: the
/// leadership changes per rollout and the longest leaderless gap, for each preference.
fn bench_rollout(o: &Opts, rep: &mut Report, nodes: &[Redis]) {
    let runs = o.n(6, 1);
    for prefer in ["newest", "oldest", "none"] {
        eprintln!("== rollout, prefer {prefer}: {runs} rollouts of 3 sidecars, surge 1");
        let mut changes = Vec::new();
        let mut gaps = Vec::new();
        for run in 0..runs {
            let lease = format!("bench-rollout-{prefer}-{run}");
            let (n, gap, _, _) = common::rollout::rollout(nodes, &lease, prefer, run % 3);
            changes.push(n as f64);
            gaps.push(gap.as_secs_f64() * 1e3);
        }
        let counts: Vec<String> = changes.iter().map(|c| format!("{c}")).collect();
        let mean = changes.iter().sum::<f64>() / changes.len() as f64;
        rep.info(
            "rollout",
            format!("prefer {prefer}: leadership changes per rollout (mean)"),
            mean,
            "changes",
            format!("per rollout: {}", counts.join(", ")),
        );
        rep.info(
            "rollout",
            format!("prefer {prefer}: longest leaderless gap"),
            gaps.iter().copied().fold(0.0, f64::max),
            "ms",
            format!("over {runs} rollouts"),
        );
    }
}

fn bench_handover(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    bench_handover_with(rt, o, rep, nodes, true);
    bench_handover_with(rt, o, rep, nodes, false);
}

/// Graceful handovers with the release naming a successor (the default), or without
/// (`--no-named-successor`: followers race, as before candidate records).
fn bench_handover_with(
    rt: &tokio::runtime::Runtime,
    o: &Opts,
    rep: &mut Report,
    nodes: &[&Redis],
    named: bool,
) {
    let how = if named {
        "named successor"
    } else {
        "no named successor"
    };
    eprintln!("== graceful handover ({how}): 3 sidecars, 3 nodes, ttl 1s, retryEvery 1s");
    let lease = if named {
        "bench-handover"
    } else {
        "bench-handover-race"
    };
    let (ntx, nrx) = mpsc::channel();
    for n in nodes {
        subscribe_notices(
            n.port,
            &format!("redlock-elector:{lease}:released"),
            ntx.clone(),
        );
    }
    let mut args = vec!["--ttl", "1s", "--retry-every", "1s"];
    if !named {
        args.push("--no-named-successor");
    }
    let mut trio = Trio::start(rt, lease, nodes, &args);
    let mut latest = HashMap::new();
    let per_kind = o.n(30, 3);
    // (kind, release -> new leader, request/signal -> new leader), printed in this order.
    let mut by_kind = [("SIGTERM", vec![], vec![]), ("step-down", vec![], vec![])];
    for i in 0..2 * per_kind {
        let kind = by_kind[i % 2].0;
        let l = trio.steady(&mut latest);
        while nrx.try_recv().is_ok() {}
        let old = trio.sidecars[l].identity.clone();
        let port = trio.sidecars[l].api_port;
        let t_sig = Instant::now();
        let poster = if kind == "SIGTERM" {
            trio.sidecars[l].signal("TERM");
            None
        } else {
            Some(std::thread::spawn(move || {
                http("POST", port, "/leader/step-down")
            }))
        };
        let t_rel = nrx
            .recv_timeout(Duration::from_secs(5))
            .expect("a release notice");
        let Some(new) = trio.next_leader(&old, t_sig, &mut latest) else {
            panic!("no new leader within 10s of a {kind} handover");
        };
        by_kind[i % 2].1.push(ms_between(t_rel, new.at));
        by_kind[i % 2].2.push(ms_between(t_sig, new.at));
        if let Some(p) = poster {
            let _ = p.join();
            // The old leader sits out one ttl; let it contend again so every round has two contenders.
            std::thread::sleep(Duration::from_millis(1100));
        } else {
            let mut gone = trio.sidecars.remove(l);
            gone.reap();
            latest.remove(&old);
            trio.spawn(rt, nodes);
        }
    }
    let s = "handover";
    let all: Vec<f64> = by_kind
        .iter()
        .flat_map(|(_, a, _)| a.iter().copied())
        .collect();
    if !named {
        rep.info(
            s,
            format!("{how}: release -> new leader p50"),
            pct(&all, 0.5),
            "ms",
            format!("{} handovers (SIGTERM and step-down)", all.len()),
        );
        rep.info(
            s,
            format!("{how}: release -> new leader p99"),
            pct(&all, 0.99),
            "ms",
            "followers race after the release notice",
        );
        return;
    }
    for (kind, rel, sig) in &by_kind {
        rep.info(
            s,
            format!("{kind}: release -> new leader p50"),
            pct(rel, 0.5),
            "ms",
            format!("{} handovers", rel.len()),
        );
        rep.info(
            s,
            format!("{kind}: release -> new leader p99"),
            pct(rel, 0.99),
            "ms",
            "",
        );
        rep.info(
            s,
            format!("{kind}: request/signal sent -> new leader p50"),
            pct(sig, 0.5),
            "ms",
            "includes signal delivery / HTTP, publishing not-leader, the release round",
        );
    }
    rep.target(s, "all: release -> new leader p50", pct(&all, 0.5), "ms", 10.0, false, format!("{} handovers, the release naming a successor; release = first release notice on any node, new leader = first is_leader:true SSE event", all.len()));
    rep.target(
        s,
        "all: release -> new leader p99",
        pct(&all, 0.99),
        "ms",
        50.0,
        false,
        "",
    );
}

fn bench_failover(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    eprintln!("== crash failover: SIGKILL the leader; 3 sidecars, 3 nodes, ttl 1s, retryEvery 1s");
    let lease = "bench-failover";
    let ttl = Duration::from_secs(1);
    let retry = Duration::from_secs(1);
    let mut trio = Trio::start(rt, lease, nodes, &["--ttl", "1s", "--retry-every", "1s"]);
    let mut latest = HashMap::new();
    let key = format!("redlock-elector:{lease}");
    let (mut beyond, mut total) = (vec![], vec![]);
    for _ in 0..o.n(20, 3) {
        let l = trio.steady(&mut latest);
        // Do not kill right at a renewal: land somewhere in the renewal period, like a real crash.
        std::thread::sleep(Duration::from_millis(rand_ms(0, 333)));
        let old = trio.sidecars[l].identity.clone();
        let t_kill = Instant::now();
        trio.sidecars[l].kill();
        // Read the keys' remaining ttl after the process is gone: no renewal can move them now.
        let mut expiries: Vec<Instant> = nodes
            .iter()
            .filter_map(|n| {
                let at = Instant::now();
                let pttl: i64 = n.cli(&["PTTL", &key])?.parse().ok()?;
                (pttl >= 0).then(|| at + Duration::from_millis(pttl as u64))
            })
            .collect();
        expiries.sort();
        // A quorum of keys is free when the quorum-th key has expired.
        let expiry = expiries.get(math::quorum(nodes.len()) - 1).copied();
        let Some(new) = trio.next_leader(&old, t_kill, &mut latest) else {
            panic!("no new leader within 10s of a crash");
        };
        if let Some(x) = expiry {
            beyond.push(ms_between(x, new.at));
        }
        total.push(ms_between(t_kill, new.at));
        let mut gone = trio.sidecars.remove(l);
        gone.kill();
        latest.remove(&old);
        trio.spawn(rt, nodes);
    }
    let limit = ms(retry.mul_f64(1.25)) + 50.0;
    let (t50, t99, b99) = (pct(&total, 0.5), pct(&total, 0.99), pct(&beyond, 0.99));
    let crashes = format!("{} crashes", total.len());
    #[rustfmt::skip]
    rep.add("failover", &[
        ("SIGKILL -> new leader p50", t50, "ms", None, &crashes),
        ("SIGKILL -> new leader p99", t99, "ms", None, ""),
        ("failover / ttl p50", t50 / ms(ttl), "x", None, ""),
        ("failover / ttl p99", t99 / ms(ttl), "x", None, ""),
        ("beyond key expiry p50", pct(&beyond, 0.5), "ms", None, "expiry = when the quorum-th key expires (PTTL read after the kill)"),
        ("beyond key expiry p99", b99, "ms", Some((limit, false)), "target: expiry + retryEvery*1.25 + 50ms"),
        ("beyond key expiry p99 / ttl", b99 / ms(ttl), "x", None, ""),
    ]);
}

fn rand_ms(lo: u64, hi: u64) -> u64 {
    // Good enough spread without another dependency: the clock's nanoseconds.
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    lo + n % (hi - lo).max(1)
}

// ---------------------------------------------------------------------------------------------
// 4. /leader under load, and fan-out to 1000 watchers

fn bench_load(o: &Opts, rep: &mut Report, nodes: &[&Redis], rt: &tokio::runtime::Runtime) {
    eprintln!("== /leader under load: closed-loop sweep over keep-alive connections");
    let s = sidecar("load-a", "bench-load", nodes, &["--ttl", "1s"]);
    wait_for(Duration::from_secs(10), || {
        s.try_leader().filter(|v| v.is_leader)
    })
    .expect("the load sidecar leads");
    let secs = o.n(5, 1);
    let url = format!("http://127.0.0.1:{}/leader", s.api_port);
    let sec = "load";
    // More connections raise throughput until both cores are busy (the load generator shares
    // them), then only queueing grows: p99 at saturation says more about the shared machine
    // than about the sidecar. The target is throughput at a latency bound: the highest rate
    // among the points whose p99 is within 2 ms.
    let mut best: Option<(f64, f64, usize)> = None;
    let mut tool = String::new();
    for conns in [2usize, 4, 8, 16] {
        let (rps, p50, p99) = match run_wrk(&url, conns, secs) {
            Some(r) => {
                tool = format!("wrk -t1 -d{secs}s per point");
                r
            }
            None => {
                tool = format!("built-in load generator, {secs}s per point (wrk not installed)");
                rt.block_on(builtin_load(
                    s.api_port,
                    conns,
                    Duration::from_secs(secs as u64),
                ))
            }
        };
        rep.info(
            sec,
            format!("{conns} connections: requests/s"),
            rps,
            "req/s",
            format!("p50 {} ms", fmt_val(p50)),
        );
        rep.info(
            sec,
            format!("{conns} connections: latency p99"),
            p99,
            "ms",
            "",
        );
        if p99 <= 2.0 && best.is_none_or(|(r, _, _)| rps > r) {
            best = Some((rps, p99, conns));
        }
    }
    let (rps, p99, conns) = best.unwrap_or((0.0, f64::NAN, 0));
    rep.target(
        sec,
        "GET /leader requests/s with p99 <= 2 ms",
        rps,
        "req/s",
        20_000.0,
        true,
        format!("{tool}; best point: {conns} connections; load generator on the same 2 cores"),
    );
    rep.target(
        sec,
        "GET /leader p99 at that rate",
        p99,
        "ms",
        2.0,
        false,
        "",
    );
    rep.info(
        sec,
        "sidecar RSS after the load",
        rss_kib(s.pid()).unwrap_or(f64::NAN) / 1024.0,
        "MiB",
        "",
    );
}

/// Run wrk; (requests/s, p50 ms, p99 ms), or None when wrk is missing or its output is unreadable.
fn run_wrk(url: &str, conns: usize, secs: usize) -> Option<(f64, f64, f64)> {
    let out = Command::new("wrk")
        .args([
            "-t1",
            &format!("-c{conns}"),
            &format!("-d{secs}s"),
            "--latency",
            url,
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rps = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    let lat = |p: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(p).map(str::trim))
            .and_then(parse_wrk_ms)
    };
    if text.contains("Non-2xx") || text.contains("Socket errors") {
        eprintln!("  wrk reported errors:\n{text}");
    }
    Some((rps, lat("50%")?, lat("99%")?))
}

fn parse_wrk_ms(v: &str) -> Option<f64> {
    let (num, mul) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        (v, 1.0)
    };
    num.trim().parse::<f64>().ok().map(|x| x * mul)
}

/// Keep-alive connections sending `GET /leader` back to back: (requests/s, p50 ms, p99 ms).
async fn builtin_load(port: u16, conns: usize, dur: Duration) -> (f64, f64, f64) {
    let end = Instant::now() + dur;
    let mut tasks = vec![];
    for _ in 0..conns {
        tasks.push(tokio::spawn(async move {
            let mut lat = vec![];
            let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                return lat;
            };
            let _ = s.set_nodelay(true);
            let mut r = tokio::io::BufReader::new(s);
            let req = b"GET /leader HTTP/1.1\r\nHost: localhost\r\n\r\n";
            let mut line = String::new();
            while Instant::now() < end {
                let t = Instant::now();
                if r.get_mut().write_all(req).await.is_err() {
                    break;
                }
                let mut len = 0usize;
                loop {
                    line.clear();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return lat;
                    }
                    let l = line.trim_end().to_ascii_lowercase();
                    if let Some(v) = l.strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if l.is_empty() {
                        break;
                    }
                }
                let mut body = vec![0; len];
                if tokio::io::AsyncReadExt::read_exact(&mut r, &mut body)
                    .await
                    .is_err()
                {
                    break;
                }
                lat.push(ms(t.elapsed()));
            }
            lat
        }));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    (
        all.len() as f64 / dur.as_secs_f64(),
        pct(&all, 0.5),
        pct(&all, 0.99),
    )
}

/// Long-poll: wait for the answer to `GET /leader?wait=60s&version=V`; the arrival time.
async fn long_poll(
    port: u16,
    version: u64,
    sent: Arc<std::sync::atomic::AtomicUsize>,
) -> Option<(Instant, View)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let _ = s.set_nodelay(true);
    let req = format!(
        "GET /leader?wait=60s&version={version} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut buf = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut s, &mut buf)
        .await
        .ok()?;
    let at = Instant::now();
    let text = String::from_utf8_lossy(&buf);
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((at, serde_json::from_str(body).ok()?))
}

fn bench_fanout(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    let watchers = 1000;
    eprintln!("== fan-out: {watchers} SSE watchers, then {watchers} long-polls, on one sidecar");
    let lease = "bench-fanout";
    let extra = ["--ttl", "1s", "--retry-every", "1s"];
    let w = sidecar("fanout-w", lease, nodes, &extra);
    wait_for(Duration::from_secs(10), || {
        w.try_leader().filter(|v| v.is_leader)
    })
    .expect("the watched sidecar leads");
    let x = sidecar("fanout-x", lease, nodes, &extra);
    // The change: W steps down (it publishes "not leader" before it releases). Afterwards the
    // lease goes back to W: its cool-down (one ttl) must pass, then X steps down.
    let change = || {
        let port = w.api_port;
        let t0 = Instant::now();
        (
            t0,
            std::thread::spawn(move || http("POST", port, "/leader/step-down")),
        )
    };
    let back_to_w = || {
        std::thread::sleep(Duration::from_millis(1100));
        wait_for(Duration::from_secs(10), || {
            x.try_leader().filter(|v| v.is_leader)
        })
        .expect("the other sidecar leads");
        let _ = http("POST", x.api_port, "/leader/step-down");
        wait_for(Duration::from_secs(10), || {
            w.try_leader().filter(|v| v.is_leader)
        })
        .expect("the watched sidecar leads again")
    };
    let rounds = o.n(5, 2);

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..watchers)
        .map(|i| rt.spawn(sse_watch(w.api_port, i, tx.clone())))
        .collect();
    // Everyone has the current state (leader) before the change.
    let mut ready = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready.len() < watchers {
        match rx.try_recv() {
            Ok(e) => {
                ready.insert(e.watcher);
            }
            Err(_) => {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {watchers} watchers connected",
                    ready.len()
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    let rss_sse = rss_kib(w.pid()).unwrap_or(f64::NAN) / 1024.0;
    let (mut sse_all, mut sse_first, mut sse_spread) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        while rx.try_recv().is_ok() {}
        let (t0, poster) = change();
        // Every SSE watcher's first not-leader event after t0.
        let mut first: HashMap<usize, Instant> = HashMap::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while first.len() < watchers && Instant::now() < deadline {
            match rx.try_recv() {
                Ok(e) if !e.view.is_leader && e.at >= t0 => {
                    first.entry(e.watcher).or_insert(e.at);
                }
                Ok(_) => {}
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        if let (Some(lo), Some(hi), true) = (
            first.values().min(),
            first.values().max(),
            first.len() == watchers,
        ) {
            sse_all.push(ms_between(t0, *hi));
            sse_first.push(ms_between(t0, *lo));
            sse_spread.push(ms_between(*lo, *hi));
        } else {
            eprintln!(
                "  only {} of {watchers} SSE watchers saw the change",
                first.len()
            );
        }
        let _ = poster.join();
        back_to_w();
    }
    for t in tasks {
        t.abort();
    }

    let mut lp_all = vec![];
    for _ in 0..rounds {
        let Some(v0) = w.try_leader().filter(|v| v.is_leader) else {
            panic!("the watched sidecar does not lead");
        };
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..watchers)
            .map(|_| rt.spawn(long_poll(w.api_port, v0.version, sent.clone())))
            .collect();
        // Every request is on the wire; then give the sidecar time to read them all.
        wait_for(Duration::from_secs(20), || {
            (sent.load(std::sync::atomic::Ordering::SeqCst) == watchers).then_some(())
        })
        .expect("all long-polls connected");
        std::thread::sleep(Duration::from_millis(500));
        let (t0, poster) = change();
        let arrivals = rt.block_on(async {
            let mut v = vec![];
            for h in handles {
                if let Ok(Some((at, view))) = h.await
                    && !view.is_leader
                {
                    v.push(at);
                }
            }
            v
        });
        match arrivals.iter().max() {
            Some(last) if arrivals.len() == watchers => lp_all.push(ms_between(t0, *last)),
            _ => eprintln!(
                "  only {} of {watchers} long-polls answered with the change",
                arrivals.len()
            ),
        }
        let _ = poster.join();
        back_to_w();
    }

    // pct(v, 1.0) is the worst round.
    let sse_note = format!(
        "{} rounds; change = step-down request sent to the watched sidecar",
        sse_all.len()
    );
    let lp_note = format!("{} rounds", lp_all.len());
    #[rustfmt::skip]
    rep.add("fanout", &[
        ("1000 SSE watchers: change -> all notified p50", pct(&sse_all, 0.5), "ms", None, &sse_note),
        ("1000 SSE watchers: change -> all notified (max)", pct(&sse_all, 1.0), "ms", Some((50.0, false)), "worst round"),
        ("1000 SSE watchers: change -> first notified p50", pct(&sse_first, 0.5), "ms", None, ""),
        ("1000 SSE watchers: first -> last notified p50", pct(&sse_spread, 0.5), "ms", None, ""),
        ("1000 long-polls: change -> all answered p50", pct(&lp_all, 0.5), "ms", None, &lp_note),
        ("1000 long-polls: change -> all answered (max)", pct(&lp_all, 1.0), "ms", None, ""),
        ("sidecar RSS with 1000 SSE watchers", rss_sse, "MiB", None, ""),
    ]);
    drop(x);
}

// ---------------------------------------------------------------------------------------------
// 5. footprint and 6. Redis load, on dedicated nodes with production defaults

fn rss_kib(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// utime + stime in clock ticks.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces; fields after the closing parenthesis are fixed.
    let rest = &text[text.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Over `window`: (CPU % of one core, RSS MiB at the end, Redis client commands/s and all
/// commands/s including those inside scripts, summed over `nodes`).
fn observe(pid: u32, nodes: &[&Redis], window: Duration) -> (f64, f64, f64, f64) {
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
    let cpu = (k1 - k0) as f64 / clock_ticks() / el * 100.0;
    (
        cpu,
        rss_kib(pid).unwrap_or(f64::NAN) / 1024.0,
        delta(|c| c.0),
        delta(|c| c.1),
    )
}

fn bench_footprint(o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
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
    let (lcpu, lrss, lcmd, lops) = observe(a.pid(), nodes, window);
    let b = sidecar("idle-b", lease, nodes, &[]);
    wait_for(Duration::from_secs(15), || {
        b.try_leader()
            .filter(|v| v.leader.as_deref() == Some("idle-a"))
    })
    .expect("the follower sees the leader");
    std::thread::sleep(Duration::from_secs(2));
    let (fcpu, frss, both, both_ops) = observe(b.pid(), nodes, window);
    let (fcmd, fops) = (both - lcmd, both_ops - lops);
    let cpu_note = format!("utime+stime over {}s", window.as_secs());
    #[rustfmt::skip]
    rep.add("footprint", &[
        ("idle follower RSS", frss, "MiB", Some((16.0, false)), "VmRSS at the end of the window"),
        ("leader RSS", lrss, "MiB", Some((16.0, false)), ""),
        ("idle follower CPU", fcpu, "% core", Some((0.5, false)), &cpu_note),
        ("leader CPU", lcpu, "% core", Some((0.5, false)), ""),
    ]);
    #[rustfmt::skip]
    rep.add("redis-load", &[
        ("leader: commands sent/s (sum over 3 nodes)", lcmd, "cmd/s", None, "INFO commandstats deltas of top-level commands: renew script every ttl/3 + INFO health check 1/s, per node"),
        ("leader: Redis ops/s incl. inside scripts", lops, "ops/s", None, "every command Redis ran, also GET/PEXPIRE/SET inside the Lua scripts"),
        ("follower: commands sent/s (sum over 3 nodes)", fcmd, "cmd/s", None, "(leader+follower) - leader: acquire script + cleanup release script per retry (~1/s) + INFO 1/s, per node"),
        ("follower: Redis ops/s incl. inside scripts", fops, "ops/s", None, ""),
    ]);
}

fn bench_binary(rep: &mut Report) {
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
    rep.info(
        "binary",
        "release binary as built",
        size,
        "MB",
        binary().to_string(),
    );
    rep.target(
        "binary",
        "stripped release binary",
        stripped,
        "MB",
        20.0,
        false,
        "strip(1) of the release binary",
    );
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let Some(o) = Opts::parse() else {
        eprintln!(
            "benches/bench.rs: not run under `cargo test`; use `cargo bench --bench bench` or ./scripts/bench.sh"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "redlock-elector benchmark ({} mode), {} CPUs, load average {}",
        if o.quick { "quick" } else { "full" },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let started = Instant::now();
    // Five shared nodes (ttl 1s sections) and three dedicated ones (footprint, Redis load).
    let shared: Vec<Redis> = (0..5).map(|_| Redis::start()).collect();
    let dedicated: Vec<Redis> = if o.wants("footprint") {
        (0..3).map(|_| Redis::start()).collect()
    } else {
        vec![]
    };
    let three: Vec<&Redis> = shared.iter().take(3).collect();
    wait_quarantine(&shared.iter().collect::<Vec<_>>(), Duration::from_secs(1));
    let mut rep = Report::default();
    if o.wants("acquire") {
        bench_acquire(&rt, &o, &mut rep, &shared);
    }
    if o.wants("tls") {
        bench_tls(&rt, &o, &mut rep, &three);
    }
    if o.wants("handover") {
        bench_handover(&rt, &o, &mut rep, &three);
    }
    if o.wants("failover") {
        bench_failover(&rt, &o, &mut rep, &three);
    }
    if o.wants("rollout") {
        bench_rollout(&o, &mut rep, &shared[..3]);
    }
    if o.wants("load") {
        bench_load(&o, &mut rep, &three, &rt);
    }
    if o.wants("fanout") {
        bench_fanout(&rt, &o, &mut rep, &three);
    }
    if o.wants("footprint") {
        bench_footprint(&o, &mut rep, &dedicated.iter().collect::<Vec<_>>());
    }
    if o.wants("binary") {
        bench_binary(&mut rep);
    }
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "== done in {:.0}s; load average now {}",
        started.elapsed().as_secs_f64(),
        load_after
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut out = std::io::stdout();
    if o.json {
        let doc = serde_json::json!({
            "mode": if o.quick { "quick" } else { "full" },
            "cpus": std::thread::available_parallelism().map_or(0, |n| n.get()),
            "load_before": load.trim(),
            "load_after": load_after.trim(),
            "rows": rep.rows,
        });
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&doc).unwrap_or_default()
        );
    } else {
        rep.print_table(&mut out);
    }
    rt.shutdown_background();
}

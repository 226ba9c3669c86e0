//! Fan-out: 1000 SSE watchers, then 1000 long-polls, on one sidecar whose leadership
//! changes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args::Opts;
use crate::common::{Redis, Sidecar, View, http};
use crate::harness::{Seen, rss_kib, sidecar, sse_watch, wait_for};
use crate::report::{Report, Spec, ms_between, pct};

/// Watchers, and long-polls, on the watched sidecar.
const WATCHERS: usize = 1000;

/// The watched sidecar W and the other one X of the lease. X is declared first so that it is
/// dropped (stopped) first and W's leadership ends last.
struct Pair {
    /// Takes over at each change, then hands back.
    x: Sidecar,
    /// Watched; leads between changes.
    w: Sidecar,
}

impl Pair {
    /// The change: W steps down (it publishes "not leader" before it releases). When it was
    /// requested, and the request's thread.
    fn change(&self) -> (Instant, JoinHandle<Option<(u16, String)>>) {
        let port = self.w.api_port;
        let t0 = Instant::now();
        (
            t0,
            std::thread::spawn(move || http("POST", port, "/leader/step-down")),
        )
    }

    /// Afterwards the lease goes back to W: its cool-down (one ttl) must pass, then X steps down.
    fn back_to_w(&self) {
        std::thread::sleep(Duration::from_millis(1100));
        wait_for(Duration::from_secs(10), || {
            self.x.try_leader().filter(|v| v.is_leader)
        })
        .expect("the other sidecar leads");
        let _ = http("POST", self.x.api_port, "/leader/step-down");
        wait_for(Duration::from_secs(10), || {
            self.w.try_leader().filter(|v| v.is_leader)
        })
        .expect("the watched sidecar leads again");
    }
}

/// Per round (ms): change -> all SSE watchers notified, -> the first one, first -> last.
#[derive(Default)]
struct SseRounds {
    /// Change -> the last watcher notified.
    all: Vec<f64>,
    /// Change -> the first watcher notified.
    first: Vec<f64>,
    /// First -> last watcher notified.
    spread: Vec<f64>,
}

pub fn run(rt: &tokio::runtime::Runtime, o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    eprintln!("== fan-out: {WATCHERS} SSE watchers, then {WATCHERS} long-polls, on one sidecar");
    let lease = "bench-fanout";
    let extra = ["--ttl", "1s", "--retry-every", "1s"];
    let w = sidecar("fanout-w", lease, nodes, &extra);
    wait_for(Duration::from_secs(10), || {
        w.try_leader().filter(|v| v.is_leader)
    })
    .expect("the watched sidecar leads");
    let pair = Pair {
        w,
        x: sidecar("fanout-x", lease, nodes, &extra),
    };
    let rounds = o.n(5, 2);
    let (sse, rss_sse) = sse_rounds(rt, &pair, rounds);
    let lp_all = long_poll_rounds(rt, &pair, rounds);
    // pct(v, 1.0) is the worst round.
    let sse_note = format!(
        "{} rounds; change = step-down request sent to the watched sidecar",
        sse.all.len()
    );
    let lp_note = format!("{} rounds", lp_all.len());
    #[rustfmt::skip]
    rep.add("fanout", vec![
        Spec::info("1000 SSE watchers: change -> all notified p50", pct(&sse.all, 0.5), "ms", &sse_note),
        Spec::at_most("1000 SSE watchers: change -> all notified (max)", pct(&sse.all, 1.0), "ms", 50.0, "worst round"),
        Spec::info("1000 SSE watchers: change -> first notified p50", pct(&sse.first, 0.5), "ms", ""),
        Spec::info("1000 SSE watchers: first -> last notified p50", pct(&sse.spread, 0.5), "ms", ""),
        Spec::info("1000 long-polls: change -> all answered p50", pct(&lp_all, 0.5), "ms", &lp_note),
        Spec::info("1000 long-polls: change -> all answered (max)", pct(&lp_all, 1.0), "ms", ""),
        Spec::info("sidecar RSS with 1000 SSE watchers", rss_sse, "MiB", ""),
    ]);
}

/// `rounds` changes seen by [`WATCHERS`] SSE watchers; also W's RSS (MiB) with them connected.
fn sse_rounds(rt: &tokio::runtime::Runtime, pair: &Pair, rounds: usize) -> (SseRounds, f64) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..WATCHERS)
        .map(|i| rt.spawn(sse_watch(pair.w.api_port, i, tx.clone())))
        .collect();
    // Everyone has the current state (leader) before the change.
    let mut ready = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while ready.len() < WATCHERS {
        match rx.try_recv() {
            Ok(e) => {
                ready.insert(e.watcher);
            }
            Err(_) => {
                assert!(
                    Instant::now() < deadline,
                    "only {} of {WATCHERS} watchers connected",
                    ready.len()
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    let rss = rss_kib(pair.w.pid()).unwrap_or(f64::NAN) / 1024.0;
    let mut out = SseRounds::default();
    for _ in 0..rounds {
        while rx.try_recv().is_ok() {}
        let (t0, poster) = pair.change();
        let first = first_not_leader(&mut rx, t0);
        if let (Some(lo), Some(hi), true) = (
            first.values().min(),
            first.values().max(),
            first.len() == WATCHERS,
        ) {
            out.all.push(ms_between(t0, *hi));
            out.first.push(ms_between(t0, *lo));
            out.spread.push(ms_between(*lo, *hi));
        } else {
            eprintln!(
                "  only {} of {WATCHERS} SSE watchers saw the change",
                first.len()
            );
        }
        let _ = poster.join();
        pair.back_to_w();
    }
    for t in tasks {
        t.abort();
    }
    (out, rss)
}

/// Every SSE watcher's first not-leader event after `t0` (waiting at most 10 s).
fn first_not_leader(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Seen>,
    t0: Instant,
) -> HashMap<usize, Instant> {
    let mut first: HashMap<usize, Instant> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.len() < WATCHERS && Instant::now() < deadline {
        match rx.try_recv() {
            Ok(e) if !e.view.is_leader && e.at >= t0 => {
                first.entry(e.watcher).or_insert(e.at);
            }
            Ok(_) => {}
            Err(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    first
}

/// `rounds` changes answered to [`WATCHERS`] long-polls: change -> all answered (ms) per round.
fn long_poll_rounds(rt: &tokio::runtime::Runtime, pair: &Pair, rounds: usize) -> Vec<f64> {
    let mut lp_all = vec![];
    for _ in 0..rounds {
        let Some(v0) = pair.w.try_leader().filter(|v| v.is_leader) else {
            panic!("the watched sidecar does not lead");
        };
        let sent = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..WATCHERS)
            .map(|_| rt.spawn(long_poll(pair.w.api_port, v0.version, sent.clone())))
            .collect();
        // Every request is on the wire; then give the sidecar time to read them all.
        wait_for(Duration::from_secs(20), || {
            (sent.load(Ordering::SeqCst) == WATCHERS).then_some(())
        })
        .expect("all long-polls connected");
        std::thread::sleep(Duration::from_millis(500));
        let (t0, poster) = pair.change();
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
            Some(last) if arrivals.len() == WATCHERS => lp_all.push(ms_between(t0, *last)),
            _ => eprintln!(
                "  only {} of {WATCHERS} long-polls answered with the change",
                arrivals.len()
            ),
        }
        let _ = poster.join();
        pair.back_to_w();
    }
    lp_all
}

/// Long-poll: wait for the answer to `GET /leader?wait=60s&version=V`; the arrival time.
async fn long_poll(port: u16, version: u64, sent: Arc<AtomicUsize>) -> Option<(Instant, View)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let _ = s.set_nodelay(true);
    let req = format!(
        "GET /leader?wait=60s&version={version} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    );
    s.write_all(req.as_bytes()).await.ok()?;
    sent.fetch_add(1, Ordering::SeqCst);
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.ok()?;
    let at = Instant::now();
    let text = String::from_utf8_lossy(&buf);
    let (_, body) = text.split_once("\r\n\r\n")?;
    Some((at, serde_json::from_str(body).ok()?))
}

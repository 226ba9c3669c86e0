//! `GET /leader` under load: a closed-loop sweep over keep-alive connections, with wrk or a
//! built-in load generator.

use std::process::Command;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::args::Opts;
use crate::common::Redis;
use crate::harness::{rss_kib, sidecar, wait_for};
use crate::report::{Report, Spec, fmt_val, ms, pct};

/// The p99 bound (ms) the throughput target is measured at.
const P99_BOUND: f64 = 2.0;

pub fn run(o: &Opts, rep: &mut Report, nodes: &[&Redis], rt: &tokio::runtime::Runtime) {
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
                let dur = Duration::from_secs(secs as u64);
                rt.block_on(builtin_load(s.api_port, conns, dur))
            }
        };
        let p50_note = format!("p50 {} ms", fmt_val(p50));
        rep.add(
            sec,
            vec![
                Spec::info(
                    &format!("{conns} connections: requests/s"),
                    rps,
                    "req/s",
                    &p50_note,
                ),
                Spec::info(&format!("{conns} connections: latency p99"), p99, "ms", ""),
            ],
        );
        if p99 <= P99_BOUND && best.is_none_or(|(r, _, _)| rps > r) {
            best = Some((rps, p99, conns));
        }
    }
    let (rps, p99, conns) = best.unwrap_or((0.0, f64::NAN, 0));
    let note =
        format!("{tool}; best point: {conns} connections; load generator on the same 2 cores");
    let rss = rss_kib(s.pid()).unwrap_or(f64::NAN) / 1024.0;
    rep.add(
        sec,
        vec![
            Spec::at_least(
                "GET /leader requests/s with p99 <= 2 ms",
                rps,
                "req/s",
                20_000.0,
                &note,
            ),
            Spec::at_most("GET /leader p99 at that rate", p99, "ms", P99_BOUND, ""),
            Spec::info("sidecar RSS after the load", rss, "MiB", ""),
        ],
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

/// A wrk latency ("812.00us", "1.20ms", "2.00s") in ms.
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
    let tasks: Vec<_> = (0..conns)
        .map(|_| tokio::spawn(keep_alive_client(port, end)))
        .collect();
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

/// One connection of [`builtin_load`] until `end`: the latency (ms) of every request.
async fn keep_alive_client(port: u16, end: Instant) -> Vec<f64> {
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
        if r.read_exact(&mut body).await.is_err() {
            break;
        }
        lat.push(ms(t.elapsed()));
    }
    lat
}

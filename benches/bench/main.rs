//! The benchmark suite: what users feel (handover, failover, `/leader` latency, fan-out) and what
//! the sidecar costs (memory, CPU, binary size, Redis commands), with the `rslock` crate side by
//! side for the raw lock round trip. Real `redis-server` processes on loopback ports and the real
//! release binary; every figure is printed next to its target as met / not met.
//!
//!   cargo bench --bench bench -- [--quick | --smoke] [--json] [--only SECTION,...] [--against COMMIT]
//!   ./scripts/bench.sh [--quick] [--json]
//!
//! Every run also writes the results file ([`results`]): a full or `--only` run updates
//! docs/results/figures.{json,md} (the sections it measured; the others keep their own run), a
//! `--quick` run writes the same under the target directory instead.
//!
//! Sections (`args::SECTIONS`): `acquire`, `tls`, `handover`, `restart`, `failover`, `rollout`, `load`,
//! `fanout`, `footprint`, `fleet`, `shards`, `binary`; `endpoints` and `real-node` are scripts/bench.sh's;
//! `--against COMMIT` runs the single-lease ones with that commit's binary too ([`against`]). `--quick` runs few
//! iterations; `--smoke` (the test command's, scripts/check-bench.sh) a tenth of those, every
//! section's code once, its figures meaningless; figures are printed, nothing ever fails on timing. The process exits
//! non-zero only when the benchmark itself breaks (a sidecar that never leads, a missing
//! `redis-server`). Run by `cargo test --all-targets` (a debug build, no arguments) it does
//! nothing. See the README (Performance) and docs/performance.md.
//!
//! Layout: [`args`] the command line, [`report`] the figures and their printing, [`results`] the
//! results file the docs include, [`resp`] the one RESP client, [`floors`] and [`direct`] the
//! hand-written clients the acquire figures are compared with, [`harness`] the bench's side of
//! the test kit (`testkit`), [`scenarios`] one module per section.

mod against;
mod args;
mod direct;
mod floors;
mod harness;
mod report;
mod resp;
mod results;
mod scenarios;

// The harness the integration tests share (real redis-server, the real binary) and its fault
// proxy.
use testkit::{common, fault};

use std::io::Write;
use std::time::{Duration, Instant};

use args::Opts;
use common::Redis;
use harness::wait_quarantine;
use report::Report;

fn main() {
    let Some(o) = Opts::parse_run() else {
        eprintln!(
            "benches/bench: not run under `cargo test`; use `cargo bench --bench bench` or ./scripts/bench.sh"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let load = loadavg();
    eprintln!(
        "redlock-elector benchmark ({} mode), {} CPUs, load average {}",
        mode(&o),
        cpus(),
        first_three(&load)
    );
    let started = Instant::now();
    let rep = match o.against.as_deref() {
        Some(rev) => against::run(&o, rev, |sub| run_sections(&rt, sub)),
        None => run_sections(&rt, &o),
    };
    let load_after = loadavg();
    eprintln!(
        "== done in {:.0}s; load average now {}",
        started.elapsed().as_secs_f64(),
        first_three(&load_after)
    );
    let mut out = std::io::stdout();
    if o.json {
        let doc = serde_json::json!({
            "mode": mode(&o),
            "cpus": cpus(),
            "load_before": load.trim(),
            "load_after": load_after.trim(),
            "rows": rep.rows,
        });
        let text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        let _ = writeln!(out, "{text}");
    } else {
        rep.print_table(&mut out);
    }
    let dir = if o.quick {
        results::quick_dir()
    } else {
        results::committed_dir()
    };
    // Nothing measured (a debug run, `--only endpoints`): nothing to replace.
    if !rep.rows.is_empty() {
        let run = results::this_run(&load, &load_after);
        match results::write(&dir, &rep.rows, run) {
            Ok(()) => eprintln!("== results file: {}/figures.md", dir.display()),
            Err(e) => {
                eprintln!(
                    "benches/bench: writing the results file in {}: {e}",
                    dir.display()
                );
                std::process::exit(1);
            }
        }
    }
    rt.shutdown_background();
}

/// Every section `o` asks for, in order, on shared nodes.
fn run_sections(rt: &tokio::runtime::Runtime, o: &Opts) -> Report {
    // Five shared nodes (ttl 1s sections) and three dedicated ones (footprint, Redis load).
    let shared: Vec<Redis> = (0..5).map(|_| Redis::start()).collect();
    let dedicated: Vec<Redis> = if o.wants("footprint") || o.wants("fleet") || o.wants("shards") {
        (0..3).map(|_| Redis::start()).collect()
    } else {
        vec![]
    };
    let three: Vec<&Redis> = shared.iter().take(3).collect();
    wait_quarantine(&shared.iter().collect::<Vec<_>>(), Duration::from_secs(1));
    let mut rep = Report::default();
    if o.wants("acquire") {
        scenarios::acquire::run(rt, o, &mut rep, &shared);
    }
    if o.wants("tls") {
        scenarios::tls::run(rt, o, &mut rep, &three);
    }
    if o.wants("handover") {
        scenarios::handover::run(rt, o, &mut rep, &three);
    }
    if o.wants("restart") {
        scenarios::restart::run(rt, o, &mut rep, &three);
    }
    if o.wants("failover") {
        scenarios::failover::run(rt, o, &mut rep, &three);
    }
    if o.wants("run") {
        scenarios::run::run(o, &mut rep, &three);
    }
    if o.wants("rollout") {
        scenarios::rollout::run(o, &mut rep, &shared[..3]);
    }
    if o.wants("load") {
        scenarios::load::run(o, &mut rep, &three, rt);
    }
    if o.wants("fanout") {
        scenarios::fanout::run(rt, o, &mut rep, &three);
    }
    if o.wants("footprint") {
        scenarios::footprint::run(o, &mut rep, &dedicated.iter().collect::<Vec<_>>());
    }
    if o.wants("fleet") {
        scenarios::fleet::run(o, &mut rep, &dedicated.iter().collect::<Vec<_>>());
    }
    if o.wants("shards") {
        scenarios::shards::run(o, &mut rep, &dedicated.iter().collect::<Vec<_>>());
    }
    if o.wants("binary") {
        scenarios::footprint::binary_size(&mut rep);
    }
    rep
}

fn mode(o: &Opts) -> &'static str {
    o.pick("full", "quick", "smoke")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// `/proc/loadavg`, empty where there is none.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").unwrap_or_default()
}

/// The 1, 5 and 15 minute load averages of a `/proc/loadavg` line.
fn first_three(loadavg: &str) -> String {
    loadavg
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

//! `redlock-elector run -- CMD`: the handover from one command's exit to the next command's
//! start, on the commands' own records (`tests/exec/lease-child.c`).

use std::time::{Duration, Instant};

use crate::args::Opts;
use crate::common::{Opts as SidecarOpts, Redis, Sidecar, gaps, lease_child, lives, overlaps};
use crate::report::{Report, Spec, ms, pct};

/// The sidecars' lease ttl in this section.
const TTL: Duration = Duration::from_secs(1);
/// How long each command runs before it exits by itself.
const RUNS_FOR: &str = "exit:300";

pub fn run(o: &Opts, rep: &mut Report, nodes: &[&Redis]) {
    eprintln!(
        "== run -- CMD: each command exits by itself after 300 ms; 4 run processes (--on-child-exit contend), 3 nodes, ttl 1s"
    );
    let dir = testkit::common::tempdir();
    let file = dir.path().join("lives");
    let child = lease_child();
    let runs: Vec<Sidecar> = (0..4)
        .map(|i| {
            let id = format!("run{i}");
            let opts = SidecarOpts {
                lease: "bench-run".into(),
                extra: [
                    "--on-child-exit",
                    "contend",
                    "run",
                    "--",
                    &child.to_string_lossy(),
                    &file.to_string_lossy(),
                    &id,
                    RUNS_FOR,
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
                ..SidecarOpts::default()
            };
            Sidecar::start(&id, nodes, &opts)
        })
        .collect();
    let want = o.n(40, 5) + 1;
    let end = Instant::now() + Duration::from_secs(want as u64 * 2 + 20);
    while lives(&file).len() < want + 1 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(runs);
    let all = lives(&file);
    assert!(
        all.len() > want,
        "only {} commands started: {all:#?}",
        all.len()
    );
    let overlapping = overlaps(&all).len();
    if overlapping > 0 {
        eprintln!("!! two commands ran at once: {:#?}", overlaps(&all));
    }
    // The first start waits for the clock watch; every later one is a handover.
    let g: Vec<f64> = gaps(&all).into_iter().map(ms).collect();
    let note = format!("{} handovers, ttl {:?}", g.len(), TTL);
    #[rustfmt::skip]
    rep.add("run", vec![
        Spec::info("command exit -> next command start p50", pct(&g, 0.5), "ms", &note),
        Spec::info("command exit -> next command start p99", pct(&g, 0.99), "ms", "the exit's release names a successor; the guard and the command are started by exec"),
        Spec::info("command exit -> next command start max", pct(&g, 1.0), "ms", ""),
        Spec::info("pairs of commands overlapping", overlapping as f64, "", "by the commands' own records (the suite asserts 0)"),
    ]);
}

//! Rolling replacements, with the driver the integration tests use.

use crate::args::Opts;
use crate::common::{self, Redis};
use crate::report::{Report, Spec};

/// Rolling replacements (3 sidecars of priority 1 by 3 of priority 2, surge 1, the leader
/// terminated at each position of the order in turn), the driver `tests/rollout.rs` uses: the
/// leadership changes per rollout and the longest leaderless gap, for each preference.
pub fn run(o: &Opts, rep: &mut Report, nodes: &[Redis]) {
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
        let per_rollout = format!("per rollout: {}", counts.join(", "));
        let over = format!("over {runs} rollouts");
        let longest = gaps.iter().copied().fold(0.0, f64::max);
        rep.add(
            "rollout",
            vec![
                Spec::info(
                    &format!("prefer {prefer}: leadership changes per rollout (mean)"),
                    mean,
                    "changes",
                    &per_rollout,
                ),
                Spec::info(
                    &format!("prefer {prefer}: longest leaderless gap"),
                    longest,
                    "ms",
                    &over,
                ),
            ],
        );
    }
}

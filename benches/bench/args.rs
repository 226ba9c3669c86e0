//! The command line: `cargo bench --bench bench -- [--quick] [--json] [--only SECTION,...]`.

use clap::{CommandFactory, Parser};

/// Every section, in the order they run; `--only` takes a comma-separated subset. `endpoints`
/// and `real-node` are run by scripts/bench.sh (control-plane tests), not here: they are accepted
/// and skipped.
pub const SECTIONS: &[&str] = &[
    "acquire",
    "tls",
    "handover",
    "restart",
    "failover",
    "run",
    "rollout",
    "load",
    "fanout",
    "footprint",
    "fleet",
    "shards",
    "binary",
    "endpoints",
    "real-node",
];

/// The benchmark suite of redlock-elector: real redis-servers and the release binary, every
/// figure printed next to its target as met / not met.
#[derive(Parser, Debug, Clone)]
#[command(name = "bench", bin_name = "cargo bench --bench bench --")]
pub struct Opts {
    /// Few iterations: figures are printed, nothing fails on timing.
    #[arg(long)]
    pub quick: bool,
    /// The test command's smoke (scripts/check-bench.sh): every section's code once, with the
    /// fewest iterations and the shortest windows that still take it through (a tenth of
    /// `--quick`'s, at least one), so a broken benchmark fails the tests. Implies `--quick`
    /// (nothing written to docs/); its figures mean nothing.
    #[arg(long)]
    pub smoke: bool,
    /// Print the figures as JSON on stdout (progress stays on stderr).
    #[arg(long)]
    pub json: bool,
    /// All iterations (the default; accepted so a script can say so).
    #[arg(long)]
    pub full: bool,
    /// Run only these sections (comma-separated).
    #[arg(long, value_delimiter = ',', value_parser = clap::builder::PossibleValuesParser::new(SECTIONS))]
    pub only: Option<Vec<String>>,
    /// Run the single-lease sections (`handover`, `restart`, `failover`, `load`, or those of
    /// `--only` among them) with this commit's binary too, built from git and kept under the
    /// target directory, alternating with this tree's binary in one run, and print both with
    /// their ratio (section `against`).
    #[arg(long, value_name = "COMMIT")]
    pub against: Option<String>,
    /// Passed by `cargo bench`; marks a benchmark run, like any option of ours.
    #[arg(long, hide = true)]
    pub bench: bool,
    /// Benchmark name filters `cargo bench NAME` passes on: ignored.
    #[arg(hide = true)]
    pub filters: Vec<String>,
}

impl Opts {
    /// `None` when started without `--bench` and without any option of ours: that is
    /// `cargo test --all-targets`, which builds bench targets in the test profile and runs them
    /// with the test harness's arguments (`--test-threads=2 --skip cp_`, filters), not ours. A
    /// benchmark in a debug build measures nothing; it is skipped.
    pub fn parse_run() -> Option<Opts> {
        // Our long options as clap knows them (not a second list to keep in step), and help.
        let mut ours: Vec<String> = Opts::command()
            .get_arguments()
            .filter_map(|a| a.get_long())
            .map(|l| format!("--{l}"))
            .collect();
        ours.extend(["--help".into(), "-h".into()]);
        let is_ours = |a: &str| {
            ours.iter()
                .any(|o| a == o || a.starts_with(&format!("{o}=")))
        };
        std::env::args()
            .skip(1)
            .any(|a| is_ours(&a))
            .then(Opts::parse)
            .map(|mut o| {
                o.quick |= o.smoke;
                o
            })
    }

    /// Whether `section` runs.
    pub fn wants(&self, section: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|v| v.iter().any(|s| s == section))
    }

    /// Iterations (or seconds): full, quick, or a smoke's tenth of quick (at least one).
    pub fn n(&self, full: usize, quick: usize) -> usize {
        self.pick(full, quick, quick.div_ceil(10).max(1))
    }

    /// A size of each mode's own: full, quick or smoke.
    pub fn pick<T>(&self, full: T, quick: T, smoke: T) -> T {
        if self.smoke {
            smoke
        } else if self.quick {
            quick
        } else {
            full
        }
    }
}

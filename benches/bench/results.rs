//! The results file: `docs/results/figures.json` keeps every figure with the run that measured
//! it, and `docs/results/figures.md` is the same as Markdown, which docs/performance.md includes
//! (its Results section), so no page keeps figures of its own.
//!
//! A run replaces the figures of the sections it measured and keeps every other figure with its
//! own run: `--only handover` updates the handover rows and leaves the rest as they were. Figures
//! this binary does not measure (the control-plane and image ones) are kept the same way, under
//! the run that measured them. A `--quick` run (CI) never writes docs/: it writes the merged
//! result under the target directory (`target/bench-results/`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::report::{Row, fmt_val, status};

/// The section order of the files; sections not listed (kept from elsewhere) come last.
const ORDER: &[&str] = &[
    "acquire",
    "tls",
    "handover",
    "restart",
    "failover",
    "margin",
    "run",
    "rollout",
    "load",
    "fanout",
    "footprint",
    "redis-load",
    "fleet",
    "shards",
    "binary",
    "against",
];

/// Both files, as stored in figures.json.
#[derive(Serialize, Deserialize, Default)]
pub struct Results {
    /// Every run that still has a figure in `figures`, newest first.
    pub runs: Vec<Run>,
    /// Every figure, in section order.
    pub figures: Vec<Figure>,
}

/// Where and when figures were measured.
#[derive(Serialize, Deserialize, Clone)]
pub struct Run {
    /// Names the run in `Figure::run`: when it ended and wrote the file, `YYYY-MM-DD HH:MM UTC`.
    pub id: String,
    /// The commit measured (short hash), "+ local changes" when the code differed from it.
    pub commit: String,
    /// The command that ran it.
    pub command: String,
    /// CPUs, CPU model, kernel, Redis version.
    pub machine: String,
    /// Load average (1 minute) before → after, so a reader can tell a busy machine.
    pub load: String,
}

/// One figure, as the report printed it.
#[derive(Serialize, Deserialize, Clone)]
pub struct Figure {
    /// The section that measured it (`--only` names).
    pub section: String,
    /// What was measured, unique within the section.
    pub name: String,
    /// The figure, in `unit`. A figure that could not be measured (NaN, shown as `n/a`) is
    /// written as JSON `null` and read back as NaN.
    #[serde(deserialize_with = "nan_if_null")]
    pub value: f64,
    /// Its unit.
    pub unit: String,
    /// Its target as text, e.g. "<= 10.0".
    pub target: Option<String>,
    /// Whether it meets the target.
    pub met: Option<bool>,
    /// How it was measured.
    pub note: String,
    /// `Run::id` of the run that measured it.
    pub run: String,
    /// The value as its source wrote it, for a figure kept from elsewhere (`7.1`, not `7.10`);
    /// the benchmark's own figures have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shown: Option<String>,
}

impl Figure {
    /// The value cell: `0.731 ms`.
    fn value_text(&self) -> String {
        let v = self.shown.clone().unwrap_or_else(|| fmt_val(self.value));
        format!("{v} {}", self.unit)
    }
}

impl From<(&Row, &str)> for Figure {
    fn from((r, run): (&Row, &str)) -> Self {
        Figure {
            section: r.section.to_string(),
            name: r.name.clone(),
            value: r.value,
            unit: r.unit.to_string(),
            target: r.target.clone(),
            met: r.met,
            note: r.note.clone(),
            run: run.to_string(),
            shown: None,
        }
    }
}

/// The committed results directory (`cargo bench` runs the binary in the package root, but the
/// path does not rely on it).
pub fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/results")
}

/// Where a quick run writes: the target directory, never docs/.
pub fn quick_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"))
        .join("bench-results")
}

/// Merge this run's `rows` into the committed results and write both files into `dir`.
pub fn write(dir: &Path, rows: &[Row], run: Run) -> std::io::Result<()> {
    let committed = committed_dir().join("figures.json");
    let mut res: Results = match std::fs::read_to_string(&committed) {
        Ok(text) => serde_json::from_str(&text)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", committed.display())))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Results::default(),
        Err(e) => return Err(e),
    };
    res.merge(rows, run);
    std::fs::create_dir_all(dir)?;
    let json = serde_json::to_string_pretty(&res).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("figures.json"), json + "\n")?;
    std::fs::write(dir.join("figures.md"), res.markdown())?;
    Ok(())
}

impl Results {
    /// Replace the figures of every section in `rows` by `rows`; keep the others and their runs.
    fn merge(&mut self, rows: &[Row], run: Run) {
        let measured: BTreeSet<&str> = rows.iter().map(|r| r.section).collect();
        self.figures
            .retain(|f| !measured.contains(f.section.as_str()));
        self.figures
            .extend(rows.iter().map(|r| Figure::from((r, run.id.as_str()))));
        let rank = |s: &str| ORDER.iter().position(|o| *o == s).unwrap_or(ORDER.len());
        // Stable: rows keep their order within a section, kept sections theirs among themselves.
        self.figures.sort_by_key(|f| rank(&f.section));
        self.runs.retain(|r| r.id != run.id);
        self.runs.insert(0, run);
        let used: BTreeSet<&str> = self.figures.iter().map(|f| f.run.as_str()).collect();
        self.runs.retain(|r| used.contains(r.id.as_str()));
    }

    /// figures.md: the figures with a target, every figure, the runs. mdBook's include markers
    /// (`ANCHOR`) let a page include one part.
    pub fn markdown(&self) -> String {
        let num = |id: &str| {
            self.runs
                .iter()
                .position(|r| r.id == id)
                .map_or("?".to_string(), |i| (i + 1).to_string())
        };
        let cell = |s: &str| s.replace('|', "\\|");
        let mut md = String::new();
        md.push_str(
            "<!-- Written by the benchmark (scripts/bench.sh; benches/bench/results.rs) with \
             figures.json beside it: do not edit by hand. -->\n\n",
        );
        md.push_str("<!-- ANCHOR: targets -->\n");
        md.push_str("| figure | value | target | | run |\n|---|---:|---|---|---|\n");
        for f in self.figures.iter().filter(|f| f.target.is_some()) {
            // The short table puts a missed target in bold.
            let status = match f.met {
                Some(false) => "**NOT MET**",
                met => status(met),
            };
            let _ = writeln!(
                md,
                "| {}: {} | {} | {} {} | {status} | {} |",
                f.section,
                cell(&f.name),
                f.value_text(),
                f.target.as_deref().unwrap_or_default(),
                f.unit,
                num(&f.run)
            );
        }
        md.push_str("<!-- ANCHOR_END: targets -->\n\n");
        md.push_str("<!-- ANCHOR: runs -->\n");
        md.push_str(
            "| run | finished | commit | command | machine | load average before → after |\n\
             |---|---|---|---|---|---|\n",
        );
        for (i, r) in self.runs.iter().enumerate() {
            let _ = writeln!(
                md,
                "| {} | {} | `{}` | `{}` | {} | {} |",
                i + 1,
                r.id,
                r.commit,
                cell(&r.command),
                cell(&r.machine),
                r.load
            );
        }
        md.push_str("<!-- ANCHOR_END: runs -->\n\n");
        md.push_str("<!-- ANCHOR: all -->\n");
        md.push_str(
            "| section | figure | value | target | status | note | run |\n\
             |---|---|---:|---|---|---|---|\n",
        );
        for f in &self.figures {
            let target = f
                .target
                .as_deref()
                .map(|t| format!("{t} {}", f.unit))
                .unwrap_or_default();
            let status = status(f.met);
            let _ = writeln!(
                md,
                "| {} | {} | {} | {target} | {status} | {} | {} |",
                f.section,
                cell(&f.name),
                f.value_text(),
                cell(&f.note),
                num(&f.run)
            );
        }
        md.push_str("<!-- ANCHOR_END: all -->\n");
        md
    }
}

/// This run: its end (now), commit, command line, machine and load.
pub fn this_run(load_before: &str, load_after: &str) -> Run {
    let id = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    // "2026-11-28T16:05:09Z" -> "2026-11-28 16:05 UTC"
    let id = format!("{} {} UTC", &id[..10], &id[11..16]);
    let head = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // Only the code counts: edits to the docs (the results file among them) change no figure.
    let dirty = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":!docs",
        ":!*.md",
    ])
    .is_some_and(|s| !s.is_empty());
    let commit = if dirty {
        format!("{head} + local changes")
    } else {
        head
    };
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let command = format!("cargo bench --bench bench -- {}", args.join(" "))
        .trim_end()
        .to_string();
    let first = |l: &str| l.split_whitespace().next().unwrap_or("?").to_string();
    Run {
        id,
        commit,
        command,
        machine: machine(),
        load: format!("{} → {}", first(load_before), first(load_after)),
    }
}

/// "2 CPUs (AMD EPYC …), Linux 6.18.0, Redis 7.0.15".
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into());
    let redis = Command::new("redis-server")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            out.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(str::to_string))
        })
        .unwrap_or_else(|| "?".into());
    format!("{cpus} CPUs ({model}), Linux {kernel}, Redis {redis}")
}

/// `git ARGS` in the repository, trimmed; `None` if git fails.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `null` (how serde_json writes a NaN) as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

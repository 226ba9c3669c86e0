//! `--against COMMIT`: the single-lease figures of this tree and of another commit, measured in
//! one run (issue 37: "the single-lease benchmark figures do not get worse … compare them in the
//! same run").
//!
//! The other commit's binary is built from git by the test kit ([`testkit::previous::build`],
//! cached under the target directory). The sections run in rounds, and each round runs them once
//! with each binary, the order alternating (ours first in even rounds), so a drift of the
//! machine's load falls on both alike. Each figure is the median over the rounds; the report
//! gives both and their ratio (ours / theirs) in section `against`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use crate::args::Opts;
use crate::common;
use crate::report::{Report, Row, Spec};

/// The sections whose figures are the sidecar's with one lease, in the order they run.
pub const SINGLE_LEASE: &[&str] = &["handover", "restart", "failover", "load"];

const SECTION: &str = "against";

/// The full hash of `rev` in this repository; a panic with git's answer otherwise.
fn full_hash(rev: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(testkit::repo())
        .args(["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
        .output()
        .expect("git: install it (apt-get install git)");
    assert!(
        out.status.success(),
        "--against {rev}: not a commit here: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Figures by (section, name): unit, direction ("<=" / ">=" of its target, if any), one value
/// per round.
type Collected = BTreeMap<(&'static str, String), (&'static str, Option<String>, Vec<f64>)>;

fn collect(into: &mut Collected, rows: &[Row]) {
    for r in rows {
        let dir = r
            .target
            .as_deref()
            .and_then(|t| t.split_whitespace().next())
            .map(str::to_string);
        let e = into
            .entry((r.section, r.name.clone()))
            .or_insert((r.unit, dir, Vec::new()));
        e.2.push(r.value);
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Run the single-lease sections of `o` with both binaries; `run_sections` runs the sections
/// of the options it is given.
pub fn run(o: &Opts, rev: &str, run_sections: impl Fn(&Opts) -> Report) -> Report {
    let commit = full_hash(rev);
    let short = &commit[..7];
    eprintln!("== against {short}: building or finding its binary");
    let theirs = testkit::previous::build(&commit);
    eprintln!(
        "   {} ({}, {:.0} s)",
        theirs.path.display(),
        if theirs.cached { "cached" } else { "built" },
        theirs.took.as_secs_f64()
    );
    let ours = PathBuf::from(common::binary());
    let sections: Vec<String> = SINGLE_LEASE
        .iter()
        .filter(|s| o.only.is_none() || o.wants(s))
        .map(|s| s.to_string())
        .collect();
    assert!(
        !sections.is_empty(),
        "--against compares {SINGLE_LEASE:?}; --only names none of them"
    );
    let sub = Opts {
        only: Some(sections),
        against: None,
        ..o.clone()
    };
    let rounds = if o.quick { 1 } else { 2 };
    let (mut mine, mut other) = (Collected::new(), Collected::new());
    for round in 0..rounds {
        for ours_now in [round % 2 == 0, round % 2 == 1] {
            let (who, bin) = if ours_now {
                ("this tree", &ours)
            } else {
                (short, &theirs.path)
            };
            eprintln!("== against, round {} of {rounds}: {who}", round + 1);
            common::use_binary(Some(bin));
            let rep = run_sections(&sub);
            collect(if ours_now { &mut mine } else { &mut other }, &rep.rows);
        }
    }
    common::use_binary(None);
    let mut rep = Report::default();
    for ((section, name), (unit, dir, values)) in &mine {
        let Some((_, _, theirs)) = other.get(&(*section, name.clone())) else {
            continue;
        };
        let (a, b) = (median(values), median(theirs));
        let better = match dir.as_deref() {
            Some("<=") => "lower is better",
            Some(">=") => "higher is better",
            _ => "",
        };
        let figure = format!("{section}: {name}");
        rep.push(
            SECTION,
            Spec::info(
                &format!("{figure}: this tree"),
                a,
                unit,
                &format!("median of {rounds}"),
            ),
        );
        rep.push(
            SECTION,
            Spec::info(&format!("{figure}: {short}"), b, unit, ""),
        );
        rep.push(
            SECTION,
            Spec::info(
                &format!("{figure}: this tree / {short}"),
                a / b,
                "×",
                better,
            ),
        );
    }
    rep
}

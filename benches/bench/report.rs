//! The figures: each printed to stderr as it is measured, then all of them as a Markdown table
//! or as JSON on stdout, and into the results file ([`crate::results`]).

use std::io::Write;
use std::time::{Duration, Instant};

use serde::Serialize;

/// One printed figure.
#[derive(Serialize, Clone)]
pub struct Row {
    /// The section that measured it (`--only` names).
    pub section: &'static str,
    /// What was measured, unique within the section.
    pub name: String,
    /// The figure itself, in `unit`.
    pub value: f64,
    /// The unit of `value` and of the target.
    pub unit: &'static str,
    /// The target as text, e.g. "<= 10 ms".
    pub target: Option<String>,
    /// Whether `value` meets the target; `None` without one.
    pub met: Option<bool>,
    /// How it was measured, for the reader of the table.
    pub note: String,
}

/// A figure's target: `value <= limit`, or `value >= limit` when `at_least`.
#[derive(Clone, Copy)]
pub struct Goal {
    /// The bound.
    pub limit: f64,
    /// The bound is a minimum (throughput), not a maximum (latency, size).
    pub at_least: bool,
}

impl Goal {
    fn met(self, value: f64) -> bool {
        if self.at_least {
            value >= self.limit
        } else {
            value <= self.limit
        }
    }

    fn text(self) -> String {
        let op = if self.at_least { ">=" } else { "<=" };
        format!("{op} {}", fmt_val(self.limit))
    }
}

/// One figure for [`Report::add`].
pub struct Spec<'a> {
    /// What was measured.
    pub name: &'a str,
    /// The figure, in `unit`.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// Its target, if it has one.
    pub goal: Option<Goal>,
    /// How it was measured.
    pub note: &'a str,
}

impl<'a> Spec<'a> {
    /// A figure without a target.
    pub fn info(name: &'a str, value: f64, unit: &'static str, note: &'a str) -> Self {
        Spec {
            name,
            value,
            unit,
            goal: None,
            note,
        }
    }

    /// A figure whose target is `value <= limit`.
    pub fn at_most(
        name: &'a str,
        value: f64,
        unit: &'static str,
        limit: f64,
        note: &'a str,
    ) -> Self {
        Spec::info(name, value, unit, note).goal(limit, false)
    }

    /// A figure whose target is `value >= limit`.
    pub fn at_least(
        name: &'a str,
        value: f64,
        unit: &'static str,
        limit: f64,
        note: &'a str,
    ) -> Self {
        Spec::info(name, value, unit, note).goal(limit, true)
    }

    /// This figure with a target.
    fn goal(self, limit: f64, at_least: bool) -> Self {
        Spec {
            goal: Some(Goal { limit, at_least }),
            ..self
        }
    }
}

/// Every figure measured so far, in order.
#[derive(Default)]
pub struct Report {
    /// Printed as a table or JSON at the end.
    pub rows: Vec<Row>,
}

impl Report {
    /// Record and print one figure of `section`.
    pub fn push(&mut self, section: &'static str, spec: Spec) {
        let row = Row {
            section,
            name: spec.name.to_string(),
            value: spec.value,
            unit: spec.unit,
            target: spec.goal.map(Goal::text),
            met: spec.goal.map(|g| g.met(spec.value)),
            note: spec.note.to_string(),
        };
        let (name, value, unit) = (&row.name, fmt_val(row.value), row.unit);
        match (&row.target, row.met) {
            (Some(t), Some(met)) => eprintln!(
                "  {name:<52} {value:>12} {unit} (target {t}: {})",
                if met { "met" } else { "NOT MET" }
            ),
            _ => eprintln!("  {name:<52} {value:>12} {unit}"),
        }
        self.rows.push(row);
    }

    /// Record and print the figures of one section, in order.
    pub fn add(&mut self, section: &'static str, specs: Vec<Spec>) {
        for spec in specs {
            self.push(section, spec);
        }
    }

    /// The Markdown table of every figure.
    pub fn print_table(&self, out: &mut dyn Write) {
        let _ = writeln!(
            out,
            "| section | figure | value | target | status | note |\n|---|---|---:|---|---|---|"
        );
        for r in &self.rows {
            let target = r.target.as_deref().map(|t| format!("{t} {}", r.unit));
            let status = status(r.met);
            let _ = writeln!(
                out,
                "| {} | {} | {} {} | {} | {status} | {} |",
                r.section,
                r.name,
                fmt_val(r.value),
                r.unit,
                target.unwrap_or_default(),
                r.note
            );
        }
    }
}

/// A figure with about three significant digits; NaN (not measured) as "n/a".
/// A figure's status against its target, as the tables print it: `met`, `NOT MET`, or nothing
/// for a figure without a target.
pub fn status(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "NOT MET",
        None => "",
    }
}

pub fn fmt_val(v: f64) -> String {
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
pub fn pct(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1;
    s[i]
}

/// A duration in milliseconds, the unit of most figures.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Signed milliseconds from `a` to `b`.
pub fn ms_between(a: Instant, b: Instant) -> f64 {
    if b >= a { ms(b - a) } else { -ms(a - b) }
}

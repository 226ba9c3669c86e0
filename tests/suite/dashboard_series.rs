//! No "No data" on a healthy dashboard: a fresh sidecar's `/metrics` already has a series for
//! every vector selector of every panel of the Grafana dashboard and of every alert expression
//! (`charts/redlock-elector/files/`). The selectors are parsed out of the PromQL (metric name and
//! label matchers), not kept by hand: a new panel is checked the day it is added.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use testkit::common::*;

/// One label matcher of a selector: `label op "value"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matcher {
    pub label: String,
    pub op: String,
    pub value: String,
}

/// A vector selector: `name{matchers}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    pub name: String,
    pub matchers: Vec<Matcher>,
}

/// PromQL's aggregation operators: `sum by (x) (...)` puts a clause between them and `(`.
const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];

/// PromQL words that are not metric names when they stand alone.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
];

/// The vector selectors of a PromQL expression: every identifier that is not a function or
/// aggregation (followed by `(`), a keyword, or a label of a `by (...)`/`on (...)` list, with
/// the matchers in the braces after it. Strings, numbers and `[range]`s are skipped.
/// (Every metric here is `redlock_elector_*`; none is named like an aggregation.)
pub fn selectors(expr: &str) -> Vec<Selector> {
    let c: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < c.len() && c[*i].is_whitespace() {
            *i += 1;
        }
    };
    let ident = |i: &mut usize| -> String {
        let start = *i;
        while *i < c.len() && (c[*i].is_ascii_alphanumeric() || c[*i] == '_' || c[*i] == ':') {
            *i += 1;
        }
        c[start..*i].iter().collect()
    };
    let string = |i: &mut usize| -> String {
        let q = c[*i];
        *i += 1;
        let mut s = String::new();
        while *i < c.len() && c[*i] != q {
            if c[*i] == '\\' && *i + 1 < c.len() {
                *i += 1;
            }
            s.push(c[*i]);
            *i += 1;
        }
        *i += 1;
        s
    };
    let mut label_list_next = false;
    while i < c.len() {
        let ch = c[i];
        if ch.is_whitespace() {
            i += 1;
        } else if ch == '"' || ch == '\'' || ch == '`' {
            string(&mut i);
        } else if ch == '[' {
            while i < c.len() && c[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if ch == '(' && label_list_next {
            while i < c.len() && c[i] != ')' {
                i += 1;
            }
            i += 1;
            label_list_next = false;
        } else if ch.is_ascii_alphabetic() || ch == '_' || ch == ':' {
            let word = ident(&mut i);
            let mut j = i;
            skip_ws(&mut j);
            let lower = word.to_ascii_lowercase();
            if KEYWORDS.contains(&lower.as_str()) {
                label_list_next = matches!(
                    lower.as_str(),
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                );
                continue;
            }
            if (j < c.len() && c[j] == '(') || AGGREGATIONS.contains(&lower.as_str()) {
                continue; // a function or an aggregation
            }
            let mut sel = Selector {
                name: word,
                matchers: Vec::new(),
            };
            if j < c.len() && c[j] == '{' {
                i = j + 1;
                loop {
                    skip_ws(&mut i);
                    if i >= c.len() || c[i] == '}' {
                        i += 1;
                        break;
                    }
                    if c[i] == ',' {
                        i += 1;
                        continue;
                    }
                    let label = ident(&mut i);
                    skip_ws(&mut i);
                    let start = i;
                    while i < c.len() && "=!~".contains(c[i]) {
                        i += 1;
                    }
                    let op: String = c[start..i].iter().collect();
                    skip_ws(&mut i);
                    assert!(
                        !label.is_empty() && i < c.len() && "\"'`".contains(c[i]),
                        "cannot parse the matchers of {} in {expr}",
                        sel.name
                    );
                    let value = string(&mut i);
                    sel.matchers.push(Matcher { label, op, value });
                }
            }
            out.push(sel);
        } else if ch.is_ascii_digit() || ch == '.' {
            while i < c.len() && (c[i].is_ascii_alphanumeric() || c[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// One sample line of the text format: name and labels.
fn parse_series(line: &str) -> Option<(String, BTreeMap<String, String>)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let (head, _) = line.rsplit_once(' ')?;
    let Some((name, rest)) = head.split_once('{') else {
        return Some((head.to_string(), BTreeMap::new()));
    };
    let body = rest.strip_suffix('}')?;
    let labels = selectors(&format!("x{{{body}}}"))
        .pop()?
        .matchers
        .into_iter()
        .map(|m| (m.label, m.value))
        .collect();
    Some((name.to_string(), labels))
}

/// Whether a series passes a matcher. A value with a Grafana variable (`$lease`) matches
/// anything: the dashboard fills it with what the series carry.
fn passes(labels: &BTreeMap<String, String>, m: &Matcher) -> bool {
    if m.value.contains('$') {
        return true;
    }
    let v = labels.get(&m.label).map_or("", String::as_str);
    let re = || regex::Regex::new(&format!("^(?:{})$", m.value)).expect("matcher regex");
    match m.op.as_str() {
        "=" => v == m.value,
        "!=" => v != m.value,
        "=~" => re().is_match(v),
        "!~" => !re().is_match(v),
        other => panic!("unknown matcher operator {other}"),
    }
}

/// Every (where, expression) of the dashboard's panels and variables and of the alert rules.
fn expressions() -> Vec<(String, String)> {
    let files = testkit::repo().join("charts/redlock-elector/files");
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(files.join("dashboard.json")).expect("read dashboard.json"),
    )
    .expect("dashboard.json is JSON");
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().expect("panels") {
        for t in p["targets"].as_array().into_iter().flatten() {
            if let Some(e) = t["expr"].as_str() {
                out.push((
                    format!("panel {:?}", p["title"].as_str().unwrap_or("?")),
                    e.to_string(),
                ));
            }
        }
    }
    for v in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(q) = v["definition"].as_str() {
            // label_values(SELECTOR, label): the selector is what must have series.
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.rsplit_once(','))
                .map_or(q, |(sel, _)| sel);
            out.push((
                format!("variable {:?}", v["name"].as_str().unwrap_or("?")),
                inner.to_string(),
            ));
        }
    }
    let alerts: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(files.join("alerts.yaml")).expect("read alerts.yaml"),
    )
    .expect("alerts.yaml is YAML");
    for g in alerts["groups"].as_array().expect("groups") {
        for r in g["rules"].as_array().expect("rules") {
            out.push((
                format!("alert {}", r["alert"].as_str().unwrap_or("?")),
                r["expr"].as_str().expect("expr").to_string(),
            ));
        }
    }
    out
}

#[test]
fn dashboard_series_parser_reads_selectors_and_matchers() {
    let got = selectors(
        "sum by (lease) (increase(redlock_elector_renewals_total{result=\"failed\", \
         lease=~\"$lease\"}[5m])) * on (job, instance) group_left (lease) \
         redlock_elector_lease_info > 2",
    );
    let names: Vec<&str> = got.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "redlock_elector_renewals_total",
            "redlock_elector_lease_info"
        ]
    );
    assert_eq!(
        got[0].matchers[0],
        Matcher {
            label: "result".into(),
            op: "=".into(),
            value: "failed".into()
        }
    );
    assert_eq!(got[0].matchers.len(), 2);
}

#[test]
fn dashboard_series_all_present_on_a_fresh_sidecar() {
    let exprs = expressions();
    assert!(exprs.len() > 30, "found only {} expressions", exprs.len());
    let nodes = redis_cluster(3, Duration::from_secs(1));
    let refs: Vec<&Redis> = nodes.iter().collect();
    let s = Sidecar::start("fresh", &refs, &Opts::default());
    // Fresh and healthy: connected to every node, no fault ever happened.
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        (metric_sum(&s, "redlock_elector_redis_up") == 3.0).then_some(())
    })
    .unwrap_or_else(|| panic!("not connected to the 3 nodes:\n{}", s.logs()));
    let (_, text) = http("GET", s.ops_port, "/metrics").expect("/metrics");
    let series: Vec<(String, BTreeMap<String, String>)> =
        text.lines().filter_map(parse_series).collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (place, expr) in &exprs {
        let sels = selectors(expr);
        assert!(!sels.is_empty(), "{place}: no selector parsed from {expr}");
        for sel in sels {
            checked += 1;
            let found = series
                .iter()
                .any(|(n, l)| *n == sel.name && sel.matchers.iter().all(|m| passes(l, m)));
            if !found {
                missing.push(format!("{place}: {}{:?}", sel.name, sel.matchers));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "a fresh, healthy sidecar has no series for these selectors (the panel or alert would \
         show \"No data\"; initialise the label values at start):\n{}\n\n/metrics:\n{text}",
        missing.join("\n")
    );
    report(
        "dashboard/alert selectors with a series on a fresh sidecar",
        checked,
    );
}

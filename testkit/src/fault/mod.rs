//! Fault injection for the safety tests: the TCP fault proxy ([`proxy`]), the leadership
//! checker ([`checker`], its pure analysis in [`analysis`]), and small helpers. Used with `mod common; mod fault;`.
#![allow(dead_code)]

pub mod analysis;
pub mod checker;
pub mod proxy;

use std::time::Duration;

use crate::common::{Sidecar, http};

/// The value of the first series of `/metrics` named `name` that carries every label in
/// `labels` (other labels may be present too), e.g.
/// `metric(&s, "redlock_elector_redis_quarantined", &[("endpoint", "127.0.0.1:6379")])`.
pub fn metric(s: &Sidecar, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let (status, body) = http("GET", s.ops_port, "/metrics")?;
    assert_eq!(status, 200, "/metrics answered {status}");
    body.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let rest = l.strip_prefix(name)?;
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(r) => r.split_once("} ")?,
            None => ("", rest.strip_prefix(' ')?),
        };
        let all = labels
            .iter()
            .all(|(k, v)| label_text.split(',').any(|p| p == format!("{k}=\"{v}\"")));
        all.then(|| value.trim().parse().ok()).flatten()
    })
}

/// `/healthz` status code, or `None` if the sidecar does not answer within `timeout`.
pub fn healthz(s: &Sidecar, timeout: Duration) -> Option<u16> {
    crate::common::http_timeout("GET", s.ops_port, "/healthz", timeout).map(|(c, _)| c)
}

/// An integer from the environment, or `default`; a malformed value is an error, not a default.
pub fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a non-negative integer")),
    }
}

/// The API ports of sidecar slots that each run one now, for [`checker::Checker::start`].
pub fn api_ports(sidecars: &[Option<Sidecar>]) -> Vec<u16> {
    sidecars
        .iter()
        .map(|s| s.as_ref().expect("every slot runs a sidecar").api_port)
        .collect()
}

/// The S1/S2 findings as text, for assertion messages.
pub fn describe(report: &checker::Report) -> String {
    let mut out = String::new();
    for o in report.overlaps.iter().take(10) {
        out.push_str(&format!(
            "  S1 overlap: sidecar {} (gen {}, token {:?}) and sidecar {} (gen {}, token {:?}) both leader within {:?}..{:?}\n",
            o.a.0, o.a.1, o.a.2, o.b.0, o.b.1, o.b.2, o.from, o.to
        ));
    }
    for v in report.token_violations.iter().take(10) {
        out.push_str(&format!(
            "  S2 violation: term of sidecar {} gen {} with token {} (seen {:?}) came after sidecar {} gen {} with token {} (seen {:?})\n",
            v.later.0, v.later.1, v.later.2, v.later.3, v.earlier.0, v.earlier.1, v.earlier.2, v.earlier.3
        ));
    }
    out.push_str(&format!(
        "  terms observed: {}, tokens in order: {:?}\n",
        report.terms, report.tokens
    ));
    out
}

//! `kubernetes.*`, and the rollout preference whose default depends on it.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use super::MAX_PREFER_SETTLE;
use super::parse::{bool_or, duration_or, fmt_dur, is_dns_label, is_label_key, is_label_value};
use crate::config::file::Text;
use crate::config::settings::{
    EndpointSliceSettings, KubernetesSettings, LabelSettings, LeaseSettings, default,
};
use crate::config::{
    ConfigError, EndpointSliceConfig, Env, KubeEnabled, KubernetesConfig, Prefer, SlicePort, err,
};

/// Where a pod finds its namespace when `POD_NAMESPACE` is not set.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

pub(super) fn validate(
    s: &KubernetesSettings,
    env: &dyn Env,
    leases: &[String],
) -> Result<KubernetesConfig, ConfigError> {
    let enabled = match Text::given(&s.enabled).map(|v| v.trim().to_ascii_lowercase()) {
        None => default::KUBERNETES,
        Some(v) => match v.as_str() {
            "auto" => KubeEnabled::Auto,
            "true" => KubeEnabled::On,
            "false" => KubeEnabled::Off,
            other => {
                return Err(err(
                    "kubernetes.enabled",
                    format!("{other:?} is not one of auto, true, false"),
                ));
            }
        },
    };
    let pod_name = Text::given(&s.pod_name)
        .map(String::from)
        .or_else(|| env.var("POD_NAME").filter(|s| !s.is_empty()));
    let namespace = Text::given(&s.namespace)
        .map(String::from)
        .or_else(|| env.var("POD_NAMESPACE").filter(|s| !s.is_empty()))
        .or_else(|| {
            env.read(Path::new(SERVICE_ACCOUNT_NAMESPACE))
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        });
    let (label_key, label_leader, label_follower) = labels(&s.label)?;
    let kubernetes = KubernetesConfig {
        enabled,
        pod_name,
        namespace,
        label_key,
        label_leader,
        label_follower,
        events: bool_or("kubernetes.events", &s.events, default::EVENTS)?,
        fencing_token_annotation: bool_or(
            "kubernetes.fencingTokenAnnotation",
            &s.fencing_token_annotation,
            default::FENCING_TOKEN_ANNOTATION,
        )?,
        in_cluster: env
            .var("KUBERNETES_SERVICE_HOST")
            .is_some_and(|s| !s.is_empty()),
        pod_ip: pod_ip(s, env)?,
        endpoint_slice: endpoint_slice(&s.endpoint_slice, leases)?,
    };
    if kubernetes.endpoint_slice.is_some() && kubernetes.pod_ip.is_none() {
        return Err(err(
            "kubernetes.podIP",
            "kubernetes.endpointSlice is set but the pod IP is unknown (set POD_IP from the downward API: fieldRef status.podIP)",
        ));
    }
    if kubernetes.is_enabled() && kubernetes.pod_name.is_none() {
        return Err(err(
            "kubernetes.podName",
            "Kubernetes publishing is on but the pod name is unknown (set POD_NAME from the downward API)",
        ));
    }
    Ok(kubernetes)
}

/// `kubernetes.podIP`, else `$POD_IP`: an IPv4 address (the slice's `addressType`).
fn pod_ip(s: &KubernetesSettings, env: &dyn Env) -> Result<Option<Ipv4Addr>, ConfigError> {
    let (field, text) = match Text::given(&s.pod_ip) {
        Some(v) => ("kubernetes.podIP", v.to_string()),
        None => match env.var("POD_IP").filter(|v| !v.is_empty()) {
            Some(v) => ("kubernetes.podIP ($POD_IP)", v),
            None => return Ok(None),
        },
    };
    text.trim().parse::<Ipv4Addr>().map(Some).map_err(|_| {
        err(
            field,
            format!("{text:?} is not an IPv4 address (the EndpointSlice's addressType is IPv4)"),
        )
    })
}

/// The most ports one EndpointSlice holds (the API server's limit).
const MAX_SLICE_PORTS: usize = 100;

/// `kubernetes.endpointSlice.*`; `None` when its name is empty (off).
fn endpoint_slice(
    s: &EndpointSliceSettings,
    leases: &[String],
) -> Result<Option<EndpointSliceConfig>, ConfigError> {
    let Some(name) = Text::given(&s.name) else {
        return Ok(None);
    };
    if !is_dns_subdomain(name) {
        return Err(err(
            "kubernetes.endpointSlice.name",
            format!(
                "{name:?} is not a valid object name (lowercase RFC 1123 subdomain, <= 253 chars)"
            ),
        ));
    }
    let lease = match (Text::given(&s.lease), leases) {
        (Some(l), _) if leases.iter().any(|n| n == l) => l.to_string(),
        (Some(l), _) => {
            return Err(err(
                "kubernetes.endpointSlice.lease",
                format!(
                    "{l:?} is not one of this sidecar's leases ({})",
                    leases.join(", ")
                ),
            ));
        }
        (None, [only]) => only.clone(),
        (None, _) => {
            return Err(err(
                "kubernetes.endpointSlice.lease",
                format!(
                    "required with several leases or shards: name the one whose leader the slice lists (one of {})",
                    leases.join(", ")
                ),
            ));
        }
    };
    let texts: Vec<&str> = s
        .ports
        .iter()
        .flatten()
        .map(|p| p.trim())
        .filter(|p| !p.is_empty())
        .collect();
    if texts.is_empty() || texts.len() > MAX_SLICE_PORTS {
        return Err(err(
            "kubernetes.endpointSlice.ports",
            format!(
                "{} ports given; the slice lists 1..={MAX_SLICE_PORTS} (e.g. [\"http:8080\"])",
                texts.len()
            ),
        ));
    }
    let mut ports: Vec<SlicePort> = Vec::with_capacity(texts.len());
    for t in texts {
        let p = slice_port(t)?;
        if ports.iter().any(|q| q.name == p.name) {
            return Err(err(
                "kubernetes.endpointSlice.ports",
                format!(
                    "{t:?}: the port name {:?} is given twice (each port needs its own name, that of the Service's port)",
                    p.name
                ),
            ));
        }
        ports.push(p);
    }
    Ok(Some(EndpointSliceConfig {
        name: name.to_string(),
        lease,
        ports,
    }))
}

/// One `[NAME:]PORT[/PROTOCOL]`.
fn slice_port(t: &str) -> Result<SlicePort, ConfigError> {
    let bad = |why: &str| {
        err(
            "kubernetes.endpointSlice.ports",
            format!(
                "{t:?} {why} (write [NAME:]PORT[/PROTOCOL], e.g. \"http:8080\" or \"dns:53/UDP\")"
            ),
        )
    };
    let (rest, protocol) = match t.rsplit_once('/') {
        Some((r, p)) => (r, p.to_ascii_uppercase()),
        None => (t, "TCP".to_string()),
    };
    if !["TCP", "UDP", "SCTP"].contains(&protocol.as_str()) {
        return Err(bad("has a protocol other than TCP, UDP or SCTP"));
    }
    let (name, port) = match rest.split_once(':') {
        Some((n, p)) => (n, p),
        None => ("", rest),
    };
    if !name.is_empty() && (name.len() > 15 || !is_dns_label(name)) {
        return Err(bad(
            "has a port name that is not a lowercase DNS label of <= 15 chars",
        ));
    }
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => return Err(bad("has no port number in 1..=65535")),
    };
    Ok(SlicePort {
        name: name.to_string(),
        port,
        protocol,
    })
}

/// An object name: a lowercase RFC 1123 subdomain.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The role label's key, leader value and follower value.
fn labels(s: &LabelSettings) -> Result<(String, String, String), ConfigError> {
    let key = Text::given(&s.key).unwrap_or(default::LABEL_KEY);
    let leader = Text::given(&s.leader).unwrap_or(default::LABEL_LEADER);
    let follower = Text::given(&s.follower).unwrap_or(default::LABEL_FOLLOWER);
    for (field, v) in [
        ("kubernetes.label.leader", leader),
        ("kubernetes.label.follower", follower),
    ] {
        if !is_label_value(v) {
            return Err(err(field, format!("{v:?} is not a valid label value")));
        }
    }
    if leader == follower {
        return Err(err(
            "kubernetes.label.follower",
            "must differ from kubernetes.label.leader",
        ));
    }
    if !is_label_key(key) {
        return Err(err(
            "kubernetes.label.key",
            format!("{key:?} is not a valid label key"),
        ));
    }
    Ok((key.to_string(), leader.to_string(), follower.to_string()))
}

/// Which candidate leadership moves to, and how eagerly.
pub(super) struct Preference {
    /// `lease.prefer`.
    pub(super) prefer: Prefer,
    /// `lease.priority`.
    pub(super) priority: i64,
    /// `lease.preferSettle`.
    pub(super) prefer_settle: Duration,
}

/// `lease.prefer`, `lease.priority` and `lease.preferSettle`; `prefer` defaults to `newest`
/// when Kubernetes publishing is on (pods have revisions to compare), else `none`.
pub(super) fn preference(
    s: &LeaseSettings,
    kubernetes: &KubernetesConfig,
) -> Result<Preference, ConfigError> {
    let prefer = match Text::given(&s.prefer).map(|v| v.trim().to_ascii_lowercase()) {
        None if kubernetes.is_enabled() => Prefer::Newest,
        None => Prefer::None,
        Some(p) => match p.as_str() {
            "newest" => Prefer::Newest,
            "oldest" => Prefer::Oldest,
            "none" => Prefer::None,
            other => {
                return Err(err(
                    "lease.prefer",
                    format!("{other:?} is not one of newest, oldest, none"),
                ));
            }
        },
    };
    let priority = match Text::given(&s.priority) {
        None => default::PRIORITY,
        Some(v) => v.trim().parse::<i64>().map_err(|_| {
            err(
                "lease.priority",
                format!("{v:?} is not an integer (e.g. 1, 2, -1)"),
            )
        })?,
    };
    let prefer_settle = duration_or(
        "lease.preferSettle",
        &s.prefer_settle,
        default::PREFER_SETTLE,
    )?;
    if prefer_settle > MAX_PREFER_SETTLE {
        return Err(err(
            "lease.preferSettle",
            format!(
                "{} is above the maximum of {}",
                fmt_dur(prefer_settle),
                fmt_dur(MAX_PREFER_SETTLE)
            ),
        ));
    }
    Ok(Preference {
        prefer,
        priority,
        prefer_settle,
    })
}

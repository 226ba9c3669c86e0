//! `kubernetes.*`, and the rollout preference whose default depends on it.

use std::path::Path;
use std::time::Duration;

use super::MAX_PREFER_SETTLE;
use super::parse::{bool_or, duration_or, fmt_dur, is_label_key, is_label_value};
use crate::config::file::Text;
use crate::config::settings::{KubernetesSettings, LabelSettings, LeaseSettings, default};
use crate::config::{ConfigError, Env, KubeEnabled, KubernetesConfig, Prefer, err};

/// Where a pod finds its namespace when `POD_NAMESPACE` is not set.
const SERVICE_ACCOUNT_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

pub(super) fn validate(
    s: &KubernetesSettings,
    env: &dyn Env,
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
    };
    if kubernetes.is_enabled() && kubernetes.pod_name.is_none() {
        return Err(err(
            "kubernetes.podName",
            "Kubernetes publishing is on but the pod name is unknown (set POD_NAME from the downward API)",
        ));
    }
    Ok(kubernetes)
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

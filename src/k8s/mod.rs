//! The Kubernetes client side the sidecar shares between an input and a consumer of the
//! election:
//! - [`standing`]: the own pod's standing as a candidate (revision, creation time, Ready), read
//!   by [`follow_pod`] and given to the elector as an input that `run` declares;
//! - [`crate::publish::k8s`]: the pod label, the fencing-token annotation and Events, which only
//!   read the elector's leadership.
//!
//! Here: the [`Settings`] both use, the client ([`connect`]) and [`call`] (one counted API call
//! and its typed error).
//!
//! The client comes from `kube::Config::infer()`: `KUBECONFIG` / `~/.kube/config` for local runs,
//! else the in-cluster service account. That is the one place outside `config` that reads env and
//! files, because the kube client owns that logic.

use std::time::Duration;

use kube::Client;

use crate::config::Config;

pub mod call;
pub mod standing;

pub use call::CallError;
pub use standing::{Apps, POD_POLL, follow_pod, standing_of};

/// How long the client waits for a TCP (and TLS) connection to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The fixed part of the publisher's configuration.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Lease name (value of [`LEASE_LABEL`]).
    pub lease: String,
    /// Own identity, for Event messages.
    pub identity: String,
    /// Own pod name.
    pub pod: String,
    /// Own namespace; `None` = the kube client's default (service account / kubeconfig context).
    pub namespace: Option<String>,
    /// Role label key.
    pub label_key: String,
    /// Role label value while leader.
    pub label_leader: String,
    /// Role label value while follower.
    pub label_follower: String,
    /// Emit Events.
    pub events: bool,
    /// Publish [`TOKEN_ANNOTATION`].
    pub token_annotation: bool,
    /// One lease: another pod of it still labelled leader is stale, and a new leader demotes
    /// it. With several leases or shards (`lease.names`, `lease.shards`) the role label says
    /// "leads at least one", which several pods may say at once: nobody is demoted, and no
    /// fencing-token annotation is written (which lease's token would it be?).
    pub single_lease: bool,
    /// The app containers whose health leadership follows (`lease.followApp`).
    pub apps: standing::Apps,
    /// With several leases or shards: the annotation that lists the ones the pod leads;
    /// `None` with one lease (no such annotation is written).
    pub led_annotation: Option<LedAnnotation>,
}

/// With several leases (`lease.names`) or shards (`lease.shards`): the pod annotation that lists
/// the leases or shards the pod leads, present while it leads at least one and removed when it
/// leads none. Its size is bounded by the config's limits: at most 64 names of at most 63
/// characters (about 4 KiB), or at most 256 shard indices (under 1 KiB).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedAnnotation {
    /// `lease.names`: [`crate::publish::k8s::LEASES_ANNOTATION`], the led lease names,
    /// comma-separated, in config order (`billing-jobs,cache-warmer`).
    Names(Vec<String>),
    /// `lease.shards`: [`crate::publish::k8s::SHARDS_ANNOTATION`], the led shards' indices,
    /// comma-separated, ascending (`0,5,17` for `NAME-0`, `NAME-5` and `NAME-17`).
    Shards,
}

impl LedAnnotation {
    /// The annotation key.
    pub fn key(&self) -> &'static str {
        match self {
            LedAnnotation::Names(_) => crate::publish::k8s::LEASES_ANNOTATION,
            LedAnnotation::Shards => crate::publish::k8s::SHARDS_ANNOTATION,
        }
    }

    /// The annotation's value for the leases led, by their index in `lease.names` (in config
    /// order); `None` (the annotation removed) when none is led.
    pub fn value(&self, led: &[usize]) -> Option<String> {
        if led.is_empty() {
            return None;
        }
        let parts: Vec<String> = match self {
            LedAnnotation::Names(names) => {
                led.iter().filter_map(|&i| names.get(i).cloned()).collect()
            }
            LedAnnotation::Shards => led.iter().map(usize::to_string).collect(),
        };
        Some(parts.join(","))
    }
}

impl Settings {
    /// From the validated config; `None` if publishing is off.
    pub fn from_config(config: &Config) -> Option<Settings> {
        let k = &config.kubernetes;
        if !k.is_enabled() {
            return None;
        }
        Some(Settings {
            lease: config.lease.name.clone(),
            identity: config.identity.clone(),
            // Validation requires a pod name whenever publishing is on.
            pod: k.pod_name.clone()?,
            namespace: k.namespace.clone(),
            label_key: k.label_key.clone(),
            label_leader: k.label_leader.clone(),
            label_follower: k.label_follower.clone(),
            events: k.events,
            token_annotation: k.fencing_token_annotation && config.lease.names.len() == 1,
            single_lease: config.lease.names.len() == 1,
            apps: match (config.lease.follow_app, config.app.containers.is_empty()) {
                (false, _) => standing::Apps::Off,
                (true, true) => standing::Apps::AllButSidecar,
                (true, false) => standing::Apps::Named(config.app.containers.clone()),
            },
            led_annotation: match (config.lease.names.len(), config.lease.shards) {
                (1, _) => None,
                (_, 0) => Some(LedAnnotation::Names(config.lease.names.clone())),
                _ => Some(LedAnnotation::Shards),
            },
        })
    }

    /// The namespace to work in: the configured one, else the client's default.
    pub(crate) fn namespace_of(&self, client: &Client) -> String {
        self.namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string())
    }
}

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Neither a kubeconfig nor an in-cluster service account was found or usable.
    #[error(transparent)]
    Infer(#[from] kube::config::InferConfigError),
    /// The configuration was found but the client could not be built from it (e.g. TLS).
    #[error(transparent)]
    Client(#[from] kube::Error),
}

/// A client from `kube::Config::infer()`, with the request timeouts of [`call::REQUEST_TIMEOUT`].
pub(crate) async fn connect(settings: &Settings) -> Result<Client, ConnectError> {
    connect_reading(settings, call::REQUEST_TIMEOUT).await
}

/// [`connect`], with a read timeout of `read` (a watch stream is quiet for minutes; each call
/// is still bounded by [`call::REQUEST_TIMEOUT`] until its answer's headers).
pub(crate) async fn connect_reading(
    settings: &Settings,
    read: std::time::Duration,
) -> Result<Client, ConnectError> {
    let mut config = kube::Config::infer().await?;
    config.connect_timeout = Some(CONNECT_TIMEOUT);
    config.read_timeout = Some(read);
    config.write_timeout = Some(call::REQUEST_TIMEOUT);
    if let Some(ns) = &settings.namespace {
        config.default_namespace = ns.clone();
    }
    Ok(Client::try_from(config)?)
}

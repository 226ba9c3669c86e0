//! The `kube` publisher: the own pod's role label, an optional fencing-token annotation, and
//! Kubernetes Events. A consumer of the leadership `watch` and nothing else: it never talks to
//! the elector, so API-server errors, slowness or outages cannot delay or change the election.
//!
//! - At start it merge-patches `redlock-elector/lease=<lease>` and the follower role onto its pod.
//! - A new leader first lists the pods of its lease still labelled leader and demotes every
//!   other one (stale after a crash), then labels itself.
//! - It demotes itself when leadership ends: the publisher wakes at the term's deadline itself
//!   (evaluated with [`Leadership::at`]), so a renewal still in flight does not keep the label up.
//! - Updates retry with jittered exponential backoff until the label matches the *latest*
//!   desired state. An attempt for a state that is no longer wanted is dropped mid-flight, and
//!   every patch carries the `resourceVersion` it was computed from (and, on the own pod, a
//!   fresh [`UPDATED_ANNOTATION`] so that it always bumps that version), so a stale patch that
//!   still reaches the server is rejected (409) instead of overwriting a newer one.
//! - Events ("became leader", "lost leadership: <reason>") go through a small queue on their own
//!   task, best effort, so they never hold up a label.
//!
//! - [`poll_pod`] reads the own pod for the elector's candidate record: its revision
//!   (`pod-template-hash` / `controller-revision-hash`) and `creationTimestamp` once, and its
//!   Ready condition every [`POD_POLL`] (a GET; no watch verb, no new RBAC).
//!
//! The client comes from `kube::Config::infer()`: `KUBECONFIG` / `~/.kube/config` for local runs,
//! else the in-cluster service account. That is the one place outside `config` that reads env and
//! files, because the kube client owns that logic.
//!
//! RBAC used: pods get, list, patch; events create (core group), in the pod's own namespace.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rand::Rng;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep_until};

use crate::config::Config;
use crate::elector::{Standing, StepDownReason};
use crate::leadership::Leadership;
use crate::metrics::Metrics;

/// Label that marks the pods of one lease; the demotion selector starts with it.
pub const LEASE_LABEL: &str = "redlock-elector/lease";
/// Annotation carrying the fencing token while leader (opt-in).
pub const TOKEN_ANNOTATION: &str = "redlock-elector/fencing-token";
/// Annotation with the time of the sidecar's last write to its own pod. It makes every such
/// write a real change: the API server does not bump `resourceVersion` for a no-op patch, so
/// without it a re-applied state could leave an earlier, still travelling patch valid.
pub const UPDATED_ANNOTATION: &str = "redlock-elector/role-updated-at";
/// `source.component` / `reportingComponent` of Events.
const COMPONENT: &str = "redlock-elector";
/// Upper bound of one API request; an answer slower than this counts as a failure.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// First retry delay after a failed update.
const BACKOFF_MIN: Duration = Duration::from_millis(200);
/// Longest retry delay while the API server stays unreachable.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Immediate retries after a 409 (someone else changed the pod: re-read and re-apply).
const CONFLICT_RETRIES: usize = 3;
/// How long an Event is retried before it is dropped (Events are informational, and one that
/// is a minute late still tells what happened during an API-server outage).
const EVENT_GIVE_UP: Duration = Duration::from_secs(60);

/// How often [`poll_pod`] reads the own pod's Ready condition.
pub const POD_POLL: Duration = Duration::from_secs(2);

/// Revision labels, in order of preference: Deployments (ReplicaSets) set the first,
/// StatefulSets and DaemonSets the second.
const REVISION_LABELS: [&str; 2] = ["pod-template-hash", "controller-revision-hash"];

/// The standing the own pod gives: revision, creation time, Ready condition.
pub fn standing_of(pod: &Pod) -> Standing {
    let labels = pod.metadata.labels.as_ref();
    let revision = REVISION_LABELS
        .iter()
        .find_map(|k| labels.and_then(|l| l.get(*k)))
        .cloned()
        .unwrap_or_default();
    let created = pod
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Standing {
        revision,
        created,
        ready,
        known: true,
    }
}

/// Read the own pod every [`POD_POLL`] and publish its standing, until `stop` fires. Until the
/// first read the standing stays unknown (never a ready candidate); after a failed read the
/// last one stays, except that readiness is dropped after three failures in a row.
pub async fn poll_pod(
    settings: Settings,
    metrics: Metrics,
    tx: watch::Sender<Standing>,
    stop: tokio_util::sync::CancellationToken,
) {
    let mut failures = 0u32;
    let mut api: Option<Api<Pod>> = None;
    loop {
        if api.is_none() {
            match connect(&settings).await {
                Ok(client) => {
                    let ns = settings
                        .namespace
                        .clone()
                        .unwrap_or_else(|| client.default_namespace().to_string());
                    api = Some(Api::namespaced(client, &ns));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "pod poller: no API server configuration yet")
                }
            }
        }
        if let Some(api) = &api {
            match call(&metrics, "get", api.get(&settings.pod)).await {
                Ok(pod) => {
                    failures = 0;
                    let mut next = standing_of(&pod);
                    // Rank is read once, at start: a label edit must not reorder a rollout.
                    let first = !tx.borrow().known;
                    if !first {
                        let cur = tx.borrow();
                        next.revision = cur.revision.clone();
                        next.created = cur.created;
                    }
                    if first {
                        tracing::info!(revision = %next.revision, created = next.created, ready = next.ready, "own pod read: candidate rank known");
                    }
                    tx.send_if_modified(|s| {
                        let changed = *s != next;
                        *s = next;
                        changed
                    });
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(error = %e, failures, "cannot read the own pod's Ready condition (the election is not affected)");
                    }
                    if failures >= 3 {
                        tx.send_if_modified(|s| std::mem::replace(&mut s.ready, false));
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POD_POLL) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// What the own pod's role label should say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Leader of the term with this fencing token.
    Leader {
        /// The term's fencing token.
        token: u64,
    },
    /// Not leader.
    Follower,
}

impl Role {
    /// The role at `now`, and the moment it stops being true on its own (the term's deadline).
    pub fn at(state: &Leadership, now: Instant) -> (Role, Option<Instant>) {
        match state.at(now).term {
            Some(t) => (Role::Leader { token: t.token }, Some(t.deadline)),
            None => (Role::Follower, None),
        }
    }
}

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
            token_annotation: k.fencing_token_annotation,
        })
    }

    /// Merge patch for the own pod: lease label, role label, [`UPDATED_ANNOTATION`] = `now`
    /// (RFC 3339), the token annotation, and the `resourceVersion` precondition if known.
    pub fn own_patch(&self, role: Role, resource_version: Option<&str>, now: &str) -> Value {
        let (value, token) = match role {
            Role::Leader { token } => (&self.label_leader, Some(token)),
            Role::Follower => (&self.label_follower, None),
        };
        let mut meta = json!({
            "labels": { LEASE_LABEL: self.lease, &self.label_key: value },
            "annotations": { UPDATED_ANNOTATION: now },
        });
        if self.token_annotation {
            meta["annotations"][TOKEN_ANNOTATION] = json!(token.map(|t| t.to_string()));
        }
        if let Some(rv) = resource_version {
            meta["resourceVersion"] = json!(rv);
        }
        json!({ "metadata": meta })
    }

    /// Merge patch that demotes another pod of the lease, conditional on the version listed.
    pub fn demote_patch(&self, resource_version: Option<&str>) -> Value {
        let mut meta = json!({ "labels": { &self.label_key: self.label_follower } });
        if self.token_annotation {
            meta["annotations"] = json!({ TOKEN_ANNOTATION: null });
        }
        if let Some(rv) = resource_version {
            meta["resourceVersion"] = json!(rv);
        }
        json!({ "metadata": meta })
    }

    /// Selector of the pods of this lease that carry the leader value.
    pub fn leader_selector(&self) -> String {
        format!(
            "{LEASE_LABEL}={},{}={}",
            self.lease, self.label_key, self.label_leader
        )
    }
}

/// Jittered exponential backoff: each delay is drawn from [d/2, d], d doubling up to a cap.
#[derive(Debug)]
pub struct Backoff {
    /// The next un-jittered delay.
    next: Duration,
    /// The cap.
    max: Duration,
}

impl Backoff {
    /// Start at [`BACKOFF_MIN`], capped at `max`.
    pub fn new(max: Duration) -> Self {
        Backoff {
            next: BACKOFF_MIN.min(max),
            max,
        }
    }

    /// The delay before the next retry.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d.mul_f64(rand::rng().random_range(0.5..=1.0))
    }

    /// After a success.
    pub fn reset(&mut self) {
        self.next = BACKOFF_MIN.min(self.max);
    }

    /// Lower the cap (shutdown: retry fast within the little time left).
    pub fn cap(&mut self, max: Duration) {
        self.max = max;
        self.next = self.next.min(max);
    }
}

/// Why an API call failed, as a metric label and for the retry decision.
#[derive(Debug)]
enum CallError {
    /// 409: the object changed since it was read (or an Event name clashed).
    Conflict,
    /// Any other failure; the `result` label and a message.
    Other(&'static str, String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Conflict => f.write_str("409 conflict"),
            CallError::Other(kind, msg) => write!(f, "{kind}: {msg}"),
        }
    }
}

fn classify(e: kube::Error) -> CallError {
    match e {
        kube::Error::Api(s) => match s.code {
            409 => CallError::Conflict,
            403 => CallError::Other("forbidden", s.message),
            404 => CallError::Other("not_found", s.message),
            500..=599 => CallError::Other("server_error", format!("{} {}", s.code, s.message)),
            _ => CallError::Other("client_error", format!("{} {}", s.code, s.message)),
        },
        other => CallError::Other("transport", other.to_string()),
    }
}

/// Counts a request as `cancelled` unless it completed: an attempt for a state no longer
/// wanted is dropped mid-flight, and the server may or may not have seen it.
struct Counted<'a> {
    metrics: &'a Metrics,
    verb: &'static str,
    result: &'static str,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.metrics
            .kube_requests
            .with_label_values(&[self.verb, self.result])
            .inc();
    }
}

/// One API call with the request timeout, counted in `redlock_elector_kube_requests_total`.
async fn call<T>(
    metrics: &Metrics,
    verb: &'static str,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    let mut counted = Counted {
        metrics,
        verb,
        result: "cancelled",
    };
    let r = match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(classify(e)),
        Err(_) => Err(CallError::Other(
            "timeout",
            format!("no answer within {REQUEST_TIMEOUT:?}"),
        )),
    };
    counted.result = match &r {
        Ok(_) => "ok",
        Err(CallError::Conflict) => "conflict",
        Err(CallError::Other(kind, _)) => kind,
    };
    r
}

/// The publisher task.
pub struct Publisher {
    /// Fixed settings.
    settings: Settings,
    /// Request counters.
    metrics: Metrics,
    /// Leadership as the elector publishes it.
    leadership: watch::Receiver<Leadership>,
    /// Why the last term ended (for Events).
    reason: watch::Receiver<Option<StepDownReason>>,
}

/// The label state as applied to the API server.
struct Pods {
    /// Fixed settings.
    settings: Settings,
    /// Request counters.
    metrics: Metrics,
    /// Pods of the own namespace.
    api: Api<Pod>,
    /// `resourceVersion` of the own pod as last read or written; `None` = read it first.
    resource_version: Option<String>,
    /// UID of the own pod, for Events.
    uid: watch::Sender<Option<String>>,
    /// Term whose stale leaders were already demoted.
    demoted_for: Option<u64>,
}

impl Pods {
    /// Make the API server show `role`: demote other leaders first if leading, then patch self.
    async fn apply(&mut self, role: Role) -> Result<(), CallError> {
        if let Role::Leader { token } = role
            && self.demoted_for != Some(token)
        {
            self.demote_others().await?;
            self.demoted_for = Some(token);
        }
        let mut conflicts = 0;
        loop {
            match self.patch_self(role).await {
                Err(CallError::Conflict) if conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    self.resource_version = None;
                }
                other => return other,
            }
        }
    }

    async fn patch_self(&mut self, role: Role) -> Result<(), CallError> {
        if self.resource_version.is_none() {
            let pod = call(&self.metrics, "get", self.api.get(&self.settings.pod)).await?;
            self.remember(&pod);
        }
        let body = self.settings.own_patch(
            role,
            self.resource_version.as_deref(),
            &k8s_openapi::jiff::Timestamp::now().to_string(),
        );
        let pod = call(
            &self.metrics,
            "patch",
            self.api.patch(
                &self.settings.pod,
                &PatchParams::default(),
                &Patch::Merge(&body),
            ),
        )
        .await?;
        self.remember(&pod);
        Ok(())
    }

    fn remember(&mut self, pod: &Pod) {
        self.resource_version = pod.metadata.resource_version.clone();
        if pod.metadata.uid.is_some() && *self.uid.borrow() != pod.metadata.uid {
            self.uid.send_replace(pod.metadata.uid.clone());
        }
    }

    /// Demote every other pod of the lease that still carries the leader value.
    async fn demote_others(&mut self) -> Result<(), CallError> {
        let lp = ListParams::default().labels(&self.settings.leader_selector());
        let list = call(&self.metrics, "list", self.api.list(&lp)).await?;
        for pod in list.items {
            let Some(name) = pod.metadata.name.as_deref() else {
                continue;
            };
            if name == self.settings.pod {
                continue;
            }
            let body = self
                .settings
                .demote_patch(pod.metadata.resource_version.as_deref());
            let r = call(
                &self.metrics,
                "patch",
                self.api
                    .patch(name, &PatchParams::default(), &Patch::Merge(&body)),
            )
            .await;
            match r {
                Ok(_) => tracing::info!(pod = name, "demoted a stale leader label"),
                // Deleted meanwhile: nothing left to demote.
                Err(CallError::Other("not_found", _)) => {}
                // Conflict (changed since listed) or failure: list again on the next attempt.
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// An Event waiting to be sent.
struct EventJob {
    /// What happened.
    kind: EventKind,
    /// When it happened.
    at: k8s_openapi::jiff::Timestamp,
}

enum EventKind {
    /// Became leader of a term.
    BecameLeader { token: u64 },
    /// Lost leadership. The reason is read when the Event is first sent: the elector publishes it
    /// right after the step-down, which the publisher may see first (at the deadline). The
    /// receiver was marked seen when the term began, so an unchanged value means the reason is
    /// not out yet.
    Lost {
        token: u64,
        reason: watch::Receiver<Option<StepDownReason>>,
    },
}

impl Publisher {
    /// A publisher for `settings`, reading the elector's watches.
    pub fn new(
        settings: Settings,
        metrics: Metrics,
        leadership: watch::Receiver<Leadership>,
        reason: watch::Receiver<Option<StepDownReason>>,
    ) -> Self {
        Publisher {
            settings,
            metrics,
            leadership,
            reason,
        }
    }

    /// Run until `finish` is cancelled and the label shows the final state (follower); the caller
    /// bounds how long it waits for that.
    pub async fn run(mut self, finish: tokio_util::sync::CancellationToken) {
        let client = loop {
            match connect(&self.settings).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!(error = %e, "kubernetes publishing: no API server configuration; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(BACKOFF_MAX) => {}
                        _ = finish.cancelled() => return,
                    }
                }
            }
        };
        let namespace = self
            .settings
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        tracing::info!(pod = %self.settings.pod, %namespace, "kubernetes publishing started");
        let (uid_tx, uid_rx) = watch::channel(None);
        let mut pods = Pods {
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            api: Api::namespaced(client.clone(), &namespace),
            resource_version: None,
            uid: uid_tx,
            demoted_for: None,
        };
        let (events_tx, events_rx) = mpsc::channel(32);
        let events_task = self.settings.events.then(|| {
            tokio::spawn(send_events(
                Api::namespaced(client, &namespace),
                self.settings.clone(),
                namespace.clone(),
                self.metrics.clone(),
                uid_rx,
                events_rx,
            ))
        });

        let mut applied: Option<Role> = None;
        let mut seen = Role::Follower;
        let mut backoff = Backoff::new(BACKOFF_MAX);
        let mut retry_at: Option<Instant> = None;
        let mut finishing = false;
        let mut elector_gone = false;
        let mut failures = 0u32;
        loop {
            let now = Instant::now();
            let (role, deadline) = Role::at(&self.leadership.borrow_and_update(), now);
            if role != seen {
                self.transition(seen, role, &events_tx);
                seen = role;
            }
            if applied != Some(role) {
                if retry_at.is_none_or(|t| now >= t) {
                    // Until this attempt succeeds the pod's state is unknown: a patch that
                    // failed, timed out or was dropped may still land. So whatever is wanted
                    // next is applied again, conditional on the version read before, and the
                    // server rejects whichever of the two comes second if the first landed.
                    applied = None;
                    // Drop the attempt as soon as it is for a state no longer wanted.
                    let outcome = tokio::select! {
                        r = pods.apply(role) => Some(r),
                        _ = until_role_differs(&mut self.leadership, role, deadline) => None,
                    };
                    match outcome {
                        Some(Ok(())) => {
                            if failures > 0 {
                                tracing::info!(failures, "pod label converged after failures");
                            }
                            tracing::debug!(?role, "pod label updated");
                            applied = Some(role);
                            failures = 0;
                            backoff.reset();
                            retry_at = None;
                        }
                        Some(Err(e)) => {
                            failures += 1;
                            let delay = backoff.next_delay();
                            if failures == 1 || failures.is_multiple_of(10) {
                                tracing::warn!(error = %e, ?role, failures, retry_in_ms = delay.as_millis() as u64,
                                    "pod label update failed; retrying (the election is not affected)");
                            }
                            retry_at = Some(Instant::now() + delay);
                        }
                        // The wanted state changed mid-flight: re-evaluate at once.
                        None => {}
                    }
                    continue;
                }
            } else if finishing {
                break;
            }
            let pending_retry = retry_at.filter(|_| applied != Some(role));
            tokio::select! {
                r = self.leadership.changed(), if !elector_gone => {
                    // The elector has ended (shutdown): the last value stays as it was.
                    elector_gone = r.is_err();
                }
                _ = sleep_until(deadline.unwrap_or(now)), if deadline.is_some() => {}
                _ = sleep_until(pending_retry.unwrap_or(now)), if pending_retry.is_some() => {}
                _ = finish.cancelled(), if !finishing => {
                    finishing = true;
                    // Little time is left: retry quickly, and without waiting out a long delay.
                    backoff.cap(Duration::from_millis(100));
                    retry_at = None;
                }
            }
        }
        drop(events_tx);
        if let Some(t) = events_task {
            let _ = t.await;
        }
        tracing::info!("kubernetes publishing stopped; pod label shows follower");
    }

    /// Queue the Events of a leadership change.
    fn transition(&mut self, from: Role, to: Role, events: &mpsc::Sender<EventJob>) {
        if !self.settings.events {
            return;
        }
        let at = k8s_openapi::jiff::Timestamp::now();
        let mut jobs = Vec::new();
        if let Role::Leader { token } = from {
            jobs.push(EventKind::Lost {
                token,
                reason: self.reason.clone(),
            });
        }
        if let Role::Leader { token } = to {
            // Whatever ends this term will be a new value.
            self.reason.borrow_and_update();
            jobs.push(EventKind::BecameLeader { token });
        }
        for kind in jobs {
            if events.try_send(EventJob { kind, at }).is_err() {
                tracing::warn!("event queue full; dropping a leadership Event");
            }
        }
    }
}

/// Resolves once the role at answer time differs from `role` (a change on the watch, or the
/// term's deadline passing).
async fn until_role_differs(
    rx: &mut watch::Receiver<Leadership>,
    role: Role,
    deadline: Option<Instant>,
) {
    loop {
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    // No more changes will come; only the deadline can still end the term.
                    match deadline {
                        Some(d) => sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                    return;
                }
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => return,
        }
        if Role::at(&rx.borrow(), Instant::now()).0 != role {
            return;
        }
    }
}

async fn connect(settings: &Settings) -> Result<Client, String> {
    let mut config = kube::Config::infer().await.map_err(|e| e.to_string())?;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(REQUEST_TIMEOUT);
    config.write_timeout = Some(REQUEST_TIMEOUT);
    if let Some(ns) = &settings.namespace {
        config.default_namespace = ns.clone();
    }
    Client::try_from(config).map_err(|e| e.to_string())
}

/// Send queued Events, each with a few retries; never blocks the label loop.
async fn send_events(
    api: Api<Event>,
    settings: Settings,
    namespace: String,
    metrics: Metrics,
    uid: watch::Receiver<Option<String>>,
    mut jobs: mpsc::Receiver<EventJob>,
) {
    let mut seq = 0u16;
    while let Some(job) = jobs.recv().await {
        seq = seq.wrapping_add(1);
        let (reason, kind, message) = match job.kind {
            EventKind::BecameLeader { token } => (
                "BecameLeader",
                "Normal",
                format!(
                    "{} became leader of lease {} (fencing token {token})",
                    settings.identity, settings.lease
                ),
            ),
            EventKind::Lost { token, mut reason } => {
                let why = match reason.has_changed() {
                    Ok(false) => None,
                    _ => *reason.borrow_and_update(),
                }
                // Seen at the deadline before the elector said why: the renewal did not make it.
                .unwrap_or(StepDownReason::RenewalFailed);
                let kind = match why {
                    StepDownReason::RenewalFailed | StepDownReason::Stalled => "Warning",
                    StepDownReason::Requested
                    | StepDownReason::Shutdown
                    | StepDownReason::Preferred => "Normal",
                };
                (
                    "LostLeadership",
                    kind,
                    format!(
                        "{} lost leadership of lease {} (fencing token {token}): {}",
                        settings.identity,
                        settings.lease,
                        why.as_str()
                    ),
                )
            }
        };
        let time = Time(job.at);
        let event = Event {
            metadata: ObjectMeta {
                // Unique per Event, like client-go's `<object>.<hex nanos>`; two Events of one
                // change share the instant, hence the sequence number.
                name: Some(format!(
                    "{}.{:x}{seq:04x}",
                    settings.pod,
                    job.at.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(settings.pod.clone()),
                namespace: Some(namespace.clone()),
                uid: uid.borrow().clone(),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message),
            type_: Some(kind.into()),
            count: Some(1),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(settings.identity.clone()),
            ..Default::default()
        };
        let mut backoff = Backoff::new(BACKOFF_MAX);
        let started = Instant::now();
        loop {
            match call(
                &metrics,
                "create",
                api.create(&PostParams::default(), &event),
            )
            .await
            {
                // A conflict on create means an earlier attempt got through.
                Ok(_) | Err(CallError::Conflict) => break,
                Err(e) if started.elapsed() >= EVENT_GIVE_UP => {
                    tracing::warn!(error = %e, reason, "dropping a leadership Event after {EVENT_GIVE_UP:?} of failures");
                    break;
                }
                Err(_) => tokio::time::sleep(backoff.next_delay()).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Term;

    fn settings(token_annotation: bool) -> Settings {
        Settings {
            lease: "my-app".into(),
            identity: "pod-a".into(),
            pod: "pod-a".into(),
            namespace: Some("ns1".into()),
            label_key: "redlock-elector/role".into(),
            label_leader: "leader".into(),
            label_follower: "follower".into(),
            events: true,
            token_annotation,
        }
    }

    #[test]
    fn patches() {
        let s = settings(false);
        assert_eq!(
            s.own_patch(Role::Leader { token: 7 }, Some("42"), "T1"),
            json!({"metadata": {
                "labels": {"redlock-elector/lease": "my-app", "redlock-elector/role": "leader"},
                "annotations": {"redlock-elector/role-updated-at": "T1"},
                "resourceVersion": "42",
            }})
        );
        assert_eq!(
            s.own_patch(Role::Follower, None, "T2"),
            json!({"metadata": {
                "labels": {"redlock-elector/lease": "my-app", "redlock-elector/role": "follower"},
                "annotations": {"redlock-elector/role-updated-at": "T2"},
            }})
        );
        assert_eq!(
            s.demote_patch(Some("9")),
            json!({"metadata": {"labels": {"redlock-elector/role": "follower"}, "resourceVersion": "9"}})
        );
        assert_eq!(
            s.leader_selector(),
            "redlock-elector/lease=my-app,redlock-elector/role=leader"
        );
    }

    #[test]
    fn token_annotation_is_set_while_leader_and_removed_after() {
        let s = settings(true);
        let lead = s.own_patch(Role::Leader { token: 7 }, None, "T");
        assert_eq!(lead["metadata"]["annotations"][TOKEN_ANNOTATION], "7");
        let follow = s.own_patch(Role::Follower, None, "T");
        // JSON merge patch: null deletes the key.
        assert!(follow["metadata"]["annotations"][TOKEN_ANNOTATION].is_null());
        assert!(
            follow["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(TOKEN_ANNOTATION)
        );
        assert!(
            s.demote_patch(None)["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(TOKEN_ANNOTATION)
        );
    }

    #[test]
    fn role_reads_the_deadline_at_answer_time() {
        let now = Instant::now();
        let s = Leadership::default().with(
            Some(Term {
                token: 3,
                deadline: now + Duration::from_millis(50),
            }),
            Some("a".into()),
        );
        assert_eq!(
            Role::at(&s, now),
            (
                Role::Leader { token: 3 },
                Some(now + Duration::from_millis(50))
            )
        );
        assert_eq!(
            Role::at(&s, now + Duration::from_millis(50)),
            (Role::Follower, None)
        );
    }

    #[test]
    fn standing_reads_revision_creation_and_readiness() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": "p",
                "labels": {"controller-revision-hash": "sts-2", "pod-template-hash": "7c9f"},
                "creationTimestamp": "2026-11-23T12:00:00Z",
            },
            "status": {"conditions": [
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "False"},
            ]},
        }))
        .unwrap();
        let s = standing_of(&pod);
        assert_eq!(s.revision, "7c9f");
        assert_eq!(s.created, 1_795_435_200);
        assert!(!s.ready && s.known);
        let ready: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"controller-revision-hash": "sts-2"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let s = standing_of(&ready);
        assert_eq!(
            (s.revision.as_str(), s.created, s.ready),
            ("sts-2", 0, true)
        );
    }

    #[test]
    fn backoff_grows_with_jitter_up_to_the_cap() {
        let mut b = Backoff::new(Duration::from_secs(1));
        let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
        assert!(delays[0] >= BACKOFF_MIN / 2 && delays[0] <= BACKOFF_MIN);
        assert!(delays.iter().all(|d| *d <= Duration::from_secs(1)));
        assert!(delays[7] >= Duration::from_millis(500));
        b.reset();
        assert!(b.next_delay() <= BACKOFF_MIN);
        b.cap(Duration::from_millis(100));
        assert!((0..5).all(|_| b.next_delay() <= Duration::from_millis(100)));
    }

    #[tokio::test]
    async fn an_attempt_is_dropped_when_the_term_ends() {
        let now = Instant::now();
        let (tx, mut rx) = watch::channel(Leadership::default().with(
            Some(Term {
                token: 1,
                deadline: now + Duration::from_millis(200),
            }),
            Some("a".into()),
        ));
        // The deadline alone ends the wait, with no message from the elector.
        let t0 = Instant::now();
        until_role_differs(
            &mut rx,
            Role::Leader { token: 1 },
            Some(now + Duration::from_millis(200)),
        )
        .await;
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // A renewal (deadline moves, same term) does not end it; a step-down does.
        let term = |token, secs| Term {
            token,
            deadline: Instant::now() + Duration::from_secs(secs),
        };
        tx.send_modify(|s| *s = s.with(Some(term(2, 10)), Some("a".into())));
        let deadline = tx.borrow().term.map(|t| t.deadline);
        let waiter = tokio::spawn(async move {
            until_role_differs(&mut rx, Role::Leader { token: 2 }, deadline).await;
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send_modify(|s| *s = s.with(Some(term(2, 20)), Some("a".into())));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "a renewal is not a change of role");
        tx.send_modify(|s| *s = s.with(None, None));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a change of role ends the wait")
            .unwrap();
    }
}

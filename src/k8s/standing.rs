//! The own pod's standing as a candidate (revision, creation time, Ready condition, the app
//! containers' health), followed by a GET and a watch of the own pod ([`follow_pod`]), and
//! published to the elector.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::call::call;
use super::{Settings, connect_reading};
use crate::metrics::Metrics;

/// This sidecar's standing as a candidate, from outside the election: the `kube` pod poller in
/// Kubernetes, fixed elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Standing {
    /// The pod's revision label (empty outside Kubernetes).
    pub revision: String,
    /// The pod's creation time, Unix seconds (0 outside Kubernetes).
    pub created: i64,
    /// Whether the pod is Ready (always outside Kubernetes).
    pub ready: bool,
    /// Whether revision and creation time are known yet (never ready before).
    pub known: bool,
    /// Whether the app is healthy (`lease.followApp`): in Kubernetes, every app container of
    /// the pod is started, running and ready ([`apps_healthy`]); with `app.healthUrl`, the URL
    /// answers. Always true when leadership does not follow the app.
    pub app_healthy: bool,
}

impl Standing {
    /// Outside Kubernetes: nothing to wait for.
    pub fn fixed() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: true,
            known: true,
            app_healthy: true,
        }
    }

    /// In Kubernetes, before the pod was read.
    pub fn unknown() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: false,
            known: false,
            app_healthy: false,
        }
    }
}

/// How often [`follow_pod`] reads the own pod when it cannot watch it.
pub const POD_POLL: Duration = Duration::from_secs(2);

/// While the own pod is not Ready yet, for at most [`FAST_POLL_FOR`] after the start, it is read
/// this often instead: a rollout's new pod becomes a ready candidate within a fraction of the
/// chart's `minReadySeconds` (2 s) of its Ready condition, so the leader can name it before the
/// Deployment stops the next old pod.
const FAST_POLL: Duration = Duration::from_millis(250);
/// How long after the start the fast reads may last (a pod that never gets Ready costs no more
/// than four reads a second for this long).
const FAST_POLL_FOR: Duration = Duration::from_secs(60);

/// Failed reads in a row after which the pod no longer counts as Ready.
const READY_FAILURES: u32 = 3;

/// Revision labels, in order of preference: Deployments (ReplicaSets) set the first,
/// StatefulSets and DaemonSets the second.
const REVISION_LABELS: [&str; 2] = ["pod-template-hash", "controller-revision-hash"];

/// The containers whose health leadership follows (`lease.followApp`, `app.containers`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Apps {
    /// Leadership does not follow the app.
    Off,
    /// Every regular container of the pod but the sidecar's own (named `redlock-elector` in
    /// the chart and the Component; a native sidecar is an init container, never among them).
    AllButSidecar,
    /// These containers.
    Named(Vec<String>),
}

/// The sidecar's container name in the chart and the Component.
pub const SIDECAR_CONTAINER: &str = "redlock-elector";

/// Whether the pod's app containers are healthy: each one is started, running, ready, and has
/// not restarted since `restarts` was taken (a container that restarts between two reads is
/// unhealthy for that read). A container it names that the pod lacks is unhealthy. `None`
/// when the pod has no status yet.
pub fn apps_healthy(pod: &Pod, apps: &Apps) -> Option<bool> {
    if *apps == Apps::Off {
        return Some(true);
    }
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let selected: Vec<_> = match apps {
        Apps::Off => return Some(true),
        Apps::AllButSidecar => statuses
            .iter()
            .filter(|c| c.name != SIDECAR_CONTAINER)
            .collect(),
        Apps::Named(names) => {
            if names.iter().any(|n| !statuses.iter().any(|c| c.name == *n)) {
                return Some(false);
            }
            statuses
                .iter()
                .filter(|c| names.contains(&c.name))
                .collect()
        }
    };
    Some(selected.iter().all(|c| {
        c.ready
            && c.started.unwrap_or(true)
            && c.state.as_ref().is_some_and(|s| s.running.is_some())
    }))
}

/// The sum of the app containers' restart counts, to see a restart between two reads.
pub fn app_restarts(pod: &Pod, apps: &Apps) -> i64 {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
    else {
        return 0;
    };
    statuses
        .iter()
        .filter(|c| match apps {
            Apps::Off => false,
            Apps::AllButSidecar => c.name != SIDECAR_CONTAINER,
            Apps::Named(names) => names.contains(&c.name),
        })
        .map(|c| i64::from(c.restart_count))
        .sum()
}

/// The standing the own pod gives: revision, creation time, Ready condition, and with
/// `lease.followApp`, the app containers' health.
pub fn standing_of(pod: &Pod, apps: &Apps) -> Standing {
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
        app_healthy: apps_healthy(pod, apps).unwrap_or(false),
    }
}

/// Follow the own pod and publish its standing, until `stop` is cancelled: a GET, then a watch
/// of that one pod from the GET's resource version, so that a change (an app container's
/// readiness, a restart) arrives within the API server's watch latency instead of the next poll.
/// When the watch ends it reads again and watches again. If the API server refuses the watch
/// (an older Role without `watch`, a proxy that cuts streams), it polls every [`POD_POLL`], as
/// before the watch: the API server never serves more than one request per pod per
/// [`POD_POLL`] on average, and one long-lived stream when the watch works.
///
/// Until the first read the standing stays unknown (never a ready candidate); after a failed
/// read the last one stays, except that readiness is dropped after `READY_FAILURES` failures
/// in a row.
pub async fn follow_pod(
    settings: Settings,
    metrics: Metrics,
    tx: watch::Sender<Standing>,
    stop: CancellationToken,
) {
    let mut failures = 0u32;
    let mut restarts: Option<i64> = None;
    let mut api: Option<Api<Pod>> = None;
    let mut watch_refused = 0u32;
    let started = tokio::time::Instant::now();
    loop {
        if api.is_none() {
            // The watch's stream is quiet between changes: its read timeout outlasts the watch.
            match connect_reading(&settings, WATCH_TIMEOUT + WATCH_SLACK).await {
                Ok(client) => {
                    api = Some(Api::namespaced(
                        client.clone(),
                        &settings.namespace_of(&client),
                    ))
                }
                Err(e) => {
                    tracing::debug!(error = %e, "pod poller: no API server configuration yet")
                }
            }
        }
        let mut version = None;
        if let Some(api) = &api {
            match call(&metrics, "get", api.get(&settings.pod)).await {
                Ok(pod) => {
                    failures = 0;
                    version = pod.metadata.resource_version.clone();
                    take(&tx, &settings.apps, &mut restarts, &pod);
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(error = %e, failures, "cannot read the own pod (the election is not affected)");
                    }
                    if failures >= READY_FAILURES {
                        tx.send_if_modified(|s| std::mem::replace(&mut s.ready, false));
                    }
                }
            }
        }
        let mut waited = Duration::ZERO;
        if let (Some(api), Some(version)) = (&api, version) {
            let t0 = tokio::time::Instant::now();
            match watch_pod(
                api,
                &settings,
                &metrics,
                &version,
                &tx,
                &mut restarts,
                &stop,
            )
            .await
            {
                WatchEnd::Stopped => return,
                WatchEnd::Ended => watch_refused = 0,
                WatchEnd::Refused(e) => {
                    watch_refused += 1;
                    if watch_refused == 1 || watch_refused.is_multiple_of(100) {
                        tracing::warn!(error = %e, "cannot watch the own pod: reading it every {POD_POLL:?} instead (grant the Role `watch` on pods)");
                    }
                }
            }
            waited = t0.elapsed();
        }
        // A watch that ended early, or none: the next read comes a poll period after this one.
        let fast = !tx.borrow().ready && started.elapsed() < FAST_POLL_FOR;
        let period = if fast { FAST_POLL } else { POD_POLL };
        tokio::select! {
            _ = tokio::time::sleep(period.saturating_sub(waited)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// How a watch of the own pod ended.
enum WatchEnd {
    /// `stop` was cancelled.
    Stopped,
    /// It ran and ended (the server's timeout, a dropped stream, an expired version): read again.
    Ended,
    /// The API server refused it or answered with no stream.
    Refused(String),
}

/// The server-side bound of one watch request (kube's client allows up to 295 s); the client's
/// own bound is a little longer, so that a stream stalled without a close still ends.
pub(crate) const WATCH_TIMEOUT: Duration = Duration::from_secs(240);

/// How much longer than [`WATCH_TIMEOUT`] the client waits for a watch to end.
pub(crate) const WATCH_SLACK: Duration = Duration::from_secs(15);

/// Watch the own pod from `version`, publishing each change, until the watch ends.
async fn watch_pod(
    api: &Api<Pod>,
    settings: &Settings,
    metrics: &Metrics,
    version: &str,
    tx: &watch::Sender<Standing>,
    restarts: &mut Option<i64>,
    stop: &CancellationToken,
) -> WatchEnd {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let params = WatchParams::default()
        .fields(&format!("metadata.name={}", settings.pod))
        .timeout(WATCH_TIMEOUT.as_secs() as u32);
    let stream = match call(metrics, "watch", api.watch(&params, version)).await {
        Ok(s) => s,
        Err(e) => return WatchEnd::Refused(e.to_string()),
    };
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::sleep(WATCH_TIMEOUT + WATCH_SLACK);
    let mut deadline = std::pin::pin!(deadline);
    let mut events = 0u64;
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = &mut deadline => return WatchEnd::Ended,
            _ = stop.cancelled() => return WatchEnd::Stopped,
        };
        match next {
            Some(Ok(WatchEvent::Added(pod) | WatchEvent::Modified(pod))) => {
                events += 1;
                take(tx, &settings.apps, restarts, &pod);
            }
            Some(Ok(WatchEvent::Bookmark(_))) => events += 1,
            // The pod is gone (it is being deleted), or the version expired: read again.
            Some(Ok(WatchEvent::Deleted(_) | WatchEvent::Error(_))) | None => {
                return WatchEnd::Ended;
            }
            // A stream that broke (a dropped connection): read again, and watch again.
            Some(Err(e)) => {
                tracing::debug!(error = %e, events, "the watch of the own pod broke; reading it again");
                return WatchEnd::Ended;
            }
        }
    }
}

/// A fresh view of the own pod: its standing, with an app restart since the last view counted
/// as unhealthy.
fn take(tx: &watch::Sender<Standing>, apps: &Apps, restarts: &mut Option<i64>, pod: &Pod) {
    let mut next = standing_of(pod, apps);
    // An app container that restarted since the last read was down meanwhile.
    let now = app_restarts(pod, apps);
    if restarts.is_some_and(|before| now > before) {
        next.app_healthy = false;
    }
    *restarts = Some(now);
    publish(tx, next);
}

/// Publish a fresh read. Rank (revision, creation) is taken from the first read only: a label
/// edit must not reorder a rollout.
fn publish(tx: &watch::Sender<Standing>, mut next: Standing) {
    let first = !tx.borrow().known;
    if first {
        tracing::info!(revision = %next.revision, created = next.created, ready = next.ready, "own pod read: candidate rank known");
    } else {
        let cur = tx.borrow();
        next.revision = cur.revision.clone();
        next.created = cur.created;
    }
    tx.send_if_modified(|s| {
        let changed = *s != next;
        *s = next;
        changed
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let s = standing_of(&pod, &Apps::Off);
        assert_eq!(s.revision, "7c9f");
        assert_eq!(s.created, 1_795_435_200);
        assert!(!s.ready && s.known);
        let ready: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "labels": {"controller-revision-hash": "sts-2"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        let s = standing_of(&ready, &Apps::Off);
        assert_eq!(
            (s.revision.as_str(), s.created, s.ready),
            ("sts-2", 0, true)
        );
    }

    fn pod_with(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"containerStatuses": containers},
        }))
        .unwrap()
    }

    fn running(name: &str, ready: bool, restarts: i32) -> serde_json::Value {
        json!({"name": name, "ready": ready, "started": true, "restartCount": restarts,
               "image": "i", "imageID": "", "state": {"running": {}}})
    }

    #[test]
    fn the_apps_health_is_every_app_container_running_and_ready_but_the_sidecars() {
        let all = Apps::AllButSidecar;
        // The sidecar's own container (not ready: /readyz/leader on a follower) does not count.
        let pod = pod_with(json!([
            running("app", true, 0),
            running("redlock-elector", false, 0)
        ]));
        assert_eq!(apps_healthy(&pod, &all), Some(true));
        assert!(standing_of(&pod, &all).app_healthy);
        let pod = pod_with(json!([
            running("app", false, 0),
            running("redlock-elector", true, 0)
        ]));
        assert_eq!(apps_healthy(&pod, &all), Some(false));
        // A crash-looping container waits in CrashLoopBackOff.
        let waiting = json!({"name": "app", "ready": false, "started": false, "restartCount": 4,
            "image": "i", "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}}});
        let pod = pod_with(json!([waiting]));
        assert_eq!(apps_healthy(&pod, &all), Some(false));
        assert_eq!(app_restarts(&pod, &all), 4);
        // Named containers: only those, and a missing one is unhealthy.
        let pod = pod_with(json!([running("web", true, 0), running("batch", false, 2)]));
        assert_eq!(
            apps_healthy(&pod, &Apps::Named(vec!["web".into()])),
            Some(true)
        );
        assert_eq!(
            apps_healthy(&pod, &Apps::Named(vec!["batch".into()])),
            Some(false)
        );
        assert_eq!(
            apps_healthy(&pod, &Apps::Named(vec!["gone".into()])),
            Some(false)
        );
        assert_eq!(app_restarts(&pod, &Apps::Named(vec!["batch".into()])), 2);
        // No statuses yet: unknown, so not healthy; off: always healthy.
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert_eq!(apps_healthy(&bare, &all), None);
        assert!(!standing_of(&bare, &all).app_healthy);
        assert!(standing_of(&bare, &Apps::Off).app_healthy);
    }
}

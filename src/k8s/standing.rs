//! The own pod's standing as a candidate (revision, creation time, Ready condition), read by a
//! GET every [`POD_POLL`] and published to the elector.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::call::call;
use super::{Settings, connect};
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
}

impl Standing {
    /// Outside Kubernetes: nothing to wait for.
    pub fn fixed() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: true,
            known: true,
        }
    }

    /// In Kubernetes, before the pod was read.
    pub fn unknown() -> Standing {
        Standing {
            revision: String::new(),
            created: 0,
            ready: false,
            known: false,
        }
    }
}

/// How often [`poll_pod`] reads the own pod's Ready condition.
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

/// Read the own pod every [`POD_POLL`] and publish its standing, until `stop` is cancelled.
/// Until the first read the standing stays unknown (never a ready candidate); after a failed
/// read the last one stays, except that readiness is dropped after `READY_FAILURES` failures
/// in a row.
pub async fn poll_pod(
    settings: Settings,
    metrics: Metrics,
    tx: watch::Sender<Standing>,
    stop: CancellationToken,
) {
    let mut failures = 0u32;
    let mut api: Option<Api<Pod>> = None;
    let started = tokio::time::Instant::now();
    loop {
        if api.is_none() {
            match connect(&settings).await {
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
        if let Some(api) = &api {
            match call(&metrics, "get", api.get(&settings.pod)).await {
                Ok(pod) => {
                    failures = 0;
                    publish(&tx, standing_of(&pod));
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 || failures.is_multiple_of(10) {
                        tracing::warn!(error = %e, failures, "cannot read the own pod's Ready condition (the election is not affected)");
                    }
                    if failures >= READY_FAILURES {
                        tx.send_if_modified(|s| std::mem::replace(&mut s.ready, false));
                    }
                }
            }
        }
        let fast = !tx.borrow().ready && started.elapsed() < FAST_POLL_FOR;
        tokio::select! {
            _ = tokio::time::sleep(if fast { FAST_POLL } else { POD_POLL }) => {}
            _ = stop.cancelled() => return,
        }
    }
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
}

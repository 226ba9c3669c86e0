//! The inputs `run` wires up before the electors start: the candidate's standing (the pod
//! poller, the app's health URL), its preference, and the node tasks every lease shares.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Lease;
use crate::config::Config;
use crate::elector;
use crate::health;
use crate::k8s;
use crate::metrics::Metrics;
use crate::redlock::NodeSet;

/// With `app.healthUrl`, the standing's app health is also the URL's: probed until `stop`.
pub(super) fn with_health_url(
    tasks: &TaskTracker,
    config: &Config,
    base: watch::Receiver<elector::Standing>,
    stop: &CancellationToken,
) -> watch::Receiver<elector::Standing> {
    let Some(url) = config.app.health_url.clone() else {
        return base;
    };
    let probe = health::Probe {
        url,
        interval: config.app.health_interval,
        timeout: config.app.health_timeout,
        failure_threshold: config.app.health_failure_threshold,
    };
    let (url_tx, mut url_rx) = watch::channel(false);
    tasks.spawn(health::probe(probe, url_tx, stop.clone()));
    let combined = |base: &elector::Standing, url: bool| elector::Standing {
        app_healthy: base.app_healthy && url,
        ..base.clone()
    };
    let (tx, rx) = watch::channel(combined(&base.borrow(), false));
    let stop = stop.clone();
    let mut base = base;
    tasks.spawn(async move {
        loop {
            tokio::select! {
                Ok(()) = base.changed() => {}
                Ok(()) = url_rx.changed() => {}
                _ = stop.cancelled() => return,
                else => return,
            }
            let next = combined(&base.borrow_and_update(), *url_rx.borrow_and_update());
            tx.send_if_modified(|s| std::mem::replace(s, next.clone()) != next);
        }
    });
    rx
}

/// The candidate's standing: the own pod's revision, creation time and Ready condition in
/// Kubernetes (polled until `stop`), nothing to wait for elsewhere.
pub(super) fn start_pod_poller(
    tasks: &TaskTracker,
    settings: Option<&k8s::Settings>,
    metrics: &Metrics,
    stop: &CancellationToken,
) -> watch::Receiver<elector::Standing> {
    let Some(settings) = settings else {
        return watch::channel(elector::Standing::fixed()).1;
    };
    let (tx, rx) = watch::channel(elector::Standing::unknown());
    tasks.spawn(k8s::follow_pod(
        settings.clone(),
        metrics.clone(),
        tx,
        stop.clone(),
    ));
    rx
}

/// Per node, once for every lease: keep the connection up, give and take attestations of its
/// clock watch (on the first lease's attestation keys, as a single-lease sidecar does), and
/// subscribe to every lease's release notices and to the attestation messages.
pub(super) fn start_nodes(
    tasks: &TaskTracker,
    set: &NodeSet,
    leases: &[Lease],
    attestations: bool,
    stop: &CancellationToken,
) {
    let keys = leases[0].redlock.attest_keys();
    let channels: Vec<(String, Arc<crate::redlock::Notices>)> = leases
        .iter()
        .map(|l| (l.redlock.channel().to_string(), l.handles.notices.clone()))
        .collect();
    for node in set.nodes() {
        tasks.spawn(node.clone().maintain(stop.clone()));
        if attestations {
            tasks.spawn(node.clone().attest(keys.clone(), stop.clone()));
        }
        tasks.spawn(
            node.clone()
                .subscribe(channels.clone(), keys.channel.clone(), stop.clone()),
        );
    }
}

/// How this sidecar ranks candidates and hands over.
pub(super) fn preference(config: &Config) -> elector::Preference {
    elector::Preference {
        // Sharded, leadership moves for balance, not for rank: no preferred handovers.
        prefer: match config.lease.shards {
            0 => config.lease.prefer,
            _ => crate::config::Prefer::None,
        },
        priority: config.lease.priority,
        settle: config.lease.prefer_settle,
        grace: elector::grace(config.redis.timeout),
        name_successor: !config.unsafe_switches.no_named_successor,
        follow_app: config.lease.follow_app.then_some(elector::AppGate {
            grace: config.app.unhealthy_grace,
            cooldown: config.app.cooldown,
        }),
    }
}

//! Wiring: start the node connections, the elector, the watchdog and the publishers; wait for
//! the shutdown trigger; then stop contending, release, and return.
//!
//! Kubernetes sends SIGTERM to start a graceful shutdown: the elector publishes "not leader"
//! first, then releases on all nodes in parallel and publishes the release notice, so a follower
//! takes over within milliseconds. The whole shutdown is bounded by `2×timeout + 1s`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::{self, Shared};
use crate::config::Config;
use crate::elector::{self, Elector, Timing};
use crate::kube;
use crate::metrics::Metrics;
use crate::ops::{self, Ops};
use crate::redlock::Redlock;
use crate::{Error, Result};

/// Longest wait for the pod label to show follower at shutdown, after the release.
const KUBE_FINISH: Duration = Duration::from_secs(1);

/// Run the sidecar until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<()> {
    let metrics = Metrics::new(&config.lease.name);
    let redlock = Arc::new(Redlock::new(&config, metrics.clone())?);
    let api_listener = TcpListener::bind(config.api_listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.api_listen,
            what: "api.listen",
            source,
        })?;
    let ops_listener = TcpListener::bind(config.ops_listen)
        .await
        .map_err(|source| Error::Bind {
            addr: config.ops_listen,
            what: "ops.listen",
            source,
        })?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let stop = tokio_util::sync::CancellationToken::new();
    let timing = Timing::new(
        config.lease.ttl,
        config.lease.renew_every,
        config.lease.retry_every,
    );
    // The candidate's standing: the own pod's revision, creation time and Ready condition in
    // Kubernetes (polled), nothing to wait for elsewhere.
    let kube_settings = kube::Settings::from_config(&config);
    let (standing_tx, standing_rx) = watch::channel(match &kube_settings {
        Some(_) => elector::Standing::unknown(),
        None => elector::Standing::fixed(),
    });
    if let Some(settings) = &kube_settings {
        tokio::spawn(kube::poll_pod(
            settings.clone(),
            metrics.clone(),
            standing_tx,
            stop_rx.clone(),
        ));
    }
    let (elector, handles) = Elector::new(
        redlock.clone(),
        config.identity.clone(),
        timing.clone(),
        elector::Preference {
            prefer: config.lease.prefer,
            priority: config.lease.priority,
            settle: config.lease.prefer_settle,
            grace: elector::grace(config.redis.timeout),
            name_successor: !config.unsafe_switches.no_named_successor,
        },
        standing_rx,
        metrics.clone(),
    );
    for node in redlock.nodes() {
        tokio::spawn(node.clone().maintain(stop.clone()));
        tokio::spawn(node.clone().subscribe(
            redlock.channel().to_string(),
            handles.notices.clone(),
            stop.clone(),
        ));
    }
    tokio::spawn(elector::watchdog(
        handles.health.clone(),
        metrics.clone(),
        timing.stall_margin,
        stop_rx.clone(),
    ));

    // The kube publisher only reads the leadership watches; it is told to finish after the
    // elector has released, and then gets at most KUBE_FINISH to label the pod follower.
    let publisher = kube_settings.map(|settings| {
        let (finish_tx, finish_rx) = watch::channel(false);
        let task = tokio::spawn(
            kube::Publisher::new(
                settings,
                metrics.clone(),
                handles.leadership.clone(),
                handles.reason.clone(),
            )
            .run(finish_rx),
        );
        (finish_tx, task)
    });

    let shared = Shared {
        lease: config.lease.name.as_str().into(),
        identity: config.identity.as_str().into(),
        leadership: handles.leadership.clone(),
        eligibility: {
            let redlock = redlock.clone();
            Arc::new(move |now| redlock.eligibility(now))
        },
        candidacy: handles.candidacy.clone(),
    };
    let api_addr = api_listener.local_addr().ok();
    let ops_addr = ops_listener.local_addr().ok();
    tokio::spawn(api::serve(
        api_listener,
        shared.clone(),
        handles.step_down.clone(),
    ));
    tokio::spawn(ops::serve(
        ops_listener,
        Ops {
            shared,
            metrics,
            health: handles.health.clone(),
            nodes: redlock.nodes().to_vec(),
        },
    ));
    tracing::info!(
        identity = %config.identity,
        lease = %config.lease.name,
        key = %redlock.key(),
        endpoints = ?config.redis.endpoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        api = ?api_addr,
        ops = ?ops_addr,
        ttl_ms = config.lease.ttl.as_millis() as u64,
        "redlock-elector started"
    );

    let mut elector_task = tokio::spawn(elector.run(stop_rx));
    tokio::select! {
        _ = shutdown => {}
        r = &mut elector_task => {
            tracing::error!(?r, "election loop ended unexpectedly");
        }
    }
    tracing::info!("shutting down: stepping down and releasing the lease");
    let started = tokio::time::Instant::now();
    let _ = stop_tx.send(true);
    stop.cancel();
    let grace = config.redis.timeout * 2 + Duration::from_millis(900);
    // The elector's release returns at a quorum of confirmations; the other nodes' releases
    // finish in the background, and the process must not exit before they are written.
    let released = async {
        let _ = (&mut elector_task).await;
        redlock.settled().await;
    };
    if tokio::time::timeout(grace, released).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "release did not finish within the grace period"
        );
        elector_task.abort();
    }
    if let Some((finish_tx, mut task)) = publisher {
        // The whole shutdown stays within 2×timeout + 1s, however slow the API server is.
        let bound = config.redis.timeout * 2 + Duration::from_secs(1);
        let left = bound
            .saturating_sub(started.elapsed())
            .saturating_sub(Duration::from_millis(50))
            .min(KUBE_FINISH);
        let _ = finish_tx.send(true);
        if tokio::time::timeout(left, &mut task).await.is_err() {
            tracing::warn!(
                waited_ms = left.as_millis() as u64,
                "pod label not confirmed as follower before exit (API server slow or unreachable)"
            );
            task.abort();
        }
    }
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "shutdown complete"
    );
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub fn signals() -> Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut int = signal(SignalKind::interrupt()).map_err(Error::Signal)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    })
}

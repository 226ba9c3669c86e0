//! The end of a run: stop contending, release every lease, let the publishers label the pod
//! follower and empty the endpoint slice, all within [`shutdown_budget`]; and the signals that
//! start it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Publisher;
use crate::redlock::Redlock;
use crate::{Error, Result};

/// Longest wait for the pod label to show follower at shutdown, after the release.
const KUBE_FINISH: Duration = Duration::from_secs(1);

/// Of the [`shutdown_budget`], the release may take all but this: the rest is for the pod
/// label and the exit.
const LABEL_RESERVE: Duration = Duration::from_millis(100);

/// Of the [`shutdown_budget`], this much is left for the process to exit after the pod label.
const EXIT_SLACK: Duration = Duration::from_millis(50);

/// The bound of a graceful shutdown, from the signal to the exit: `2 × redis.timeout + 1 s`
/// (README, "Kubernetes": a sidecar stopped during an API-server outage still exits within it;
/// tests/kube_labels.rs checks it). The release (each node bounded by `redis.timeout`, plus
/// the candidate-record withdrawal) takes all of it but `LABEL_RESERVE`; the pod label gets
/// what is left, at most `KUBE_FINISH`.
pub fn shutdown_budget(redis_timeout: Duration) -> Duration {
    redis_timeout * 2 + Duration::from_secs(1)
}

/// Stop contending and release every lease (each elector publishes "not leader" first), wait
/// for every node's release, then let the publisher label the pod follower; all within
/// `budget`.
pub(super) async fn shut_down(
    stop: CancellationToken,
    mut elector_tasks: Vec<JoinHandle<()>>,
    redlocks: &[Arc<Redlock>],
    publisher: Option<Publisher>,
    budget: Duration,
) {
    tracing::info!("shutting down: stepping down and releasing the lease");
    let started = Instant::now();
    stop.cancel();
    let grace = budget.saturating_sub(LABEL_RESERVE);
    // The elector's release returns at a quorum of confirmations; the other nodes' releases
    // finish in the background, and the process must not exit before they are written.
    let released = async {
        for task in elector_tasks.iter_mut() {
            let _ = task.await;
        }
        for redlock in redlocks {
            redlock.settled().await;
        }
    };
    if tokio::time::timeout(grace, released).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "release did not finish within the grace period"
        );
        for task in &elector_tasks {
            task.abort();
        }
    }
    if let Some(Publisher {
        finish,
        mut task,
        slice,
    }) = publisher
    {
        // The whole shutdown stays within the budget, however slow the API server is.
        let left = budget
            .saturating_sub(started.elapsed())
            .saturating_sub(EXIT_SLACK)
            .min(KUBE_FINISH);
        let until = Instant::now() + left;
        finish.cancel();
        if tokio::time::timeout(left, &mut task).await.is_err() {
            tracing::warn!(
                waited_ms = left.as_millis() as u64,
                "pod label not confirmed as follower before exit (API server slow or unreachable)"
            );
            task.abort();
        }
        if let Some(mut slice) = slice
            && tokio::time::timeout_at(until, &mut slice).await.is_err()
        {
            tracing::warn!(
                waited_ms = left.as_millis() as u64,
                "endpoint slice not confirmed without this pod before exit (API server slow or unreachable)"
            );
            slice.abort();
        }
    }
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "released; closing the listeners"
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_budget_is_the_documented_bound() {
        let timeout = Duration::from_millis(50);
        assert_eq!(shutdown_budget(timeout), Duration::from_millis(1_100));
        // The release is cut off 100 ms before the bound, leaving the pod label at least 50 ms.
        assert_eq!(
            shutdown_budget(timeout) - LABEL_RESERVE,
            timeout * 2 + Duration::from_millis(900)
        );
        assert!(LABEL_RESERVE > EXIT_SLACK);
    }
}

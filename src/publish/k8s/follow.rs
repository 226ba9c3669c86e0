//! The leader Service's EndpointSlice as a watch of it delivers it, so that a new term's write
//! need not read the slice first: a GET, then a watch of that one object from the GET's
//! `resourceVersion` (a `metadata.name` field selector, which RBAC authorizes by the object's
//! name), again after every end.
//!
//! The copy only saves a read. It is never trusted for the fence: every write is still decided
//! on the copy and sent with the copy's `resourceVersion`, so a copy that is behind costs a 409
//! and a second decision, never a wrong write. While no watch runs (a Role without `watch`, a
//! proxy that cuts streams, the slice deleted), the copy is withdrawn and the writer reads the
//! slice itself, as before.
//!
//! Cost: one more long-lived request per sidecar (one stream, quiet between the slice's
//! changes) and one GET each time it restarts (every [`WATCH_TIMEOUT`] at least).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::k8s::call::{CallError, call};
use crate::k8s::standing::{WATCH_SLACK, WATCH_TIMEOUT};
use crate::k8s::{Settings, connect_reading};
use crate::metrics::Metrics;

/// A watch that ended sooner than this waits as long before the next GET.
const MIN_WATCH: Duration = Duration::from_secs(1);
/// The wait before the next GET and watch after a refusal or a failure.
const RETRY: Duration = Duration::from_secs(5);
/// After this many refusals in a row (403: the Role has no `watch`), the wait grows to
/// [`RETRY_REFUSED`]: the writer works without the copy.
const REFUSALS_BEFORE_SLOW: u32 = 3;
/// The wait between attempts once refused repeatedly.
const RETRY_REFUSED: Duration = Duration::from_secs(60);

/// After a 409 on the watch's copy, how long to wait for the watch's next version before
/// reading the slice instead (the version that refused the write is normally on its way).
const COPY_WAIT: Duration = Duration::from_millis(200);

/// What the writer may use instead of a read.
#[derive(Clone, Debug, Default)]
pub struct Watched {
    /// The slice as last delivered; `None` while no watch runs (use a GET).
    pub slice: Option<EndpointSlice>,
}

/// Follow the slice `name` until `stop` is cancelled, publishing each version to `tx`.
pub async fn follow(
    settings: Settings,
    name: String,
    metrics: Metrics,
    tx: watch::Sender<Watched>,
    stop: CancellationToken,
) {
    let withdraw = |tx: &watch::Sender<Watched>| {
        tx.send_if_modified(|c| c.slice.take().is_some());
    };
    let mut refusals = 0u32;
    let mut api: Option<Api<EndpointSlice>> = None;
    loop {
        if api.is_none() {
            // The stream is quiet between changes: its read timeout outlasts the watch.
            match connect_reading(&settings, WATCH_TIMEOUT + WATCH_SLACK).await {
                Ok(client) => {
                    let ns = settings.namespace_of(&client);
                    api = Some(Api::namespaced(client, &ns));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "endpoint slice watch: no API server configuration yet")
                }
            }
        }
        let mut pause = RETRY;
        if let Some(api) = &api {
            match watch_from_get(api, &name, &metrics, &tx, &stop).await {
                End::Stopped => break,
                // Read and watch again at once, unless the watch ended as soon as it began: the
                // copy stays meanwhile (a write decided on it is still sent with its version).
                End::Ended { lasted } => {
                    refusals = 0;
                    if lasted >= MIN_WATCH {
                        continue;
                    }
                    pause = MIN_WATCH;
                }
                End::Failed(e) => {
                    withdraw(&tx);
                    // Refused (403: a Role without `get` or `watch` on the slice; 405 and
                    // other 4xx: a server or proxy that serves no watch) or failed.
                    let refused = matches!(e, CallError::Forbidden(_) | CallError::Client(_));
                    refusals = if refused { refusals + 1 } else { 0 };
                    match (refusals, &e) {
                        (1, CallError::Forbidden(_)) => tracing::warn!(error = %e, slice = %name,
                            "cannot follow the endpoint slice: each new term reads it first instead, one more request before the slice lists the leader (grant the Role `get` and `watch` on it)"),
                        (1, _) => tracing::info!(error = %e, slice = %name,
                            "the API server does not serve a watch of the endpoint slice: each new term reads it first instead"),
                        _ => {
                            tracing::debug!(error = %e, slice = %name, "endpoint slice watch failed; retrying")
                        }
                    }
                    if refusals >= REFUSALS_BEFORE_SLOW {
                        pause = RETRY_REFUSED;
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => break,
        }
    }
    withdraw(&tx);
}

/// How one GET and watch ended.
enum End {
    /// `stop` was cancelled.
    Stopped,
    /// The watch ran and ended (its timeout, an expired version, a dropped stream, the slice
    /// deleted) after `lasted`.
    Ended {
        /// How long it ran.
        lasted: Duration,
    },
    /// The GET or the watch was refused or failed; the slice may be missing.
    Failed(CallError),
}

/// GET the slice, publish it, and watch it from there until the watch ends.
async fn watch_from_get(
    api: &Api<EndpointSlice>,
    name: &str,
    metrics: &Metrics,
    tx: &watch::Sender<Watched>,
    stop: &CancellationToken,
) -> End {
    let slice = tokio::select! {
        r = call(metrics, "get", api.get(name)) => r,
        _ = stop.cancelled() => return End::Stopped,
    };
    let slice = match slice {
        Ok(s) => s,
        Err(e) => return End::Failed(e),
    };
    // (A server that names no version cannot be watched from one: this GET is the copy's last.)
    let version = slice.metadata.resource_version.clone().unwrap_or_default();
    let params = WatchParams::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_TIMEOUT.as_secs() as u32);
    let stream = tokio::select! {
        r = call(metrics, "watch", api.watch(&params, &version)) => r,
        _ = stop.cancelled() => return End::Stopped,
    };
    let stream = match stream {
        Ok(s) => s,
        Err(e) => return End::Failed(e),
    };
    // Published once the watch runs: from here on, every later version arrives.
    tx.send_replace(Watched { slice: Some(slice) });
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::sleep(WATCH_TIMEOUT + WATCH_SLACK);
    let mut deadline = std::pin::pin!(deadline);
    let started = tokio::time::Instant::now();
    let ended = || End::Ended {
        lasted: started.elapsed(),
    };
    loop {
        let next = tokio::select! {
            n = stream.next() => n,
            _ = &mut deadline => return ended(),
            _ = stop.cancelled() => return End::Stopped,
        };
        match next {
            Some(Ok(WatchEvent::Added(s) | WatchEvent::Modified(s))) => {
                tx.send_replace(Watched { slice: Some(s) });
            }
            Some(Ok(WatchEvent::Bookmark(_))) => {}
            // Deleted: no copy until it is read again (a leader re-creates it from a GET's 404).
            Some(Ok(WatchEvent::Deleted(_))) => {
                tx.send_replace(Watched::default());
                return ended();
            }
            // An expired version (410) or a broken stream: read again, and watch again.
            Some(Ok(WatchEvent::Error(_))) | Some(Err(_)) | None => return ended(),
        }
    }
}

/// The slice `name` to decide a write on, and what it came from: the watch's `copy` while a
/// watch runs, unless it is the version a write was just `refused` on (then the watch's next
/// version, for at most [`COPY_WAIT`]); else a GET. The writer passes no copy for a removal: a
/// copy that is behind could miss the own address (a write whose answer was lost) and end the
/// removal with the address still listed, where a leader's write decided on it only meets a 409.
pub async fn read(
    copy: Option<&mut watch::Receiver<Watched>>,
    refused: Option<String>,
    api: &Api<EndpointSlice>,
    name: &str,
    metrics: &Metrics,
) -> Result<(EndpointSlice, &'static str), CallError> {
    if let Some(rx) = copy {
        let wait = tokio::time::sleep(COPY_WAIT);
        let mut wait = std::pin::pin!(wait);
        loop {
            {
                let copy = rx.borrow_and_update();
                match &copy.slice {
                    None => break,
                    Some(s) if s.metadata.resource_version != refused => {
                        tracing::debug!(slice = %name, version = ?s.metadata.resource_version,
                            "deciding on the watch's copy of the endpoint slice");
                        return Ok((s.clone(), "watch"));
                    }
                    Some(_) => {}
                }
            }
            tokio::select! {
                r = rx.changed() => if r.is_err() { break },
                _ = &mut wait => break,
            }
        }
    }
    let slice = call(metrics, "get", api.get(name)).await?;
    Ok((slice, "get"))
}

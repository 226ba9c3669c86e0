//! The app-facing API (`api.listen`, localhost by default).
//!
//! - `GET /leader` — the current [`View`] as JSON.
//! - `GET /leader?wait=30s&version=N` — long-poll: blocks until the version differs from N (or
//!   the wait, capped at 5m, runs out), then answers as plain `/leader`.
//! - `GET /leader/watch` — Server-Sent Events: the current state at connect, then one event per
//!   change.
//! - `POST /leader/step-down` — release and sit out a cool-down: 200 if it was leader, else 409.
//! - `GET /` — `{"name": "<leader or empty>", "last_update": "<RFC 3339>"}`: the answer of the
//!   kubernetes contrib `leader-elector` and of nais/elector, so their users switch images only.
//! - `GET /leases` — every lease of this sidecar (`lease.names`; one for the single-lease form)
//!   as [`Leases`]: its version is the sum of the leases' versions, so it changes whenever one
//!   of them does. `?wait=30s&version=N` long-polls as `/leader` does; `GET /leases/watch` is
//!   its SSE stream; `GET /leases/{name}` is one lease's answer in `/leader`'s shape, and
//!   `POST /leases/{name}/step-down` steps down from that lease alone.
//!
//! With several leases, `/leader` and its siblings answer for the first.
//!
//! Every answer is evaluated against the deadline at the moment of answering.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use futures::Stream;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use warp::http::StatusCode;
use warp::{Filter, Rejection, Reply};

use std::sync::Arc;

use crate::elector::{StepDown, StepDownReason, StepDownRequest};
use crate::leadership::{Shared, View};

mod leases;

use leases::get_leases;
pub use leases::{LeaseApi, Leases, leases_changes, leases_view, wait_for_leases};

/// Longest accepted long-poll.
pub const MAX_WAIT: Duration = Duration::from_secs(300);

/// An SSE stream waits for the next change this long at most (a year: until it closes).
const SSE_UNTIL: Duration = Duration::from_secs(86_400 * 365);

/// How often an open SSE stream sends a keep-alive comment.
pub const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// A malformed query string of `GET /leader`, answered with 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// `version` is not a non-negative integer.
    #[error("version: {0:?} is not a non-negative integer")]
    Version(String),
    /// `wait` is neither a duration nor a number of seconds.
    #[error("wait: {0:?} is not a duration (e.g. \"30s\")")]
    Wait(String),
}

/// A long-poll: answer once the version differs from `version` or `wait` has passed.
#[derive(Debug, PartialEq, Eq)]
pub struct LongPoll {
    /// How long to wait at most (capped at [`MAX_WAIT`]).
    pub wait: Duration,
    /// The version the client has; `None`: the current one.
    pub version: Option<u64>,
}

/// Wait until the view's version differs from `version` or `until` passes; returns the view then.
pub async fn wait_for_change(shared: &Shared, version: u64, until: Instant) -> View {
    let mut rx = shared.leadership.clone();
    loop {
        let (view, deadline) = {
            let s = rx.borrow_and_update();
            (
                s.view(&shared.lease, &shared.identity, Instant::now()),
                s.term.map(|t| t.deadline),
            )
        };
        if view.version != version || Instant::now() >= until {
            return shared.with_nodes(view, Instant::now());
        }
        // The view also changes, without a publish, when the term's deadline passes.
        let wake = deadline.map_or(until, |d| d.min(until));
        tokio::select! {
            r = rx.changed() => if r.is_err() { return shared.with_nodes(view, Instant::now()) },
            _ = sleep_until(wake) => {}
        }
    }
}

/// The stream of views for SSE: the current one, then each one with a new version.
pub fn changes(shared: Shared) -> impl Stream<Item = View> {
    futures::stream::unfold((shared, None::<u64>), |(shared, last)| async move {
        let view = match last {
            None => shared.view(),
            Some(v) => wait_for_change(&shared, v, Instant::now() + SSE_UNTIL).await,
        };
        if last == Some(view.version) {
            // The publisher went away; end the stream.
            return None;
        }
        let v = view.version;
        Some((view, (shared, Some(v))))
    })
}

/// The body of every error answer of the API.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ErrorBody {
    /// What is wrong, e.g. `wait: "soon" is not a duration (e.g. "30s")`.
    pub error: String,
}

/// The answer of `GET /`: the shape of the kubernetes contrib `leader-elector` and of
/// nais/elector.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Compat {
    /// The leader's identity; empty while none is known.
    pub name: String,
    /// When leadership last changed as this sidecar saw it, RFC 3339 (UTC, seconds).
    pub last_update: String,
}

fn error(status: StatusCode, message: impl Into<String>) -> warp::reply::Response {
    let body = ErrorBody {
        error: message.into(),
    };
    warp::reply::with_status(warp::reply::json(&body), status).into_response()
}

/// Parse the long-poll parameters. `Ok(None)` means answer at once.
pub fn parse_wait(q: &HashMap<String, String>) -> Result<Option<LongPoll>, QueryError> {
    let version = match q.get("version") {
        None => None,
        Some(v) => Some(
            v.parse::<u64>()
                .map_err(|_| QueryError::Version(v.clone()))?,
        ),
    };
    let Some(w) = q.get("wait") else {
        return Ok(None);
    };
    let wait = humantime::parse_duration(w)
        .or_else(|_| w.parse::<u64>().map(Duration::from_secs))
        .map_err(|_| QueryError::Wait(w.clone()))?;
    Ok(Some(LongPoll {
        wait: wait.min(MAX_WAIT),
        version,
    }))
}

async fn get_leader(
    q: HashMap<String, String>,
    shared: Shared,
) -> Result<warp::reply::Response, Infallible> {
    match parse_wait(&q) {
        Err(e) => Ok(error(StatusCode::BAD_REQUEST, e.to_string())),
        Ok(None) => Ok(warp::reply::json(&shared.view()).into_response()),
        Ok(Some(LongPoll { wait, version })) => {
            let version = version.unwrap_or_else(|| shared.view().version);
            let view = wait_for_change(&shared, version, Instant::now() + wait).await;
            Ok(warp::reply::json(&view).into_response())
        }
    }
}

/// `GET /`: the leader-elector / nais elector answer.
pub fn compat(shared: &Shared) -> Compat {
    let now = Instant::now();
    let s = shared.leadership.borrow().at(now);
    Compat {
        name: s.leader.unwrap_or_default(),
        last_update: humantime::format_rfc3339_seconds(s.changed_at).to_string(),
    }
}

async fn post_step_down(
    shared: Shared,
    tx: mpsc::Sender<StepDownRequest>,
) -> Result<warp::reply::Response, Infallible> {
    let (request, reply_rx) = StepDownRequest::new(StepDownReason::Requested);
    if tx.send(request).await.is_err() {
        return Ok(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the election loop is not running",
        ));
    }
    match reply_rx.await {
        Ok(StepDown::Released) => Ok(warp::reply::json(&shared.view()).into_response()),
        Ok(StepDown::NotLeader) => Ok(error(StatusCode::CONFLICT, "not leader")),
        Err(_) => Ok(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the election loop is not running",
        )),
    }
}

async fn recover(r: Rejection) -> Result<warp::reply::Response, Infallible> {
    if r.is_not_found() {
        Ok(error(StatusCode::NOT_FOUND, "not found"))
    } else if r.find::<warp::reject::MethodNotAllowed>().is_some() {
        Ok(error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"))
    } else if r.find::<warp::reject::InvalidQuery>().is_some() {
        Ok(error(StatusCode::BAD_REQUEST, "malformed query string"))
    } else {
        Ok(error(StatusCode::BAD_REQUEST, "bad request"))
    }
}

/// All routes of the API.
pub fn routes(
    all: Vec<LeaseApi>,
) -> impl Filter<Extract = (warp::reply::Response,), Error = Infallible> + Clone {
    let all: Arc<[LeaseApi]> = all.into();
    let shared = all[0].shared.clone();
    let step_down = all[0].step_down.clone();
    let with_all = {
        let a = all.clone();
        warp::any().map(move || a.clone())
    };
    let leases = warp::path!("leases")
        .and(warp::get())
        .and(warp::query::<HashMap<String, String>>())
        .and(with_all.clone())
        .and_then(get_leases);
    let leases_watch = warp::path!("leases" / "watch")
        .and(warp::get())
        .and(with_all.clone())
        .map(|all: Arc<[LeaseApi]>| sse(leases_changes(all), |v: &Leases| v.version));
    let lease_one = warp::path!("leases" / String)
        .and(warp::get())
        .and(with_all.clone())
        .map(|name: String, all: Arc<[LeaseApi]>| {
            match all.iter().find(|l| *l.shared.lease == *name) {
                Some(l) => warp::reply::json(&l.shared.view()).into_response(),
                None => error(
                    StatusCode::NOT_FOUND,
                    format!("no lease {name:?} in this sidecar"),
                ),
            }
        });
    let lease_step = warp::path!("leases" / String / "step-down")
        .and(warp::post())
        .and(with_all)
        .and_then(|name: String, all: Arc<[LeaseApi]>| async move {
            match all.iter().find(|l| *l.shared.lease == *name) {
                Some(l) => post_step_down(l.shared.clone(), l.step_down.clone()).await,
                None => Ok(error(
                    StatusCode::NOT_FOUND,
                    format!("no lease {name:?} in this sidecar"),
                )),
            }
        });
    let with_shared = {
        let s = shared.clone();
        warp::any().map(move || s.clone())
    };
    let leader = warp::path!("leader")
        .and(warp::get())
        .and(warp::query::<HashMap<String, String>>())
        .and(with_shared.clone())
        .and_then(get_leader);
    let watch = warp::path!("leader" / "watch")
        .and(warp::get())
        .and(with_shared.clone())
        .map(|shared: Shared| sse(changes(shared), |v: &View| v.version));
    let root = warp::path::end()
        .and(warp::get())
        .and(with_shared.clone())
        .map(|shared: Shared| warp::reply::json(&compat(&shared)).into_response());
    let step = warp::path!("leader" / "step-down")
        .and(warp::post())
        .and(with_shared)
        .and(warp::any().map(move || step_down.clone()))
        .and_then(post_step_down);
    leader
        .or(watch)
        .unify()
        .or(root)
        .unify()
        .or(step)
        .unify()
        .or(leases)
        .unify()
        .or(leases_watch)
        .unify()
        .or(lease_one)
        .unify()
        .or(lease_step)
        .unify()
        .recover(recover)
        .unify()
}

/// A Server-Sent Events answer: one event per item, its `id` the item's version, its `data`
/// the item as JSON, and a keep-alive comment every [`SSE_KEEP_ALIVE`].
fn sse<T: Serialize + Send + Sync + 'static>(
    items: impl Stream<Item = T> + Send + Sync + 'static,
    version: fn(&T) -> u64,
) -> warp::reply::Response {
    use futures::StreamExt;
    let events = items.map(move |v| {
        Ok::<_, Infallible>(
            warp::sse::Event::default()
                .id(version(&v).to_string())
                .json_data(&v)
                .unwrap_or_default(),
        )
    });
    warp::sse::reply(
        warp::sse::keep_alive()
            .interval(SSE_KEEP_ALIVE)
            .stream(events),
    )
    .into_response()
}

/// Serve the API on `listener` until `stop` is cancelled (at the end of the shutdown, after
/// the release: until then it answers "not leader"). The listener closes then; a connection
/// still open (a keep-alive, a watcher) is served by warp's own task until its client leaves or
/// the process exits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    all: Vec<LeaseApi>,
    stop: tokio_util::sync::CancellationToken,
) {
    let server = warp::serve(routes(all)).incoming(listener).run();
    tokio::select! {
        _ = server => {}
        _ = stop.cancelled() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn wait_parameters() {
        assert_eq!(parse_wait(&q(&[])), Ok(None));
        assert_eq!(parse_wait(&q(&[("version", "3")])), Ok(None));
        assert_eq!(
            parse_wait(&q(&[("wait", "2s"), ("version", "3")])),
            Ok(Some(LongPoll {
                wait: Duration::from_secs(2),
                version: Some(3)
            }))
        );
        assert_eq!(
            parse_wait(&q(&[("wait", "1h")])),
            Ok(Some(LongPoll {
                wait: MAX_WAIT,
                version: None
            }))
        );
        assert_eq!(
            parse_wait(&q(&[("wait", "5")])),
            Ok(Some(LongPoll {
                wait: Duration::from_secs(5),
                version: None
            }))
        );
        assert!(
            parse_wait(&q(&[("wait", "soon")]))
                .unwrap_err()
                .to_string()
                .starts_with("wait:")
        );
        assert!(
            parse_wait(&q(&[("wait", "1s"), ("version", "-1")]))
                .unwrap_err()
                .to_string()
                .starts_with("version:")
        );
        assert_eq!(parse_wait(&q(&[("other", "x")])), Ok(None));
    }
}

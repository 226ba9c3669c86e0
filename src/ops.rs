//! The ops server (`ops.listen`): what kubelet and Prometheus talk to.
//!
//! - `GET /metrics` — Prometheus text format; leadership gauges are evaluated at scrape time.
//! - `GET /healthz` — 200 while the election loop runs and is not stalled, else 503 (liveness).
//! - `GET /readyz` — 200 once serving; never tied to Redis or leadership, so rollouts never stall.
//! - `GET /readyz/leader` — 200 only while leader (for a leader-only readiness gate), else 503;
//!   with several leases (`lease.names`), while leader of any.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use warp::http::StatusCode;
use warp::{Filter, Reply};

use crate::api::LeaseApi;
use crate::metrics::LeadershipGauges;
use crate::redlock::node::Node;

/// The `Content-Type` of `/metrics`: the Prometheus text format.
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the ops handlers read.
#[derive(Clone)]
pub struct Ops {
    /// Every lease (one for the single-lease form): leadership for the answer-time gauges and
    /// `/readyz/leader`, its series, its loop's liveness.
    pub leases: Vec<LeaseApi>,
    /// Nodes, to refresh the quarantine gauges at scrape time.
    pub nodes: Vec<Arc<Node>>,
}

impl Ops {
    /// Render `/metrics` after setting the gauges that depend on the current instant.
    pub fn render_metrics(&self) -> String {
        let now = Instant::now();
        let usable = self
            .nodes
            .iter()
            .filter(|n| n.is_up() && n.counts(now))
            .count();
        for (i, lease) in self.leases.iter().enumerate() {
            let view = lease.shared.view();
            let metrics = &lease.metrics;
            metrics.set_leadership(LeadershipGauges {
                is_leader: view.is_leader,
                valid_for: Duration::from_millis(view.valid_for_ms),
                fencing_token: view.fencing_token,
                leader_known: view.leader.is_some(),
            });
            // `lease_info` joins the per-endpoint series to a lease: one series per process
            // (the first lease's), so a `group_left` join on (job, instance) stays one-to-one.
            if i == 0 {
                metrics.set_identity(&lease.shared.identity);
            }
            metrics.set_quorum_wait(view.quorum_counts_in_ms.map(Duration::from_millis));
            metrics.set_quorum(crate::redlock::math::quorum(self.nodes.len()), usable);
        }
        for n in &self.nodes {
            n.publish_quarantine(now);
        }
        self.leases[0].metrics.render()
    }

    /// Whether every lease's election loop runs and is not stalled.
    fn healthy(&self) -> bool {
        self.leases.iter().all(|l| l.health.healthy())
    }

    /// Whether this sidecar leads a lease (with several, any of them).
    fn leads(&self) -> bool {
        self.leases.iter().any(|l| l.shared.view().is_leader)
    }
}

fn status(ok: bool, body: &'static str) -> warp::reply::Response {
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    warp::reply::with_status(body, code).into_response()
}

/// All routes of the ops server.
pub fn routes(
    ops: Ops,
) -> impl Filter<Extract = (warp::reply::Response,), Error = Infallible> + Clone {
    let o = warp::any().map(move || ops.clone());
    let metrics = warp::path!("metrics")
        .and(warp::get())
        .and(o.clone())
        .map(|o: Ops| {
            warp::reply::with_header(o.render_metrics(), "content-type", METRICS_CONTENT_TYPE)
                .into_response()
        });
    let healthz = warp::path!("healthz")
        .and(warp::get())
        .and(o.clone())
        .map(|o: Ops| {
            let ok = o.healthy();
            status(
                ok,
                if ok {
                    "ok\n"
                } else {
                    "election loop stalled or stopped\n"
                },
            )
        });
    let readyz = warp::path!("readyz")
        .and(warp::get())
        .map(|| status(true, "ok\n"));
    let readyz_leader = warp::path!("readyz" / "leader")
        .and(warp::get())
        .and(o)
        .map(|o: Ops| {
            let leader = o.leads();
            status(leader, if leader { "leader\n" } else { "not leader\n" })
        });
    metrics
        .or(healthz)
        .unify()
        .or(readyz)
        .unify()
        .or(readyz_leader)
        .unify()
        .recover(|r: warp::Rejection| async move {
            let code = if r.is_not_found() {
                StatusCode::NOT_FOUND
            } else {
                StatusCode::METHOD_NOT_ALLOWED
            };
            Ok::<_, Infallible>(warp::reply::with_status("not found\n", code).into_response())
        })
        .unify()
}

/// Serve the ops endpoints on `listener` until `stop` is cancelled (the end of the shutdown,
/// as [`crate::api::serve`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    ops: Ops,
    stop: tokio_util::sync::CancellationToken,
) {
    tokio::select! {
        _ = warp::serve(routes(ops)).incoming(listener).run() => {}
        _ = stop.cancelled() => {}
    }
}

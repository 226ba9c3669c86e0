//! `/leases`: every lease of a sidecar with several (`lease.names`, `lease.shards`), as one
//! answer, its long-poll and its SSE stream ([`super`] routes them).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

use futures::Stream;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use warp::Reply;
use warp::http::StatusCode;

use super::{LongPoll, SSE_UNTIL, error, parse_wait};
use crate::elector::{LoopHealth, StepDownRequest};
use crate::leadership::{Shared, View};
use crate::metrics::Metrics;

/// One lease as the API and the ops server answer for it.
#[derive(Clone)]
pub struct LeaseApi {
    /// Its leadership, eligibility and candidacy.
    pub shared: Shared,
    /// Its elector's step-down requests.
    pub step_down: mpsc::Sender<StepDownRequest>,
    /// Its series (the ops server sets the answer-time gauges).
    pub metrics: Metrics,
    /// Its election loop's liveness.
    pub health: Arc<LoopHealth>,
}

/// `GET /leases`: every lease of this sidecar.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Leases {
    /// The sum of the leases' versions: it changes whenever one lease's answer does (a
    /// `version` for `?wait=`).
    pub version: u64,
    /// How many of them this sidecar leads now.
    pub leading: usize,
    /// Each lease's answer, as `GET /leader` gives it for a single lease, in config order.
    pub leases: Vec<View>,
}

/// Every lease's answer right now.
pub fn leases_view(all: &[LeaseApi]) -> Leases {
    let leases: Vec<View> = all.iter().map(|l| l.shared.view()).collect();
    Leases {
        version: leases.iter().map(|v| v.version).sum(),
        leading: leases.iter().filter(|v| v.is_leader).count(),
        leases,
    }
}

/// Wait until the answer of [`leases_view`] has a version other than `version`, or `until`.
pub async fn wait_for_leases(all: &[LeaseApi], version: u64, until: Instant) -> Leases {
    let mut rxs: Vec<_> = all.iter().map(|l| l.shared.leadership.clone()).collect();
    loop {
        let now = Instant::now();
        let (sum, deadline) = rxs
            .iter_mut()
            .zip(all)
            .fold((0, None), |(sum, d), (rx, l)| {
                let s = rx.borrow_and_update();
                let v = s.view(&l.shared.lease, &l.shared.identity, now).version;
                let dl = s.term.map(|t| t.deadline);
                (sum + v, [d, dl].into_iter().flatten().min())
            });
        if sum != version || now >= until {
            return leases_view(all);
        }
        // A view also changes, without a publish, when a term's deadline passes.
        let wake = deadline.map_or(until, |d: Instant| d.max(now).min(until));
        let changed = futures::future::select_all(rxs.iter_mut().map(|r| Box::pin(r.changed())));
        tokio::select! {
            (r, _, _) = changed => if r.is_err() { return leases_view(all) },
            _ = sleep_until(wake) => {}
        }
    }
}

/// The SSE stream of `/leases/watch`: the current answer, then one per change.
pub fn leases_changes(all: Arc<[LeaseApi]>) -> impl Stream<Item = Leases> {
    futures::stream::unfold((all, None::<u64>), |(all, last)| async move {
        let view = match last {
            None => leases_view(&all),
            Some(v) => wait_for_leases(&all, v, Instant::now() + SSE_UNTIL).await,
        };
        if last == Some(view.version) {
            return None;
        }
        let v = view.version;
        Some((view, (all, Some(v))))
    })
}

pub(super) async fn get_leases(
    q: HashMap<String, String>,
    all: Arc<[LeaseApi]>,
) -> Result<warp::reply::Response, Infallible> {
    match parse_wait(&q) {
        Err(e) => Ok(error(StatusCode::BAD_REQUEST, e.to_string())),
        Ok(None) => Ok(warp::reply::json(&leases_view(&all)).into_response()),
        Ok(Some(LongPoll { wait, version })) => {
            let version = version.unwrap_or_else(|| leases_view(&all).version);
            let view = wait_for_leases(&all, version, Instant::now() + wait).await;
            Ok(warp::reply::json(&view).into_response())
        }
    }
}

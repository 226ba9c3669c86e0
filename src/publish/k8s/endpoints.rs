//! The leader Service's EndpointSlice, written by the sidecar (`kubernetes.endpointSlice`): a
//! new leader lists its own pod IP and ports as soon as its term begins, and removes them when
//! the term ends, so traffic follows the term without waiting for the EndpointSlice
//! controller. Every write is fenced ([`super::slice`]): decided on the slice as read, refused
//! (not sent) when a later term of the lease listed its leader, sent only while the term's
//! deadline is ahead, and conditional on the `resourceVersion` it was decided on; a 409 reads
//! the slice again and decides again.
//!
//! A write replaces the whole list, so the slice never lists two pods: the new leader's write
//! drops the old one's address, and the old one's removal, if it comes second, finds the
//! slice changed (409) and then nothing of its own to remove. That is why the removal need not
//! finish before the release: it runs as the term ends, beside the release, like the label.
//!
//! A new term decides on the copy a watch of the slice keeps ([`super::follow`]) instead of
//! reading the slice first: one request from the term's start to the slice listing its leader,
//! not two. A 409 on that copy waits briefly for the watch's next version, then reads.
//!
//! Failures retry with jittered backoff until the slice says what the term wants; a missing
//! slice is re-created by a leader (the `create` verb, which the chart grants only on request);
//! a refused stale write is counted and reported as a Warning Event on the slice.
//!
//! RBAC used: endpointslices (discovery.k8s.io) get, watch and update on the named slice
//! (without `watch` each new term reads the slice first), create if it must be re-created;
//! events create.

use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::follow::{Watched, follow, read};
use super::slice::{Decision, Own, Seen, Want, decide, fresh, stale_write_event, written};
use super::{BACKOFF_MAX, retry_backoff};
use crate::backoff::Backoff;
use crate::config::EndpointSliceConfig;
use crate::k8s::call::{CallError, call};
use crate::k8s::{Settings, connect};
use crate::leadership::Leadership;
use crate::metrics::Metrics;

/// 409s in a row answered at once; after that the backoff applies (someone else keeps
/// writing the slice).
const CONFLICTS_AT_ONCE: u32 = 3;
/// The retry cap once told to finish.
const FINISH_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// How the writer is fenced.
#[derive(Clone, Copy, Debug)]
pub struct Fence {
    /// False with `--unsafe-disable-endpoint-fence`: no deadline check at the write, no token
    /// check, no `resourceVersion` precondition.
    pub on: bool,
    /// `--unsafe-test-endpoint-write-delay`: the wait between deciding and sending a write.
    pub write_delay: Option<Duration>,
}

/// The EndpointSlice writer's task.
pub struct SlicePublisher {
    /// The client settings (namespace, pod, identity).
    settings: Settings,
    /// The slice and the own entry in it.
    own: Own,
    /// Counters of the slice's lease.
    metrics: Metrics,
    /// That lease's leadership.
    leadership: watch::Receiver<Leadership>,
    /// How the writes are fenced.
    fence: Fence,
    /// The watch's copy of the slice, once [`SlicePublisher::run`] started the watch.
    copy: Option<watch::Receiver<Watched>>,
}

/// The loop's state between wake-ups.
struct State {
    /// The slice as last read or written; `None` = read it first.
    cached: Option<EndpointSlice>,
    /// The slice's metadata as last seen, to re-create it as its installer made it.
    last_meta: Option<ObjectMeta>,
    /// What the slice was confirmed to say last; `None` while unknown.
    done_for: Option<Want>,
    /// Delays between failed attempts.
    backoff: Backoff,
    /// Earliest start of the next attempt after a failure.
    retry_at: Option<Instant>,
    /// Failed attempts in a row, to log the first and every tenth.
    failures: u32,
    /// 409s in a row.
    conflicts: u32,
    /// The term whose refused write was reported (one Event per term).
    refused_for: Option<u64>,
    /// Told to finish: stop once the slice does not list the own address.
    finishing: bool,
    /// The elector's watch is closed.
    elector_gone: bool,
    /// The `resourceVersion` a write was just refused on (409): the watch's copy of that
    /// version is not used again.
    refused_version: Option<String>,
}

impl SlicePublisher {
    /// A writer of `slice` for the own pod at `ip`, following `leadership` (the slice's lease).
    pub fn new(
        settings: Settings,
        slice: &EndpointSliceConfig,
        ip: std::net::Ipv4Addr,
        metrics: Metrics,
        leadership: watch::Receiver<Leadership>,
        fence: Fence,
    ) -> Self {
        let own = Own {
            slice: slice.name.clone(),
            lease: slice.lease.clone(),
            ip: ip.to_string(),
            pod: settings.pod.clone(),
            namespace: String::new(),
            ports: slice.ports.clone(),
        };
        SlicePublisher {
            settings,
            own,
            metrics,
            leadership,
            fence,
            copy: None,
        }
    }

    /// What the slice should say at `now`: the term is read at answer time, so a term past its
    /// deadline is not led, whatever the elector has said so far. With the fence off, the
    /// term as last published, deadline or not.
    fn want(&self, now: Instant) -> Want {
        let state = self.leadership.borrow();
        let term = match self.fence.on {
            true => state.at(now).term,
            false => state.term,
        };
        match term {
            Some(t) => Want::Lead { token: t.token },
            None => Want::Follow,
        }
    }

    /// The term's deadline while leading, for the wake-up.
    fn deadline(&self) -> Option<Instant> {
        self.leadership.borrow().term.map(|t| t.deadline)
    }

    /// Run until `finish` is cancelled and the slice no longer lists the own address.
    pub async fn run(mut self, finish: CancellationToken) {
        let client = loop {
            match connect(&self.settings).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!(error = %e, "endpoint slice: no API server configuration; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(BACKOFF_MAX) => {}
                        _ = finish.cancelled() => return,
                    }
                }
            }
        };
        self.own.namespace = self.settings.namespace_of(&client);
        let api: Api<EndpointSlice> = Api::namespaced(client.clone(), &self.own.namespace);
        let events: Api<Event> = Api::namespaced(client, &self.own.namespace);
        // The watch of the slice runs as long as this loop does.
        let stop_copy = CancellationToken::new();
        let _stop_copy = stop_copy.clone().drop_guard();
        let (copy_tx, copy_rx) = watch::channel(Watched::default());
        self.copy = Some(copy_rx);
        tokio::spawn(follow(
            self.settings.clone(),
            self.own.slice.clone(),
            self.metrics.clone(),
            copy_tx,
            stop_copy,
        ));
        tracing::info!(slice = %self.own.slice, lease = %self.own.lease, ip = %self.own.ip,
            fenced = self.fence.on, "endpoint slice publishing started");
        let mut st = State {
            cached: None,
            last_meta: None,
            done_for: None,
            backoff: retry_backoff(),
            retry_at: None,
            failures: 0,
            conflicts: 0,
            refused_for: None,
            finishing: false,
            elector_gone: false,
            refused_version: None,
        };
        loop {
            let now = Instant::now();
            let want = self.want(now);
            if st.done_for != Some(want) && st.retry_at.is_none_or(|t| now >= t) {
                self.attempt(&api, &events, &mut st, want).await;
                continue;
            }
            if st.finishing && st.done_for == Some(Want::Follow) && want == Want::Follow {
                break;
            }
            let retry = st.retry_at.filter(|_| st.done_for != Some(want));
            let deadline = self.deadline().filter(|_| want != Want::Follow);
            tokio::select! {
                r = self.leadership.changed(), if !st.elector_gone => st.elector_gone = r.is_err(),
                _ = sleep_until(deadline.unwrap_or(now)), if deadline.is_some() => {}
                _ = sleep_until(retry.unwrap_or(now)), if retry.is_some() => {}
                _ = finish.cancelled(), if !st.finishing => {
                    st.finishing = true;
                    st.backoff.cap(FINISH_BACKOFF_MAX);
                    st.retry_at = None;
                }
            }
        }
        tracing::info!(slice = %self.own.slice, "endpoint slice publishing stopped; the slice does not list this pod");
    }

    /// One attempt to make the slice say `want`.
    async fn attempt(
        &mut self,
        api: &Api<EndpointSlice>,
        events: &Api<Event>,
        st: &mut State,
        want: Want,
    ) {
        // A new term reads the slice afresh: the previous leader has most likely written since.
        if matches!(want, Want::Lead { .. }) && !matches!(st.done_for, Some(Want::Lead { .. })) {
            st.cached = None;
        }
        let (slice, read) = match st.cached.take() {
            Some(s) => (s, "last write"),
            None => match self.read(api, st, want).await {
                Ok(s) => s,
                Err(CallError::NotFound(_)) if want == Want::Follow => {
                    // No slice lists nobody: nothing to remove.
                    st.done_for = Some(want);
                    return;
                }
                Err(CallError::NotFound(_)) => {
                    let new = fresh(&self.own, st.last_meta.as_ref());
                    let params = PostParams::default();
                    match call(&self.metrics, "create", api.create(&params, &new)).await {
                        Ok(s) => {
                            tracing::warn!(slice = %self.own.slice, "the endpoint slice was missing; re-created it");
                            self.metrics.slice_written("create");
                            (s, "create")
                        }
                        Err(e) => return self.failed(st, want, &e),
                    }
                }
                Err(e) => return self.failed(st, want, &e),
            },
        };
        st.last_meta = Some(slice.metadata.clone());
        let decision = decide(
            &Seen::of(&slice, &self.own),
            &self.own.ip,
            want,
            self.fence.on,
        );
        let body = match decision {
            Decision::Done => {
                st.cached = Some(slice);
                return self.succeeded(st, want);
            }
            Decision::Refuse { theirs } => {
                self.refused(events, st, &slice, want, theirs).await;
                st.cached = Some(slice);
                return self.succeeded(st, want);
            }
            Decision::List { .. } | Decision::Empty => {
                written(&slice, &self.own, decision, self.fence.on)
            }
        };
        if let Some(d) = self.fence.write_delay {
            // The tests pause the sidecar after this line: the read is done, the write held.
            tracing::info!(slice = %self.own.slice, delay_ms = d.as_millis() as u64, ?decision,
                "holding this endpoint slice write (--unsafe-test-endpoint-write-delay)");
            tokio::time::sleep(d).await;
        }
        // The term is read again at the moment of the write: a term that ended meanwhile (a
        // pause, a slow read) never lists its address.
        if self.fence.on && self.want(Instant::now()) != want {
            return;
        }
        let kind = match decision {
            Decision::List { .. } => "list",
            _ => "empty",
        };
        let sent_version = body.metadata.resource_version.clone();
        let params = PostParams::default();
        let sent = call(
            &self.metrics,
            "update",
            api.replace(&self.own.slice, &params, &body),
        );
        // Dropped as soon as the term it writes for ends (the server then refuses it anyway if
        // it arrives after another write, by its version).
        let outcome = match self.fence.on {
            true => tokio::select! {
                r = sent => Some(r),
                _ = until_want_differs(&mut self.leadership, want) => None,
            },
            false => Some(sent.await),
        };
        match outcome {
            None => {}
            Some(Ok(s)) => {
                self.metrics.slice_written(kind);
                // One line a term: the real-node benchmark reads the write's moment from it.
                // `decided_on`: what the write was decided on (the watch's copy, a GET, the
                // answer of the last write, a create).
                tracing::info!(slice = %self.own.slice, ?want, kind, decided_on = read,
                    version = s.metadata.resource_version.as_deref().unwrap_or(""),
                    "endpoint slice written");
                st.last_meta = Some(s.metadata.clone());
                st.cached = Some(s);
                self.succeeded(st, want);
            }
            Some(Err(CallError::Conflict(_))) => {
                self.metrics.slice_conflict();
                st.refused_version = sent_version;
                st.conflicts += 1;
                if st.conflicts > CONFLICTS_AT_ONCE {
                    let e = CallError::Conflict(Box::default());
                    self.failed(st, want, &e);
                }
            }
            // Deleted since it was read: the next attempt re-creates it (a leader) or finds
            // nothing to remove.
            Some(Err(CallError::NotFound(_))) => {}
            Some(Err(e)) => self.failed(st, want, &e),
        }
    }

    /// The slice to decide on ([`read`]).
    async fn read(
        &mut self,
        api: &Api<EndpointSlice>,
        st: &mut State,
        want: Want,
    ) -> Result<(EndpointSlice, &'static str), CallError> {
        let copy = match want {
            Want::Lead { .. } => self.copy.as_mut(),
            Want::Follow => None,
        };
        read(
            copy,
            st.refused_version.take(),
            api,
            &self.own.slice,
            &self.metrics,
        )
        .await
    }

    /// The slice says `want`.
    fn succeeded(&self, st: &mut State, want: Want) {
        if st.failures > 0 {
            tracing::info!(failures = st.failures, slice = %self.own.slice, "endpoint slice converged after failures");
        }
        st.done_for = Some(want);
        st.failures = 0;
        st.conflicts = 0;
        st.backoff.reset();
        st.retry_at = None;
    }

    /// An attempt for `want` failed: schedule the retry, log the first and every tenth.
    fn failed(&self, st: &mut State, want: Want, e: &CallError) {
        st.cached = None;
        st.failures += 1;
        let delay = st.backoff.next_delay();
        if st.failures == 1 || st.failures.is_multiple_of(10) {
            tracing::warn!(error = %e, ?want, slice = %self.own.slice, failures = st.failures,
                retry_in_ms = delay.as_millis() as u64,
                "endpoint slice update failed; retrying (the election is not affected)");
        }
        st.retry_at = Some(Instant::now() + delay);
    }

    /// The fence refused a write: count it, and tell once per term (log and a Warning Event on
    /// the slice, best effort).
    async fn refused(
        &self,
        events: &Api<Event>,
        st: &mut State,
        slice: &EndpointSlice,
        want: Want,
        theirs: u64,
    ) {
        self.metrics.slice_refused();
        let Want::Lead { token } = want else { return };
        if st.refused_for == Some(token) {
            return;
        }
        st.refused_for = Some(token);
        let message = format!(
            "{} refused to list {} in {} for term {token} of lease {}: the slice carries the later term {theirs}",
            self.settings.identity, self.own.ip, self.own.slice, self.own.lease
        );
        tracing::warn!(slice = %self.own.slice, token, theirs, "{message}");
        let event = stale_write_event(
            &self.own,
            slice,
            &self.settings.identity,
            message,
            Timestamp::now(),
        );
        let params = PostParams::default();
        if let Err(e) = call(&self.metrics, "create", events.create(&params, &event)).await {
            tracing::warn!(error = %e, "dropping the Event of a refused endpoint slice write");
        }
    }
}

/// Resolves once the slice's wanted state at answer time differs from `want` (a change on the
/// watch, or the term's deadline passing).
async fn until_want_differs(rx: &mut watch::Receiver<Leadership>, want: Want) {
    let wanted = |s: &Leadership| match s.at(Instant::now()).term {
        Some(t) => Want::Lead { token: t.token },
        None => Want::Follow,
    };
    loop {
        let deadline = rx.borrow().term.map(|t| t.deadline);
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    match deadline {
                        Some(d) if want != Want::Follow => sleep_until(d).await,
                        _ => std::future::pending().await,
                    }
                    return;
                }
            }
            _ = sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() && want != Want::Follow => return,
        }
        if wanted(&rx.borrow()) != want {
            return;
        }
    }
}

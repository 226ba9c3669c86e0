//! Leadership Events on the own pod: a small queue and one task that sends them, best effort,
//! so that an Event never holds up a label.
//!
//! They are `core/v1` Events built here rather than through `kube::runtime::events::Recorder`:
//! the Recorder writes `events.k8s.io/v1` (another API group in the Role, `note`/`regarding`
//! instead of `message`/`involvedObject`, its own names and a series cache that needs `patch`),
//! while these keep the one `create` rule and the fields the README documents.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::task::AbortOnDropHandle;

use super::{Role, retry_backoff};
use crate::elector::StepDownReason;
use crate::k8s::Settings;
use crate::k8s::call::{CallError, call};
use crate::leadership::Leadership;
use crate::metrics::Metrics;

/// `source.component` / `reportingComponent` of Events.
const COMPONENT: &str = "redlock-elector";
/// How long an Event is retried before it is dropped (Events are informational, and one that
/// is a minute late still tells what happened during an API-server outage).
const EVENT_GIVE_UP: std::time::Duration = std::time::Duration::from_secs(60);
/// Events waiting to be sent; more than a few mean the API server is away, and the oldest
/// ones already tell the story.
const QUEUE: usize = 32;

/// The publisher's end of the Event queue.
pub(super) struct Events {
    /// Leadership as the elector publishes it: why a term ended is read from it when the loss
    /// is sent.
    leadership: watch::Receiver<Leadership>,
    /// The queue to the sender task.
    tx: mpsc::Sender<EventJob>,
    /// The sender task, awaited at the end so queued Events still go out; aborted if the
    /// publisher is dropped first (its task aborted at the end of the shutdown budget).
    task: AbortOnDropHandle<()>,
}

/// An Event waiting to be sent.
struct EventJob {
    /// What happened.
    kind: EventKind,
    /// When it happened.
    at: Timestamp,
}

/// The leadership change an Event reports.
enum EventKind {
    /// Became leader of a term.
    BecameLeader {
        /// The term's fencing token, named in the message.
        token: u64,
    },
    /// Lost leadership. The reason is read when the Event is first sent: the elector publishes it
    /// with the step-down ([`crate::leadership::Ended`]), but the publisher may see the term end
    /// first, at its deadline; a term the elector has not ended yet by then did not renew in
    /// time.
    Lost {
        /// The ended term's fencing token, named in the message.
        token: u64,
        /// Leadership as the elector publishes it, read when the Event is sent.
        leadership: watch::Receiver<Leadership>,
    },
}

impl Events {
    /// Start the sender task for the own pod in `namespace`; the pod's UID arrives on `uid`.
    pub(super) fn start(
        client: Client,
        settings: Settings,
        namespace: String,
        metrics: Metrics,
        uid: watch::Receiver<Option<String>>,
        leadership: watch::Receiver<Leadership>,
    ) -> Self {
        let (tx, jobs) = mpsc::channel(QUEUE);
        let sender = Sender {
            api: Api::namespaced(client, &namespace),
            settings,
            namespace,
            metrics,
            uid,
        };
        Events {
            leadership,
            tx,
            task: AbortOnDropHandle::new(tokio::spawn(sender.run(jobs))),
        }
    }

    /// Queue the Events of a change of role.
    pub(super) fn transition(&mut self, from: Role, to: Role) {
        let at = Timestamp::now();
        let mut jobs = Vec::new();
        if let Role::Leader { token } = from {
            jobs.push(EventKind::Lost {
                token,
                leadership: self.leadership.clone(),
            });
        }
        if let Role::Leader { token } = to {
            jobs.push(EventKind::BecameLeader { token });
        }
        for kind in jobs {
            if self.tx.try_send(EventJob { kind, at }).is_err() {
                tracing::warn!("event queue full; dropping a leadership Event");
            }
        }
    }

    /// Close the queue and wait until the Events in it are sent or given up.
    pub(super) async fn close(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

/// What an Event says: `reason`, `type` and `message`.
struct Described {
    /// `BecameLeader` or `LostLeadership`.
    reason: &'static str,
    /// `Normal`, or `Warning` for a loss the sidecar did not choose.
    type_: &'static str,
    /// The human-readable line.
    message: String,
}

/// The sender task's state.
struct Sender {
    /// Events of the own namespace.
    api: Api<Event>,
    /// Fixed settings (pod, identity, lease).
    settings: Settings,
    /// The own namespace.
    namespace: String,
    /// Request counters.
    metrics: Metrics,
    /// The own pod's UID once known, for `involvedObject.uid`.
    uid: watch::Receiver<Option<String>>,
}

impl Sender {
    /// Send queued Events in order until the queue closes.
    async fn run(self, mut jobs: mpsc::Receiver<EventJob>) {
        // Two Events of one change share the instant; the sequence keeps their names apart.
        let mut seq = 0u16;
        while let Some(job) = jobs.recv().await {
            seq = seq.wrapping_add(1);
            let at = job.at;
            let described = self.describe(job.kind);
            let reason = described.reason;
            self.deliver(self.build(at, seq, described), reason).await;
        }
    }

    /// Reason, type and message of `kind`; a loss reads the elector's reason now.
    fn describe(&self, kind: EventKind) -> Described {
        let (identity, lease) = (&self.settings.identity, &self.settings.lease);
        match kind {
            EventKind::BecameLeader { token } => Described {
                reason: "BecameLeader",
                type_: "Normal",
                message: format!(
                    "{identity} became leader of lease {lease} (fencing token {token})"
                ),
            },
            EventKind::Lost { token, leadership } => {
                let why = match leadership.borrow().ended {
                    Some(ended) if ended.token == token => ended.reason,
                    // Seen at the deadline before the elector said why: the renewal did not
                    // make it.
                    _ => StepDownReason::RenewalFailed,
                };
                let type_ = match why {
                    StepDownReason::RenewalFailed | StepDownReason::Stalled => "Warning",
                    StepDownReason::Requested
                    | StepDownReason::Shutdown
                    | StepDownReason::Preferred
                    | StepDownReason::ChildExited
                    | StepDownReason::Balance => "Normal",
                    StepDownReason::AppUnhealthy => "Warning",
                };
                Described {
                    reason: "LostLeadership",
                    type_,
                    message: format!(
                        "{identity} lost leadership of lease {lease} (fencing token {token}): {}",
                        why.as_str()
                    ),
                }
            }
        }
    }

    /// The `core/v1` Event on the own pod.
    fn build(&self, at: Timestamp, seq: u16, d: Described) -> Event {
        let time = Time(at);
        let pod = &self.settings.pod;
        Event {
            metadata: ObjectMeta {
                // Unique per Event, like client-go's `<object>.<hex nanos>`.
                name: Some(format!("{pod}.{:x}{seq:04x}", at.as_nanosecond())),
                namespace: Some(self.namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.clone()),
                namespace: Some(self.namespace.clone()),
                uid: self.uid.borrow().clone(),
                ..Default::default()
            },
            reason: Some(d.reason.into()),
            message: Some(d.message),
            type_: Some(d.type_.into()),
            count: Some(1),
            first_timestamp: Some(time.clone()),
            last_timestamp: Some(time),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(self.settings.identity.clone()),
            ..Default::default()
        }
    }

    /// Create `event`, retrying with backoff for up to [`EVENT_GIVE_UP`].
    async fn deliver(&self, event: Event, reason: &'static str) {
        let mut backoff = retry_backoff();
        let started = Instant::now();
        let params = PostParams::default();
        loop {
            let create = self.api.create(&params, &event);
            match call(&self.metrics, "create", create).await {
                // A conflict on create means an earlier attempt got through.
                Ok(_) | Err(CallError::Conflict(_)) => return,
                Err(e) if started.elapsed() >= EVENT_GIVE_UP => {
                    tracing::warn!(error = %e, reason, "dropping a leadership Event after {EVENT_GIVE_UP:?} of failures");
                    return;
                }
                Err(_) => tokio::time::sleep(backoff.next_delay()).await,
            }
        }
    }
}

//! The converge loop: drive the own pod's label (and, with several leases, the led-leases
//! annotation) to what is wanted *now*, retrying with backoff, dropping an attempt as soon as its
//! role is no longer wanted, and finishing on follower. A change of the led set alone does not
//! drop an attempt: it is written after it, at most every [`LED_SPACING`].

use std::time::Duration;

use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use super::events::Events;
use super::pods::Pods;
use super::{BACKOFF_MAX, LED_SPACING, Role, Shown, Wanted, retry_backoff};
use crate::backoff::Backoff;
use crate::k8s::CallError;
use crate::k8s::{Settings, connect};
use crate::leadership::{Leadership, Led};
use crate::metrics::Metrics;

/// The retry cap once told to finish: little time is left, so retry quickly.
const FINISH_BACKOFF_MAX: Duration = Duration::from_millis(100);

/// The publisher task.
pub struct Publisher {
    /// Fixed settings.
    settings: Settings,
    /// Request counters.
    metrics: Metrics,
    /// Leadership as the elector publishes it (with why the last term ended, for Events).
    leadership: watch::Receiver<Leadership>,
    /// With several leases: the leases led, for the led-leases annotation.
    led: Option<watch::Receiver<Led>>,
}

/// The converge loop's state between wake-ups.
struct Converge {
    /// What the API server confirmed last; `None` while unknown (an attempt that failed,
    /// timed out or was dropped may still land).
    applied: Option<Shown>,
    /// When the last write was confirmed: a change of the led set alone waits
    /// [`LED_SPACING`] from there.
    written_at: Option<Instant>,
    /// The role last read from the watch, to queue the Events of a change once.
    seen: Role,
    /// Delays between failed attempts.
    backoff: Backoff,
    /// Earliest start of the next attempt after a failure.
    retry_at: Option<Instant>,
    /// Failed attempts in a row, to log the first and every tenth.
    failures: u32,
    /// `finish` was cancelled: stop once the label shows follower.
    finishing: bool,
    /// The elector's watch is closed; only a term's deadline can still change the role.
    elector_gone: bool,
    /// The led set's watch is closed (or there is none).
    led_gone: bool,
}

impl Converge {
    /// Nothing applied yet; the first pass labels the pod with the role wanted then.
    fn new() -> Self {
        Converge {
            applied: None,
            written_at: None,
            seen: Role::Follower,
            backoff: retry_backoff(),
            retry_at: None,
            failures: 0,
            finishing: false,
            elector_gone: false,
            led_gone: false,
        }
    }

    /// Whether the pod shows `wanted`.
    fn shows(&self, wanted: &Wanted) -> bool {
        self.applied.as_ref() == Some(&wanted.shown())
    }

    /// Whether the pod still has to be changed to `wanted`, and the backoff and the spacing of
    /// led-set changes allow it now.
    fn attempt_due(&self, wanted: &Wanted, now: Instant) -> bool {
        !self.shows(wanted)
            && self.retry_at.is_none_or(|t| now >= t)
            && self.spaced_until(wanted).is_none_or(|t| now >= t)
    }

    /// The pending retry, if the pod does not show `wanted` yet.
    fn retry_for(&self, wanted: &Wanted) -> Option<Instant> {
        self.retry_at.filter(|_| !self.shows(wanted))
    }

    /// When a change of the led set alone may be written: [`LED_SPACING`] after the last write.
    /// `None` when nothing holds it back (the role changes, or the publisher is finishing).
    fn spaced_until(&self, wanted: &Wanted) -> Option<Instant> {
        let applied = self.applied.as_ref()?;
        if self.finishing || applied.role != wanted.role || applied.led == wanted.led {
            return None;
        }
        self.written_at.map(|t| t + LED_SPACING)
    }

    /// The pod shows `shown`: forget the failures.
    fn succeeded(&mut self, shown: Shown) {
        if self.failures > 0 {
            tracing::info!(
                failures = self.failures,
                "pod label converged after failures"
            );
        }
        tracing::debug!(role = ?shown.role, led = ?shown.led, "pod label updated");
        self.applied = Some(shown);
        self.written_at = Some(Instant::now());
        self.failures = 0;
        self.backoff.reset();
        self.retry_at = None;
    }

    /// An attempt for `role` failed: schedule the retry, log the first and every tenth.
    fn failed(&mut self, role: Role, e: &CallError) {
        self.failures += 1;
        let delay = self.backoff.next_delay();
        if self.failures == 1 || self.failures.is_multiple_of(10) {
            tracing::warn!(error = %e, ?role, failures = self.failures, retry_in_ms = delay.as_millis() as u64,
                "pod label update failed; retrying (the election is not affected)");
        }
        self.retry_at = Some(Instant::now() + delay);
    }

    /// Told to finish: stop once the label shows follower.
    fn finish(&mut self) {
        self.finishing = true;
        // Little time is left: retry quickly, and without waiting out a long delay.
        self.backoff.cap(FINISH_BACKOFF_MAX);
        self.retry_at = None;
    }
}

impl Publisher {
    /// A publisher for `settings`, reading the elector's watches.
    pub fn new(
        settings: Settings,
        metrics: Metrics,
        leadership: watch::Receiver<Leadership>,
        led: Option<watch::Receiver<Led>>,
    ) -> Self {
        Publisher {
            settings,
            metrics,
            leadership,
            led,
        }
    }

    /// What is wanted at `now`: the role, and with several leases the led set.
    fn wanted(&mut self, now: Instant) -> Wanted {
        let wanted = Wanted::at(&self.leadership.borrow_and_update(), now);
        match (&mut self.led, &self.settings.led_annotation) {
            (Some(led), Some(annotation)) => {
                wanted.with_led(&led.borrow_and_update(), annotation, now)
            }
            _ => wanted,
        }
    }

    /// Run until `finish` is cancelled and the label shows the final state (follower); the
    /// caller bounds how long it waits for that.
    pub async fn run(mut self, finish: CancellationToken) {
        let Some(client) = self.connect(&finish).await else {
            return;
        };
        let namespace = self.settings.namespace_of(&client);
        tracing::info!(pod = %self.settings.pod, %namespace, "kubernetes publishing started");
        let (uid_tx, uid_rx) = watch::channel(None);
        let api = Api::namespaced(client.clone(), &namespace);
        let mut pods = Pods::new(self.settings.clone(), self.metrics.clone(), api, uid_tx);
        let mut events = self.settings.events.then(|| {
            let (settings, metrics) = (self.settings.clone(), self.metrics.clone());
            Events::start(
                client,
                settings,
                namespace,
                metrics,
                uid_rx,
                self.leadership.clone(),
            )
        });
        let mut state = Converge::new();
        loop {
            let now = Instant::now();
            let wanted = self.wanted(now);
            if wanted.role != state.seen {
                if let Some(events) = &mut events {
                    events.transition(state.seen, wanted.role);
                }
                state.seen = wanted.role;
            }
            if state.attempt_due(&wanted, now) {
                self.attempt(&mut pods, &mut state, &wanted).await;
                continue;
            }
            if state.finishing && state.shows(&wanted) {
                break;
            }
            self.wait(&mut state, &wanted, &finish).await;
        }
        if let Some(events) = events {
            events.close().await;
        }
        tracing::info!("kubernetes publishing stopped; pod label shows follower");
    }

    /// A client, retried every [`BACKOFF_MAX`]; `None` if told to finish first.
    async fn connect(&self, finish: &CancellationToken) -> Option<Client> {
        loop {
            match connect(&self.settings).await {
                Ok(c) => return Some(c),
                Err(e) => {
                    tracing::error!(error = %e, "kubernetes publishing: no API server configuration; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(BACKOFF_MAX) => {}
                        _ = finish.cancelled() => return None,
                    }
                }
            }
        }
    }

    /// One attempt to make the pod show `wanted`.
    async fn attempt(&mut self, pods: &mut Pods, state: &mut Converge, wanted: &Wanted) {
        // Until this attempt succeeds the pod's state is unknown: a patch that failed, timed out
        // or was dropped may still land. So whatever is wanted next is applied again,
        // conditional on the version read before, and the server rejects whichever of the two
        // comes second if the first landed.
        state.applied = None;
        // Drop the attempt as soon as it is for a role no longer wanted. (A change of the led
        // set alone is written after it.)
        let outcome = tokio::select! {
            r = pods.apply(wanted.role, wanted.led.as_deref()) => Some(r),
            _ = until_role_differs(&mut self.leadership, wanted) => None,
        };
        match outcome {
            Some(Ok(())) => state.succeeded(wanted.shown()),
            Some(Err(e)) => state.failed(wanted.role, &e),
            // The wanted state changed mid-flight: re-evaluate at once.
            None => {}
        }
    }

    /// Sleep until something may change what to do: the watches, the term's deadline, a led
    /// lease's deadline, a due retry, the end of the spacing of led-set changes, or `finish`.
    async fn wait(&mut self, state: &mut Converge, wanted: &Wanted, finish: &CancellationToken) {
        let now = Instant::now();
        let retry = state.retry_for(wanted);
        let spaced = state.spaced_until(wanted).filter(|_| !state.shows(wanted));
        let led_changed = async {
            match &mut self.led {
                Some(led) => led.changed().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = self.leadership.changed(), if !state.elector_gone => {
                // The elector has ended (shutdown): the last value stays as it was.
                state.elector_gone = r.is_err();
            }
            r = led_changed, if !state.led_gone => state.led_gone = r.is_err(),
            _ = sleep_until(wanted.deadline.unwrap_or(now)), if wanted.deadline.is_some() => {}
            _ = sleep_until(wanted.led_until.unwrap_or(now)), if wanted.led_until.is_some() => {}
            _ = sleep_until(retry.unwrap_or(now)), if retry.is_some() => {}
            _ = sleep_until(spaced.unwrap_or(now)), if spaced.is_some() => {}
            _ = finish.cancelled(), if !state.finishing => state.finish(),
        }
    }
}

/// Resolves once the role at answer time differs from `wanted.role` (a change on the watch, or
/// the term's deadline passing).
async fn until_role_differs(rx: &mut watch::Receiver<Leadership>, wanted: &Wanted) {
    loop {
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    // No more changes will come; only the deadline can still end the term.
                    match wanted.deadline {
                        Some(d) => sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                    return;
                }
            }
            _ = sleep_until(wanted.deadline.unwrap_or_else(Instant::now)), if wanted.deadline.is_some() => return,
        }
        if Wanted::at(&rx.borrow(), Instant::now()).role != wanted.role {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Term;

    fn leader(token: u64, deadline: Option<Instant>) -> Wanted {
        Wanted {
            role: Role::Leader { token },
            deadline,
            led: None,
            led_until: None,
        }
    }

    #[tokio::test]
    async fn an_attempt_is_dropped_when_the_term_ends() {
        let now = Instant::now();
        let deadline = now + Duration::from_millis(200);
        let (tx, mut rx) = watch::channel(
            Leadership::default().with(Some(Term { token: 1, deadline }), Some("a".into())),
        );
        // The deadline alone ends the wait, with no message from the elector.
        let t0 = Instant::now();
        until_role_differs(&mut rx, &leader(1, Some(deadline))).await;
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(190) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
        // A renewal (deadline moves, same term) does not end it; a step-down does.
        let term = |token, secs| Term {
            token,
            deadline: Instant::now() + Duration::from_secs(secs),
        };
        tx.send_modify(|s| *s = s.with(Some(term(2, 10)), Some("a".into())));
        let deadline = tx.borrow().term.map(|t| t.deadline);
        let waiter = tokio::spawn(async move {
            until_role_differs(&mut rx, &leader(2, deadline)).await;
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send_modify(|s| *s = s.with(Some(term(2, 20)), Some("a".into())));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "a renewal is not a change of role");
        tx.send_modify(|s| *s = s.with(None, None));
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("a change of role ends the wait")
            .unwrap();
    }

    #[test]
    fn a_change_of_the_led_set_alone_waits_for_the_spacing_and_a_change_of_role_does_not() {
        let now = Instant::now();
        let wanted = |role, led: Option<&str>| Wanted {
            role,
            deadline: None,
            led: led.map(String::from),
            led_until: None,
        };
        let lead = Role::Leader { token: 1 };
        let mut state = Converge::new();
        // Nothing applied yet: due at once.
        assert!(state.attempt_due(&wanted(lead, Some("a")), now));
        state.succeeded(wanted(lead, Some("a")).shown());
        let at = state.written_at.unwrap();
        // The same: nothing to do (a renewal writes nothing).
        assert!(!state.attempt_due(&wanted(lead, Some("a")), at));
        // The set alone changed: due LED_SPACING after the last write.
        let more = wanted(lead, Some("a,b"));
        assert_eq!(state.spaced_until(&more), Some(at + LED_SPACING));
        assert!(!state.attempt_due(&more, at + LED_SPACING / 2));
        assert!(state.attempt_due(&more, at + LED_SPACING));
        // The role changed: due at once, with the set as it is then.
        assert!(state.attempt_due(&wanted(Role::Follower, None), at));
        assert!(state.attempt_due(&wanted(Role::Leader { token: 2 }, Some("b")), at));
        // Finishing: no spacing either.
        state.finish();
        assert!(state.attempt_due(&more, at));
    }
}

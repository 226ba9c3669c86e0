//! With several leases (`lease.names`, `lease.shards`): what the pod label and annotation read,
//! merged from every lease's leadership ([`any_led`]).

use tokio::sync::watch;
use tokio::time::Instant;

use super::Leadership;

/// With several leases (`lease.names`, `lease.shards`): the leases this sidecar leads, by their
/// index in `lease.names`, each with its term's deadline; for the pod annotation that lists them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Led {
    /// (index in `lease.names`, the term's deadline), in config order.
    pub leases: Vec<(usize, Instant)>,
}

impl Led {
    /// The leases led at `now` (their deadline not passed), in config order, and the earliest
    /// of their deadlines: the set changes on its own then.
    pub fn at(&self, now: Instant) -> (Vec<usize>, Option<Instant>) {
        let live = self.leases.iter().filter(|(_, d)| *d > now);
        (
            live.clone().map(|(i, _)| *i).collect(),
            live.map(|(_, d)| *d).min(),
        )
    }

    /// The indices alone (what a change of the set is).
    fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        self.leases.iter().map(|(i, _)| *i)
    }
}

/// With several leases (`lease.names`, `lease.shards`): one leadership, for the pod label, that
/// is led while any lease is: the first lease, in config order, that this sidecar leads now,
/// else the first lease's state; and the set of the leases it leads ([`Led`]), for the pod
/// annotation. Both are republished on every change of any lease until every elector has gone
/// (a lease whose elector went keeps its last state, which its deadline still ends). The first
/// led lease, not the one with the latest deadline: its token stays the same while it is led, so
/// the renewals of the other leases do not change the label's term (each change is a pod patch
/// and an Event). A renewal moves a deadline in [`Led`] without notifying its readers: only a
/// change of the set does (a reader that wakes at a deadline reads the moved one).
pub fn any_led(
    tasks: &tokio_util::task::TaskTracker,
    mut all: Vec<watch::Receiver<Leadership>>,
) -> (watch::Receiver<Leadership>, watch::Receiver<Led>) {
    fn merged(all: &mut [watch::Receiver<Leadership>]) -> (Leadership, Led) {
        let now = Instant::now();
        let states: Vec<Leadership> = all
            .iter_mut()
            .map(|r| r.borrow_and_update().clone())
            .collect();
        let led = Led {
            leases: states
                .iter()
                .enumerate()
                .filter_map(|(i, l)| l.term.filter(|t| t.deadline > now).map(|t| (i, t.deadline)))
                .collect(),
        };
        let first = states
            .iter()
            .find(|l| l.term.is_some_and(|t| t.deadline > now))
            .unwrap_or(&states[0])
            .clone();
        (first, led)
    }
    let (first, led) = merged(&mut all);
    let (tx, rx) = watch::channel(first);
    let (led_tx, led_rx) = watch::channel(led);
    tasks.spawn(async move {
        let mut open = vec![true; all.len()];
        loop {
            let changed = futures::future::select_all(
                all.iter_mut()
                    .enumerate()
                    .filter(|(i, _)| open[*i])
                    .map(|(i, r)| Box::pin(async move { (i, r.changed().await) })),
            );
            let ((i, r), _, _) = changed.await;
            if r.is_err() {
                open[i] = false;
                if !open.contains(&true) {
                    return;
                }
            }
            let (next, led) = merged(&mut all);
            tx.send_if_modified(|s| std::mem::replace(s, next.clone()) != next);
            led_tx.send_if_modified(|s| {
                let moved = !s.indices().eq(led.indices());
                *s = led;
                moved
            });
        }
    });
    (rx, led_rx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::Term;
    use std::time::Duration;

    #[tokio::test]
    async fn any_led_follows_the_first_led_lease_and_ignores_the_others_renewals() {
        let now = Instant::now();
        let term = |token, ms| Term {
            token,
            deadline: now + Duration::from_millis(ms),
        };
        let (tx0, rx0) = watch::channel(Leadership::default());
        let (tx1, rx1) = watch::channel(Leadership::default());
        let tasks = tokio_util::task::TaskTracker::new();
        let (mut any, mut led) = any_led(&tasks, vec![rx0, rx1]);
        let set = |led: &mut watch::Receiver<Led>| led.borrow_and_update().at(Instant::now()).0;
        assert_eq!(
            any.borrow().term,
            None,
            "nothing led: the first lease's state"
        );
        assert_eq!(set(&mut led), Vec::<usize>::new());
        tx1.send_modify(|l| *l = l.with(Some(term(11, 5_000)), Some("me".into())));
        any.changed().await.unwrap();
        assert_eq!(any.borrow_and_update().term.map(|t| t.token), Some(11));
        led.changed().await.unwrap();
        assert_eq!(set(&mut led), [1]);
        // The first lease is led too: it is the one shown, even with the earlier deadline.
        tx0.send_modify(|l| *l = l.with(Some(term(3, 1_000)), Some("me".into())));
        any.changed().await.unwrap();
        assert_eq!(any.borrow_and_update().term.map(|t| t.token), Some(3));
        led.changed().await.unwrap();
        assert_eq!(
            led.borrow_and_update().at(now),
            (vec![0, 1], Some(now + Duration::from_millis(1_000)))
        );
        // The second one renews: the shown term keeps its token, and the set is the same (its
        // readers are not woken), with the moved deadline.
        tx1.send_modify(|l| *l = l.with(Some(term(11, 9_000)), Some("me".into())));
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(any.borrow_and_update().term.map(|t| t.token), Some(3));
        assert!(
            !led.has_changed().unwrap(),
            "a renewal is not a change of the set"
        );
        assert_eq!(
            led.borrow().leases,
            [
                (0, now + Duration::from_millis(1_000)),
                (1, now + Duration::from_millis(9_000))
            ]
        );
        // The first one ends: the second is shown.
        tx0.send_modify(|l| *l = l.with(None, None));
        any.changed().await.unwrap();
        assert_eq!(any.borrow_and_update().term.map(|t| t.token), Some(11));
        led.changed().await.unwrap();
        assert_eq!(set(&mut led), [1]);
        // The first elector goes: the second one's changes are still merged until it goes too.
        drop(tx0);
        tx1.send_modify(|l| *l = l.with(None, None));
        any.changed().await.unwrap();
        assert_eq!(any.borrow_and_update().term, None);
        led.changed().await.unwrap();
        assert_eq!(set(&mut led), Vec::<usize>::new());
        drop(tx1);
        tasks.close();
        tasks.wait().await;
    }
}

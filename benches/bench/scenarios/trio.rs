//! Three real sidecars of one lease on the same nodes, each followed over SSE: the cast of the
//! handover and failover sections.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::common::{Redis, Sidecar, View};
use crate::harness::{Seen, sidecar, sse_watch};

/// Three sidecars of one lease, each followed over SSE.
pub struct Trio {
    /// The lease; also the prefix of every identity.
    pub lease: String,
    /// The running sidecars; a replaced one is removed and a new one pushed.
    pub sidecars: Vec<Sidecar>,
    /// Every SSE event of every sidecar, with its arrival time.
    events: tokio::sync::mpsc::UnboundedReceiver<Seen>,
    /// Handed to each new sidecar's watcher.
    tx: tokio::sync::mpsc::UnboundedSender<Seen>,
    /// Sidecars started so far: numbers the identities and the watchers.
    started: usize,
    /// Flags every sidecar is started with.
    extra: Vec<String>,
}

impl Trio {
    pub fn start(
        rt: &tokio::runtime::Runtime,
        lease: &str,
        nodes: &[&Redis],
        extra: &[&str],
    ) -> Trio {
        let (tx, events) = tokio::sync::mpsc::unbounded_channel();
        let mut t = Trio {
            lease: lease.to_string(),
            sidecars: vec![],
            events,
            tx,
            started: 0,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        for _ in 0..3 {
            t.spawn(rt, nodes);
        }
        t
    }

    /// Start one more sidecar and follow it.
    pub fn spawn(&mut self, rt: &tokio::runtime::Runtime, nodes: &[&Redis]) {
        self.started += 1;
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let identity = format!("{}-{}", self.lease, self.started);
        let s = sidecar(&identity, &self.lease, nodes, &extra);
        rt.spawn(sse_watch(s.api_port, self.started, self.tx.clone()));
        self.sidecars.push(s);
    }

    /// Drain queued events; the latest view per identity.
    fn drain(&mut self, latest: &mut HashMap<String, View>) {
        while let Ok(e) = self.events.try_recv() {
            latest.insert(e.view.identity.clone(), e.view);
        }
    }

    /// Wait until exactly one sidecar leads, every other one has observed it (it attempted,
    /// so its subscriptions are up too) and counts a quorum of nodes (a fresh sidecar watches
    /// the nodes' clocks for ttl + margin first: a handover to it would measure that wait, not
    /// the handover). Returns the leader's index.
    pub fn steady(&mut self, latest: &mut HashMap<String, View>) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.drain(latest);
            if let Some(l) = self.settled(latest) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "the {} sidecars did not settle on one leader",
                self.lease
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Like [`Trio::steady`], but the others need only be ready candidates (their records say
    /// so), not count a quorum themselves: fresh sidecars a graceful handover may name.
    pub fn steady_candidates(&mut self, latest: &mut HashMap<String, View>) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.drain(latest);
            if let Some(l) = self.settled_with(latest, |v| v.candidate_ready || v.is_leader) {
                return l;
            }
            assert!(
                Instant::now() < deadline,
                "the {} sidecars did not settle on one leader with ready candidates",
                self.lease
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The leader's index if [`Trio::steady`]'s conditions hold now.
    fn settled(&self, latest: &HashMap<String, View>) -> Option<usize> {
        self.settled_with(latest, |v| v.eligible)
    }

    /// One leader, seen by all, and `ok` of every sidecar's `/leader` now.
    fn settled_with(
        &self,
        latest: &HashMap<String, View>,
        ok: impl Fn(&View) -> bool,
    ) -> Option<usize> {
        let views: Vec<Option<&View>> = self
            .sidecars
            .iter()
            .map(|s| latest.get(&s.identity))
            .collect();
        let leaders: Vec<usize> = views
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_some_and(|v| v.is_leader))
            .map(|(i, _)| i)
            .collect();
        let [l] = leaders[..] else {
            return None;
        };
        let id = &self.sidecars[l].identity;
        let all_see = views
            .iter()
            .all(|v| v.is_some_and(|v| v.leader.as_deref() == Some(id)));
        let all_eligible = || {
            self.sidecars
                .iter()
                .all(|s| s.try_leader().is_some_and(|v| ok(&v)))
        };
        (all_see && all_eligible()).then_some(l)
    }

    /// The first `is_leader: true` event from someone other than `old`, arriving after `after`.
    pub fn next_leader(
        &mut self,
        old: &str,
        after: Instant,
        latest: &mut HashMap<String, View>,
    ) -> Option<Seen> {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.events.try_recv() {
                Ok(e) => {
                    latest.insert(e.view.identity.clone(), e.view.clone());
                    if e.view.is_leader && e.view.identity != old && e.at >= after {
                        return Some(e);
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_micros(200)),
            }
        }
        None
    }
}

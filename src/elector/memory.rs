//! A test-only in-memory lease for the driver: one shared [`World`] stands for the Redis nodes
//! (a key with an expiry, the fencing epoch, the candidate records, the named successor's
//! reservation), and each sidecar's [`Memory`] runs the machine's rounds against it. With
//! tokio's paused clock, whole elections run without a process, a socket or real time.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::machine::io::Nodes;
use super::rounds::Rounds;
use crate::redlock::candidates::{self, Candidate, Rank};
use crate::redlock::{Acquire, Lease, Notices, Observed, QuorumWait, Watched, new_value};

/// Nodes the world stands for: every notice arrives this many times.
const NODES: usize = 3;

/// The shared state of the nodes.
#[derive(Default)]
pub struct World {
    /// The key: its value and expiry.
    key: Option<(String, Instant)>,
    /// The fencing epoch.
    epoch: u64,
    /// The named successor's reservation: identity and expiry.
    reserved: Option<(String, Instant)>,
    /// Candidate records: fields, expiry, ready since.
    records: BTreeMap<String, ([String; 5], Instant, Option<Instant>)>,
    /// Every sidecar's notices, for the release notice.
    subscribers: Vec<Arc<Notices>>,
    /// While set, every renewal fails (nodes unreachable).
    pub fail_renewals: bool,
    /// How long a record round takes before it writes (a slow node).
    pub records_delay: Duration,
    /// While set, every record round fails (fewer than a quorum answered it) while the key's
    /// rounds succeed: a shard's shared record round failing on its own.
    pub fail_records: bool,
    /// Every record written or withdrawn, in order: `write <identity>`, `withdraw <identity>`.
    pub history: Vec<String>,
}

impl World {
    /// A new world, shared.
    pub fn shared() -> Arc<Mutex<World>> {
        Arc::new(Mutex::new(World::default()))
    }

    /// Subscribe a sidecar's notices to the release channel.
    pub fn subscribe(&mut self, notices: Arc<Notices>) {
        self.subscribers.push(notices);
    }

    /// The key's holder now, if any.
    fn holder(&self, now: Instant) -> Option<&str> {
        self.key
            .as_ref()
            .filter(|(_, expiry)| *expiry > now)
            .map(|(v, _)| v.as_str())
    }

    fn candidates(&self, now: Instant) -> Vec<Candidate> {
        self.records
            .iter()
            .filter(|(_, (_, expiry, _))| *expiry > now)
            .map(|(id, (f, _, since))| Candidate {
                identity: id.clone(),
                rank: Rank {
                    priority: f[1].parse().unwrap_or_default(),
                    created: f[2].parse().unwrap_or_default(),
                    revision: f[4].clone(),
                },
                ready_for: since.map(|s| now.saturating_duration_since(s)),
                pending: f[3] == "1",
            })
            .collect()
    }

    fn write(&mut self, identity: &str, own: Option<&[String; 5]>, life: Duration, now: Instant) {
        let Some(fields) = own else { return };
        self.history.push(format!("write {identity}"));
        let ready = fields[0] == "1";
        let since = self.records.get(identity).and_then(|r| r.2);
        let since = ready.then(|| since.unwrap_or(now));
        self.records
            .insert(identity.to_string(), (fields.clone(), now + life, since));
    }
}

/// One sidecar's rounds on the shared world.
pub struct Memory {
    /// The nodes.
    pub world: Arc<Mutex<World>>,
    /// This sidecar.
    pub identity: String,
    /// Lease ttl (the drift is taken as zero).
    pub ttl: Duration,
}

impl Memory {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap()
    }
}

impl Rounds for Memory {
    async fn acquire(&self, _named: bool) -> Acquire {
        let now = Instant::now();
        let mut w = self.world();
        if let Some(holder) = w.holder(now) {
            let free_in = w
                .key
                .as_ref()
                .map(|(_, e)| e.saturating_duration_since(now));
            return Acquire::Contended(Observed {
                holder: Some(crate::redlock::identity_of(holder).to_string()),
                free_in,
            });
        }
        if let Some((to, until)) = &w.reserved
            && *until > now
            && *to != self.identity
        {
            return Acquire::NoQuorum(Observed::default());
        }
        let value = new_value(&self.identity);
        w.key = Some((value.clone(), now + self.ttl));
        w.reserved = None;
        w.epoch += 1;
        Acquire::Acquired(Lease {
            value,
            token: w.epoch,
            deadline: now + self.ttl,
        })
    }

    async fn renew(&self, lease: &Lease) -> Option<Instant> {
        let now = Instant::now();
        let mut w = self.world();
        if w.fail_renewals || w.holder(now) != Some(lease.value.as_str()) {
            return None;
        }
        w.key = Some((lease.value.clone(), now + self.ttl));
        Some(now + self.ttl)
    }

    async fn records(
        &self,
        own: Option<&[String; 5]>,
        life: Duration,
        _read_after: Option<Instant>,
    ) -> Option<Vec<Candidate>> {
        let delay = self.world().records_delay;
        tokio::time::sleep(delay).await;
        let now = Instant::now();
        let mut w = self.world();
        if w.fail_records {
            return None;
        }
        w.write(&self.identity, own, life, now);
        Some(w.candidates(now))
    }

    async fn watch(&self, own: Option<&[String; 5]>, life: Duration) -> Watched {
        let now = Instant::now();
        let mut w = self.world();
        if !w.fail_records {
            w.write(&self.identity, own, life, now);
        }
        let held = w
            .key
            .as_ref()
            .filter(|(_, e)| *e > now)
            .map(|(v, e)| Observed {
                holder: Some(crate::redlock::identity_of(v).to_string()),
                free_in: Some(e.saturating_duration_since(now)),
            });
        Watched {
            held,
            candidates: (!w.fail_records).then(|| w.candidates(now)),
            answered: true,
        }
    }

    async fn hand_over(&self, lease: &Lease, successor: Option<&str>, moved: Option<u8>) {
        let now = Instant::now();
        let subscribers = {
            let mut w = self.world();
            if w.key.as_ref().is_some_and(|(v, _)| *v == lease.value) {
                w.key = None;
            }
            w.reserved = successor.map(|s| (s.to_string(), now + Duration::from_millis(75)));
            w.subscribers.clone()
        };
        let payload = candidates::notice_payload(&lease.value, successor, moved);
        for _ in 0..NODES {
            for n in &subscribers {
                n.post(&payload);
            }
        }
    }

    async fn withdraw(&self) {
        let mut w = self.world();
        w.records.remove(&self.identity);
        w.history.push(format!("withdraw {}", self.identity));
    }

    fn nodes(&self, _now: Instant) -> Nodes {
        Nodes {
            wait: QuorumWait::default(),
            counts_at: None,
            successor_ready: true,
            notices_live: true,
            watch_period: Duration::from_millis(300),
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::watch;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::config::Prefer;
    use crate::elector::{
        Elector, Handles, Preference, Standing, StepDown, StepDownReason, StepDownRequest, Timing,
    };
    use crate::metrics::Metrics;

    const TTL: Duration = Duration::from_secs(1);

    fn sidecar(world: &Arc<Mutex<World>>, identity: &str) -> (Elector<Memory>, Handles) {
        let rounds = Memory {
            world: world.clone(),
            identity: identity.into(),
            ttl: TTL,
        };
        let timing = Timing::new(TTL, Duration::from_millis(300), Duration::from_millis(300));
        let preference = Preference {
            prefer: Prefer::None,
            priority: 0,
            settle: Duration::from_secs(1),
            grace: Duration::from_millis(75),
            name_successor: true,
            follow_app: None,
        };
        let standing = watch::channel(Standing::fixed()).1;
        let metrics = Metrics::register(&prometheus::Registry::new(), "memory").unwrap();
        let (elector, handles) = Elector::with_rounds(
            rounds,
            identity.into(),
            timing,
            preference,
            standing,
            metrics,
            2,
        );
        world.lock().unwrap().subscribe(handles.notices.clone());
        (elector, handles)
    }

    /// Start sidecar `identity` on the world: its handles, its stop, its task.
    fn start(
        world: &Arc<Mutex<World>>,
        identity: &str,
    ) -> (Handles, CancellationToken, tokio::task::JoinHandle<()>) {
        let (elector, handles) = sidecar(world, identity);
        let stop = CancellationToken::new();
        let task = tokio::spawn(elector.run(stop.clone()));
        (handles, stop, task)
    }

    /// Wait until `h` follows `leader` and has had time to write its record (ready).
    async fn following(h: &Handles, leader: &str) {
        h.leadership
            .clone()
            .wait_for(|l| l.leader.as_deref() == Some(leader))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    async fn until_leader(h: &Handles) -> u64 {
        let mut rx = h.leadership.clone();
        let l = rx.wait_for(|l| l.term.is_some()).await.unwrap();
        l.term.unwrap().token
    }

    /// The driver and the machine over the in-memory nodes, on tokio's paused clock: a first
    /// election, a requested step-down handed to the named follower at once, and a shutdown
    /// that releases and withdraws.
    #[tokio::test(start_paused = true)]
    async fn an_election_a_handover_and_a_step_down_run_in_memory() {
        let world = World::shared();
        let (ha, stop_a, task_a) = start(&world, "a");
        assert_eq!(until_leader(&ha).await, 1);
        let (hb, stop_b, task_b) = start(&world, "b");
        // b follows and shows a as the holder; its record (ready) is written.
        following(&hb, "a").await;
        assert!(world.lock().unwrap().records.contains_key("b"));

        // A requested step-down names b, which takes over before the grace could pass.
        let (request, rx) = StepDownRequest::new(StepDownReason::Requested);
        ha.step_down.send(request).await.unwrap();
        let asked = Instant::now();
        assert_eq!(rx.await.unwrap(), StepDown::Released);
        assert_eq!(until_leader(&hb).await, 2);
        assert!(Instant::now() - asked < Duration::from_millis(75));
        let ended = ha.leadership.borrow().ended.unwrap();
        assert_eq!((ended.token, ended.reason), (1, StepDownReason::Requested));

        // b shuts down: it releases naming a (cooling down for a ttl after its step-down) and
        // withdraws its record; a leads again once its cool-down is over.
        stop_b.cancel();
        task_b.await.unwrap();
        assert_eq!(
            hb.leadership.borrow().ended.map(|e| e.reason),
            Some(StepDownReason::Shutdown)
        );
        assert!(!world.lock().unwrap().records.contains_key("b"));
        assert_eq!(until_leader(&ha).await, 3);
        assert!(Instant::now() - asked >= TTL);
        stop_a.cancel();
        task_a.await.unwrap();
        assert!(world.lock().unwrap().key.is_none());
    }

    /// A won attempt is published without waiting for its record round (which waits for the
    /// slowest node); the record still lands, and a shutdown right after the win withdraws it
    /// only after the write, so no record of a stopped sidecar is left behind.
    #[tokio::test(start_paused = true)]
    async fn a_won_attempt_leads_before_its_record_round_ends() {
        let slow = Duration::from_millis(50);
        let world = World::shared();
        world.lock().unwrap().records_delay = slow;
        let (ha, stop, task) = start(&world, "a");
        let started = Instant::now();
        assert_eq!(until_leader(&ha).await, 1);
        assert!(
            Instant::now() - started < slow,
            "the term waited for the record round"
        );
        assert!(!world.lock().unwrap().records.contains_key("a"));
        tokio::time::sleep(slow + Duration::from_millis(1)).await;
        assert!(world.lock().unwrap().records.contains_key("a"));
        stop.cancel();
        task.await.unwrap();

        // Stopped at once after winning: the write is not dropped, and the withdrawal waits
        // for it.
        let (hb, stop, task) = start(&world, "b");
        until_leader(&hb).await;
        stop.cancel();
        task.await.unwrap();
        let w = world.lock().unwrap();
        let b: Vec<&str> = w
            .history
            .iter()
            .map(String::as_str)
            .filter(|h| h.ends_with(" b"))
            .collect();
        assert_eq!(b, ["write b", "withdraw b"]);
        assert!(!w.records.contains_key("b"));
        assert!(w.key.is_none());
    }

    /// A shard handed over to balance: the driver puts the count of moves the balancer gave
    /// into the release notice, and the named successor's notices hold it for the balancer
    /// ([`crate::elector::balance`]); a step-down the app asked for carries none.
    #[tokio::test(start_paused = true)]
    async fn a_hand_over_tells_the_successor_how_often_the_shard_moved() {
        let world = World::shared();
        let (ha, stop_a, task_a) = start(&world, "a");
        until_leader(&ha).await;
        let (hb, stop_b, task_b) = start(&world, "b");
        following(&hb, "a").await;

        let (request, rx) = StepDownRequest::hand_over("b".into(), 1);
        ha.step_down.send(request).await.unwrap();
        assert_eq!(rx.await.unwrap(), StepDown::Released);
        until_leader(&hb).await;
        assert_eq!(hb.notices.moved_for("b"), Some(1));
        assert_eq!(hb.notices.moved_for("a"), None);

        // b hands it back on an ordinary step-down: the notice names a and carries no count.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let (request, rx) = StepDownRequest::new(StepDownReason::Requested);
        hb.step_down.send(request).await.unwrap();
        assert_eq!(rx.await.unwrap(), StepDown::Released);
        until_leader(&ha).await;
        assert_eq!(ha.notices.successor().as_deref(), Some("a"));
        assert_eq!(ha.notices.moved_for("a"), None);
        for (stop, task) in [(stop_a, task_a), (stop_b, task_b)] {
            stop.cancel();
            task.await.unwrap();
        }
    }

    /// Renewals that fail end the term at the deadline: a lost lease, no successor named.
    #[tokio::test(start_paused = true)]
    async fn failing_renewals_end_the_term_at_the_deadline() {
        let world = World::shared();
        let (ha, stop, task) = start(&world, "a");
        until_leader(&ha).await;
        let deadline = ha.leadership.borrow().term.unwrap().deadline;
        world.lock().unwrap().fail_renewals = true;
        let mut rx = ha.leadership.clone();
        rx.wait_for(|l| l.term.is_none()).await.unwrap();
        assert!(Instant::now() >= deadline);
        assert!(Instant::now() - deadline < Duration::from_millis(5));
        let ended = ha.leadership.borrow().ended.unwrap();
        assert_eq!(ended.reason, StepDownReason::RenewalFailed);
        stop.cancel();
        task.await.unwrap();
    }

    /// Review finding 6: a renewal that reached a quorum is not lost because the record round
    /// beside it runs into the deadline. Renewals fail until 100 ms before the deadline; from
    /// then on they succeed at once while the record round takes 100 ms, so the next retry
    /// (75 ms apart) starts within 100 ms of the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_is_not_lost_to_a_record_round_past_the_deadline() {
        let world = World::shared();
        let (ha, stop, task) = start(&world, "a");
        until_leader(&ha).await;
        let deadline = ha.leadership.borrow().term.unwrap().deadline;
        world.lock().unwrap().fail_renewals = true;
        tokio::time::sleep_until(deadline - Duration::from_millis(100)).await;
        {
            let mut w = world.lock().unwrap();
            w.fail_renewals = false;
            w.records_delay = Duration::from_millis(100);
        }
        tokio::time::sleep_until(deadline + TTL / 2).await;
        let l = ha.leadership.borrow().clone();
        assert_eq!(
            (l.term.map(|t| t.token), l.ended.map(|e| e.reason)),
            (Some(1), None),
            "the renewal reached the nodes but the term ended: {l:?}"
        );
        stop.cancel();
        task.await.unwrap();
    }

    /// Review finding 8: a follower whose watch found the key free attempts, even when the
    /// record round beside it failed (a shard's shared record round): the key's round answered.
    #[tokio::test(start_paused = true)]
    async fn a_free_lease_is_taken_while_record_rounds_fail() {
        let world = World::shared();
        let (ha, _stop_a, task_a) = start(&world, "a");
        until_leader(&ha).await;
        let (hb, stop_b, task_b) = start(&world, "b");
        following(&hb, "a").await;
        // a crashes: no release, its key expires within a ttl.
        task_a.abort();
        world.lock().unwrap().fail_records = true;
        let took = tokio::time::timeout(TTL * 3, until_leader(&hb)).await;
        assert!(
            took.is_ok(),
            "the lease stayed free for 3 ttl: b backed off on its failed record rounds"
        );
        stop_b.cancel();
        task_b.await.unwrap();
    }
}

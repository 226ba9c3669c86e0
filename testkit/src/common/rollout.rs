//! Rollouts of real sidecars, shared by `tests/suite/rollout.rs` and the benchmark: an observer that
//! polls every live sidecar's `/leader` and records the leader over time (and any two leaders
//! at once), and a rolling replacement of 3 sidecars by 3 of a higher priority.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::base::wait_for;
use super::http::http_timeout;
use super::redis::Redis;
use super::sidecar::{Opts, Sidecar, View, sole_leader};

pub fn opts(lease: &str, prefer: &str, priority: i64, settle: &str) -> Opts {
    Opts {
        lease: lease.into(),
        extra: vec![
            "--prefer".into(),
            prefer.into(),
            "--priority".into(),
            priority.to_string(),
            "--prefer-settle".into(),
            settle.into(),
        ],
        ..Opts::default()
    }
}

pub fn wait_candidate_ready(s: &Sidecar) {
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        s.leader().candidate_ready.then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} never became a ready candidate: {:?}\n{}",
            s.identity,
            s.leader(),
            s.logs()
        )
    });
}

/// Wait until every node holds `id`'s candidate record saying ready (what a leader reads).
pub fn wait_ready_on_nodes(nodes: &[Redis], lease: &str, id: &str) {
    let key = format!("redlock-elector:{lease}:candidates");
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        nodes
            .iter()
            .all(|n| {
                n.cli(&["HGET", &key, id])
                    .and_then(|v| v.split('|').nth(1).map(|s| s != "0" && !s.is_empty()))
                    .unwrap_or(false)
            })
            .then_some(())
    })
    .unwrap_or_else(|| panic!("{id}'s record never said ready on every node"));
}

pub fn wait_leader(sidecars: &[&Sidecar]) -> usize {
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        sole_leader(sidecars)
    })
    .unwrap_or_else(|| panic!("no sole leader among {} sidecars", sidecars.len()))
}

/// (when, leader) at each change of the observed leader.
pub type History = Vec<(Instant, Option<String>)>;

/// The leader over time, as seen by polling every registered sidecar.
pub struct Observer {
    /// (identity, api port) of the sidecars to poll.
    targets: Arc<Mutex<Vec<(String, u16)>>>,
    /// (when, leader) at each change of the observed leader (None = nobody answers leader).
    history: Arc<Mutex<History>>,
    /// Two leaders at once, if ever seen.
    overlap: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Observer {
    pub fn start() -> Observer {
        let targets: Arc<Mutex<Vec<(String, u16)>>> = Arc::default();
        let history: Arc<Mutex<History>> = Arc::default();
        let overlap: Arc<Mutex<Option<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (targets, history, overlap, stop) = (
                targets.clone(),
                history.clone(),
                overlap.clone(),
                stop.clone(),
            );
            thread::spawn(move || {
                let sweep = |list: &[(String, u16)]| -> Vec<String> {
                    list.iter()
                        .filter(|(_, port)| {
                            http_timeout("GET", *port, "/leader", Duration::from_millis(500))
                                .and_then(|(st, body)| {
                                    (st == 200).then(|| serde_json::from_str::<View>(&body).ok())?
                                })
                                .is_some_and(|v| v.is_leader)
                        })
                        .map(|(id, _)| id.clone())
                        .collect()
                };
                while !stop.load(Ordering::SeqCst) {
                    let list = targets.lock().unwrap().clone();
                    let mut leaders = sweep(&list);
                    if leaders.len() > 1 {
                        // One sweep is not one instant: the old leader may have answered just
                        // before the handover, the new one just after. Ask them again, in the
                        // order they answered: still both leaders is an overlap.
                        let again: Vec<(String, u16)> = list
                            .iter()
                            .filter(|(id, _)| leaders.contains(id))
                            .cloned()
                            .collect();
                        let still = sweep(&again);
                        if still.len() > 1 {
                            *overlap.lock().unwrap() = Some(still.join(", "));
                        }
                        // The later answer is the current leader.
                        leaders = still;
                        leaders.reverse();
                    }
                    let now = leaders.into_iter().next();
                    let mut h = history.lock().unwrap();
                    if h.last().map(|(_, l)| l) != Some(&now) {
                        h.push((Instant::now(), now));
                    }
                    drop(h);
                    thread::sleep(Duration::from_millis(3));
                }
            })
        };
        Observer {
            targets,
            history,
            overlap,
            stop,
            thread: Some(thread),
        }
    }

    pub fn watch(&self, s: &Sidecar) {
        self.targets
            .lock()
            .unwrap()
            .push((s.identity.clone(), s.api_port));
    }

    pub fn forget(&self, s: &Sidecar) {
        self.targets
            .lock()
            .unwrap()
            .retain(|(id, _)| *id != s.identity);
    }

    /// Leadership changes since `from` (a new leader identity after a different one; the first
    /// leader seen counts as none), the longest leaderless gap between two leaders, and the
    /// sequence of leaders.
    pub fn changes(&self, from: Instant) -> (usize, Duration, Vec<String>) {
        let h = self.history.lock().unwrap();
        let mut leaders: Vec<String> = Vec::new();
        let mut changes = 0;
        let mut gap = Duration::ZERO;
        let mut lost_at: Option<Instant> = None;
        for (at, who) in h.iter() {
            match who {
                None => {
                    if *at >= from {
                        lost_at.get_or_insert(*at);
                    }
                }
                Some(w) => {
                    if *at >= from
                        && let Some(l) = lost_at.take()
                    {
                        gap = gap.max(at.duration_since(l));
                    }
                    if leaders.last() != Some(w) {
                        if *at >= from && !leaders.is_empty() {
                            changes += 1;
                        }
                        leaders.push(w.clone());
                    }
                }
            }
        }
        (changes, gap, leaders)
    }

    pub fn overlap(&self) -> Option<String> {
        self.overlap.lock().unwrap().clone()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Which side of a rollout a sidecar is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Started before the rollout, terminated one at a time during it.
    Old,
    /// Started during the rollout, one before each termination (surge 1).
    New,
}

impl Side {
    pub fn name(self) -> &'static str {
        match self {
            Side::Old => "old",
            Side::New => "new",
        }
    }
}

/// One rolling replacement: 3 old sidecars (priority 1) replaced one at a time by 3 new ones
/// (priority 2), surge 1: a new one is started, and once it is a ready candidate the next old
/// one is terminated. The leader among the old ones is terminated at `position` (0-based) of
/// the order. Returns (changes, longest gap, the leaders in order, the sidecars' leadership log
/// lines for a failure message). The sidecars run the test defaults (ttl 1 s, per-node timeout
/// 50 ms, so a grace of 75 ms), as the benchmark measures them.
pub fn rollout(
    nodes: &[Redis],
    lease: &str,
    prefer: &str,
    position: usize,
) -> (usize, Duration, Vec<String>, String) {
    rollout_timed(nodes, lease, prefer, position, &Opts::default())
}

/// [`rollout`] with the ttl and the per-node timeout (and so the grace a named successor gets)
/// of `timing`.
pub fn rollout_timed(
    nodes: &[Redis],
    lease: &str,
    prefer: &str,
    position: usize,
    timing: &Opts,
) -> (usize, Duration, Vec<String>, String) {
    let refs: Vec<&Redis> = nodes.iter().collect();
    let settle = "1s";
    rollout_by(position, |side, i| {
        let priority = if side == Side::Old { 1 } else { 2 };
        let name = format!("{}-{i}", side.name());
        let opts = Opts {
            ttl: timing.ttl,
            timeout: timing.timeout,
            ..opts(lease, prefer, priority, settle)
        };
        Sidecar::start(&name, &refs, &opts)
    })
}

/// [`rollout`] with the sidecars started by `start(side, i)` (`i`: 0..3 for the old ones, the
/// step for the new ones), e.g. as pods of a fake API server.
pub fn rollout_by(
    position: usize,
    mut start: impl FnMut(Side, usize) -> Sidecar,
) -> (usize, Duration, Vec<String>, String) {
    let observer = Observer::start();
    let mut old: Vec<Sidecar> = (0..3).map(|i| start(Side::Old, i)).collect();
    for s in &old {
        observer.watch(s);
        wait_candidate_ready(s);
    }
    let leader = wait_leader(&old.iter().collect::<Vec<_>>());
    // The termination order: the leader at `position`, the others around it.
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.insert(position, leader);
    let from = Instant::now();
    let mut new = Vec::new();
    for (step, &victim) in order.iter().enumerate() {
        let s = start(Side::New, step);
        observer.watch(&s);
        wait_candidate_ready(&s);
        new.push(s);
        old[victim].terminate();
        observer.forget(&old[victim]);
    }
    // Let any preferred handover complete (settle + a renewal), then a leader must be there.
    thread::sleep(Duration::from_millis(2500));
    let refs_new: Vec<&Sidecar> = new.iter().collect();
    wait_leader(&refs_new);
    thread::sleep(Duration::from_millis(100));
    let mut events: Vec<String> = old
        .iter()
        .chain(new.iter())
        .flat_map(|s| {
            s.logs()
                .lines()
                .filter(|l| {
                    ["leader", "stalled", "successor", "handing over"]
                        .iter()
                        .any(|k| l.contains(k))
                })
                .map(|l| format!("[{}] {l}", s.identity))
                .collect::<Vec<_>>()
        })
        .collect();
    // Lines start with the JSON timestamp after the identity; sort by it.
    events.sort_by_key(|l| l.split("\"timestamp\":").nth(1).map(str::to_string));
    let events = events.join("\n");
    if let Some(both) = observer.overlap() {
        panic!("two leaders at once during the rollout: {both}\n{events}");
    }
    let (changes, gap, leaders) = observer.changes(from);
    (changes, gap, leaders, events)
}

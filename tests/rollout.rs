//! Named successors and rollouts, with real `redis-server` processes and the real binary.
//!
//! - A graceful release names the best ready candidate: that one wins, every time.
//! - A named successor that is gone (frozen) delays the handover by at most the grace.
//! - A rolling replacement of 3 sidecars of priority 1 by 3 of priority 2 (surge 1: the next old
//!   one is terminated once the new one is a ready candidate) moves leadership exactly once with
//!   `prefer: newest`, whatever position the leader has in the termination order. With `none`
//!   the count is reported (today's behaviour: the release notice race).
//!
//! An observer thread polls every live sidecar's `/leader` every few milliseconds and records
//! the leader over time; it also fails the test if two sidecars ever answer `is_leader` at once.

mod common;
mod fakeapi;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use fakeapi::{FakeApi, NS};
use serde_json::json;

const TTL: Duration = Duration::from_secs(1);
/// `redis.timeout` of the sidecars (the test default) + the 25 ms margin.
const GRACE: Duration = Duration::from_millis(75);

fn opts(lease: &str, prefer: &str, priority: i64, settle: &str) -> Opts {
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

fn wait_candidate_ready(s: &Sidecar) {
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
fn wait_ready_on_nodes(nodes: &[Redis], lease: &str, id: &str) {
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

fn wait_leader(sidecars: &[&Sidecar]) -> usize {
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        sole_leader(sidecars)
    })
    .unwrap_or_else(|| panic!("no sole leader among {} sidecars", sidecars.len()))
}

/// (when, leader) at each change of the observed leader.
type History = Vec<(Instant, Option<String>)>;

/// The leader over time, as seen by polling every registered sidecar.
struct Observer {
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
    fn start() -> Observer {
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

    fn watch(&self, s: &Sidecar) {
        self.targets
            .lock()
            .unwrap()
            .push((s.identity.clone(), s.api_port));
    }

    fn forget(&self, s: &Sidecar) {
        self.targets
            .lock()
            .unwrap()
            .retain(|(id, _)| *id != s.identity);
    }

    /// Leadership changes since `from` (a new leader identity after a different one; the first
    /// leader seen counts as none), the longest leaderless gap between two leaders, and the
    /// sequence of leaders.
    fn changes(&self, from: Instant) -> (usize, Duration, Vec<String>) {
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

    fn overlap(&self) -> Option<String> {
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

/// How long it took, after `t0`, until `s` answered `is_leader` (polled every millisecond).
fn time_to_lead(s: &Sidecar, t0: Instant, timeout: Duration) -> Option<Duration> {
    wait_for(timeout, Duration::from_millis(1), || {
        s.try_leader()
            .is_some_and(|v| v.is_leader)
            .then(|| t0.elapsed())
    })
}

#[test]
fn the_named_successor_acquires_first() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    // `b` is named every time (the highest priority); a long settle keeps it from taking over
    // by preference, so only the release notice moves leadership. Each round, the leader is
    // restarted as a follower.
    let settle = "1h";
    let mut a = Sidecar::start("a", &refs, &opts("named", "newest", 1, settle));
    wait_leader(&[&a]);
    let mut b = Sidecar::start("b", &refs, &opts("named", "newest", 5, settle));
    let c = Sidecar::start("c", &refs, &opts("named", "newest", 1, settle));
    let d = Sidecar::start("d", &refs, &opts("named", "newest", 1, settle));
    for s in [&b, &c, &d] {
        wait_candidate_ready(s);
        wait_ready_on_nodes(&nodes, "named", &s.identity);
    }
    let mut takeovers = Vec::new();
    for round in 0..4 {
        // The leader (a, then b, alternately) is terminated; the named one must win.
        let (leader, named) = if round % 2 == 0 {
            (&mut a, &b)
        } else {
            (&mut b, &a)
        };
        assert!(leader.leader().is_leader, "round {round}: setup");
        let t0 = Instant::now();
        leader.terminate();
        let took = time_to_lead(named, t0, Duration::from_secs(5)).unwrap_or_else(|| {
            panic!(
                "round {round}: the named successor {} did not lead; c: {:?} d: {:?}\n{}\nold leader:\n{}",
                named.identity,
                c.leader(),
                d.leader(),
                named.logs(),
                std::fs::read_to_string(&leader.log).unwrap_or_default()
            )
        });
        takeovers.push(took);
        assert!(!c.leader().is_leader && !d.leader().is_leader);
        let log = std::fs::read_to_string(&leader.log).unwrap_or_default();
        assert!(
            log.contains(&format!("\"successor\":\"{}\"", named.identity)),
            "round {round}: the release did not name {}:\n{log}",
            named.identity
        );
        // Bring the terminated one back with the same identity and rank, as a follower.
        let (id, prio) = if round % 2 == 0 { ("a", 1) } else { ("b", 5) };
        let back = Sidecar::start(id, &refs, &opts("named", "newest", prio, settle));
        wait_candidate_ready(&back);
        wait_ready_on_nodes(&nodes, "named", id);
        if round % 2 == 0 {
            a = back;
        } else {
            b = back;
        }
        // b has the highest priority: when a leads, b is named; when b leads, a (priority 1,
        // before c and d by identity) is named.
    }
    // c and d never acquired: every other follower waited the grace while the named one won.
    for s in [&c, &d] {
        assert!(
            !s.logs().contains("became leader"),
            "{} led although never named:\n{}",
            s.identity,
            s.logs()
        );
    }
    report(
        "SIGTERM to named successor leading (4 rounds)",
        format!("{takeovers:?}"),
    );
}

#[test]
fn a_named_successor_that_is_gone_delays_the_handover_by_at_most_the_grace() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let settle = "1h";
    let mut a = Sidecar::start("a", &refs, &opts("gone", "newest", 1, settle));
    wait_leader(&[&a]);
    let b = Sidecar::start("b", &refs, &opts("gone", "newest", 1, settle));
    let c = Sidecar::start("c", &refs, &opts("gone", "newest", 9, settle));
    wait_candidate_ready(&b);
    wait_candidate_ready(&c);
    let mut gaps = Vec::new();
    // Freeze c right after one of its record refreshes: its record (3 retries of life) still
    // says ready, so the leader names it, but it cannot answer.
    c.signal("STOP");
    let t0 = Instant::now();
    a.terminate();
    let took = time_to_lead(&b, t0, Duration::from_secs(5))
        .unwrap_or_else(|| panic!("b did not take over:\n{}", b.logs()));
    c.signal("CONT");
    let log = std::fs::read_to_string(&a.log).unwrap_or_default();
    assert!(
        log.contains("\"successor\":\"c\""),
        "the release did not name the frozen c (its record should still be live):\n{log}"
    );
    gaps.push(took);
    report(
        "SIGTERM to takeover with the named successor frozen (grace 75 ms)",
        format!("{took:?}"),
    );
    // The release itself takes a round trip; the grace is 75 ms; the rest is polling and a
    // loaded machine. Without the notice b would wait for its retry or the key's expiry (1 s).
    assert!(
        took < GRACE + Duration::from_millis(300),
        "handover with a gone successor took {took:?}, more than the grace ({GRACE:?}) allows"
    );
}

/// One rolling replacement: 3 old sidecars (priority 1) replaced one at a time by 3 new ones
/// (priority 2), surge 1: a new one is started, and once it is a ready candidate the next old
/// one is terminated. The leader among the old ones is terminated at `position` (0-based) of
/// the order. Returns (changes, longest gap, the leaders in order, the sidecars' leadership log
/// lines for a failure message).
fn rollout(
    nodes: &[Redis],
    lease: &str,
    prefer: &str,
    position: usize,
) -> (usize, Duration, Vec<String>, String) {
    let refs: Vec<&Redis> = nodes.iter().collect();
    let settle = "1s";
    let observer = Observer::start();
    let mut old: Vec<Sidecar> = (0..3)
        .map(|i| Sidecar::start(&format!("old-{i}"), &refs, &opts(lease, prefer, 1, settle)))
        .collect();
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
        let s = Sidecar::start(
            &format!("new-{step}"),
            &refs,
            &opts(lease, prefer, 2, settle),
        );
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

#[test]
fn rollout_with_prefer_newest_moves_leadership_exactly_once_whatever_the_order() {
    let nodes = redis_cluster(3, TTL);
    for position in 0..3 {
        let lease = format!("newest-{position}");
        let (changes, gap, leaders, events) = rollout(&nodes, &lease, "newest", position);
        report(
            &format!("prefer newest, leader terminated at position {position}"),
            format!("{changes} change(s), longest gap {gap:?}, leaders {leaders:?}"),
        );
        assert_eq!(
            changes, 1,
            "position {position}: leadership moved {changes} times: {leaders:?}\n{events}"
        );
        assert!(
            leaders.last().is_some_and(|l| l.starts_with("new-")),
            "{leaders:?}"
        );
    }
}

#[test]
fn rollout_with_prefer_none_reports_todays_count() {
    let nodes = redis_cluster(3, TTL);
    let mut counts = Vec::new();
    // Each position twice: the successor is a random ready candidate, so one run says little.
    for run in 0..6 {
        let position = run % 3;
        let lease = format!("none-{run}");
        let (changes, gap, leaders, _) = rollout(&nodes, &lease, "none", position);
        report(
            &format!("prefer none, leader terminated at position {position}"),
            format!("{changes} change(s), longest gap {gap:?}, leaders {leaders:?}"),
        );
        // Leadership must end on a new sidecar, so it moved at least once.
        assert!(changes >= 1, "{leaders:?}");
        counts.push(changes);
    }
    report("prefer none: changes per rollout", format!("{counts:?}"));
}

/// The same rollout in Kubernetes mode against the recording fake API server: pods carry a
/// `pod-template-hash` (rev-1, then rev-2) and a `creationTimestamp`, and turn Ready when their
/// sidecar serves (the kubelet's part, played by the test). The rank comes from the pod only (no
/// priority), and `prefer` is left at its Kubernetes default (newest). The next old pod is
/// terminated once the new one is a ready candidate (its pod Ready as polled, and eligible).
fn kube_rollout(
    nodes: &[Redis],
    fake: &FakeApi,
    tag: &str,
    position: usize,
) -> (usize, Duration, Vec<String>) {
    let refs: Vec<&Redis> = nodes.iter().collect();
    let lease = format!("kube-{tag}");
    let start = |name: &str, rev: &str, created: std::time::SystemTime| -> Sidecar {
        fake.add_pod(name, &[("app", "demo"), ("pod-template-hash", rev)]);
        fake.update_pod(
            name,
            json!({
                "metadata": {"creationTimestamp": humantime::format_rfc3339_seconds(created).to_string()},
                "status": {"conditions": [{"type": "Ready", "status": "False"}]},
            }),
        );
        let opts = Opts {
            lease: lease.clone(),
            extra: [
                "--kubernetes",
                "true",
                "--pod-name",
                name,
                "--namespace",
                NS,
                "--prefer-settle",
                "1s",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            env: vec![(
                "KUBECONFIG".into(),
                fake.kubeconfig(name).display().to_string(),
            )],
            ..Opts::default()
        };
        let s = Sidecar::start(name, &refs, &opts);
        fake.update_pod(
            name,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        s
    };
    let t0 = std::time::SystemTime::now() - Duration::from_secs(3600);
    let observer = Observer::start();
    let mut old: Vec<Sidecar> = (0..3)
        .map(|i| {
            start(
                &format!("{tag}-old-{i}"),
                "rev-1",
                t0 + Duration::from_secs(i),
            )
        })
        .collect();
    for s in &old {
        observer.watch(s);
        wait_candidate_ready(s);
    }
    let leader = wait_leader(&old.iter().collect::<Vec<_>>());
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.insert(position, leader);
    let from = Instant::now();
    let mut new = Vec::new();
    for (step, &victim) in order.iter().enumerate() {
        let s = start(
            &format!("{tag}-new-{step}"),
            "rev-2",
            std::time::SystemTime::now(),
        );
        observer.watch(&s);
        wait_candidate_ready(&s);
        new.push(s);
        old[victim].terminate();
        observer.forget(&old[victim]);
    }
    thread::sleep(Duration::from_millis(2500));
    wait_leader(&new.iter().collect::<Vec<_>>());
    thread::sleep(Duration::from_millis(100));
    if let Some(both) = observer.overlap() {
        panic!("two leaders at once during the rollout: {both}");
    }
    observer.changes(from)
}

#[test]
fn kube_rollout_with_the_default_preference_moves_leadership_exactly_once() {
    let nodes = redis_cluster(3, TTL);
    let fake = FakeApi::start();
    for position in 0..3 {
        let (changes, gap, leaders) =
            kube_rollout(&nodes, &fake, &format!("p{position}"), position);
        report(
            &format!(
                "kubernetes (fake API), default prefer, leader terminated at position {position}"
            ),
            format!("{changes} change(s), longest gap {gap:?}, leaders {leaders:?}"),
        );
        assert_eq!(changes, 1, "position {position}: {leaders:?}");
        assert!(
            leaders.last().is_some_and(|l| l.contains("-new-")),
            "{leaders:?}"
        );
    }
    // Every request the sidecars made is one the chart's Role allows (no new RBAC).
    fakeapi::assert_allowed_by_shipped_role(&fake.records());
}

//! Rollouts, traffic and two clusters on the real control plane (see tests/suite/control_plane.rs for
//! the set-up: real etcd, kube-apiserver, kube-controller-manager, `helm install --wait`, the
//! stand-in kubelet).
//!
//! - A real rolling update: the Deployment's pod template is patched and the Deployment
//!   controller replaces the pods in its own order; leadership changes and the leaderless gap of
//!   each rollout are counted (`prefer: newest`: exactly one change per rollout, checked in CI;
//!   `none`, and `newest` without `minReadySeconds`: figures for comparison, run by
//!   `./scripts/bench.sh` as `--ignored` tests, about 2 minutes each).
//! - Traffic follows the leader: the time from a handover (the new leader's `/leader` version
//!   change) to the chart's leader Service's EndpointSlice listing only the new leader's pod IP,
//!   p50/p99 over 20 handovers. Printed as figures, not asserted (the machine is loaded).
//! - One lease across two clusters: one leader overall, labelled in its own cluster only.

use testkit::cluster;
use testkit::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::ControlPlane;
use cluster::kubelet::PodRun;
use cluster::release::*;
use common::*;
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};

/// Who led (one sidecar answering `is_leader`, else none) at each sample.
type Samples = Arc<Mutex<Vec<(Instant, Option<String>)>>>;
/// The ready addresses of a Service's EndpointSlices after each change a watch saw.
type SliceLog = Arc<Mutex<Vec<(Instant, BTreeSet<String>)>>>;

/// Polls every pod's `/leader` and records who leads, over time.
struct Observer {
    samples: Samples,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    fn start(pods: impl Fn() -> Vec<PodRun> + Send + 'static) -> Observer {
        let samples: Samples = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !st.load(Ordering::Relaxed) {
                let leaders: Vec<String> = pods()
                    .iter()
                    .filter(|p| p.pid.is_some())
                    .filter(|p| p.view().is_some_and(|v| v.is_leader))
                    .map(|p| p.name.clone())
                    .collect();
                let who = (leaders.len() == 1).then(|| leaders[0].clone());
                s.lock().unwrap().push((Instant::now(), who));
                std::thread::sleep(Duration::from_millis(3));
            }
        });
        Observer {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Leadership changes and the longest leaderless stretch between `from` and `to`.
    fn changes(&self, from: Instant, to: Instant) -> (usize, Duration, Vec<String>) {
        let samples = self.samples.lock().unwrap();
        let mut seq: Vec<String> = vec![];
        let (mut gap, mut gap_start) = (Duration::ZERO, None::<Instant>);
        let before = samples
            .iter()
            .rev()
            .find(|(t, w)| *t < from && w.is_some())
            .and_then(|(_, w)| w.clone());
        seq.extend(before);
        for (t, who) in samples.iter().filter(|(t, _)| *t >= from && *t <= to) {
            match who {
                Some(w) => {
                    if let Some(g) = gap_start.take() {
                        gap = gap.max(*t - g);
                    }
                    if seq.last() != Some(w) {
                        seq.push(w.clone());
                    }
                }
                None => {
                    gap_start.get_or_insert(*t);
                }
            }
        }
        (seq.len().saturating_sub(1), gap, seq)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

const ROLLOUTS: usize = 5;

/// Run the rollouts, print each one's figures, return the change counts. `min_ready`: the
/// `workload.minReadySeconds` to set, or the chart's default (`None`). Since the release proof
/// (issue 25) a new pod is a ready candidate as soon as it is Ready, without a ttl-long clock
/// watch, so the chart's default no longer has to cover one.
fn rollouts_reported(prefer: &str, min_ready: Option<u64>) -> Vec<usize> {
    let figures = rolling_updates(prefer, min_ready);
    let shown = min_ready.map_or(
        format!("the chart's default ({})", chart_min_ready_seconds()),
        |m| m.to_string(),
    );
    for (i, (changes, gap)) in figures.iter().enumerate() {
        report(
            &format!(
                "prefer {prefer}, minReadySeconds {shown}, rollout {}: leadership changes / longest leaderless gap",
                i + 1
            ),
            format!("{changes} / {gap:?}"),
        );
    }
    figures.iter().map(|f| f.0).collect()
}

#[test]
fn cp_real_rolling_updates_prefer_newest_move_leadership_once() {
    let counts = rollouts_reported("newest", None);
    assert!(
        counts.iter().all(|c| *c == 1),
        "prefer newest: changes per rollout {counts:?}, want exactly 1 each"
    );
}

#[test]
#[ignore = "figures for comparison, not a check: ./scripts/bench.sh runs it (full run, or --only rollout)"]
fn cp_real_rolling_updates_without_min_ready_seconds_are_counted() {
    // minReadySeconds 0 (no minimum): the rollout goes on as soon as a pod is
    // Ready, before it counts a quorum, so the leader may have only old pods to name. Reported.
    let counts = rollouts_reported("newest", Some(0));
    // Every rollout replaces every pod, so leadership moves at least once; how often is the figure.
    assert!(
        counts.iter().all(|c| *c >= 1),
        "changes per rollout {counts:?}"
    );
}

#[test]
#[ignore = "figures for comparison, not a check: ./scripts/bench.sh runs it (full run, or --only rollout)"]
fn cp_real_rolling_updates_prefer_none_are_counted() {
    let counts = rollouts_reported("none", None);
    assert!(
        counts.iter().all(|c| *c >= 1),
        "changes per rollout {counts:?}"
    );
}

/// Each rolling update's leadership changes and longest leaderless gap, `ROLLOUTS` times, on a
/// 3-replica Deployment with `lease.prefer: prefer` and `workload.minReadySeconds: min_ready`
/// (the chart's default when `None`).
fn rolling_updates(prefer: &str, min_ready: Option<u64>) -> Vec<(usize, Duration)> {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let tag = min_ready.map_or("default".to_string(), |m| m.to_string());
    let rel = Release::install(&cp, &format!("rollout-{prefer}-{tag}"), &nodes, 3, "");
    // The chart's value, set as a user would (helm upgrade --reuse-values).
    let t0 = Instant::now();
    let prefer_set = format!("config.lease.prefer={prefer}");
    // Always set: `Release::install` sets 0 (its other tests need no minimum), which
    // `--reuse-values` would otherwise keep in place of the chart's default.
    let min_ready_set = format!(
        "workload.minReadySeconds={}",
        min_ready.map_or_else(chart_min_ready_seconds, |m| m.to_string())
    );
    let chart = super_chart();
    cp.helm(&[
        "upgrade",
        &rel.name,
        chart.as_str(),
        "-n",
        &rel.ns,
        "--reuse-values",
        "--set",
        &prefer_set,
        "--set",
        &min_ready_set,
        "--wait",
        "--timeout",
        "180s",
    ]);
    report(
        "helm upgrade (a rollout itself)",
        format!("{:?}", t0.elapsed()),
    );
    let deploy = rel.full_name();
    let applied = cp.min_ready_seconds(&rel.ns, &deploy);
    // The chart's default, 2: what the startup probe and the handover need, whatever the ttl; a
    // number set is used as is (0: not set).
    assert_eq!(
        applied,
        Some(min_ready.unwrap_or(2)).filter(|m| *m > 0),
        "the Deployment's minReadySeconds"
    );
    let kubelet_pods = {
        let k = &rel.kubelet;
        let runs = k.runs();
        move || {
            runs.lock()
                .unwrap()
                .values()
                .filter(|r| !r.gone)
                .cloned()
                .collect::<Vec<_>>()
        }
    };
    let observer = Observer::start(kubelet_pods);
    let mut out = vec![];
    for i in 0..ROLLOUTS {
        settle(&cp, &rel);
        let from = Instant::now();
        let patch = format!(
            r#"{{"spec":{{"template":{{"metadata":{{"annotations":{{"test/rollout":"{i}"}}}}}}}}}}"#
        );
        cp.kubectl(&["-n", &rel.ns, "patch", "deployment", &deploy, "-p", &patch]);
        cp.kubectl(&[
            "-n",
            &rel.ns,
            "rollout",
            "status",
            &format!("deployment/{deploy}"),
            "--timeout",
            "180s",
        ]);
        // Done when the old pods are gone and the label sits on a leader of the new revision.
        wait_for(Duration::from_secs(60), Duration::from_millis(50), || {
            (rel.kubelet.pods().len() == 3).then_some(())
        })
        .expect("the old pods are gone");
        wait_converged(&cp, &rel, Duration::from_secs(30));
        let to = Instant::now();
        let (changes, gap, seq) = observer.changes(from, to);
        eprintln!(
            "rollout {} ({prefer}): {:?} leaders in turn: {seq:?}",
            i + 1,
            to - from
        );
        if changes != 1 {
            dump_logs(&rel.kubelet.runs(), &seq);
        }
        out.push((changes, gap));
    }
    out
}

/// Every sidecar's log lines of the pods that led in a rollout that moved leadership more than
/// once, and of the pods that were new in it, so that a failure in CI says why.
fn dump_logs(runs: &Arc<Mutex<std::collections::HashMap<String, PodRun>>>, seq: &[String]) {
    let runs = runs.lock().unwrap().values().cloned().collect::<Vec<_>>();
    for r in runs.iter().filter(|r| seq.contains(&r.name) || !r.gone) {
        eprintln!("--- {} (gone: {}):\n{}", r.name, r.gone, r.logs());
    }
}

/// The chart's default `workload.minReadySeconds`, from its values.yaml (2).
fn chart_min_ready_seconds() -> String {
    let values =
        std::fs::read_to_string(cluster::repo().join("charts/redlock-elector/values.yaml"))
            .expect("the chart's values.yaml");
    let lines: Vec<&str> = values
        .lines()
        .filter_map(|l| l.strip_prefix("  minReadySeconds:"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one workload.minReadySeconds in values.yaml"
    );
    lines[0].trim().to_string()
}

fn super_chart() -> String {
    cluster::repo()
        .join("charts/redlock-elector")
        .display()
        .to_string()
}

/// Every live pod a ready candidate and nothing pending: a rollout starts from a settled state.
fn settle(cp: &ControlPlane, rel: &Release) {
    wait_for(Duration::from_secs(60), Duration::from_millis(50), || {
        let live = rel.live();
        let views: Vec<_> = live.iter().filter_map(|p| p.view()).collect();
        (views.len() == live.len()
            && views
                .iter()
                .all(|v| v.candidate_ready && !v.handover_pending))
        .then_some(())
    })
    .expect("the pods settle as ready candidates");
    wait_converged(cp, rel, Duration::from_secs(30));
}

/// The ready addresses of the Service's EndpointSlices, as a watch sees them.
fn watch_endpoints(cp: &ControlPlane, ns: &str, service: &str) -> SliceLog {
    let seen: SliceLog = Default::default();
    let api: Api<EndpointSlice> = Api::namespaced(cp.client.clone(), ns);
    let selector = format!("kubernetes.io/service-name={service}");
    let rv = cp.list_version(&api, &ListParams::default().labels(&selector));
    let out = seen.clone();
    cp.rt.spawn(async move {
        let mut slices: std::collections::HashMap<String, BTreeSet<String>> = Default::default();
        let wp = WatchParams::default().labels(&selector);
        let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
        while let Some(Ok(ev)) = stream.next().await {
            let (name, addrs) = match ev {
                WatchEvent::Added(s) | WatchEvent::Modified(s) => {
                    let addrs = s
                        .endpoints
                        .iter()
                        .flatten()
                        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                        .flat_map(|e| e.addresses.clone())
                        .collect();
                    (s.metadata.name.unwrap(), addrs)
                }
                WatchEvent::Deleted(s) => (s.metadata.name.unwrap(), BTreeSet::new()),
                _ => continue,
            };
            slices.insert(name, addrs);
            let all: BTreeSet<String> = slices.values().flatten().cloned().collect();
            out.lock().unwrap().push((Instant::now(), all));
        }
    });
    seen
}

#[test]
fn cp_the_leader_services_endpoints_follow_handovers() {
    const HANDOVERS: usize = 20;
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let rel = Release::install(&cp, "traffic", &nodes, 3, "");
    let service = format!("{}-leader", rel.full_name());
    let mut leader = wait_converged(&cp, &rel, Duration::from_secs(30));
    let endpoints = watch_endpoints(&cp, &rel.ns, &service);
    let ip_of = |name: &str| rel.kubelet.pod(name).ip;
    wait_for(Duration::from_secs(30), Duration::from_millis(20), || {
        let e = endpoints.lock().unwrap();
        e.last()
            .is_some_and(|(_, a)| a.iter().eq([ip_of(&leader)].iter()))
            .then_some(())
    })
    .or_else(|| {
        // No change since the watch began: the slice may already list the leader.
        let api: Api<EndpointSlice> = Api::namespaced(cp.client.clone(), &rel.ns);
        let l = cp
            .block_on(api.list(
                &ListParams::default().labels(&format!("kubernetes.io/service-name={service}")),
            ))
            .unwrap();
        let addrs: Vec<String> = l
            .items
            .iter()
            .flat_map(|s| {
                s.endpoints
                    .iter()
                    .flatten()
                    .flat_map(|e| e.addresses.clone())
            })
            .collect();
        (addrs == [ip_of(&leader)]).then_some(())
    })
    .unwrap_or_else(|| {
        panic!("the leader Service's EndpointSlice never listed the leader {leader}")
    });
    let mut lat = vec![];
    for _ in 0..HANDOVERS {
        settle(&cp, &rel);
        let old = rel.kubelet.pod(&leader);
        let t_step = Instant::now();
        assert_eq!(old.step_down(), Some(200));
        // The handover: another pod's /leader says it leads (its version changed with it).
        let (new, t_new) = wait_for(Duration::from_secs(20), Duration::from_millis(1), || {
            rel.live()
                .into_iter()
                .filter(|p| p.name != leader)
                .find(|p| p.view().is_some_and(|v| v.is_leader))
                .map(|p| (p.name, Instant::now()))
        })
        .expect("a new leader after the step-down");
        let want: BTreeSet<String> = [ip_of(&new)].into();
        let t_ep = wait_for(Duration::from_secs(30), Duration::from_millis(5), || {
            let e = endpoints.lock().unwrap();
            // The first slice change after the step-down that lists only the new leader. It can
            // precede `t_new` by the observer's polling lag (a few ms); that counts as 0.
            e.iter()
                .find(|(t, a)| *t >= t_step && *a == want)
                .map(|(t, _)| *t)
        })
        .unwrap_or_else(|| {
            panic!(
                "the EndpointSlice never listed only {new}: {:?}",
                endpoints.lock().unwrap().last()
            )
        });
        lat.push(t_ep.saturating_duration_since(t_new));
        leader = new;
    }
    lat.sort();
    report(
        "handover to EndpointSlice listing only the new leader, p50",
        format!("{:?}", nearest_rank(&lat, 0.5)),
    );
    report(
        "handover to EndpointSlice listing only the new leader, p99",
        format!("{:?}", nearest_rank(&lat, 0.99)),
    );
    report(
        "handover to EndpointSlice, min / max",
        format!("{:?} / {:?}", lat[0], lat[lat.len() - 1]),
    );
}

#[test]
fn cp_one_lease_across_two_clusters_has_one_leader_labelled_in_its_cluster_only() {
    let (a, b) = (ControlPlane::up(), ControlPlane::up());
    let nodes = redis_cluster(3, TTL);
    // One lease name in both clusters (by default it is the release's name).
    let ra = Release::install_with(&a, "east", &nodes, 2, &["config.lease.name=global-app"]);
    let rb = Release::install_with(&b, "west", &nodes, 2, &["config.lease.name=global-app"]);
    let clusters = [(&a, &ra), (&b, &rb)];
    for round in 0..3 {
        let (i, leader) =
            one_labelled_leader(&clusters, Duration::from_secs(30)).unwrap_or_else(|| {
                panic!("round {round}: not one leader labelled in its own cluster only")
            });
        eprintln!(
            "round {round}: leader {leader} in cluster {}",
            ["east", "west"][i]
        );
        // Every pod of both clusters learns who leads (a follower reads it at its next attempt).
        wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
            clusters
                .iter()
                .flat_map(|(_, r)| r.live())
                .all(|p| p.view().and_then(|v| v.leader).as_deref() == Some(leader.as_str()))
                .then_some(())
        })
        .unwrap_or_else(|| panic!("round {round}: not every pod names {leader} the leader"));
        // Hand over; the next leader may be in either cluster.
        let (_, r) = clusters[i];
        settle_views(r);
        let p = r.kubelet.pod(&leader);
        assert_eq!(p.step_down(), Some(200));
    }

    // A crash of the leader and of its cluster's other pod, so the next leader is in the other
    // cluster. A new leader demotes stale labels in its own cluster only: the crashed pod keeps
    // its label until its sidecar restarts (after kubelet's 10 s back-off) and relabels itself
    // follower.
    let (i, crashed) = one_labelled_leader(&clusters, Duration::from_secs(30)).expect("a leader");
    let j = 1 - i;
    let t0 = Instant::now();
    let (cp_i, rel_i) = clusters[i];
    rel_i.kubelet.kill(&crashed);
    for p in rel_i.live().into_iter().filter(|p| p.name != crashed) {
        rel_i.kubelet.kill(&p.name);
    }
    let (cp_j, rel_j) = clusters[j];
    let new = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        let l = sidecar_leader(&rel_j.live())?;
        (labelled_leaders(cp_j, &rel_j.ns) == [l.clone()]).then_some(l)
    })
    .expect("a leader labelled in the other cluster after the crash");
    let stale = labelled_leaders(cp_i, &rel_i.ns);
    report(
        "crash: new leader labelled in the other cluster after",
        format!(
            "{:?}; the crashed cluster labels {stale:?} leader then",
            t0.elapsed()
        ),
    );
    assert_eq!(
        stale,
        std::slice::from_ref(&crashed),
        "the stale label stays in the crashed leader's cluster"
    );
    let (k, name) = one_labelled_leader(&clusters, Duration::from_secs(40))
        .expect("the labels converge once the crashed sidecars restart");
    assert_eq!((k, name.as_str()), (j, new.as_str()));
    report(
        "crash: one leader label overall again (the crashed sidecar restarted) after",
        format!("{:?}", t0.elapsed()),
    );
}

/// Exactly one sidecar of both clusters leads, and only its own cluster labels it leader.
fn one_labelled_leader(
    clusters: &[(&ControlPlane, &Release); 2],
    timeout: Duration,
) -> Option<(usize, String)> {
    wait_for(timeout, Duration::from_millis(20), || {
        let leads: Vec<(usize, String)> = clusters
            .iter()
            .enumerate()
            .flat_map(|(i, (_, r))| {
                r.live()
                    .into_iter()
                    .filter(|p| p.view().is_some_and(|v| v.is_leader))
                    .map(move |p| (i, p.name))
            })
            .collect();
        if leads.len() != 1 {
            return None;
        }
        let (i, name) = leads[0].clone();
        let (cp, r) = clusters[i];
        let (ocp, or) = clusters[1 - i];
        (labelled_leaders(cp, &r.ns) == [name.clone()] && labelled_leaders(ocp, &or.ns).is_empty())
            .then_some((i, name))
    })
}

fn settle_views(rel: &Release) {
    wait_for(Duration::from_secs(30), Duration::from_millis(50), || {
        rel.live()
            .iter()
            .all(|p| p.view().is_some_and(|v| v.candidate_ready))
            .then_some(())
    })
    .expect("ready candidates");
}

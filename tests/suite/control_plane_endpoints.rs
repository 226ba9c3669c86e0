//! The leader Service's EndpointSlice written by the sidecar (`leaderService.endpoints:
//! sidecar`), on the real control plane (see tests/suite/control_plane.rs for the set-up).
//!
//! - Fenced writes: the leader's sidecar is paused (SIGSTOP) with a write of its address in
//!   flight (held by the test-only `--unsafe-test-endpoint-write-delay`), past its term; another
//!   leads and writes; the paused one resumes. The slice, read every few ms throughout, never
//!   lists the paused pod again. With `--unsafe-disable-endpoint-fence` the same run shows the
//!   hazard: the resumed write lands and the Service points back at the stale leader.
//! - A 409, a deleted slice re-created, a later term's token refused with its Event: in
//!   `control_plane_slice_faults.rs`.
//! - RBAC: with `get`, `watch` or `update` taken from the Role's endpointslices rule, the new
//!   leader's sidecar names the verb (log and metric) and the election goes on; without `get`
//!   or `update` the slice does not list it until the verb is back, without `watch` it reads the
//!   slice before its write and lists itself.

use testkit::cluster;
use testkit::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster::ControlPlane;
use cluster::kubelet::PodRun;
use cluster::release::*;
use common::*;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;

/// The write delay the pause tests hold a write in flight with: long enough for the test to see
/// the new term on `/leader` and stop the sidecar before the write goes out.
pub(crate) const WRITE_DELAY_MS: u64 = 1500;

/// What the sidecar logs when it holds a write for that delay (its read of the slice done).
pub(crate) const HOLDING: &str = "holding this endpoint slice write";

/// The addresses the slice lists, after each poll.
type SliceLog = Arc<Mutex<Vec<(Instant, Vec<String>)>>>;

/// Reads the slice every few ms on the control plane's runtime until dropped.
struct SlicePoller {
    log: SliceLog,
    stop: Arc<AtomicBool>,
}

impl SlicePoller {
    fn start(cp: &ControlPlane, ns: &str, name: &str) -> SlicePoller {
        let log: SliceLog = Default::default();
        let stop = Arc::new(AtomicBool::new(false));
        let api: Api<EndpointSlice> = Api::namespaced(cp.client.clone(), ns);
        let (l, s, name) = (log.clone(), stop.clone(), name.to_string());
        cp.rt.spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Ok(slice) = api.get(&name).await {
                    l.lock().unwrap().push((Instant::now(), addresses(&slice)));
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        });
        SlicePoller { log, stop }
    }

    fn since(&self, t: Instant) -> Vec<(Instant, Vec<String>)> {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(at, _)| *at >= t).cloned().collect()
    }
}

impl Drop for SlicePoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn addresses(slice: &EndpointSlice) -> Vec<String> {
    slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.clone())
        .collect()
}

pub(crate) fn slice_addresses(cp: &ControlPlane, ns: &str, name: &str) -> Option<Vec<String>> {
    let api: Api<EndpointSlice> = Api::namespaced(cp.client.clone(), ns);
    cp.block_on(api.get(name)).ok().map(|s| addresses(&s))
}

/// Values for the sidecar route, with `args` appended to the sidecar's.
fn sidecar_route(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "leaderService:\n  endpoints: sidecar\nsidecar:\n  extraArgs: [{}]\n",
        args.join(", ")
    )
}

/// Wait until exactly one sidecar leads and the slice lists exactly its pod; its name.
pub(crate) fn wait_slice_converged(
    cp: &ControlPlane,
    rel: &Release,
    slice: &str,
    timeout: Duration,
) -> String {
    wait_for(timeout, Duration::from_millis(20), || {
        let leader = sidecar_leader(&rel.live())?;
        let ip = rel.kubelet.pod(&leader).ip;
        (slice_addresses(cp, &rel.ns, slice)? == [ip]).then_some(leader)
    })
    .unwrap_or_else(|| {
        let logs: Vec<String> = rel
            .kubelet
            .pods()
            .iter()
            .map(|p| format!("--- {}\n{}", p.name, p.logs()))
            .collect();
        panic!(
            "the slice never listed exactly the leader within {timeout:?}: it lists {:?}\n{}",
            slice_addresses(cp, &rel.ns, slice),
            logs.join("\n")
        )
    })
}

/// How many writes each live pod's sidecar has held so far (its [`HOLDING`] lines).
pub(crate) fn held_counts(rel: &Release) -> Vec<(String, usize)> {
    rel.live()
        .iter()
        .map(|p| (p.name.clone(), p.logs().matches(HOLDING).count()))
        .collect()
}

/// Wait (5 s) until `pod`'s sidecar holds a write more than `before` (from [`held_counts`])
/// says: its read of the slice is done and its write decided.
pub(crate) fn wait_held(rel: &Release, pod: &str, before: &[(String, usize)]) {
    let before = before.iter().find(|(n, _)| n == pod).map_or(0, |(_, c)| *c);
    let run = rel.kubelet.pod(pod);
    wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
        (run.logs().matches(HOLDING).count() > before).then_some(())
    })
    .unwrap_or_else(|| panic!("{pod} led but never held its write:\n{}", run.logs()));
}

/// What one pause run saw.
struct PauseRun {
    /// The paused pod's address.
    paused_ip: String,
    /// The slice's samples from the resume on.
    after_resume: Vec<(Instant, Vec<String>)>,
    /// Every sample from the pause on.
    from_pause: Vec<(Instant, Vec<String>)>,
}

/// Three pods on the sidecar route with the write delay (and `extra` args); a leader's term
/// begins (a step-down of the first), its sidecar is paused with its write in flight, past its
/// term; another leads and its write lands; the paused one resumes and is watched for 4 s.
fn pause_with_a_write_in_flight(ns: &str, extra: &[&str]) -> PauseRun {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let delay = WRITE_DELAY_MS.to_string();
    let mut args = vec!["--unsafe-test-endpoint-write-delay", delay.as_str()];
    args.extend_from_slice(extra);
    let rel = Release::install(&cp, ns, &nodes, 3, &sidecar_route(&args));
    let slice = format!("{}-leader", rel.full_name());
    let first = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(60));
    let poller = SlicePoller::start(&cp, &rel.ns, &slice);

    // A new term begins: the first steps down, another leads, and its write waits the delay.
    let held_before = held_counts(&rel);
    assert_eq!(rel.kubelet.pod(&first).step_down(), Some(200));
    let paused = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        rel.leader_besides(&first)
    })
    .expect("a new leader after the step-down");
    let pod = rel.kubelet.pod(&paused);
    let pid = pod.pid.expect("a running sidecar");
    // Paused once its write is held, not before: a pause in the middle of the slice's read (a
    // connect, a TLS handshake) ends in a timeout at the resume, and the retry, its term over,
    // writes nothing. That is the product at work, but it is not the hazard this test needs.
    wait_held(&rel, &paused, &held_before);
    signal(pid, "STOP");
    let paused_at = Instant::now();
    let listed_before = slice_addresses(&cp, &rel.ns, &slice).unwrap_or_default();
    assert!(
        !listed_before.contains(&pod.ip),
        "the pause came after {paused}'s write landed (the slice lists {listed_before:?}); \
         the test needs its write in flight: raise WRITE_DELAY_MS"
    );

    // Past the paused term: another pod leads and its write lands.
    let third = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        let l = rel.leader_besides(&paused)?;
        let ip = rel.kubelet.pod(&l).ip;
        (slice_addresses(&cp, &rel.ns, &slice)? == [ip]).then_some(l)
    })
    .unwrap_or_else(|| {
        panic!(
            "no other leader listed in the slice while {paused} was paused; it lists {:?}",
            slice_addresses(&cp, &rel.ns, &slice)
        )
    });
    report(
        "paused leader's sidecar to the next leader listed (ttl 2s)",
        format!("{:?}", paused_at.elapsed()),
    );
    let resumed_at = Instant::now();
    signal(pid, "CONT");
    std::thread::sleep(Duration::from_secs(4));
    eprintln!(
        "paused {paused} ({}), next leader {third} ({}); the paused sidecar's log:\n{}",
        pod.ip,
        rel.kubelet.pod(&third).ip,
        rel.kubelet.pod(&paused).logs()
    );
    let run = PauseRun {
        paused_ip: pod.ip.clone(),
        after_resume: poller.since(resumed_at),
        from_pause: poller.since(paused_at),
    };
    report(
        "slice reads while paused and after",
        format!(
            "{} ({} after the resume)",
            run.from_pause.len(),
            run.after_resume.len()
        ),
    );
    run
}

#[test]
fn cp_a_paused_leader_with_a_write_in_flight_never_points_the_slice_back() {
    let run = pause_with_a_write_in_flight("fence", &[]);
    assert!(
        run.after_resume.len() > 100,
        "too few reads of the slice after the resume ({}) to show anything",
        run.after_resume.len()
    );
    let back: Vec<_> = run
        .from_pause
        .iter()
        .filter(|(_, a)| a.contains(&run.paused_ip))
        .collect();
    assert!(
        back.is_empty(),
        "the slice listed the paused pod {} again: {} of {} reads, first {:?}",
        run.paused_ip,
        back.len(),
        run.from_pause.len(),
        back.first().map(|(_, a)| a)
    );
    let two = run.from_pause.iter().filter(|(_, a)| a.len() > 1).count();
    assert_eq!(two, 0, "the slice listed two pods in {two} reads");
}

#[test]
fn cp_with_the_endpoint_fence_off_a_paused_leader_points_the_slice_back() {
    let run = pause_with_a_write_in_flight("nofence", &["--unsafe-disable-endpoint-fence"]);
    let back = run
        .after_resume
        .iter()
        .find(|(_, a)| a.contains(&run.paused_ip))
        .unwrap_or_else(|| {
            panic!(
                "with the fence off the resumed write should land and list {} again; the slice \
                 listed {:?} after the resume",
                run.paused_ip,
                run.after_resume.iter().map(|(_, a)| a).collect::<Vec<_>>()
            )
        });
    report(
        "fence off: the slice pointed back at the paused pod",
        format!(
            "{:?} ({:?} after the resume)",
            back.1,
            back.0 - run.after_resume[0].0
        ),
    );
}

#[test]
fn cp_a_slice_verb_missing_from_the_role_is_named_and_the_election_goes_on() {
    const VERBS: [&str; 3] = ["get", "watch", "update"];
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let rel = Release::install(&cp, "slicerbac", &nodes, 3, &sidecar_route(&[]));
    let slice = format!("{}-leader", rel.full_name());
    let mut leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(60));
    let role = rel.full_name();
    let original: serde_json::Value =
        serde_json::from_str(&cp.kubectl(&["-n", &rel.ns, "get", "role", &role, "-o", "json"]))
            .unwrap();
    let index = original["rules"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["resources"] == serde_json::json!(["endpointslices"]))
        .unwrap_or_else(|| panic!("no endpointslices rule in the Role: {original}"));
    let rule = original["rules"][index].clone();
    assert_eq!(rule["verbs"], serde_json::json!(VERBS), "{original}");
    assert_eq!(
        rule["resourceNames"],
        serde_json::json!([slice]),
        "{original}"
    );
    // With every verb, a new term writes on the watch's copy of the slice, without reading it
    // first (a 409 on the copy may send one write of a handover to a read: three tries).
    let mut sources = vec![];
    for _ in 0..3 {
        let before = list_write_counts(&rel);
        assert_eq!(rel.kubelet.pod(&leader).step_down(), Some(200));
        let next = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
            rel.leader_besides(&leader)
        })
        .expect("a next leader after a step-down");
        leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(15));
        assert_eq!(leader, next);
        sources.push(Some(new_list_write(&rel, &next, &before)));
        if sources.last() == Some(&Some("watch".into())) {
            break;
        }
    }
    report(
        "what the new leaders' writes were decided on",
        format!("{sources:?}"),
    );
    assert!(
        sources.contains(&Some("watch".into())),
        "no new leader wrote on the watch's copy: {sources:?}"
    );
    for verb in VERBS {
        let kept: Vec<&str> = VERBS.into_iter().filter(|v| *v != verb).collect();
        set_verbs(&cp, &rel, &role, index, &serde_json::json!(kept));
        // The other pods' sidecars start again under the Role without the verb (a watch already
        // open is not cut by a change of the Role), then the leader steps down to one of them.
        restart_sidecars_besides(&rel, &leader);
        let before = list_write_counts(&rel);
        assert_eq!(rel.kubelet.pod(&leader).step_down(), Some(200));
        let next = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
            rel.leader_besides(&leader)
        })
        .unwrap_or_else(|| panic!("the election goes on without endpointslices {verb}"));
        let pod = rel.kubelet.pod(&next);
        let said = format!("cannot {verb} resource \\\"endpointslices\\\"");
        let forbidden = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
            let n = pod
                .metrics()
                .lines()
                .filter(|l| {
                    l.starts_with("redlock_elector_kube_requests_total")
                        && l.contains(&format!("verb=\"{verb}\""))
                        && l.contains("result=\"forbidden\"")
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>();
            (n > 0.0 && pod.logs().contains(&said)).then_some(n)
        })
        .unwrap_or_else(|| {
            panic!(
                "the sidecar never said endpointslices `{verb}` is missing:\n{}\n{}",
                pod.logs(),
                pod.metrics()
            )
        });
        report(
            &format!("forbidden endpointslices {verb} requests counted"),
            forbidden,
        );
        let line = pod
            .logs()
            .lines()
            .find(|l| l.contains(&said))
            .unwrap()
            .to_string();
        eprintln!("the sidecar's log line: {line}");
        assert!(
            line.contains(&format!("system:serviceaccount:{}:{role}", rel.ns)),
            "{line}"
        );
        // Still leading: the election does not wait for the API server.
        assert!(pod.view().unwrap().is_leader);
        if verb == "watch" {
            // Without the watch the new leader reads the slice before its write, and lists itself.
            leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(15));
            assert_eq!(leader, next);
            assert_eq!(
                new_list_write(&rel, &next, &before),
                "get",
                "{}",
                pod.logs()
            );
            set_verbs(&cp, &rel, &role, index, &rule["verbs"]);
            continue;
        }
        assert!(
            !slice_addresses(&cp, &rel.ns, &slice)
                .unwrap_or_default()
                .contains(&pod.ip),
            "the slice lists {next} although its sidecar may not {verb} it"
        );
        // The verb back: the slice converges on the leader by itself.
        set_verbs(&cp, &rel, &role, index, &rule["verbs"]);
        leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(30));
        assert_eq!(leader, next);
    }
}

/// What each of `pod`'s writes listing itself was decided on (`decided_on` of its "endpoint
/// slice written" lines), oldest first.
fn list_writes(pod: &PodRun) -> Vec<String> {
    pod.logs()
        .lines()
        .filter(|l| l.contains("\"endpoint slice written\"") && l.contains("\"kind\":\"list\""))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l[l.find('{')?..]).ok()?;
            Some(v["decided_on"].as_str()?.to_string())
        })
        .collect()
}

/// How many writes listing itself each live pod's sidecar has logged so far.
fn list_write_counts(rel: &Release) -> Vec<(String, usize)> {
    rel.live()
        .iter()
        .map(|p| (p.name.clone(), list_writes(p).len()))
        .collect()
}

/// What `pod`'s first write listing itself since `before` ([`list_write_counts`]) was decided on,
/// once it logged it (its log line follows the server's answer, which the slice may show first).
fn new_list_write(rel: &Release, pod: &str, before: &[(String, usize)]) -> String {
    let seen = before
        .iter()
        .find(|(name, _)| name == pod)
        .map_or(0, |(_, n)| *n);
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        list_writes(&rel.kubelet.pod(pod)).get(seen).cloned()
    })
    .unwrap_or_else(|| panic!("{pod} logged no new write listing itself"))
}

/// SIGKILL every live pod's sidecar but `but`'s, and wait until each runs again (the stand-in
/// kubelet restarts it after its back-off) and answers `/leader`.
fn restart_sidecars_besides(rel: &Release, but: &str) {
    let before: Vec<(String, Option<u32>)> = rel
        .live()
        .into_iter()
        .filter(|p| p.name != but)
        .map(|p| (p.name, p.pid))
        .collect();
    for (name, _) in &before {
        rel.kubelet.kill(name);
    }
    for (name, pid) in &before {
        wait_for(Duration::from_secs(40), Duration::from_millis(100), || {
            let p = rel.kubelet.pod(name);
            (p.pid.is_some() && p.pid != *pid && p.view().is_some()).then_some(())
        })
        .unwrap_or_else(|| panic!("{name}'s sidecar did not run again after SIGKILL"));
    }
}

/// Set the verbs of rule `index` of the Role `role`.
fn set_verbs(
    cp: &ControlPlane,
    rel: &Release,
    role: &str,
    index: usize,
    verbs: &serde_json::Value,
) {
    let patch = serde_json::json!([
        {"op": "replace", "path": format!("/rules/{index}/verbs"), "value": verbs}
    ]);
    cp.kubectl(&[
        "-n",
        &rel.ns,
        "patch",
        "role",
        role,
        "--type",
        "json",
        "-p",
        &patch.to_string(),
    ]);
}

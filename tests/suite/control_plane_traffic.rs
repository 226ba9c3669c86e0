//! Traffic follows the leader (issue 54), on the real node: the leader Service's endpoints
//! written by the EndpointSlice controller from the role label (`leaderService.endpoints:
//! label`), side by side with the ones the leader's sidecar writes itself (`sidecar`).
//!
//! Each route gets the same rounds, in turn: a step-down (`POST /leader/step-down`), SIGTERM to
//! the leader's sidecar (the kubelet restarts it), `kubectl delete pod` of the leader and
//! `kubectl rollout restart`. Round-robin, so no pod collects the kubelet's restart back-off.
//! From outside the product:
//! - a watch of the Service's EndpointSlices, stamped as each state arrives here;
//! - a prober in the node's network namespace sending `GET /` to the Service's cluster IP
//!   through the real kube-proxy, a curl then a 50 ms sleep, in a loop (the cluster-IP
//!   figure's resolution; kube-proxy's own sync takes 0.6-1.5 s); the app answers its pod's name.
//!   Both this prober and the poll for the next leader (every 250 ms) are kept slow on purpose:
//!   each iteration spawns processes on the 2 cores the API server, etcd, the kubelet and the
//!   sidecars share, and the sidecar's own write is what the first figure times.
//!
//! Per handover: the new leader's term start (its sidecar's own log line, on the host's clock,
//! which the pods share) to the first slice state listing only it, the time the slice listed
//! nobody before that, and the first answer from its app through the cluster IP. On the
//! sidecar route also the moment the new leader's own write was answered (its log), the
//! product's part of the first figure without the watch's delivery to this process. On the
//! sidecar route the slice must never list two pods, in any state the watch saw.

use super::*;

use cluster::release::{SliceState, watch_slices};
use k8s_openapi::api::core::v1::Service;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The lease's ttl here: a fresh pod watches the nodes' clocks for a ttl before it counts, so a
/// short ttl keeps 80 rounds within minutes. What is measured (term start to endpoints) does
/// not depend on it.
const TRAFFIC_TTL: &str = "4s";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    StepDown,
    Sigterm,
    DeletePod,
    RolloutRestart,
}

const KINDS: [Kind; 4] = [
    Kind::StepDown,
    Kind::Sigterm,
    Kind::DeletePod,
    Kind::RolloutRestart,
];

impl Kind {
    fn key(self) -> &'static str {
        match self {
            Kind::StepDown => "step-down",
            Kind::Sigterm => "sigterm",
            Kind::DeletePod => "delete",
            Kind::RolloutRestart => "rollout",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::StepDown => "step-down",
            Kind::Sigterm => "SIGTERM to the sidecar",
            Kind::DeletePod => "kubectl delete pod",
            Kind::RolloutRestart => "kubectl rollout restart",
        }
    }
}

/// One handover: what set it off, when, who led before, who led after and the pod IPs.
struct Round {
    kind: Kind,
    t0: Timestamp,
    next: String,
    next_ip: String,
    term_start: Timestamp,
    /// The new leader's sidecar's own "endpoint slice written" of its term (sidecar route).
    written: Option<Timestamp>,
}

/// The prober: `GET /` on the Service's cluster IP from the node's network namespace, in a loop;
/// each answer stamped with the host's clock (`$EPOCHREALTIME`, no process per stamp).
struct Prober {
    child: Child,
    seen: Arc<Mutex<Vec<(Timestamp, String)>>>,
}

impl Prober {
    fn start(node_pid: u32, ip: &str) -> Prober {
        let script = format!(
            "while :; do b=$(curl -s --max-time 0.3 http://{ip}:80/ 2>/dev/null); \
             echo \"$EPOCHREALTIME ${{b:--}}\"; sleep 0.05; done"
        );
        let mut child = Command::new("nsenter")
            .args([
                "-t",
                &node_pid.to_string(),
                "-n",
                "--",
                "bash",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("nsenter, bash and curl (the real node's prerequisites)");
        let out = child.stdout.take().unwrap();
        let seen: Arc<Mutex<Vec<(Timestamp, String)>>> = Default::default();
        let s = seen.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let Some((t, body)) = line.split_once(' ') else {
                    continue;
                };
                let Some((sec, usec)) = t.split_once('.') else {
                    continue;
                };
                let (Ok(sec), Ok(usec)) = (sec.parse::<i64>(), usec.parse::<i64>()) else {
                    continue;
                };
                let Ok(at) = Timestamp::from_microsecond(sec * 1_000_000 + usec) else {
                    continue;
                };
                s.lock().unwrap().push((at, body.trim().to_string()));
            }
        });
        Prober { child, seen }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process in the node's network namespace (where kube-proxy's rules are): kube-proxy's own.
fn node_netns_pid() -> u32 {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "kube-proxy")
        })
        .expect("kube-proxy runs on the real node")
}

/// The first "became leader" of `pod`'s sidecar at or after `after`: its own timestamp.
fn term_start(rn: &RealNode, pod: &str, after: Timestamp) -> Option<Timestamp> {
    rn.cp
        .pod_log(&rn.ns, pod, SIDECAR)
        .lines()
        .filter(|l| l.contains("\"became leader\""))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l[l.find('{')?..]).ok()?;
            v["timestamp"].as_str()?.parse::<Timestamp>().ok()
        })
        .find(|t| *t >= after)
}

/// The first "endpoint slice written" of `pod`'s sidecar listing itself, at or after `after`:
/// the moment its write's answer came back (the sidecar's own clock), so the API server
/// had stored the slice by then.
fn slice_written(rn: &RealNode, pod: &str, after: Timestamp) -> Option<Timestamp> {
    rn.cp
        .pod_log(&rn.ns, pod, SIDECAR)
        .lines()
        .filter(|l| l.contains("\"endpoint slice written\"") && l.contains("\"kind\":\"list\""))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l[l.find('{')?..]).ok()?;
            v["timestamp"].as_str()?.parse::<Timestamp>().ok()
        })
        .find(|t| *t >= after)
}

/// Set off one handover of `kind` from the settled leader `old`.
fn hand_over(rn: &RealNode, kind: Kind, old: &str) {
    let cp = &rn.cp;
    let deployment = format!("deployment/{RELEASE}-redlock-elector");
    match kind {
        Kind::StepDown => {
            let pid = sidecar_pid(cp, &rn.pod(old)).expect("the leader's sidecar runs");
            let out = Command::new("nsenter")
                .args(["-t", &pid.to_string(), "-n", "--"])
                .args(["curl", "-sf", "--max-time", "5", "-X", "POST"])
                .arg("http://127.0.0.1:4040/leader/step-down")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "POST /leader/step-down to {old}: {out:?}"
            );
        }
        Kind::Sigterm => {
            let pid = sidecar_pid(cp, &rn.pod(old)).expect("the leader's sidecar runs");
            let st = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .unwrap();
            assert!(st.success(), "kill -TERM {pid}");
        }
        Kind::DeletePod => {
            cp.kubectl(&["delete", "pod", old, "-n", &rn.ns, "--wait=false"]);
        }
        Kind::RolloutRestart => {
            cp.kubectl(&["rollout", "restart", &deployment, "-n", &rn.ns]);
        }
    }
}

fn ms(from: Timestamp, to: Timestamp) -> f64 {
    from.duration_until(to).as_secs_f64() * 1000.0
}

/// The figures of one handover, from the recorded slice states and answers.
struct Measured {
    /// Term start → the first slice state listing only the new leader.
    slice_ms: Option<f64>,
    /// How long the slice listed nobody just before that.
    none_ms: f64,
    /// Term start → the first answer of the new leader's app through the cluster IP.
    traffic_ms: Option<f64>,
    /// Term start → the new leader's own write answered (its log; sidecar route only).
    written_ms: Option<f64>,
}

fn measure(r: &Round, slices: &[SliceState], answers: &[(Timestamp, String)]) -> Measured {
    let only = std::collections::BTreeSet::from([r.next_ip.clone()]);
    // The state listing only the new leader, the first since the action set the handover off.
    let at = slices
        .iter()
        .position(|s| s.at >= r.t0 && s.addresses == only);
    let slice_ms = at.map(|i| ms(r.term_start, slices[i].at));
    let none_ms = at
        .map(|i| {
            let mut j = i;
            while j > 0 && slices[j - 1].addresses.is_empty() && slices[j - 1].at >= r.t0 {
                j -= 1;
            }
            if j == i {
                0.0
            } else {
                ms(slices[j].at, slices[i].at)
            }
        })
        .unwrap_or(0.0);
    let traffic_ms = answers
        .iter()
        .find(|(t, b)| *t >= r.term_start && *b == r.next)
        .map(|(t, _)| ms(r.term_start, *t));
    Measured {
        slice_ms,
        none_ms,
        traffic_ms,
        written_ms: r.written.map(|w| ms(r.term_start, w)),
    }
}

/// Install the chart in `ns` on `route`, run `rounds` of every kind, and print the figures;
/// returns how many slice states listed more than one pod.
fn run_route(rn: RealNode, ns: &str, route: &str, rounds: usize) -> (RealNode, usize) {
    let top = format!("leaderService:\n  endpoints: {route}\n");
    rn.install_in(
        ns,
        2,
        &format!(
            "  lease:\n    ttl: {TRAFFIC_TTL}\n{}",
            if std::env::var_os("REAL_NODE_DEBUG").is_some() {
                "  log:\n    level: debug\n"
            } else {
                ""
            }
        ),
        // The app answers its pod's name on 8080 (busybox httpd), and stops on SIGTERM.
        "  command: [sh, -c, 'mkdir -p /tmp/www && hostname > /tmp/www/index.html && \
         httpd -f -p 8080 -h /tmp/www & trap \"exit 0\" TERM; echo app: started; \
         while true; do sleep 1 & wait $!; done']\n",
        "",
        &top,
    );
    let rn = rn.workload(
        ns,
        &format!("app.kubernetes.io/instance={RELEASE}"),
        &format!("{RELEASE}-redlock-elector-leader"),
    );
    let svc: Api<Service> = Api::namespaced(rn.cp.client.clone(), ns);
    let ip = rn
        .cp
        .block_on(svc.get(&rn.service))
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("the leader Service has a cluster IP");
    let slices = watch_slices(&rn.cp, ns, &rn.service);
    let prober = Prober::start(node_netns_pid(), &ip);
    let mut done: Vec<Round> = vec![];
    // REAL_NODE_KINDS=sigterm,step-down,... runs only those kinds (when chasing one).
    let only = std::env::var("REAL_NODE_KINDS").unwrap_or_default();
    let kinds: Vec<Kind> = KINDS
        .into_iter()
        .filter(|k| only.is_empty() || only.split(',').any(|o| k.key() == o))
        .collect();
    let mut ips: std::collections::BTreeMap<String, String> = Default::default();
    for i in 0..rounds {
        for &kind in &kinds {
            for p in rn.pods() {
                ips.insert(pod_ip(&p), name(&p));
            }
            let old = rn.settled(2, Duration::from_secs(180));
            rn.slice_lists_only(&old, Duration::from_secs(30));
            let t0 = Timestamp::now();
            hand_over(&rn, kind, &old);
            // Another pod leads, or (SIGTERM) the same pod's restarted sidecar won a term of its
            // own: a named successor whose attempt fails leaves the lease to whoever wins next.
            // Polled every 250 ms: each poll lists the pods on the API server and spawns a
            // process per pod (nsenter, curl), load on the 2 cores beside the API server at the
            // very moment the new leader writes (at 50 ms, 20 lists and about 60 processes a
            // second). No figure depends on this poll: the term start comes from the sidecar's
            // own log, the slice's states from the watch, the traffic from the prober's clock.
            let next = wait_for(Duration::from_secs(60), Duration::from_millis(250), || {
                rn.sidecar_leader()
                    .filter(|l| *l != old || term_start(&rn, l, t0).is_some())
            })
            .unwrap_or_else(|| {
                panic!(
                    "{route}, round {i}, {}: no other pod led after {old}:\n{}",
                    kind.name(),
                    rn.logs()
                )
            });
            let next_ip = pod_ip(&rn.pod(&next));
            let term_start = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
                term_start(&rn, &next, t0)
            })
            .unwrap_or_else(|| panic!("{next} leads but logged no term start after {t0}"));
            if kind == Kind::RolloutRestart {
                rn.cp.kubectl(&[
                    "rollout",
                    "status",
                    &format!("deployment/{RELEASE}-redlock-elector"),
                    "-n",
                    ns,
                    "--timeout=300s",
                ]);
            }
            if kind == Kind::StepDown {
                // The one that stepped down does not contend for a ttl: let it come back first,
                // so the next round's leader has a successor.
                std::thread::sleep(humantime::parse_duration(TRAFFIC_TTL).unwrap());
            }
            // The next round waits for the cluster IP to answer from this leader (kube-proxy
            // syncs at most once a second): a round begun sooner deleted a SIGTERM round's new
            // leader before any request could reach it, 12 times in 20.
            let answered = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
                prober
                    .seen
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(t, b)| *t >= term_start && *b == next)
                    .then_some(())
            });
            if answered.is_none() {
                eprintln!(
                    "{route}, round {i}, {}: the cluster IP did not answer from {next} within 10 s",
                    kind.name()
                );
            }
            if std::env::var_os("REAL_NODE_DEBUG").is_some() {
                std::thread::sleep(Duration::from_secs(3));
                eprintln!("=== {route}, round {i}, {}: {old} -> {next}", kind.name());
                for p in rn.pods() {
                    let log = rn.cp.pod_log(ns, &name(&p), SIDECAR);
                    for l in log.lines().filter(|l| {
                        l.split_whitespace()
                            .next()
                            .and_then(|t| t.parse::<Timestamp>().ok())
                            >= Some(t0)
                            && !l.contains("endpoint slice written")
                    }) {
                        eprintln!("  {}: {}", name(&p), &l[..l.len().min(400)]);
                    }
                }
            }
            let written = (route == "sidecar")
                .then(|| slice_written(&rn, &next, term_start))
                .flatten();
            done.push(Round {
                kind,
                t0,
                next,
                next_ip,
                term_start,
                written,
            });
        }
    }
    // The last answers of the last round, then the figures.
    std::thread::sleep(Duration::from_secs(3));
    let states = slices.lock().unwrap().clone();
    let answers = prober.seen.lock().unwrap().clone();
    drop(prober);
    let two = states.iter().filter(|s| s.addresses.len() > 1).count();
    let f = |v: &[f64]| {
        if v.is_empty() {
            "none measured".to_string()
        } else {
            format!(
                "p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n {})",
                nearest_rank(v, 0.5),
                nearest_rank(v, 0.99),
                nearest_rank(v, 1.0),
                v.len()
            )
        }
    };
    let mut all_slice = vec![];
    let mut all_written = vec![];
    for &kind in &kinds {
        let m: Vec<Measured> = done
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| measure(r, &states, &answers))
            .collect();
        let slice: Vec<f64> = m.iter().filter_map(|m| m.slice_ms).collect();
        let none: Vec<f64> = m.iter().map(|m| m.none_ms).collect();
        let traffic: Vec<f64> = m.iter().filter_map(|m| m.traffic_ms).collect();
        let written: Vec<f64> = m.iter().filter_map(|m| m.written_ms).collect();
        all_slice.extend(slice.iter().copied());
        all_written.extend(written.iter().copied());
        let what = format!("real node, {route} route, {}", kind.name());
        report(
            &format!("{what}: term start -> the slice lists only the new leader"),
            f(&slice),
        );
        if route == "sidecar" {
            report(
                &format!("{what}: term start -> its own write answered (the sidecar's log)"),
                f(&written),
            );
        }
        report(
            &format!("{what}: the slice listed nobody before it"),
            f(&none),
        );
        report(
            &format!("{what}: term start -> the cluster IP answers from the new leader's app"),
            f(&traffic),
        );
        // A handover without an answer from the new leader's app: what the prober got instead.
        for (r, m) in done.iter().filter(|r| r.kind == kind).zip(&m) {
            if m.traffic_ms.is_none() {
                let mut runs: Vec<(String, f64, f64, usize)> = vec![];
                for (t, b) in answers.iter().filter(|(t, _)| *t >= r.t0) {
                    let at = ms(r.term_start, *t);
                    if at > 15_000.0 {
                        break;
                    }
                    match runs.last_mut() {
                        Some(l) if l.0 == *b => (l.2, l.3) = (at, l.3 + 1),
                        _ => runs.push((b.clone(), at, at, 1)),
                    }
                }
                let states: Vec<(f64, Vec<&str>)> = states
                    .iter()
                    .filter(|s| s.at >= r.t0 && ms(r.term_start, s.at) < 15_000.0)
                    .map(|s| {
                        let who = s
                            .addresses
                            .iter()
                            .map(|a| ips.get(a).map_or(a.as_str(), |n| n.as_str()));
                        (ms(r.term_start, s.at), who.collect())
                    })
                    .collect();
                eprintln!(
                    "{route}, {}: no answer from {} after its term start; answers (body, first ms, last ms, count): {runs:?}; slice states (ms, pods): {states:?}",
                    kind.name(),
                    r.next
                );
            }
        }
        if m.iter().any(|m| m.traffic_ms.is_none()) && std::env::var_os("REAL_NODE_DEBUG").is_some()
        {
            for p in rn.pods() {
                let log = rn.cp.pod_log(ns, &name(&p), SIDECAR);
                let lines: Vec<&str> = log
                    .lines()
                    .filter(|l| {
                        [
                            "became leader",
                            "lost leadership",
                            "releas",
                            "endpoint slice",
                            "SIGTERM",
                            "hand",
                        ]
                        .iter()
                        .any(|k| l.contains(k))
                    })
                    .collect();
                eprintln!("--- {} ({})\n{}", name(&p), pod_ip(&p), lines.join("\n"));
            }
        }
        let missed = m.len() - slice.len();
        if missed > 0 {
            report(
                &format!("{what}: handovers whose slice never listed only the new leader"),
                missed,
            );
        }
    }
    report(
        &format!(
            "real node, {route} route, every kind: term start -> the slice lists only the new leader"
        ),
        f(&all_slice),
    );
    if route == "sidecar" {
        report(
            "real node, sidecar route, every kind: term start -> its own write answered (the sidecar's log)",
            f(&all_written),
        );
    }
    report(
        &format!("real node, {route} route: slice states seen, states listing two pods or more"),
        format!("{}, {two}", states.len()),
    );
    rn.cp.helm(&["uninstall", RELEASE, "-n", ns, "--wait"]);
    (rn, two)
}

/// `./scripts/bench.sh --only real-node`: the label route and the sidecar route side by side,
/// `REAL_NODE_ROUNDS` (default 20) handovers of each kind on the sidecar route and
/// `REAL_NODE_LABEL_ROUNDS` (default half as many) on the label route.
#[test]
#[ignore = "benchmark: ./scripts/bench.sh --only real-node (about 30 minutes)"]
fn cp_real_node_traffic_follows_the_leader() {
    let rounds: usize = std::env::var("REAL_NODE_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    // The label route is the comparison: half the rounds unless REAL_NODE_LABEL_ROUNDS says.
    let label_rounds: usize = std::env::var("REAL_NODE_LABEL_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(rounds.div_ceil(2));
    let rn = RealNode::up();
    let (rn, two_label) = run_route(rn, "route-label", "label", label_rounds);
    let (_rn, two_sidecar) = run_route(rn, "route-sidecar", "sidecar", rounds);
    let _ = two_label;
    assert_eq!(
        two_sidecar, 0,
        "on the sidecar route the slice listed two pods at once"
    );
}

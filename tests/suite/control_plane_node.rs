//! The chart on a real node: `scripts/control-plane.sh up DIR --node` (containerd + runc, the CNI
//! bridge, kube-scheduler and a real kubelet 1.37, in their own mount and network namespace),
//! the sidecar run from the image `scripts/image.sh` builds, imported into the node's
//! containerd, installed with the real `helm`. The redis-servers run on the host's loopback; the
//! pods reach them through the node's forwarder (`control-plane.sh forward`). The stand-in
//! kubelet plays no part here.
//!
//! - `down` leaves the machine as it found it: processes, mounts, cgroups, sysctls, links,
//!   iptables, the kubelet's and containerd's default paths (before/after, and the sysctls also
//!   while the kubelet runs);
//! - `helm install`: the native sidecar starts before the app, one leader is labelled, the
//!   leader Service's EndpointSlice lists exactly that pod; the sidecar runs as 65532 on a
//!   read-only root filesystem under the chart's memory limit (RSS printed), Ready by the
//!   kubelet's probes;
//! - `kubectl delete pod` of the leader: the kubelet's SIGTERM reaches the sidecar after the app
//!   container stopped, the lease is released and the other pod leads; then `kubectl rollout
//!   restart` and `helm upgrade` each move leadership exactly once with the chart's defaults;
//! - a lost node (kubelet and containerd stopped, the pods left running): what the sidecars, the
//!   label and the leader Service do, printed as figures (docs/operating/real-node.md);
//! - the install routes as the pages write them (README, install, existing workload): the
//!   `docs` module, `control_plane_docs.rs`;
//! - traffic following the leader on the label route and the sidecar route, side by side (a
//!   benchmark): the `traffic` module, `control_plane_traffic.rs`.

use testkit::cluster;
use testkit::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cluster::ControlPlane;
use cluster::node::{BUSYBOX, HostState, sidecar_image};
use cluster::release::{labelled_leaders, watch_roles};
use common::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::ListParams;

#[path = "control_plane_docs.rs"]
mod docs;
#[path = "control_plane_traffic.rs"]
mod traffic;

const NS: &str = "real";
const RELEASE: &str = "el";
const SIDECAR: &str = "redlock-elector";
const APP: &str = "app";

/// The control plane with its node, the image imported, three redis-servers the pods reach.
struct RealNode {
    cp: ControlPlane,
    _redis: Vec<Redis>,
    endpoints: Vec<String>,
    _values: tempfile::TempDir,
    values: std::path::PathBuf,
    /// The workload the helpers below look at: its namespace, its pods' label selector and its
    /// leader Service (the chart's release by default; [`RealNode::workload`] changes them).
    ns: String,
    selector: String,
    service: String,
}

impl RealNode {
    fn up() -> RealNode {
        let image = sidecar_image();
        let cp = ControlPlane::up_with_node();
        cp.keep_pod_logs();
        let t0 = Instant::now();
        cp.import_image(&image.tar);
        report(
            "ctr images import of the sidecar image",
            format!("{:?}", t0.elapsed()),
        );
        let redis: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
        let ports: Vec<u16> = redis.iter().map(|r| r.port).collect();
        let node_ip = cp.forward(&ports);
        let endpoints = ports
            .iter()
            .map(|p| format!("redis://{node_ip}:{p}"))
            .collect();
        let dir = tempdir();
        let values = dir.path().join("values.yaml");
        RealNode {
            cp,
            _redis: redis,
            endpoints,
            _values: dir,
            values,
            ns: NS.into(),
            selector: format!("app.kubernetes.io/instance={RELEASE}"),
            service: format!("{RELEASE}-redlock-elector-leader"),
        }
    }

    /// Look at another workload: namespace `ns`, pods matching `selector`, leader Service
    /// `service`.
    fn workload(mut self, ns: &str, selector: &str, service: &str) -> RealNode {
        (self.ns, self.selector, self.service) = (ns.into(), selector.into(), service.into());
        self
    }

    /// `helm install --wait` with the chart's defaults, except: the image imported here
    /// (`pullPolicy: Never`: nothing is pulled), the redis endpoints, and an app container
    /// (static busybox) that logs its start and its SIGTERM and exits on it.
    fn install(&self, replicas: u32) {
        self.install_with(
            replicas,
            "",
            "  command: [sh, -c, 'trap \"echo app: SIGTERM; exit 0\" TERM; echo app: started; \
             while true; do sleep 1 & wait $!; done']\n",
            "",
        );
    }

    /// [`RealNode::install`] with `config` added under `config:` (2-space indented lines), `app`
    /// under `app:` (the image is set here) and `workload` under `workload:`.
    fn install_with(&self, replicas: u32, config: &str, app: &str, workload: &str) {
        self.install_in(NS, replicas, config, app, workload, "");
    }

    /// [`RealNode::install_with`] in namespace `ns` (created here), with `top` appended to the
    /// values (top-level keys).
    fn install_in(
        &self,
        ns: &str,
        replicas: u32,
        config: &str,
        app: &str,
        workload: &str,
        top: &str,
    ) {
        let image = sidecar_image();
        let (bb_repo, bb_tag) = BUSYBOX.rsplit_once(':').unwrap();
        let eps: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| format!("      - {e}"))
            .collect();
        std::fs::write(
            &self.values,
            format!(
                "image:\n  repository: {}\n  tag: \"{}\"\n  pullPolicy: Never\n\
                 workload:\n  replicas: {replicas}\n{workload}\
                 config:\n  redis:\n    endpoints:\n{}\n{config}\
                 app:\n  image:\n    repository: {bb_repo}\n    tag: \"{bb_tag}\"\n    pullPolicy: Never\n{app}\
                 \x20 ports:\n    - name: http\n      containerPort: 8080\n{top}",
                image.repository(),
                image.tag(),
                eps.join("\n")
            ),
        )
        .unwrap();
        self.cp.kubectl(&["create", "namespace", ns]);
        let chart = cluster::repo().join("charts/redlock-elector");
        let t0 = Instant::now();
        self.cp.helm(&[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "-n",
            ns,
            "-f",
            self.values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "240s",
        ]);
        report(
            "helm install --wait on the real node (pods Ready by the kubelet)",
            format!("{:?}", t0.elapsed()),
        );
    }

    fn pods(&self) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.cp.client.clone(), &self.ns);
        self.cp
            .block_on(api.list(&ListParams::default().labels(&self.selector)))
            .unwrap()
            .items
    }

    /// The workload's pods labelled leader (another workload in the namespace has its own).
    fn labelled(&self) -> Vec<String> {
        let mine: Vec<String> = self.pods().iter().map(name).collect();
        labelled_leaders(&self.cp, &self.ns)
            .into_iter()
            .filter(|p| mine.contains(p))
            .collect()
    }

    fn pod(&self, name: &str) -> Pod {
        let api: Api<Pod> = Api::namespaced(self.cp.client.clone(), &self.ns);
        self.cp.block_on(api.get(name)).unwrap()
    }

    /// The running, non-terminating pods.
    fn live(&self) -> Vec<Pod> {
        self.pods()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| sidecar_pid(&self.cp, p).is_some())
            .collect()
    }

    /// `GET /leader` of a pod's sidecar, from inside the pod's network namespace.
    fn view(&self, pod: &Pod) -> Option<View> {
        let pid = sidecar_pid(&self.cp, pod)?;
        let body = self.cp.http_in(pid, 4040, "/leader")?;
        serde_json::from_str(&body).ok()
    }

    /// The one live pod whose sidecar leads, if exactly one does.
    fn sidecar_leader(&self) -> Option<String> {
        let l: Vec<String> = self
            .live()
            .iter()
            .filter(|p| self.view(p).is_some_and(|v| v.is_leader))
            .map(name)
            .collect();
        (l.len() == 1).then(|| l[0].clone())
    }

    /// Settled: `replicas` pods, none terminating, every sidecar eligible (its ttl of clock
    /// watching done) with no handover pending, one leader and exactly it labelled: a leader
    /// nothing is about to move. Its name.
    fn settled(&self, replicas: usize, timeout: Duration) -> String {
        wait_for(timeout, Duration::from_millis(200), || {
            let live = self.live();
            (live.len() == replicas && self.pods().len() == replicas).then_some(())?;
            let views: Vec<View> = live.iter().filter_map(|p| self.view(p)).collect();
            (views.len() == replicas && views.iter().all(|v| v.eligible && !v.handover_pending))
                .then_some(())?;
            let l = self.sidecar_leader()?;
            (self.labelled() == [l.clone()]).then_some(l)
        })
        .unwrap_or_else(|| {
            panic!(
                "not settled within {timeout:?}: labelled {:?}, sidecar logs:\n{}",
                self.labelled(),
                self.logs()
            )
        })
    }

    fn logs(&self) -> String {
        self.pods()
            .iter()
            .map(|p| {
                format!(
                    "--- {}\n{}",
                    name(p),
                    self.cp.pod_log(&self.ns, &name(p), SIDECAR)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The ready addresses of the leader Service's EndpointSlices.
    fn leader_slice(&self) -> BTreeSet<String> {
        let api: Api<EndpointSlice> = Api::namespaced(self.cp.client.clone(), &self.ns);
        let sel = format!("kubernetes.io/service-name={}", self.service);
        self.cp
            .block_on(api.list(&ListParams::default().labels(&sel)))
            .unwrap()
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter().flatten())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .flat_map(|e| e.addresses.clone())
            .collect()
    }

    /// Wait until the leader Service's slice lists exactly `pod`'s IP; when it did.
    fn slice_lists_only(&self, pod: &str, timeout: Duration) -> Instant {
        let ip = pod_ip(&self.pod(pod));
        wait_for(timeout, Duration::from_millis(10), || {
            (self.leader_slice() == BTreeSet::from([ip.clone()])).then(Instant::now)
        })
        .unwrap_or_else(|| {
            panic!(
                "the leader Service's EndpointSlice never listed only {pod} ({ip}): {:?}",
                self.leader_slice()
            )
        })
    }
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap()
}

fn pod_ip(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .unwrap_or_default()
}

/// The host pid of a pod's running sidecar (a native sidecar: an init container).
fn sidecar_pid(cp: &ControlPlane, pod: &Pod) -> Option<u32> {
    let st = pod.status.as_ref()?;
    let c = st
        .init_container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == SIDECAR)?;
    c.state.as_ref()?.running.as_ref()?;
    cp.container_pid(c.container_id.as_deref()?)
}

/// The CRI timestamp of the first log line containing `needle`.
fn log_time(log: &str, needle: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    log.lines()
        .find(|l| l.contains(needle))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

/// `pid`'s `/proc/PID/status` field (`Uid`, `VmRSS`, ...).
fn proc_status(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{field}:"))
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_default()
}

#[test]
fn cp_node_down_leaves_nothing_behind() {
    let before = HostState::read();
    let cp = ControlPlane::up_with_node();
    // A pod, so that there are sandboxes, mounts, a pod network and pod cgroups to clean up.
    let (bb_repo, bb_tag) = BUSYBOX.rsplit_once(':').unwrap();
    cp.kubectl(&[
        "run",
        "probe",
        &format!("--image={bb_repo}:{bb_tag}"),
        "--image-pull-policy=Never",
        "--command",
        "--",
        "sleep",
        "3600",
    ]);
    cp.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/probe",
        "--timeout=120s",
    ]);
    let during = HostState::read();
    assert_eq!(
        during.sysctls, before.sysctls,
        "the kubelet changed the host's sysctls while it ran"
    );
    assert!(
        during.processes.iter().any(|p| p.ends_with(" kubelet"))
            && during.processes.iter().any(|p| p.ends_with(" busybox")),
        "the kubelet and the pod run: {:?}",
        during.processes
    );
    report(
        "real node: processes of the node and its pod while up",
        during.processes.len(),
    );
    report(
        "real node: cgroup directories made under its cgroupRoot while up",
        during.cgroups.len(),
    );
    let t0 = Instant::now();
    drop(cp);
    report("real node: down", format!("{:?}", t0.elapsed()));
    let after = HostState::read();
    assert_eq!(after.processes, before.processes, "processes left behind");
    assert_eq!(after.mounts, before.mounts, "mounts left behind");
    assert_eq!(after.cgroups, before.cgroups, "cgroups left behind");
    assert_eq!(after.sysctls, before.sysctls, "sysctls changed");
    assert_eq!(after.network, before.network, "links or netns left behind");
    assert_eq!(
        after.iptables, before.iptables,
        "iptables chains left behind"
    );
    assert_eq!(after.paths, before.paths, "default paths created");
}

#[test]
fn cp_real_node_runs_the_chart_deletes_and_rolls_the_leader() {
    let rn = RealNode::up();
    rn.install(2);
    let cp = &rn.cp;
    let leader = rn.settled(2, Duration::from_secs(90));
    let t = rn.slice_lists_only(&leader, Duration::from_secs(30));
    let _ = t;

    // Start order and what the kubelet enforced, pod by pod.
    for p in rn.live() {
        let n = name(&p);
        let side = cp.pod_log(NS, &n, SIDECAR);
        let app = cp.pod_log(NS, &n, APP);
        let side_t = log_time(&side, "").expect("the sidecar logged");
        let app_t = log_time(&app, "app: started").expect("the app logged its start");
        assert!(
            side_t < app_t,
            "{n}: the app started ({app_t}) before the sidecar's first line ({side_t})"
        );
        report(
            "real node: sidecar's first log line to the app's start (startup probe passed)",
            format!("{:?}", side_t.duration_until(app_t)),
        );
        let st = p.status.clone().unwrap();
        let ready = st
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        let started = st
            .init_container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == SIDECAR && c.started == Some(true) && c.ready);
        assert!(
            ready && started,
            "{n}: Ready and the sidecar started/ready by the kubelet's probes: {st:?}"
        );
        let pid = sidecar_pid(cp, &p).unwrap();
        let uid = proc_status(pid, "Uid");
        assert!(
            uid.split_whitespace().all(|u| u == "65532"),
            "{n}: the sidecar runs as 65532, not {uid}"
        );
        let root_ro = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap()
            .lines()
            .find(|l| l.split_whitespace().nth(4) == Some("/"))
            .is_some_and(|l| {
                l.split_whitespace()
                    .nth(5)
                    .unwrap()
                    .split(',')
                    .any(|o| o == "ro")
            });
        assert!(root_ro, "{n}: the sidecar's root filesystem is read-only");
        let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        let mem = cg
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, p)| p.to_string()))
            .expect("a memory cgroup");
        let limit =
            std::fs::read_to_string(format!("/sys/fs/cgroup/memory{mem}/memory.limit_in_bytes"))
                .unwrap();
        assert_eq!(
            limit.trim(),
            (64 * 1024 * 1024).to_string(),
            "{n}: limit 64Mi"
        );
        report(
            "real node: sidecar RSS (VmRSS) under the 64Mi limit",
            proc_status(pid, "VmRSS"),
        );
    }
    assert_eq!(rn.live().len(), 2);

    // kubectl delete pod of the leader.
    let roles = watch_roles(cp, NS);
    let t0 = Instant::now();
    cp.kubectl(&["delete", "pod", &leader, "-n", NS, "--wait=false"]);
    let next = wait_for(Duration::from_secs(30), Duration::from_millis(20), || {
        let l = rn.sidecar_leader()?;
        (l != leader).then_some(l)
    })
    .unwrap_or_else(|| panic!("no other pod led after deleting {leader}:\n{}", rn.logs()));
    let handover = t0.elapsed();
    let switched = rn.slice_lists_only(&next, Duration::from_secs(30)) - t0;
    report(
        "real node: kubectl delete pod of the leader -> another sidecar leads",
        format!("{handover:?}"),
    );
    report(
        "real node: kubectl delete pod of the leader -> EndpointSlice lists only the new leader",
        format!("{switched:?}"),
    );
    // The order the kubelet stopped them in: the app first, then the sidecar, which released.
    let gone = wait_for(Duration::from_secs(60), Duration::from_millis(100), || {
        let side = cp.pod_log(NS, &leader, SIDECAR);
        side.contains("releas").then_some(side)
    });
    let side = gone.unwrap_or_else(|| cp.pod_log(NS, &leader, SIDECAR));
    let app = cp.pod_log(NS, &leader, APP);
    let app_term = log_time(&app, "app: SIGTERM").expect("the app got SIGTERM");
    let side_term = log_time(&side, "SIGTERM received")
        .unwrap_or_else(|| panic!("the sidecar got SIGTERM; its log:\n{side}"));
    assert!(
        app_term < side_term,
        "native sidecar order: the app's SIGTERM ({app_term}) before the sidecar's ({side_term})"
    );
    assert!(
        side.contains("releasing the lease"),
        "the deleted leader's sidecar released the lease:\n{side}"
    );
    report(
        "real node: app's SIGTERM -> sidecar's SIGTERM (kubelet, native sidecar order)",
        format!("{:?}", app_term.duration_until(side_term)),
    );
    let leads: Vec<String> = roles
        .lock()
        .unwrap()
        .iter()
        .filter(|(p, r)| r == "leader" && *p != leader)
        .map(|(p, _)| p.clone())
        .collect();
    // The watch's first event of a pod gives its role then: the deleted leader's own `leader`
    // is left out.
    assert_eq!(
        leads,
        std::slice::from_ref(&next),
        "one new leader labelled after the delete"
    );

    // Wait for the replacement, then a rollout restart and a helm upgrade: one move each.
    wait_for(Duration::from_secs(120), Duration::from_millis(200), || {
        (rn.live().len() == 2).then_some(())
    })
    .expect("the Deployment replaced the deleted pod");
    let mut current = rn.settled(2, Duration::from_secs(90));
    for (what, args) in [
        (
            "kubectl rollout restart",
            vec![
                "kubectl".to_string(),
                "rollout".into(),
                "restart".into(),
                format!("deployment/{RELEASE}-redlock-elector"),
                "-n".into(),
                NS.into(),
            ],
        ),
        (
            "helm upgrade (new revision)",
            vec![
                "helm".to_string(),
                "upgrade".into(),
                RELEASE.into(),
                cluster::repo()
                    .join("charts/redlock-elector")
                    .display()
                    .to_string(),
                "-n".into(),
                NS.into(),
                "-f".into(),
                rn.values.display().to_string(),
                "--set-string".into(),
                "workload.podAnnotations.revision=2".into(),
                // As the upgrade page says for the one upgrade from a build without the
                // release proof: the clock watch + 2 s, by hand (ttl 10 s: 10.102 s rounded up).
                "--set".into(),
                "workload.minReadySeconds=13".into(),
            ],
        ),
    ] {
        let helm = args[0] == "helm";
        if helm {
            // The pods as a build before the release proof left them: without the
            // `redlock-elector/handover` annotation (the previous chart never wrote it). The
            // upgrade sets minReadySeconds to a fresh pod's clock watch + 2 s by hand.
            cp.kubectl(&[
                "annotate",
                "pod",
                "-n",
                NS,
                "-l",
                &format!("redlock-elector/lease={RELEASE}-redlock-elector"),
                "redlock-elector/handover-",
            ]);
        }
        let roles = watch_roles(cp, NS);
        let t0 = Instant::now();
        let refs: Vec<&str> = args[1..].iter().map(|s| s.as_str()).collect();
        match args[0].as_str() {
            "kubectl" => cp.kubectl(&refs),
            _ => cp.helm(&refs),
        };
        if helm {
            assert_eq!(
                min_ready_seconds(cp),
                Some(13),
                "the minReadySeconds set for the upgrade from a build without the release proof"
            );
        }
        cp.kubectl(&[
            "rollout",
            "status",
            &format!("deployment/{RELEASE}-redlock-elector"),
            "-n",
            NS,
            "--timeout=300s",
        ]);
        // The last old pod is gone and one new pod leads.
        // Counted until nothing is about to move: a handover the rollout set off after its
        // last pod became available belongs to it.
        let new = rn.settled(2, Duration::from_secs(90));
        let leads: Vec<String> = roles
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, r)| r == "leader" && *p != current)
            .map(|(p, _)| p.clone())
            .collect();
        report(
            &format!("real node: {what}: rollout time"),
            format!("{:?}", t0.elapsed()),
        );
        report(
            &format!("real node: {what}: leadership changes"),
            leads.len(),
        );
        assert_eq!(
            leads,
            std::slice::from_ref(&new),
            "{what}: leadership moved exactly once, to the new pod {new}"
        );
        current = new;
    }

    // Every pod now runs this chart: the next upgrade sets the default, 2 s, back, and since
    // the pod template is unchanged, nothing rolls.
    let before: BTreeSet<String> = rn.live().iter().map(name).collect();
    let chart = cluster::repo().join("charts/redlock-elector");
    cp.helm(&[
        "upgrade",
        RELEASE,
        chart.to_str().unwrap(),
        "-n",
        NS,
        "--reuse-values",
        "--set",
        "workload.minReadySeconds=2",
    ]);
    assert_eq!(
        min_ready_seconds(cp),
        Some(2),
        "minReadySeconds back to the chart's default"
    );
    std::thread::sleep(Duration::from_secs(3));
    let after: BTreeSet<String> = rn.live().iter().map(name).collect();
    assert_eq!(
        after, before,
        "an upgrade that changes only minReadySeconds rolls no pod"
    );
}

/// The chart's Deployment's `spec.minReadySeconds`, as the server has it.
fn min_ready_seconds(cp: &ControlPlane) -> Option<u64> {
    cp.min_ready_seconds(NS, &format!("{RELEASE}-redlock-elector"))
}

#[test]
fn cp_real_node_lost_node_keeps_one_leader() {
    let rn = RealNode::up();
    rn.install(2);
    let cp = &rn.cp;
    let leader = rn.settled(2, Duration::from_secs(90));
    rn.slice_lists_only(&leader, Duration::from_secs(30));
    // containerd answers no task list once stopped: the sidecars' pids are read before.
    let pids: Vec<(String, u32)> = rn
        .live()
        .iter()
        .map(|p| (name(p), sidecar_pid(cp, p).unwrap()))
        .collect();
    let leaders_now = || -> Vec<String> {
        pids.iter()
            .filter(|(_, pid)| {
                cp.http_in(*pid, 4040, "/leader")
                    .and_then(|b| serde_json::from_str::<View>(&b).ok())
                    .is_some_and(|v| v.is_leader)
            })
            .map(|(n, _)| n.clone())
            .collect()
    };
    // The node is lost: its kubelet and its runtime stop; the containers run on under their
    // shims, as on a node whose kubelet crashed or lost the apiserver.
    let t0 = Instant::now();
    cp.stop_component("kubelet");
    cp.stop_component("containerd");
    let nodes: Api<Node> = Api::all(cp.client.clone());
    let not_ready = wait_for(Duration::from_secs(120), Duration::from_millis(500), || {
        let n = cp.block_on(nodes.get("node")).ok()?;
        n.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status != "True")
            .then(|| t0.elapsed())
    })
    .expect("the node lifecycle controller marked the node not Ready");
    report("lost node: node not Ready after", format!("{not_ready:?}"));
    let slice_empty = wait_for(Duration::from_secs(60), Duration::from_millis(200), || {
        rn.leader_slice().is_empty().then(|| t0.elapsed())
    });
    report(
        "lost node: leader Service's EndpointSlice without ready endpoints after",
        format!("{slice_empty:?}"),
    );
    // The sidecars still run and still reach Redis: the same one leads, and no second one.
    let mut samples = 0;
    let mut led = BTreeSet::new();
    while t0.elapsed() < not_ready + Duration::from_secs(15) {
        let leaders = leaders_now();
        assert!(
            leaders.len() <= 1,
            "two leaders on a lost node: {leaders:?}"
        );
        led.extend(leaders);
        samples += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    let labelled = labelled_leaders(cp, NS);
    report(
        "lost node: sidecar leaders seen / labelled leaders at the end",
        format!("{led:?} / {labelled:?} ({samples} samples)"),
    );
    assert_eq!(
        led,
        BTreeSet::from([leader.clone()]),
        "the leader kept leading, alone"
    );
    assert_eq!(
        labelled,
        std::slice::from_ref(&leader),
        "the label stays on the leader"
    );
    let ready = rn
        .pod(&leader)
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    report(
        "lost node: the leader pod's Ready condition",
        format!("{ready:?}"),
    );
    // The node comes back: the kubelet reports the pods Ready again, the slice lists the leader.
    let t1 = Instant::now();
    cp.start_component("containerd");
    cp.start_component("kubelet");
    rn.slice_lists_only(&leader, Duration::from_secs(120));
    report(
        "lost node: kubelet and containerd back -> the leader Service lists the leader again",
        format!("{:?}", t1.elapsed()),
    );
    assert_eq!(labelled_leaders(cp, NS), std::slice::from_ref(&leader));
}

/// The app container's (`APP`) host pid, while it runs.
fn app_pid(cp: &ControlPlane, pod: &Pod) -> Option<u32> {
    let c = pod
        .status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == APP)?;
    c.state.as_ref()?.running.as_ref()?;
    cp.container_pid(c.container_id.as_deref()?)
}

/// Whether the kubelet has the app container ready.
fn app_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == APP))
        .is_some_and(|c| c.ready)
}

/// A file in the app container's `/state` volume (an emptyDir: it outlives container
/// restarts), made or removed from the host through `/proc/PID/root`.
fn app_state_file(cp: &ControlPlane, pod: &Pod, file: &str, present: bool) {
    let pid = app_pid(cp, pod).unwrap_or_else(|| panic!("{}: the app is not running", name(pod)));
    let path = format!("/proc/{pid}/root/state/{file}");
    if present {
        std::fs::write(&path, "").unwrap_or_else(|e| panic!("{path}: {e}"));
    } else {
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

/// Each term, from the sidecars' own logs: (pod, token, "became leader" time, "lost leadership"
/// time if logged), by the sidecar's own `timestamp` field of each JSON line.
///
/// Not by the container runtime's timestamp in front of the line: containerd stamps a line when
/// it reads it from that container's pipe, each container on its own goroutine, so two
/// containers' lines can be stamped out of their order by the scheduling of those reads (CI saw
/// a successor's "became leader" stamped 87 µs before the named handover's "lost leadership",
/// which the old leader writes before it sends the release). The sidecar stamps the line when it
/// formats it: "lost leadership" before the release leaves, "became leader" after the successor's
/// acquire came back, both by the node's one realtime clock.
fn terms_from_logs(rn: &RealNode) -> Vec<(String, u64, Timestamp, Option<Timestamp>)> {
    let mut terms = vec![];
    for p in rn.pods() {
        let n = name(&p);
        let mut open: Option<(u64, Timestamp)> = None;
        for l in rn.cp.pod_log(&rn.ns, &n, SIDECAR).lines() {
            let (began, lost) = (
                l.contains("\"became leader\""),
                l.contains("\"lost leadership\""),
            );
            if !began && !lost {
                continue;
            }
            // The JSON after the runtime's prefix (timestamp, stream, tag).
            let v: serde_json::Value = l
                .find('{')
                .and_then(|i| serde_json::from_str(&l[i..]).ok())
                .unwrap_or_else(|| panic!("not a JSON log line: {l}"));
            let at: Timestamp = v["timestamp"]
                .as_str()
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| panic!("no own timestamp in {l}"));
            if began {
                let token = v["token"].as_u64().expect("a token field");
                open = Some((token, at));
            } else if let Some((tok, from)) = open.take() {
                terms.push((n.clone(), tok, from, Some(at)));
            }
        }
        if let Some((tok, from)) = open {
            terms.push((n, tok, from, None));
        }
    }
    terms.sort_by_key(|t| t.2);
    terms
}

/// Wait until every live pod's sidecar says its app is `healthy` (or not).
fn every_sidecar_sees_its_app(rn: &RealNode, healthy: bool) {
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        rn.live()
            .iter()
            .all(|p| rn.view(p).is_some_and(|v| v.app_healthy == Some(healthy)))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "not every sidecar sees its app healthy = {healthy}:\n{}",
            rn.logs()
        )
    });
}

/// Health-gated leadership on the real node (issue 36; `lease.followApp`, on in the chart):
/// three pods whose app container has an exec readiness probe on `/state/ready`, grace 2 s.
/// - the leader's app fails its probe (the test removes the file): another pod leads, and the
///   label and the leader Service's EndpointSlice follow it (figures: probe to not ready, not
///   ready to the handover);
/// - every app fails: one leader remains, and says that no candidate is healthy;
/// - the leader's app crash-loops (exit 1 at every start): it hands over, and does not lead
///   again while the others are healthy;
/// - by the sidecars' own logs, no two terms overlap and the tokens increase.
#[test]
fn cp_real_node_leadership_follows_the_app() {
    const GRACE: Duration = Duration::from_secs(2);
    let rn = RealNode::up();
    rn.install_with(
        3,
        "  app:\n    unhealthyGrace: 2s\n",
        "  command: [sh, -c, 'trap \"exit 0\" TERM; if [ -e /state/crash ]; then echo app: crashing; exit 1; fi; \
         touch /state/ready; echo app: started; while true; do sleep 1 & wait $!; done']\n\
         \x20 readinessProbe:\n    exec:\n      command: [sh, -c, 'test -e /state/ready']\n    periodSeconds: 1\n    failureThreshold: 1\n\
         \x20 volumeMounts:\n    - name: state\n      mountPath: /state\n",
        "  volumes:\n    - name: state\n      emptyDir: {}\n",
    );
    let cp = &rn.cp;
    let first = rn.settled(3, Duration::from_secs(120));
    rn.slice_lists_only(&first, Duration::from_secs(30));
    // The leader sees both others as healthy candidates once their records say so (a renewal
    // reads them).
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        let v = rn.view(&rn.pod(&first))?;
        ((v.app_healthy, v.leader_app_healthy, v.healthy_candidates)
            == (Some(true), Some(true), Some(2)))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the leader never saw two healthy candidates: {:?}",
            rn.view(&rn.pod(&first))
        )
    });

    // (1) The leader's app fails its readiness probe.
    let t0 = Instant::now();
    app_state_file(cp, &rn.pod(&first), "ready", false);
    let not_ready = wait_for(Duration::from_secs(30), Duration::from_millis(10), || {
        (!app_ready(&rn.pod(&first))).then(Instant::now)
    })
    .expect("the kubelet marks the app container not ready");
    let moved = wait_for(
        GRACE + Duration::from_secs(30),
        Duration::from_millis(5),
        || {
            let v = rn.view(&rn.pod(&first))?;
            (!v.is_leader).then(Instant::now)
        },
    )
    .unwrap_or_else(|| panic!("the unhealthy leader kept the lease:\n{}", rn.logs()));
    let second = wait_for(Duration::from_secs(10), Duration::from_millis(50), || {
        rn.sidecar_leader().filter(|l| *l != first)
    })
    .expect("another pod leads");
    report(
        "real node: readiness probe fails (file removed) -> the kubelet marks the app not ready",
        format!("{:?}", not_ready - t0),
    );
    report(
        "real node: app not ready -> its sidecar hands over (grace 2 s; target: within grace + 1 s)",
        format!("{:?}", moved - not_ready),
    );
    assert!(
        moved - not_ready >= GRACE - Duration::from_millis(200),
        "handed over before the grace: {:?}",
        moved - not_ready
    );
    let slice = rn.slice_lists_only(&second, Duration::from_secs(30));
    report(
        "real node: app not ready -> the leader Service lists only the new leader",
        format!("{:?}", slice - not_ready),
    );
    assert_eq!(labelled_leaders(cp, &rn.ns), std::slice::from_ref(&second));
    let view = rn.view(&rn.pod(&second)).unwrap();
    assert_eq!(view.app_healthy, Some(true), "{view:?}");
    assert!(
        rn.logs().contains("app-unhealthy") || rn.logs().contains("app_unhealthy"),
        "the reason is logged"
    );

    // (2) Every app fails: some leader beats no leader.
    for p in rn.live() {
        if app_ready(&p) {
            app_state_file(cp, &p, "ready", false);
        }
    }
    every_sidecar_sees_its_app(&rn, false);
    let until = Instant::now() + GRACE * 3;
    let mut samples = 0;
    while Instant::now() < until {
        let l = rn
            .sidecar_leader()
            .unwrap_or_else(|| panic!("no single leader with every app unhealthy:\n{}", rn.logs()));
        assert_eq!(l, second, "the leader moved although no app is healthy");
        samples += 1;
    }
    let view = rn.view(&rn.pod(&second)).unwrap();
    assert_eq!(
        (view.is_leader, view.app_healthy, view.healthy_candidates),
        (true, Some(false), Some(0)),
        "{view:?}"
    );
    report(
        "real node: every app unhealthy for 3 x grace -> still one leader (samples)",
        samples,
    );
    for p in rn.live() {
        app_state_file(cp, &p, "ready", true);
    }
    every_sidecar_sees_its_app(&rn, true);

    // (3) The leader's app crash-loops: exit 1 at every start.
    let crashing = rn.sidecar_leader().expect("one leader");
    let pod = rn.pod(&crashing);
    app_state_file(cp, &pod, "crash", true);
    let t0 = Instant::now();
    signal(app_pid(cp, &pod).unwrap(), "TERM");
    let moved = wait_for(
        GRACE + Duration::from_secs(30),
        Duration::from_millis(5),
        || {
            let v = rn.view(&rn.pod(&crashing))?;
            (!v.is_leader).then(Instant::now)
        },
    )
    .unwrap_or_else(|| panic!("the crash-looping pod kept the lease:\n{}", rn.logs()));
    report(
        "real node: app container exits (then crash-loops) -> its sidecar hands over (grace 2 s)",
        format!("{:?}", moved - t0),
    );
    assert!(
        moved - t0 < GRACE + Duration::from_secs(10),
        "held the lease {:?} after its app went down",
        moved - t0
    );
    // It never leads again while the others are healthy (30 s: at least two crash restarts).
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        let v = rn.view(&rn.pod(&crashing));
        assert!(
            !v.as_ref().is_some_and(|v| v.is_leader),
            "the crash-looping pod leads again: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let restarts = rn
        .pod(&crashing)
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.into_iter().find(|c| c.name == APP))
        .map_or(0, |c| c.restart_count);
    assert!(
        restarts >= 2,
        "the app did not crash-loop: {restarts} restarts"
    );
    assert!(cp.pod_log(&rn.ns, &crashing, APP).contains("app: crashing"));
    report(
        "real node: app restarts while crash-looping, 30 s watched",
        restarts,
    );
    let leader = rn.sidecar_leader().expect("one leader");
    assert_ne!(leader, crashing);
    rn.slice_lists_only(&leader, Duration::from_secs(30));

    // S1 and S2 by the sidecars' own logs.
    let terms = terms_from_logs(&rn);
    assert!(terms.len() >= 3, "{terms:?}");
    let mut gaps = vec![];
    for w in terms.windows(2) {
        let ((a, ta, _, end), (b, tb, start, _)) = (&w[0], &w[1]);
        let end = end.unwrap_or_else(|| panic!("{a}'s term {ta} never ended but {b} led"));
        assert!(
            end < *start,
            "terms overlap: {a} until {end}, {b} from {start}"
        );
        assert!(tb > ta, "tokens do not increase: {ta} then {tb}");
        gaps.push(format!("{:?}", end.duration_until(*start).unsigned_abs()));
    }
    report(
        "real node: terms checked by the sidecars' logs, 0 overlaps",
        terms.len(),
    );
    report(
        "real node: \"lost leadership\" -> the next \"became leader\", by the sidecars' clocks",
        gaps.join(", "),
    );
    // The API server's load per pod: the sidecars' own count of pod GETs and watches, against
    // the 2 s read before the watch (30 GETs a minute).
    for p in rn.live() {
        let (Some(pid), Some(started)) = (
            sidecar_pid(cp, &p),
            p.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ) else {
            continue;
        };
        let metrics = cp.http_in(pid, 4041, "/metrics").unwrap_or_default();
        let count = |verb: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| {
                    l.starts_with("redlock_elector_kube_requests_total")
                        && l.contains(&format!("verb=\"{verb}\""))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let minutes = started.duration_until(Timestamp::now()).as_secs_f64() / 60.0;
        report(
            &format!(
                "real node: {} pod GETs / pod watches per minute (the 2 s read made 30 GETs)",
                name(&p)
            ),
            format!(
                "{:.1} / {:.1} over {minutes:.1} min",
                count("get") / minutes,
                count("watch") / minutes
            ),
        );
    }
    // The sidecars followed their pods by a watch (the Role grants it), not by the 2 s read.
    let logs = rn.logs();
    assert!(
        !logs.contains("cannot watch the own pod"),
        "a sidecar fell back to reading its pod:\n{logs}"
    );
}

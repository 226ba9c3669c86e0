//! The harness's stand-in for the kubelet (there is no kubelet and no scheduler here).
//!
//! For each pod of the workload (a label selector) it does what a node would:
//! - binds the pod to its Node (created here) through the `binding` subresource;
//! - gives it an IP, `10.244.B.C`, and runs the pod's sidecar container as the real binary,
//!   listening on `127.244.B.C` (the real server rejects loopback addresses in EndpointSlices,
//!   so status.podIP cannot be the loopback address itself; `B.C` maps one to the other);
//! - runs it with the container's rendered args and env (`POD_NAME`/`POD_NAMESPACE`/`POD_IP` from the
//!   downward API), the ConfigMap volume's files, and a kubeconfig holding a token from the
//!   TokenRequest API for the pod's ServiceAccount, bound to the pod, as kubelet mounts one;
//! - patches status Running, and Ready once the container's readiness probe path answers 200
//!   (probed every startupProbe.periodSeconds, as kubelet does until the startup probe passes);
//! - restarts an exited sidecar after 10 s (restartPolicy Always, kubelet's first back-off);
//! - on deletion (deletionTimestamp): SIGTERM, the grace period, SIGKILL, then the final delete.
//!
//! Overrides that one machine forces, and nothing else: `api.listen` and `ops.listen` get the
//! pod's loopback address (ports as rendered) through `REDLOCK_ELECTOR_API_LISTEN` /
//! `REDLOCK_ELECTOR_OPS_LISTEN`; `KUBECONFIG` points at the token's kubeconfig and
//! `KUBERNETES_SERVICE_HOST`/`_PORT` at the apiserver's loopback address (a kubelet would set the
//! `kubernetes` Service's IP, unreachable here).
//! The app container is not run (its image is not here); the pod's status counts it as started,
//! running and ready (its container status), which is what `lease.followApp` reads.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::sync::watch;

use super::ControlPlane;
use super::container::{Apiserver, prepare};
use super::kubelet_api::{bind_to_node, create_node, final_delete, patch_status, probe};

/// kubelet's first CrashLoopBackOff delay.
const RESTART_BACKOFF: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(100);

/// One pod the stand-in runs.
#[derive(Clone, Debug)]
pub struct PodRun {
    pub name: String,
    pub uid: String,
    /// status.podIP.
    pub ip: String,
    /// Where its sidecar listens.
    pub bind: String,
    pub api_port: u16,
    pub ops_port: u16,
    /// The sidecar's stderr (all its runs, appended).
    pub log: PathBuf,
    /// The running sidecar's pid, if one runs.
    pub pid: Option<u32>,
    pub terminating: bool,
    /// The final delete went through.
    pub gone: bool,
}

impl PodRun {
    /// `method path` on one of this pod's sidecar's ports (2 s timeout): status and body.
    fn http(&self, method: &str, port: u16, path: &str) -> Option<(u16, String)> {
        crate::common::http_host(method, &self.bind, port, path, Duration::from_secs(2))
    }

    /// `GET /leader` of this pod's sidecar.
    pub fn view(&self) -> Option<crate::common::View> {
        let (status, body) = self.http("GET", self.api_port, "/leader")?;
        (status == 200).then(|| serde_json::from_str(&body).expect("valid /leader JSON"))
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `POST /leader/step-down` to this pod's sidecar: the status, or `None` if it did not answer.
    pub fn step_down(&self) -> Option<u16> {
        self.http("POST", self.api_port, "/leader/step-down")
            .map(|(status, _)| status)
    }

    /// `/metrics` of this pod's sidecar.
    pub fn metrics(&self) -> String {
        self.http("GET", self.ops_port, "/metrics")
            .map(|(_, b)| b)
            .unwrap_or_default()
    }
}

type Runs = Arc<Mutex<HashMap<String, PodRun>>>;

/// The stand-in; stops every sidecar it started on drop.
pub struct Kubelet {
    pub node: String,
    runs: Runs,
    /// Stops the stand-in: its tasks end and kill their sidecars, none is restarted.
    stop: watch::Sender<bool>,
    _dir: tempfile::TempDir,
}

static SUBNET: AtomicU32 = AtomicU32::new(0);

impl Kubelet {
    /// Start playing the kubelet for the pods in `namespace` matching `selector`.
    pub fn start(cp: &ControlPlane, namespace: &str, selector: &str) -> Kubelet {
        let subnet = (std::process::id().wrapping_mul(31) + SUBNET.fetch_add(1, Ordering::Relaxed))
            % 250
            + 1;
        let node = format!("stand-in-{subnet}");
        let dir = crate::common::tempdir();
        let ctx = Ctx {
            api: Apiserver {
                client: cp.client.clone(),
                ns: namespace.into(),
                server: cp.server(),
                ca: cp.ca_data(),
            },
            node: node.clone(),
            subnet,
            dir: dir.path().to_path_buf(),
        };
        cp.block_on(create_node(&ctx.api.client, &node, subnet));
        let runs: Runs = Default::default();
        let (stop, stop_rx) = watch::channel(false);
        cp.rt
            .spawn(main_loop(ctx, selector.to_string(), runs.clone(), stop_rx));
        Kubelet {
            node,
            runs,
            stop,
            _dir: dir,
        }
    }

    /// The pods it runs now (including terminating ones, not the deleted ones).
    pub fn pods(&self) -> Vec<PodRun> {
        let mut v: Vec<PodRun> = self
            .runs
            .lock()
            .unwrap()
            .values()
            .filter(|r| !r.gone)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The shared table of pods, for an observer thread.
    pub fn runs(&self) -> Arc<Mutex<HashMap<String, PodRun>>> {
        self.runs.clone()
    }

    pub fn pod(&self, name: &str) -> PodRun {
        self.runs
            .lock()
            .unwrap()
            .values()
            .find(|r| r.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("the stand-in runs no pod {name}"))
    }

    /// SIGKILL a pod's sidecar (a crash); it is restarted after the back-off like kubelet does.
    pub fn kill(&self, name: &str) {
        let pid = self.pod(name).pid.expect("a running sidecar");
        crate::common::signal(pid, "KILL");
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        for r in self.runs.lock().unwrap().values() {
            if let Some(pid) = r.pid {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

#[derive(Clone)]
struct Ctx {
    /// The apiserver as the pods see it (also what reading their containers needs).
    api: Apiserver,
    node: String,
    subnet: u32,
    dir: PathBuf,
}

async fn main_loop(ctx: Ctx, selector: String, runs: Runs, stop: watch::Receiver<bool>) {
    let pods: Api<Pod> = Api::namespaced(ctx.api.client.clone(), &ctx.api.ns);
    let mut started: HashMap<String, watch::Sender<bool>> = HashMap::new();
    let mut next_host = 2u32;
    while !*stop.borrow() {
        let list = match pods.list(&ListParams::default().labels(&selector)).await {
            Ok(l) => l,
            Err(_) => {
                // The apiserver may be down (an outage test): keep the sidecars as they are.
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        for pod in list {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let terminating = pod.metadata.deletion_timestamp.is_some();
            match started.get(&uid) {
                Some(term) if terminating && !*term.borrow() => {
                    let _ = term.send(true);
                }
                Some(_) => {}
                None if !terminating => {
                    let host = next_host;
                    next_host += 1;
                    assert!(host < 255, "the stand-in ran out of addresses");
                    let (term, term_rx) = watch::channel(false);
                    started.insert(uid, term);
                    tokio::spawn(run_pod(
                        ctx.clone(),
                        pod,
                        host,
                        runs.clone(),
                        term_rx,
                        stop.clone(),
                    ));
                }
                None => {}
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn run_pod(
    ctx: Ctx,
    pod: Pod,
    host: u32,
    runs: Runs,
    mut term: watch::Receiver<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let pods: Api<Pod> = Api::namespaced(ctx.api.client.clone(), &ctx.api.ns);
    let spec = pod.spec.clone().unwrap();
    let ip = format!("10.244.{}.{host}", ctx.subnet);
    let bind = format!("127.244.{}.{host}", ctx.subnet);
    let host_ip = format!("10.245.0.{}", ctx.subnet);
    let pod_dir = ctx.dir.join(&name);
    std::fs::create_dir_all(&pod_dir).unwrap();

    // Scheduling: what kube-scheduler would do, to the stand-in's node.
    if spec.node_name.is_none() && !bind_to_node(&pods, &name, &ctx.node).await {
        return;
    }

    let prepared = prepare(&ctx.api, &pod, &bind, &pod_dir).await;
    // The regular containers but the sidecar (when it is not a native one): the app, not run.
    let apps: Vec<(String, String)> = spec
        .containers
        .iter()
        .filter(|c| c.name != "redlock-elector")
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect();
    let (api_port, ops_port) = (prepared.api_port, prepared.ops_port);
    let log = pod_dir.join("sidecar.log");
    runs.lock().unwrap().insert(
        uid.clone(),
        PodRun {
            name: name.clone(),
            uid: uid.clone(),
            ip: ip.clone(),
            bind: bind.clone(),
            api_port,
            ops_port,
            log: log.clone(),
            pid: None,
            terminating: false,
            gone: false,
        },
    );
    let set_pid = |pid: Option<u32>| {
        if let Some(r) = runs.lock().unwrap().get_mut(&uid) {
            r.pid = pid;
        }
    };
    patch_status(&pods, &name, &ip, &host_ip, &apps, false).await;

    let spawn = || {
        let mut cmd = tokio::process::Command::new(crate::common::binary());
        cmd.args(&prepared.args)
            .envs(prepared.env.iter().cloned())
            .stdout(std::process::Stdio::null())
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap(),
            )
            .kill_on_drop(true);
        cmd.spawn().expect("spawn the sidecar")
    };
    let grace = Duration::from_secs(spec.termination_grace_period_seconds.unwrap_or(30) as u64);
    'restarts: loop {
        if *stop.borrow() {
            return;
        }
        let mut child = spawn();
        set_pid(child.id());
        let mut ready = false;
        loop {
            tokio::select! {
                _ = child.wait() => {
                    set_pid(None);
                    if *term.borrow() { break 'restarts; }
                    patch_status(&pods, &name, &ip, &host_ip, &apps, false).await;
                    tokio::select! {
                        _ = tokio::time::sleep(RESTART_BACKOFF) => continue 'restarts,
                        _ = term.changed() => break 'restarts,
                        _ = stop.changed() => return,
                    }
                }
                _ = term.changed() => {
                    if let Some(r) = runs.lock().unwrap().get_mut(&uid) { r.terminating = true; }
                    if let Some(pid) = child.id() { crate::common::signal(pid, "TERM"); }
                    if tokio::time::timeout(grace, child.wait()).await.is_err() {
                        let _ = child.kill().await;
                    }
                    set_pid(None);
                    break 'restarts;
                }
                _ = stop.changed() => {}
                _ = tokio::time::sleep(prepared.probe_every), if !ready => {
                    if probe(&bind, ops_port, &prepared.ready_path).await {
                        ready = true;
                        patch_status(&pods, &name, &ip, &host_ip, &apps, true).await;
                    }
                }
            }
            if *stop.borrow() {
                let _ = child.kill().await;
                return;
            }
        }
    }
    final_delete(&pods, &name, &uid).await;
    if let Some(r) = runs.lock().unwrap().get_mut(&uid) {
        r.gone = true;
    }
}

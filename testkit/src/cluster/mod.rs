//! A real Kubernetes control plane for the tests: `scripts/control-plane.sh up` (etcd,
//! kube-apiserver with RBAC and TokenRequest, kube-controller-manager), the real `kubectl` and
//! `helm` beside it, and [`kubelet::Kubelet`], the harness's stand-in for the kubelet; or, with
//! `up --node` ([`ControlPlane::up_with_node`], [`node`]), a real node: containerd, kube-scheduler
//! and a real kubelet (docs/operating/real-node.md).
//!
//! What stays on the fake API server (`testkit/src/fakeapi`): only faults a real server cannot be made
//! to produce on demand (an injected 500, a forced 409 on one request, added latency), because
//! the fake records and asserts every request (its module doc names the tests and says why not a
//! fault proxy). Everything else runs here.
#![allow(dead_code)]

mod container;
pub mod kubelet;
mod kubelet_api;
pub mod node;
pub mod release;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The repository root.
pub fn repo() -> PathBuf {
    crate::repo().to_path_buf()
}

/// One control plane, stopped and removed (`control-plane.sh down`) on drop.
pub struct ControlPlane {
    /// The `up` directory: state, logs, pids, `admin.kubeconfig`, `bin/`.
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// How long `up` took (the binaries were already built, or this includes the build).
    pub start_time: Duration,
    /// The runtime the kube client and the stand-in kubelet run on; the tests are sync.
    pub rt: tokio::runtime::Runtime,
    /// Admin client (system:masters).
    pub client: Client,
    _tmp: tempfile::TempDir,
}

impl ControlPlane {
    /// Start one. A missing prerequisite (Go for a cold build, openssl, ...) fails loudly with
    /// what the script said, never skips.
    pub fn up() -> ControlPlane {
        ControlPlane::start(&[])
    }

    /// `up DIR` with `extra` arguments (`--node`).
    fn start(extra: &[&str]) -> ControlPlane {
        let tmp = tempfile::Builder::new()
            .prefix("redlock-elector-cp")
            .tempdir()
            .unwrap();
        let dir = tmp.path().join("cp");
        let t0 = Instant::now();
        let up = || {
            Command::new(repo().join("scripts/control-plane.sh"))
                .arg("up")
                .arg(&dir)
                .args(extra)
                .output()
                .expect("run scripts/control-plane.sh")
        };
        let mut out = up();
        // The script picks free loopback ports, and another process on the machine may bind one
        // between the pick and the server's bind: then start again on new ports (twice at most).
        for _ in 0..2 {
            if out.status.success()
                || !String::from_utf8_lossy(&out.stderr).contains("address already in use")
            {
                break;
            }
            eprintln!("control plane: a port was taken meanwhile; starting again on new ports");
            let _ = Command::new(repo().join("scripts/control-plane.sh"))
                .arg("down")
                .arg(&dir)
                .output();
            out = up();
        }
        assert!(
            out.status.success(),
            "scripts/control-plane.sh up {} {extra:?} failed (these tests need the real control plane; \
             build it with `scripts/control-plane.sh build`, which needs Go 1.26 and the Go module \
             proxy):\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let start_time = t0.elapsed();
        let kubeconfig = dir.join("admin.kubeconfig");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let client = rt.block_on(client_from(&kubeconfig));
        crate::common::report(
            if extra.is_empty() {
                "control plane start (up, binaries cached)"
            } else {
                "control plane + real node start (up --node, binaries cached)"
            },
            format!("{start_time:?}"),
        );
        ControlPlane {
            dir,
            kubeconfig,
            start_time,
            rt,
            client,
            _tmp: tmp,
        }
    }

    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// The `resourceVersion` of a list of `api` now: a watch from it misses no change after.
    pub fn list_version<K>(&self, api: &kube::Api<K>, lp: &kube::api::ListParams) -> String
    where
        K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        self.block_on(api.list(lp))
            .unwrap()
            .metadata
            .resource_version
            .unwrap()
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    /// The apiserver's URL, as the kubeconfig has it.
    pub fn server(&self) -> String {
        let port = std::fs::read_to_string(self.dir.join("apiserver.port")).unwrap();
        format!("https://127.0.0.1:{}", port.trim())
    }

    /// The CA bundle (base64) the kubeconfigs carry.
    pub fn ca_data(&self) -> String {
        let text = std::fs::read_to_string(&self.kubeconfig).unwrap();
        text.lines()
            .find_map(|l| l.trim().strip_prefix("certificate-authority-data: "))
            .expect("certificate-authority-data in admin.kubeconfig")
            .to_string()
    }

    /// Run a tool of the control plane (`kubectl`, `helm`) as admin; Err(stderr) on failure.
    pub fn try_run(&self, tool: &str, args: &[&str]) -> Result<String, String> {
        let out = Command::new(self.bin(tool))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.dir.join("helm/cache"))
            .env("HELM_CONFIG_HOME", self.dir.join("helm/config"))
            .env("HELM_DATA_HOME", self.dir.join("helm/data"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "{tool} {args:?} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.try_run("kubectl", args)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn helm(&self, args: &[&str]) -> String {
        self.try_run("helm", args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Deployment `name`'s `spec.minReadySeconds` as the server has it (`None`: not set).
    pub fn min_ready_seconds(&self, ns: &str, name: &str) -> Option<u64> {
        self.kubectl(&[
            "get",
            "deployment",
            name,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.minReadySeconds}",
        ])
        .trim()
        .parse()
        .ok()
    }

    /// Stop kube-apiserver alone (SIGTERM, as an operator's restart does).
    pub fn stop_apiserver(&self) {
        self.apiserver("stop");
    }

    /// Start it again with the same flags; returns once `/readyz` answers ok.
    pub fn start_apiserver(&self) {
        self.apiserver("start");
    }

    /// `scripts/control-plane.sh ACTION DIR kube-apiserver`, which must succeed.
    fn apiserver(&self, action: &str) {
        let out = Command::new(repo().join("scripts/control-plane.sh"))
            .arg(action)
            .arg(&self.dir)
            .arg("kube-apiserver")
            .output()
            .unwrap_or_else(|e| panic!("scripts/control-plane.sh {action}: {e}"));
        assert!(
            out.status.success(),
            "scripts/control-plane.sh {action} kube-apiserver: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/control-plane.sh"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }
}

/// A client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Client {
    let kc = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

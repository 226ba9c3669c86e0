//! The real node of `scripts/control-plane.sh up DIR --node`: containerd + runc, the CNI bridge,
//! kube-scheduler and a real kubelet, in a mount and network namespace of their own (see the
//! script). What the tests need from it: the sidecar's image imported into its containerd, the
//! test's redis-servers made reachable from the pods, one component stopped or started, a
//! container's host pid (for `/proc`), a pod's logs as the kubelet wrote them, and an HTTP
//! request from inside a pod's network namespace (the sidecar's API listens on the pod's
//! loopback only).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use super::{ControlPlane, repo};

/// The image every real-node pod's sidecar runs, as `scripts/image.sh build` writes it.
pub struct Image {
    pub tar: PathBuf,
    /// The reference inside the tarball (`ghcr.io/redlock-elector/redlock-elector:<version>`).
    pub reference: String,
}

impl Image {
    pub fn repository(&self) -> &str {
        self.reference.rsplit_once(':').map(|(r, _)| r).unwrap()
    }
    pub fn tag(&self) -> &str {
        self.reference.rsplit_once(':').map(|(_, t)| t).unwrap()
    }
}

/// Build the sidecar's image once per test process with `scripts/image.sh build` (the release
/// binary the Dockerfile's way, then the OCI tarball; its stdout is the reference, e.g.
/// `ghcr.io/redlock-elector/redlock-elector:<version>`); a failure fails the test with its output.
pub fn sidecar_image() -> &'static Image {
    static IMAGE: OnceLock<Image> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let tar = repo().join("target/image/redlock-elector.oci.tar");
        let out = Command::new(repo().join("scripts/image.sh"))
            .arg("build")
            .arg(&tar)
            .output()
            .expect("run scripts/image.sh");
        assert!(
            out.status.success(),
            "scripts/image.sh build {} failed (the real-node tests run the sidecar from that \
             image):\n{}{}",
            tar.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // It prints the image's reference on stdout.
        let reference = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_string();
        assert!(
            reference.contains(':'),
            "scripts/image.sh build printed no image reference: {reference:?}"
        );
        Image { tar, reference }
    })
}

/// The static-busybox image `up --node` imports for the chart's demo app container.
pub const BUSYBOX: &str = "localhost/redlock-elector/busybox:1.36";

impl ControlPlane {
    /// A control plane with one real node (`up DIR --node`), Ready.
    pub fn up_with_node() -> ControlPlane {
        ControlPlane::start(&["--node"])
    }

    /// `scripts/control-plane.sh ACTION DIR ARGS...`, which must succeed; its stdout.
    pub fn script(&self, action: &str, args: &[&str]) -> String {
        let out = Command::new(repo().join("scripts/control-plane.sh"))
            .arg(action)
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("scripts/control-plane.sh {action}: {e}"));
        assert!(
            out.status.success(),
            "scripts/control-plane.sh {action} {} {args:?} failed:\n{}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Import an OCI image tarball into the node's containerd (`ctr images import`).
    pub fn import_image(&self, tar: &Path) {
        self.script("import", &[tar.to_str().unwrap()]);
    }

    /// Make the host's `127.0.0.1:PORT`s reachable from the pods; returns the node address
    /// they use (`redis://NODE_IP:PORT`).
    pub fn forward(&self, ports: &[u16]) -> String {
        let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        let refs: Vec<&str> = ports.iter().map(|s| s.as_str()).collect();
        self.script("forward", &refs).trim().to_string()
    }

    /// `stop DIR NAME` (kubelet, containerd, kube-scheduler, ...).
    pub fn stop_component(&self, name: &str) {
        self.script("stop", &[name]);
    }

    pub fn start_component(&self, name: &str) {
        self.script("start", &[name]);
    }

    fn ctr(&self, args: &[&str]) -> String {
        let sock = self.dir.join("node/containerd.sock");
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io"])
            .args(args)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The host pid of a running container, by its CRI id (`containerd://ID` in the pod's
    /// status), from containerd's task list.
    pub fn container_pid(&self, container_id: &str) -> Option<u32> {
        let id = container_id.trim_start_matches("containerd://");
        self.ctr(&["tasks", "ls"]).lines().find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(id)).then(|| f.next()?.parse().ok())?
        })
    }

    /// Keep every container log the kubelet writes, also after the pod is gone (the kubelet
    /// removes a deleted pod's logs, last lines included, within about a second): a thread
    /// hard-links each new log file into `DIR/node/kept-logs` every 20 ms, so the file lives on
    /// with all containerd writes to it. Runs until the node's directory is removed.
    pub fn keep_pod_logs(&self) {
        let from = self.dir.join("node/pod-logs");
        let to = self.dir.join("node/kept-logs");
        std::fs::create_dir_all(&to).unwrap();
        std::thread::spawn(move || {
            while from.exists() {
                for pod in std::fs::read_dir(&from).into_iter().flatten().flatten() {
                    for c in std::fs::read_dir(pod.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                    {
                        for f in std::fs::read_dir(c.path()).into_iter().flatten().flatten() {
                            let dest = to
                                .join(pod.file_name())
                                .join(c.file_name())
                                .join(f.file_name());
                            if !dest.exists() {
                                let _ = std::fs::create_dir_all(dest.parent().unwrap());
                                let _ = std::fs::hard_link(f.path(), &dest);
                            }
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
    }

    /// What the kubelet wrote for one container (`podLogsDir`, as kept by [`Self::keep_pod_logs`]),
    /// every restart's file in order. The lines are CRI log lines: `TIMESTAMP STREAM TAG MESSAGE`.
    pub fn pod_log(&self, ns: &str, pod: &str, container: &str) -> String {
        let base = self.dir.join("node/kept-logs");
        let prefix = format!("{ns}_{pod}_");
        let mut text = String::new();
        for d in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            if !d.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            let mut files: Vec<PathBuf> = std::fs::read_dir(d.path().join(container))
                .into_iter()
                .flatten()
                .flatten()
                .map(|f| f.path())
                .collect();
            files.sort();
            for f in files {
                text.push_str(&std::fs::read_to_string(f).unwrap_or_default());
            }
        }
        text
    }

    /// `GET http://127.0.0.1:PORT/PATH` inside the network namespace of the process `pid` (a
    /// container's); the body, if it answered 200.
    pub fn http_in(&self, pid: u32, port: u16, path: &str) -> Option<String> {
        self.http_from(pid, "127.0.0.1", port, path)
    }

    /// `GET http://HOST:PORT/PATH` from inside the network namespace of the process `pid` (to
    /// another pod's address, say); the body, if it answered 200.
    pub fn http_from(&self, pid: u32, host: &str, port: u16, path: &str) -> Option<String> {
        let out = Command::new("nsenter")
            .args(["-t", &pid.to_string(), "-n", "--"])
            .args(["curl", "-sf", "--max-time", "2"])
            .arg(format!("http://{host}:{port}{path}"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// What `up --node` could leave behind on this machine, read from the host: the check of
/// `cp_node_down_leaves_nothing_behind`.
#[derive(Debug, PartialEq, Eq)]
pub struct HostState {
    /// Processes of the node's programs (by executable name), as `pid name`.
    pub processes: BTreeSet<String>,
    /// The host's mount points (this process's mount namespace), as `mountpoint fstype`.
    pub mounts: BTreeSet<String>,
    /// Every cgroup directory whose name says it is the node's or a pod's.
    pub cgroups: BTreeSet<String>,
    /// The sysctls the kubelet sets at start, plus IP forwarding, as `name=value`.
    pub sysctls: BTreeSet<String>,
    /// The host's network links and named network namespaces.
    pub network: BTreeSet<String>,
    /// `iptables-save`'s chains, when iptables is installed.
    pub iptables: BTreeSet<String>,
    /// Which of the paths the kubelet and containerd use by default exist.
    pub paths: BTreeSet<String>,
}

/// The executables of the node and of its pods.
const NODE_PROGRAMS: &[&str] = &[
    "kubelet",
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "runc",
    "kube-scheduler",
    "kube-proxy",
    "coredns",
    "pause",
    "busybox",
    "redlock-elector",
];

impl HostState {
    pub fn read() -> HostState {
        let mut processes = BTreeSet::new();
        for e in std::fs::read_dir("/proc").unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(exe) = std::fs::read_link(e.path().join("exe")) else {
                continue;
            };
            let exe = exe.file_name().unwrap_or_default().to_string_lossy();
            let exe = exe.trim_end_matches(" (deleted)");
            // The sidecar binaries of other (host-process) tests run from target/, not images.
            let in_container = std::fs::read_link(e.path().join("root"))
                .map(|r| r != Path::new("/"))
                .unwrap_or(false);
            if NODE_PROGRAMS.contains(&exe) && (exe != "redlock-elector" || in_container) {
                processes.insert(format!("{name} {exe}"));
            }
        }
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let sep = f.iter().position(|x| *x == "-").unwrap();
                format!("{} {}", f[4], f[sep + 1])
            })
            .collect();
        let mut cgroups = BTreeSet::new();
        for h in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            walk_cgroups(&h.path(), 0, &mut cgroups);
        }
        let sysctls = [
            "vm/overcommit_memory",
            "vm/panic_on_oom",
            "kernel/panic",
            "kernel/panic_on_oops",
            "kernel/keys/root_maxkeys",
            "kernel/keys/root_maxbytes",
            "net/ipv4/ip_forward",
        ]
        .iter()
        .map(|s| {
            let v = std::fs::read_to_string(format!("/proc/sys/{s}")).unwrap_or_default();
            format!("{s}={}", v.trim())
        })
        .collect();
        let mut network: BTreeSet<String> = std::fs::read_dir("/sys/class/net")
            .unwrap()
            .flatten()
            .map(|e| format!("link {}", e.file_name().to_string_lossy()))
            .collect();
        for e in std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
        {
            network.insert(format!("netns {}", e.file_name().to_string_lossy()));
        }
        let iptables = Command::new("iptables-save")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| l.starts_with(':') || l.starts_with('*'))
                    .map(|l| l.split_whitespace().next().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default();
        let paths = [
            "/var/lib/kubelet",
            "/var/log/pods",
            "/var/log/containers",
            "/var/lib/containerd",
            "/run/containerd",
            "/opt/containerd",
            "/etc/cni/net.d",
            "/var/lib/cni",
            "/run/netns",
            "/etc/kubernetes",
        ]
        .iter()
        .filter(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .collect();
        HostState {
            processes,
            mounts,
            cgroups,
            sysctls,
            network,
            iptables,
            paths,
        }
    }
}

fn walk_cgroups(dir: &Path, depth: usize, out: &mut BTreeSet<String>) {
    if depth > 4 {
        return;
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("redlock-elector-node") || name.starts_with("kubepods") {
            out.insert(e.path().display().to_string());
        }
        walk_cgroups(&e.path(), depth + 1, out);
    }
}

//! The stand-in kubelet's reading of a pod's sidecar container: its args, env (downward API),
//! volumes (ConfigMap files; the ServiceAccount token) and probes, as the chart rendered them,
//! plus the overrides one machine forces (listen addresses, the apiserver's address).

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;

/// What reading a pod's container needs from the cluster: the client and namespace, and the
/// apiserver URL and CA bundle (base64) for the pods' kubeconfigs. The stand-in kubelet holds one.
#[derive(Clone)]
pub struct Apiserver {
    pub client: Client,
    pub ns: String,
    pub server: String,
    pub ca: String,
}

/// How to run one pod's sidecar.
pub struct Prepared {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub api_port: u16,
    pub ops_port: u16,
    /// The readiness probe's path.
    pub ready_path: String,
    /// How often kubelet probes before the first success.
    pub probe_every: Duration,
}

/// The sidecar container of a pod: the native sidecar (an init container with restartPolicy
/// Always) or a classic container, by the chart's default name.
fn sidecar_container(pod: &Pod) -> Container {
    let spec = pod.spec.as_ref().unwrap();
    spec.init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .find(|c| c.name == "redlock-elector")
        .cloned()
        .expect("the pod has a redlock-elector container")
}

/// Read the pod's sidecar container and lay out its files under `pod_dir`; `bind` is the
/// loopback address it listens on.
pub async fn prepare(ctx: &Apiserver, pod: &Pod, bind: &str, pod_dir: &Path) -> Prepared {
    let name = pod.metadata.name.clone().unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let spec = pod.spec.clone().unwrap();
    // The ServiceAccount token, bound to this pod, as kubelet's projected volume has it.
    let sa_name = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let sas: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let tr = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}},
    });
    let token: serde_json::Value = sas
        .create_subresource("token", &sa_name, &PostParams::default(), &tr)
        .await
        .unwrap_or_else(|e| panic!("TokenRequest for ServiceAccount {sa_name}: {e}"));
    let token = token["status"]["token"]
        .as_str()
        .expect("a token in the TokenRequest's status")
        .to_string();
    // The container as rendered: args with volume mount paths moved under the pod's directory,
    // env from literals and the downward API.
    let c = sidecar_container(pod);
    let mut mounts: Vec<(String, PathBuf)> = vec![];
    for m in c.volume_mounts.iter().flatten() {
        let vol = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .expect("mounted volume");
        let local = pod_dir.join("volumes").join(&m.name);
        std::fs::create_dir_all(&local).unwrap();
        if let Some(cm) = &vol.config_map {
            let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.ns);
            let cm = cms.get(&cm.name).await.unwrap();
            for (k, v) in cm.data.unwrap_or_default() {
                std::fs::write(local.join(k), v).unwrap();
            }
        } else if vol.projected.is_some() {
            // The ServiceAccount admission plugin's kube-api-access volume.
            std::fs::write(local.join("token"), &token).unwrap();
            std::fs::write(local.join("namespace"), &ctx.ns).unwrap();
        } else {
            panic!(
                "the stand-in kubelet mounts ConfigMap and projected volumes only, not {:?}",
                vol.name
            );
        }
        mounts.push((m.mount_path.clone(), local));
    }
    let map_path = |s: &str| -> String {
        for (mount, local) in &mounts {
            if let Some(rest) = s.strip_prefix(mount.as_str()) {
                return format!("{}{rest}", local.display());
            }
        }
        s.to_string()
    };
    let args: Vec<String> = c.args.iter().flatten().map(|a| map_path(a)).collect();
    let config_file = args
        .iter()
        .skip_while(|a| *a != "--config")
        .nth(1)
        .cloned()
        .expect("--config in the sidecar's args");
    let config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&config_file).unwrap()).unwrap();
    let port_of = |section: &str| -> u16 {
        config[section]["listen"]
            .as_str()
            .and_then(|l| l.rsplit(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{section}.listen in the rendered config"))
    };
    let (api_port, ops_port) = (port_of("api"), port_of("ops"));
    let mut env: Vec<(String, String)> = vec![];
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => name.clone(),
                Some("metadata.namespace") => ctx.ns.clone(),
                // The stand-in's pod IP for this bind address (see kubelet.rs).
                Some("status.podIP") => bind.replacen("127.", "10.", 1),
                other => panic!(
                    "the stand-in kubelet cannot resolve env {} ({other:?})",
                    e.name
                ),
            },
            _ => String::new(),
        };
        env.push((e.name.clone(), value));
    }

    let kubeconfig = pod_dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {}\nusers:\n- name: {sa_name}\n  user:\n    token: {token}\n\
             contexts:\n- name: c\n  context: {{cluster: c, user: {sa_name}, namespace: {}}}\n\
             current-context: c\n",
            ctx.server, ctx.ca, ctx.ns
        ),
    )
    .unwrap();
    env.extend([
        ("KUBECONFIG".to_string(), kubeconfig.display().to_string()),
        ("KUBERNETES_SERVICE_HOST".into(), "127.0.0.1".into()),
        (
            "KUBERNETES_SERVICE_PORT".into(),
            ctx.server.rsplit(':').next().unwrap().into(),
        ),
        (
            "REDLOCK_ELECTOR_API_LISTEN".into(),
            format!("{bind}:{api_port}"),
        ),
        (
            "REDLOCK_ELECTOR_OPS_LISTEN".into(),
            format!("{bind}:{ops_port}"),
        ),
    ]);
    let ready_path = c
        .readiness_probe
        .as_ref()
        .and_then(|p| p.http_get.as_ref())
        .and_then(|h| h.path.clone())
        .unwrap_or_else(|| "/readyz".into());
    // kubelet probes the startup probe every periodSeconds until it succeeds, then readiness.
    let probe_every = c
        .startup_probe
        .as_ref()
        .or(c.readiness_probe.as_ref())
        .and_then(|p| p.period_seconds)
        .map_or(Duration::from_millis(100), |s| {
            Duration::from_secs(s as u64)
        });
    Prepared {
        args,
        env,
        api_port,
        ops_port,
        ready_path,
        probe_every,
    }
}

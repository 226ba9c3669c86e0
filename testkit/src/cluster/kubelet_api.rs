//! What the stand-in kubelet writes to the apiserver, as a node's kubelet (and, for binding,
//! kube-scheduler) would: its Node, a pod's binding to it, the pod's status, and the final delete
//! once its containers are gone. It knows nothing of the kubelet's own state.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use serde_json::json;

/// Create the stand-in's Node, Ready, with an InternalIP in `10.245.0.<subnet>`.
pub async fn create_node(client: &Client, name: &str, subnet: u32) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "the test harness's stand-in kubelet"}],
        "addresses": [{"type": "InternalIP", "address": format!("10.245.0.{subnet}")}],
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// Scheduling: bind the pod to `node` through the `binding` subresource, as kube-scheduler would;
/// false (and a line on stderr) if that failed.
pub async fn bind_to_node(pods: &Api<Pod>, name: &str, node: &str) -> bool {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    };
    if let Err(e) = pods
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
    {
        eprintln!("stand-in kubelet: binding {name} failed: {e}");
        return false;
    }
    true
}

/// Status Running with the pod's IP and the app containers' statuses ([`app_statuses`]);
/// `ready` sets the Ready and ContainersReady conditions.
pub async fn patch_status(
    pods: &Api<Pod>,
    name: &str,
    ip: &str,
    host_ip: &str,
    apps: &[(String, String)],
    ready: bool,
) {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let r = if ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": r, "lastTransitionTime": now},
            {"type": "Ready", "status": r, "lastTransitionTime": now},
        ],
        "containerStatuses": app_statuses(apps, &now),
    }});
    for attempt in 0..50 {
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
            .await
        {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 404 => return,
            Err(e) => {
                if attempt == 0 {
                    eprintln!("stand-in kubelet: status of {name}: {e}; retrying");
                }
                tokio::time::sleep(Duration::from_millis(200)).await
            }
        }
    }
}

/// The app containers' statuses (`(name, image)`): the app is not run here, so each one counts
/// as started, running and ready since the pod started (what `lease.followApp` reads).
fn app_statuses(apps: &[(String, String)], now: &str) -> serde_json::Value {
    apps.iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": "", "ready": true, "started": true,
                   "restartCount": 0, "state": {"running": {"startedAt": now}}})
        })
        .collect()
}

/// The final delete, as kubelet does once the containers are gone (grace 0, on the pod's uid).
pub async fn final_delete(pods: &Api<Pod>, name: &str, uid: &str) {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    for _ in 0..50 {
        match pods.delete(name, &dp).await {
            Ok(_) => break,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => break,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The readiness probe: an HTTP GET answered 200.
pub async fn probe(host: &str, port: u16, path: &str) -> bool {
    let (host, path) = (host.to_string(), path.to_string());
    tokio::task::spawn_blocking(move || {
        crate::common::http_host("GET", &host, port, &path, Duration::from_secs(1))
            .is_some_and(|(s, _)| s == 200)
    })
    .await
    .unwrap_or(false)
}

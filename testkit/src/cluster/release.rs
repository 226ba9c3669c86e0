//! The chart installed as users install it (`helm install --wait`), its pods run by the stand-in
//! kubelet, and what the tests read back: sidecar leaders, labelled leaders, label changes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, WatchEvent, WatchParams};

use super::ControlPlane;
use super::kubelet::{Kubelet, PodRun};
use crate::common::*;

pub const TTL: Duration = Duration::from_secs(2);
pub const ROLE_KEY: &str = "redlock-elector/role";

/// The chart installed with `helm install --wait` in `ns`, its pods run by a stand-in kubelet.
pub struct Release {
    pub kubelet: Kubelet,
    pub ns: String,
    pub name: String,
    _values: tempfile::TempDir,
}

impl Release {
    /// `extra` is appended to the values file (YAML, top-level keys).
    pub fn install(
        cp: &ControlPlane,
        ns: &str,
        nodes: &[Redis],
        replicas: u32,
        extra: &str,
    ) -> Release {
        Release::install_full(cp, ns, nodes, replicas, extra, &[])
    }

    /// [`Release::install`] with `--set` values.
    pub fn install_with(
        cp: &ControlPlane,
        ns: &str,
        nodes: &[Redis],
        replicas: u32,
        sets: &[&str],
    ) -> Release {
        Release::install_full(cp, ns, nodes, replicas, "", sets)
    }

    fn install_full(
        cp: &ControlPlane,
        ns: &str,
        nodes: &[Redis],
        replicas: u32,
        extra: &str,
        sets: &[&str],
    ) -> Release {
        let name = "el".to_string();
        cp.kubectl(&["create", "namespace", ns]);
        let kubelet = Kubelet::start(cp, ns, &format!("app.kubernetes.io/instance={name}"));
        let dir = tempdir();
        let values = dir.path().join("values.yaml");
        let endpoints: Vec<String> = nodes
            .iter()
            .map(|n| format!("      - {}", n.url()))
            .collect();
        std::fs::write(
            &values,
            format!(
                "workload:\n  replicas: {replicas}\n  terminationGracePeriodSeconds: 5\n\
                 \x20 minReadySeconds: 0\n\
                 config:\n  lease:\n    ttl: {}s\n    retryEvery: 200ms\n    preferSettle: 1s\n\
                 \x20 redis:\n    endpoints:\n{}\n\
                 app:\n  ports:\n    - name: http\n      containerPort: 8080\n{extra}",
                TTL.as_secs(),
                endpoints.join("\n")
            ),
        )
        .unwrap();
        let chart = super::repo().join("charts/redlock-elector");
        let t0 = Instant::now();
        let mut args = vec![
            "install",
            &name,
            chart.to_str().unwrap(),
            "-n",
            ns,
            "-f",
            values.to_str().unwrap(),
            "--wait",
            "--timeout",
            "180s",
        ];
        for s in sets {
            args.extend(["--set", s]);
        }
        cp.helm(&args);
        report(
            "helm install --wait (pods Ready by the stand-in)",
            format!("{:?}", t0.elapsed()),
        );
        Release {
            kubelet,
            ns: ns.into(),
            name,
            _values: dir,
        }
    }

    pub fn full_name(&self) -> String {
        format!("{}-redlock-elector", self.name)
    }

    /// The running, non-terminating pods.
    pub fn live(&self) -> Vec<PodRun> {
        self.kubelet
            .pods()
            .into_iter()
            .filter(|p| !p.terminating && p.pid.is_some())
            .collect()
    }

    /// The sole sidecar leading among the live pods other than `but`, if exactly one does.
    pub fn leader_besides(&self, but: &str) -> Option<String> {
        let others: Vec<PodRun> = self.live().into_iter().filter(|p| p.name != but).collect();
        sidecar_leader(&others)
    }

    /// SIGKILL `leader`'s sidecar and wait (20 s) until another pod's sidecar leads; returns that
    /// pod's name. The panic says `what` was expected.
    pub fn kill_leader(&self, leader: &str, what: &str) -> String {
        self.kubelet.kill(leader);
        wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
            self.leader_besides(leader)
        })
        .unwrap_or_else(|| panic!("{what}"))
    }
}

/// The pod names labelled leader now, as the server has them.
pub fn labelled_leaders(cp: &ControlPlane, ns: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let list = cp
        .block_on(pods.list(&ListParams::default().labels(&format!("{ROLE_KEY}=leader"))))
        .unwrap();
    list.items
        .into_iter()
        .map(|p| p.metadata.name.unwrap())
        .collect()
}

/// The one pod whose sidecar answers is_leader, if exactly one does.
pub fn sidecar_leader(pods: &[PodRun]) -> Option<String> {
    let l: Vec<&PodRun> = pods
        .iter()
        .filter(|p| p.view().is_some_and(|v| v.is_leader))
        .collect();
    (l.len() == 1).then(|| l[0].name.clone())
}

/// Wait until exactly one sidecar leads and the server labels exactly that pod leader.
pub fn wait_converged(cp: &ControlPlane, rel: &Release, timeout: Duration) -> String {
    wait_for(timeout, Duration::from_millis(20), || {
        let leader = sidecar_leader(&rel.live())?;
        (labelled_leaders(cp, &rel.ns) == [leader.clone()]).then_some(leader)
    })
    .unwrap_or_else(|| {
        let logs: Vec<String> = rel
            .kubelet
            .pods()
            .iter()
            .map(|p| format!("--- {}\n{}", p.name, p.logs()))
            .collect();
        panic!(
            "no converged leader within {timeout:?}: labelled {:?}\n{}",
            labelled_leaders(cp, &rel.ns),
            logs.join("\n")
        )
    })
}

/// Record every change of the role label in the server's order (a watch from now).
pub fn watch_roles(cp: &ControlPlane, ns: &str) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen: Arc<Mutex<Vec<(String, String)>>> = Default::default();
    let pods: Api<Pod> = Api::namespaced(cp.client.clone(), ns);
    let rv = cp.list_version(&pods, &ListParams::default());
    let out = seen.clone();
    cp.rt.spawn(async move {
        let mut stream = pods
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        let mut last: std::collections::HashMap<String, String> = Default::default();
        while let Some(Ok(ev)) = stream.next().await {
            if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev {
                let name = p.metadata.name.clone().unwrap();
                let role = p
                    .metadata
                    .labels
                    .unwrap_or_default()
                    .get(ROLE_KEY)
                    .cloned()
                    .unwrap_or_default();
                if last.get(&name) != Some(&role) {
                    last.insert(name.clone(), role.clone());
                    out.lock().unwrap().push((name, role));
                }
            }
        }
    });
    seen
}

/// One state of a Service's endpoints, as a watch of its EndpointSlices delivered it: when it
/// arrived (this host's wall clock, which the pods share) and the ready addresses of every slice
/// of the Service together.
#[derive(Clone, Debug)]
pub struct SliceState {
    pub at: k8s_openapi::jiff::Timestamp,
    pub addresses: std::collections::BTreeSet<String>,
}

/// Record every change of the ready addresses of `service`'s EndpointSlices in `ns` (selected by
/// `kubernetes.io/service-name`, whichever controller or sidecar writes them), from now on. The
/// watch is resumed from the last resourceVersion when the server ends it, so it lasts a
/// benchmark of any length; a watch that cannot resume (410 Gone) starts again from a list.
pub fn watch_slices(cp: &ControlPlane, ns: &str, service: &str) -> Arc<Mutex<Vec<SliceState>>> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use std::collections::{BTreeMap, BTreeSet};
    let seen: Arc<Mutex<Vec<SliceState>>> = Default::default();
    let api: Api<EndpointSlice> = Api::namespaced(cp.client.clone(), ns);
    let sel = format!("kubernetes.io/service-name={service}");
    let ready = |s: &EndpointSlice| -> BTreeSet<String> {
        s.endpoints
            .iter()
            .flatten()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
            .flat_map(|e| e.addresses.clone())
            .collect()
    };
    let out = seen.clone();
    cp.rt.spawn(async move {
        let mut slices: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut rv = String::new();
        loop {
            if rv.is_empty() {
                let Ok(list) = api.list(&ListParams::default().labels(&sel)).await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                slices = list
                    .items
                    .iter()
                    .map(|s| (s.metadata.name.clone().unwrap_or_default(), ready(s)))
                    .collect();
                rv = list.metadata.resource_version.unwrap_or_default();
                record(&out, &slices);
            }
            let wp = WatchParams::default().labels(&sel).timeout(290);
            let Ok(stream) = api.watch(&wp, &rv).await else {
                rv.clear();
                continue;
            };
            let mut stream = stream.boxed();
            while let Some(ev) = stream.next().await {
                let (name, addrs, version) = match ev {
                    Ok(WatchEvent::Added(s)) | Ok(WatchEvent::Modified(s)) => (
                        s.metadata.name.clone().unwrap_or_default(),
                        Some(ready(&s)),
                        s.metadata.resource_version.clone(),
                    ),
                    Ok(WatchEvent::Deleted(s)) => (
                        s.metadata.name.clone().unwrap_or_default(),
                        None,
                        s.metadata.resource_version.clone(),
                    ),
                    Ok(WatchEvent::Bookmark(b)) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    // 410 Gone and the like: start again from a list.
                    Ok(WatchEvent::Error(_)) | Err(_) => {
                        rv.clear();
                        break;
                    }
                };
                if let Some(v) = version {
                    rv = v;
                }
                match addrs {
                    Some(a) => slices.insert(name, a),
                    None => slices.remove(&name),
                };
                record(&out, &slices);
            }
        }
    });
    seen
}

/// Append the union of `slices`' addresses to `out` if it differs from the last state recorded.
fn record(
    out: &Mutex<Vec<SliceState>>,
    slices: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
) {
    let at = k8s_openapi::jiff::Timestamp::now();
    let addresses: std::collections::BTreeSet<String> =
        slices.values().flatten().cloned().collect();
    let mut o = out.lock().unwrap();
    if o.last().is_none_or(|l| l.addresses != addresses) {
        o.push(SliceState { at, addresses });
    }
}

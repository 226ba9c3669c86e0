//! The sidecar against a real Kubernetes control plane (`scripts/control-plane.sh`: etcd,
//! kube-apiserver with RBAC, kube-controller-manager), the chart installed with the real
//! `helm install --wait`, pods run by the harness's stand-in kubelet (`testkit/src/cluster/kubelet.rs`)
//! as the chart's ServiceAccount, so the real authorizer enforces the shipped Role.
//!
//! - election with 3 pods: the label follows the leader; after a SIGKILL of the leader's sidecar
//!   the stale label is demoted before the new leader labels itself (in the server's own order,
//!   read from a watch); the Events are stored with the fields the server keeps;
//! - one verb taken from the Role: the sidecar says what is missing (log and metric), the
//!   election is unaffected, and the label converges once the verb is back;
//! - an apiserver outage: the election carries on; the labels converge after it returns;
//! - `kubectl apply` of manifests/: the real server's validation accepts them.

use testkit::cluster;
use testkit::common;

use std::time::{Duration, Instant};

use cluster::ControlPlane;
use cluster::release::*;
use common::*;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;

#[test]
fn cp_election_with_three_pods_on_a_real_server() {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let t0 = Instant::now();
    let rel = Release::install(&cp, "election", &nodes, 3, "");
    assert_eq!(rel.live().len(), 3, "three pods run");
    let first = wait_converged(&cp, &rel, Duration::from_secs(30));

    // Its BecameLeader Event first: Events are sent in the background, and a SIGKILL loses one
    // not sent yet (seen here: the killed leader's Event missing).
    let events: Api<Event> = Api::namespaced(cp.client.clone(), &rel.ns);
    wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        let list = cp.block_on(events.list(&ListParams::default())).ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("BecameLeader")
                    && e.involved_object.name.as_deref() == Some(first.as_str())
            })
            .then_some(())
    })
    .unwrap_or_else(|| panic!("{first}'s BecameLeader Event was not stored within 30 s"));

    // A crash of the leader's sidecar: SIGKILL, no release.
    let roles = watch_roles(&cp, &rel.ns);
    let killed_at = Instant::now();
    rel.kubelet.kill(&first);
    let second = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        let l = rel.leader_besides(&first)?;
        (labelled_leaders(&cp, &rel.ns) == [l.clone()]).then_some(l)
    })
    .unwrap_or_else(|| {
        panic!(
            "no new labelled leader after the SIGKILL; labelled {:?}",
            labelled_leaders(&cp, &rel.ns)
        )
    });
    report(
        "SIGKILL of the leader to the new leader labelled (ttl 2s)",
        format!("{:?}", killed_at.elapsed()),
    );
    assert_ne!(first, second);
    // The label was read with a GET; the watch may deliver that change a moment later. Wait for
    // it (the order is the server's either way).
    let order = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        let order = roles.lock().unwrap().clone();
        order
            .iter()
            .any(|(p, r)| *p == second && r == "leader")
            .then_some(order)
    })
    .unwrap_or_else(|| roles.lock().unwrap().clone());
    eprintln!("role label changes in the server's order: {order:?}");
    let demoted = order
        .iter()
        .position(|(p, r)| *p == first && r != "leader")
        .unwrap_or_else(|| panic!("the stale label of {first} was never demoted: {order:?}"));
    let promoted = order
        .iter()
        .position(|(p, r)| *p == second && r == "leader")
        .unwrap_or_else(|| panic!("{second} never labelled leader: {order:?}"));
    assert!(
        demoted < promoted,
        "the new leader labelled itself before the stale label was demoted: {order:?}"
    );
    let sidecar = rel.kubelet.pod(&second);
    assert!(
        sidecar.logs().contains("demoted a stale leader label"),
        "the demotion is the new leader's:\n{}",
        sidecar.logs()
    );

    // The Events as the server stores them.
    let became = wait_for(Duration::from_secs(30), Duration::from_millis(100), || {
        let list = cp.block_on(events.list(&ListParams::default())).unwrap();
        let b: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("BecameLeader"))
            .collect();
        let names: Vec<&str> = b
            .iter()
            .filter_map(|e| e.involved_object.name.as_deref())
            .collect();
        (names.contains(&first.as_str()) && names.contains(&second.as_str())).then_some(b)
    })
    .unwrap_or_else(|| {
        let stored: Vec<(Option<String>, Option<String>)> = cp
            .block_on(events.list(&ListParams::default()))
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|e| (e.reason, e.involved_object.name))
                    .collect()
            })
            .unwrap_or_default();
        panic!(
            "BecameLeader Events of both leaders ({first}, {second}) not stored within 30 s; stored: {stored:?}\n{}",
            rel.kubelet.pod(&second).logs()
        )
    });
    for e in &became {
        let pod = rel
            .kubelet
            .pods()
            .into_iter()
            .find(|p| Some(&p.name) == e.involved_object.name.as_ref());
        eprintln!(
            "stored Event: reason={:?} type={:?} involvedObject={:?}/{:?} uid={:?} source={:?} \
             reportingComponent={:?} reportingInstance={:?} count={:?} firstTimestamp={:?} \
             eventTime={:?} message={:?}",
            e.reason,
            e.type_,
            e.involved_object.kind,
            e.involved_object.name,
            e.involved_object.uid,
            e.source.as_ref().and_then(|s| s.component.clone()),
            e.reporting_component,
            e.reporting_instance,
            e.count,
            e.first_timestamp,
            e.event_time,
            e.message
        );
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.involved_object.kind.as_deref(), Some("Pod"));
        assert_eq!(
            e.involved_object.namespace.as_deref(),
            Some(rel.ns.as_str())
        );
        if let Some(p) = pod {
            assert_eq!(e.involved_object.uid.as_deref(), Some(p.uid.as_str()));
        }
        assert_eq!(e.reporting_component.as_deref(), Some("redlock-elector"));
        assert!(e.message.as_deref().unwrap_or("").contains("became leader"));
    }
    report(
        "election test (install + crash + events)",
        format!("{:?}", t0.elapsed()),
    );
}

#[test]
fn cp_a_verb_missing_from_the_role_is_named_and_the_election_goes_on() {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let rel = Release::install(&cp, "rbac", &nodes, 3, "");
    let first = wait_converged(&cp, &rel, Duration::from_secs(30));
    let role = rel.full_name();
    // The shipped Role without pods `list` (which a new leader needs to find stale labels).
    let original: serde_json::Value =
        serde_json::from_str(&cp.kubectl(&["-n", &rel.ns, "get", "role", &role, "-o", "json"]))
            .unwrap();
    let rule = &original["rules"][0];
    assert_eq!(rule["resources"], serde_json::json!(["pods"]), "{original}");
    assert_eq!(
        rule["verbs"],
        serde_json::json!(["get", "watch", "list", "patch"]),
        "{original}"
    );
    patch_role_verbs(
        &cp,
        &rel,
        &role,
        &serde_json::json!(["get", "watch", "patch"]),
    );
    let second = rel.kill_leader(&first, "the election goes on without the verb");
    let pod = rel.kubelet.pod(&second);
    let said = wait_for(Duration::from_secs(15), Duration::from_millis(100), || {
        let logs = pod.logs();
        let forbidden = pod
            .metrics()
            .lines()
            .filter(|l| {
                l.starts_with("redlock_elector_kube_requests_total")
                    && l.contains("verb=\"list\"")
                    && l.contains("result=\"forbidden\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
        (forbidden > 0.0 && logs.contains("cannot list resource \\\"pods\\\"")).then_some(forbidden)
    })
    .unwrap_or_else(|| {
        panic!(
            "the sidecar never said `list` is missing:\n{}\n{}",
            pod.logs(),
            pod.metrics()
        )
    });
    report("forbidden list requests counted", said);
    let line = pod
        .logs()
        .lines()
        .find(|l| l.contains("cannot list resource"))
        .unwrap()
        .to_string();
    eprintln!("the sidecar's log line: {line}");
    assert!(
        line.contains(&format!("system:serviceaccount:{}:{role}", rel.ns)),
        "{line}"
    );
    // Still one leader, still leading: the election does not depend on the API server.
    std::thread::sleep(TTL * 2);
    assert_eq!(sidecar_leader(&rel.live()), Some(second.clone()));
    assert!(pod.view().unwrap().is_leader);
    // What a missing verb costs: the stale label cannot be found, so the new leader's is not set.
    assert_eq!(labelled_leaders(&cp, &rel.ns), std::slice::from_ref(&first));

    // The verb back: the label converges on the leader by itself.
    patch_role_verbs(&cp, &rel, &role, &rule["verbs"]);
    assert_eq!(wait_converged(&cp, &rel, Duration::from_secs(30)), second);
}

#[test]
fn cp_an_apiserver_outage_leaves_the_election_alone_and_the_labels_converge() {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let rel = Release::install(&cp, "outage", &nodes, 3, "");
    let first = wait_converged(&cp, &rel, Duration::from_secs(30));
    let t0 = Instant::now();
    cp.stop_apiserver();
    report("kube-apiserver stopped in", format!("{:?}", t0.elapsed()));
    // Leadership changes during the outage: the leader's sidecar crashes.
    let second = rel.kill_leader(
        &first,
        "a new leader is elected while the apiserver is down",
    );
    std::thread::sleep(TTL);
    assert_eq!(
        sidecar_leader(&rel.live()),
        Some(second.clone()),
        "the leader holds during the outage"
    );
    let t1 = Instant::now();
    cp.start_apiserver();
    report("kube-apiserver back in", format!("{:?}", t1.elapsed()));
    let t2 = Instant::now();
    let leader = wait_converged(&cp, &rel, Duration::from_secs(60));
    report(
        "labels converged after the apiserver returned",
        format!("{:?}", t2.elapsed()),
    );
    assert_eq!(leader, second);
}

/// `kubectl apply <args>`: a server-side dry run first (admission and validation, nothing
/// stored), then for real; kubectl must report every object in `created` (a line prefix)
/// created.
fn apply_and_expect_created(cp: &ControlPlane, args: &[&str], created: &[&str]) {
    cp.kubectl(&[&["apply", "--dry-run=server"], args].concat())
        .lines()
        .for_each(|l| eprintln!("dry run: {l}"));
    let out = cp.kubectl(&[&["apply"], args].concat());
    eprintln!("{out}");
    for what in created {
        assert!(
            out.lines()
                .any(|l| l.starts_with(what) && l.ends_with("created")),
            "kubectl apply did not create {what}:\n{out}"
        );
    }
}

#[test]
fn cp_the_plain_manifests_pass_the_real_servers_validation() {
    let cp = ControlPlane::up();
    let example = cluster::repo().join("manifests/example");
    let example = example.to_str().unwrap();
    // Server-side dry run first (admission and validation, nothing stored), then for real. The
    // dry run needs the namespace to exist (the real server checks it; a dry-run namespace is not
    // stored), so that one goes first.
    cp.kubectl(&["apply", "-f", &format!("{example}/namespace.yaml")]);
    apply_and_expect_created(
        &cp,
        &["-k", example],
        &[
            "configmap/",
            "deployment.apps/",
            "role.rbac.authorization.k8s.io/",
            "rolebinding.rbac.authorization.k8s.io/",
            "service/",
            "serviceaccount/",
        ],
    );
    // A second apply changes nothing: the server kept what the manifests say. Judged by the
    // objects' resourceVersions: kubectl reports the PodDisruptionBudget "configured" on every
    // apply (its selector's patch strategy is `replace`, so the client always sends it), while the
    // server stores nothing new.
    // An object with a spec is judged by its generation (a controller writing its status, as the
    // Deployment and disruption controllers still do after the first apply, changes its
    // resourceVersion but not its generation); one without, by its resourceVersion.
    let versions = || {
        cp.kubectl(&[
            "get",
            "-k",
            example,
            "-o",
            "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.generation}|{.metadata.resourceVersion}{\"\\n\"}{end}",
        ])
        .lines()
        .map(|l| match l.split_once('=').and_then(|(k, v)| Some((k, v.split_once('|')?))) {
            Some((k, ("", rv))) => format!("{k} resourceVersion {rv}"),
            Some((k, (generation, _))) => format!("{k} generation {generation}"),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
    };
    let before = versions();
    let again = cp.kubectl(&["apply", "-k", example]);
    assert!(
        again
            .lines()
            .all(|l| l.ends_with("unchanged") || l.starts_with("poddisruptionbudget.policy/")),
        "a second apply changed something:\n{again}"
    );
    assert_eq!(
        versions(),
        before,
        "a second apply stored a new version of an object:\n{again}"
    );
}

#[test]
fn cp_the_sidecar_component_on_a_plain_deployment_passes_the_real_servers_validation() {
    // manifests/example-existing-workload: a plain Deployment named in a local Component gets the
    // native sidecar, its ConfigMap, RBAC and the leader Service from manifests/components/sidecar
    // (docs/operating/existing-workload.md). The real server validates and stores what kustomize
    // built, in a namespace given on the command line (the Component names none).
    let cp = ControlPlane::up();
    let example = cluster::repo().join("manifests/example-existing-workload");
    let example = example.to_str().unwrap();
    let ns = "existing-workload";
    cp.kubectl(&["create", "namespace", ns]);
    apply_and_expect_created(
        &cp,
        &["-n", ns, "-k", example],
        &[
            "configmap/redlock-elector-config-",
            "deployment.apps/web ",
            "deployment.apps/worker ",
            "role.rbac.authorization.k8s.io/redlock-elector ",
            "rolebinding.rbac.authorization.k8s.io/redlock-elector ",
            "service/redlock-elector-leader ",
            "serviceaccount/redlock-elector ",
        ],
    );
    // The server kept the native sidecar (restartPolicy: Always on an init container) on `web`.
    let inits = cp.kubectl(&[
        "-n",
        ns,
        "get",
        "deployment",
        "web",
        "-o",
        "jsonpath={range .spec.template.spec.initContainers[*]}{.name}={.restartPolicy}{\"\\n\"}{end}",
    ]);
    assert_eq!(
        inits.trim(),
        "redlock-elector=Always",
        "web's init containers: {inits}"
    );
    let worker = cp.kubectl(&[
        "-n",
        ns,
        "get",
        "deployment",
        "worker",
        "-o",
        "jsonpath={.spec.template.spec.initContainers}",
    ]);
    assert_eq!(worker.trim(), "", "worker must not get the sidecar");
}

/// Set the verbs of the first rule of the Role `role` (`kubectl patch role --type json`).
fn patch_role_verbs(cp: &ControlPlane, rel: &Release, role: &str, verbs: &serde_json::Value) {
    let patch = serde_json::json!([{"op": "replace", "path": "/rules/0/verbs", "value": verbs}]);
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

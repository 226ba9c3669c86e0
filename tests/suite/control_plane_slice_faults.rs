//! The sidecar route's faults on the real API server (`leaderService.endpoints: sidecar`; the
//! set-up of tests/suite/control_plane.rs): a 409, a deleted slice, a later term's token. The
//! faults a real server cannot produce on demand (a 500, a held write, an outage) are in
//! `kube_slices.rs`, against the fake.

use testkit::cluster;
use testkit::common;

use std::time::Duration;

use super::control_plane_endpoints::{
    WRITE_DELAY_MS, held_counts, slice_addresses, wait_held, wait_slice_converged,
};
use cluster::ControlPlane;
use cluster::release::*;
use common::*;

/// A counter of `pod`'s sidecar (summed over its series).
fn counter(rel: &Release, pod: &str, name: &str) -> f64 {
    rel.kubelet
        .pod(pod)
        .metrics()
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `kubectl annotate --overwrite` the slice with `pairs` (`key=value`).
fn annotate(cp: &ControlPlane, ns: &str, slice: &str, pairs: &[&str]) {
    let mut args = vec!["-n", ns, "annotate", "endpointslice", slice, "--overwrite"];
    args.extend_from_slice(pairs);
    cp.kubectl(&args);
}

/// Step `leader` down and wait for the next one; its name.
fn hand_over(rel: &Release, leader: &str) -> String {
    assert_eq!(rel.kubelet.pod(leader).step_down(), Some(200));
    wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        rel.leader_besides(leader)
    })
    .unwrap_or_else(|| panic!("no leader after {leader} stepped down"))
}

/// On the real API server, three faults the sidecar route must survive, one after the other:
/// - a 409: the slice changes (an annotation) while the new leader holds its write; the write
///   is refused by its `resourceVersion`, counted, and the slice read and decided again;
/// - a deleted slice (`kubectl delete`, `leaderService.recreateSlice: true`): the next leader
///   re-creates it with its labels, counted as a `create` write;
/// - a later term's token on the slice (as a stale leader would find it): the next leader
///   refuses to list itself, counts the refusal, and posts a Warning Event on the slice.
#[test]
fn cp_a_conflict_a_deleted_slice_and_a_later_token_are_handled() {
    let cp = ControlPlane::up();
    let nodes = redis_cluster(3, TTL);
    let values = format!(
        "leaderService:\n  endpoints: sidecar\n  recreateSlice: true\n\
         sidecar:\n  extraArgs: [\"--unsafe-test-endpoint-write-delay\", \"{WRITE_DELAY_MS}\"]\n"
    );
    let rel = Release::install(&cp, "slicefaults", &nodes, 3, &values);
    let slice = format!("{}-leader", rel.full_name());
    let ns = rel.ns.clone();
    let mut leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(60));

    // A 409: the slice is changed while the next leader holds its write.
    let held = held_counts(&rel);
    let next = hand_over(&rel, &leader);
    wait_held(&rel, &next, &held);
    let pod = rel.kubelet.pod(&next);
    annotate(&cp, &ns, &slice, &["test/poke=1"]);
    leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(30));
    assert_eq!(leader, next);
    let conflicts = counter(
        &rel,
        &next,
        "redlock_elector_endpoint_slice_conflicts_total",
    );
    assert!(
        conflicts >= 1.0,
        "no conflict counted by {next}:\n{}",
        pod.logs()
    );

    // A deleted slice, re-created by the next leader.
    cp.kubectl(&["-n", &ns, "delete", "endpointslice", &slice]);
    let next = hand_over(&rel, &leader);
    leader = wait_slice_converged(&cp, &rel, &slice, Duration::from_secs(30));
    assert_eq!(leader, next);
    let created = rel.kubelet.pod(&next).metrics().lines().any(|l| {
        l.starts_with("redlock_elector_endpoint_slice_writes_total")
            && l.contains("kind=\"create\"")
            && !l.ends_with(" 0")
    });
    assert!(created, "{next} re-created the slice without counting it");
    let recreated: serde_json::Value = serde_json::from_str(&cp.kubectl(&[
        "-n",
        &ns,
        "get",
        "endpointslice",
        &slice,
        "-o",
        "json",
    ]))
    .unwrap();
    let labels = &recreated["metadata"]["labels"];
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"], "redlock-elector",
        "{recreated}"
    );
    assert_eq!(
        labels["kubernetes.io/service-name"],
        serde_json::json!(slice),
        "{recreated}"
    );

    // A later term's token: the next leader refuses to list itself.
    let lease = recreated["metadata"]["annotations"]["redlock-elector/lease"]
        .as_str()
        .unwrap_or_else(|| panic!("no lease annotation: {recreated}"))
        .to_string();
    let lease = format!("redlock-elector/lease={lease}");
    annotate(
        &cp,
        &ns,
        &slice,
        &[&lease, "redlock-elector/fencing-token=999999"],
    );
    let next = hand_over(&rel, &leader);
    wait_for(Duration::from_secs(15), Duration::from_millis(50), || {
        (counter(&rel, &next, "redlock_elector_endpoint_slice_refusals_total") >= 1.0).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{next} never refused to list itself under token 999999:\n{}",
            rel.kubelet.pod(&next).logs()
        )
    });
    let next_ip = rel.kubelet.pod(&next).ip;
    let listed = slice_addresses(&cp, &ns, &slice).unwrap_or_default();
    assert!(
        !listed.contains(&next_ip),
        "{next} listed itself under a later term's token: {listed:?}"
    );
    let events: serde_json::Value =
        serde_json::from_str(&cp.kubectl(&["-n", &ns, "get", "events", "-o", "json"])).unwrap();
    let warned = events["items"].as_array().into_iter().flatten().any(|e| {
        e["type"] == "Warning"
            && e["involvedObject"]["kind"] == "EndpointSlice"
            && e["involvedObject"]["name"] == serde_json::json!(slice)
            && e["message"].as_str().is_some_and(|m| m.contains("999999"))
    });
    assert!(
        warned,
        "no Warning Event on the slice naming the later term: {events}"
    );
}

//! The leader Service's EndpointSlice written by the sidecar (`kubernetes.endpointSlice`),
//! against the recording fake API server, for the faults the real one cannot produce on demand:
//! a 500 on a chosen write, a write held past the client's timeout, and an outage with
//! connections cut mid-request. Real redis-server processes, the real binary and the real kube
//! client. The real control plane covers the rest (RBAC, a 409, a deleted slice re-created, a
//! stale write refused with its Event): `tests/suite/control_plane_slice_faults.rs`, and the
//! pause and RBAC tests in `tests/suite/control_plane_endpoints.rs`.

use testkit::common;
use testkit::fakeapi;

use std::time::{Duration, Instant};

use common::*;
use fakeapi::*;
use serde_json::{Value, json};

use super::kube_labels::{all_logs, kube_opts, leader_index};

const TTL: Duration = Duration::from_secs(1);
const SLICE: &str = "leader";

/// The slice's path on the fake.
fn slice_path() -> String {
    format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices/{SLICE}")
}

/// The slice as the chart creates it: no endpoints yet, the managed-by label.
fn chart_slice() -> Value {
    json!({
        "metadata": {
            "name": SLICE,
            "labels": {
                "endpointslice.kubernetes.io/managed-by": "redlock-elector",
                "kubernetes.io/service-name": SLICE,
            },
        },
        "addressType": "IPv4",
        "endpoints": [],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

fn addresses(slice: &Value) -> Vec<String> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(String::from))
        .collect()
}

/// Pods `pod-a`, `pod-b` at 10.1.0.1, 10.1.0.2, each with a sidecar writing [`SLICE`].
fn start_slice_pods(fake: &FakeApi, nodes: &[Redis]) -> (Vec<Sidecar>, Vec<String>) {
    let refs: Vec<&Redis> = nodes.iter().collect();
    let mut sidecars = vec![];
    let mut ips = vec![];
    for (i, pod) in ["pod-a", "pod-b"].into_iter().enumerate() {
        let ip = format!("10.1.0.{}", i + 1);
        fake.add_pod(pod, &[("app", "demo")]);
        let args = [
            "--endpoint-slice",
            SLICE,
            "--endpoint-slice-port",
            "http:8080",
            "--pod-ip",
            &ip,
        ];
        sidecars.push(Sidecar::start(pod, &refs, &kube_opts(fake, pod, &args)));
        ips.push(ip);
    }
    (sidecars, ips)
}

/// Wait (`within`) until the slice lists exactly `ip`.
fn wait_lists(fake: &FakeApi, ip: &str, within: Duration, sidecars: &[&Sidecar]) {
    wait_for(within, Duration::from_millis(10), || {
        (addresses(&fake.slice(SLICE)?) == [ip]).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the slice never listed only {ip} within {within:?}: {:?}\n{}",
            fake.slice(SLICE),
            all_logs(sidecars)
        )
    });
}

/// The writes to the slice the fake received, in the order they arrived (a held one is logged
/// when answered): (received, status, addresses written).
fn slice_writes(fake: &FakeApi) -> Vec<(Instant, u16, Vec<String>)> {
    let mut w: Vec<_> = fake
        .records()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.path == slice_path())
        .map(|r| {
            let a = r.body.as_ref().map(addresses).unwrap_or_default();
            (r.received, r.status, a)
        })
        .collect();
    w.sort_by_key(|w| w.0);
    w
}

/// A write held past the client's 5 s timeout, then two 500s: the leader retries with backoff
/// until the slice lists it, the election untouched; then an outage (connections cut, the port
/// refused) across a step-down: the next leader's slice converges once the server is back. No
/// write ever lists two pods, and the metrics count the failures and the writes.
#[test]
fn slice_errors_slowness_and_an_outage_are_retried_until_the_slice_lists_the_leader() {
    let fake = FakeApi::start();
    fake.put_slice(SLICE, chart_slice());
    let put = slice_path();
    fake.inject(
        Fault::new(Action::Delay(Duration::from_secs(6)))
            .method("PUT")
            .path(&put)
            .times(1),
    );
    fake.inject(
        Fault::new(Action::Status(500))
            .method("PUT")
            .path(&put)
            .times(2),
    );
    let nodes = redis_cluster(3, TTL);
    let (sidecars, ips) = start_slice_pods(&fake, &nodes);
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let l = leader_index(&refs);
    let led_at = Instant::now();
    wait_lists(&fake, &ips[l], Duration::from_secs(20), &refs);
    report(
        "slice: a write held 6 s then two 500s, leader seen -> the slice lists it",
        format!("{:?}", led_at.elapsed()),
    );
    assert!(
        refs[l].leader().is_leader,
        "the slice's faults ended the term:\n{}",
        refs[l].logs()
    );
    let writes = slice_writes(&fake);
    let statuses: Vec<u16> = writes.iter().map(|w| w.1).collect();
    assert!(
        statuses.iter().filter(|s| **s == 500).count() == 2 && statuses.contains(&200),
        "expected two injected 500s and a write that landed: {statuses:?}"
    );
    // Backoff, not a hot loop: every retry after a failure waits at least half the first step
    // (200 ms, jittered down to 100 ms).
    let gaps: Vec<u128> = writes
        .windows(2)
        .filter(|w| w[0].1 == 500)
        .map(|w| (w[1].0 - w[0].0).as_millis())
        .collect();
    report("slice: retry gaps after a 500, ms", format!("{gaps:?}"));
    assert!(
        gaps.iter().all(|g| *g >= 90),
        "a retry after a 500 came sooner than the backoff allows: {gaps:?}"
    );
    let s = refs[l];
    // The held write ends at 5 s by the call's timeout or, as often, by the client's read
    // timeout of the same length (a transport error): either is an answer that never came.
    let unanswered =
        fakeapi_metric(s, "update", "timeout") + fakeapi_metric(s, "update", "transport");
    let server = fakeapi_metric(s, "update", "server_error");
    assert!(
        unanswered >= 1.0 && server >= 2.0,
        "kube_requests_total for the slice's update: timeout or transport {unanswered}, \
         server_error {server}"
    );
    // The held write may land on its own at 6 s, before the retries end: the writer's verdict
    // comes with its next attempt, which reads the slice and finds it done.
    wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        s.logs()
            .contains("endpoint slice converged after failures")
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the writer never said it converged:\n{}", s.logs()));

    // An outage across a handover: the old leader's removal and the new one's listing both
    // fail until the server is back; then the slice lists the new leader only.
    let other = 1 - l;
    fake.down();
    let (status, _) = http("POST", s.api_port, "/leader/step-down").expect("step-down");
    assert_eq!(status, 200);
    wait_for(Duration::from_secs(5), Duration::from_millis(5), || {
        refs[other].leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "no handover while the API server is down:\n{}",
            all_logs(&refs)
        )
    });
    std::thread::sleep(Duration::from_secs(1));
    let back = Instant::now();
    fake.up();
    wait_lists(&fake, &ips[other], Duration::from_secs(15), &refs);
    report(
        "slice: API server back -> the slice lists the new leader",
        format!("{:?}", back.elapsed()),
    );
    let two: Vec<_> = slice_writes(&fake)
        .into_iter()
        .filter(|w| w.2.len() > 1)
        .collect();
    assert!(two.is_empty(), "writes listing two pods: {two:?}");
    // Counted as a landed write by the one that sent it (the first leader's held write may
    // have landed on its own after its client gave up: found done, not counted).
    let listed = metric_sum_where(refs[other], |l| {
        l.starts_with("redlock_elector_endpoint_slice_writes_total") && l.contains("kind=\"list\"")
    });
    assert!(
        listed >= 1.0,
        "endpoint_slice_writes_total{{kind=\"list\"}} {listed}"
    );
    assert!(
        refs[other]
            .logs()
            .contains("endpoint slice update failed; retrying"),
        "{}",
        refs[other].logs()
    );
}

/// `redlock_elector_kube_requests_total{verb, result}` of `s`.
fn fakeapi_metric(s: &Sidecar, verb: &str, result: &str) -> f64 {
    metric_sum_where(s, |l| {
        l.starts_with("redlock_elector_kube_requests_total")
            && l.contains(&format!("verb=\"{verb}\""))
            && l.contains(&format!("result=\"{result}\""))
    })
}

//! The Kubernetes publisher (`publish::k8s`) end to end: real redis-server processes, the real
//! binary, real signals, and a recording fake API server reached through a kubeconfig (the real
//! kube client runs).
//! Every test ends by checking each request the sidecars made against the chart's Role.

use testkit::common;
use testkit::fakeapi;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use fakeapi::*;
use serde_json::json;

const TTL: Duration = Duration::from_secs(1);
/// The usual SIGKILL failover bound (as in tests/suite/election.rs).
const FAILOVER: Duration = Duration::from_millis(1000 + 200 + 500);
/// The shutdown bound (2×redis.timeout + 1s with the 50ms default; docs/operating/kubernetes.md)
/// plus process slack.
const SHUTDOWN: Duration = Duration::from_millis(2 * 50 + 1000 + 400);
const SELECTOR: &str = "redlock-elector/lease=test,redlock-elector/role=leader";
/// With `lease.names`: the leases a pod leads, comma-separated, in config order.
const LEASES_ANNOTATION: &str = "redlock-elector/leases";
/// With `lease.shards`: the indices of the shards a pod leads, comma-separated, ascending.
const SHARDS_ANNOTATION: &str = "redlock-elector/shards";

pub(crate) fn kube_opts(fake: &FakeApi, pod: &str, extra: &[&str]) -> Opts {
    let mut args: Vec<String> = ["--kubernetes", "true", "--pod-name", pod, "--namespace", NS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    Opts {
        ttl: "1s",
        retry_every: "200ms",
        extra: args,
        env: vec![(
            "KUBECONFIG".into(),
            fake.kubeconfig(pod).display().to_string(),
        )],
        ..Opts::default()
    }
}

/// Pods `pod-a`, `pod-b`, ... in the fake (no lease or role label yet), and a sidecar for each
/// with identity = pod name.
fn start_pods(fake: &FakeApi, nodes: &[Redis], names: &[&str], extra: &[&str]) -> Vec<Sidecar> {
    let refs: Vec<&Redis> = nodes.iter().collect();
    names
        .iter()
        .map(|n| {
            fake.add_pod(n, &[("app", "demo")]);
            Sidecar::start(n, &refs, &kube_opts(fake, n, extra))
        })
        .collect()
}

pub(crate) fn leader_index(sidecars: &[&Sidecar]) -> usize {
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        sole_leader(sidecars)
    })
    .unwrap_or_else(|| panic!("no sole leader:\n{}", all_logs(sidecars)))
}

pub(crate) fn all_logs(sidecars: &[&Sidecar]) -> String {
    sidecars
        .iter()
        .map(|s| format!("--- {}\n{}", s.identity, s.logs()))
        .collect()
}

/// Wait for a sole leader among `sidecars` and for the fake's labels to show it (10 s); returns
/// its index, its identity and the others' identities.
fn elect_and_label(fake: &FakeApi, sidecars: &[&Sidecar]) -> (usize, String, Vec<String>) {
    let l = leader_index(sidecars);
    let leader = sidecars[l].identity.clone();
    let others: Vec<String> = sidecars
        .iter()
        .filter(|s| s.identity != leader)
        .map(|s| s.identity.clone())
        .collect();
    let refs: Vec<&str> = others.iter().map(String::as_str).collect();
    converge(
        fake,
        Some(&leader),
        &refs,
        Duration::from_secs(10),
        sidecars,
    );
    (l, leader, others)
}

/// SIGKILL the leader `sidecars[l]` (it leaves `sidecars`): another leads within [`FAILOVER`],
/// reported as "`what`, ms". Returns the new leader's index in `sidecars`.
fn kill_leader(sidecars: &mut Vec<Sidecar>, l: usize, what: &str) -> usize {
    let mut dead = sidecars.remove(l);
    let t0 = Instant::now();
    dead.kill();
    let rest: Vec<&Sidecar> = sidecars.iter().collect();
    wait_for(FAILOVER, Duration::from_millis(2), || sole_leader(&rest)).unwrap_or_else(|| {
        panic!(
            "{what}: no new leader within {FAILOVER:?}:\n{}",
            all_logs(&rest)
        )
    });
    report(&format!("{what}, ms"), t0.elapsed().as_millis());
    leader_index(&rest)
}

/// Wait until `s` says it leads; the panic says `what` was expected.
fn wait_leads(s: &Sidecar, within: Duration, what: &str) {
    wait_for(within, Duration::from_millis(2), || {
        s.leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| panic!("{what}:\n{}", s.logs()));
}

/// SIGSTOP two of the three nodes: renewals and elections find no quorum until [`thaw_quorum`].
fn freeze_quorum(nodes: &[Redis]) {
    nodes[..2].iter().for_each(Redis::stop);
}

fn thaw_quorum(nodes: &[Redis]) {
    nodes[..2].iter().for_each(Redis::cont);
}

/// Wait until the fake shows `leader` (if any) labelled leader and every pod of `followers`
/// labelled follower, all with the lease label; returns the time it took.
fn converge(
    fake: &FakeApi,
    leader: Option<&str>,
    followers: &[&str],
    timeout: Duration,
    logs: &[&Sidecar],
) -> Duration {
    let t0 = Instant::now();
    let want = |p: &str, role: &str| {
        fake.label(p, ROLE_KEY).as_deref() == Some(role)
            && fake.label(p, LEASE_KEY).as_deref() == Some("test")
    };
    wait_for(timeout, Duration::from_millis(10), || {
        (leader.is_none_or(|l| want(l, "leader")) && followers.iter().all(|f| want(f, "follower")))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "labels did not converge to leader={leader:?} followers={followers:?} within {timeout:?}: {:?}\n{}",
            fake.roles(),
            all_logs(logs)
        )
    });
    t0.elapsed()
}

/// At no recorded state of the pods did two carry the leader label.
fn assert_never_two_leaders(fake: &FakeApi) {
    for s in fake.history() {
        assert!(
            s.leaders().len() <= 1,
            "two pods labelled leader after request #{}: {:?}",
            s.seq,
            s.roles
        );
    }
}

/// The first successful request by `who` after `mark` that satisfies `f`.
fn first<'a>(
    recs: &'a [Record],
    mark: u64,
    who: &str,
    what: &str,
    f: impl Fn(&Record) -> bool,
) -> &'a Record {
    recs.iter()
        .find(|r| r.seq > mark && r.who == who && r.ok() && f(r))
        .unwrap_or_else(|| panic!("no {what} by {who} after #{mark}: {recs:#?}"))
}

/// Assert that `who` listed the stale leaders, demoted `stale`, and only then labelled itself.
fn assert_demoted_before_promoting(fake: &FakeApi, mark: u64, who: &str, stale: &str) {
    let recs = fake.records();
    let list = first(&recs, mark, who, "leader list", |r| {
        r.is_list() && r.query.get("labelSelector").map(String::as_str) == Some(SELECTOR)
    });
    let demote = first(&recs, mark, who, "demotion of the stale leader", |r| {
        r.method == "PATCH" && r.pod() == Some(stale) && r.role_set() == Some("follower")
    });
    let promote = first(&recs, mark, who, "self-promotion", |r| {
        r.method == "PATCH" && r.pod() == Some(who) && r.role_set() == Some("leader")
    });
    assert!(
        list.seq < demote.seq && demote.seq < promote.seq,
        "{who}: list #{} → demote {stale} #{} → promote #{} is out of order",
        list.seq,
        demote.seq,
        promote.seq
    );
    // Demotion is conditional on the version it listed, so it cannot undo a newer change.
    assert!(
        demote.body.as_ref().unwrap()["metadata"]["resourceVersion"].is_string(),
        "{demote:?}"
    );
    assert_eq!(
        demote.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
}

fn events_for(fake: &FakeApi, pod: &str, reason: &str) -> Vec<serde_json::Value> {
    fake.events()
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == json!(pod) && e["reason"] == json!(reason))
        .collect()
}

fn wait_event(fake: &FakeApi, pod: &str, reason: &str, contains: &str) -> serde_json::Value {
    wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        events_for(fake, pod, reason)
            .into_iter()
            .find(|e| e["message"].as_str().is_some_and(|m| m.contains(contains)))
    })
    .unwrap_or_else(|| {
        panic!(
            "no {reason} Event for {pod} containing {contains:?}: {:#?}",
            fake.events()
        )
    })
}

/// SIGTERM `s`: it exits 0 within [`SHUTDOWN`]; the time is reported as "`what`, ms".
fn terminate_within_shutdown(s: &mut Sidecar, what: &str) {
    let (code, took) = s.terminate();
    assert_eq!(code, Some(0), "{what}:\n{}", s.logs());
    assert!(took < SHUTDOWN, "{what} took {took:?}");
    report(&format!("{what}, ms"), took.as_millis());
}

/// Check every request against the shipped Role and report them; returns the distinct accesses.
fn report_rbac(fake: &FakeApi) -> Vec<Access> {
    let seen = assert_allowed_by_shipped_role(&fake.records());
    report(
        "kube requests made (group, resource, verb, namespace)",
        format!(
            "{:?}",
            seen.iter()
                .map(|a| format!(
                    "{}/{} {} in {}",
                    a.group,
                    a.resource,
                    a.verb,
                    a.namespace.as_deref().unwrap_or("-")
                ))
                .collect::<Vec<_>>()
        ),
    );
    seen
}

#[test]
fn labels_follow_the_leader_through_sigkill_and_sigterm() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let mut sidecars = start_pods(
        &fake,
        &nodes,
        &["pod-a", "pod-b", "pod-c"],
        &["--fencing-token-annotation", "true"],
    );
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (l, first_leader, others) = elect_and_label(&fake, &all);
    let token = all[l].leader().fencing_token.unwrap();
    assert_eq!(
        fake.annotation(&first_leader, TOKEN_ANNOTATION),
        Some(token.to_string()),
        "fencing token annotation on the leader"
    );
    for o in &others {
        assert_eq!(fake.annotation(o, TOKEN_ANNOTATION), None, "{o}");
    }
    wait_event(
        &fake,
        &first_leader,
        "BecameLeader",
        &format!("fencing token {token}"),
    );
    let labels = &fake.pod(&first_leader)["metadata"]["labels"];
    assert_eq!(labels["app"], "demo", "a merge patch keeps other labels");

    // SIGKILL: the dead pod keeps its leader label until the new leader demotes it.
    let mark = fake.seq();
    let l2 = kill_leader(&mut sidecars, l, "SIGKILL failover with kube publishing");
    let rest: Vec<&Sidecar> = sidecars.iter().collect();
    let second = rest[l2].identity.clone();
    let third = rest[1 - l2].identity.clone();
    converge(
        &fake,
        Some(&second),
        &[&first_leader, &third],
        Duration::from_secs(10),
        &rest,
    );
    assert_demoted_before_promoting(&fake, mark, &second, &first_leader);
    let token2 = rest[l2].leader().fencing_token.unwrap();
    assert!(token2 > token);
    assert_eq!(
        fake.annotation(&second, TOKEN_ANNOTATION),
        Some(token2.to_string())
    );
    assert_eq!(
        fake.annotation(&first_leader, TOKEN_ANNOTATION),
        None,
        "demotion removes the stale token annotation"
    );

    // SIGTERM: the leader labels itself follower before it exits, within the shutdown bound.
    let mark = fake.seq();
    terminate_within_shutdown(&mut sidecars[l2], "SIGTERM exit with kube publishing");
    let recs = fake.records();
    first(&recs, mark, &second, "own demotion before exit", |r| {
        r.method == "PATCH" && r.pod() == Some(second.as_str()) && r.role_set() == Some("follower")
    });
    let survivor = sidecars.iter().find(|s| s.identity == third).unwrap();
    wait_leads(
        survivor,
        Duration::from_secs(2),
        "the last sidecar leads after the SIGTERM handover",
    );
    converge(
        &fake,
        Some(&third),
        &[&first_leader, &second],
        Duration::from_secs(10),
        &[survivor],
    );
    let lost = wait_event(&fake, &second, "LostLeadership", "shutdown");
    assert_eq!(lost["type"], "Normal");
    assert_eq!(lost["involvedObject"]["namespace"], NS);
    assert_eq!(lost["involvedObject"]["uid"], format!("uid-{second}"));
    wait_event(&fake, &second, "BecameLeader", "became leader");
    wait_event(&fake, &third, "BecameLeader", "became leader");

    assert_never_two_leaders(&fake);
    assert!(
        metric_sum(
            survivor,
            "redlock_elector_kube_requests_total{result=\"ok\",verb=\"patch\"}"
        ) >= 1.0
    );
    assert_every_granted_verb_used(&report_rbac(&fake));
}

#[test]
fn api_server_outage_during_failover_does_not_affect_the_election_and_labels_converge_after() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let mut sidecars = start_pods(&fake, &nodes, &["pod-a", "pod-b", "pod-c"], &[]);
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (l, first_leader, _) = elect_and_label(&fake, &all);
    assert_eq!(
        fake.annotation(&first_leader, TOKEN_ANNOTATION),
        None,
        "no annotation unless enabled"
    );

    fake.down();
    let l2 = kill_leader(
        &mut sidecars,
        l,
        "SIGKILL failover with the API server down",
    );
    let rest: Vec<&Sidecar> = sidecars.iter().collect();
    let second = rest[l2].identity.clone();
    let follower = rest[1 - l2].identity.clone();
    // Stays leader through repeated failing label updates.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(rest[l2].leader().is_leader, "{}", rest[l2].logs());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        metric_sum(
            rest[l2],
            "redlock_elector_kube_requests_total{result=\"transport\""
        ) + metric_sum(
            rest[l2],
            "redlock_elector_kube_requests_total{result=\"timeout\""
        ) >= 1.0,
        "failed requests are counted"
    );
    assert_eq!(
        fake.label(&first_leader, ROLE_KEY).as_deref(),
        Some("leader"),
        "nothing can change while the API server is down"
    );

    // A follower shuts down within the bound though its final label update cannot land.
    terminate_within_shutdown(
        sidecars
            .iter_mut()
            .find(|s| s.identity == follower)
            .unwrap(),
        "SIGTERM exit with the API server down",
    );

    fake.up();
    let leader = sidecars.iter().find(|s| s.identity == second).unwrap();
    let took = converge(
        &fake,
        Some(&second),
        &[&first_leader, &follower],
        Duration::from_secs(10),
        &[leader],
    );
    report(
        "labels converged after the API server returned, ms",
        took.as_millis(),
    );
    let conv = fake.seq();
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(fake.roles()[&second].as_deref(), Some("leader"));
    assert!(
        fake.history()
            .iter()
            .filter(|s| s.seq >= conv)
            .all(|s| s.leaders().len() <= 1)
    );
    assert_never_two_leaders(&fake);
    wait_event(&fake, &second, "BecameLeader", "became leader");
    report_rbac(&fake);

    // The leader shuts down while the API server is down: it cannot demote its label, and
    // still exits within the bound.
    fake.down();
    terminate_within_shutdown(
        sidecars.iter_mut().find(|s| s.identity == second).unwrap(),
        "leader SIGTERM exit with the API server down",
    );
}

#[test]
fn api_errors_and_slowness_are_retried_until_the_labels_converge() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let sidecars = start_pods(&fake, &nodes, &["pod-a", "pod-b"], &[]);
    let all: Vec<&Sidecar> = sidecars.iter().collect();
    let (l, _, _) = elect_and_label(&fake, &all);
    let (first, second) = (all[l], all[1 - l]);

    // The stepping-down leader's patches are refused twice (403), then conflict once (409); the
    // new leader's first list and first two patches fail (500).
    for f in [
        Fault::new(Action::Status(403))
            .method("PATCH")
            .who(&first.identity)
            .times(2),
        Fault::new(Action::Status(409))
            .method("PATCH")
            .who(&first.identity)
            .times(1),
        Fault::new(Action::Status(500))
            .method("PATCH")
            .who(&second.identity)
            .times(2),
        Fault::new(Action::Status(500)).pod_list().times(1),
    ] {
        fake.inject(f);
    }
    let stepped_down = Instant::now();
    let (status, _) = http("POST", first.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 200);
    converge(
        &fake,
        Some(&second.identity),
        &[&first.identity],
        Duration::from_secs(15),
        &all,
    );
    let recs = fake.records();
    for (who, status) in [
        (&first.identity, 403),
        (&first.identity, 409),
        (&second.identity, 500),
    ] {
        assert!(
            recs.iter().any(|r| &r.who == who && r.status == status),
            "{who} got a {status}"
        );
    }
    assert!(recs.iter().any(|r| r.is_list() && r.status == 500));
    let m = |s: &Sidecar, result: &str, verb: &str| {
        metric_sum(
            s,
            &format!("redlock_elector_kube_requests_total{{result=\"{result}\",verb=\"{verb}\"}}"),
        )
    };
    assert!(m(first, "forbidden", "patch") >= 2.0);
    assert!(m(first, "conflict", "patch") >= 1.0);
    assert!(m(second, "server_error", "patch") >= 2.0);
    assert!(m(second, "server_error", "list") >= 1.0);
    // Every request the fake saw is counted (by its result, or as cancelled).
    for s in [first, second] {
        for (verb, method) in [("patch", "PATCH"), ("create", "POST")] {
            let seen = recs
                .iter()
                .filter(|r| r.who == s.identity && r.method == method)
                .count();
            let by_verb = metric_sum_where(s, |l| {
                l.starts_with("redlock_elector_kube_requests_total{")
                    && l.contains(&format!("verb=\"{verb}\""))
            });
            assert!(
                by_verb >= seen as f64,
                "{}: {verb} counted {by_verb} < {seen} seen",
                s.identity
            );
        }
    }
    let lost = wait_event(&fake, &first.identity, "LostLeadership", "step-down");
    assert_eq!(lost["type"], "Normal");

    // Every answer now takes 2s: a requested step-down still hands over at once. (Wait out the
    // first leader's cool-down after its own step-down, one ttl.)
    std::thread::sleep(
        (stepped_down + TTL + Duration::from_millis(300)).saturating_duration_since(Instant::now()),
    );
    fake.inject(Fault::new(Action::Delay(Duration::from_secs(2))));
    let t0 = Instant::now();
    let (status, _) = http("POST", second.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 200);
    wait_for(Duration::from_secs(1), Duration::from_millis(2), || {
        first.leader().is_leader.then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "no handover within 1s while the API server is slow:\n{}",
            all_logs(&all)
        )
    });
    report(
        "step-down handover with a 2s-slow API server, ms",
        t0.elapsed().as_millis(),
    );
    fake.clear_faults();
    converge(
        &fake,
        Some(&first.identity),
        &[&second.identity],
        Duration::from_secs(15),
        &all,
    );
    // Converged means stable: no late, stale request overwrites the latest state.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(fake.roles()[&first.identity].as_deref(), Some("leader"));
    assert_eq!(fake.roles()[&second.identity].as_deref(), Some("follower"));
    assert_never_two_leaders(&fake);
    report_rbac(&fake);
}

#[test]
fn leader_demotes_its_own_label_at_its_deadline_while_renewals_hang() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let sidecars = start_pods(&fake, &nodes, &["pod-a"], &[]);
    let s = &sidecars[0];
    wait_leads(s, Duration::from_secs(5), "pod-a leads");
    converge(&fake, Some("pod-a"), &[], Duration::from_secs(10), &[s]);
    // Two of three nodes stop answering: renewals hang until their timeout and cannot succeed.
    let mark = fake.seq();
    freeze_quorum(&nodes);
    let t0 = Instant::now();
    let v = s.leader();
    assert!(v.is_leader);
    let deadline = t0 + Duration::from_millis(v.valid_for_ms);
    let rec = wait_for(Duration::from_secs(3), Duration::from_millis(5), || {
        fake.records().into_iter().find(|r| {
            r.seq > mark
                && r.method == "PATCH"
                && r.pod() == Some("pod-a")
                && r.role_set() == Some("follower")
        })
    })
    .unwrap_or_else(|| panic!("no self-demotion:\n{}", s.logs()));
    thaw_quorum(&nodes);
    assert!(
        rec.received + Duration::from_millis(5) >= deadline,
        "demoted {:?} before the deadline",
        deadline - rec.received
    );
    let late = rec.received.saturating_duration_since(deadline);
    report(
        "self-demotion patch after the deadline, ms",
        late.as_millis(),
    );
    assert!(
        late < Duration::from_millis(500),
        "self-demotion {late:?} after the deadline"
    );
    let lost = wait_event(&fake, "pod-a", "LostLeadership", "renewal-failed");
    assert_eq!(lost["type"], "Warning");
    report_rbac(&fake);
}

#[test]
fn a_late_stale_patch_never_overwrites_a_newer_state() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    // No quorum at first: pod-a starts as a follower.
    freeze_quorum(&nodes);
    let sidecars = start_pods(&fake, &nodes, &["pod-a"], &[]);
    let s = &sidecars[0];
    converge(&fake, None, &["pod-a"], Duration::from_secs(10), &[s]);
    // Its next patch (the promotion) reaches the server only after 3s.
    fake.inject(
        Fault::new(Action::Delay(Duration::from_secs(3)))
            .method("PATCH")
            .who("pod-a")
            .times(1),
    );
    let mark = fake.seq();
    thaw_quorum(&nodes);
    wait_leads(
        s,
        Duration::from_secs(5),
        "pod-a leads once the nodes answer",
    );
    // The term ends (no quorum for renewals) while the promotion is still travelling.
    freeze_quorum(&nodes);
    let late = wait_for(Duration::from_secs(6), Duration::from_millis(10), || {
        fake.records()
            .into_iter()
            .find(|r| r.seq > mark && r.who == "pod-a" && r.role_set() == Some("leader"))
    })
    .expect("the delayed promotion reaches the server");
    thaw_quorum(&nodes);
    let recs = fake.records();
    let demoted = recs
        .iter()
        .find(|r| r.seq > mark && r.who == "pod-a" && r.ok() && r.role_set() == Some("follower"))
        .unwrap_or_else(|| panic!("a follower patch after the term ended: {recs:#?}"));
    assert!(
        demoted.seq < late.seq,
        "the follower patch landed before the delayed promotion"
    );
    assert_eq!(
        late.status, 409,
        "the late promotion must be rejected, not applied: {late:?}"
    );
    assert_eq!(fake.label("pod-a", ROLE_KEY).as_deref(), Some("follower"));
    assert!(
        fake.history()
            .iter()
            .all(|h| h.roles["pod-a"].as_deref() != Some("leader")),
        "pod-a was never labelled leader"
    );
    report_rbac(&fake);
}

/// The checker itself: it must reject what the Role does not grant.
#[test]
fn rbac_checker_rejects_what_the_role_does_not_grant() {
    let rules = shipped_role();
    let q = BTreeMap::new();
    let ok = |m: &str, p: &str| allowed(&rules, NS, &access(m, p, &q));
    assert!(ok("GET", "/api/v1/namespaces/ns1/pods/pod-a"));
    assert!(ok("GET", "/api/v1/namespaces/ns1/pods"));
    assert!(ok("PATCH", "/api/v1/namespaces/ns1/pods/pod-a"));
    assert!(ok("POST", "/api/v1/namespaces/ns1/events"));
    assert!(!ok("DELETE", "/api/v1/namespaces/ns1/pods/pod-a"));
    assert!(!ok("PUT", "/api/v1/namespaces/ns1/pods/pod-a"));
    assert!(
        !ok("GET", "/api/v1/namespaces/other/pods/pod-a"),
        "own namespace only"
    );
    assert!(!ok("GET", "/api/v1/pods"), "no cluster-wide list");
    assert!(!ok("GET", "/api/v1/namespaces/ns1/secrets/x"));
    assert!(!ok("PATCH", "/api/v1/namespaces/ns1/pods/pod-a/status"));
    let watch: BTreeMap<String, String> = [("watch".to_string(), "true".to_string())].into();
    // A watch of pods (the sidecar follows its own pod), but not of Events.
    assert!(allowed(
        &rules,
        NS,
        &access("GET", "/api/v1/namespaces/ns1/pods", &watch)
    ));
    assert!(!allowed(
        &rules,
        NS,
        &access("GET", "/api/v1/namespaces/ns1/events", &watch)
    ));
}

/// The fake's own semantics, which the tests above rely on.
#[test]
fn fake_merge_patch_and_selectors() {
    // A no-op patch keeps the resourceVersion, like the real API server.
    let fake = FakeApi::start();
    fake.add_pod("p", &[("a", "1")]);
    let rv = fake.pod("p")["metadata"]["resourceVersion"].clone();
    let patch = |body: &str| {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", fake.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let req = format!(
            "PATCH /api/v1/namespaces/{NS}/pods/p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/merge-patch+json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        c.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).unwrap();
        out
    };
    assert!(patch(r#"{"metadata":{"labels":{"a":"1"}}}"#).starts_with("HTTP/1.1 200"));
    assert_eq!(fake.pod("p")["metadata"]["resourceVersion"], rv);
    assert!(patch(r#"{"metadata":{"labels":{"a":"2"}}}"#).starts_with("HTTP/1.1 200"));
    assert_ne!(fake.pod("p")["metadata"]["resourceVersion"], rv);
    let stale = format!(r#"{{"metadata":{{"resourceVersion":{rv},"labels":{{"a":"3"}}}}}}"#);
    assert!(patch(&stale).starts_with("HTTP/1.1 409"));
    assert_eq!(fake.label("p", "a").as_deref(), Some("2"));

    let mut pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"x": "y"}}});
    merge_patch(
        &mut pod,
        &json!({"metadata": {"labels": {"b": "3", "c": "4"}, "annotations": {"x": null}}}),
    );
    assert_eq!(
        pod,
        json!({"metadata": {"labels": {"a": "1", "b": "3", "c": "4"}, "annotations": {}}})
    );
    let labels = json!({"redlock-elector/lease": "test", "redlock-elector/role": "leader"});
    assert!(selector_matches(SELECTOR, &labels).unwrap());
    assert!(!selector_matches("redlock-elector/lease=other", &labels).unwrap());
    assert!(
        selector_matches(
            "redlock-elector/role!=follower,redlock-elector/lease",
            &labels
        )
        .unwrap()
    );
    assert!(!selector_matches("!redlock-elector/role", &labels).unwrap());
    assert!(selector_matches("x in (a,b)", &labels).is_err());
}

/// `GET /leases` of `s`: the names of the leases it leads, in config order.
fn led_leases(s: &Sidecar) -> Vec<String> {
    let (_, body) = http("GET", s.api_port, "/leases").expect("/leases");
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    v["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .filter(|l| l["is_leader"] == true)
        .map(|l| l["lease"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Wait until `pod`'s annotation `key` is `want` (`None`: absent); returns the time it took.
fn annotation_becomes(
    fake: &FakeApi,
    pod: &str,
    key: &str,
    want: Option<&str>,
    within: Duration,
    logs: &[&Sidecar],
) -> Duration {
    let t0 = Instant::now();
    wait_for(within, Duration::from_millis(5), || {
        (fake.annotation(pod, key).as_deref() == want).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "{pod}'s annotation {key} is {:?}, not {want:?}, after {within:?}:\n{}",
            fake.annotation(pod, key),
            all_logs(logs)
        )
    });
    t0.elapsed()
}

/// The patches of `pod` by itself after request `mark`.
fn own_patches_since(fake: &FakeApi, pod: &str, mark: u64) -> Vec<Record> {
    fake.records()
        .into_iter()
        .filter(|r| r.seq > mark && r.method == "PATCH" && r.who == pod && r.pod() == Some(pod))
        .collect()
}

/// Several leases (`lease.names`): the role label says "leads at least one", so two pods that
/// each lead a lease are both labelled leader, and neither demotes the other as stale; a pod
/// that leads none is a follower. The annotation `redlock-elector/leases` lists exactly the
/// leases each pod leads (as its `/leases` says), follows a step-down, is not rewritten by
/// renewals, and is gone after a SIGTERM.
#[test]
fn with_several_leases_each_pod_leading_one_keeps_its_leader_label() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let extra = ["--lease", "", "--leases", "one", "--leases", "two"];
    let leads = led_leases;
    // pod-a starts alone and leads both; pod-b then follows both. (Two pods started together
    // may each win one lease, which is as correct, but leaves nothing to step down from; CI on
    // bdca1e5 saw it.)
    let mut sidecars = start_pods(&fake, &nodes, &["pod-a"], &extra);
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        (leads(&sidecars[0]).len() == 2).then_some(())
    })
    .unwrap_or_else(|| panic!("pod-a alone did not lead both:\n{}", sidecars[0].logs()));
    sidecars.extend(start_pods(&fake, &nodes, &["pod-b"], &extra));
    let pods = ["pod-a", "pod-b"];
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        let (_, body) = http("GET", refs[1].api_port, "/leases")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let all = v["leases"].as_array()?;
        all.iter().all(|l| l["leader"] == "pod-a").then_some(())
    })
    .unwrap_or_else(|| panic!("pod-b does not follow pod-a:\n{}", all_logs(&refs)));
    // The pod that leads both steps down from one: the other pod takes it.
    let (both, other) = (0, 1);
    let took = annotation_becomes(
        &fake,
        pods[both],
        LEASES_ANNOTATION,
        Some("one,two"),
        Duration::from_secs(5),
        &refs,
    );
    report(
        "annotation lists both leases after /leases says so, ms",
        took.as_millis(),
    );
    assert_eq!(fake.annotation(pods[other], LEASES_ANNOTATION), None);
    let (status, body) = http("POST", refs[both].api_port, "/leases/two/step-down").unwrap();
    assert_eq!(status, 200, "{body}");
    let t_step = Instant::now();
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (leads(refs[other]) == ["two"] && leads(refs[both]) == ["one"]).then_some(())
    })
    .unwrap_or_else(|| panic!("lease two did not move:\n{}", all_logs(&refs)));
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        pods.iter()
            .all(|p| fake.label(p, ROLE_KEY).as_deref() == Some("leader"))
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "not both labelled leader: {:?}\n{}",
            fake.roles(),
            all_logs(&refs)
        )
    });
    // The annotations follow the step-down: each pod lists the one lease it leads.
    for (pod, want) in [(pods[both], "one"), (pods[other], "two")] {
        annotation_becomes(
            &fake,
            pod,
            LEASES_ANNOTATION,
            Some(want),
            Duration::from_secs(5),
            &refs,
        );
    }
    report(
        "annotations follow a step-down of one lease, ms",
        t_step.elapsed().as_millis(),
    );
    // Stable: neither demotes the other, and renewals rewrite nothing (a second look after a
    // few renewals).
    let mark = fake.seq();
    std::thread::sleep(TTL);
    assert_eq!(
        fake.roles()
            .values()
            .filter(|r| r.as_deref() == Some("leader"))
            .count(),
        2,
        "{:?}",
        fake.roles()
    );
    for (pod, want) in [(pods[both], "one"), (pods[other], "two")] {
        assert_eq!(
            leads(refs[pods.iter().position(|p| *p == pod).unwrap()]),
            [want]
        );
        assert_eq!(
            fake.annotation(pod, LEASES_ANNOTATION).as_deref(),
            Some(want)
        );
        let patches = own_patches_since(&fake, pod, mark);
        assert!(
            patches.is_empty(),
            "{pod} patched itself while its set of leases stayed the same (renewals only): {patches:#?}"
        );
    }
    assert!(
        fake.records().iter().all(|r| r
            .query
            .get("labelSelector")
            .is_none_or(|s| !s.contains("role=leader"))),
        "nobody listed the other leaders to demote them"
    );
    // Every patch that set the annotation set the lease's names, never a shard list.
    assert!(
        fake.records().iter().all(
            |r| r.body.as_ref().is_none_or(|b| b["metadata"]["annotations"]
                .get(SHARDS_ANNOTATION)
                .is_none())
        ),
        "lease.names writes no shard annotation"
    );
    // SIGTERM of one: the other leads both, and the stopped pod is labelled follower, with no
    // led-leases annotation left.
    let stopped = &mut sidecars[both];
    terminate_within_shutdown(stopped, "SIGTERM with two leases");
    let label_of_stopped = fake.label(pods[both], ROLE_KEY);
    assert_eq!(label_of_stopped.as_deref(), Some("follower"));
    assert_eq!(
        fake.annotation(pods[both], LEASES_ANNOTATION),
        None,
        "the stopped pod still lists leases: {}",
        fake.pod(pods[both])
    );
    let refs: Vec<&Sidecar> = vec![&sidecars[other]];
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (leads(refs[0]).len() == 2).then_some(())
    })
    .unwrap_or_else(|| panic!("the survivor did not take both:\n{}", all_logs(&refs)));
    annotation_becomes(
        &fake,
        pods[other],
        LEASES_ANNOTATION,
        Some("one,two"),
        Duration::from_secs(5),
        &refs,
    );
    // And the survivor's own SIGTERM clears its annotation too.
    terminate_within_shutdown(
        &mut sidecars[other],
        "SIGTERM of the last pod with two leases",
    );
    assert_eq!(
        fake.label(pods[other], ROLE_KEY).as_deref(),
        Some("follower")
    );
    assert_eq!(fake.annotation(pods[other], LEASES_ANNOTATION), None);
    report_rbac(&fake);
}

/// Sharded (`lease.shards: 4`) over two pods: the annotation `redlock-elector/shards` of each
/// lists the indices of exactly the shards its `/leases` says it leads; together they cover
/// every shard once; after a SIGTERM the stopped pod's is gone and the survivor lists all four.
#[test]
fn with_shards_the_annotation_lists_the_led_shard_indices() {
    let fake = FakeApi::start();
    let nodes = redis_cluster(3, TTL);
    let extra = ["--shards", "4"];
    let mut sidecars = start_pods(&fake, &nodes, &["pod-a", "pod-b"], &extra);
    let pods = ["pod-a", "pod-b"];
    // Ready pods: the balance spreads the shards over ready candidates only.
    for p in pods {
        fake.update_pod(
            p,
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
    }
    let indices = |s: &Sidecar| -> String {
        let led: Vec<String> = led_leases(s)
            .iter()
            .map(|l| {
                l.strip_prefix("test-")
                    .expect("a shard of test")
                    .to_string()
            })
            .collect();
        led.join(",")
    };
    // Balanced (2 and 2) and stable, and each annotation says so.
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let t0 = Instant::now();
    let shown = wait_for(Duration::from_secs(20), Duration::from_millis(20), || {
        let led: Vec<String> = refs.iter().map(|s| indices(s)).collect();
        let ok = led.iter().all(|l| l.split(',').count() == 2)
            && pods
                .iter()
                .zip(&led)
                .all(|(p, l)| fake.annotation(p, SHARDS_ANNOTATION).as_deref() == Some(l));
        ok.then_some(led)
    })
    .unwrap_or_else(|| {
        panic!(
            "the shard annotations did not show a balanced assignment: {:?} / {:?}\n{}",
            refs.iter().map(|s| indices(s)).collect::<Vec<_>>(),
            pods.iter()
                .map(|p| fake.annotation(p, SHARDS_ANNOTATION))
                .collect::<Vec<_>>(),
            all_logs(&refs)
        )
    });
    report(
        "shards annotation: balanced 2/2 and shown, ms after start",
        t0.elapsed().as_millis(),
    );
    let mut all: Vec<&str> = shown.iter().flat_map(|l| l.split(',')).collect();
    all.sort();
    assert_eq!(
        all,
        ["0", "1", "2", "3"],
        "every shard on one pod: {shown:?}"
    );
    assert!(
        pods.iter()
            .all(|p| fake.annotation(p, LEASES_ANNOTATION).is_none()),
        "lease.shards writes the shard indices, not names"
    );
    // SIGTERM of pod-a: its shards go to pod-b, its annotation goes.
    terminate_within_shutdown(&mut sidecars[0], "SIGTERM with 4 shards");
    assert_eq!(fake.annotation(pods[0], SHARDS_ANNOTATION), None);
    assert_eq!(fake.label(pods[0], ROLE_KEY).as_deref(), Some("follower"));
    let refs: Vec<&Sidecar> = vec![&sidecars[1]];
    let took = annotation_becomes(
        &fake,
        pods[1],
        SHARDS_ANNOTATION,
        Some("0,1,2,3"),
        Duration::from_secs(5),
        &refs,
    );
    report(
        "shards annotation: the survivor lists all four after the SIGTERM, ms",
        took.as_millis(),
    );
    assert_eq!(indices(&sidecars[1]), "0,1,2,3");
    report_rbac(&fake);
}

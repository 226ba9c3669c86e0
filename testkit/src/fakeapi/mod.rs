//! A recording fake of the Kubernetes API server, just enough for the `publish::k8s` publisher:
//! plain HTTP/1.1 on loopback (keep-alive, one thread per connection), reached through a
//! generated kubeconfig so the real client code path runs.
//!
//! - pods: GET one, LIST with a `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`), PATCH with
//!   JSON merge patch semantics (RFC 7386; content type checked; a `metadata.resourceVersion` in
//!   the patch is a precondition, 409 on mismatch, and a patch that changes nothing keeps the
//!   `resourceVersion`, as the real server does);
//! - endpointslices (discovery.k8s.io/v1): GET, PUT (a `metadata.resourceVersion` in the body is
//!   a precondition, 409 on mismatch), POST, 404 when missing;
//! - events: POST (core/v1 and events.k8s.io/v1), 409 on a duplicate name;
//! - records every request (who: the bearer token, method, path, query, body, status, order)
//!   and every state of the role labels after each change;
//! - fault injection: a status (403, 409, 500, ...) or a delay for matching requests, and
//!   [`FakeApi::down`] / [`FakeApi::up`] (stop listening and cut open connections).
//!
//! **Kept, smaller, rather than a fault proxy in front of the real kube-apiserver**, and only for
//! what the real one cannot be made to do on demand. The tests that still need it, in
//! `tests/suite/kube_labels.rs` unless named:
//! - `api_errors_and_slowness_are_retried_until_the_labels_converge`: an injected 500, 409 and
//!   403 on chosen requests, and 2 s of added latency;
//! - `a_late_stale_patch_never_overwrites_a_newer_state`: one chosen PATCH held back 3 s, then
//!   answered 409 because a newer state landed first (effect order, per request);
//! - `api_server_outage_during_failover_does_not_affect_the_election_and_labels_converge_after`:
//!   connections cut mid-request and the port refused, then back within milliseconds (a real
//!   apiserver restart takes seconds: `control_plane.rs` has that case too);
//! - `labels_follow_the_leader_through_sigkill_and_sigterm`,
//!   `leader_demotes_its_own_label_at_its_deadline_while_renewals_hang`: assertions on every
//!   request in the order it took effect (a demotion before any promotion; the self-demotion's
//!   arrival against the leader's deadline, on the test's own clock), and on every state of the
//!   role labels, which the real server does not expose per request;
//! - `rbac_checker_rejects_what_the_role_does_not_grant`, `fake_merge_patch_and_selectors`: the
//!   kit's own checks;
//! - in `tests/suite/kube_slices.rs`,
//!   `slice_errors_slowness_and_an_outage_are_retried_until_the_slice_lists_the_leader`: the
//!   EndpointSlice writer under a write held past the client's timeout, injected 500s, and an
//!   outage across a handover (the real server covers its 409, 404 and refusal).
//!
//! `tests/suite/rollout.rs`'s `kube_rollout_with_the_default_preference_moves_leadership_exactly_once`
//! uses it too, with no fault: the one test left that the real server could serve
//! (`control_plane_rollout.rs` runs real rolling updates). It stays here so that the suite without
//! the Go build still covers the Kubernetes rollout path.
//!
//! Why not a fault proxy: the real apiserver serves TLS only, so a proxy that answers 500 to one
//! chosen PATCH or holds it back must terminate TLS with a CA of its own, parse HTTP, and record
//! the requests: the fake's HTTP side again, plus TLS, in front of a control plane that each of
//! these fast tests would then have to start (seconds each, after a 10-40 min cold Go build, in
//! the serial `cp_` stage). Everything else (RBAC, validation, watch order, Events as stored,
//! rollouts, EndpointSlices, outages) runs on the real control plane:
//! `tests/suite/control_plane.rs`, `tests/suite/control_plane_rollout.rs`.
//!
//! Split by concept: [`records`] (what is recorded and injected), `state` (pods and events, no
//! I/O), `http` (connections, requests, faults applied), [`rbac`] (the shipped Role checked
//! against the records); this file holds [`FakeApi`], the handle a test drives.
#![allow(dead_code)]

mod http;
pub mod rbac;
pub mod records;
mod state;

use std::collections::BTreeMap;
use std::net::{Shutdown, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use http::{Inner, accept_loop};
use state::{State, snapshot};

pub use rbac::{
    Access, Rule, access, allowed, assert_allowed_by_shipped_role, assert_every_granted_verb_used,
    shipped_role,
};
pub use records::{Action, Fault, LEASE_KEY, NS, ROLE_KEY, Record, Snapshot, TOKEN_ANNOTATION};
pub use state::{merge_patch, selector_matches};

/// The fake API server; stops on drop.
pub struct FakeApi {
    inner: Arc<Inner>,
    dir: tempfile::TempDir,
}

impl FakeApi {
    pub fn start() -> FakeApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let inner = Arc::new(Inner {
            state: Mutex::new(State::default()),
            listener: Mutex::new(Some(listener)),
            conns: Mutex::new(Vec::new()),
            up: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            port,
        });
        let i = inner.clone();
        std::thread::spawn(move || accept_loop(i));
        FakeApi {
            inner,
            dir: tempfile::Builder::new()
                .prefix("fakeapi")
                .tempdir()
                .unwrap(),
        }
    }

    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// A kubeconfig whose user token is `who`, default namespace [`NS`].
    pub fn kubeconfig(&self, who: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{who}.kubeconfig"));
        let text = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: {who}\n  user:\n    token: {who}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: {who}\n    namespace: {NS}\n\
             current-context: fake\n",
            port = self.inner.port
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Create a pod in [`NS`] with these labels.
    pub fn add_pod(&self, name: &str, labels: &[(&str, &str)]) {
        let mut st = self.inner.state.lock().unwrap();
        st.resource_version += 1;
        let labels: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": format!("uid-{name}"),
                "resourceVersion": st.resource_version.to_string(),
                "labels": labels,
            },
            "spec": {"containers": [{"name": "app", "image": "app"}]},
        });
        st.pods.insert(name.to_string(), pod);
        snapshot(&mut st);
    }

    /// Change a pod as the control plane would (kubelet status, creation time): a JSON merge
    /// patch applied server-side, with a new `resourceVersion`.
    pub fn update_pod(&self, name: &str, patch: Value) {
        let mut st = self.inner.state.lock().unwrap();
        st.resource_version += 1;
        let rv = st.resource_version.to_string();
        let pod = st.pods.get_mut(name).expect("pod exists");
        merge_patch(pod, &patch);
        pod["metadata"]["resourceVersion"] = json!(rv);
        snapshot(&mut st);
    }

    pub fn pod(&self, name: &str) -> Value {
        self.inner.state.lock().unwrap().pods[name].clone()
    }

    pub fn label(&self, pod: &str, key: &str) -> Option<String> {
        self.pod(pod)["metadata"]["labels"][key]
            .as_str()
            .map(String::from)
    }

    pub fn annotation(&self, pod: &str, key: &str) -> Option<String> {
        self.pod(pod)["metadata"]["annotations"][key]
            .as_str()
            .map(String::from)
    }

    /// pod → role label.
    pub fn roles(&self) -> BTreeMap<String, Option<String>> {
        let st = self.inner.state.lock().unwrap();
        st.pods
            .iter()
            .map(|(n, p)| {
                (
                    n.clone(),
                    p["metadata"]["labels"][ROLE_KEY].as_str().map(String::from),
                )
            })
            .collect()
    }

    /// Create or replace the EndpointSlice `name` in [`NS`] as another writer would (the chart
    /// at install, a controller): a new `resourceVersion`; the stored slice.
    pub fn put_slice(&self, name: &str, slice: Value) -> Value {
        let mut st = self.inner.state.lock().unwrap();
        let uid = st
            .slices
            .get(name)
            .map_or(json!(format!("uid-slice-{name}")), |s| {
                s["metadata"]["uid"].clone()
            });
        state::store_slice(&mut st, name, slice, uid)
    }

    /// The EndpointSlice `name`, if it exists.
    pub fn slice(&self, name: &str) -> Option<Value> {
        self.inner.state.lock().unwrap().slices.get(name).cloned()
    }

    /// Delete the EndpointSlice `name` (as `kubectl delete` would).
    pub fn delete_slice(&self, name: &str) {
        self.inner.state.lock().unwrap().slices.remove(name);
    }

    pub fn records(&self) -> Vec<Record> {
        self.inner.state.lock().unwrap().log.clone()
    }

    pub fn history(&self) -> Vec<Snapshot> {
        self.inner.state.lock().unwrap().history.clone()
    }

    pub fn events(&self) -> Vec<Value> {
        self.inner.state.lock().unwrap().events.clone()
    }

    /// The current request sequence number (to mark a point in the log).
    pub fn seq(&self) -> u64 {
        self.inner.state.lock().unwrap().seq
    }

    pub fn inject(&self, f: Fault) {
        self.inner.state.lock().unwrap().faults.push(f);
    }

    pub fn clear_faults(&self) {
        self.inner.state.lock().unwrap().faults.clear();
    }

    /// Stop listening (connections are refused) and cut every open connection.
    pub fn down(&self) {
        self.inner.up.store(false, Ordering::SeqCst);
        drop(self.inner.listener.lock().unwrap().take());
        for c in self.inner.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Listen again on the same port.
    pub fn up(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(("127.0.0.1", self.inner.port)) {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "cannot listen on {} again: {e}",
                        self.inner.port
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        };
        listener.set_nonblocking(true).unwrap();
        *self.inner.listener.lock().unwrap() = Some(listener);
        self.inner.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        self.down();
    }
}

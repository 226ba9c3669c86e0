//! A recording fake of the Kubernetes API server, just enough for the `publish::k8s` publisher:
//! plain HTTP/1.1 on loopback (keep-alive, one thread per connection), reached through a
//! generated kubeconfig so the real client code path runs.
//!
//! - pods: GET one, LIST with a `labelSelector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`), PATCH with
//!   JSON merge patch semantics (RFC 7386; content type checked; a `metadata.resourceVersion` in
//!   the patch is a precondition, 409 on mismatch, and a patch that changes nothing keeps the
//!   `resourceVersion`, as the real server does);
//! - events: POST (core/v1 and events.k8s.io/v1), 409 on a duplicate name;
//! - records every request (who: the bearer token, method, path, query, body, status, order)
//!   and every state of the role labels after each change;
//! - fault injection: a status (403, 409, 500, ...) or a delay for matching requests, and
//!   [`FakeApi::down`] / [`FakeApi::up`] (stop listening and cut open connections).
//!
//! Kept for what a real API server cannot be made to do on demand: an injected 500, a 409 on a
//! chosen request, added latency, connections cut mid-request, and a record of every request
//! and label state to assert on. Everything else (RBAC, validation, watch order, Events as
//! stored, rollouts, EndpointSlices, outages) runs on the real control plane:
//! `tests/suite/control_plane.rs`, `tests/suite/control_plane_rollout.rs`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const NS: &str = "ns1";
pub const ROLE_KEY: &str = "redlock-elector/role";
pub const LEASE_KEY: &str = "redlock-elector/lease";
pub const TOKEN_ANNOTATION: &str = "redlock-elector/fencing-token";

/// One request as the fake saw it.
#[derive(Clone, Debug)]
pub struct Record {
    /// Order in which requests took effect (after any injected delay).
    pub seq: u64,
    /// When the request was read.
    pub received: Instant,
    /// When it took effect (after any injected delay).
    pub at: Instant,
    /// Bearer token of the caller: the pod name in these tests.
    pub who: String,
    pub method: String,
    pub path: String,
    /// Decoded query parameters.
    pub query: BTreeMap<String, String>,
    pub content_type: Option<String>,
    pub body: Option<Value>,
    /// Status answered.
    pub status: u16,
}

impl Record {
    /// `labels[ROLE_KEY]` set by this request's body, if it is a patch that sets one.
    pub fn role_set(&self) -> Option<&str> {
        self.body.as_ref()?["metadata"]["labels"][ROLE_KEY].as_str()
    }

    /// The pod name for a request on one pod.
    pub fn pod(&self) -> Option<&str> {
        self.path
            .strip_prefix(&format!("/api/v1/namespaces/{NS}/pods/"))
            .filter(|p| !p.contains('/'))
    }

    pub fn is_list(&self) -> bool {
        self.method == "GET" && self.path == format!("/api/v1/namespaces/{NS}/pods")
    }

    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// The role labels of all pods after one change.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub seq: u64,
    pub at: Instant,
    /// pod → role label value (None if unset).
    pub roles: BTreeMap<String, Option<String>>,
}

impl Snapshot {
    pub fn leaders(&self) -> Vec<&str> {
        self.roles
            .iter()
            .filter(|(_, r)| r.as_deref() == Some("leader"))
            .map(|(p, _)| p.as_str())
            .collect()
    }
}

/// What an injected fault does.
#[derive(Clone, Debug)]
pub enum Action {
    /// Answer with this status (and a Status body) without touching state.
    Status(u16),
    /// Wait, then handle normally.
    Delay(Duration),
}

/// A fault for requests matching all given fields, for `times` requests (None = until cleared).
#[derive(Clone, Debug)]
pub struct Fault {
    pub method: Option<&'static str>,
    pub path_contains: Option<String>,
    pub path_exact: Option<String>,
    pub who: Option<String>,
    pub action: Action,
    pub times: Option<usize>,
}

impl Fault {
    pub fn new(action: Action) -> Fault {
        Fault {
            method: None,
            path_contains: None,
            path_exact: None,
            who: None,
            action,
            times: None,
        }
    }
    pub fn method(mut self, m: &'static str) -> Fault {
        self.method = Some(m);
        self
    }
    pub fn path(mut self, p: &str) -> Fault {
        self.path_contains = Some(p.into());
        self
    }
    /// Only the pod collection (list requests), not single pods.
    pub fn pod_list(mut self) -> Fault {
        self.path_exact = Some(format!("/api/v1/namespaces/{NS}/pods"));
        self
    }
    pub fn who(mut self, w: &str) -> Fault {
        self.who = Some(w.into());
        self
    }
    pub fn times(mut self, n: usize) -> Fault {
        self.times = Some(n);
        self
    }
    fn matches(&self, method: &str, path: &str, who: &str) -> bool {
        self.method.is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self.path_exact.as_deref().is_none_or(|p| path == p)
            && self.who.as_deref().is_none_or(|w| w == who)
    }
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Value>,
    events: Vec<Value>,
    resource_version: u64,
    seq: u64,
    log: Vec<Record>,
    history: Vec<Snapshot>,
    faults: Vec<Fault>,
}

struct Inner {
    state: Mutex<State>,
    listener: Mutex<Option<TcpListener>>,
    conns: Mutex<Vec<TcpStream>>,
    up: AtomicBool,
    stop: AtomicBool,
    port: u16,
}

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

fn snapshot(st: &mut State) {
    let roles = st
        .pods
        .iter()
        .map(|(n, p)| {
            (
                n.clone(),
                p["metadata"]["labels"][ROLE_KEY].as_str().map(String::from),
            )
        })
        .collect();
    let seq = st.seq;
    st.history.push(Snapshot {
        seq,
        at: Instant::now(),
        roles,
    });
}

fn accept_loop(inner: Arc<Inner>) {
    while !inner.stop.load(Ordering::SeqCst) {
        let accepted = match inner.listener.lock().unwrap().as_ref() {
            Some(l) => l.accept().ok(),
            None => None,
        };
        match accepted {
            Some((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                if let Ok(c) = stream.try_clone() {
                    inner.conns.lock().unwrap().push(c);
                }
                let i = inner.clone();
                std::thread::spawn(move || serve_conn(i, stream));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

struct Request {
    method: String,
    target: String,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
    }
    let mut body = Vec::new();
    if let Some(n) = headers.get("content-length") {
        body.resize(n.parse().ok()?, 0);
        r.read_exact(&mut body).ok()?;
    } else if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

fn serve_conn(inner: Arc<Inner>, stream: TcpStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    while let Some(req) = read_request(&mut reader) {
        if !inner.up.load(Ordering::SeqCst) {
            return;
        }
        let close = req
            .headers
            .get("connection")
            .is_some_and(|c| c.eq_ignore_ascii_case("close"));
        let (status, body) = handle(&inner, req);
        if !inner.up.load(Ordering::SeqCst) {
            // Went down while handling: the answer is lost, as with a real outage.
            return;
        }
        let reason = match status {
            200 => "OK",
            201 => "Created",
            400 => "Bad Request",
            403 => "Forbidden",
            404 => "Not Found",
            409 => "Conflict",
            415 => "Unsupported Media Type",
            _ => "Error",
        };
        let text = body.to_string();
        let resp = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        );
        if writer.write_all(resp.as_bytes()).is_err() || close {
            let _ = writer.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let h = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(h, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> BTreeMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Whether `labels` match a selector; `Err` for syntax this fake does not implement.
pub fn selector_matches(selector: &str, labels: &Value) -> Result<bool, String> {
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let get = |k: &str| labels[k.trim()].as_str().map(String::from);
        let ok = if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
            return Err(format!(
                "set-based selector {term:?} not supported by the fake"
            ));
        } else if let Some((k, v)) = term.split_once("!=") {
            get(k).as_deref() != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            get(k).as_deref() == Some(v.trim())
        } else if let Some(k) = term.strip_prefix('!') {
            get(k).is_none()
        } else {
            get(term).is_some()
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = json!({});
            }
            let t = target.as_object_mut().unwrap();
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn handle(inner: &Inner, req: Request) -> (u16, Value) {
    let received = Instant::now();
    let (path, query) = match req.target.split_once('?') {
        Some((p, q)) => (p.to_string(), parse_query(q)),
        None => (req.target.clone(), BTreeMap::new()),
    };
    let who = req
        .headers
        .get("authorization")
        .and_then(|a| a.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let content_type = req.headers.get("content-type").cloned();
    let body: Option<Value> = if req.body.is_empty() {
        None
    } else {
        Some(
            serde_json::from_slice(&req.body)
                .unwrap_or_else(|_| json!({"unparseable": String::from_utf8_lossy(&req.body)})),
        )
    };

    // Faults: decided at arrival; a delay is served outside the lock.
    let action = {
        let mut st = inner.state.lock().unwrap();
        let mut found = None;
        for f in st.faults.iter_mut() {
            if f.times != Some(0) && f.matches(&req.method, &path, &who) {
                if let Some(n) = f.times.as_mut() {
                    *n -= 1;
                }
                found = Some(f.action.clone());
                break;
            }
        }
        found
    };
    if let Some(Action::Delay(d)) = action {
        std::thread::sleep(d);
    }

    let mut st = inner.state.lock().unwrap();
    st.seq += 1;
    let seq = st.seq;
    let (status, answer) = match action {
        Some(Action::Status(code)) => (
            code,
            status_body(code, "Injected", &format!("injected {code}")),
        ),
        _ => route(
            &mut st,
            &req.method,
            &path,
            &query,
            content_type.as_deref(),
            body.as_ref(),
        ),
    };
    st.log.push(Record {
        seq,
        received,
        at: Instant::now(),
        who,
        method: req.method,
        path,
        query,
        content_type,
        body,
        status,
    });
    (status, answer)
}

fn route(
    st: &mut State,
    method: &str,
    path: &str,
    query: &BTreeMap<String, String>,
    content_type: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    let core_events = format!("/api/v1/namespaces/{NS}/events");
    let new_events = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    let not_found = |what: &str| {
        (
            404,
            status_body(404, "NotFound", &format!("{what} not found")),
        )
    };
    if path == pods && method == "GET" {
        let selector = query.get("labelSelector").cloned().unwrap_or_default();
        let mut items = Vec::new();
        for p in st.pods.values() {
            match selector_matches(&selector, &p["metadata"]["labels"]) {
                Ok(true) => items.push(p.clone()),
                Ok(false) => {}
                Err(e) => return (400, status_body(400, "BadRequest", &e)),
            }
        }
        return (
            200,
            json!({
                "apiVersion": "v1", "kind": "PodList",
                "metadata": {"resourceVersion": st.resource_version.to_string()},
                "items": items,
            }),
        );
    }
    if let Some(name) = path.strip_prefix(&format!("{pods}/")) {
        if name.contains('/') {
            return not_found(path);
        }
        let Some(pod) = st.pods.get(name).cloned() else {
            return not_found(&format!("pods \"{name}\""));
        };
        return match method {
            "GET" => (200, pod),
            "PATCH" => {
                if content_type != Some("application/merge-patch+json") {
                    return (
                        415,
                        status_body(
                            415,
                            "UnsupportedMediaType",
                            &format!(
                                "the fake only implements JSON merge patch, got {content_type:?}"
                            ),
                        ),
                    );
                }
                let Some(patch) = body else {
                    return (400, status_body(400, "BadRequest", "empty patch"));
                };
                if let Some(rv) = patch["metadata"]["resourceVersion"].as_str()
                    && Some(rv) != pod["metadata"]["resourceVersion"].as_str()
                {
                    return (
                        409,
                        status_body(
                            409,
                            "Conflict",
                            "the object has been modified; please apply your changes to the latest version and try again",
                        ),
                    );
                }
                let mut next = pod.clone();
                merge_patch(&mut next, patch);
                next["metadata"]["resourceVersion"] = pod["metadata"]["resourceVersion"].clone();
                next["metadata"]["name"] = json!(name);
                next["metadata"]["uid"] = json!(format!("uid-{name}"));
                if next == pod {
                    // Like the real API server: a no-op patch writes nothing and keeps the
                    // resourceVersion.
                    return (200, pod);
                }
                st.resource_version += 1;
                next["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
                st.pods.insert(name.to_string(), next.clone());
                snapshot(st);
                (200, next)
            }
            _ => (405, status_body(405, "MethodNotAllowed", method)),
        };
    }
    if (path == core_events || path == new_events) && method == "POST" {
        if content_type != Some("application/json") {
            return (
                415,
                status_body(415, "UnsupportedMediaType", "want application/json"),
            );
        }
        let Some(ev) = body else {
            return (400, status_body(400, "BadRequest", "empty body"));
        };
        let name = ev["metadata"]["name"].as_str().unwrap_or("").to_string();
        if name.is_empty() {
            return (
                400,
                status_body(400, "BadRequest", "metadata.name required"),
            );
        }
        if st
            .events
            .iter()
            .any(|e| e["metadata"]["name"] == json!(name))
        {
            return (
                409,
                status_body(
                    409,
                    "AlreadyExists",
                    &format!("events \"{name}\" already exists"),
                ),
            );
        }
        let mut ev = ev.clone();
        st.resource_version += 1;
        ev["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
        ev["apiPath"] = json!(path);
        st.events.push(ev.clone());
        return (201, ev);
    }
    not_found(path)
}

// ---------------------------------------------------------------------------------------------
// RBAC: check recorded requests against the Role rules the chart ships.

/// One Role rule.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
}

#[derive(serde::Deserialize)]
struct RoleDoc {
    kind: String,
    rules: Vec<Rule>,
}

/// The rules of `tests/packaging/expected-rbac.yaml`, which the packaging checks assert equal
/// to the Role the chart renders (and the generated manifests).
pub fn shipped_role() -> Vec<Rule> {
    let path = crate::repo().join("tests/packaging/expected-rbac.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let doc: RoleDoc = serde_saphyr::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a Role rule list: {e}", path.display()));
    assert_eq!(doc.kind, "Role", "namespaced Role, never a ClusterRole");
    doc.rules
}

/// What RBAC sees in a request: (apiGroup, resource, verb, namespace).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub group: String,
    pub resource: String,
    pub verb: String,
    pub namespace: Option<String>,
}

/// Map a request to the RBAC attributes the API server would check.
pub fn access(method: &str, path: &str, query: &BTreeMap<String, String>) -> Access {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", _v, rest @ ..] => (String::new(), rest.to_vec()),
        ["apis", g, _v, rest @ ..] => (g.to_string(), rest.to_vec()),
        _ => panic!("not a resource path: {path}"),
    };
    let (namespace, rest) = match rest.as_slice() {
        ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more.to_vec()),
        _ => (None, rest),
    };
    let (resource, named) = match rest.as_slice() {
        [r] => (r.to_string(), false),
        [r, _name] => (r.to_string(), true),
        [r, _name, sub] => (format!("{r}/{sub}"), true),
        _ => panic!("unexpected resource path {path}"),
    };
    let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
    let verb = match (method, named) {
        ("GET", true) => "get",
        ("GET", false) if watch => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => panic!("unexpected method {method}"),
    };
    Access {
        group,
        resource,
        verb: verb.into(),
        namespace,
    }
}

/// Whether `rules`, granted by a Role in `namespace`, allow `a`.
pub fn allowed(rules: &[Rule], namespace: &str, a: &Access) -> bool {
    a.namespace.as_deref() == Some(namespace)
        && rules.iter().any(|r| {
            r.api_groups.iter().any(|g| g == &a.group || g == "*")
                && r.resources.iter().any(|x| x == &a.resource || x == "*")
                && r.verbs.iter().any(|v| v == &a.verb || v == "*")
        })
}

/// The converse of [`assert_allowed_by_shipped_role`]: every (group, resource, verb) the shipped
/// Role grants is among `seen` (what that function returned), so the Role holds exactly what the
/// binary uses.
pub fn assert_every_granted_verb_used(seen: &[Access]) {
    for rule in shipped_role() {
        for g in &rule.api_groups {
            for res in &rule.resources {
                for v in &rule.verbs {
                    assert!(
                        seen.iter()
                            .any(|a| &a.group == g && &a.resource == res && &a.verb == v),
                        "the Role grants {g}/{res} {v}, which the sidecar never used: drop it"
                    );
                }
            }
        }
    }
}

/// Assert every recorded request is allowed by the shipped Role in [`NS`]; returns the set of
/// distinct accesses seen.
pub fn assert_allowed_by_shipped_role(records: &[Record]) -> Vec<Access> {
    let rules = shipped_role();
    let mut seen: Vec<Access> = records
        .iter()
        .map(|r| access(&r.method, &r.path, &r.query))
        .collect();
    seen.sort();
    seen.dedup();
    for a in &seen {
        assert!(
            allowed(&rules, NS, a),
            "the sidecar made a request the chart's Role does not allow: {a:?}\nrules: {rules:?}"
        );
    }
    seen
}

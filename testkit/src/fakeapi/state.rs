//! The fake's resources and their semantics: pods (GET, LIST with a label selector, PATCH as a
//! JSON merge patch with a `resourceVersion` precondition), EndpointSlices (GET, PUT with a
//! `resourceVersion` precondition when the body carries one, POST, 404 when missing) and events
//! (POST, 409 on a duplicate name), the request log and the history of role labels. No I/O: [`route`] takes a request
//! already read and returns the status and body to answer.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{Value, json};

use super::records::{Fault, NS, ROLE_KEY, Record, Snapshot};

#[derive(Default)]
pub(super) struct State {
    pub(super) pods: BTreeMap<String, Value>,
    /// discovery.k8s.io/v1 EndpointSlices in [`NS`], by name.
    pub(super) slices: BTreeMap<String, Value>,
    pub(super) events: Vec<Value>,
    pub(super) resource_version: u64,
    pub(super) seq: u64,
    pub(super) log: Vec<Record>,
    pub(super) history: Vec<Snapshot>,
    pub(super) faults: Vec<Fault>,
}

pub(super) fn snapshot(st: &mut State) {
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

pub(super) fn status_body(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
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

pub(super) fn route(
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
    let slices = format!("/apis/discovery.k8s.io/v1/namespaces/{NS}/endpointslices");
    // No watch streams here (one JSON answer per request): the sidecar then reads its pod every
    // 2 s instead, and reads the slice before each write, as it does behind an API server that
    // refuses watches.
    if (path == pods || path == slices)
        && method == "GET"
        && query.get("watch").is_some_and(|w| w == "true" || w == "1")
    {
        return (
            405,
            status_body(
                405,
                "MethodNotAllowed",
                "the fake API server serves no watches",
            ),
        );
    }
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
    if path == slices || path.starts_with(&format!("{slices}/")) {
        return slice_route(st, method, &path[slices.len()..], body);
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

fn conflict(message: &str) -> (u16, Value) {
    (409, status_body(409, "Conflict", message))
}

fn slice_not_found(name: &str) -> (u16, Value) {
    let message = format!("endpointslices.discovery.k8s.io \"{name}\" not found");
    (404, status_body(404, "NotFound", &message))
}

/// EndpointSlices: `rest` is "" (the collection) or "/NAME".
fn slice_route(st: &mut State, method: &str, rest: &str, body: Option<&Value>) -> (u16, Value) {
    let name = rest.trim_start_matches('/');
    match (method, name.is_empty()) {
        ("GET", false) => match st.slices.get(name) {
            Some(s) => (200, s.clone()),
            None => slice_not_found(name),
        },
        ("PUT", false) => {
            let Some(new) = body else {
                return (400, status_body(400, "BadRequest", "empty body"));
            };
            let Some(old) = st.slices.get(name) else {
                return slice_not_found(name);
            };
            // Like the real server: a version in the body is a precondition; none is an
            // unconditional update.
            if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
                && Some(rv) != old["metadata"]["resourceVersion"].as_str()
            {
                return conflict(&format!(
                    "Operation cannot be fulfilled on endpointslices.discovery.k8s.io \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ));
            }
            let uid = old["metadata"]["uid"].clone();
            (200, store_slice(st, name, new.clone(), uid))
        }
        ("POST", true) => {
            let Some(new) = body else {
                return (400, status_body(400, "BadRequest", "empty body"));
            };
            let name = new["metadata"]["name"].as_str().unwrap_or("").to_string();
            if name.is_empty() {
                return (
                    400,
                    status_body(400, "BadRequest", "metadata.name required"),
                );
            }
            if st.slices.contains_key(&name) {
                return (
                    409,
                    status_body(
                        409,
                        "AlreadyExists",
                        &format!("endpointslices.discovery.k8s.io \"{name}\" already exists"),
                    ),
                );
            }
            let uid = json!(format!("uid-slice-{name}-{}", st.resource_version + 1));
            (201, store_slice(st, &name, new.clone(), uid))
        }
        _ => (405, status_body(405, "MethodNotAllowed", method)),
    }
}

/// Store `slice` as `name` with a new `resourceVersion` (the server's fields set); the stored.
pub(super) fn store_slice(st: &mut State, name: &str, mut slice: Value, uid: Value) -> Value {
    st.resource_version += 1;
    slice["apiVersion"] = json!("discovery.k8s.io/v1");
    slice["kind"] = json!("EndpointSlice");
    slice["metadata"]["name"] = json!(name);
    slice["metadata"]["namespace"] = json!(NS);
    slice["metadata"]["uid"] = uid;
    slice["metadata"]["resourceVersion"] = json!(st.resource_version.to_string());
    st.slices.insert(name.to_string(), slice.clone());
    slice
}

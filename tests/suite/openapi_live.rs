//! A running sidecar answers as the committed OpenAPI document
//! (`docs/reference/http-api.openapi.yaml`) says: every status code and content type is one the
//! document lists for that operation, and every JSON body (and the first SSE event) passes the
//! document's schema, strictly (a field the document does not describe fails). Every operation
//! of the document is exercised.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::Value;
use testkit::common::*;

const TTL: Duration = Duration::from_secs(1);

/// The committed document.
fn committed_document() -> Value {
    let path = testkit::repo().join("docs/reference/http-api.openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{} cannot be read ({e}): generate it with \
             UPDATE_REFERENCE=1 cargo test --test suite -- reference_docs::",
            path.display()
        )
    });
    serde_saphyr::from_str(&text).expect("the OpenAPI document is YAML")
}

/// `schema` with every object that lists its properties closed (`additionalProperties: false`):
/// a field the sidecar sends but the document does not describe fails validation.
fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            let mut out: serde_json::Map<String, Value> =
                m.iter().map(|(k, v)| (k.clone(), strict(v))).collect();
            if out.contains_key("properties") && !out.contains_key("additionalProperties") {
                out.insert("additionalProperties".into(), Value::Bool(false));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(strict).collect()),
        other => other.clone(),
    }
}

/// One answer as the wire gave it.
struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// The document and what the test has checked against it.
struct Contract {
    doc: Value,
    visited: BTreeSet<(String, String)>,
}

impl Contract {
    fn new() -> Contract {
        Contract {
            doc: committed_document(),
            visited: BTreeSet::new(),
        }
    }

    /// Validate `instance` against `schema` (which may `$ref` the document's components).
    fn validate(&self, schema: &Value, instance: &Value, what: &str) {
        let mut root = strict(schema);
        root["components"] = strict(&self.doc["components"]);
        root["$schema"] = Value::from("https://json-schema.org/draft/2020-12/schema");
        let validator = jsonschema::validator_for(&root)
            .unwrap_or_else(|e| panic!("{what}: the document's schema does not compile: {e}"));
        let errors: Vec<String> = validator
            .iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: the body does not match the OpenAPI document:\n{}\nbody: {instance:#}",
            errors.join("\n")
        );
    }

    /// The response object the document gives `method path` for `status`: the operation's own,
    /// or, for 404/405, the shared one of `#/components/responses`.
    fn response(&self, method: &str, path: &str, status: u16, fallback: &str) -> Value {
        let op = &self.doc["paths"][path][method.to_lowercase()];
        assert!(
            op.is_object(),
            "the document has no operation {method} {path}"
        );
        match op["responses"].get(status.to_string()) {
            Some(r) => r.clone(),
            None => {
                let shared = &self.doc["components"]["responses"][fallback];
                assert!(
                    matches!(status, 404 | 405) && shared.is_object(),
                    "{method} {path} answered {status}, which the document does not list \
                     (it lists {:?})",
                    op["responses"]
                        .as_object()
                        .map(|m| m.keys().collect::<Vec<_>>())
                );
                shared.clone()
            }
        }
    }

    /// `GET target` (`/leader`, with any query) on an API port, checked as `GET /leader`; its
    /// JSON body.
    fn check_leader(&mut self, port: u16, target: &str) -> Value {
        self.check("GET", "/leader", &request("GET", port, target), "NotFound")
            .expect("JSON")
    }

    /// Check an answer to `method path_template` against the document; returns the JSON body
    /// when it is JSON.
    fn check(&mut self, method: &str, path: &str, a: &Answer, fallback: &str) -> Option<Value> {
        let response = self.response(method, path, a.status, fallback);
        let listed = &self.doc["paths"][path][method.to_lowercase()]["responses"];
        if listed.get(a.status.to_string()).is_some() {
            self.visited.insert((method.to_string(), path.to_string()));
        }
        let content = response["content"].as_object().expect("content");
        let Some(media) = content
            .iter()
            .find(|(ct, _)| normalize(ct) == normalize(&a.content_type))
            .map(|(_, m)| m)
        else {
            panic!(
                "{method} {path} ({}) answered Content-Type {:?}; the document lists {:?}",
                a.status,
                a.content_type,
                content.keys().collect::<Vec<_>>()
            );
        };
        if normalize(&a.content_type) != "application/json" {
            assert_eq!(
                media["schema"]["type"], "string",
                "{method} {path}: a text body"
            );
            return None;
        }
        let body: Value = serde_json::from_str(&a.body)
            .unwrap_or_else(|e| panic!("{method} {path}: body is not JSON ({e}): {}", a.body));
        self.validate(
            &media["schema"],
            &body,
            &format!("{method} {path} {}", a.status),
        );
        Some(body)
    }

    /// Every operation the document lists was answered with a status it lists.
    fn assert_all_visited(&self) {
        let mut missing = Vec::new();
        for (path, item) in self.doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if method == "servers" {
                    continue;
                }
                let m = method.to_uppercase();
                if !self.visited.contains(&(m.clone(), path.clone())) {
                    missing.push(format!("{m} {path}"));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "operations never exercised: {missing:?}"
        );
    }
}

/// `text/plain;charset=UTF-8` and `text/plain; charset=utf-8` are the same type.
fn normalize(ct: &str) -> String {
    ct.split(';')
        .map(|p| p.trim().to_ascii_lowercase())
        .collect::<Vec<_>>()
        .join(";")
}

fn request(method: &str, port: u16, path: &str) -> Answer {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("HTTP client");
    let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let resp = client
        .request(method.clone(), format!("http://127.0.0.1:{port}{path}"))
        .send()
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    Answer {
        status: resp.status().as_u16(),
        content_type: resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        body: resp.text().expect("body"),
    }
}

/// `GET /leader/watch` up to the end of the first event: the status and content type, and the
/// first event's `data` (the stream itself never ends; dropping the response closes it).
fn first_event(port: u16, path: &str) -> (Answer, Value) {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("HTTP client");
    let resp = client
        .get(format!("http://127.0.0.1:{port}{path}"))
        .send()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let mut data = None;
    let mut raw = String::new();
    for line in BufReader::new(resp).lines() {
        let line = line.expect("an event line");
        raw.push_str(&line);
        raw.push('\n');
        if let Some(d) = line.strip_prefix("data:") {
            data = Some(serde_json::from_str(d.trim()).expect("event data is JSON"));
        } else if line.is_empty() && data.is_some() {
            break;
        }
    }
    let data = data.unwrap_or_else(|| panic!("no event data:\n{raw}"));
    let body = raw;
    (
        Answer {
            status,
            content_type,
            body,
        },
        data,
    )
}

#[test]
fn openapi_live_answers_match_the_document() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = Sidecar::start("a", &refs, &Opts::default());
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        a.try_leader().filter(|v| v.is_leader)
    })
    .unwrap_or_else(|| panic!("a never led:\n{}", a.logs()));
    let b = Sidecar::start("b", &refs, &Opts::default());
    let mut c = Contract::new();

    // /leader as leader and as follower: every field present, no undocumented one.
    let lead = c.check_leader(a.api_port, "/leader");
    assert_eq!(lead["is_leader"], true, "{lead}");
    let follow = c.check_leader(b.api_port, "/leader");
    assert_eq!(follow["is_leader"], false, "{follow}");
    assert_eq!(follow["fencing_token"], Value::Null, "{follow}");

    // The long-poll: times out with the same version. The view may change meanwhile (a
    // renewal's candidacy read, a loaded machine's late timer): then the poll answers at once
    // with a newer version, and the test polls again from that one.
    let mut v = lead["version"].as_u64().expect("version");
    let mut ran_out = false;
    for _ in 0..5 {
        let polled = c.check_leader(a.api_port, &format!("/leader?wait=200ms&version={v}"));
        let now = polled["version"].as_u64().expect("version");
        assert!(
            now >= v,
            "a long-poll answered an older version: {now} < {v}"
        );
        if now == v {
            ran_out = true;
            break;
        }
        v = now;
    }
    assert!(
        ran_out,
        "no /leader long-poll of 200 ms ran out unchanged in 5 tries"
    );

    // Bad query parameters: 400 with an Error body.
    for bad in ["/leader?wait=soon", "/leader?wait=1s&version=-1"] {
        let ans = request("GET", a.api_port, bad);
        assert_eq!(ans.status, 400, "{bad}: {}", ans.body);
        c.check("GET", "/leader", &ans, "NotFound");
    }

    // The SSE stream's first event.
    let (ans, data) = first_event(a.api_port, "/leader/watch");
    assert_eq!(ans.status, 200, "{}", ans.body);
    c.check("GET", "/leader/watch", &ans, "NotFound");
    let media =
        &c.doc["paths"]["/leader/watch"]["get"]["responses"]["200"]["content"]["text/event-stream"];
    c.validate(
        &media["x-event-data"],
        &data,
        "GET /leader/watch first event",
    );

    // The compat answer, once b has seen a as the holder.
    wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        b.try_leader().filter(|v| v.leader.as_deref() == Some("a"))
    })
    .unwrap_or_else(|| panic!("b never saw a lead:\n{}", b.logs()));
    let compat = c
        .check("GET", "/", &request("GET", b.api_port, "/"), "NotFound")
        .expect("JSON");
    assert_eq!(compat["name"], "a");

    // Unknown path and wrong method: the shared error answers (checked against the `GET`
    // operation of the path in the last column but one). Then the ops port.
    for (method, port, target, status, path, fallback) in [
        (
            "GET",
            a.api_port,
            "/no/such/path",
            404,
            "/leader",
            "NotFound",
        ),
        (
            "DELETE",
            a.api_port,
            "/leader",
            405,
            "/leader",
            "MethodNotAllowed",
        ),
        (
            "GET",
            a.ops_port,
            "/metrics",
            200,
            "/metrics",
            "OpsNotFound",
        ),
        (
            "GET",
            b.ops_port,
            "/healthz",
            200,
            "/healthz",
            "OpsNotFound",
        ),
        ("GET", b.ops_port, "/readyz", 200, "/readyz", "OpsNotFound"),
        (
            "GET",
            a.ops_port,
            "/readyz/leader",
            200,
            "/readyz/leader",
            "OpsNotFound",
        ),
        (
            "GET",
            b.ops_port,
            "/readyz/leader",
            503,
            "/readyz/leader",
            "OpsNotFound",
        ),
        (
            "GET",
            a.ops_port,
            "/no/such/path",
            404,
            "/metrics",
            "OpsNotFound",
        ),
    ] {
        let ans = request(method, port, target);
        assert_eq!(ans.status, status, "{method} {target}: {}", ans.body);
        c.check("GET", path, &ans, fallback);
    }

    // The several-leases routes, on these single-lease sidecars: their one lease.
    let all = c
        .check(
            "GET",
            "/leases",
            &request("GET", a.api_port, "/leases"),
            "NotFound",
        )
        .expect("JSON");
    assert_eq!(all["leases"][0]["lease"], "test", "{all}");
    assert_eq!(all["leading"], 1, "{all}");
    let mut v = all["version"].as_u64().expect("version");
    let mut ran_out = false;
    for _ in 0..5 {
        let polled = c
            .check(
                "GET",
                "/leases",
                &request(
                    "GET",
                    a.api_port,
                    &format!("/leases?wait=200ms&version={v}"),
                ),
                "NotFound",
            )
            .expect("JSON");
        let now = polled["version"].as_u64().expect("version");
        assert!(
            now >= v,
            "a long-poll answered an older version: {now} < {v}"
        );
        if now == v {
            ran_out = true;
            break;
        }
        v = now;
    }
    assert!(
        ran_out,
        "no /leases long-poll of 200 ms ran out unchanged in 5 tries"
    );
    let ans = request("GET", a.api_port, "/leases?wait=soon");
    assert_eq!(ans.status, 400, "{}", ans.body);
    c.check("GET", "/leases", &ans, "NotFound");
    let (ans, data) = first_event(a.api_port, "/leases/watch");
    assert_eq!(ans.status, 200, "{}", ans.body);
    c.check("GET", "/leases/watch", &ans, "NotFound");
    let media =
        &c.doc["paths"]["/leases/watch"]["get"]["responses"]["200"]["content"]["text/event-stream"];
    c.validate(
        &media["x-event-data"],
        &data,
        "GET /leases/watch first event",
    );
    let one = c
        .check(
            "GET",
            "/leases/{name}",
            &request("GET", a.api_port, "/leases/test"),
            "NotFound",
        )
        .expect("JSON");
    assert_eq!(one["is_leader"], true, "{one}");
    for (method, target, status, path) in [
        ("GET", "/leases/nope", 404, "/leases/{name}"),
        (
            "POST",
            "/leases/nope/step-down",
            404,
            "/leases/{name}/step-down",
        ),
    ] {
        let ans = request(method, a.api_port, target);
        assert_eq!(ans.status, status, "{method} {target}: {}", ans.body);
        c.check(method, path, &ans, "NotFound");
    }
    let ans = request("POST", b.api_port, "/leases/test/step-down");
    assert_eq!(ans.status, 409, "{}", ans.body);
    c.check("POST", "/leases/{name}/step-down", &ans, "NotFound");

    // Step-down: 409 on the follower, 200 (the view after the release) on the leader.
    let ans = request("POST", b.api_port, "/leader/step-down");
    assert_eq!(ans.status, 409, "{}", ans.body);
    c.check("POST", "/leader/step-down", &ans, "NotFound");
    let ans = request("POST", a.api_port, "/leader/step-down");
    assert_eq!(ans.status, 200, "{}", ans.body);
    let after = c
        .check("POST", "/leader/step-down", &ans, "NotFound")
        .expect("JSON");
    assert_eq!(after["is_leader"], false, "{after}");

    // One lease's step-down, on b once it leads (a sits out its cool-down).
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        b.try_leader().filter(|v| v.is_leader)
    })
    .unwrap_or_else(|| panic!("b never led after a's step-down:\n{}", b.logs()));
    let ans = request("POST", b.api_port, "/leases/test/step-down");
    assert_eq!(ans.status, 200, "{}", ans.body);
    let after = c
        .check("POST", "/leases/{name}/step-down", &ans, "NotFound")
        .expect("JSON");
    assert_eq!(after["is_leader"], false, "{after}");

    c.assert_all_visited();
    report("openapi live check: operations exercised", c.visited.len());
}

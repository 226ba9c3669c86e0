//! The OpenAPI 3.1 document of the app-facing API ([`crate::api`]) and the ops endpoints
//! ([`crate::ops`]): `docs/reference/http-api.openapi.json` and `http-api.md` are generated from
//! [`document`] (`tests/suite/reference_docs.rs`), and a test checks a live sidecar's answers
//! against it. The body schemas come from the Rust types the handlers serialize (schemars, doc
//! comments as descriptions); the paths, status codes and content types are the routes' own.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::api::{Compat, ErrorBody, Leases, MAX_WAIT, SSE_KEEP_ALIVE};
use crate::config::fmt_dur;
use crate::config::settings::default;
use crate::leadership::View;
use crate::ops::METRICS_CONTENT_TYPE;

/// `Content-Type` of the JSON answers.
pub const JSON: &str = "application/json";
/// `Content-Type` of the probes' plain-text answers.
pub const TEXT: &str = "text/plain; charset=utf-8";
/// `Content-Type` of `GET /leader/watch`.
pub const EVENT_STREAM: &str = "text/event-stream";

/// A response whose body is the schema `name` as JSON.
fn json_body(description: &str, name: &str) -> Value {
    json!({
        "description": description,
        "content": { JSON: { "schema": { "$ref": format!("#/components/schemas/{name}") } } },
    })
}

/// A Server-Sent Events response whose events' data is the schema `name` as JSON.
fn events(name: &str, example: &str) -> Value {
    json!({
        "description": "The event stream.",
        "content": { EVENT_STREAM: {
            "schema": { "type": "string" },
            "x-event-data": { "$ref": format!("#/components/schemas/{name}") },
            "example": example,
        } },
    })
}

/// A plain-text response.
fn text_body(description: &str, content_type: &str, example: &str) -> Value {
    json!({
        "description": description,
        "content": { content_type: { "schema": { "type": "string" }, "example": example } },
    })
}

/// The body schemas, under `#/components/schemas`, as the handlers serialize them: every field
/// is always written (`null` when unknown), so every property is required.
fn schemas() -> Map<String, Value> {
    let mut generator = SchemaSettings::draft2020_12()
        .with(|s| s.definitions_path = "/components/schemas".into())
        .for_serialize()
        .into_generator();
    let add = |name: &str, schema: schemars::Schema| (name.to_string(), schema.to_value());
    let mut out: Map<String, Value> = [
        add("View", View::json_schema(&mut generator)),
        add("Compat", Compat::json_schema(&mut generator)),
        add("Error", ErrorBody::json_schema(&mut generator)),
        add("Leases", Leases::json_schema(&mut generator)),
    ]
    .into_iter()
    .collect();
    out.extend(generator.take_definitions(true));
    for schema in out.values_mut() {
        let names: Vec<Value> = schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().map(Value::String).collect())
            .unwrap_or_default();
        if let Some(obj) = schema.as_object_mut() {
            obj.remove("$schema");
            if !names.is_empty() {
                obj.insert("required".into(), Value::Array(names));
            }
        }
    }
    out
}

/// The document.
pub fn document() -> Value {
    let api = format!("http://{}", default::API_LISTEN);
    let ops = format!("http://{}", default::OPS_LISTEN).replace("0.0.0.0", "{pod}");
    let api_server = || json!([{ "url": api, "description": "api.listen (localhost: the app in the same pod)" }]);
    let ops_server = || {
        json!([{
            "url": ops,
            "description": "ops.listen (all interfaces: the kubelet and Prometheus)",
            "variables": { "pod": { "default": "localhost", "description": "the pod's address" } },
        }])
    };
    let view = |d: &str| json_body(d, "View");
    let error = |d: &str| json_body(d, "Error");
    let wait_parameters = || {
        json!([
            {
                "name": "wait", "in": "query", "required": false,
                "description": format!("Long-poll for at most this long: a duration \
                    (`30s`, `500ms`) or a number of seconds; capped at {}.",
                    fmt_dur(MAX_WAIT)),
                "schema": { "type": "string" }, "example": "30s",
            },
            {
                "name": "version", "in": "query", "required": false,
                "description": "The `version` the client has seen: the long-poll \
                    answers once the view's version differs from it. Without \
                    `wait` it is checked but has no effect.",
                "schema": { "type": "integer", "minimum": 0 }, "example": 12,
            },
        ])
    };
    let lease_name = || {
        json!([{
            "name": "name", "in": "path", "required": true,
            "description": "A lease of this sidecar (`lease.name` or one of `lease.names`).",
            "schema": { "type": "string" }, "example": "my-app",
        }])
    };
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "redlock-elector",
            "version": env!("CARGO_PKG_VERSION"),
            "license": { "name": "Apache-2.0", "identifier": "Apache-2.0" },
            "description": "The sidecar's two HTTP servers. The app-facing API (tag `app`) \
                listens on `api.listen`, localhost by default: the app in the same pod asks it \
                who leads. The ops server (tag `ops`) listens on `ops.listen` for the kubelet's \
                probes and Prometheus. Every answer is evaluated against the lease deadline at \
                the moment of answering. An unknown path answers 404 and a known path with \
                another method 405 (`#/components/responses`): on the API with an `Error` \
                body, on the ops server with plain text.",
        },
        "tags": [
            { "name": "app", "description": "The app-facing API (`api.listen`)." },
            { "name": "ops", "description": "Metrics and probes (`ops.listen`)." },
        ],
        "paths": {
            "/leader": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "getLeader",
                    "summary": "Who leads, and whether this replica does",
                    "description": format!("Without `wait`: the current view at once. With \
                        `wait`: a long-poll that answers as soon as the view's `version` differs \
                        from `version` (the current one when not given), or when `wait` has \
                        passed (capped at {}), with the view then. Unknown parameters are \
                        ignored.", fmt_dur(MAX_WAIT)),
                    "parameters": wait_parameters(),
                    "responses": {
                        "200": view("The view now, or when it changed, or when the wait ran out."),
                        "400": error("`wait` or `version` is malformed."),
                    },
                },
            },
            "/leader/watch": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "watchLeader",
                    "summary": "Server-Sent Events: one event per change",
                    "description": format!("A stream that starts with the current view and then \
                        sends one event each time the view's `version` changes. Each event's \
                        `id` is the version and its `data` a `View` as JSON \
                        (`x-event-data`); a comment line keeps the connection alive every {}.",
                        fmt_dur(SSE_KEEP_ALIVE)),
                    "responses": { "200": events("View",
                        "id:12\ndata:{\"lease\":\"my-app\",\"is_leader\":true,...}\n\n") },
                },
            },
            "/leader/step-down": {
                "servers": api_server(),
                "post": {
                    "tags": ["app"],
                    "operationId": "stepDown",
                    "summary": "Release the lease and sit out a cool-down",
                    "description": "If this replica leads, it releases the lease at once, naming \
                        a ready successor when there is one, and does not contend again for a \
                        cool-down. The request has no body.",
                    "responses": {
                        "200": view("Released; the view after the release."),
                        "409": error("This replica does not lead."),
                        "503": error("The election loop is not running (the sidecar is shutting down)."),
                    },
                },
            },
            "/": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "getCompat",
                    "summary": "The leader, in the shape of leader-elector and nais/elector",
                    "description": "The answer of the retired kubernetes contrib \
                        `leader-elector` and of nais/elector, so that their users switch images \
                        only.",
                    "responses": {
                        "200": json_body("The leader's name and when it last changed.", "Compat"),
                    },
                },
            },
            "/leases": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "getLeases",
                    "summary": "Every lease of this sidecar, and which it leads",
                    "description": format!("Every lease of this sidecar (`lease.names`; one \
                        for the single-lease form), each as `GET /leader` answers for one lease. \
                        The answer's `version` is the sum of the leases' versions, so it changes \
                        whenever one of them does: `wait` and `version` long-poll as on \
                        `/leader` (capped at {}), so one connection keeps an app's set of led \
                        leases current.", fmt_dur(MAX_WAIT)),
                    "parameters": wait_parameters(),
                    "responses": {
                        "200": json_body("Every lease now, or when one changed, or when the wait ran out.", "Leases"),
                        "400": error("`wait` or `version` is malformed."),
                    },
                },
            },
            "/leases/watch": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "watchLeases",
                    "summary": "Server-Sent Events: every lease, once per change of any",
                    "description": format!("As `/leader/watch`, with a `Leases` as each \
                        event's `data`; a comment line keeps the connection alive every {}.",
                        fmt_dur(SSE_KEEP_ALIVE)),
                    "responses": { "200": events("Leases",
                        "id:31\ndata:{\"version\":31,\"leading\":1,\"leases\":[...]}\n\n") },
                },
            },
            "/leases/{name}": {
                "servers": api_server(),
                "get": {
                    "tags": ["app"],
                    "operationId": "getLease",
                    "summary": "One lease, as `/leader` answers for the first",
                    "parameters": lease_name(),
                    "responses": {
                        "200": view("The lease's view now."),
                        "404": error("This sidecar has no such lease."),
                    },
                },
            },
            "/leases/{name}/step-down": {
                "servers": api_server(),
                "post": {
                    "tags": ["app"],
                    "operationId": "stepDownLease",
                    "summary": "Release one lease and sit out its cool-down",
                    "description": "As `/leader/step-down`, for this lease alone: the others \
                        are not touched.",
                    "parameters": lease_name(),
                    "responses": {
                        "200": view("Released; the lease's view after the release."),
                        "404": error("This sidecar has no such lease."),
                        "409": error("This replica does not lead the lease."),
                        "503": error("The election loop is not running (the sidecar is shutting down)."),
                    },
                },
            },
            "/metrics": {
                "servers": ops_server(),
                "get": {
                    "tags": ["ops"],
                    "operationId": "getMetrics",
                    "summary": "Prometheus metrics",
                    "description": "The Prometheus text format; the leadership gauges are \
                        evaluated at scrape time. Every metric is listed in the [metrics \
                        reference](metrics.md).",
                    "responses": {
                        "200": text_body("The metrics.", METRICS_CONTENT_TYPE,
                            "redlock_elector_is_leader{lease=\"my-app\"} 1\n"),
                    },
                },
            },
            "/healthz": {
                "servers": ops_server(),
                "get": {
                    "tags": ["ops"],
                    "operationId": "getHealthz",
                    "summary": "Liveness",
                    "description": "200 while the election loop runs and is not stalled.",
                    "responses": {
                        "200": text_body("Alive.", TEXT, "ok\n"),
                        "503": text_body("The election loop is stalled or stopped.", TEXT,
                            "election loop stalled or stopped\n"),
                    },
                },
            },
            "/readyz": {
                "servers": ops_server(),
                "get": {
                    "tags": ["ops"],
                    "operationId": "getReadyz",
                    "summary": "Readiness",
                    "description": "200 once serving; never tied to Redis or leadership, so \
                        rollouts never stall.",
                    "responses": { "200": text_body("Serving.", TEXT, "ok\n") },
                },
            },
            "/readyz/leader": {
                "servers": ops_server(),
                "get": {
                    "tags": ["ops"],
                    "operationId": "getReadyzLeader",
                    "summary": "Leader-only readiness",
                    "description": "200 only while this replica leads, for a readiness gate \
                        that keeps only the leader pod in a Service's endpoints.",
                    "responses": {
                        "200": text_body("This replica leads.", TEXT, "leader\n"),
                        "503": text_body("This replica does not lead.", TEXT, "not leader\n"),
                    },
                },
            },
        },
        "components": {
            "schemas": schemas(),
            "responses": {
                "NotFound": error("API: no such path."),
                "MethodNotAllowed": error("API: the path exists, the method does not."),
                "OpsNotFound": text_body("Ops: no such path (405 for another method, same body).",
                    TEXT, "not found\n"),
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_schema_lists_every_field_as_required() {
        let doc = document();
        let view = &doc["components"]["schemas"]["View"];
        let required = view["required"].as_array().expect("required");
        for field in [
            "is_leader",
            "fencing_token",
            "leader_rank",
            "candidate_ready",
            "nodes",
        ] {
            assert!(required.iter().any(|r| r == field), "{field}: {view:#}");
        }
        assert!(doc["components"]["schemas"]["Rank"].is_object(), "{doc:#}");
    }
}

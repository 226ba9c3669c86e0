//! RBAC: check recorded requests against the Role rules the chart ships
//! (`tests/packaging/expected-rbac.yaml`), and the converse, that every granted verb is used.

use std::collections::BTreeMap;

use super::records::{NS, Record};

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

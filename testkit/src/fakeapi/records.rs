//! What the fake records and what a test injects: the names it serves ([`NS`], the label and
//! annotation keys), one [`Record`] a request, a [`Snapshot`] of the role labels after each
//! change, and the [`Fault`]s (a status or a delay for matching requests).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

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
        self.method == "GET"
            && self.path == format!("/api/v1/namespaces/{NS}/pods")
            && !self.query.contains_key("watch")
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
    pub(super) fn matches(&self, method: &str, path: &str, who: &str) -> bool {
        self.method.is_none_or(|m| m == method)
            && self
                .path_contains
                .as_deref()
                .is_none_or(|p| path.contains(p))
            && self.path_exact.as_deref().is_none_or(|p| path == p)
            && self.who.as_deref().is_none_or(|w| w == who)
    }
}

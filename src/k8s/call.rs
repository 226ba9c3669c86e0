//! One API call: bounded by [`REQUEST_TIMEOUT`], counted in
//! `redlock_elector_kube_requests_total{verb,result}`, its failure typed as a [`CallError`].

use std::time::Duration;

use kube::core::Status;

use crate::metrics::Metrics;

/// Upper bound of one API request; an answer slower than this counts as a failure.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Every `verb` label of `redlock_elector_kube_requests_total`: pods get, watch, list and patch,
/// events create (the calls of `standing.rs` and of `publish::k8s`'s `pods.rs` and `events.rs`),
/// and the EndpointSlice's get, watch, update and create (`publish::k8s`'s `endpoints.rs` and
/// `follow.rs`).
pub const VERBS: [&str; 6] = ["get", "watch", "list", "patch", "create", "update"];

/// Every `result` label: `ok`, each [`CallError::metric_label`], and `cancelled` (see
/// `Counted`). The publisher creates every verb × result series at 0 when it starts.
pub const RESULTS: [&str; 9] = [
    "ok",
    "conflict",
    "forbidden",
    "not_found",
    "server_error",
    "client_error",
    "timeout",
    "transport",
    "cancelled",
];

/// Why an API call failed. [`CallError::metric_label`] is its `result` label; the retry logic
/// matches on the variant.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// 409: the object changed since it was read (or an Event name clashed).
    #[error("409 conflict")]
    Conflict(#[source] Box<Status>),
    /// 403: the Role lacks the rule, or the service account is not bound to it.
    #[error("forbidden: {}", .0.message)]
    Forbidden(#[source] Box<Status>),
    /// 404: the object is gone (a pod deleted since it was listed).
    #[error("not_found: {}", .0.message)]
    NotFound(#[source] Box<Status>),
    /// 5xx.
    #[error("server_error: {} {}", .0.code, .0.message)]
    Server(#[source] Box<Status>),
    /// Any other status the server answered with.
    #[error("client_error: {} {}", .0.code, .0.message)]
    Client(#[source] Box<Status>),
    /// No answer within the bound.
    #[error("timeout: no answer within {0:?}")]
    Timeout(Duration),
    /// No answer at all: connection refused or reset, DNS, TLS.
    #[error("transport: {0}")]
    Transport(#[source] kube::Error),
}

impl CallError {
    /// The `result` label of `redlock_elector_kube_requests_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CallError::Conflict(_) => "conflict",
            CallError::Forbidden(_) => "forbidden",
            CallError::NotFound(_) => "not_found",
            CallError::Server(_) => "server_error",
            CallError::Client(_) => "client_error",
            CallError::Timeout(_) => "timeout",
            CallError::Transport(_) => "transport",
        }
    }
}

impl From<kube::Error> for CallError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) => match s.code {
                409 => CallError::Conflict(s),
                403 => CallError::Forbidden(s),
                404 => CallError::NotFound(s),
                500..=599 => CallError::Server(s),
                _ => CallError::Client(s),
            },
            other => CallError::Transport(other),
        }
    }
}

/// Counts a request as `cancelled` unless it completed: an attempt for a state no longer
/// wanted is dropped mid-flight, and the server may or may not have seen it.
struct Counted<'a> {
    /// Where the count goes.
    metrics: &'a Metrics,
    /// The `verb` label.
    verb: &'static str,
    /// The `result` label; `cancelled` until the call completes.
    result: &'static str,
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.metrics.kube_request(self.verb, self.result);
    }
}

/// One API call with the request timeout, counted in `redlock_elector_kube_requests_total`.
pub async fn call<T>(
    metrics: &Metrics,
    verb: &'static str,
    fut: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, CallError> {
    let mut counted = Counted {
        metrics,
        verb,
        result: "cancelled",
    };
    let r = match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(r) => r.map_err(CallError::from),
        Err(_) => Err(CallError::Timeout(REQUEST_TIMEOUT)),
    };
    counted.result = r.as_ref().map_or_else(CallError::metric_label, |_| "ok");
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(Status {
            code,
            message: "m".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn statuses_map_to_the_labels_and_messages_of_the_metric_and_the_log() {
        let cases = [
            (409, "conflict", "409 conflict"),
            (403, "forbidden", "forbidden: m"),
            (404, "not_found", "not_found: m"),
            (503, "server_error", "server_error: 503 m"),
            (422, "client_error", "client_error: 422 m"),
        ];
        for (code, label, shown) in cases {
            let e = CallError::from(status(code));
            assert!(RESULTS.contains(&label), "{label} is not in RESULTS");
            assert_eq!((e.metric_label(), e.to_string().as_str()), (label, shown));
        }
        let t = CallError::Timeout(REQUEST_TIMEOUT);
        assert_eq!(t.metric_label(), "timeout");
        assert_eq!(t.to_string(), "timeout: no answer within 5s");
        let e = CallError::from(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert_eq!(e.metric_label(), "transport");
    }
}

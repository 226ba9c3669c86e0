//! The app's health outside Kubernetes (`app.healthUrl`): an HTTP GET on a loopback URL every
//! `app.healthInterval`, within `app.healthTimeout`. A 2xx answer is healthy; after
//! `app.healthFailureThreshold` failures in a row (another status, a refused connection, a
//! timeout) the app is unhealthy until the next 2xx. The result goes to the elector beside the
//! pod's standing (`lease.followApp`), as a readiness probe would drive a kubelet.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_util::sync::CancellationToken;

/// How the health URL is probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// `app.healthUrl`.
    pub url: url::Url,
    /// `app.healthInterval`.
    pub interval: Duration,
    /// `app.healthTimeout`.
    pub timeout: Duration,
    /// `app.healthFailureThreshold`.
    pub failure_threshold: u32,
}

/// Failures in a row and the verdict they give.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Failures since the last success.
    pub failures: u32,
    /// Whether the app counts as healthy. False until the first success.
    pub healthy: bool,
}

impl Verdict {
    /// The verdict after one more probe.
    pub fn after(self, ok: bool, threshold: u32) -> Verdict {
        if ok {
            Verdict {
                failures: 0,
                healthy: true,
            }
        } else {
            let failures = self.failures.saturating_add(1);
            Verdict {
                failures,
                healthy: self.healthy && failures < threshold,
            }
        }
    }
}

/// Probe until `stop`, publishing whether the app is healthy.
pub async fn probe(p: Probe, tx: watch::Sender<bool>, stop: CancellationToken) {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(p.interval * 2)
        .build_http();
    let uri: hyper::Uri = match p.url.as_str().parse() {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(url = %p.url, error = %e, "app.healthUrl is not a URI; the app counts as unhealthy");
            return;
        }
    };
    let mut verdict = Verdict::default();
    let mut next = Instant::now();
    loop {
        let answer = timeout(p.timeout, client.get(uri.clone())).await;
        let ok = matches!(&answer, Ok(Ok(r)) if r.status().is_success());
        let before = verdict;
        verdict = verdict.after(ok, p.failure_threshold);
        if verdict.healthy != before.healthy || (before.failures == 0 && !ok) {
            let why = match &answer {
                Ok(Ok(r)) => format!("status {}", r.status().as_u16()),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {:?}", p.timeout),
            };
            tracing::info!(
                url = %p.url,
                healthy = verdict.healthy,
                failures = verdict.failures,
                answer = %why,
                "app health"
            );
        }
        tx.send_if_modified(|h| std::mem::replace(h, verdict.healthy) != verdict.healthy);
        next += p.interval;
        next = next.max(Instant::now());
        tokio::select! {
            _ = sleep_until(next) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unhealthy_after_the_threshold_of_failures_in_a_row_healthy_at_the_first_success() {
        let mut v = Verdict::default();
        assert!(!v.healthy, "unknown until the first success");
        v = v.after(true, 3);
        assert!(v.healthy);
        v = v.after(false, 3);
        v = v.after(false, 3);
        assert!(v.healthy, "two failures of three");
        v = v.after(true, 3);
        assert_eq!(v.failures, 0);
        for _ in 0..3 {
            v = v.after(false, 3);
        }
        assert!(!v.healthy);
        assert!(v.after(true, 3).healthy);
    }
}

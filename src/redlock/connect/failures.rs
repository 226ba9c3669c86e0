//! When a failure is worth a `warn` line ([`WarnLimiter`]), and the per-endpoint log and counter
//! that apply it ([`FailureLog`]).

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::error::{ConnectError, Reason};
use crate::metrics::Metrics;

/// The interval between repeated warnings about the same failure of one endpoint.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

/// Decides which failures of one endpoint get a `warn` line: the first, each change of reason
/// (or of the denied command), then at most one per `every` while it keeps failing the same way.
#[derive(Debug)]
pub struct WarnLimiter {
    /// Minimum time between two warnings of the same failure.
    every: Duration,
    /// The failure warned about last and when; `None` while the endpoint works.
    last: Option<(Reason, Option<String>, Instant)>,
    /// Failures since the last warning that were not logged.
    suppressed: u64,
}

/// What to log for a failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Warn now; `suppressed` failures of the same kind since the previous warning were not.
    Warn {
        /// Failures not logged since the previous warning.
        suppressed: u64,
    },
    /// Only count it.
    Quiet,
}

impl WarnLimiter {
    /// A limiter that repeats a warning at most every `every`.
    pub fn new(every: Duration) -> Self {
        WarnLimiter {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// A failure at `now`.
    pub fn failure(&mut self, e: &ConnectError, now: Instant) -> Verdict {
        let warn = match &self.last {
            None => true,
            Some((reason, denied, at)) => {
                *reason != e.reason || *denied != e.denied || now.duration_since(*at) >= self.every
            }
        };
        if warn {
            let suppressed = std::mem::take(&mut self.suppressed);
            self.last = Some((e.reason, e.denied.clone(), now));
            Verdict::Warn { suppressed }
        } else {
            self.suppressed += 1;
            Verdict::Quiet
        }
    }

    /// A success; returns the reason it was failing with, if it was (log the recovery).
    pub fn success(&mut self) -> Option<Reason> {
        self.suppressed = 0;
        self.last.take().map(|(r, _, _)| r)
    }
}

/// Failure reporting for one endpoint and one kind of connection: logs (rate-limited) and counts.
pub struct FailureLog {
    /// `host:port`.
    endpoint: String,
    /// What failed, for the log line ("redis connection", "release-notice subscription").
    what: &'static str,
    /// When to warn.
    limiter: Mutex<WarnLimiter>,
    /// `redlock_elector_redis_connect_errors_total`.
    metrics: Metrics,
}

impl FailureLog {
    /// A log for `endpoint`'s `what`.
    pub fn new(endpoint: &str, what: &'static str, metrics: Metrics) -> Self {
        FailureLog {
            endpoint: endpoint.to_string(),
            what,
            limiter: Mutex::new(WarnLimiter::new(WARN_EVERY)),
            metrics,
        }
    }

    /// Count a failure and warn if the limiter says so.
    pub fn failed(&self, e: &ConnectError) {
        self.metrics
            .connect_failed(self.endpoint.as_str(), e.reason.label());
        let verdict = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failure(e, Instant::now());
        if let Verdict::Warn { suppressed } = verdict {
            let headline = match &e.denied {
                Some(d) => format!("{} ({d} denied)", e.reason.label()),
                None => e.reason.label().to_string(),
            };
            tracing::warn!(
                endpoint = %self.endpoint,
                reason = e.reason.label(),
                denied = e.denied.as_deref().unwrap_or(""),
                error = %e.detail,
                fix = e.reason.fix(),
                suppressed,
                "{} failed: {headline}; retrying",
                self.what,
            );
        } else {
            tracing::debug!(endpoint = %self.endpoint, error = %e, "{} failed", self.what);
        }
    }

    /// Log the recovery at `info` if it was failing.
    pub fn succeeded(&self) {
        let was = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .success();
        if let Some(reason) = was {
            tracing::info!(
                endpoint = %self.endpoint,
                previous_reason = reason.label(),
                "{} works again",
                self.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(reason: Reason) -> ConnectError {
        ConnectError::new(reason, "x")
    }

    #[test]
    fn warns_first_on_change_then_every_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = WarnLimiter::new(s(30));
        assert_eq!(
            l.failure(&e(Reason::Auth), t0),
            Verdict::Warn { suppressed: 0 }
        );
        assert_eq!(l.failure(&e(Reason::Auth), t0 + s(1)), Verdict::Quiet);
        assert_eq!(l.failure(&e(Reason::Auth), t0 + s(29)), Verdict::Quiet);
        // A new reason warns at once.
        assert_eq!(
            l.failure(&e(Reason::Tls), t0 + s(29)),
            Verdict::Warn { suppressed: 2 }
        );
        assert_eq!(l.failure(&e(Reason::Tls), t0 + s(58)), Verdict::Quiet);
        assert_eq!(
            l.failure(&e(Reason::Tls), t0 + s(59)),
            Verdict::Warn { suppressed: 1 }
        );
        // Another denied command is a change too.
        let mut info = e(Reason::Noperm);
        info.denied = Some("info".into());
        let mut sub = e(Reason::Noperm);
        sub.denied = Some("subscribe".into());
        assert!(matches!(l.failure(&info, t0 + s(60)), Verdict::Warn { .. }));
        assert_eq!(l.failure(&info, t0 + s(61)), Verdict::Quiet);
        assert!(matches!(l.failure(&sub, t0 + s(62)), Verdict::Warn { .. }));
        // Recovery reports the reason once; the next failure warns again at once.
        assert_eq!(l.success(), Some(Reason::Noperm));
        assert_eq!(l.success(), None);
        assert_eq!(l.failure(&sub, t0 + s(63)), Verdict::Warn { suppressed: 0 });
    }
}

//! The subscription of a node: subscribe to the lease's release-notice channel and its
//! attestation channel, post every notice to the [`Notices`] and hand every attestation message
//! to the node's attestation task, and resubscribe with backoff when the session ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::Node;
use crate::backoff::Backoff;
use crate::redlock::Notices;
use crate::redlock::connect::{ConnectError, Reason};

/// First delay before resubscribing after a session ended.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(100);
/// Largest delay between subscription attempts.
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);
/// Each resubscribe delay is scaled by a factor from this range, so sidecars that lost a node
/// together do not resubscribe together.
const RESUBSCRIBE_JITTER: std::ops::Range<f64> = 0.5..1.5;

/// Why a subscription session ended.
#[derive(Debug, thiserror::Error)]
enum SessionEnd {
    /// Connecting or subscribing failed.
    #[error("{0}")]
    Failed(ConnectError),
    /// The server closed the subscription (the connection dropped).
    #[error("subscription closed")]
    Closed,
}

/// Marks the subscription up for as long as it lives: dropped when the session ends, however
/// it ends (closed, or cancelled at shutdown).
struct Subscribed<'a>(&'a AtomicBool);

impl<'a> Subscribed<'a> {
    fn new(flag: &'a AtomicBool) -> Self {
        flag.store(true, Ordering::SeqCst);
        Subscribed(flag)
    }
}

impl Drop for Subscribed<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

impl Node {
    /// A failed subscription attempt is news only while the main connection works: otherwise
    /// the connection's own warning already says why, and counting both would double the rate.
    fn subscription_failed(&self, e: ConnectError) -> SessionEnd {
        if self.is_up() {
            self.subscribe_failures.failed(&e);
        } else {
            tracing::debug!(endpoint = %self.endpoint.name, error = %e, "release-notice subscription failed");
        }
        SessionEnd::Failed(e)
    }

    /// Subscribe to every lease's release-notice channel and to `attest_channel` on this node
    /// (one connection, whatever the number of leases), post each notice to its lease's
    /// [`Notices`] and hand each attestation message to [`Node::attest`], reconnecting with
    /// backoff, until `stop` is cancelled.
    pub async fn subscribe(
        self: Arc<Self>,
        channels: Vec<(String, Arc<Notices>)>,
        attest_channel: String,
        stop: CancellationToken,
    ) {
        let mut backoff = Backoff::new(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX, RESUBSCRIBE_JITTER);
        loop {
            tokio::select! {
                r = self.session(&channels, &attest_channel) => {
                    if let Err(e) = r {
                        tracing::debug!(endpoint = %self.endpoint.name, error = %e, "release-notice subscription ended");
                    }
                }
                _ = stop.cancelled() => return,
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// One subscription: connect, subscribe, and post messages until the connection ends.
    async fn session(
        &self,
        channels: &[(String, Arc<Notices>)],
        attest_channel: &str,
    ) -> Result<(), SessionEnd> {
        let mut ps = tokio::time::timeout(self.connect_timeout, self.connector.pubsub())
            .await
            .map_err(|_| ConnectError::new(Reason::Timeout, "connect timed out"))
            .and_then(|r| r)
            .map_err(|e| self.subscription_failed(e))?;
        let names: Vec<&str> = channels
            .iter()
            .map(|(c, _)| c.as_str())
            .chain([attest_channel])
            .collect();
        ps.subscribe(&names).await.map_err(|e| {
            self.subscription_failed(ConnectError::from_redis(&e, self.connector.is_tls()))
        })?;
        self.subscribe_failures.succeeded();
        let _up = Subscribed::new(&self.subscribed);
        let mut stream = ps.into_on_message();
        while let Some(msg) = stream.next().await {
            let payload = msg.get_payload::<String>().unwrap_or_default();
            let channel = msg.get_channel_name();
            if channel == attest_channel {
                self.attestation_message(&payload);
            } else if let Some((_, notices)) = channels.iter().find(|(c, _)| c == channel) {
                notices.post(&payload);
            }
        }
        Err(SessionEnd::Closed)
    }
}

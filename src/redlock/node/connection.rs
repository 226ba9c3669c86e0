//! The connection lifecycle of a node: connect and verify (the handshake), reconnect with
//! backoff, and the watcher that re-reads INFO and the node's clock while connected.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::info::parse_info;
use super::{Node, lock};
use crate::backoff::Backoff;
use crate::redlock::clock;
use crate::redlock::connect::{ConnectError, Reason};
use crate::redlock::scripts::scripts;

/// How often a connected node's INFO is read again (uptime, run_id, role, eviction policy).
const INFO_REFRESH: Duration = Duration::from_secs(1);

/// First delay before reconnecting after a failed connect or handshake.
const RECONNECT_MIN: Duration = Duration::from_millis(50);
/// Largest delay between reconnect attempts.
const RECONNECT_MAX: Duration = Duration::from_secs(2);
/// Each reconnect delay is scaled by a factor from this range, so sidecars that lost a node
/// together do not reconnect together.
const RECONNECT_JITTER: std::ops::Range<f64> = 0.5..1.5;

/// A connection whose handshake ran, and the server it reached.
#[derive(Clone)]
pub(super) struct Verified {
    /// Cloning a multiplexed connection is cheap.
    pub(super) conn: MultiplexedConnection,
    /// run_id of the server, from the handshake's INFO: the clock readings' owner.
    pub(super) run_id: Arc<str>,
}

/// The reply to a refresh pipeline: `[INFO,] TIME`.
struct RefreshReply {
    /// The INFO text, when it was due.
    info: Option<String>,
    /// The node's `TIME` in µs, if readable.
    node_us: Option<i64>,
}

impl RefreshReply {
    /// `None` when the reply does not have the expected shape (the connection is then dropped).
    fn parse(items: Vec<Value>, with_info: bool) -> Option<Self> {
        let mut items = items.into_iter();
        let info = match with_info {
            true => Some(redis::from_redis_value::<String>(items.next()?).ok()?),
            false => None,
        };
        let (secs, micros) = redis::from_redis_value::<(String, String)>(items.next()?).ok()?;
        Some(RefreshReply {
            info,
            node_us: clock::parse_time(&secs, &micros),
        })
    }
}

/// What the handshake read on a fresh connection before publishing it.
struct Handshake {
    /// The connection, scripts loaded.
    conn: MultiplexedConnection,
    /// The INFO text.
    info: String,
    /// The node's `TIME` in µs, if readable.
    node_us: Option<i64>,
    /// When `TIME` was sent.
    sent: Instant,
    /// When its reply arrived.
    received: Instant,
}

impl Node {
    /// How often [`Node::maintain`] reads the node's clock: a third of the clock window (at most
    /// a second), so that a node stays watched between replies ([`clock::Seen::Resumed`] after a
    /// gap longer than the window).
    fn clock_refresh(&self) -> Duration {
        Duration::from_micros((self.clock_policy.window_us / 3).max(1) as u64).min(INFO_REFRESH)
    }

    /// Keep a verified connection up and the health fresh until `stop` is cancelled: connect
    /// with jittered exponential backoff, re-check INFO every second (also detects a silent
    /// server) and the node's clock every `clock_refresh`.
    pub async fn maintain(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX, RECONNECT_JITTER);
        let mut info_read: Option<Instant> = None;
        loop {
            if stop.is_cancelled() {
                return;
            }
            let connected = lock(&self.conn).clone();
            let wait = match connected {
                None => match self.handshake().await {
                    Ok(()) => {
                        self.connect_failures.succeeded();
                        backoff.reset();
                        info_read = Some(Instant::now());
                        self.clock_refresh()
                    }
                    Err(e) => {
                        self.connect_failures.failed(&e);
                        backoff.next_delay()
                    }
                },
                Some(verified) => {
                    self.refresh(verified, &mut info_read).await;
                    self.clock_refresh()
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.broken.notified() => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Read the node's clock, and INFO when due (`info_read` a second ago or more), in one
    /// round trip; a reply of the wrong shape or none drops the connection.
    async fn refresh(&self, verified: Verified, info_read: &mut Option<Instant>) {
        let Verified { mut conn, run_id } = verified;
        let sent = Instant::now();
        let with_info = info_read.is_none_or(|at| sent - at >= INFO_REFRESH);
        let mut refresh = redis::pipe();
        if with_info {
            refresh.cmd("INFO");
        }
        refresh.cmd("TIME");
        let reply = tokio::time::timeout(
            self.connect_timeout,
            refresh.query_async::<Vec<Value>>(&mut conn),
        )
        .await;
        let received = Instant::now();
        match reply
            .ok()
            .and_then(|r| r.ok())
            .and_then(|items| RefreshReply::parse(items, with_info))
        {
            Some(reply) => {
                if let Some(text) = reply.info {
                    *info_read = Some(sent);
                    self.apply_info(&parse_info(&text));
                }
                if let Some(t) = reply.node_us {
                    self.observe(&run_id, t, sent, received);
                }
            }
            None => self.mark_broken(),
        }
    }

    /// Connect, verify (INFO, `SCRIPT LOAD`, `TIME`) within twice the connect timeout, take the
    /// readings, and only then publish the connection for voting.
    async fn handshake(&self) -> Result<(), ConnectError> {
        let done = tokio::time::timeout(self.connect_timeout * 2, self.verify())
            .await
            .map_err(|_| ConnectError::new(Reason::Timeout, "handshake timed out"))??;
        let info = parse_info(&done.info);
        self.apply_info(&info);
        let node_us = done
            .node_us
            .ok_or_else(|| ConnectError::new(Reason::Other, "unreadable TIME reply"))?;
        self.observe(&info.run_id, node_us, done.sent, done.received);
        *lock(&self.conn) = Some(Verified {
            conn: done.conn,
            run_id: info.run_id.into(),
        });
        self.metrics.set_redis_up(&self.endpoint.name, true);
        tracing::info!(endpoint = %self.endpoint.name, "redis connection verified");
        Ok(())
    }

    /// The handshake's commands on a new connection.
    async fn verify(&self) -> Result<Handshake, ConnectError> {
        let cfg = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let tls = self.connector.is_tls();
        let classify = |e: redis::RedisError| ConnectError::from_redis(&e, tls);
        let mut conn = self.connector.multiplexed(cfg).await?;
        let info: String = redis::cmd("INFO")
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        for s in scripts().all() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(s.source)
                .query_async(&mut conn)
                .await
                .map_err(classify)?;
            if sha != s.sha {
                return Err(ConnectError::new(Reason::Other, "script sha mismatch"));
            }
        }
        let sent = Instant::now();
        let (secs, micros): (String, String) = redis::cmd("TIME")
            .query_async(&mut conn)
            .await
            .map_err(classify)?;
        Ok(Handshake {
            conn,
            info,
            node_us: clock::parse_time(&secs, &micros),
            sent,
            received: Instant::now(),
        })
    }
}

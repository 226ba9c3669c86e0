//! The connection lifecycle of a node: connect and verify (the handshake), reconnect with
//! backoff, and the watcher that re-reads INFO and the node's clock while connected.

use std::sync::Arc;
use std::sync::atomic::Ordering;
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

/// How often a connected node's INFO is read again (uptime, run_id, role, eviction policy, and
/// a silent server): with the clock reading, every third of the clock window, but at least this
/// long apart (a short ttl would otherwise re-read a long text many times a second)...
const INFO_REFRESH_MIN: Duration = Duration::from_secs(1);
/// ...and at most this long apart (a long ttl must not leave a demoted or evicting node, or a
/// hung connection, unnoticed for long).
const INFO_REFRESH_MAX: Duration = Duration::from_secs(5);

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
    /// Which connection of this node it is ([`Node::generation`]): commands on one connection
    /// run in order, on two in any order.
    pub(super) generation: u64,
}

/// The reply to a refresh pipeline: `[INFO,] [TIME]`.
struct RefreshReply {
    /// The INFO text, when it was due.
    info: Option<String>,
    /// The node's `TIME` in µs, when it was due and is readable.
    node_us: Option<i64>,
}

impl RefreshReply {
    /// `None` when the reply does not have the expected shape (the connection is then dropped).
    fn parse(items: Vec<Value>, due: Due) -> Option<Self> {
        let mut items = items.into_iter();
        let info = match due.info {
            true => Some(redis::from_redis_value::<String>(items.next()?).ok()?),
            false => None,
        };
        let node_us = match due.clock {
            true => {
                let (secs, micros) =
                    redis::from_redis_value::<(String, String)>(items.next()?).ok()?;
                clock::parse_time(&secs, &micros)
            }
            false => None,
        };
        Some(RefreshReply { info, node_us })
    }
}

/// What a refresh reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Due {
    /// INFO: its period has passed.
    info: bool,
    /// `TIME`: no reply has read the node's clock for a clock period.
    clock: bool,
}

/// When the maintenance task looks again, and what is due then: the clock when the latest
/// reading (by any reply, or asked by this task) is `clock_every` old, INFO when the latest
/// INFO is `info_every` old. Pure, so the cadence is tested without a server.
fn next_refresh(
    now: Instant,
    clock_read: Option<Instant>,
    info_read: Option<Instant>,
    clock_every: Duration,
    info_every: Duration,
) -> (Instant, Due) {
    let clock_at = clock_read.map_or(now, |at| at + clock_every);
    let info_at = info_read.map_or(now, |at| at + info_every);
    let at = clock_at.min(info_at).max(now);
    (
        at,
        Due {
            info: info_at <= at,
            clock: clock_at <= at,
        },
    )
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
    /// How often the node's clock must be read: a third of the clock window, so that a node
    /// stays watched between replies ([`clock::Seen::Resumed`] after a gap longer than the
    /// window) with room for two missed readings. Any reply's `TIME` counts (scripts return it
    /// first): [`Node::maintain`] asks for one only when none came for this long.
    pub fn clock_refresh(&self) -> Duration {
        Duration::from_micros((self.clock_policy.window_us / 3).max(1) as u64)
    }

    /// How often INFO is read again: with the clock's period, within
    /// [`INFO_REFRESH_MIN`]..=[`INFO_REFRESH_MAX`].
    fn info_refresh(&self) -> Duration {
        self.clock_refresh()
            .clamp(INFO_REFRESH_MIN, INFO_REFRESH_MAX)
    }

    /// When the latest clock reading was sent, by any reply.
    fn last_reading(&self) -> Option<Instant> {
        lock(&self.health).last_reading
    }

    /// Keep a verified connection up and the health fresh until `stop` is cancelled: connect
    /// with jittered exponential backoff, re-check INFO every `info_refresh` (also detects a
    /// silent server) and read the node's clock when no reply has for `clock_refresh`.
    pub async fn maintain(self: Arc<Self>, stop: CancellationToken) {
        let mut backoff = Backoff::new(RECONNECT_MIN, RECONNECT_MAX, RECONNECT_JITTER);
        let mut info_read: Option<Instant> = None;
        // When this task last asked for `TIME`: a reply that carried none must not make it ask
        // again at once.
        let mut clock_asked: Option<Instant> = None;
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
                        clock_asked = None;
                        self.until_next(clock_asked, info_read).0
                    }
                    Err(e) => {
                        self.connect_failures.failed(&e);
                        backoff.next_delay()
                    }
                },
                Some(verified) => {
                    let (wait, due) = self.until_next(clock_asked, info_read);
                    if wait.is_zero() {
                        if due.clock {
                            clock_asked = Some(Instant::now());
                        }
                        self.refresh(verified, due, &mut info_read).await;
                        self.until_next(clock_asked, info_read).0
                    } else {
                        wait
                    }
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.broken.notified() => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// How long until the next refresh, and what it reads then.
    fn until_next(
        &self,
        clock_asked: Option<Instant>,
        info_read: Option<Instant>,
    ) -> (Duration, Due) {
        let now = Instant::now();
        let clock_read = self.last_reading().max(clock_asked);
        let (at, due) = next_refresh(
            now,
            clock_read,
            info_read,
            self.clock_refresh(),
            self.info_refresh(),
        );
        (at - now, due)
    }

    /// Read what is due (INFO, the node's clock) in one round trip; a reply of the wrong shape
    /// or none drops the connection.
    async fn refresh(&self, verified: Verified, due: Due, info_read: &mut Option<Instant>) {
        let Verified {
            mut conn, run_id, ..
        } = verified;
        let sent = Instant::now();
        let mut refresh = redis::pipe();
        if due.info {
            refresh.cmd("INFO");
        }
        if due.clock {
            refresh.cmd("TIME");
        }
        let reply = tokio::time::timeout(
            self.connect_timeout,
            refresh.query_async::<Vec<Value>>(&mut conn),
        )
        .await;
        let received = Instant::now();
        match reply
            .ok()
            .and_then(|r| r.ok())
            .and_then(|items| RefreshReply::parse(items, due))
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
            generation: self.generation.fetch_add(1, Ordering::SeqCst) + 1,
        });
        self.metrics.set_redis_up(&self.endpoint.name, true);
        // A new connection often means a new watch: ask for a vouch now, not a refresh later.
        self.attest_wake.notify_one();
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

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn the_clock_is_read_only_when_no_reply_read_it_for_a_period() {
        let t0 = Instant::now();
        // A follower's watch read the clock 1 s ago; INFO was read 2 s ago: INFO is due first.
        let (at, due) = next_refresh(t0, Some(t0 - S(1)), Some(t0 - S(2)), S(3), S(3));
        assert_eq!(at, t0 + S(1));
        assert_eq!(
            due,
            Due {
                info: true,
                clock: false
            }
        );
        // No reading for a period: the clock is due now, INFO later.
        let (at, due) = next_refresh(t0, Some(t0 - S(3)), Some(t0), S(3), S(3));
        assert_eq!(at, t0);
        assert_eq!(
            due,
            Due {
                info: false,
                clock: true
            }
        );
        // Nothing read yet: both at once.
        let (at, due) = next_refresh(t0, None, None, S(3), S(3));
        assert_eq!(
            (at, due),
            (
                t0,
                Due {
                    info: true,
                    clock: true
                }
            )
        );
    }
}

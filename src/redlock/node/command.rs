//! Commands on a node: `EVALSHA` over the verified connection with the per-node timeout, the
//! clock reading every script reply carries, and the latency and error metrics.

use std::sync::Arc;

use redis::Value;
use tokio::time::Instant;

use super::connection::Verified;
use super::{Node, lock};
use crate::redlock::connect::{ConnectError, Reason};
use crate::redlock::scripts::Script;

/// How one command on one node ended.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// No verified connection right now (connecting, or backing off).
    #[error("no verified connection")]
    NotConnected,
    /// No reply within the per-node timeout. The command may still have run: callers treat the
    /// outcome as unknown (never counted, always cleaned up).
    #[error("no reply within the timeout")]
    Timeout,
    /// Redis or the connection answered with an error.
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    /// The reply did not have the script's shape (no leading `TIME`).
    #[error("malformed reply (no leading TIME)")]
    Malformed,
}

impl CommandError {
    /// Every `kind` label, so that each series exists (at 0) from the start.
    pub const KINDS: [&'static str; 3] = ["not_connected", "timeout", "error"];

    /// The metric label (`kind` of `redis_command_errors`), one of [`Self::KINDS`].
    fn kind(&self) -> &'static str {
        match self {
            CommandError::NotConnected => "not_connected",
            CommandError::Timeout => "timeout",
            CommandError::Redis(_) | CommandError::Malformed => "error",
        }
    }
}

/// A script's reply with the reading it carried.
#[derive(Debug)]
pub struct Reply {
    /// The reply after the leading `TIME`.
    pub items: Vec<Value>,
    /// The server (`run_id`) behind the connection that answered.
    pub run_id: Arc<str>,
    /// When the reply arrived.
    pub received: Instant,
    /// The reading's blind band ([`crate::redlock::clock::Watch::band_us`]): a vote counted at
    /// this reading must make room for a step of the node's clock this large.
    pub band: std::time::Duration,
}

impl Node {
    /// Run a script by SHA with the per-node timeout; records latency and errors. The node's
    /// `TIME`, which every script returns first, is taken as a clock reading (before the caller
    /// looks at the vote, so a reply that reveals a jump never counts); the rest is returned.
    pub async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Vec<Value>, CommandError> {
        self.eval_read(script, keys, args).await.map(|r| r.items)
    }

    /// [`Node::eval`], also returning which server answered and when the reply arrived: the
    /// reading a release proof is taken at ([`Node::prove`]).
    pub async fn eval_read(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, CommandError> {
        self.eval_read_on(None, script, keys, args).await
    }

    /// [`Node::eval_read`] on connection `generation` ([`Node::generation`]) only: when another
    /// connection has replaced it, [`CommandError::NotConnected`]. A lock command is bound to
    /// the connection its term log counted it on ([`crate::redlock::proof`]).
    pub async fn eval_read_on(
        &self,
        generation: Option<u64>,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, CommandError> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.sha).arg(keys.len()).arg(keys).arg(args);
        self.eval_cmd(generation, script.name, &cmd).await
    }

    /// Run a script call (`cmd`, metric label `name`) on connection `generation` (any, when
    /// `None`), taking the leading `TIME` of its reply as a clock reading.
    pub(super) async fn eval_cmd(
        &self,
        generation: Option<u64>,
        name: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<Reply, CommandError> {
        let started = Instant::now();
        let result = self.run(cmd, generation).await.and_then(|(value, run_id)| {
            let Value::Array(mut items) = value else {
                return Err(CommandError::Malformed);
            };
            match items.first() {
                Some(&Value::Int(node_us)) => {
                    let received = Instant::now();
                    let band = self.observe(&run_id, node_us, started, received);
                    items.remove(0);
                    Ok(Reply {
                        items,
                        run_id,
                        received,
                        band,
                    })
                }
                _ => Err(CommandError::Malformed),
            }
        });
        self.record(name, started, &result);
        result
    }

    async fn run(
        &self,
        cmd: &redis::Cmd,
        generation: Option<u64>,
    ) -> Result<(Value, Arc<str>), CommandError> {
        let Some(Verified {
            mut conn,
            run_id,
            generation: current,
        }) = lock(&self.conn).clone()
        else {
            return Err(CommandError::NotConnected);
        };
        if generation.is_some_and(|g| g != current) {
            return Err(CommandError::NotConnected);
        }
        match tokio::time::timeout(self.timeout, cmd.query_async::<Value>(&mut conn)).await {
            Err(_) => Err(CommandError::Timeout),
            Ok(Err(e)) => {
                if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                    self.mark_broken();
                }
                // An ACL that lets the handshake through but denies a script (or a command
                // inside one) makes the endpoint as unusable as a failed connect.
                let classified = ConnectError::from_redis(&e, self.connector.is_tls());
                if classified.reason == Reason::Noperm {
                    self.connect_failures.failed(&classified);
                }
                Err(CommandError::Redis(e))
            }
            Ok(Ok(v)) => Ok((v, run_id)),
        }
    }

    fn record<T>(&self, command: &'static str, started: Instant, result: &Result<T, CommandError>) {
        let name = self.endpoint.name.as_str();
        match &result {
            Ok(_) => self
                .metrics
                .command_finished(name, command, started.elapsed()),
            Err(e) => self.metrics.command_failed(name, command, e.kind()),
        }
    }

    /// Drop the connection a command saw break, and wake the maintenance task to reconnect.
    /// Drop the connection for good (shutdown, after the last release): its driver task ends
    /// once the commands still holding a clone of it are done. [`Node::maintain`] has ended by
    /// then, so nothing reconnects.
    pub fn disconnect(&self) {
        lock(&self.conn).take();
    }

    pub(super) fn mark_broken(&self) {
        if lock(&self.conn).take().is_some() {
            self.metrics.set_redis_up(&self.endpoint.name, false);
            tracing::warn!(endpoint = %self.endpoint.name, "redis connection lost; reconnecting");
        }
        self.broken.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_listed_for_the_metrics_start_values() {
        for e in [
            CommandError::NotConnected,
            CommandError::Timeout,
            CommandError::Malformed,
        ] {
            assert!(CommandError::KINDS.contains(&e.kind()), "{e:?}");
        }
    }
}

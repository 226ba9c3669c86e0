//! Batching: with several leases in one process (`lease.names`, `lease.shards`), the renew,
//! record and watch rounds of every lease that fall due together go to a node as one
//! [`scripts::BATCH`] call instead of one call per lease. The electors line their timers up on
//! a process-wide grid ([`crate::elector::settings::Timing::grid`]), so the rounds of one period
//! reach a node within [`WINDOW`] of each other.
//!
//! A batched op is, to its lease, the same command as the script it names: the same body on the
//! same keys and arguments, bound to the connection generation its term log counted it on
//! ([`Node::eval_read_on`]), with the reply's reading taken once for the batch (before any
//! caller looks at its vote) and given to every op. What the window adds is a delay of at most
//! [`WINDOW`] before the command goes out: the caller's round began before it (its T1), so its
//! validity and deadline only get more conservative, and a lease's term log treats an op still
//! in the window as any unanswered command (no release proof for that node until it is
//! answered). Acquire and release never wait here: they go out at once.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::oneshot;

use super::command::{CommandError, Reply};
use super::{Node, lock};
use crate::redlock::scripts::{Script, scripts};

/// How long the first op of a batch waits for the others: the electors' timers of one grid
/// instant fire within the same timer tick, so they are all queued well within it.
pub const WINDOW: Duration = Duration::from_millis(1);

/// At most this many ops go in one call: 32 shards' rounds and the round of the record they
/// share ([`crate::redlock::SharedRecords`]), so a sidecar with 32 × k shards sends k calls per
/// period, not k + 1 with the record's alone in the last (a sidecar with 256 shards sends 8).
pub const MAX_OPS: usize = 33;

/// One lease's op waiting for its batch.
pub(super) struct Op {
    generation: Option<u64>,
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<String>,
    reply: oneshot::Sender<Result<Reply, CommandError>>,
}

/// The ops queued on a node for the next batch.
#[derive(Default)]
pub(super) struct Queue(std::sync::Mutex<Vec<Op>>);

impl Node {
    /// [`Node::eval_read_on`], joined with the other leases' ops that reach this node within
    /// [`WINDOW`] when the process batches (several leases); at once otherwise.
    pub async fn eval_joined(
        self: &Arc<Self>,
        generation: Option<u64>,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, CommandError> {
        let Some(queue) = &self.batch else {
            return self.eval_read_on(generation, script, keys, args).await;
        };
        let (tx, rx) = oneshot::channel();
        let first = {
            let mut q = lock(&queue.0);
            q.push(Op {
                generation,
                script,
                keys: keys.iter().map(|k| k.to_string()).collect(),
                args: args.iter().map(|a| a.to_string()).collect(),
                reply: tx,
            });
            q.len() == 1
        };
        if first {
            // A task of its own: a caller that stops waiting (a round dropped before this
            // node answered, a renewal cut at its deadline) must not strand the others' ops.
            let node = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(WINDOW).await;
                node.flush().await;
            });
        }
        rx.await.unwrap_or(Err(CommandError::NotConnected))
    }

    /// Send the queued ops, one call per connection generation they are bound to.
    async fn flush(&self) {
        let Some(queue) = &self.batch else { return };
        let mut ops = std::mem::take(&mut *lock(&queue.0));
        // An op whose caller stopped waiting stays unsent: a renewal cut at its deadline is
        // followed at once by the release, and sent after it would find the key missing and
        // heal it (a ttl with nobody leading). Its term log already counts it unanswered, and
        // each op carries its own keys, arguments and reply, so dropping one changes no
        // other's.
        ops.retain(|op| !op.reply.is_closed());
        while !ops.is_empty() {
            // Ops bound to a connection go out on it; the unbound ones (records, watches) go
            // with the first call.
            let generation = ops.iter().find_map(|op| op.generation);
            let (now, later): (Vec<Op>, Vec<Op>) = ops
                .into_iter()
                .partition(|op| op.generation.is_none() || op.generation == generation);
            ops = later;
            // Bounded calls: each runs as one atomic step on the node, which serves nobody
            // else meanwhile, and its reply is read before any of its ops is answered.
            // The calls go out together (pipelined on the connection).
            let mut now = now.into_iter().peekable();
            let mut calls = Vec::new();
            while now.peek().is_some() {
                let chunk: Vec<Op> = now.by_ref().take(MAX_OPS).collect();
                calls.push(self.send_batch(generation, chunk));
            }
            futures::future::join_all(calls).await;
        }
    }

    async fn send_batch(&self, generation: Option<u64>, ops: Vec<Op>) {
        if let [_] = ops.as_slice() {
            // Alone in its window: its own script, as without batching.
            let op = ops.into_iter().next().expect("one op");
            let keys: Vec<&str> = op.keys.iter().map(String::as_str).collect();
            let args: Vec<&str> = op.args.iter().map(String::as_str).collect();
            let r = self
                .eval_read_on(op.generation, op.script, &keys, &args)
                .await;
            let _ = op.reply.send(r);
            return;
        }
        let batch = &scripts().batch;
        let mut cmd = redis::cmd("EVALSHA");
        let n_keys: usize = ops.iter().map(|op| op.keys.len()).sum();
        cmd.arg(&batch.sha).arg(n_keys);
        for op in &ops {
            cmd.arg(&op.keys);
        }
        cmd.arg(ops.len());
        for op in &ops {
            cmd.arg(op.script.name)
                .arg(op.keys.len())
                .arg(op.args.len())
                .arg(&op.args);
        }
        match self.eval_cmd(generation, batch.name, &cmd).await {
            Ok(reply) => {
                let mut items = reply.items.into_iter();
                for op in ops {
                    let r = match items.next() {
                        Some(Value::Array(items)) => Ok(Reply {
                            items,
                            run_id: reply.run_id.clone(),
                            received: reply.received,
                            band: reply.band,
                        }),
                        _ => Err(CommandError::Malformed),
                    };
                    let _ = op.reply.send(r);
                }
            }
            Err(e) => {
                for op in ops {
                    let _ = op.reply.send(Err(e.copy()));
                }
            }
        }
    }
}

impl CommandError {
    /// The same outcome for every op of a failed batch.
    fn copy(&self) -> CommandError {
        match self {
            CommandError::NotConnected => CommandError::NotConnected,
            CommandError::Timeout => CommandError::Timeout,
            CommandError::Malformed => CommandError::Malformed,
            CommandError::Redis(e) => CommandError::Redis(redis::RedisError::from((
                e.kind(),
                "batched script failed",
                e.to_string(),
            ))),
        }
    }
}

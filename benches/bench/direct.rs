//! The async floor: what a hand-written client reaches with *our* scripts, and what carrying
//! the node's `TIME` in every reply costs.

use std::time::Instant;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redlock_elector::redlock::{math, scripts};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::floors::ScriptedCommands;
use crate::report::{ms, pct};
use crate::resp::{self, Replies};

/// What a hand-written async client reaches with *our* scripts: tokio sockets with readiness
/// waits (no busy-polling), no driver task per connection, no per-command timer, each round
/// decided at the quorum-th reply, and the library's acquire and release scripts with the same
/// arguments (a rising fencing proposal, so every grant also writes the epoch). It answers
/// "would replacing redis-rs's multiplexed connection meet the target?". Replies still owed by
/// slower nodes are collected untimed between runs, as for `BareQuorum`.
pub struct Direct {
    /// One connection per node.
    conns: Vec<DirectConn>,
    /// The acquire and release commands.
    commands: ScriptedCommands,
}

/// One node's connection of [`Direct`].
struct DirectConn {
    /// The socket, `TCP_NODELAY`.
    stream: tokio::net::TcpStream,
    /// Replies read and not yet taken.
    replies: Replies,
    /// Replies still owed: a round ends at the quorum, the rest are read later.
    owed: usize,
}

impl DirectConn {
    async fn send(&mut self, cmd: &[u8]) {
        self.stream.write_all(cmd).await.expect("direct write");
        self.owed += 1;
    }

    /// Read until every reply owed on this connection is in; the last is the latest command's.
    /// Cancel-safe: a dropped call leaves the rest owed to the next one.
    async fn reply(&mut self) -> Vec<u8> {
        let mut last = Vec::new();
        loop {
            while let Some(r) = self.replies.take() {
                last = r;
                self.owed -= 1;
            }
            if self.owed == 0 {
                return last;
            }
            let n = self
                .stream
                .read_buf(&mut self.replies.buf)
                .await
                .expect("direct read");
            assert!(n > 0, "direct client: node closed the connection");
        }
    }

    async fn call(&mut self, cmd: &[u8]) -> Vec<u8> {
        self.send(cmd).await;
        self.reply().await
    }
}

/// The scripts (by SHA) a [`Direct::time_cost`] sample runs.
struct Shas<'a> {
    /// Takes the lease and proposes the fencing epoch.
    acquire: &'a str,
    /// Extends the lease.
    renew: &'a str,
    /// Gives the lease back.
    release: &'a str,
}

impl Direct {
    pub async fn connect(urls: &[String], key: &str) -> Direct {
        let mut conns = Vec::new();
        for u in urls {
            let stream = tokio::net::TcpStream::connect(u.trim_start_matches("redis://"))
                .await
                .expect("direct client connect");
            stream.set_nodelay(true).expect("TCP_NODELAY");
            conns.push(DirectConn {
                stream,
                replies: Replies::default(),
                owed: 0,
            });
        }
        Direct {
            conns,
            commands: ScriptedCommands::new(key),
        }
    }

    /// Send `cmd` to every node; return at the quorum-th reply, each of which must have `:1`
    /// at line `yes_line` (the grant: `*3 :time :1 :epoch` has it at 2, a bare `:1` at 0).
    async fn round(&mut self, cmd: &[u8], yes_line: usize) {
        let quorum = math::quorum(self.conns.len());
        // Every node gets the command before any reply is read: a reply read early must not
        // end the round before a slower node was even sent to.
        for c in &mut self.conns {
            c.send(cmd).await;
        }
        let mut pending: FuturesUnordered<_> = self.conns.iter_mut().map(|c| c.reply()).collect();
        let mut yes = 0;
        while let Some(reply) = pending.next().await {
            assert!(
                resp::says_yes(&reply, yes_line),
                "direct client: unexpected reply {:?}",
                String::from_utf8_lossy(&reply)
            );
            yes += 1;
            if yes == quorum {
                return;
            }
        }
    }

    pub async fn acquire_release(&mut self) {
        let (take, give) = self.commands.next();
        self.round(&take, 2).await;
        self.round(&give, 2).await;
    }

    /// The cost of carrying the node's `TIME` in every reply: p50 (ms) of an acquire round and
    /// of a renew round with the scripts as they were before ([`NO_TIME`]) and as they are,
    /// interleaved on the same connections: `[acquire before, acquire after, renew before,
    /// renew after]`.
    pub async fn time_cost(&mut self, key: &str, iters: usize) -> [f64; 4] {
        let old: Vec<String> = NO_TIME
            .iter()
            .map(|src| redis::Script::new(src).get_hash().to_string())
            .collect();
        for src in NO_TIME {
            let load = resp::command(&["SCRIPT", "LOAD", src]);
            for c in &mut self.conns {
                c.call(&load).await;
            }
        }
        let new = scripts::scripts();
        let before = Shas {
            acquire: &old[0],
            renew: &old[1],
            release: &old[2],
        };
        let after = Shas {
            acquire: &new.acquire.sha,
            renew: &new.renew.sha,
            release: &new.release.sha,
        };
        let mut samples: [Vec<f64>; 4] = Default::default();
        for i in 0..iters {
            for (k, shas) in [&before, &after].into_iter().enumerate() {
                let (acquire, renew) = self.time_sample(key, i, shas, k == 1).await;
                samples[k].push(acquire);
                samples[2 + k].push(renew);
            }
        }
        samples.map(|s| pct(&s, 0.5))
    }

    /// One acquire, renew, release with the scripts `shas`, today's (`with_time`) or the ones
    /// before `TIME`: the acquire and the renew round in ms.
    async fn time_sample(
        &mut self,
        key: &str,
        i: usize,
        shas: &Shas<'_>,
        with_time: bool,
    ) -> (f64, f64) {
        let Shas {
            acquire,
            renew,
            release,
        } = *shas;
        let epoch_key = format!("{key}:epoch");
        let next_key = format!("{key}:next");
        let value = format!("bench#{i}");
        // Today's scripts also take the reservation key (named successors) and the identity /
        // successor arguments; the reservation is never set here.
        #[rustfmt::skip]
        let (take, give) = if with_time {
            (
                resp::command(&["EVALSHA", acquire, "3", key, &epoch_key, &next_key, &value, "1000", "0", "take", "bench"]),
                resp::command(&["EVALSHA", release, "2", key, &next_key, &value, "", "", "", "0"]),
            )
        } else {
            (
                resp::command(&["EVALSHA", acquire, "2", key, &epoch_key, &value, "1000", "0"]),
                resp::command(&["EVALSHA", release, "1", key, &value, ""]),
            )
        };
        let keep = resp::command(&["EVALSHA", renew, "2", key, &epoch_key, &value, "1000", "0"]);
        // The grant: `*3 :time :1 :epoch` now, `*2 :1 :epoch` before; renew and release:
        // `*2 :time :1` now, `:1` before.
        let (acq_line, other_line) = if with_time { (2, 2) } else { (1, 0) };
        let t0 = Instant::now();
        self.round(&take, acq_line).await;
        let t1 = Instant::now();
        self.round(&keep, other_line).await;
        let t2 = Instant::now();
        self.round(&give, other_line).await;
        self.settle().await;
        (ms(t1 - t0), ms(t2 - t1))
    }

    /// Collect every reply still owed (between timed runs).
    pub async fn settle(&mut self) {
        let ping = resp::command(&["PING"]);
        for c in &mut self.conns {
            c.call(&ping).await;
        }
    }
}

/// The acquire, renew and release scripts as they were before every reply carried the node's
/// `TIME` (`d029b92`): the "before" of [`Direct::time_cost`].
const NO_TIME: [&str; 3] = [
    r#"
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if tonumber(ARGV[3]) > e then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return {1, e}
end
return {0, redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]), e}
"#,
    r#"
local v = redis.call('GET', KEYS[1])
local r
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  r = 1
elseif not v then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  r = 2
else
  return 0
end
local e = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if tonumber(ARGV[3]) > e then
  redis.call('SET', KEYS[2], ARGV[3])
end
return r
"#,
    r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[1])
  end
  return 1
end
return 0
"#,
];

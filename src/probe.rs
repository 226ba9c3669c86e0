//! `redlock-elector check-config --connect FILE`: a preflight against the real endpoints.
//!
//! For every endpoint, in parallel, with the real settings (TLS, client certificate, user,
//! password): connect, `INFO` (role, eviction policy, uptime → quarantine), `SCRIPT LOAD` of every
//! script, `SUBSCRIBE` to the lease's release channel, then each script once on a probe key
//! beside the lease key (`<key>:probe`, which expires by itself) — the release script publishes
//! a test notice on the lease's channel, and the probe waits for it on its subscription — and a
//! read of the fencing epoch key. Every command the sidecar sends is thereby tried under the
//! same ACL. The report is one line per endpoint (ok, or the classified reason with the fix) and
//! the quorum verdict; YAML comments, so `check-config`'s output stays a YAML document.
//!
//! The test notice wakes followers of a running lease to retry at once: one extra attempt each,
//! harmless. The lock and epoch keys are only read.

use std::time::Duration;

use futures::StreamExt;
use redis::AsyncConnectionConfig;
use tokio::time::Instant;

use crate::config::{Config, Endpoint, fmt_dur};
use crate::redlock::candidates::notice_payload;
use crate::redlock::connect::{ConnectError, Connector, Reason};
use crate::redlock::node::{Exclusion, classify, parse_info};
use crate::redlock::scripts::{Script, Scripts, scripts};
use crate::redlock::{math, new_value};

/// What the probe found on one endpoint.
#[derive(Debug)]
pub struct Probe {
    /// `host:port`.
    pub endpoint: String,
    /// The findings, or why the endpoint cannot be used.
    pub result: Result<Healthy, ConnectError>,
}

/// An endpoint on which every step worked.
#[derive(Debug)]
pub struct Healthy {
    /// Connect + handshake + probe commands.
    pub took: Duration,
    /// `INFO` uptime.
    pub uptime_secs: u64,
    /// Why it does not count toward a quorum, if it does not (at the moment of probing).
    pub exclusion: Option<Exclusion>,
    /// The fencing epoch stored on the node (0 if none).
    pub epoch: u64,
}

impl Probe {
    /// Whether the endpoint can count toward a quorum (now, or once a restart quarantine ends).
    pub fn usable(&self) -> bool {
        matches!(&self.result, Ok(h) if matches!(h.exclusion, None | Some(Exclusion::Restarted { .. })))
    }

    /// The report line.
    pub fn line(&self, now: Instant) -> String {
        match &self.result {
            Ok(h) => {
                let state = match &h.exclusion {
                    None => "counts toward the quorum".to_string(),
                    Some(Exclusion::Restarted { until }) => format!(
                        "quarantined for {} more (restarted {}s ago); counts after that",
                        fmt_dur(Duration::from_millis(
                            until.saturating_duration_since(now).as_millis() as u64
                        )),
                        h.uptime_secs
                    ),
                    Some(Exclusion::Replica) => {
                        "NEVER counts: it is a replica; point the sidecar at independent masters"
                            .to_string()
                    }
                    Some(Exclusion::Evicting(p)) => format!(
                        "NEVER counts: maxmemory-policy {p} can evict the lock; set noeviction"
                    ),
                };
                format!(
                    "{}: ok ({} ms; uptime {}s; epoch {}; {state})",
                    self.endpoint,
                    h.took.as_millis(),
                    h.uptime_secs,
                    h.epoch
                )
            }
            Err(e) => format!("{}: {e}; fix: {}", self.endpoint, e.reason.fix()),
        }
    }
}

/// Probe every endpoint in parallel.
pub async fn probe_all(config: &Config) -> Vec<Probe> {
    futures::future::join_all(config.redis.endpoints.iter().map(|ep| async move {
        Probe {
            endpoint: ep.name.clone(),
            result: probe(config, ep).await,
        }
    }))
    .await
}

/// The outcome of `check-config --connect`.
#[derive(Debug)]
pub struct Report {
    /// One YAML comment line per endpoint, then the quorum verdict.
    pub text: String,
    /// Whether a quorum of endpoints is usable (the exit code).
    pub usable: bool,
}

/// Run the probe against every endpoint and judge the quorum.
pub async fn run(config: &Config) -> Report {
    let probes = probe_all(config).await;
    let now = Instant::now();
    let n = probes.len();
    let quorum = math::quorum(n);
    let usable = probes.iter().filter(|p| p.usable()).count();
    let mut out = format!(
        "# check-config --connect: lease {:?}, {n} endpoint(s), each with the real settings and handshake\n",
        config.lease.name
    );
    for p in &probes {
        out.push_str(&format!("# {}\n", p.line(now)));
    }
    let waiting = probes
        .iter()
        .filter(|p| matches!(&p.result, Ok(h) if matches!(h.exclusion, Some(Exclusion::Restarted { .. }))))
        .count();
    let ok = usable >= quorum;
    out.push_str(&format!(
        "# quorum: {usable} of {n} endpoints usable, {quorum} needed: {}{}\n",
        if ok { "OK" } else { "NOT USABLE" },
        if waiting > 0 {
            format!(" ({waiting} still in restart quarantine)")
        } else {
            String::new()
        }
    ));
    Report {
        text: out,
        usable: ok,
    }
}

/// The whole probe of one endpoint is bounded by this many connect timeouts: generous, as
/// every step has its own; this only bounds a server that trickles replies.
const PROBE_TIMEOUTS: u32 = 8;

async fn probe(config: &Config, ep: &Endpoint) -> Result<Healthy, ConnectError> {
    let started = Instant::now();
    let connector = Connector::new(ep, &config.redis, tokio_util::task::TaskTracker::new())
        .map_err(|e| ConnectError::new(Reason::Tls, e.to_string()))?;
    let timeout = config.redis.connect_timeout;
    let bound = timeout * PROBE_TIMEOUTS;
    match tokio::time::timeout(bound, probe_steps(config, &connector)).await {
        Ok(r) => r.map(|found| Healthy {
            took: started.elapsed(),
            uptime_secs: found.uptime_secs,
            exclusion: found.exclusion,
            epoch: found.epoch,
        }),
        Err(_) => Err(ConnectError::new(
            Reason::Timeout,
            format!("the probe did not finish within {}", fmt_dur(bound)),
        )),
    }
}

/// What the steps of a probe found.
struct Found {
    /// `INFO` uptime.
    uptime_secs: u64,
    /// Why the endpoint does not count, if it does not.
    exclusion: Option<Exclusion>,
    /// The fencing epoch stored on the node.
    epoch: u64,
}

/// Connect, `INFO`, load the scripts, subscribe, run every script on the probe key, wait for
/// the test notice, read the epoch.
async fn probe_steps(config: &Config, connector: &Connector) -> Result<Found, ConnectError> {
    let tls = connector.is_tls();
    let classify_err = |e: redis::RedisError| ConnectError::from_redis(&e, tls);
    let timeout = config.redis.connect_timeout;
    let mut conn = connector
        .multiplexed(AsyncConnectionConfig::new().set_response_timeout(Some(timeout)))
        .await?;
    let text: String = redis::cmd("INFO")
        .query_async(&mut conn)
        .await
        .map_err(classify_err)?;
    let info = parse_info(&text);
    let exclusion = classify(&info, None, config.lease.ttl, Instant::now());
    load_scripts(&mut conn, tls).await?;
    let keys = ProbeKeys::new(config);
    let mut ps = connector.pubsub().await?;
    ps.subscribe(&keys.channel).await.map_err(classify_err)?;
    let mut notices = ps.into_on_message();
    for step in keys.steps(scripts()) {
        step.run(&mut conn, tls, &keys.probe).await?;
    }
    if !matches!(
        tokio::time::timeout(timeout, notices.next()).await,
        Ok(Some(_))
    ) {
        return Err(ConnectError::new(
            Reason::Other,
            format!(
                "the test release notice on {} did not arrive on the subscription within {}",
                keys.channel,
                fmt_dur(timeout)
            ),
        ));
    }
    let epoch: Option<String> = redis::cmd("GET")
        .arg(format!("{}:epoch", keys.lease))
        .query_async(&mut conn)
        .await
        .map_err(classify_err)?;
    Ok(Found {
        uptime_secs: info.uptime_secs,
        exclusion,
        epoch: epoch.and_then(|e| e.parse().ok()).unwrap_or(0),
    })
}

/// `SCRIPT LOAD` of every script; each must load under the sha the sidecar calls it by.
async fn load_scripts(
    conn: &mut redis::aio::MultiplexedConnection,
    tls: bool,
) -> Result<(), ConnectError> {
    for s in scripts().all() {
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(s.source)
            .query_async(conn)
            .await
            .map_err(|e| ConnectError::from_redis(&e, tls))?;
        if sha != s.sha {
            return Err(ConnectError::new(Reason::Other, "script sha mismatch"));
        }
    }
    Ok(())
}

/// The keys, values and arguments of the probe's script runs. Token 0 writes no epoch; the
/// keys expire after ttl if a step fails.
struct ProbeKeys {
    /// The lease key (only read: its epoch).
    lease: String,
    /// The lease's release channel, on which the test notice goes out.
    channel: String,
    /// A fresh key beside the lease key.
    probe: String,
    /// Its epoch key.
    epoch: String,
    /// Its reservation key.
    next: String,
    /// Its candidates hash.
    candidates: String,
    /// The first holder's value.
    value: String,
    /// A second contender's value.
    other: String,
    /// The named successor's value.
    successor: String,
    /// `lease.ttl` in ms.
    ttl_ms: String,
    /// The release notice naming the successor, as the sidecars send it.
    named_notice: String,
    /// The successor's release notice, naming none.
    notice: String,
}

impl ProbeKeys {
    fn new(config: &Config) -> Self {
        let lease = format!("{}{}", config.lease.key_prefix, config.lease.name);
        let probe = format!("{lease}:probe:{}", new_value(""));
        let value = new_value("check-config");
        let successor = new_value("check-config-successor");
        ProbeKeys {
            channel: format!("{lease}:released"),
            epoch: format!("{probe}:epoch"),
            next: format!("{probe}:next"),
            candidates: format!("{probe}:candidates"),
            other: new_value("check-config"),
            ttl_ms: config.lease.ttl.as_millis().to_string(),
            named_notice: notice_payload(&value, Some("check-config-successor"), None),
            notice: notice_payload(&successor, None, None),
            lease,
            probe,
            value,
            successor,
        }
    }

    /// Every script on the probe key: acquire (GET, SET NX PX), acquire again by someone else
    /// (the denial: PTTL), renew (PTTL, PEXPIRE), release naming a successor (DEL, SET PX of the
    /// reservation, PUBLISH on the lease's channel), acquire by someone else while reserved
    /// (denied), then by the successor (consumes the reservation: DEL), release; then a
    /// candidate record written (HGET, HSET, PTTL, PEXPIRE, HGETALL), a follower's watch (GET,
    /// HGETALL, HSET, PEXPIRE) of the free key, and the record withdrawn (HDEL).
    #[rustfmt::skip] // One line per step: the table reads best unwrapped.
    fn steps<'a>(&'a self, s: &'a Scripts) -> [ProbeStep<'a>; 10] {
        let three = vec![&*self.probe, &*self.epoch, &*self.next];
        let two = vec![&*self.probe, &*self.epoch];
        let released = vec![&*self.probe, &*self.next];
        let hash = vec![&*self.candidates];
        let watched = vec![&*self.probe, &*self.candidates, &*self.epoch];
        let (value, other, next, ttl) = (&*self.value, &*self.other, &*self.successor, &*self.ttl_ms);
        let step = ProbeStep::new;
        [
            step("acquire", &s.acquire, three.clone(), vec![value, ttl, "0", "take", "check-config"], Some(1)),
            step("acquire (denied)", &s.acquire, three.clone(), vec![other, ttl, "0", "take", "check-config-other"], Some(0)),
            step("renew", &s.renew, two, vec![value, ttl, "0"], Some(1)),
            step("release naming a successor", &s.release, released.clone(), vec![value, &self.channel, &self.named_notice, "check-config-successor", ttl], Some(1)),
            step("acquire (reserved for the successor)", &s.acquire, three.clone(), vec![other, ttl, "0", "take", "check-config-other"], Some(0)),
            step("acquire by the successor", &s.acquire, three, vec![next, ttl, "0", "take", "check-config-successor"], Some(1)),
            step("release", &s.release, released, vec![next, &self.channel, &self.notice, "", "0"], Some(1)),
            step("candidate record", &s.candidates, hash.clone(), vec!["check-config", ttl, "0", "0", "0", "0", ""], None),
            step("watch", &s.watch, watched, vec!["check-config", ttl, "0", "0", "0", "0", "", ""], None),
            step("candidate withdrawal", &s.candidates, hash, vec!["check-config", ttl, "withdraw", "0", "0", "0", ""], None),
        ]
    }
}

/// One script run of the probe, and the result it must answer (after the node's `TIME`);
/// `None`: any `{TIME, ...}` reply will do (the candidates script answers with records).
struct ProbeStep<'a> {
    /// For the error message.
    name: &'a str,
    /// The script.
    script: &'a Script,
    /// Its KEYS.
    keys: Vec<&'a str>,
    /// Its ARGV.
    args: Vec<&'a str>,
    /// The expected result.
    expect: Option<i64>,
}

impl<'a> ProbeStep<'a> {
    fn new(
        name: &'a str,
        script: &'a Script,
        keys: Vec<&'a str>,
        args: Vec<&'a str>,
        expect: Option<i64>,
    ) -> Self {
        ProbeStep {
            name,
            script,
            keys,
            args,
            expect,
        }
    }

    async fn run(
        self,
        conn: &mut redis::aio::MultiplexedConnection,
        tls: bool,
        probe_key: &str,
    ) -> Result<(), ConnectError> {
        let reply: redis::Value = redis::cmd("EVALSHA")
            .arg(&self.script.sha)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args)
            .query_async(conn)
            .await
            .map_err(|e| ConnectError::from_redis(&e, tls))?;
        // Every script answers `{node TIME, result, ...}`.
        let ok = match &reply {
            redis::Value::Array(items) => match (items.get(1), self.expect) {
                (Some(redis::Value::Int(i)), Some(e)) => *i == e,
                (Some(redis::Value::Int(_)), None) => true,
                _ => false,
            },
            _ => false,
        };
        if ok {
            return Ok(());
        }
        Err(ConnectError::new(
            Reason::Other,
            format!(
                "the {} script on the probe key {probe_key} answered {reply:?}",
                self.name
            ),
        ))
    }
}

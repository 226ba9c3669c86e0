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
use crate::redlock::connect::{ConnectError, Connector, Reason};
use crate::redlock::node::{Exclusion, classify, parse_info};
use crate::redlock::scripts::scripts;
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

/// Run the probe; returns the report (YAML comment lines) and whether a quorum is usable.
pub async fn run(config: &Config) -> (String, bool) {
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
    (out, ok)
}

async fn probe(config: &Config, ep: &Endpoint) -> Result<Healthy, ConnectError> {
    let started = Instant::now();
    let connector = Connector::new(ep, &config.redis)
        .map_err(|e| ConnectError::new(Reason::Tls, e.to_string()))?;
    let tls = connector.is_tls();
    let classify_err = |e: redis::RedisError| ConnectError::from_redis(&e, tls);
    let timeout = config.redis.connect_timeout;
    let steps = async {
        let mut conn = connector
            .multiplexed(AsyncConnectionConfig::new().set_response_timeout(Some(timeout)))
            .await?;
        let text: String = redis::cmd("INFO")
            .query_async(&mut conn)
            .await
            .map_err(classify_err)?;
        let info = parse_info(&text);
        let exclusion = classify(&info, None, config.lease.ttl, Instant::now());
        for s in scripts().all() {
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(s.source)
                .query_async(&mut conn)
                .await
                .map_err(classify_err)?;
            if sha != s.sha {
                return Err(ConnectError::new(Reason::Other, "script sha mismatch"));
            }
        }
        let key = format!("{}{}", config.lease.key_prefix, config.lease.name);
        let channel = format!("{key}:released");
        let mut ps = connector.pubsub().await?;
        ps.subscribe(&channel).await.map_err(classify_err)?;
        let mut notices = ps.into_on_message();
        // Every script on a fresh probe key: acquire (GET, SET NX PX), acquire again by someone
        // else (the denial: PTTL), renew (PEXPIRE), release naming a successor (DEL, SET PX of
        // the reservation, PUBLISH on the lease's channel), acquire by someone else while
        // reserved (denied), then by the successor (consumes the reservation: DEL), release.
        // Token 0 writes no epoch; the keys expire after ttl if a step fails.
        let probe_key = format!("{key}:probe:{}", new_value(""));
        let probe_epoch = format!("{probe_key}:epoch");
        let probe_next = format!("{probe_key}:next");
        let (value, other) = (new_value("check-config"), new_value("check-config"));
        let next = new_value("check-config-successor");
        let ttl_ms = config.lease.ttl.as_millis().to_string();
        let scripts = scripts();
        let (acquire, renew, release, candidates) = (
            &scripts.acquire,
            &scripts.renew,
            &scripts.release,
            &scripts.candidates,
        );
        let three = [
            probe_key.as_str(),
            probe_epoch.as_str(),
            probe_next.as_str(),
        ];
        let released = [probe_key.as_str(), probe_next.as_str()];
        let probe_candidates = [format!("{probe_key}:candidates")];
        let probe_candidates = [probe_candidates[0].as_str()];
        let step = |name, script, keys, args, expect| ProbeStep {
            name,
            script,
            keys,
            args,
            expect,
        };
        // Notices as the sidecars send them: naming the successor, then naming none.
        let named =
            crate::redlock::candidates::notice_payload(&value, Some("check-config-successor"));
        let notice = crate::redlock::candidates::notice_payload(&next, None);
        let steps = [
            step(
                "acquire",
                acquire,
                &three,
                vec![&value, &ttl_ms, "0", "take", "check-config"],
                Some(1),
            ),
            step(
                "acquire (denied)",
                acquire,
                &three,
                vec![&other, &ttl_ms, "0", "take", "check-config-other"],
                Some(0),
            ),
            step(
                "renew",
                renew,
                &three[..2],
                vec![&value, &ttl_ms, "0"],
                Some(1),
            ),
            step(
                "release naming a successor",
                release,
                &released,
                vec![&value, &channel, &named, "check-config-successor", &ttl_ms],
                Some(1),
            ),
            step(
                "acquire (reserved for the successor)",
                acquire,
                &three,
                vec![&other, &ttl_ms, "0", "take", "check-config-other"],
                Some(0),
            ),
            step(
                "acquire by the successor",
                acquire,
                &three,
                vec![&next, &ttl_ms, "0", "take", "check-config-successor"],
                Some(1),
            ),
            step(
                "release",
                release,
                &released,
                vec![&next, &channel, &notice, "", "0"],
                Some(1),
            ),
            // A candidate record written (HGET, HSET, PTTL, PEXPIRE, HGETALL) and withdrawn
            // (HDEL), on a hash beside the probe key.
            step(
                "candidate record",
                candidates,
                &probe_candidates,
                vec!["check-config", &ttl_ms, "0", "0", "0", "0", ""],
                None,
            ),
            step(
                "candidate withdrawal",
                candidates,
                &probe_candidates,
                vec!["check-config", &ttl_ms, "withdraw", "0", "0", "0", ""],
                None,
            ),
        ];
        for ProbeStep {
            name: step,
            script,
            keys,
            args,
            expect,
        } in steps
        {
            let reply: redis::Value = redis::cmd("EVALSHA")
                .arg(&script.sha)
                .arg(keys.len())
                .arg(keys)
                .arg(args)
                .query_async(&mut conn)
                .await
                .map_err(classify_err)?;
            // Every script answers `{node TIME, result, ...}`.
            let ok = match &reply {
                redis::Value::Array(items) => match (items.get(1), expect) {
                    (Some(redis::Value::Int(i)), Some(e)) => *i == e,
                    (Some(redis::Value::Int(_)), None) => true,
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                return Err(ConnectError::new(
                    Reason::Other,
                    format!("the {step} script on the probe key {probe_key} answered {reply:?}"),
                ));
            }
        }
        match tokio::time::timeout(timeout, notices.next()).await {
            Ok(Some(_)) => {}
            _ => {
                return Err(ConnectError::new(
                    Reason::Other,
                    format!(
                        "the test release notice on {channel} did not arrive on the subscription within {}",
                        fmt_dur(timeout)
                    ),
                ));
            }
        }
        let epoch: Option<String> = redis::cmd("GET")
            .arg(format!("{key}:epoch"))
            .query_async(&mut conn)
            .await
            .map_err(classify_err)?;
        Ok(Healthy {
            took: started.elapsed(),
            uptime_secs: info.uptime_secs,
            exclusion,
            epoch: epoch.and_then(|e| e.parse().ok()).unwrap_or(0),
        })
    };
    // Generous: every step has its own connect timeout; this only bounds a server that
    // trickles replies.
    match tokio::time::timeout(timeout * 8, steps).await {
        Ok(r) => r,
        Err(_) => Err(ConnectError::new(
            Reason::Timeout,
            format!("the probe did not finish within {}", fmt_dur(timeout * 8)),
        )),
    }
}

/// One script run of the probe, and the result it must answer (after the node's `TIME`);
/// `None`: any `{TIME, ...}` reply will do (the candidates script answers with records).
struct ProbeStep<'a> {
    /// For the error message.
    name: &'a str,
    /// The script.
    script: &'a crate::redlock::scripts::Script,
    /// Its KEYS.
    keys: &'a [&'a str],
    /// Its ARGV.
    args: Vec<&'a str>,
    /// The expected result.
    expect: Option<i64>,
}

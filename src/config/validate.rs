//! [`Settings`] into a [`Config`]: one short function per section, in the order the sections
//! have always been checked (the first error wins), each error naming the field.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

mod kubernetes;
mod lease;
mod parse;
mod redis;

use lease::lease_names;
pub use lease::{MAX_LEASES, MAX_SHARDS};

pub use parse::{fmt_dur, is_dns_label, parse_duration};
pub use redis::read_password_file;

use super::file::Text;
use super::settings::{LeaseSettings, LogSettings, RunSettings, default};
use super::{
    AppConfig, Config, ConfigError, Env, LeaseConfig, LogConfig, LogFormat, RunConfig, Settings,
    UnsafeSwitches, err,
};
use crate::exec::OnChildExit;
use parse::{bool_or, duration_or, parse_addr};

/// The validity of a lease sample must be positive; these bounds keep the algorithm meaningful.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Above this, a preferred handover waits so long that it is better switched off.
const MAX_PREFER_SETTLE: Duration = Duration::from_secs(3600);

/// Validate the layered settings into a [`Config`].
pub fn validate(
    s: &Settings,
    env: &dyn Env,
    unsafe_switches: UnsafeSwitches,
) -> Result<Config, ConfigError> {
    let mut warnings = Vec::new();
    let (names, shards) = lease_names(&s.lease)?;
    let timing = timing(&s.lease)?;
    // Unlike every other setting, an empty prefix is a value (keys without a prefix).
    let key_prefix = s
        .lease
        .key_prefix
        .as_ref()
        .map_or(default::KEY_PREFIX, |t| &t.0);
    let redis = redis::validate(&s.redis, timing.ttl, env, &mut warnings)?;
    margin(&timing, redis.timeout)?;
    let (api_listen, ops_listen) = listen(s)?;
    let kubernetes = kubernetes::validate(&s.kubernetes, env, &names)?;
    let order = kubernetes::preference(&s.lease, &kubernetes)?;
    let log = log(&s.log)?;
    let follow_app = bool_or("lease.followApp", &s.lease.follow_app, default::FOLLOW_APP)?;
    let app = app(s, follow_app)?;
    let run = run(&s.run, timing.ttl)?;
    let identity = identity(&s.identity, kubernetes.pod_name.as_deref(), env)?;
    Ok(Config {
        identity,
        lease: LeaseConfig {
            name: names[0].clone(),
            names,
            shards,
            ttl: timing.ttl,
            renew_every: timing.renew_every,
            retry_every: timing.retry_every,
            drift_factor: timing.drift_factor,
            key_prefix: key_prefix.to_string(),
            prefer: order.prefer,
            priority: order.priority,
            prefer_settle: order.prefer_settle,
            follow_app,
        },
        redis,
        api_listen,
        ops_listen,
        kubernetes,
        log,
        app,
        run,
        unsafe_switches,
        warnings,
    })
}

/// The lease's clock: how long a term lasts and how often it is renewed and retried.
struct Timing {
    /// `lease.ttl`.
    ttl: Duration,
    /// `lease.renewEvery`.
    renew_every: Duration,
    /// `lease.retryEvery`.
    retry_every: Duration,
    /// `lease.driftFactor`.
    drift_factor: f64,
}

fn timing(s: &LeaseSettings) -> Result<Timing, ConfigError> {
    let ttl = duration_or("lease.ttl", &s.ttl, default::TTL)?;
    if ttl < MIN_TTL {
        return Err(err(
            "lease.ttl",
            format!(
                "{} is below the minimum of {}",
                fmt_dur(ttl),
                fmt_dur(MIN_TTL)
            ),
        ));
    }
    // Whole milliseconds keep the default readable (10s → 3s 333ms).
    let third = Duration::from_millis((ttl.as_millis() / default::RENEW_DIVISOR) as u64);
    let renew_every = duration_or("lease.renewEvery", &s.renew_every, third)?;
    if renew_every.is_zero() || renew_every >= ttl / 2 {
        return Err(err(
            "lease.renewEvery",
            format!(
                "{} must be above 0 and below ttl/2 ({})",
                fmt_dur(renew_every),
                fmt_dur(ttl / 2)
            ),
        ));
    }
    let retry_every = duration_or("lease.retryEvery", &s.retry_every, default::RETRY_EVERY)?;
    if retry_every.is_zero() {
        return Err(err("lease.retryEvery", "must be above 0"));
    }
    let drift_factor = match Text::given(&s.drift_factor) {
        None => default::DRIFT_FACTOR,
        Some(v) => v
            .trim()
            .parse::<f64>()
            .map_err(|_| err("lease.driftFactor", format!("{v:?} is not a number")))?,
    };
    if !(0.0..0.1).contains(&drift_factor) {
        return Err(err(
            "lease.driftFactor",
            format!("{drift_factor} is outside [0, 0.1)"),
        ));
    }
    Ok(Timing {
        ttl,
        renew_every,
        retry_every,
        drift_factor,
    })
}

/// The margin a term can cost at worst ([`lease_margin`]) must leave at least half the ttl.
fn margin(timing: &Timing, timeout: Duration) -> Result<(), ConfigError> {
    let margin = lease_margin(timing.ttl, timing.drift_factor, timeout);
    if margin > timing.ttl / 2 {
        return Err(err(
            "lease.ttl, lease.driftFactor, redis.timeout",
            format!(
                "the lease's margin at worst ({}: 2 × ttl × driftFactor + 2ms + 2 × driftFactor × (ttl + margin), and twice the clock watch's blind band, 2 × redis.timeout + driftFactor × (ttl + margin) and more) exceeds half the ttl ({}); raise lease.ttl, or lower redis.timeout or lease.driftFactor",
                fmt_dur(margin),
                fmt_dur(timing.ttl / 2)
            ),
        ));
    }
    Ok(())
}

/// The most a term's margin can be, for `check-config` and the docs: the rate allowance
/// ([`crate::redlock::clock::Policy::term_margin`], `2 × ttl × driftFactor + 2ms`), the blind band a leader takes off its term and the one a
/// follower that won without a release proof waits before leading (each at most
/// [`crate::redlock::clock::Policy::max_band_us`] of a reading within `redis.timeout`).
pub fn lease_margin(ttl: Duration, drift_factor: f64, timeout: Duration) -> Duration {
    let p = crate::redlock::clock::Policy::new(ttl, drift_factor, true).with_base_rtt(timeout);
    // (A watch that counts through a vouch adds the voucher's band, at most `vouch_band_us`,
    // until it is a window old. Not counted here: where that leaves a term no validity, the
    // term is not taken, and that watch counts by itself a window later.)
    let band = p.max_band_us(p.base_rtt_us).max(0);
    p.term_margin(ttl) + 2 * Duration::from_micros(band as u64)
}

fn listen(s: &Settings) -> Result<(SocketAddr, SocketAddr), ConfigError> {
    let api = match Text::given(&s.api.listen) {
        Some(v) => parse_addr("api.listen", v)?,
        None => default::API_LISTEN,
    };
    let ops = match Text::given(&s.ops.listen) {
        Some(v) => parse_addr("ops.listen", v)?,
        None => default::OPS_LISTEN,
    };
    if api == ops && api.port() != 0 {
        return Err(err(
            "ops.listen",
            format!("{ops} is also api.listen; use two ports"),
        ));
    }
    Ok((api, ops))
}

fn log(s: &LogSettings) -> Result<LogConfig, ConfigError> {
    let format = match Text::given(&s.format).map(str::trim) {
        None => default::LOG_FORMAT,
        Some("json") => LogFormat::Json,
        Some("text") => LogFormat::Text,
        Some(other) => {
            return Err(err(
                "log.format",
                format!("{other:?} is not one of json, text"),
            ));
        }
    };
    let level = Text::given(&s.level)
        .unwrap_or(default::LOG_LEVEL)
        .trim()
        .to_string();
    if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
        return Err(err(
            "log.level",
            format!("{level:?} is not a level (error, warn, info, debug, trace) or filter"),
        ));
    }
    Ok(LogConfig { format, level })
}

fn app(s: &Settings, follow: bool) -> Result<AppConfig, ConfigError> {
    let a = &s.app;
    let containers: Vec<String> = a
        .containers
        .iter()
        .flatten()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect();
    if let Some(bad) = containers.iter().find(|c| !is_dns_label(c)) {
        return Err(err(
            "app.containers",
            format!("{bad:?} is not a container name (a lowercase DNS label)"),
        ));
    }
    let health_url = match Text::given(&a.health_url).map(str::trim) {
        None => None,
        Some(v) => {
            let url = url::Url::parse(v)
                .map_err(|e| err("app.healthUrl", format!("{v:?} is not a URL: {e}")))?;
            let loopback = match url.host() {
                Some(url::Host::Domain(d)) => d == "localhost",
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                None => false,
            };
            if url.scheme() != "http" || !loopback {
                return Err(err(
                    "app.healthUrl",
                    format!(
                        "{v:?} must be an http:// URL on the loopback interface (127.0.0.1, ::1, localhost)"
                    ),
                ));
            }
            Some(url)
        }
    };
    if health_url.is_some() && !follow {
        return Err(err(
            "app.healthUrl",
            "is probed only with lease.followApp: true; set it, or remove app.healthUrl",
        ));
    }
    let positive = |field: &str, v: &Option<Text>, d: Duration| {
        let v = duration_or(field, v, d)?;
        if v.is_zero() {
            return Err(err(field, "must be above 0"));
        }
        Ok(v)
    };
    let health_failure_threshold = match Text::given(&a.health_failure_threshold) {
        None => default::HEALTH_FAILURE_THRESHOLD,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(err(
                    "app.healthFailureThreshold",
                    format!("{v:?} is not a whole number above 0"),
                ));
            }
        },
    };
    Ok(AppConfig {
        containers,
        health_url,
        health_interval: positive(
            "app.healthInterval",
            &a.health_interval,
            default::HEALTH_INTERVAL,
        )?,
        health_timeout: positive(
            "app.healthTimeout",
            &a.health_timeout,
            default::HEALTH_TIMEOUT,
        )?,
        health_failure_threshold,
        unhealthy_grace: duration_or(
            "app.unhealthyGrace",
            &a.unhealthy_grace,
            default::UNHEALTHY_GRACE,
        )?,
        cooldown: duration_or("app.cooldown", &a.cooldown, default::APP_COOLDOWN)?,
    })
}

fn run(s: &RunSettings, ttl: Duration) -> Result<RunConfig, ConfigError> {
    let kill_grace = duration_or(
        "run.killGrace",
        &s.kill_grace,
        ttl / default::KILL_GRACE_DIVISOR,
    )?;
    if kill_grace.is_zero() {
        return Err(err("run.killGrace", "must be above 0"));
    }
    let on_child_exit = match Text::given(&s.on_child_exit)
        .unwrap_or(default::ON_CHILD_EXIT)
        .trim()
    {
        "exit" => OnChildExit::Exit,
        "contend" => OnChildExit::Contend,
        other => {
            return Err(err(
                "run.onChildExit",
                format!("{other:?} is not one of exit, contend"),
            ));
        }
    };
    Ok(RunConfig {
        kill_grace,
        kill_grace_given: Text::given(&s.kill_grace).is_some(),
        on_child_exit,
    })
}

/// `redlock-elector run` stops its command `run.killGrace` before the term's deadline, so the
/// command is dead before the lease can pass on. A renewal started on time must still come back
/// before that stop begins: `killGrace + renewEvery + redis.timeout` must stay below the
/// shortest term, `ttl −` the margin at worst. Checked for `run`, and by `check-config` when
/// `run.killGrace` is given.
pub fn run_fits(c: &Config) -> Result<(), ConfigError> {
    let margin = lease_margin(c.lease.ttl, c.lease.drift_factor, c.redis.timeout);
    let term = c.lease.ttl.saturating_sub(margin);
    let needed = c.run.kill_grace + c.lease.renew_every + c.redis.timeout;
    if needed >= term {
        return Err(err(
            "run.killGrace",
            format!(
                "{} leaves the command no time: run.killGrace + lease.renewEvery + redis.timeout ({}) must be below lease.ttl less the lease's margin at worst ({}); lower run.killGrace or lease.renewEvery, or raise lease.ttl",
                fmt_dur(c.run.kill_grace),
                fmt_dur(needed),
                fmt_dur(term)
            ),
        ));
    }
    Ok(())
}

/// `identity`, else the pod name, else the hostname.
fn identity(
    v: &Option<Text>,
    pod_name: Option<&str>,
    env: &dyn Env,
) -> Result<String, ConfigError> {
    let identity = match Text::given(v) {
        Some(s) => s.trim().to_string(),
        None => pod_name
            .map(String::from)
            .or_else(|| {
                env.read(Path::new("/proc/sys/kernel/hostname"))
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .or_else(|| env.var("HOSTNAME"))
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                err(
                    "identity",
                    "not set, and neither $POD_NAME nor the hostname is available",
                )
            })?,
    };
    if identity.is_empty()
        || identity.len() > 253
        || identity
            .chars()
            .any(|c| c.is_control() || c.is_whitespace())
    {
        return Err(err(
            "identity",
            format!("{identity:?} must be 1..=253 printable characters without spaces"),
        ));
    }
    Ok(identity)
}

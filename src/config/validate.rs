//! [`Settings`] into a [`Config`]: one short function per section, in the order the sections
//! have always been checked (the first error wins), each error naming the field.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod kubernetes;
mod parse;

pub use parse::{fmt_dur, is_dns_label, parse_duration};

use super::file::Text;
use super::settings::{LeaseSettings, LogSettings, RedisSettings, TlsSettings, default};
use super::{
    Config, ConfigError, Endpoint, Env, LeaseConfig, LogConfig, LogFormat, PASSWORD_ENV,
    RedisConfig, Secret, Settings, UnsafeSwitches, err, parse_endpoint,
};
use parse::{duration_or, parse_addr, parse_bool};

/// The validity of a lease sample must be positive; these bounds keep the algorithm meaningful.
pub const MIN_TTL: Duration = Duration::from_millis(100);
/// Above this, a preferred handover waits so long that it is better switched off.
const MAX_PREFER_SETTLE: Duration = Duration::from_secs(3600);
/// The most endpoints one lease may span.
const MAX_ENDPOINTS: usize = 16;

/// Validate the layered settings into a [`Config`].
pub fn validate(
    s: &Settings,
    env: &dyn Env,
    unsafe_switches: UnsafeSwitches,
) -> Result<Config, ConfigError> {
    let mut warnings = Vec::new();
    let name = lease_name(&s.lease)?;
    let timing = timing(&s.lease)?;
    // Unlike every other setting, an empty prefix is a value (keys without a prefix).
    let key_prefix = s
        .lease
        .key_prefix
        .as_ref()
        .map_or(default::KEY_PREFIX, |t| &t.0);
    let redis = redis(&s.redis, timing.ttl, env, &mut warnings)?;
    let (api_listen, ops_listen) = listen(s)?;
    let kubernetes = kubernetes::validate(&s.kubernetes, env)?;
    let order = kubernetes::preference(&s.lease, &kubernetes)?;
    let log = log(&s.log)?;
    let identity = identity(&s.identity, kubernetes.pod_name.as_deref(), env)?;
    Ok(Config {
        identity,
        lease: LeaseConfig {
            name,
            ttl: timing.ttl,
            renew_every: timing.renew_every,
            retry_every: timing.retry_every,
            drift_factor: timing.drift_factor,
            key_prefix: key_prefix.to_string(),
            prefer: order.prefer,
            priority: order.priority,
            prefer_settle: order.prefer_settle,
        },
        redis,
        api_listen,
        ops_listen,
        kubernetes,
        log,
        unsafe_switches,
        warnings,
    })
}

fn lease_name(s: &LeaseSettings) -> Result<String, ConfigError> {
    let name =
        Text::given(&s.name).ok_or_else(|| err("lease.name", "is required (e.g. \"my-app\")"))?;
    if !is_dns_label(name) {
        return Err(err(
            "lease.name",
            format!(
                "{name:?} is not a lowercase DNS label (a-z, 0-9, '-', starting and ending alphanumeric, <= 63 chars)"
            ),
        ));
    }
    Ok(name.to_string())
}

/// The lease's clock: how long a term lasts and how often it is renewed and retried.
struct Timing {
    ttl: Duration,
    renew_every: Duration,
    retry_every: Duration,
    drift_factor: f64,
}

fn timing(s: &LeaseSettings) -> Result<Timing, ConfigError> {
    let ttl = duration_or("lease.ttl", &s.ttl, default::TTL)?;
    if ttl < MIN_TTL {
        return Err(err(
            "lease.ttl",
            format!("{} is below the minimum of 100ms", fmt_dur(ttl)),
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

fn endpoints(urls: &[String], warnings: &mut Vec<String>) -> Result<Vec<Endpoint>, ConfigError> {
    if urls.is_empty() {
        return Err(err(
            "redis.endpoints",
            "at least one endpoint is required (e.g. redis://redis-0:6379)",
        ));
    }
    if urls.len() > MAX_ENDPOINTS {
        return Err(err(
            "redis.endpoints",
            format!(
                "{} endpoints given; at most {MAX_ENDPOINTS} are supported",
                urls.len()
            ),
        ));
    }
    let mut endpoints: Vec<Endpoint> = Vec::with_capacity(urls.len());
    for (i, u) in urls.iter().enumerate() {
        let field = format!("redis.endpoints[{i}]");
        let ep = parse_endpoint(&field, u)?;
        if endpoints.iter().any(|e| e.name == ep.name && e.db == ep.db) {
            return Err(err(field, format!("{} is listed twice", ep.name)));
        }
        endpoints.push(ep);
    }
    if endpoints.len().is_multiple_of(2) {
        warnings.push(format!(
            "redis.endpoints: {} endpoints is an even number; quorum is {}, so an odd number tolerates the same failures with fewer nodes",
            endpoints.len(),
            endpoints.len() / 2 + 1
        ));
    }
    Ok(endpoints)
}

fn redis(
    s: &RedisSettings,
    ttl: Duration,
    env: &dyn Env,
    warnings: &mut Vec<String>,
) -> Result<RedisConfig, ConfigError> {
    let endpoints = endpoints(s.endpoints.as_deref().unwrap_or_default(), warnings)?;
    let timeout = duration_or("redis.timeout", &s.timeout, default::TIMEOUT)?;
    if timeout.is_zero() || timeout >= ttl / 10 {
        return Err(err(
            "redis.timeout",
            format!(
                "{} must be above 0 and below ttl/10 ({})",
                fmt_dur(timeout),
                fmt_dur(ttl / 10)
            ),
        ));
    }
    let connect_timeout = duration_or(
        "redis.connectTimeout",
        &s.connect_timeout,
        default::CONNECT_TIMEOUT,
    )?;
    if connect_timeout.is_zero() {
        return Err(err("redis.connectTimeout", "must be above 0"));
    }
    let password_file = Text::given(&s.password_file).map(PathBuf::from);
    let password = match &password_file {
        Some(p) => Some(read_password_file(env, p)?),
        None => env.var(PASSWORD_ENV).filter(|p| !p.is_empty()).map(Secret),
    };
    let tls = tls(&s.tls, env)?;
    if tls.any_given() && !endpoints.iter().any(|e| e.tls) {
        warnings.push(
            "redis.tls: settings given but no endpoint uses rediss://; they have no effect".into(),
        );
    }
    Ok(RedisConfig {
        endpoints,
        timeout,
        connect_timeout,
        username: Text::given(&s.username).map(String::from),
        password,
        password_file,
        tls_ca_file: tls.ca_file,
        tls_cert_file: tls.cert_file,
        tls_key_file: tls.key_file,
        tls_server_name: tls.server_name,
        tls_insecure_skip_verify: tls.insecure_skip_verify,
    })
}

/// `redis.tls.*`, validated; the files are checked to be readable.
struct Tls {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    server_name: Option<String>,
    insecure_skip_verify: bool,
}

impl Tls {
    /// Whether any setting that only matters for `rediss://` was given.
    fn any_given(&self) -> bool {
        self.ca_file.is_some()
            || self.cert_file.is_some()
            || self.server_name.is_some()
            || self.insecure_skip_verify
    }
}

/// A file setting that must be readable now, rather than at the first connect.
fn readable(field: &str, v: &Option<Text>, env: &dyn Env) -> Result<Option<PathBuf>, ConfigError> {
    let Some(path) = Text::given(v).map(PathBuf::from) else {
        return Ok(None);
    };
    env.read(&path)
        .map_err(|e| err(field, format!("cannot read {}: {e}", path.display())))?;
    Ok(Some(path))
}

fn tls(s: &TlsSettings, env: &dyn Env) -> Result<Tls, ConfigError> {
    let ca_file = readable("redis.tls.caFile", &s.ca_file, env)?;
    match (Text::given(&s.cert_file), Text::given(&s.key_file)) {
        (Some(_), None) => {
            return Err(err(
                "redis.tls.keyFile",
                "is required with redis.tls.certFile (the client certificate's private key)",
            ));
        }
        (None, Some(_)) => {
            return Err(err(
                "redis.tls.certFile",
                "is required with redis.tls.keyFile (the client certificate)",
            ));
        }
        _ => {}
    }
    let cert_file = readable("redis.tls.certFile", &s.cert_file, env)?;
    let key_file = readable("redis.tls.keyFile", &s.key_file, env)?;
    let server_name = Text::given(&s.server_name).map(|s| s.trim().to_string());
    if let Some(name) = &server_name
        && rustls::pki_types::ServerName::try_from(name.as_str()).is_err()
    {
        return Err(err(
            "redis.tls.serverName",
            format!("{name:?} is not a DNS name or IP address"),
        ));
    }
    let insecure_skip_verify = match Text::given(&s.insecure_skip_verify) {
        Some(v) => parse_bool("redis.tls.insecureSkipVerify", v)?,
        None => default::INSECURE_SKIP_VERIFY,
    };
    Ok(Tls {
        ca_file,
        cert_file,
        key_file,
        server_name,
        insecure_skip_verify,
    })
}

/// Read a password file: the whole file, one trailing newline dropped; empty is an error. Used at
/// validation and again by the Redis connector on every reconnect, so that an updated Kubernetes
/// Secret takes effect without a restart. The error never contains the file's content.
pub fn read_password_file(env: &dyn Env, path: &Path) -> Result<Secret, ConfigError> {
    let text = env.read(path).map_err(|e| {
        err(
            "redis.passwordFile",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let pw = text.trim_end_matches(['\n', '\r']).to_string();
    if pw.is_empty() {
        return Err(err(
            "redis.passwordFile",
            format!("{} is empty", path.display()),
        ));
    }
    Ok(Secret(pw))
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

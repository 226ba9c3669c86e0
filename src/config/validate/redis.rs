//! `redis.*`: the endpoints, timeouts, credentials and TLS files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::parse::{duration_or, fmt_dur, parse_bool};
use crate::config::file::Text;
use crate::config::settings::{RedisSettings, TlsSettings, default};
use crate::config::{
    ConfigError, Endpoint, Env, PASSWORD_ENV, RedisConfig, Secret, err, parse_endpoint,
};

/// The most endpoints one lease may span.
const MAX_ENDPOINTS: usize = 16;

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

pub(super) fn validate(
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
    /// `redis.tls.caFile`.
    ca_file: Option<PathBuf>,
    /// `redis.tls.certFile`.
    cert_file: Option<PathBuf>,
    /// `redis.tls.keyFile`.
    key_file: Option<PathBuf>,
    /// `redis.tls.serverName`.
    server_name: Option<String>,
    /// `redis.tls.insecureSkipVerify`.
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

//! One Redis endpoint: its URL parsed into the parts the connector needs, and printed back with
//! any password redacted.

use super::{ConfigError, Secret, err};

/// One Redis endpoint, parsed from its URL.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `host:port`: the metric label and log name; never carries a password.
    pub name: String,
    /// Host name or address.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// `rediss://`.
    pub tls: bool,
    /// Database number from the URL path.
    pub db: i64,
    /// User from the URL, if any.
    pub username: Option<String>,
    /// Password from the URL, if any.
    pub password: Option<Secret>,
}

/// The port of a URL that names none.
const DEFAULT_PORT: u16 = 6379;

impl Endpoint {
    /// The URL with any password replaced by `<redacted>`.
    pub fn redacted_url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let redacted = Secret::REDACTED;
        let auth = match (&self.username, &self.password) {
            (Some(u), Some(_)) => format!("{u}:{redacted}@"),
            (None, Some(_)) => format!(":{redacted}@"),
            (Some(u), None) => format!("{u}@"),
            (None, None) => String::new(),
        };
        let db = if self.db != 0 {
            format!("/{}", self.db)
        } else {
            String::new()
        };
        format!("{scheme}://{auth}{}{db}", self.name)
    }
}

/// Parse one endpoint URL; `field` names it in errors (`redis.endpoints[1]`).
pub fn parse_endpoint(field: &str, s: &str) -> Result<Endpoint, ConfigError> {
    // Never echo the URL itself: it may carry a password.
    let u = url::Url::parse(s.trim()).map_err(|e| {
        err(
            field,
            format!("not a URL ({e}); expected redis://host:port"),
        )
    })?;
    let tls = match u.scheme() {
        "redis" => false,
        "rediss" => true,
        other => {
            return Err(err(
                field,
                format!("scheme {other:?} is not supported; use redis:// or rediss://"),
            ));
        }
    };
    let host = u
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| err(field, "URL has no host"))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = u.port().unwrap_or(DEFAULT_PORT);
    let path = u.path().trim_matches('/');
    let db = if path.is_empty() {
        0
    } else {
        path.parse::<i64>().map_err(|_| {
            err(
                field,
                format!("database {path:?} in the URL path is not a number"),
            )
        })?
    };
    let username = Some(u.username()).filter(|x| !x.is_empty()).map(decode);
    let password = u.password().map(|p| Secret(decode(p)));
    let name = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    Ok(Endpoint {
        name,
        host,
        port,
        tls,
        db,
        username,
        password,
    })
}

/// Percent-decode a URL's user or password.
fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
}

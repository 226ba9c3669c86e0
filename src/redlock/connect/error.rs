//! Why an endpoint could not be used: the classified [`ConnectError`] and the ACL parsing that
//! names a denied command (even inside a script).

use std::fmt;

/// Why an endpoint could not be used: the `reason` label of
/// `redlock_elector_redis_connect_errors_total` and of the warn line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// TLS: certificate not trusted, name mismatch, client certificate refused, not TLS at all.
    Tls,
    /// Authentication: wrong password, unknown or disabled user, password required.
    Auth,
    /// The ACL user lacks a command, key or channel the sidecar needs.
    Noperm,
    /// Nobody listens there (or the network says it is unreachable).
    Refused,
    /// No answer within `redis.connectTimeout`.
    Timeout,
    /// The host name does not resolve.
    Dns,
    /// Anything else (a protocol error, a server that is loading, ...).
    Other,
}

impl Reason {
    /// Every reason, in label order (for tests and docs).
    pub const ALL: [Reason; 7] = [
        Reason::Tls,
        Reason::Auth,
        Reason::Noperm,
        Reason::Refused,
        Reason::Timeout,
        Reason::Dns,
        Reason::Other,
    ];

    /// The metric and log label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::Tls => "tls",
            Reason::Auth => "auth",
            Reason::Noperm => "noperm",
            Reason::Refused => "refused",
            Reason::Timeout => "timeout",
            Reason::Dns => "dns",
            Reason::Other => "other",
        }
    }

    /// What an operator should check, in one line.
    pub fn fix(self) -> &'static str {
        match self {
            Reason::Tls => {
                "check redis.tls.caFile (the CA that signed the server certificate), redis.tls.serverName \
                 (a name in the certificate, for endpoints reached by IP), redis.tls.certFile/keyFile \
                 (servers with tls-auth-clients), and rediss:// vs redis:// for the port"
            }
            Reason::Auth => {
                "check redis.username and the password (redis.passwordFile or REDLOCK_ELECTOR_REDIS_PASSWORD) \
                 against the server's ACL user or requirepass, and that the user is on"
            }
            Reason::Noperm => {
                "grant the ACL user the denied command, and keys and channels under lease.keyPrefix \
                 (the minimal ACL in docs/operating/managed-redis.md)"
            }
            Reason::Refused => {
                "check the endpoint's host and port and that Redis is running there (and no \
                 NetworkPolicy or firewall rejects it)"
            }
            Reason::Timeout => {
                "check that the endpoint is reachable (NetworkPolicy, firewall, security group), that \
                 the port speaks Redis, and redis.connectTimeout"
            }
            Reason::Dns => "check the host name in the endpoint URL and the cluster DNS",
            Reason::Other => "see the error text",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// A classified connection or handshake failure. Never contains a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectError {
    /// The class.
    pub reason: Reason,
    /// For `noperm`: the command the ACL denied (`info`, `script|load`), or `key` / `channel`.
    pub denied: Option<String>,
    /// The underlying message (server reply, TLS or OS error), one line.
    pub detail: String,
}

impl ConnectError {
    /// A failure of this reason.
    pub fn new(reason: Reason, detail: impl Into<String>) -> Self {
        ConnectError {
            reason,
            denied: None,
            detail: one_line(&detail.into()),
        }
    }

    /// Classify an error of redis-rs (a reply or the connection) during the handshake. `tls`
    /// says whether the stream is TLS: a plain connection that the server closes during the
    /// handshake is most often a TLS-only port.
    pub fn from_redis(e: &redis::RedisError, tls: bool) -> Self {
        let text = e.to_string();
        let code = e.code().unwrap_or("");
        if code == "NOPERM"
            || text.contains("NOPERM")
            || text.contains("can't run this command or subcommand")
        {
            let mut err = ConnectError::new(Reason::Noperm, text.clone());
            err.denied = denied_by_acl(&text);
            return err;
        }
        if matches!(e.kind(), redis::ErrorKind::AuthenticationFailed) {
            return ConnectError::new(
                Reason::Auth,
                "the server refused the credentials (wrong password, or an unknown or disabled user)",
            );
        }
        if matches!(code, "WRONGPASS" | "NOAUTH")
            || text.contains("WRONGPASS")
            || text.contains("NOAUTH")
        {
            return ConnectError::new(Reason::Auth, text);
        }
        if let Some(io) =
            std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>())
        {
            return ConnectError::from_io(io, tls);
        }
        if e.is_timeout() {
            return ConnectError::new(Reason::Timeout, text);
        }
        if e.is_connection_refusal() {
            return ConnectError::new(Reason::Refused, text);
        }
        if e.is_io_error() || e.is_connection_dropped() {
            return closed_during_handshake(text, tls);
        }
        ConnectError::new(Reason::Other, text)
    }

    /// Classify an I/O error on an established TCP (or TLS) stream.
    pub fn from_io(e: &std::io::Error, tls: bool) -> Self {
        use std::io::ErrorKind as K;
        if e.get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some())
        {
            return ConnectError::new(Reason::Tls, e.to_string());
        }
        match e.kind() {
            K::TimedOut | K::WouldBlock => ConnectError::new(Reason::Timeout, e.to_string()),
            K::ConnectionRefused | K::HostUnreachable | K::NetworkUnreachable => {
                ConnectError::new(Reason::Refused, e.to_string())
            }
            K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe => {
                closed_during_handshake(e.to_string(), tls)
            }
            _ => ConnectError::new(Reason::Other, e.to_string()),
        }
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.denied {
            Some(d) => write!(f, "{} ({d} denied): {}", self.reason, self.detail),
            None => write!(f, "{}: {}", self.reason, self.detail),
        }
    }
}

impl std::error::Error for ConnectError {}

fn closed_during_handshake(text: String, tls: bool) -> ConnectError {
    if tls {
        // The server ended the TLS session: most often it refused our client certificate
        // (TLS 1.3 reports that only after the client's side of the handshake is done).
        ConnectError::new(
            Reason::Tls,
            format!("the server closed the TLS connection during the handshake ({text})"),
        )
    } else {
        ConnectError::new(
            Reason::Tls,
            format!(
                "the server closed the connection during the handshake; if the port only speaks TLS, use rediss:// ({text})"
            ),
        )
    }
}

/// The command (or `key` / `channel`) an ACL error names. Redis 7 says "User u has no
/// permissions to run the 'info' command", "No permissions to access a key/channel".
pub fn denied_by_acl(text: &str) -> Option<String> {
    if let Some(rest) = text.split("permissions to run the '").nth(1) {
        return rest.split('\'').next().map(str::to_string);
    }
    // Inside a script Redis names the script and line instead: "The user executing the script
    // can't run this command or subcommand script: <sha>, on @user_script:5."
    if let Some(command) = denied_in_script(text) {
        return Some(command);
    }
    for what in ["key", "channel"] {
        if text.contains(&format!("access a {what}"))
            || text.contains(&format!("access one of the {what}"))
        {
            return Some(what.to_string());
        }
    }
    None
}

/// The command on the script line an ACL error inside a script points at, e.g. `publish`.
fn denied_in_script(text: &str) -> Option<String> {
    let sha = text.split("script: ").nth(1)?.split(',').next()?.trim();
    let line: usize = text
        .split("@user_script:")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    let script = crate::redlock::scripts::scripts()
        .all()
        .into_iter()
        .find(|s| s.sha == sha)?;
    let source_line = script.source.lines().nth(line.checked_sub(1)?)?;
    // A line may call several commands; name them all.
    let commands: Vec<String> = source_line
        .split("redis.call('")
        .skip(1)
        .filter_map(|rest| rest.split('\'').next())
        .map(str::to_ascii_lowercase)
        .collect();
    (!commands.is_empty()).then(|| commands.join(" or "))
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_denials_name_the_command() {
        assert_eq!(
            denied_by_acl("NOPERM: User u has no permissions to run the 'info' command"),
            Some("info".into())
        );
        assert_eq!(
            denied_by_acl("NOPERM this user has no permissions to run the 'script|load' command"),
            Some("script|load".into())
        );
        assert_eq!(
            denied_by_acl("NOPERM No permissions to access a channel"),
            Some("channel".into())
        );
        assert_eq!(
            denied_by_acl("NOPERM No permissions to access a key"),
            Some("key".into())
        );
        assert_eq!(denied_by_acl("ERR something"), None);
        let release = &crate::redlock::scripts::scripts().release;
        let line = release
            .source
            .lines()
            .position(|l| l.contains("redis.call('PUBLISH'"))
            .unwrap()
            + 1;
        assert_eq!(
            denied_by_acl(&format!(
                "ResponseError: The user executing the script can't run this command or subcommand script: {}, on @user_script:{line}.",
                release.sha
            )),
            Some("publish".into())
        );
    }

    #[test]
    fn classifies_io_errors() {
        use std::io::{Error, ErrorKind};
        let c = |k, tls| ConnectError::from_io(&Error::new(k, "boom"), tls).reason;
        assert_eq!(c(ErrorKind::ConnectionRefused, false), Reason::Refused);
        assert_eq!(c(ErrorKind::TimedOut, false), Reason::Timeout);
        assert_eq!(c(ErrorKind::UnexpectedEof, true), Reason::Tls);
        assert_eq!(c(ErrorKind::ConnectionReset, false), Reason::Tls);
        assert_eq!(c(ErrorKind::Other, false), Reason::Other);
        let tls = Error::other(rustls::Error::AlertReceived(
            rustls::AlertDescription::CertificateRequired,
        ));
        assert_eq!(ConnectError::from_io(&tls, true).reason, Reason::Tls);
    }

    #[test]
    fn classifies_server_replies() {
        let server = |code: &str, msg: &str| {
            redis::make_extension_error(code.to_string(), Some(msg.to_string()))
        };
        let wrongpass = server(
            "WRONGPASS",
            "invalid username-password pair or user is disabled.",
        );
        assert_eq!(
            ConnectError::from_redis(&wrongpass, false).reason,
            Reason::Auth
        );
        let noauth = server("NOAUTH", "Authentication required.");
        assert_eq!(ConnectError::from_redis(&noauth, true).reason, Reason::Auth);
        let noperm = server(
            "NOPERM",
            "User u has no permissions to run the 'subscribe' command",
        );
        let c = ConnectError::from_redis(&noperm, false);
        assert_eq!(c.reason, Reason::Noperm);
        assert_eq!(c.denied.as_deref(), Some("subscribe"));
        assert_eq!(
            ConnectError::from_redis(&server("LOADING", "loading"), false).reason,
            Reason::Other
        );
    }
}

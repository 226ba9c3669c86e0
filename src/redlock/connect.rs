//! Opening connections to one Redis endpoint, and saying why it failed.
//!
//! The connection is built here step by step, name resolution, TCP, TLS, then the `AUTH` that
//! redis-rs sends, instead of inside redis-rs's `Client`. That way each step fails with its own
//! [`Reason`] (`dns`, `refused`, `timeout`, `tls`, `auth`, `noperm`), and TLS can verify the
//! server against `redis.tls.serverName` when the endpoint is reached by IP, which the client
//! API cannot. The finished stream is handed to redis-rs's multiplexed connection or pub/sub.
//!
//! `passwordFile` is read again on every connect, so a rotated Kubernetes Secret takes effect at
//! the next reconnect or after an authentication failure, without a restart. No password reaches
//! a log line, an error or a metric: [`ConnectError`] texts come from the server's or the TLS
//! library's messages, which never echo it.
//!
//! [`WarnLimiter`] decides when a failure is worth a `warn` line: the first, each change of
//! reason, then at most every 30 s per endpoint; [`FailureLog`] applies it, counts
//! `redlock_elector_redis_connect_errors_total` and logs the recovery at `info`.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::socket2;
use redis::{AsyncConnectionConfig, RedisConnectionInfo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::{Endpoint, ProcessEnv, RedisConfig, Secret, read_password_file};
use crate::metrics::Metrics;

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
                 (README: the minimal ACL)"
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
    let script = super::scripts::scripts().iter().find(|s| s.sha == sha)?;
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

// ---------------------------------------------------------------------------------------------
// The connector

/// Where the password comes from: fixed (URL or env), or a file read again on every connect.
enum Password {
    /// No password: no `AUTH`.
    None,
    /// From the endpoint URL or `REDLOCK_ELECTOR_REDIS_PASSWORD`.
    Fixed(Secret),
    /// `redis.passwordFile`: read on every connect; the last good value is used when the file
    /// cannot be read (a Secret being updated), and a change is logged (never the value).
    File {
        /// The file.
        path: PathBuf,
        /// The value used last, and the last read error (logged once per distinct error).
        last: Mutex<(Option<Secret>, Option<String>)>,
    },
}

/// TLS settings of one endpoint, built once from the config's files.
struct Tls {
    /// Roots, client certificate, verification.
    config: Arc<rustls::ClientConfig>,
    /// What the server certificate must name: `redis.tls.serverName`, else the URL's host.
    server_name: ServerName<'static>,
}

/// Opens verified-ready connections to one endpoint with the configured credentials and TLS.
pub struct Connector {
    /// `host:port` and the URL's parts.
    endpoint: Endpoint,
    /// Present for `rediss://`.
    tls: Option<Tls>,
    /// ACL user (the URL's wins over `redis.username`).
    username: Option<String>,
    /// The password source.
    password: Password,
    /// Bound of each step (resolve, TCP, TLS, AUTH).
    connect_timeout: Duration,
}

/// A bidirectional byte stream (TCP or TLS over TCP).
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl Connector {
    /// Build from config: reads the TLS files (CA, client certificate and key) once.
    pub fn new(endpoint: &Endpoint, redis: &RedisConfig) -> Result<Connector, String> {
        let tls = if endpoint.tls {
            Some(tls_settings(endpoint, redis)?)
        } else {
            None
        };
        let password = match (&endpoint.password, &redis.password_file, &redis.password) {
            (Some(p), _, _) => Password::Fixed(p.clone()),
            (None, Some(path), initial) => Password::File {
                path: path.clone(),
                last: Mutex::new((initial.clone(), None)),
            },
            (None, None, Some(p)) => Password::Fixed(p.clone()),
            (None, None, None) => Password::None,
        };
        Ok(Connector {
            endpoint: endpoint.clone(),
            tls,
            username: endpoint.username.clone().or(redis.username.clone()),
            password,
            connect_timeout: redis.connect_timeout,
        })
    }

    /// The `host:port` name.
    pub fn name(&self) -> &str {
        &self.endpoint.name
    }

    /// Whether the endpoint is `rediss://`.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A multiplexed connection, authenticated (the handshake's commands come after).
    pub async fn multiplexed(
        &self,
        config: AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, ConnectError> {
        let stream = self.stream().await?;
        let info = self.settings();
        let setup = MultiplexedConnection::new_with_config(&info, stream, config);
        let (conn, driver) = self.bounded("AUTH", setup).await?;
        // The driver ends once every clone of the connection is dropped.
        tokio::spawn(driver);
        Ok(conn)
    }

    /// A pub/sub connection, authenticated.
    pub async fn pubsub(&self) -> Result<PubSub, ConnectError> {
        let stream = self.stream().await?;
        let info = self.settings();
        self.bounded("AUTH", PubSub::new(&info, stream)).await
    }

    async fn bounded<T>(
        &self,
        step: &str,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, ConnectError> {
        match tokio::time::timeout(self.connect_timeout, fut).await {
            Err(_) => Err(ConnectError::new(
                Reason::Timeout,
                format!("no reply to {step} within {:?}", self.connect_timeout),
            )),
            Ok(r) => r.map_err(|e| ConnectError::from_redis(&e, self.is_tls())),
        }
    }

    /// Resolve, connect TCP, and (for `rediss://`) complete the TLS handshake.
    async fn stream(&self) -> Result<Box<dyn Io>, ConnectError> {
        let t = self.connect_timeout;
        let (host, port) = (self.endpoint.host.as_str(), self.endpoint.port);
        let addrs: Vec<_> =
            match tokio::time::timeout(t, tokio::net::lookup_host((host, port))).await {
                Err(_) => {
                    return Err(ConnectError::new(
                        Reason::Dns,
                        format!("resolving {host} did not finish within {t:?}"),
                    ));
                }
                Ok(Err(e)) => {
                    return Err(ConnectError::new(
                        Reason::Dns,
                        format!("cannot resolve {host}: {e}"),
                    ));
                }
                Ok(Ok(a)) => a.collect(),
            };
        let Some(first) = addrs.first().copied() else {
            return Err(ConnectError::new(
                Reason::Dns,
                format!("{host} resolves to no address"),
            ));
        };
        let started = Instant::now();
        let mut last = None;
        let mut tcp = None;
        for addr in addrs {
            let left = t.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, TcpStream::connect(addr)).await {
                Err(_) => {
                    last = Some(ConnectError::new(
                        Reason::Timeout,
                        format!("TCP connect to {addr} did not finish within {t:?}"),
                    ));
                    break;
                }
                Ok(Err(e)) => last = Some(ConnectError::from_io(&e, false)),
                Ok(Ok(s)) => {
                    tcp = Some(s);
                    break;
                }
            }
        }
        let Some(tcp) = tcp else {
            return Err(last.unwrap_or_else(|| {
                ConnectError::new(Reason::Refused, format!("cannot connect to {first}"))
            }));
        };
        // TCP_NODELAY: with Nagle on, a command written while an earlier one on the same
        // connection is unacknowledged waits for that reply: one extra round trip. Keepalive
        // finds a dead peer on a connection that only listens (pub/sub).
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(
            &socket2::TcpKeepalive::new()
                .with_time(Duration::from_secs(10))
                .with_interval(Duration::from_secs(5)),
        );
        let Some(tls) = &self.tls else {
            return Ok(Box::new(tcp));
        };
        let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
        let left = t.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, connector.connect(tls.server_name.clone(), tcp)).await {
            Err(_) => Err(ConnectError::new(
                Reason::Timeout,
                format!("TLS handshake did not finish within {t:?}"),
            )),
            Ok(Err(e)) => Err(match ConnectError::from_io(&e, true) {
                // Any failure of the handshake itself is a TLS problem (a plain-text port
                // answers a ClientHello with garbage or a close).
                ConnectError {
                    reason: Reason::Other | Reason::Timeout,
                    detail,
                    ..
                } => ConnectError::new(Reason::Tls, format!("TLS handshake failed: {detail}")),
                other => other,
            }),
            Ok(Ok(s)) => Ok(Box::new(s)),
        }
    }

    /// redis-rs settings: RESP2, the user and the current password, no `CLIENT SETINFO` (one
    /// command less for the ACL; its reply is ignored anyway).
    fn settings(&self) -> RedisConnectionInfo {
        let mut s = RedisConnectionInfo::default()
            .set_db(self.endpoint.db)
            .set_skip_set_lib_name();
        if let Some(u) = &self.username {
            s = s.set_username(u);
        }
        if let Some(p) = self.password() {
            s = s.set_password(p.expose());
        }
        s
    }

    /// The password to use now (re-reading `passwordFile`).
    fn password(&self) -> Option<Secret> {
        match &self.password {
            Password::None => None,
            Password::Fixed(p) => Some(p.clone()),
            Password::File { path, last } => {
                let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
                match read_password_file(&ProcessEnv, path) {
                    Ok(p) => {
                        if last.0.as_ref().is_some_and(|old| *old != p) {
                            tracing::info!(
                                endpoint = %self.endpoint.name,
                                file = %path.display(),
                                "redis.passwordFile changed; connecting with the new password"
                            );
                        }
                        *last = (Some(p), None);
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        if last.1.as_deref() != Some(msg.as_str()) {
                            tracing::warn!(
                                endpoint = %self.endpoint.name,
                                error = %msg,
                                "cannot read the password file; using the password read last"
                            );
                        }
                        last.1 = Some(msg);
                    }
                }
                last.0.clone()
            }
        }
    }
}

fn tls_settings(endpoint: &Endpoint, redis: &RedisConfig) -> Result<Tls, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?;
    let builder = if redis.tls_insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        match &redis.tls_ca_file {
            Some(ca) => {
                let pem = std::fs::read(ca)
                    .map_err(|e| format!("redis.tls.caFile: cannot read {}: {e}", ca.display()))?;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    let cert = cert.map_err(|e| {
                        format!(
                            "redis.tls.caFile: {} is not PEM certificates: {e}",
                            ca.display()
                        )
                    })?;
                    roots
                        .add(cert)
                        .map_err(|e| format!("redis.tls.caFile: {}: {e}", ca.display()))?;
                }
                if roots.is_empty() {
                    return Err(format!(
                        "redis.tls.caFile: {} holds no PEM certificate",
                        ca.display()
                    ));
                }
            }
            // Managed Redis with certificates from a public CA.
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        builder.with_root_certificates(roots)
    };
    let config = match (&redis.tls_cert_file, &redis.tls_key_file) {
        (Some(cert), Some(key)) => {
            let pem = std::fs::read(cert)
                .map_err(|e| format!("redis.tls.certFile: cannot read {}: {e}", cert.display()))?;
            let chain = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("redis.tls.certFile: {}: {e}", cert.display()))?;
            if chain.is_empty() {
                return Err(format!(
                    "redis.tls.certFile: {} holds no PEM certificate",
                    cert.display()
                ));
            }
            // The key's bytes never appear in an error.
            let key = PrivateKeyDer::from_pem_file(key).map_err(|_| {
                format!(
                    "redis.tls.keyFile: {} is not a readable PEM private key",
                    key.display()
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("redis.tls.certFile/keyFile: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    let name = redis
        .tls_server_name
        .clone()
        .unwrap_or_else(|| endpoint.host.clone());
    let server_name = ServerName::try_from(name.clone())
        .map_err(|_| format!("{}: {name:?} is not a valid TLS server name", endpoint.name))?;
    Ok(Tls {
        config: Arc::new(config),
        server_name,
    })
}

/// `redis.tls.insecureSkipVerify`: accept any certificate (signatures are still checked, so
/// the handshake itself is sound). Testing only.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

// ---------------------------------------------------------------------------------------------
// When to warn

/// The interval between repeated warnings about the same failure of one endpoint.
pub const WARN_EVERY: Duration = Duration::from_secs(30);

/// Decides which failures of one endpoint get a `warn` line: the first, each change of reason
/// (or of the denied command), then at most one per `every` while it keeps failing the same way.
#[derive(Debug)]
pub struct WarnLimiter {
    /// Minimum time between two warnings of the same failure.
    every: Duration,
    /// The failure warned about last and when; `None` while the endpoint works.
    last: Option<(Reason, Option<String>, Instant)>,
    /// Failures since the last warning that were not logged.
    suppressed: u64,
}

/// What to log for a failure.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Warn now; `suppressed` failures of the same kind since the previous warning were not.
    Warn {
        /// Failures not logged since the previous warning.
        suppressed: u64,
    },
    /// Only count it.
    Quiet,
}

impl WarnLimiter {
    /// A limiter that repeats a warning at most every `every`.
    pub fn new(every: Duration) -> Self {
        WarnLimiter {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// A failure at `now`.
    pub fn failure(&mut self, e: &ConnectError, now: Instant) -> Verdict {
        let warn = match &self.last {
            None => true,
            Some((reason, denied, at)) => {
                *reason != e.reason || *denied != e.denied || now.duration_since(*at) >= self.every
            }
        };
        if warn {
            let suppressed = std::mem::take(&mut self.suppressed);
            self.last = Some((e.reason, e.denied.clone(), now));
            Verdict::Warn { suppressed }
        } else {
            self.suppressed += 1;
            Verdict::Quiet
        }
    }

    /// A success; returns the reason it was failing with, if it was (log the recovery).
    pub fn success(&mut self) -> Option<Reason> {
        self.suppressed = 0;
        self.last.take().map(|(r, _, _)| r)
    }
}

/// Failure reporting for one endpoint and one kind of connection: logs (rate-limited) and counts.
pub struct FailureLog {
    /// `host:port`.
    endpoint: String,
    /// What failed, for the log line ("redis connection", "release-notice subscription").
    what: &'static str,
    /// When to warn.
    limiter: Mutex<WarnLimiter>,
    /// `redlock_elector_redis_connect_errors_total`.
    metrics: Metrics,
}

impl FailureLog {
    /// A log for `endpoint`'s `what`.
    pub fn new(endpoint: &str, what: &'static str, metrics: Metrics) -> Self {
        FailureLog {
            endpoint: endpoint.to_string(),
            what,
            limiter: Mutex::new(WarnLimiter::new(WARN_EVERY)),
            metrics,
        }
    }

    /// Count a failure and warn if the limiter says so.
    pub fn failed(&self, e: &ConnectError) {
        self.metrics
            .redis_connect_errors
            .with_label_values(&[self.endpoint.as_str(), e.reason.label()])
            .inc();
        let verdict = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .failure(e, Instant::now());
        if let Verdict::Warn { suppressed } = verdict {
            let headline = match &e.denied {
                Some(d) => format!("{} ({d} denied)", e.reason.label()),
                None => e.reason.label().to_string(),
            };
            tracing::warn!(
                endpoint = %self.endpoint,
                reason = e.reason.label(),
                denied = e.denied.as_deref().unwrap_or(""),
                error = %e.detail,
                fix = e.reason.fix(),
                suppressed,
                "{} failed: {headline}; retrying",
                self.what,
            );
        } else {
            tracing::debug!(endpoint = %self.endpoint, error = %e, "{} failed", self.what);
        }
    }

    /// Log the recovery at `info` if it was failing.
    pub fn succeeded(&self) {
        let was = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .success();
        if let Some(reason) = was {
            tracing::info!(
                endpoint = %self.endpoint,
                previous_reason = reason.label(),
                "{} works again",
                self.what
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(reason: Reason) -> ConnectError {
        ConnectError::new(reason, "x")
    }

    #[test]
    fn warns_first_on_change_then_every_interval() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut l = WarnLimiter::new(s(30));
        assert_eq!(
            l.failure(&e(Reason::Auth), t0),
            Verdict::Warn { suppressed: 0 }
        );
        assert_eq!(l.failure(&e(Reason::Auth), t0 + s(1)), Verdict::Quiet);
        assert_eq!(l.failure(&e(Reason::Auth), t0 + s(29)), Verdict::Quiet);
        // A new reason warns at once.
        assert_eq!(
            l.failure(&e(Reason::Tls), t0 + s(29)),
            Verdict::Warn { suppressed: 2 }
        );
        assert_eq!(l.failure(&e(Reason::Tls), t0 + s(58)), Verdict::Quiet);
        assert_eq!(
            l.failure(&e(Reason::Tls), t0 + s(59)),
            Verdict::Warn { suppressed: 1 }
        );
        // Another denied command is a change too.
        let mut info = e(Reason::Noperm);
        info.denied = Some("info".into());
        let mut sub = e(Reason::Noperm);
        sub.denied = Some("subscribe".into());
        assert!(matches!(l.failure(&info, t0 + s(60)), Verdict::Warn { .. }));
        assert_eq!(l.failure(&info, t0 + s(61)), Verdict::Quiet);
        assert!(matches!(l.failure(&sub, t0 + s(62)), Verdict::Warn { .. }));
        // Recovery reports the reason once; the next failure warns again at once.
        assert_eq!(l.success(), Some(Reason::Noperm));
        assert_eq!(l.success(), None);
        assert_eq!(l.failure(&sub, t0 + s(63)), Verdict::Warn { suppressed: 0 });
    }

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
        let release = &crate::redlock::scripts::scripts()[2];
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

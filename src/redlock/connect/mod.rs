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

mod error;
mod failures;
mod tls;

pub use error::{ConnectError, Reason, denied_by_acl};
pub use failures::{FailureLog, Verdict, WARN_EVERY, WarnLimiter};
pub use tls::TlsError;
use tls::tls_settings;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::TaskTracker;

use redis::aio::{MultiplexedConnection, PubSub};
use redis::io::tcp::socket2;
use redis::{AsyncConnectionConfig, RedisConnectionInfo};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::config::{Endpoint, ProcessEnv, RedisConfig, Secret, read_password_file};

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
        /// The value used last, and the last read error.
        last: Mutex<LastRead>,
    },
}

/// What the last reads of `redis.passwordFile` gave.
#[derive(Default)]
struct LastRead {
    /// The value read last: used while the file cannot be read.
    password: Option<Secret>,
    /// The last read error's text, so each distinct error is logged once, not at every connect.
    error: Option<String>,
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
    /// Where the connections' drivers run (the process's tracker, awaited at shutdown).
    tasks: TaskTracker,
}

/// A bidirectional byte stream (TCP or TLS over TCP).
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

impl Connector {
    /// Build from config: reads the TLS files (CA, client certificate and key) once. The
    /// connections' drivers are spawned on `tasks`.
    pub fn new(
        endpoint: &Endpoint,
        redis: &RedisConfig,
        tasks: TaskTracker,
    ) -> Result<Connector, TlsError> {
        let tls = if endpoint.tls {
            Some(tls_settings(endpoint, redis)?)
        } else {
            None
        };
        let password = match (&endpoint.password, &redis.password_file, &redis.password) {
            (Some(p), _, _) => Password::Fixed(p.clone()),
            (None, Some(path), initial) => Password::File {
                path: path.clone(),
                last: Mutex::new(LastRead {
                    password: initial.clone(),
                    error: None,
                }),
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
            tasks,
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
        self.tasks.spawn(driver);
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

    /// Resolve, connect TCP, and (for `rediss://`) complete the TLS handshake, all within the
    /// connect timeout.
    async fn stream(&self) -> Result<Box<dyn Io>, ConnectError> {
        let started = Instant::now();
        let addrs = self.resolve().await?;
        let tcp = self.tcp(addrs, started).await?;
        // TCP_NODELAY: with Nagle on, a command written while an earlier one on the same
        // connection is unacknowledged waits for that reply: one extra round trip. Keepalive
        // finds a dead peer on a connection that only listens (pub/sub).
        let _ = tcp.set_nodelay(true);
        let _ = socket2::SockRef::from(&tcp).set_tcp_keepalive(
            &socket2::TcpKeepalive::new()
                .with_time(Duration::from_secs(10))
                .with_interval(Duration::from_secs(5)),
        );
        match &self.tls {
            None => Ok(Box::new(tcp)),
            Some(tls) => self.tls_handshake(tls, tcp, started).await,
        }
    }

    /// The endpoint's addresses; at least one.
    async fn resolve(&self) -> Result<Vec<SocketAddr>, ConnectError> {
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
        if addrs.is_empty() {
            return Err(ConnectError::new(
                Reason::Dns,
                format!("{host} resolves to no address"),
            ));
        }
        Ok(addrs)
    }

    /// A TCP connection to the first address that accepts, within what is left of the connect
    /// timeout since `started`.
    async fn tcp(
        &self,
        addrs: Vec<SocketAddr>,
        started: Instant,
    ) -> Result<TcpStream, ConnectError> {
        let t = self.connect_timeout;
        // `resolve` returns at least one address: the one a refusal names.
        let first = addrs.first().map(ToString::to_string).unwrap_or_default();
        let mut last = None;
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
                Ok(Ok(s)) => return Ok(s),
            }
        }
        Err(last.unwrap_or_else(|| {
            ConnectError::new(Reason::Refused, format!("cannot connect to {first}"))
        }))
    }

    /// The TLS handshake over `tcp`, within what is left of the connect timeout since `started`.
    async fn tls_handshake(
        &self,
        tls: &Tls,
        tcp: TcpStream,
        started: Instant,
    ) -> Result<Box<dyn Io>, ConnectError> {
        let t = self.connect_timeout;
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
                        if last.password.as_ref().is_some_and(|old| *old != p) {
                            tracing::info!(
                                endpoint = %self.endpoint.name,
                                file = %path.display(),
                                "redis.passwordFile changed; connecting with the new password"
                            );
                        }
                        *last = LastRead {
                            password: Some(p),
                            error: None,
                        };
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        if last.error.as_deref() != Some(msg.as_str()) {
                            tracing::warn!(
                                endpoint = %self.endpoint.name,
                                error = %msg,
                                "cannot read the password file; using the password read last"
                            );
                        }
                        last.error = Some(msg);
                    }
                }
                last.password.clone()
            }
        }
    }
}

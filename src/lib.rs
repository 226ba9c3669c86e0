//! # redlock-elector
//!
//! A Kubernetes leader-election sidecar: one replica at a time holds a lease taken with the
//! Redlock algorithm over N independent Redis masters, renews it, and tells the app beside it.
//!
//! # Layout
//! Data flows one way: config → elector (Redlock) → leadership state → publishers.
//! - [`config`] — YAML + env + flags into one validated [`config::Config`]; the only reader of
//!   env and files.
//! - [`redlock`] — the protocol against N nodes: acquire / renew / release, quorum and validity
//!   math ([`redlock::math`]), node connections, health and quarantine ([`redlock::node`]),
//!   opening connections (TLS, credentials) and classifying their failures
//!   ([`redlock::connect`]), the Lua scripts ([`redlock::scripts`]).
//! - [`elector`] — the follower ⇄ leader state machine and its timers, the stall watchdog;
//!   publishes a `watch` of [`leadership::Leadership`].
//! - [`leadership`] — the published state and the answer-time [`leadership::View`].
//! - publishers, each a consumer of that watch: [`api`] (/leader, long-poll, SSE, step-down),
//!   [`ops`] (/metrics, probes), [`publish::k8s`] (pod label, fencing-token annotation,
//!   Events, the own pod's standing).
//! - [`metrics`] — the Prometheus registry.
//! - [`probe`] — `check-config --connect`: the real handshake against every endpoint, and the
//!   quorum verdict.
//! - [`run`] — wiring: start everything, wait for a signal, shut down.
//! - [`logging`] — tracing setup (json or text).

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod api;
pub mod backoff;
pub mod config;
pub mod elector;
pub mod leadership;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod probe;
pub mod publish;
pub mod redlock;
pub mod run;

/// Fatal runtime errors (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// The address.
        addr: std::net::SocketAddr,
        /// `api.listen` or `ops.listen`.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The Redis client could not be built from the config.
    #[error("redis client: {0}")]
    Redis(#[from] ::redis::RedisError),
    /// Signal handlers could not be installed.
    #[error("signal handler: {0}")]
    Signal(#[source] std::io::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

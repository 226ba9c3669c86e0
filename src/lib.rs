//! # redlock-elector
//!
//! A Kubernetes leader-election sidecar: one replica at a time holds a lease taken with the
//! Redlock algorithm over N independent Redis masters, renews it, and tells the app beside it.
//!
//! # Layout
//! Data flows one way: config and inputs → elector (Redlock) → leadership state → publishers.
//! - [`config`] — YAML + env + flags into one validated [`config::Config`]; the only reader of
//!   env and files. `settings.rs` spells each setting once (YAML key, flag, env var, default,
//!   help), `cli.rs` the command line and the precedence (flag > env > file), `file.rs` the
//!   YAML file, `validate.rs` + `validate/{redis,kubernetes,parse}.rs` one short check per
//!   section, `endpoint.rs` the Redis URLs, `render.rs` the `check-config` output.
//! - [`redlock`] — the protocol against N nodes, one round per file: `acquire.rs`, `renew.rs`,
//!   `release.rs` (and the [`redlock::Notice`] it sends), `records.rs` (candidate records),
//!   `notices.rs` (release notices received), `lease.rs` (what a term holds); quorum and
//!   validity math ([`redlock::math`]), the wall-clock watch ([`redlock::clock`]), candidate
//!   ranking ([`redlock::candidates`]), the Lua scripts ([`redlock::scripts`]).
//!   [`redlock::node`] is one Redis master: `connection.rs` (handshake, reconnects),
//!   `command.rs` (scripts and their errors), `info.rs` (INFO parsing and classification, pure),
//!   `health.rs` (quarantine and eligibility), `subscription.rs` (the notice and attestation
//!   channels), `attest.rs` (vouches for fresh sidecars' clock watches, given and taken).
//!   [`redlock::connect`] opens connections (TLS, credentials) and classifies their failures.
//! - [`elector`] — the follower ⇄ leader state machine and its timers; publishes a `watch` of
//!   [`leadership::Leadership`]. Every decision is in `machine/`, with no I/O: `follower.rs`
//!   (waiting, attempts, notices, the retry jitter), `leader.rs` (renewals, step-down, naming
//!   the successor), `candidacy.rs` (the own record, what `/leader` shows about candidates),
//!   `io.rs` (its events and commands), `tests.rs` (table tests). `driver.rs` runs it against
//!   the nodes (`Rounds`); `watchdog.rs` (the stall watchdog, `/healthz` liveness),
//!   `settings.rs` (timers, preference, standing).
//! - [`k8s`] — the Kubernetes client side: [`k8s::Settings`], the client, `call.rs` (one
//!   counted API call, typed errors) and the elector's input `standing.rs` (the own pod's
//!   revision and readiness, read by a poller that `run` starts and hands to the elector).
//! - [`leadership`] — the published state, the answer-time [`leadership::View`], and
//!   [`leadership::Shared`], what the answering publishers read.
//! - publishers, each a consumer of that watch: [`api`] (/leader, long-poll, SSE, step-down),
//!   [`ops`] (/metrics, probes), [`publish::k8s`]: the pod label and fencing-token
//!   annotation (`converge.rs` the retry loop, `patch.rs` the pure patches, `pods.rs` the calls,
//!   demote before promote), `events.rs` (Events).
//! - [`metrics`] — the Prometheus registry: [`metrics::Metrics::register`] and one method per
//!   event counted.
//! - [`openapi`] — the OpenAPI 3.1 document of both HTTP servers (the generated reference
//!   `docs/reference/http-api.*` and the live check against it).
//! - [`backoff`] — the one retry backoff and the random delays.
//! - [`probe`] — `check-config --connect`: the real handshake against every endpoint, and the
//!   quorum verdict.
//! - [`run`] — wiring: start everything, wait for a signal, shut down within
//!   [`run::shutdown_budget`].
//! - [`logging`] — tracing setup (json or text).

// No unsafe code, but in one module: `exec::guard` (`run`'s guard process) sets the parent-death
// signal between fork and exec, signals a process group and reads CLOCK_MONOTONIC, which std
// cannot do.
#![deny(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod api;
pub mod backoff;
pub mod config;
pub mod elector;
pub mod exec;
pub mod health;
pub mod k8s;
pub mod leadership;
pub mod logging;
pub mod metrics;
pub mod openapi;
pub mod ops;
pub mod probe;
pub mod publish;
pub mod redlock;
pub mod run;

/// Fatal runtime errors of [`run`] (exit 1). The other layers have their own: configuration
/// ([`config`], exit 2), Redis connections ([`redlock::connect::ConnectError`]), the API's
/// query strings ([`api::QueryError`]).
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
    /// The metrics could not be registered (a duplicate or malformed definition: a bug).
    #[error("metrics: {0}")]
    Metrics(#[source] prometheus::Error),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

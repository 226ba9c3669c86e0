//! Configuration: YAML file, `REDLOCK_ELECTOR_*` environment variables and flags, merged in that
//! order of precedence (default < file < env < flag) into one validated [`Config`].
//!
//! Nothing else in the crate reads the environment or files. Every error names the field
//! (`lease.ttl`) or flag and says what is wrong, so `main` can exit 2 before binding a port.
//!
//! - [`settings`] — every setting once: its YAML key (serde), flag and env var (clap), help and
//!   default; the file and the command line both fill the same [`Settings`].
//! - [`cli`] — the command line; [`file`](mod@file) — the YAML file.
//! - [`validate`](mod@validate) — [`Settings`] into [`Config`], one short function per section.
//! - [`endpoint`] — Redis URLs; [`render`] — the `check-config` YAML.
//! - [`reference`](mod@reference) — every setting as the generated configuration reference lists it.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod cli;
pub mod endpoint;
pub mod file;
pub mod reference;
pub mod render;
pub mod settings;
pub mod validate;

#[cfg(test)]
mod tests;

pub use cli::{Mode, Parsed, UnsafeSwitches, command, parse_args};
pub use endpoint::{Endpoint, parse_endpoint};
pub use reference::{SettingDoc, reference};
pub use render::effective_yaml;
pub use settings::Settings;
pub use validate::{MIN_TTL, fmt_dur, is_dns_label, parse_duration, read_password_file, validate};

/// Env var that carries the Redis password (never a flag: flags show up in `ps`).
pub const PASSWORD_ENV: &str = "REDLOCK_ELECTOR_REDIS_PASSWORD";

/// A setting that is invalid: the field or flag, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// `lease.ttl`, `--ttl`, or the config file path.
    pub field: String,
    /// What is wrong, and where possible what to write instead.
    pub message: String,
}

pub(crate) fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
    }
}

/// Why the configuration could not be loaded; every kind exits 2 except `--help`/`--version`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A usage error, `--help` or `--version`: clap prints it and picks the exit code.
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// The config file cannot be read.
    #[error("--config: cannot read {path}: {source}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// The config file is not valid YAML of the config's shape (e.g. an unknown key).
    #[error("{path}: {message}")]
    Syntax {
        /// The path as given.
        path: String,
        /// The parser's message on one line.
        message: String,
    },
    /// A setting is invalid.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
}

impl Error {
    /// Print the error the way the command line always has, and give the exit code.
    pub fn report(&self) -> u8 {
        match self {
            Error::Usage(e) => {
                // Nothing better to do when stderr is gone.
                let _ = e.print();
                e.exit_code().clamp(0, 255) as u8
            }
            Error::Unreadable { .. } | Error::Syntax { .. } => {
                eprintln!("error: {self}");
                2
            }
            Error::Invalid(e) => {
                eprintln!("redlock-elector: invalid config: {e}");
                2
            }
        }
    }
}

/// A command line, parsed and validated: what to do and with which config.
#[derive(Debug)]
pub struct Invocation {
    /// The validated config.
    pub config: Config,
    /// Run the sidecar, or check the config.
    pub mode: Mode,
}

/// Parse the command line, read the config file, and validate the result.
pub fn load<I, T>(args: I, env: &dyn Env) -> Result<Invocation, Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let parsed = parse_args(args, env)?;
    let config = validate(&parsed.settings, env, parsed.switches)?;
    if matches!(parsed.mode, Mode::Exec { .. }) || config.run.kill_grace_given {
        validate::run_fits(&config)?;
    }
    if matches!(parsed.mode, Mode::Exec { .. }) && config.lease.names.len() > 1 {
        let field = match config.lease.shards {
            0 => "lease.names",
            _ => "lease.shards",
        };
        return Err(err(
            field,
            "`run -- CMD` runs its command under one lease: give lease.name alone, or run one sidecar per lease",
        )
        .into());
    }
    Ok(Invocation {
        config,
        mode: parsed.mode,
    })
}

/// The process environment as the config sees it (files, `POD_NAME` and the like); injected so
/// tests need not mutate globals. The `REDLOCK_ELECTOR_*` settings are read by clap.
pub trait Env {
    /// The value of an env var, if set and valid UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// Read a file (config, password file, service-account namespace, hostname).
    fn read(&self, path: &Path) -> std::io::Result<String>;
}

/// The real environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
    fn read(&self, path: &Path) -> std::io::Result<String> {
        std::fs::read_to_string(path)
    }
}

/// A validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Who this replica is; the prefix of the lock value.
    pub identity: String,
    /// The lease and its timing.
    pub lease: LeaseConfig,
    /// The Redis masters.
    pub redis: RedisConfig,
    /// App-facing API bind address.
    pub api_listen: SocketAddr,
    /// Ops (metrics, probes) bind address.
    pub ops_listen: SocketAddr,
    /// Pod label and Events publishing.
    pub kubernetes: KubernetesConfig,
    /// Logging.
    pub log: LogConfig,
    /// The app's health (`lease.followApp`, `app.*`).
    pub app: AppConfig,
    /// `redlock-elector run -- CMD`.
    pub run: RunConfig,
    /// Test-only switches that turn a safety mechanism off, to show the hazard it prevents.
    pub unsafe_switches: UnsafeSwitches,
    /// Non-fatal findings (e.g. an even number of endpoints), logged once logging is up.
    pub warnings: Vec<String>,
}

/// What "the app is healthy" means (`app.*`), with `lease.followApp`.
#[derive(Clone, Debug)]
pub struct AppConfig {
    /// `app.containers`; empty = every container of the pod but the sidecar's.
    pub containers: Vec<String>,
    /// `app.healthUrl`, probed with the next three settings.
    pub health_url: Option<url::Url>,
    /// `app.healthInterval`.
    pub health_interval: Duration,
    /// `app.healthTimeout`.
    pub health_timeout: Duration,
    /// `app.healthFailureThreshold`.
    pub health_failure_threshold: u32,
    /// `app.unhealthyGrace`.
    pub unhealthy_grace: Duration,
    /// `app.cooldown`.
    pub cooldown: Duration,
}

/// How `redlock-elector run` stops its command.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// From SIGTERM to SIGKILL; the stop starts this long before the term's deadline.
    pub kill_grace: Duration,
    /// Whether `run.killGrace` was given (then `check-config` checks it fits the term).
    pub kill_grace_given: bool,
    /// After the command exits by itself while leading.
    pub on_child_exit: crate::exec::OnChildExit,
}

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name; part of the Redis key and the `lease` metric label. With several leases
    /// (`lease.names`), the first of them: the one `/leader` and the pod's lease label name.
    pub name: String,
    /// Every lease this sidecar contends for, `name` first: `[name]` for the single-lease form,
    /// `NAME-0` to `NAME-<M-1>` for `lease.shards: M`.
    pub names: Vec<String>,
    /// `lease.shards`: the leases are shards of `name`, spread evenly over the replicas; 0
    /// when not sharded.
    pub shards: u32,
    /// Time-to-live of the key on each node.
    pub ttl: Duration,
    /// How often the leader renews.
    pub renew_every: Duration,
    /// Base follower retry period (jittered).
    pub retry_every: Duration,
    /// Clock-rate drift allowance.
    pub drift_factor: f64,
    /// Prefix of every key and channel.
    pub key_prefix: String,
    /// Which ready candidate leadership should move to.
    pub prefer: Prefer,
    /// Explicit rank of this replica; compared before the pod's revision.
    pub priority: i64,
    /// How long a preferred candidate must have been ready before a preferred handover.
    pub prefer_settle: Duration,
    /// `lease.followApp`: leadership follows the app's health (`app.*`).
    pub follow_app: bool,
}

/// `lease.prefer`: which candidate a graceful handover names, and whether a leader hands over
/// to a better ready candidate by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Prefer {
    /// The highest priority, then the newest revision; a leader hands over to a better one.
    Newest,
    /// The highest priority, then the oldest revision (KEP-4355's spirit); a leader hands over
    /// to a better one.
    Oldest,
    /// No order: a graceful release names any ready candidate; no preferred handover.
    None,
}

impl LeaseConfig {
    /// The sharded lease's name (`lease.name` as given) for `lease.shards`, whose shards are
    /// `NAME-0` to `NAME-<M-1>`; `None` when not sharded.
    pub fn sharded_name(&self) -> Option<&str> {
        match self.shards {
            0 => None,
            _ => Some(self.name.strip_suffix("-0").unwrap_or(&self.name)),
        }
    }
}

impl Prefer {
    /// Every value as written in the config (`--help` and the reference list them).
    pub const NAMES: [&'static str; 3] = [
        Prefer::Newest.as_str(),
        Prefer::Oldest.as_str(),
        Prefer::None.as_str(),
    ];

    /// The value as written in the config.
    pub const fn as_str(self) -> &'static str {
        match self {
            Prefer::Newest => "newest",
            Prefer::Oldest => "oldest",
            Prefer::None => "none",
        }
    }
}

/// Redis settings.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// The N independent masters.
    pub endpoints: Vec<Endpoint>,
    /// Per-node command timeout.
    pub timeout: Duration,
    /// Per-node connect timeout.
    pub connect_timeout: Duration,
    /// ACL user.
    pub username: Option<String>,
    /// Password from file or env; never printed.
    pub password: Option<Secret>,
    /// Where the password came from, shown by check-config.
    pub password_file: Option<PathBuf>,
    /// PEM CA bundle for TLS endpoints.
    pub tls_ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for servers with `tls-auth-clients yes` (with the key).
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    pub tls_key_file: Option<PathBuf>,
    /// Name the server certificate is verified against (and SNI), instead of the URL's host.
    pub tls_server_name: Option<String>,
    /// Skip certificate verification.
    pub tls_insecure_skip_verify: bool,
}

/// A string that never prints: `Debug` and the `check-config` YAML show `<redacted>`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(crate) String);

impl Secret {
    /// What every rendering of a secret shows.
    pub const REDACTED: &'static str = "<redacted>";

    /// The secret itself, for handing to the Redis client only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(Secret::REDACTED)
    }
}

/// Kubernetes publishing settings.
#[derive(Clone, Debug)]
pub struct KubernetesConfig {
    /// auto | true | false.
    pub enabled: KubeEnabled,
    /// Own pod name, if known.
    pub pod_name: Option<String>,
    /// Own namespace, if known.
    pub namespace: Option<String>,
    /// Role label key.
    pub label_key: String,
    /// Role label value while leader.
    pub label_leader: String,
    /// Role label value while follower.
    pub label_follower: String,
    /// Emit Events.
    pub events: bool,
    /// Publish the fencing token as the `redlock-elector/fencing-token` pod annotation.
    pub fencing_token_annotation: bool,
    /// Whether `KUBERNETES_SERVICE_HOST` was set (for `auto`).
    pub in_cluster: bool,
    /// Own pod IP (`kubernetes.podIP`, else `$POD_IP`), if known.
    pub pod_ip: Option<std::net::Ipv4Addr>,
    /// The leader Service's EndpointSlice this sidecar writes; `None` = off (the label route).
    pub endpoint_slice: Option<EndpointSliceConfig>,
}

/// `kubernetes.endpointSlice.*`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSliceConfig {
    /// The slice's name; also its Service's, when the sidecar must re-create it.
    pub name: String,
    /// The lease whose leader the slice lists (one of `lease.names`).
    pub lease: String,
    /// The ports the slice lists.
    pub ports: Vec<SlicePort>,
}

/// One port of the slice: `[NAME:]PORT[/PROTOCOL]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicePort {
    /// The Service port's name (kube-proxy pairs the slice's port with it by name); may be
    /// empty for a Service with one unnamed port.
    pub name: String,
    /// The app's port number on the pod.
    pub port: u16,
    /// TCP, UDP or SCTP.
    pub protocol: String,
}

impl SlicePort {
    /// As written in the config.
    pub fn as_text(&self) -> String {
        match self.name.as_str() {
            "" => format!("{}/{}", self.port, self.protocol),
            n => format!("{n}:{}/{}", self.port, self.protocol),
        }
    }
}

impl KubernetesConfig {
    /// Whether publishing is on, resolving `auto`.
    pub fn is_enabled(&self) -> bool {
        match self.enabled {
            KubeEnabled::Auto => self.in_cluster,
            KubeEnabled::On => true,
            KubeEnabled::Off => false,
        }
    }
}

/// `kubernetes.enabled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeEnabled {
    /// On when running in a cluster.
    Auto,
    /// Always on.
    On,
    /// Always off.
    Off,
}

impl KubeEnabled {
    /// Every value as written in the config (`--help` and the reference list them).
    pub const NAMES: [&'static str; 3] = [
        KubeEnabled::Auto.as_str(),
        KubeEnabled::On.as_str(),
        KubeEnabled::Off.as_str(),
    ];

    /// The value as written in the config.
    pub const fn as_str(self) -> &'static str {
        match self {
            KubeEnabled::Auto => "auto",
            KubeEnabled::On => "true",
            KubeEnabled::Off => "false",
        }
    }
}

/// Logging settings.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// json | text.
    pub format: LogFormat,
    /// A tracing filter (`info`, `redlock_elector=debug`).
    pub level: String,
}

/// `log.format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line.
    Json,
    /// Human-readable.
    Text,
}

impl LogFormat {
    /// Every value as written in the config (`--help` and the reference list them).
    pub const NAMES: [&'static str; 2] = [LogFormat::Json.as_str(), LogFormat::Text.as_str()];

    /// The value as written in the config.
    pub const fn as_str(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

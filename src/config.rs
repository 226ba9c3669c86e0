//! Configuration: YAML file, `REDLOCK_ELECTOR_*` environment variables and flags, merged in that
//! order of precedence (default < file < env < flag) into one validated [`Config`].
//!
//! Nothing else in the crate reads the environment or files. Every error names the field
//! (`lease.ttl`) or flag and says what is wrong, so `main` can exit 2 before binding a port.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Everything that can be set, in one table: the key as written in YAML, the flag that sets it,
/// and the help text. The env var is derived from the key (`lease.renewEvery` →
/// `REDLOCK_ELECTOR_LEASE_RENEW_EVERY`).
pub struct Setting {
    /// Dotted YAML path, camelCase.
    pub key: &'static str,
    /// Long flag name without the dashes.
    pub flag: &'static str,
    /// One line for `--help`.
    pub help: &'static str,
}

/// The settings table. `redis.endpoints` is a list: the flag repeats, the env var is comma-separated.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "identity",
        flag: "identity",
        help: "Identity of this replica [default: $POD_NAME, else the hostname]",
    },
    Setting {
        key: "lease.name",
        flag: "lease",
        help: "Lease name (required; lowercase RFC 1123 label, <= 63 chars)",
    },
    Setting {
        key: "lease.ttl",
        flag: "ttl",
        help: "Lease time-to-live set on every Redis node [default: 10s]",
    },
    Setting {
        key: "lease.renewEvery",
        flag: "renew-every",
        help: "Renewal period; must be < ttl/2 [default: ttl/3]",
    },
    Setting {
        key: "lease.retryEvery",
        flag: "retry-every",
        help: "Follower retry period, jittered [default: 1s]",
    },
    Setting {
        key: "lease.driftFactor",
        flag: "drift-factor",
        help: "Clock drift allowance, in [0, 0.1) [default: 0.01]",
    },
    Setting {
        key: "lease.prefer",
        flag: "prefer",
        help: "Which candidate leads during rollouts: newest|oldest|none [default: newest with Kubernetes, else none]",
    },
    Setting {
        key: "lease.priority",
        flag: "priority",
        help: "This replica's rank, compared before the pod's revision: a higher one is preferred [default: 0]",
    },
    Setting {
        key: "lease.preferSettle",
        flag: "prefer-settle",
        help: "How long a preferred candidate must have been ready before the leader hands over to it [default: 5s]",
    },
    Setting {
        key: "lease.keyPrefix",
        flag: "key-prefix",
        help: "Prefix of the Redis keys [default: redlock-elector:]",
    },
    Setting {
        key: "redis.endpoints",
        flag: "redis",
        help: "Redis master URL (redis:// or rediss://); repeat for each node (1..=16)",
    },
    Setting {
        key: "redis.timeout",
        flag: "redis-timeout",
        help: "Per-node command timeout; must be < ttl/10 [default: 50ms]",
    },
    Setting {
        key: "redis.connectTimeout",
        flag: "redis-connect-timeout",
        help: "Per-node connect timeout [default: 500ms]",
    },
    Setting {
        key: "redis.username",
        flag: "redis-username",
        help: "Redis ACL user",
    },
    Setting {
        key: "redis.passwordFile",
        flag: "redis-password-file",
        help: "File holding the Redis password (or env REDLOCK_ELECTOR_REDIS_PASSWORD)",
    },
    Setting {
        key: "redis.tls.caFile",
        flag: "redis-tls-ca-file",
        help: "PEM CA bundle for rediss:// endpoints",
    },
    Setting {
        key: "redis.tls.certFile",
        flag: "redis-tls-cert-file",
        help: "PEM client certificate (chain) for servers that require one (tls-auth-clients yes); with keyFile",
    },
    Setting {
        key: "redis.tls.keyFile",
        flag: "redis-tls-key-file",
        help: "PEM private key of redis.tls.certFile",
    },
    Setting {
        key: "redis.tls.serverName",
        flag: "redis-tls-server-name",
        help: "Name to verify the server certificate against (and send as SNI) instead of the URL's host, e.g. for endpoints reached by IP",
    },
    Setting {
        key: "redis.tls.insecureSkipVerify",
        flag: "redis-tls-insecure-skip-verify",
        help: "Skip TLS certificate verification (testing only) [default: false]",
    },
    Setting {
        key: "api.listen",
        flag: "api-listen",
        help: "Address of the app-facing API [default: 127.0.0.1:4040]",
    },
    Setting {
        key: "ops.listen",
        flag: "ops-listen",
        help: "Address of /metrics and probes [default: 0.0.0.0:4041]",
    },
    Setting {
        key: "kubernetes.enabled",
        flag: "kubernetes",
        help: "Publish a pod label and Events: auto|true|false [default: auto]",
    },
    Setting {
        key: "kubernetes.podName",
        flag: "pod-name",
        help: "Own pod name [default: $POD_NAME]",
    },
    Setting {
        key: "kubernetes.namespace",
        flag: "namespace",
        help: "Own namespace [default: $POD_NAMESPACE, else the service-account namespace]",
    },
    Setting {
        key: "kubernetes.label.key",
        flag: "label-key",
        help: "Role label key [default: redlock-elector/role]",
    },
    Setting {
        key: "kubernetes.label.leader",
        flag: "label-leader",
        help: "Role label value while leader [default: leader]",
    },
    Setting {
        key: "kubernetes.label.follower",
        flag: "label-follower",
        help: "Role label value while follower [default: follower]",
    },
    Setting {
        key: "kubernetes.events",
        flag: "events",
        help: "Emit Kubernetes Events on leadership changes [default: true]",
    },
    Setting {
        key: "kubernetes.fencingTokenAnnotation",
        flag: "fencing-token-annotation",
        help: "Annotate the leader pod with redlock-elector/fencing-token [default: false]",
    },
    Setting {
        key: "log.format",
        flag: "log-format",
        help: "Log format: json|text [default: json]",
    },
    Setting {
        key: "log.level",
        flag: "log-level",
        help: "Log level or tracing filter [default: info]",
    },
];

/// Env var that carries the Redis password (never a flag: flags show up in `ps`).
pub const PASSWORD_ENV: &str = "REDLOCK_ELECTOR_REDIS_PASSWORD";

/// The env var name of a setting key.
pub fn env_name(key: &str) -> String {
    let mut out = String::from("REDLOCK_ELECTOR_");
    for c in key.chars() {
        if c == '.' {
            out.push('_');
        } else if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c);
        } else {
            out.push(c.to_ascii_uppercase());
        }
    }
    out
}

/// A configuration error: the field or flag, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// `lease.ttl`, `--ttl`, or the config file path.
    pub field: String,
    /// What is wrong, and where possible what to write instead.
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError {
        field: field.into(),
        message: message.into(),
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
    /// Test-only switches that turn a safety mechanism off, to show the hazard it prevents.
    pub unsafe_switches: UnsafeSwitches,
    /// Non-fatal findings (e.g. an even number of endpoints), logged once logging is up.
    pub warnings: Vec<String>,
}

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease name; part of the Redis key and the `lease` metric label.
    pub name: String,
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
}

/// `lease.prefer`: which candidate a graceful handover names, and whether a leader hands over
/// to a better ready candidate by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefer {
    /// The highest priority, then the newest revision; a leader hands over to a better one.
    Newest,
    /// The highest priority, then the oldest revision (KEP-4355's spirit); a leader hands over
    /// to a better one.
    Oldest,
    /// No order: a graceful release names any ready candidate; no preferred handover.
    None,
}

impl Prefer {
    /// The value as written in the config.
    pub fn as_str(self) -> &'static str {
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

/// A string that never prints.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for handing to the Redis client only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

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

impl Endpoint {
    /// The URL with any password replaced by `<redacted>`.
    pub fn redacted_url(&self) -> String {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let auth = match (&self.username, &self.password) {
            (Some(u), Some(_)) => format!("{u}:<redacted>@"),
            (None, Some(_)) => ":<redacted>@".to_string(),
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

// ---------------------------------------------------------------------------------------------
// Raw layers

/// A YAML scalar as written: strings, numbers and booleans are all kept as text and parsed
/// per field, so that every error can name the field.
#[derive(Deserialize, Clone, Debug)]
#[serde(untagged)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl Scalar {
    fn into_string(self) -> String {
        match self {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => i.to_string(),
            Scalar::Float(f) => f.to_string(),
            Scalar::Str(s) => s,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileConfig {
    identity: Option<Scalar>,
    lease: Option<FileLease>,
    redis: Option<FileRedis>,
    api: Option<FileListen>,
    ops: Option<FileListen>,
    kubernetes: Option<FileKube>,
    log: Option<FileLog>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileLease {
    name: Option<Scalar>,
    ttl: Option<Scalar>,
    renew_every: Option<Scalar>,
    retry_every: Option<Scalar>,
    drift_factor: Option<Scalar>,
    key_prefix: Option<Scalar>,
    prefer: Option<Scalar>,
    priority: Option<Scalar>,
    prefer_settle: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileRedis {
    endpoints: Option<Vec<String>>,
    timeout: Option<Scalar>,
    connect_timeout: Option<Scalar>,
    username: Option<Scalar>,
    password_file: Option<Scalar>,
    tls: Option<FileTls>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileTls {
    ca_file: Option<Scalar>,
    cert_file: Option<Scalar>,
    key_file: Option<Scalar>,
    server_name: Option<Scalar>,
    insecure_skip_verify: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileListen {
    listen: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileKube {
    enabled: Option<Scalar>,
    pod_name: Option<Scalar>,
    namespace: Option<Scalar>,
    label: Option<FileLabel>,
    events: Option<Scalar>,
    fencing_token_annotation: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileLabel {
    key: Option<Scalar>,
    leader: Option<Scalar>,
    follower: Option<Scalar>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileLog {
    format: Option<Scalar>,
    level: Option<Scalar>,
}

/// All layers merged: setting key → text, plus the endpoint list.
#[derive(Default, Debug, Clone)]
pub struct Raw {
    values: BTreeMap<&'static str, String>,
    endpoints: Option<Vec<String>>,
}

impl Raw {
    fn put(&mut self, key: &'static str, v: Option<Scalar>) {
        if let Some(v) = v {
            self.values.insert(key, v.into_string());
        }
    }

    /// Set one value (a later layer overrides an earlier one).
    pub fn set(&mut self, key: &str, value: String) {
        if key == "redis.endpoints" {
            self.endpoints = Some(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect(),
            );
        } else if let Some(s) = SETTINGS.iter().find(|s| s.key == key) {
            self.values.insert(s.key, value);
        }
    }

    /// Set the endpoint list (the repeatable `--redis` flag).
    pub fn set_endpoints(&mut self, endpoints: Vec<String>) {
        self.endpoints = Some(endpoints);
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.values
            .get(key)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// Parse a YAML config file's text into the raw layer.
pub fn parse_file(path: &Path, text: &str) -> Result<Raw, ConfigError> {
    let field = path.display().to_string();
    let file: FileConfig = if text.trim().is_empty() {
        FileConfig::default()
    } else {
        serde_saphyr::from_str(text).map_err(|e| err(field, one_line(&e.to_string())))?
    };
    let mut raw = Raw::default();
    raw.put("identity", file.identity);
    let lease = file.lease.unwrap_or_default();
    raw.put("lease.name", lease.name);
    raw.put("lease.ttl", lease.ttl);
    raw.put("lease.renewEvery", lease.renew_every);
    raw.put("lease.retryEvery", lease.retry_every);
    raw.put("lease.driftFactor", lease.drift_factor);
    raw.put("lease.keyPrefix", lease.key_prefix);
    raw.put("lease.prefer", lease.prefer);
    raw.put("lease.priority", lease.priority);
    raw.put("lease.preferSettle", lease.prefer_settle);
    let redis = file.redis.unwrap_or_default();
    raw.endpoints = redis.endpoints;
    raw.put("redis.timeout", redis.timeout);
    raw.put("redis.connectTimeout", redis.connect_timeout);
    raw.put("redis.username", redis.username);
    raw.put("redis.passwordFile", redis.password_file);
    let tls = redis.tls.unwrap_or_default();
    raw.put("redis.tls.caFile", tls.ca_file);
    raw.put("redis.tls.certFile", tls.cert_file);
    raw.put("redis.tls.keyFile", tls.key_file);
    raw.put("redis.tls.serverName", tls.server_name);
    raw.put("redis.tls.insecureSkipVerify", tls.insecure_skip_verify);
    raw.put("api.listen", file.api.unwrap_or_default().listen);
    raw.put("ops.listen", file.ops.unwrap_or_default().listen);
    let kube = file.kubernetes.unwrap_or_default();
    raw.put("kubernetes.enabled", kube.enabled);
    raw.put("kubernetes.podName", kube.pod_name);
    raw.put("kubernetes.namespace", kube.namespace);
    raw.put("kubernetes.events", kube.events);
    raw.put(
        "kubernetes.fencingTokenAnnotation",
        kube.fencing_token_annotation,
    );
    let label = kube.label.unwrap_or_default();
    raw.put("kubernetes.label.key", label.key);
    raw.put("kubernetes.label.leader", label.leader);
    raw.put("kubernetes.label.follower", label.follower);
    let log = file.log.unwrap_or_default();
    raw.put("log.format", log.format);
    raw.put("log.level", log.level);
    Ok(raw)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The process environment as the config sees it; injected so tests need not mutate globals.
pub trait Env {
    /// The value of an env var, if set and valid UTF-8.
    fn var(&self, name: &str) -> Option<String>;
    /// Read a file (password file, service-account namespace, hostname).
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

/// Apply `REDLOCK_ELECTOR_*` env vars over the raw layer.
pub fn apply_env(raw: &mut Raw, env: &dyn Env) {
    for s in SETTINGS {
        if let Some(v) = env.var(&env_name(s.key)) {
            raw.set(s.key, v);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Command line

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run the sidecar with this raw config (file + env + flags).
    Run(Box<Raw>, UnsafeSwitches),
    /// Validate and print; with `connect`, also probe every endpoint (`check-config --connect`).
    CheckConfig {
        /// The raw config (file + env + flags).
        raw: Box<Raw>,
        /// The hidden test-only switches.
        switches: UnsafeSwitches,
        /// `--connect`: connect to every endpoint and run the real handshake.
        connect: bool,
    },
}

/// Hidden, test-only flags that turn a safety mechanism off so a test can show the hazard it
/// prevents. Never set in production: mutual exclusion is then not guaranteed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnsafeSwitches {
    /// `--unsafe-disable-quarantine`: restarted nodes count at once.
    pub quarantine_off: bool,
    /// `--unsafe-disable-clock-check`: no clock-jump detection, and nodes count without having
    /// been watched for ttl + margin.
    pub clock_check_off: bool,
    /// `--no-named-successor`: releases name no successor, so followers race for the lease as
    /// before candidate records existed. Not a safety mechanism (the quorum rule is unchanged);
    /// here so the benchmark can compare handovers with and without a named successor.
    pub no_named_successor: bool,
}

impl UnsafeSwitches {
    /// One warning per switch that is on, for the log.
    pub fn warnings(&self) -> Vec<&'static str> {
        let mut w = Vec::new();
        if self.quarantine_off {
            w.push("--unsafe-disable-quarantine: restarted nodes count at once; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.no_named_successor {
            w.push("--no-named-successor: releases name no successor; followers race (benchmark comparison only)");
        }
        if self.clock_check_off {
            w.push("--unsafe-disable-clock-check: Redis clock jumps go undetected; mutual exclusion is NOT guaranteed (tests only)");
        }
        w
    }
}

/// Build the clap command from the settings table.
pub fn cli() -> clap::Command {
    use clap::{Arg, ArgAction};
    let mut cmd = clap::Command::new("redlock-elector")
        .version(env!("CARGO_PKG_VERSION"))
        // A later flag overrides an earlier one (wrappers append to a base command line).
        .args_override_self(true)
        .about("Kubernetes leader-election sidecar: a Redlock lease over several independent Redis masters")
        .after_help(
            "Every setting can also come from the YAML file and from env REDLOCK_ELECTOR_<KEY> \
             (e.g. REDLOCK_ELECTOR_LEASE_TTL); precedence: default < file < env < flag.\n\
             The Redis password comes from redis.passwordFile or env REDLOCK_ELECTOR_REDIS_PASSWORD.",
        )
        .arg(Arg::new("config").long("config").short('c').value_name("FILE").global(true).help("YAML config file"))
        .arg(
            Arg::new("unsafe-disable-quarantine")
                .long("unsafe-disable-quarantine")
                .action(ArgAction::SetTrue)
                .hide(true)
                .global(true),
        )
        .arg(
            Arg::new("no-named-successor")
                .long("no-named-successor")
                .action(ArgAction::SetTrue)
                .hide(true)
                .global(true),
        )
        .arg(
            Arg::new("unsafe-disable-clock-check")
                .long("unsafe-disable-clock-check")
                .action(ArgAction::SetTrue)
                .hide(true)
                .global(true),
        )
        .subcommand(
            clap::Command::new("check-config")
                .about("Validate a config file and print the effective settings (secrets redacted)")
                .arg(Arg::new("file").value_name("FILE").required(true))
                .arg(
                    Arg::new("connect")
                        .long("connect")
                        .action(ArgAction::SetTrue)
                        .help(
                            "Also connect to every Redis endpoint with these settings, run the real \
                             handshake and print one line per endpoint and the quorum verdict; \
                             exit 1 when no quorum is usable",
                        ),
                ),
        );
    for s in SETTINGS {
        let mut arg = Arg::new(s.key).long(s.flag).help(s.help).global(true);
        if s.key == "redis.endpoints" {
            arg = arg.value_name("URL").action(ArgAction::Append);
        } else {
            arg = arg.value_name(value_name(s.key));
        }
        cmd = cmd.arg(arg);
    }
    cmd
}

fn value_name(key: &str) -> &'static str {
    match key {
        "lease.ttl"
        | "lease.renewEvery"
        | "lease.retryEvery"
        | "lease.preferSettle"
        | "redis.timeout"
        | "redis.connectTimeout" => "DURATION",
        "api.listen" | "ops.listen" => "ADDR",
        "redis.passwordFile" | "redis.tls.caFile" | "redis.tls.certFile" | "redis.tls.keyFile" => {
            "FILE"
        }
        "redis.tls.serverName" => "NAME",
        "redis.tls.insecureSkipVerify"
        | "kubernetes.events"
        | "kubernetes.fencingTokenAnnotation" => "BOOL",
        _ => "VALUE",
    }
}

/// Parse the command line and read the config file; env and flags are layered on top.
pub fn parse_args<I, T>(args: I, env: &dyn Env) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let m = cli().try_get_matches_from(args)?;
    let (file, check, connect) = match m.subcommand() {
        Some(("check-config", sub)) => (
            sub.get_one::<String>("file").cloned(),
            true,
            sub.get_flag("connect"),
        ),
        _ => (m.get_one::<String>("config").cloned(), false, false),
    };
    let switches = UnsafeSwitches {
        quarantine_off: m.get_flag("unsafe-disable-quarantine"),
        clock_check_off: m.get_flag("unsafe-disable-clock-check"),
        no_named_successor: m.get_flag("no-named-successor"),
    };
    let mut raw = match file {
        Some(path) => {
            let p = PathBuf::from(&path);
            let text = env.read(&p).map_err(|e| {
                clap::Error::raw(
                    clap::error::ErrorKind::Io,
                    format!("--config: cannot read {path}: {e}\n"),
                )
            })?;
            parse_file(&p, &text).map_err(|e| {
                clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n"))
            })?
        }
        None => Raw::default(),
    };
    apply_env(&mut raw, env);
    for s in SETTINGS {
        if s.key == "redis.endpoints" {
            if let Some(v) = m.get_many::<String>(s.key) {
                raw.set_endpoints(v.cloned().collect());
            }
        } else if let Some(v) = m.get_one::<String>(s.key) {
            raw.set(s.key, v.clone());
        }
    }
    Ok(if check {
        Command::CheckConfig {
            raw: Box::new(raw),
            switches,
            connect,
        }
    } else {
        Command::Run(Box::new(raw), switches)
    })
}

// ---------------------------------------------------------------------------------------------
// Validation

/// Parse a humantime duration, naming the field on error.
pub fn parse_duration(field: &str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s.trim()).map_err(|_| {
        let hint =
            if s.trim().chars().all(|c| c.is_ascii_digit() || c == '.') && !s.trim().is_empty() {
                format!(" (try \"{}s\")", s.trim())
            } else {
                " (e.g. \"250ms\", \"10s\", \"1m\")".to_string()
            };
        err(field, format!("{s:?} is not a duration{hint}"))
    })
}

fn parse_bool(field: &str, s: &str) -> Result<bool, ConfigError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(err(
            field,
            format!("{s:?} is not a boolean (true or false)"),
        )),
    }
}

fn parse_addr(field: &str, s: &str) -> Result<SocketAddr, ConfigError> {
    s.trim().parse().map_err(|_| {
        err(
            field,
            format!("{s:?} is not an address (e.g. \"127.0.0.1:4040\")"),
        )
    })
}

/// RFC 1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, <= 63.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Parse one endpoint URL.
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
    let port = u.port().unwrap_or(6379);
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

fn decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
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

/// The validity of a lease sample must be positive; these bounds keep the algorithm meaningful.
pub const MIN_TTL: Duration = Duration::from_millis(100);

/// Validate the merged raw settings into a [`Config`].
pub fn validate(
    raw: &Raw,
    env: &dyn Env,
    unsafe_switches: UnsafeSwitches,
) -> Result<Config, ConfigError> {
    let mut warnings = Vec::new();

    let name = raw
        .get("lease.name")
        .ok_or_else(|| err("lease.name", "is required (e.g. \"my-app\")"))?;
    if !is_dns_label(name) {
        return Err(err(
            "lease.name",
            format!(
                "{name:?} is not a lowercase DNS label (a-z, 0-9, '-', starting and ending alphanumeric, <= 63 chars)"
            ),
        ));
    }
    let dur = |key: &str, default: Duration| -> Result<Duration, ConfigError> {
        match raw.get(key) {
            Some(s) => parse_duration(key, s),
            None => Ok(default),
        }
    };
    let ttl = dur("lease.ttl", Duration::from_secs(10))?;
    if ttl < MIN_TTL {
        return Err(err(
            "lease.ttl",
            format!("{} is below the minimum of 100ms", fmt_dur(ttl)),
        ));
    }
    // Whole milliseconds keep the default readable (10s → 3s 333ms).
    let renew_every = dur(
        "lease.renewEvery",
        Duration::from_millis((ttl.as_millis() / 3) as u64),
    )?;
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
    let retry_every = dur("lease.retryEvery", Duration::from_secs(1))?;
    if retry_every.is_zero() {
        return Err(err("lease.retryEvery", "must be above 0"));
    }
    let drift_factor = match raw.get("lease.driftFactor") {
        None => 0.01,
        Some(s) => s
            .trim()
            .parse::<f64>()
            .map_err(|_| err("lease.driftFactor", format!("{s:?} is not a number")))?,
    };
    if !(0.0..0.1).contains(&drift_factor) {
        return Err(err(
            "lease.driftFactor",
            format!("{drift_factor} is outside [0, 0.1)"),
        ));
    }
    let key_prefix = raw
        .values
        .get("lease.keyPrefix")
        .cloned()
        .unwrap_or_else(|| "redlock-elector:".to_string());

    let urls = raw.endpoints.clone().unwrap_or_default();
    if urls.is_empty() {
        return Err(err(
            "redis.endpoints",
            "at least one endpoint is required (e.g. redis://redis-0:6379)",
        ));
    }
    if urls.len() > 16 {
        return Err(err(
            "redis.endpoints",
            format!("{} endpoints given; at most 16 are supported", urls.len()),
        ));
    }
    let mut endpoints = Vec::with_capacity(urls.len());
    for (i, u) in urls.iter().enumerate() {
        let ep = parse_endpoint(&format!("redis.endpoints[{i}]"), u)?;
        if endpoints
            .iter()
            .any(|e: &Endpoint| e.name == ep.name && e.db == ep.db)
        {
            return Err(err(
                format!("redis.endpoints[{i}]"),
                format!("{} is listed twice", ep.name),
            ));
        }
        endpoints.push(ep);
    }
    if endpoints.len() % 2 == 0 {
        warnings.push(format!(
            "redis.endpoints: {} endpoints is an even number; quorum is {}, so an odd number tolerates the same failures with fewer nodes",
            endpoints.len(),
            endpoints.len() / 2 + 1
        ));
    }
    let timeout = dur("redis.timeout", Duration::from_millis(50))?;
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
    let connect_timeout = dur("redis.connectTimeout", Duration::from_millis(500))?;
    if connect_timeout.is_zero() {
        return Err(err("redis.connectTimeout", "must be above 0"));
    }
    let username = raw.get("redis.username").map(String::from);
    let password_file = raw.get("redis.passwordFile").map(PathBuf::from);
    let password = match &password_file {
        Some(p) => Some(read_password_file(env, p)?),
        None => env.var(PASSWORD_ENV).filter(|p| !p.is_empty()).map(Secret),
    };
    let tls_ca_file = raw.get("redis.tls.caFile").map(PathBuf::from);
    if let Some(ca) = &tls_ca_file {
        env.read(ca).map_err(|e| {
            err(
                "redis.tls.caFile",
                format!("cannot read {}: {e}", ca.display()),
            )
        })?;
    }
    let tls_cert_file = raw.get("redis.tls.certFile").map(PathBuf::from);
    let tls_key_file = raw.get("redis.tls.keyFile").map(PathBuf::from);
    match (&tls_cert_file, &tls_key_file) {
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
    for (key, file) in [
        ("redis.tls.certFile", &tls_cert_file),
        ("redis.tls.keyFile", &tls_key_file),
    ] {
        if let Some(f) = file {
            env.read(f)
                .map_err(|e| err(key, format!("cannot read {}: {e}", f.display())))?;
        }
    }
    let tls_server_name = raw
        .get("redis.tls.serverName")
        .map(|s| s.trim().to_string());
    if let Some(name) = &tls_server_name
        && rustls::pki_types::ServerName::try_from(name.as_str()).is_err()
    {
        return Err(err(
            "redis.tls.serverName",
            format!("{name:?} is not a DNS name or IP address"),
        ));
    }
    let tls_insecure_skip_verify = match raw.get("redis.tls.insecureSkipVerify") {
        Some(s) => parse_bool("redis.tls.insecureSkipVerify", s)?,
        None => false,
    };
    if (tls_ca_file.is_some()
        || tls_cert_file.is_some()
        || tls_server_name.is_some()
        || tls_insecure_skip_verify)
        && !endpoints.iter().any(|e| e.tls)
    {
        warnings.push(
            "redis.tls: settings given but no endpoint uses rediss://; they have no effect".into(),
        );
    }

    let api_listen = parse_addr(
        "api.listen",
        raw.get("api.listen").unwrap_or("127.0.0.1:4040"),
    )?;
    let ops_listen = parse_addr(
        "ops.listen",
        raw.get("ops.listen").unwrap_or("0.0.0.0:4041"),
    )?;
    if api_listen == ops_listen && api_listen.port() != 0 {
        return Err(err(
            "ops.listen",
            format!("{ops_listen} is also api.listen; use two ports"),
        ));
    }

    let enabled = match raw
        .get("kubernetes.enabled")
        .unwrap_or("auto")
        .trim()
        .to_ascii_lowercase()
        .as_str()
    {
        "auto" => KubeEnabled::Auto,
        "true" => KubeEnabled::On,
        "false" => KubeEnabled::Off,
        other => {
            return Err(err(
                "kubernetes.enabled",
                format!("{other:?} is not one of auto, true, false"),
            ));
        }
    };
    let pod_name = raw
        .get("kubernetes.podName")
        .map(String::from)
        .or_else(|| env.var("POD_NAME").filter(|s| !s.is_empty()));
    let namespace = raw
        .get("kubernetes.namespace")
        .map(String::from)
        .or_else(|| env.var("POD_NAMESPACE").filter(|s| !s.is_empty()))
        .or_else(|| {
            env.read(Path::new(
                "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
            ))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
        });
    let label_key = raw
        .get("kubernetes.label.key")
        .unwrap_or("redlock-elector/role")
        .to_string();
    let label_leader = raw
        .get("kubernetes.label.leader")
        .unwrap_or("leader")
        .to_string();
    let label_follower = raw
        .get("kubernetes.label.follower")
        .unwrap_or("follower")
        .to_string();
    for (k, v) in [
        ("kubernetes.label.leader", &label_leader),
        ("kubernetes.label.follower", &label_follower),
    ] {
        if !is_label_value(v) {
            return Err(err(k, format!("{v:?} is not a valid label value")));
        }
    }
    if label_leader == label_follower {
        return Err(err(
            "kubernetes.label.follower",
            "must differ from kubernetes.label.leader",
        ));
    }
    if !is_label_key(&label_key) {
        return Err(err(
            "kubernetes.label.key",
            format!("{label_key:?} is not a valid label key"),
        ));
    }
    let events = match raw.get("kubernetes.events") {
        Some(s) => parse_bool("kubernetes.events", s)?,
        None => true,
    };
    let fencing_token_annotation = match raw.get("kubernetes.fencingTokenAnnotation") {
        Some(s) => parse_bool("kubernetes.fencingTokenAnnotation", s)?,
        None => false,
    };
    let kubernetes = KubernetesConfig {
        enabled,
        pod_name: pod_name.clone(),
        namespace,
        label_key,
        label_leader,
        label_follower,
        events,
        fencing_token_annotation,
        in_cluster: env
            .var("KUBERNETES_SERVICE_HOST")
            .is_some_and(|s| !s.is_empty()),
    };
    if kubernetes.is_enabled() && kubernetes.pod_name.is_none() {
        return Err(err(
            "kubernetes.podName",
            "Kubernetes publishing is on but the pod name is unknown (set POD_NAME from the downward API)",
        ));
    }

    let prefer = match raw
        .get("lease.prefer")
        .map(|s| s.trim().to_ascii_lowercase())
    {
        None => {
            if kubernetes.is_enabled() {
                Prefer::Newest
            } else {
                Prefer::None
            }
        }
        Some(p) => match p.as_str() {
            "newest" => Prefer::Newest,
            "oldest" => Prefer::Oldest,
            "none" => Prefer::None,
            other => {
                return Err(err(
                    "lease.prefer",
                    format!("{other:?} is not one of newest, oldest, none"),
                ));
            }
        },
    };
    let priority = match raw.get("lease.priority") {
        None => 0,
        Some(s) => s.trim().parse::<i64>().map_err(|_| {
            err(
                "lease.priority",
                format!("{s:?} is not an integer (e.g. 1, 2, -1)"),
            )
        })?,
    };
    let prefer_settle = dur("lease.preferSettle", Duration::from_secs(5))?;
    if prefer_settle > Duration::from_secs(3600) {
        return Err(err(
            "lease.preferSettle",
            format!("{} is above the maximum of 1h", fmt_dur(prefer_settle)),
        ));
    }

    let format = match raw.get("log.format").unwrap_or("json").trim() {
        "json" => LogFormat::Json,
        "text" => LogFormat::Text,
        other => {
            return Err(err(
                "log.format",
                format!("{other:?} is not one of json, text"),
            ));
        }
    };
    let level = raw.get("log.level").unwrap_or("info").trim().to_string();
    if tracing_subscriber::EnvFilter::try_new(&level).is_err() {
        return Err(err(
            "log.level",
            format!("{level:?} is not a level (error, warn, info, debug, trace) or filter"),
        ));
    }

    let identity = match raw.get("identity") {
        Some(s) => s.trim().to_string(),
        None => pod_name
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

    Ok(Config {
        identity,
        lease: LeaseConfig {
            name: name.to_string(),
            ttl,
            renew_every,
            retry_every,
            drift_factor,
            key_prefix,
            prefer,
            priority,
            prefer_settle,
        },
        redis: RedisConfig {
            endpoints,
            timeout,
            connect_timeout,
            username,
            password,
            password_file,
            tls_ca_file,
            tls_cert_file,
            tls_key_file,
            tls_server_name,
            tls_insecure_skip_verify,
        },
        api_listen,
        ops_listen,
        kubernetes,
        log: LogConfig { format, level },
        unsafe_switches,
        warnings,
    })
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && (v.is_empty()
            || (v
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric())))
}

fn is_label_key(k: &str) -> bool {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    prefix.is_none_or(|p| !p.is_empty() && p.len() <= 253 && p.split('.').all(is_dns_label))
        && !name.is_empty()
        && is_label_value(name)
}

/// A duration as humantime prints it (`10s`, `250ms`).
pub fn fmt_dur(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

// ---------------------------------------------------------------------------------------------
// Effective settings, for check-config

/// The effective settings as YAML, in the config file's own shape, secrets redacted.
pub fn effective_yaml(c: &Config) -> String {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Out<'a> {
        identity: &'a str,
        lease: OutLease<'a>,
        redis: OutRedis,
        api: OutListen,
        ops: OutListen,
        kubernetes: OutKube<'a>,
        log: OutLog<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct OutLease<'a> {
        name: &'a str,
        ttl: String,
        renew_every: String,
        retry_every: String,
        drift_factor: f64,
        key_prefix: &'a str,
        prefer: &'a str,
        priority: i64,
        prefer_settle: String,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct OutRedis {
        endpoints: Vec<String>,
        timeout: String,
        connect_timeout: String,
        username: String,
        password_file: String,
        tls: OutTls,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct OutTls {
        ca_file: String,
        cert_file: String,
        key_file: String,
        server_name: String,
        insecure_skip_verify: bool,
    }
    #[derive(Serialize)]
    struct OutListen {
        listen: String,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct OutKube<'a> {
        enabled: String,
        pod_name: &'a str,
        namespace: &'a str,
        label: OutLabel<'a>,
        events: bool,
        fencing_token_annotation: bool,
    }
    #[derive(Serialize)]
    struct OutLabel<'a> {
        key: &'a str,
        leader: &'a str,
        follower: &'a str,
    }
    #[derive(Serialize)]
    struct OutLog<'a> {
        format: &'a str,
        level: &'a str,
    }
    let k = &c.kubernetes;
    let out = Out {
        identity: &c.identity,
        lease: OutLease {
            name: &c.lease.name,
            ttl: fmt_dur(c.lease.ttl),
            renew_every: fmt_dur(c.lease.renew_every),
            retry_every: fmt_dur(c.lease.retry_every),
            drift_factor: c.lease.drift_factor,
            key_prefix: &c.lease.key_prefix,
            prefer: c.lease.prefer.as_str(),
            priority: c.lease.priority,
            prefer_settle: fmt_dur(c.lease.prefer_settle),
        },
        redis: OutRedis {
            endpoints: c
                .redis
                .endpoints
                .iter()
                .map(Endpoint::redacted_url)
                .collect(),
            timeout: fmt_dur(c.redis.timeout),
            connect_timeout: fmt_dur(c.redis.connect_timeout),
            username: c.redis.username.clone().unwrap_or_default(),
            password_file: c
                .redis
                .password_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            tls: OutTls {
                ca_file: c
                    .redis
                    .tls_ca_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                cert_file: c
                    .redis
                    .tls_cert_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                key_file: c
                    .redis
                    .tls_key_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                server_name: c.redis.tls_server_name.clone().unwrap_or_default(),
                insecure_skip_verify: c.redis.tls_insecure_skip_verify,
            },
        },
        api: OutListen {
            listen: c.api_listen.to_string(),
        },
        ops: OutListen {
            listen: c.ops_listen.to_string(),
        },
        kubernetes: OutKube {
            enabled: match k.enabled {
                KubeEnabled::Auto => "auto".into(),
                KubeEnabled::On => "true".into(),
                KubeEnabled::Off => "false".into(),
            },
            pod_name: k.pod_name.as_deref().unwrap_or(""),
            namespace: k.namespace.as_deref().unwrap_or(""),
            label: OutLabel {
                key: &k.label_key,
                leader: &k.label_leader,
                follower: &k.label_follower,
            },
            events: k.events,
            fencing_token_annotation: k.fencing_token_annotation,
        },
        log: OutLog {
            format: if c.log.format == LogFormat::Json {
                "json"
            } else {
                "text"
            },
            level: &c.log.level,
        },
    };
    let mut notes =
        String::from("# effective settings of redlock-elector (default < file < env < flag)\n");
    if let Some(source) = match (&c.redis.password, &c.redis.password_file) {
        (Some(_), Some(_)) => Some("redis.passwordFile"),
        (Some(_), None) => Some(PASSWORD_ENV),
        _ => None,
    } {
        notes.push_str(&format!("# redis password: <redacted> (from {source})\n"));
    }
    if k.enabled == KubeEnabled::Auto {
        notes.push_str(&format!(
            "# kubernetes.enabled: auto resolves to {}\n",
            k.is_enabled()
        ));
    }
    for w in &c.warnings {
        notes.push_str(&format!("# warning: {w}\n"));
    }
    match serde_saphyr::to_string(&out) {
        Ok(yaml) => notes + &yaml,
        Err(e) => format!("{notes}# cannot render settings: {e}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct FakeEnv {
        vars: HashMap<String, String>,
        files: HashMap<PathBuf, String>,
    }
    impl Env for FakeEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.vars.get(name).cloned()
        }
        fn read(&self, path: &Path) -> std::io::Result<String> {
            self.files
                .get(path)
                .cloned()
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    }

    fn env() -> FakeEnv {
        let mut e = FakeEnv::default();
        e.vars.insert("POD_NAME".into(), "pod-a".into());
        e
    }

    fn load(yaml: &str, e: &FakeEnv) -> Result<Config, ConfigError> {
        let mut raw = parse_file(Path::new("c.yaml"), yaml)?;
        apply_env(&mut raw, e);
        validate(&raw, e, UnsafeSwitches::default())
    }

    const OK: &str =
        "lease: {name: my-app}\nredis: {endpoints: [redis://a:1, redis://b:2, redis://c]}\n";

    #[test]
    fn defaults() {
        let c = load(OK, &env()).unwrap();
        assert_eq!(c.identity, "pod-a");
        assert_eq!(c.lease.ttl, Duration::from_secs(10));
        assert_eq!(c.lease.renew_every, Duration::from_millis(3333));
        assert_eq!(c.lease.retry_every, Duration::from_secs(1));
        assert_eq!(c.lease.key_prefix, "redlock-elector:");
        assert_eq!(c.redis.timeout, Duration::from_millis(50));
        assert_eq!(c.redis.endpoints[2].name, "c:6379");
        assert_eq!(c.api_listen.to_string(), "127.0.0.1:4040");
        assert_eq!(c.ops_listen.to_string(), "0.0.0.0:4041");
        assert!(!c.kubernetes.is_enabled());
        assert!(c.warnings.is_empty());
        assert_eq!(c.lease.prefer, Prefer::None);
        assert_eq!(c.lease.priority, 0);
        assert_eq!(c.lease.prefer_settle, Duration::from_secs(5));
    }

    #[test]
    fn preference_settings() {
        // Newest by default once Kubernetes publishing is on.
        let mut e = env();
        e.vars
            .insert("KUBERNETES_SERVICE_HOST".into(), "10.0.0.1".into());
        assert_eq!(load(OK, &e).unwrap().lease.prefer, Prefer::Newest);
        let c = load(
            "lease: {name: a, prefer: Oldest, priority: -3, preferSettle: 2s}\nredis: {endpoints: [redis://a]}",
            &env(),
        )
        .unwrap();
        assert_eq!(c.lease.prefer, Prefer::Oldest);
        assert_eq!(c.lease.priority, -3);
        assert_eq!(c.lease.prefer_settle, Duration::from_secs(2));
        let mut e = env();
        e.vars
            .insert("REDLOCK_ELECTOR_LEASE_PRIORITY".into(), "7".into());
        e.vars
            .insert("REDLOCK_ELECTOR_LEASE_PREFER".into(), "newest".into());
        let c = load(OK, &e).unwrap();
        assert_eq!((c.lease.prefer, c.lease.priority), (Prefer::Newest, 7));
        let yaml = effective_yaml(&c);
        assert!(yaml.contains("prefer: newest"), "{yaml}");
        assert!(yaml.contains("priority: 7"), "{yaml}");
        assert!(yaml.contains("preferSettle: 5s"), "{yaml}");
        let cmd = parse_args(
            [
                "re",
                "--lease",
                "a",
                "--redis",
                "redis://a",
                "--priority",
                "2",
                "--prefer",
                "none",
            ],
            &env(),
        )
        .unwrap();
        let Command::Run(raw, _) = cmd else { panic!() };
        let c = validate(&raw, &env(), UnsafeSwitches::default()).unwrap();
        assert_eq!((c.lease.prefer, c.lease.priority), (Prefer::None, 2));
    }

    #[test]
    fn env_overrides_file_and_flag_overrides_env() {
        let mut e = env();
        e.vars
            .insert("REDLOCK_ELECTOR_LEASE_TTL".into(), "5s".into());
        e.vars.insert(
            "REDLOCK_ELECTOR_REDIS_ENDPOINTS".into(),
            "redis://x:1,redis://y:2".into(),
        );
        e.files.insert(
            "f.yaml".into(),
            format!("{OK}lease:\n  name: my-app\n  ttl: 20s\n")
                .replace("lease: {name: my-app}\n", ""),
        );
        let cmd = parse_args(["re", "--config", "f.yaml", "--ttl", "3s"], &e).unwrap();
        let Command::Run(raw, _) = cmd else { panic!() };
        let c = validate(&raw, &e, UnsafeSwitches::default()).unwrap();
        assert_eq!(c.lease.ttl, Duration::from_secs(3));
        assert_eq!(c.redis.endpoints.len(), 2);
        assert!(c.warnings[0].contains("even"));
        let cmd = parse_args(["re", "--config", "f.yaml"], &e).unwrap();
        let Command::Run(raw, _) = cmd else { panic!() };
        assert_eq!(
            validate(&raw, &e, UnsafeSwitches::default())
                .unwrap()
                .lease
                .ttl,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn env_names() {
        assert_eq!(
            env_name("lease.renewEvery"),
            "REDLOCK_ELECTOR_LEASE_RENEW_EVERY"
        );
        assert_eq!(
            env_name("redis.tls.insecureSkipVerify"),
            "REDLOCK_ELECTOR_REDIS_TLS_INSECURE_SKIP_VERIFY"
        );
    }

    #[test]
    fn tls_client_certificate_and_server_name() {
        let mut e = env();
        e.files.insert("/ca".into(), "ca".into());
        e.files.insert("/crt".into(), "crt".into());
        e.files.insert("/key".into(), "key".into());
        let c = load(
            "lease: {name: a}\nredis: {endpoints: ['rediss://10.0.0.1:6380'], tls: {caFile: /ca, certFile: /crt, keyFile: /key, serverName: redis.example.internal}}",
            &e,
        )
        .unwrap();
        assert_eq!(c.redis.tls_cert_file.as_deref(), Some(Path::new("/crt")));
        assert_eq!(c.redis.tls_key_file.as_deref(), Some(Path::new("/key")));
        assert_eq!(
            c.redis.tls_server_name.as_deref(),
            Some("redis.example.internal")
        );
        let yaml = effective_yaml(&c);
        for want in [
            "certFile: /crt",
            "keyFile: /key",
            "serverName: redis.example.internal",
        ] {
            assert!(yaml.contains(want), "{want} missing in:\n{yaml}");
        }
        let bad: &[(&str, &str)] = &[
            ("tls: {certFile: /crt}", "redis.tls.keyFile"),
            ("tls: {keyFile: /key}", "redis.tls.certFile"),
            (
                "tls: {certFile: /nope, keyFile: /key}",
                "redis.tls.certFile",
            ),
            ("tls: {certFile: /crt, keyFile: /nope}", "redis.tls.keyFile"),
            ("tls: {serverName: 'not a name'}", "redis.tls.serverName"),
        ];
        for (tls, field) in bad {
            let yaml = format!("lease: {{name: a}}\nredis: {{endpoints: ['rediss://h'], {tls}}}");
            assert_eq!(load(&yaml, &e).unwrap_err().field, *field, "{yaml}");
        }
        // Flags and env spell them too.
        let raw = match parse_args(
            [
                "redlock-elector",
                "--lease",
                "a",
                "--redis",
                "rediss://h",
                "--redis-tls-cert-file",
                "/crt",
                "--redis-tls-key-file",
                "/key",
                "--redis-tls-server-name",
                "redis.test",
            ],
            &e,
        )
        .unwrap()
        {
            Command::Run(raw, _) => raw,
            other => panic!("{other:?}"),
        };
        let c = validate(&raw, &e, UnsafeSwitches::default()).unwrap();
        assert_eq!(c.redis.tls_server_name.as_deref(), Some("redis.test"));
        assert_eq!(
            env_name("redis.tls.serverName"),
            "REDLOCK_ELECTOR_REDIS_TLS_SERVER_NAME"
        );
    }

    #[test]
    fn check_config_connect_flag() {
        let mut e = env();
        e.files.insert(
            "c.yaml".into(),
            "lease: {name: a}\nredis: {endpoints: [redis://h]}".into(),
        );
        for (args, want) in [
            (vec!["redlock-elector", "check-config", "c.yaml"], false),
            (
                vec!["redlock-elector", "check-config", "--connect", "c.yaml"],
                true,
            ),
        ] {
            match parse_args(args, &e).unwrap() {
                Command::CheckConfig { connect, .. } => assert_eq!(connect, want),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn bad_configs_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("redis: {endpoints: [redis://a]}", "lease.name"),
            (
                "lease: {name: My_App}\nredis: {endpoints: [redis://a]}",
                "lease.name",
            ),
            ("lease: {name: a}", "redis.endpoints"),
            (
                "lease: {name: a}\nredis: {endpoints: [http://a]}",
                "redis.endpoints[0]",
            ),
            (
                "lease: {name: a}\nredis: {endpoints: ['not a url']}",
                "redis.endpoints[0]",
            ),
            (
                "lease: {name: a, ttl: 10}\nredis: {endpoints: [redis://a]}",
                "lease.ttl",
            ),
            (
                "lease: {name: a, ttl: 50ms}\nredis: {endpoints: [redis://a]}",
                "lease.ttl",
            ),
            (
                "lease: {name: a, ttl: 1s, renewEvery: 500ms}\nredis: {endpoints: [redis://a]}",
                "lease.renewEvery",
            ),
            (
                "lease: {name: a, ttl: 1s}\nredis: {endpoints: [redis://a], timeout: 100ms}",
                "redis.timeout",
            ),
            (
                "lease: {name: a, driftFactor: 0.1}\nredis: {endpoints: [redis://a]}",
                "lease.driftFactor",
            ),
            (
                "lease: {name: a, driftFactor: -0.01}\nredis: {endpoints: [redis://a]}",
                "lease.driftFactor",
            ),
            (
                "lease: {name: a}\nredis: {endpoints: [redis://a], passwordFile: /nope}",
                "redis.passwordFile",
            ),
            (
                "lease: {name: a}\nredis: {endpoints: [redis://a]}\napi: {listen: nope}",
                "api.listen",
            ),
            (
                "lease: {name: a}\nredis: {endpoints: [redis://a]}\nlog: {format: xml}",
                "log.format",
            ),
            (
                "lease: {name: a, prefer: latest}\nredis: {endpoints: [redis://a]}",
                "lease.prefer",
            ),
            (
                "lease: {name: a, priority: high}\nredis: {endpoints: [redis://a]}",
                "lease.priority",
            ),
            (
                "lease: {name: a, preferSettle: 5}\nredis: {endpoints: [redis://a]}",
                "lease.preferSettle",
            ),
            (
                "lease: {name: a}\nredis: {endpoints: [redis://a]}\nkubernetes: {enabled: maybe}",
                "kubernetes.enabled",
            ),
        ];
        for (yaml, field) in cases {
            let e = load(yaml, &env()).unwrap_err();
            assert_eq!(&e.field, field, "{yaml}: {e}");
        }
    }

    #[test]
    fn fencing_token_annotation() {
        let c = load(OK, &env()).unwrap();
        assert!(!c.kubernetes.fencing_token_annotation, "off by default");
        let c = load(
            &format!("{OK}kubernetes: {{fencingTokenAnnotation: true}}"),
            &env(),
        )
        .unwrap();
        assert!(c.kubernetes.fencing_token_annotation);
        assert!(effective_yaml(&c).contains("fencingTokenAnnotation: true"));
        let e = load(
            &format!("{OK}kubernetes: {{fencingTokenAnnotation: sometimes}}"),
            &env(),
        )
        .unwrap_err();
        assert_eq!(e.field, "kubernetes.fencingTokenAnnotation", "{e}");
        let mut e = env();
        e.vars.insert(
            "REDLOCK_ELECTOR_KUBERNETES_FENCING_TOKEN_ANNOTATION".into(),
            "true".into(),
        );
        assert!(load(OK, &e).unwrap().kubernetes.fencing_token_annotation);
        let cmd = parse_args(["re", "--fencing-token-annotation", "false"], &e).unwrap();
        let Command::Run(mut raw, _) = cmd else {
            panic!()
        };
        raw.set("lease.name", "a".into());
        raw.set("redis.endpoints", "redis://a".into());
        assert!(
            !validate(&raw, &e, UnsafeSwitches::default())
                .unwrap()
                .kubernetes
                .fencing_token_annotation
        );
    }

    #[test]
    fn a_repeated_flag_takes_the_last_value() {
        let e = env();
        let cmd = parse_args(
            [
                "re",
                "--lease",
                "a",
                "--redis",
                "redis://a",
                "--redis",
                "redis://b",
                "--redis",
                "redis://c",
                "--kubernetes",
                "false",
                "--kubernetes",
                "true",
            ],
            &e,
        )
        .unwrap();
        let Command::Run(raw, _) = cmd else { panic!() };
        let c = validate(&raw, &e, UnsafeSwitches::default()).unwrap();
        assert!(c.kubernetes.is_enabled());
        assert_eq!(c.redis.endpoints.len(), 3, "--redis still accumulates");
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let e = load(
            "lease: {name: a, tll: 1s}\nredis: {endpoints: [redis://a]}",
            &env(),
        )
        .unwrap_err();
        assert!(e.message.contains("tll"), "{e}");
    }

    #[test]
    fn duration_hint() {
        let e = parse_duration("lease.ttl", "10").unwrap_err();
        assert_eq!(
            e.to_string(),
            "lease.ttl: \"10\" is not a duration (try \"10s\")"
        );
    }

    #[test]
    fn passwords_never_print() {
        let mut e = env();
        e.files.insert("/pw".into(), "s3cret-file\n".into());
        let c = load(
            "lease: {name: a}\nredis: {endpoints: ['redis://u:s3cret-url@h:1'], passwordFile: /pw}",
            &e,
        )
        .unwrap();
        assert_eq!(c.redis.password.as_ref().unwrap().expose(), "s3cret-file");
        let out = effective_yaml(&c);
        assert!(!out.contains("s3cret"), "{out}");
        assert!(out.contains("<redacted>"));
        assert!(!format!("{c:?}").contains("s3cret"));
        let err = parse_endpoint("x", "redis://u:s3cret@").unwrap_err();
        assert!(!err.to_string().contains("s3cret"));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("my-app"));
        assert!(is_dns_label("a"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_label_key("redlock-elector/role"));
        assert!(!is_label_key("bad key"));
    }
}

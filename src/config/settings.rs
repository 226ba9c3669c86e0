//! Every setting, spelled once: the struct field is the YAML key (serde, camelCase), its
//! `#[arg]` the flag and the `REDLOCK_ELECTOR_*` env var (clap), and its help names the default
//! from [`default`]. The file fills a [`Settings`]; flags and env overwrite what they set
//! ([`crate::config::cli`]). Values stay text until [`crate::config::validate()`], so that every
//! error names the field (`lease.ttl: "10" is not a duration`) whichever layer it came from.
//! `docs/reference/configuration.md` is generated from this file ([`super::reference()`]): a
//! setting's help line is its description there, `value_name` its kind (`DURATION`, `BOOL`,
//! `NUMBER`, `INTEGER`, ...), its `OneOf` parser its accepted values.

use std::ffi::OsStr;
use std::fmt::Display;

use clap::builder::{PossibleValue, StringValueParser, TypedValueParser};
use clap::{Arg, Args, Command};
use serde::{Deserialize, Deserializer};

use super::file::Text;
use super::{KubeEnabled, LogFormat, Prefer, fmt_dur};

mod app;
pub use app::{AppSettings, RunSettings};

/// The built-in defaults, each written once: validation falls back to them and `--help`
/// shows them.
pub mod default {
    use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
    use std::time::Duration;

    use crate::config::{KubeEnabled, LogFormat};

    /// `lease.ttl`.
    pub const TTL: Duration = Duration::from_secs(10);
    /// `lease.renewEvery` is ttl divided by this.
    pub const RENEW_DIVISOR: u128 = 3;
    /// `lease.retryEvery`.
    pub const RETRY_EVERY: Duration = Duration::from_secs(1);
    /// `lease.driftFactor`.
    pub const DRIFT_FACTOR: f64 = 0.01;
    /// `lease.priority`.
    pub const PRIORITY: i64 = 0;
    /// `lease.preferSettle`.
    pub const PREFER_SETTLE: Duration = Duration::from_secs(5);
    /// `lease.keyPrefix`.
    pub const KEY_PREFIX: &str = "redlock-elector:";
    /// `redis.timeout`.
    pub const TIMEOUT: Duration = Duration::from_millis(50);
    /// `redis.connectTimeout`.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
    /// `redis.tls.insecureSkipVerify`.
    pub const INSECURE_SKIP_VERIFY: bool = false;
    /// `api.listen`: localhost only, the app sits in the same pod.
    pub const API_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 4040));
    /// `ops.listen`: all interfaces, for Prometheus and the kubelet.
    pub const OPS_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(0, 0, 0, 0), 4041));
    /// `kubernetes.enabled`.
    pub const KUBERNETES: KubeEnabled = KubeEnabled::Auto;
    /// `kubernetes.label.key`.
    pub const LABEL_KEY: &str = "redlock-elector/role";
    /// `kubernetes.label.leader`.
    pub const LABEL_LEADER: &str = "leader";
    /// `kubernetes.label.follower`.
    pub const LABEL_FOLLOWER: &str = "follower";
    /// `kubernetes.events`.
    pub const EVENTS: bool = true;
    /// `kubernetes.fencingTokenAnnotation`.
    pub const FENCING_TOKEN_ANNOTATION: bool = false;
    /// `log.format`.
    pub const LOG_FORMAT: LogFormat = LogFormat::Json;
    /// `log.level`.
    pub const LOG_LEVEL: &str = "info";
    /// `lease.followApp`.
    pub const FOLLOW_APP: bool = false;
    /// `app.healthInterval`.
    pub const HEALTH_INTERVAL: Duration = Duration::from_secs(1);
    /// `app.healthTimeout`.
    pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
    /// `app.healthFailureThreshold`.
    pub const HEALTH_FAILURE_THRESHOLD: u32 = 3;
    /// `app.unhealthyGrace`.
    pub const UNHEALTHY_GRACE: Duration = Duration::from_secs(5);
    /// `app.cooldown`.
    pub const APP_COOLDOWN: Duration = Duration::from_secs(30);
    /// `run.killGrace` is ttl divided by this.
    pub const KILL_GRACE_DIVISOR: u32 = 5;
    /// `run.onChildExit`.
    pub const ON_CHILD_EXIT: &str = "exit";
}

/// A help line ending in its default, as clap would print one.
fn with_default(help: &str, default: impl Display) -> String {
    format!("{help} [default: {default}]")
}

/// The parser of a setting with a fixed set of values: clap lists them (`--help`, the reference)
/// but keeps the value as given, so that validation reports a wrong one naming the field, as it
/// does for the file.
#[derive(Clone, Copy)]
struct OneOf(&'static [&'static str]);

impl TypedValueParser for OneOf {
    type Value = Text;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<Text, clap::Error> {
        StringValueParser::new()
            .parse_ref(cmd, arg, value)
            .map(Text)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(self.0.iter().map(PossibleValue::new)))
    }
}

/// A section written as `lease:` with no value (YAML null) is an empty section.
fn section<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// All settings as given by one layer (the file, or flags and env); `None` = not given there.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// `identity`.
    #[arg(
        long,
        env = "REDLOCK_ELECTOR_IDENTITY",
        value_name = "VALUE",
        help = "Identity of this replica [default: $POD_NAME, else the hostname]"
    )]
    pub identity: Option<Text>,
    /// `lease.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub lease: LeaseSettings,
    /// `redis.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub redis: RedisSettings,
    /// `api.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub api: ApiSettings,
    /// `ops.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub ops: OpsSettings,
    /// `kubernetes.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub kubernetes: KubernetesSettings,
    /// `log.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub log: LogSettings,
    /// `app.*`: the app's health, with `lease.followApp`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub app: AppSettings,
    /// `run.*`: `redlock-elector run -- CMD`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub run: RunSettings,
}

/// `lease.*`. The fields are in `--help` order.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LeaseSettings {
    /// `lease.name`.
    #[arg(
        long = "lease",
        env = "REDLOCK_ELECTOR_LEASE_NAME",
        value_name = "VALUE",
        help = "Lease name (required; lowercase RFC 1123 label, <= 63 chars)"
    )]
    pub name: Option<Text>,
    /// `lease.names`: several leases in one sidecar, instead of `lease.name`. The flag repeats,
    /// the env var is comma-separated.
    #[arg(
        long = "leases",
        env = "REDLOCK_ELECTOR_LEASE_NAMES",
        value_name = "VALUE",
        help = "Several leases for this sidecar, instead of --lease: each is contended for on its own over one set of node connections and one clock watch; repeat for each (1..=64). In Kubernetes the pod annotation redlock-elector/leases lists the ones the pod leads, comma-separated"
    )]
    pub names: Option<Vec<String>>,
    /// `lease.shards`.
    #[arg(
        long,
        env = "REDLOCK_ELECTOR_LEASE_SHARDS",
        value_name = "INTEGER",
        help = "Shard lease.name into this many leases, NAME-0 to NAME-<N-1>, spread evenly over the replicas (2..=256; none when not given). In Kubernetes the pod annotation redlock-elector/shards lists the indices of the shards the pod leads, comma-separated"
    )]
    pub shards: Option<Text>,
    /// `lease.ttl`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_TTL", value_name = "DURATION",
        help = with_default("Lease time-to-live set on every Redis node", fmt_dur(default::TTL)))]
    pub ttl: Option<Text>,
    /// `lease.renewEvery`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_RENEW_EVERY", value_name = "DURATION",
        help = with_default("Renewal period; must be < ttl/2", format_args!("ttl/{}", default::RENEW_DIVISOR)))]
    pub renew_every: Option<Text>,
    /// `lease.retryEvery`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_RETRY_EVERY", value_name = "DURATION",
        help = with_default("Follower retry period, jittered", fmt_dur(default::RETRY_EVERY)))]
    pub retry_every: Option<Text>,
    /// `lease.driftFactor`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_DRIFT_FACTOR",
        value_name = "NUMBER",
        help = with_default("Clock drift allowance, in [0, 0.1)", default::DRIFT_FACTOR))]
    pub drift_factor: Option<Text>,
    /// `lease.prefer`.
    #[arg(
        long,
        env = "REDLOCK_ELECTOR_LEASE_PREFER",
        value_name = "VALUE",
        value_parser = OneOf(&Prefer::NAMES),
        help = "Which candidate leads during rollouts [default: newest with Kubernetes, else none]"
    )]
    pub prefer: Option<Text>,
    /// `lease.priority`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_PRIORITY", value_name = "INTEGER",
        help = with_default("This replica's rank, compared before the pod's revision: a higher one is preferred", default::PRIORITY))]
    pub priority: Option<Text>,
    /// `lease.preferSettle`.
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_PREFER_SETTLE", value_name = "DURATION",
        help = with_default("How long a preferred candidate must have been ready before the leader hands over to it", fmt_dur(default::PREFER_SETTLE)))]
    pub prefer_settle: Option<Text>,
    /// `lease.keyPrefix`; unlike the others, an empty one is a value (no prefix).
    #[arg(long, env = "REDLOCK_ELECTOR_LEASE_KEY_PREFIX", value_name = "VALUE",
        help = with_default("Prefix of the Redis keys", default::KEY_PREFIX))]
    pub key_prefix: Option<Text>,
    /// `lease.followApp`.
    #[arg(long = "follow-app", env = "REDLOCK_ELECTOR_LEASE_FOLLOW_APP", value_name = "BOOL",
        help = with_default("Leadership follows the app's health: a leader whose app has been unhealthy for app.unhealthyGrace hands over to a candidate whose app is healthy (app containers in Kubernetes, app.healthUrl elsewhere)", default::FOLLOW_APP))]
    pub follow_app: Option<Text>,
}

/// `redis.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RedisSettings {
    /// `redis.endpoints`: the flag repeats, the env var is comma-separated.
    #[arg(
        long = "redis",
        env = "REDLOCK_ELECTOR_REDIS_ENDPOINTS",
        value_name = "URL",
        help = "Redis master URL (redis:// or rediss://); repeat for each node (1..=16)"
    )]
    pub endpoints: Option<Vec<String>>,
    /// `redis.timeout`.
    #[arg(long = "redis-timeout", env = "REDLOCK_ELECTOR_REDIS_TIMEOUT", value_name = "DURATION",
        help = with_default("Per-node command timeout; must be < ttl/10", fmt_dur(default::TIMEOUT)))]
    pub timeout: Option<Text>,
    /// `redis.connectTimeout`.
    #[arg(long = "redis-connect-timeout", env = "REDLOCK_ELECTOR_REDIS_CONNECT_TIMEOUT",
        value_name = "DURATION",
        help = with_default("Per-node connect timeout", fmt_dur(default::CONNECT_TIMEOUT)))]
    pub connect_timeout: Option<Text>,
    /// `redis.username`.
    #[arg(
        long = "redis-username",
        env = "REDLOCK_ELECTOR_REDIS_USERNAME",
        value_name = "VALUE",
        help = "Redis ACL user"
    )]
    pub username: Option<Text>,
    /// `redis.passwordFile`.
    #[arg(
        long = "redis-password-file",
        env = "REDLOCK_ELECTOR_REDIS_PASSWORD_FILE",
        value_name = "FILE",
        help = "File holding the Redis password (or env REDLOCK_ELECTOR_REDIS_PASSWORD)"
    )]
    pub password_file: Option<Text>,
    /// `redis.tls.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub tls: TlsSettings,
}

/// `redis.tls.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TlsSettings {
    /// `redis.tls.caFile`.
    #[arg(
        long = "redis-tls-ca-file",
        env = "REDLOCK_ELECTOR_REDIS_TLS_CA_FILE",
        value_name = "FILE",
        help = "PEM CA bundle for rediss:// endpoints"
    )]
    pub ca_file: Option<Text>,
    /// `redis.tls.certFile`.
    #[arg(
        long = "redis-tls-cert-file",
        env = "REDLOCK_ELECTOR_REDIS_TLS_CERT_FILE",
        value_name = "FILE",
        help = "PEM client certificate (chain) for servers that require one (tls-auth-clients yes); with keyFile"
    )]
    pub cert_file: Option<Text>,
    /// `redis.tls.keyFile`.
    #[arg(
        long = "redis-tls-key-file",
        env = "REDLOCK_ELECTOR_REDIS_TLS_KEY_FILE",
        value_name = "FILE",
        help = "PEM private key of redis.tls.certFile"
    )]
    pub key_file: Option<Text>,
    /// `redis.tls.serverName`.
    #[arg(
        long = "redis-tls-server-name",
        env = "REDLOCK_ELECTOR_REDIS_TLS_SERVER_NAME",
        value_name = "NAME",
        help = "Name to verify the server certificate against (and send as SNI) instead of the URL's host, e.g. for endpoints reached by IP"
    )]
    pub server_name: Option<Text>,
    /// `redis.tls.insecureSkipVerify`.
    #[arg(long = "redis-tls-insecure-skip-verify",
        env = "REDLOCK_ELECTOR_REDIS_TLS_INSECURE_SKIP_VERIFY", value_name = "BOOL",
        help = with_default("Skip TLS certificate verification (testing only)", default::INSECURE_SKIP_VERIFY))]
    pub insecure_skip_verify: Option<Text>,
}

/// `api.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiSettings {
    /// `api.listen`.
    #[arg(id = "api.listen", long = "api-listen", env = "REDLOCK_ELECTOR_API_LISTEN",
        value_name = "ADDR", help = with_default("Address of the app-facing API", default::API_LISTEN))]
    pub listen: Option<Text>,
}

/// `ops.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OpsSettings {
    /// `ops.listen`.
    #[arg(id = "ops.listen", long = "ops-listen", env = "REDLOCK_ELECTOR_OPS_LISTEN",
        value_name = "ADDR", help = with_default("Address of /metrics and probes", default::OPS_LISTEN))]
    pub listen: Option<Text>,
}

/// `kubernetes.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesSettings {
    /// `kubernetes.enabled`.
    #[arg(long = "kubernetes", env = "REDLOCK_ELECTOR_KUBERNETES_ENABLED", value_name = "VALUE",
        value_parser = OneOf(&KubeEnabled::NAMES),
        help = with_default("Publish a pod label and Events (auto: when running in a cluster)", default::KUBERNETES.as_str()))]
    pub enabled: Option<Text>,
    /// `kubernetes.podName`.
    #[arg(
        long,
        env = "REDLOCK_ELECTOR_KUBERNETES_POD_NAME",
        value_name = "VALUE",
        help = "Own pod name [default: $POD_NAME]"
    )]
    pub pod_name: Option<Text>,
    /// `kubernetes.namespace`.
    #[arg(
        long,
        env = "REDLOCK_ELECTOR_KUBERNETES_NAMESPACE",
        value_name = "VALUE",
        help = "Own namespace [default: $POD_NAMESPACE, else the service-account namespace]"
    )]
    pub namespace: Option<Text>,
    /// `kubernetes.label.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub label: LabelSettings,
    /// `kubernetes.events`.
    #[arg(long, env = "REDLOCK_ELECTOR_KUBERNETES_EVENTS", value_name = "BOOL",
        help = with_default("Emit Kubernetes Events on leadership changes", default::EVENTS))]
    pub events: Option<Text>,
    /// `kubernetes.fencingTokenAnnotation`.
    #[arg(long, env = "REDLOCK_ELECTOR_KUBERNETES_FENCING_TOKEN_ANNOTATION", value_name = "BOOL",
        help = with_default("Annotate the leader pod with redlock-elector/fencing-token", default::FENCING_TOKEN_ANNOTATION))]
    pub fencing_token_annotation: Option<Text>,
    /// `kubernetes.podIP`.
    #[serde(rename = "podIP")]
    #[arg(
        id = "kubernetes.podIP",
        long = "pod-ip",
        env = "REDLOCK_ELECTOR_KUBERNETES_POD_IP",
        value_name = "ADDR",
        help = "Own pod IP (IPv4), the address kubernetes.endpointSlice lists while leader [default: $POD_IP]"
    )]
    pub pod_ip: Option<Text>,
    /// `kubernetes.endpointSlice.*`.
    #[command(flatten)]
    #[serde(default, deserialize_with = "section")]
    pub endpoint_slice: EndpointSliceSettings,
}

/// `kubernetes.endpointSlice.*`: the leader Service's EndpointSlice, written by the sidecar.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointSliceSettings {
    /// `kubernetes.endpointSlice.name`.
    #[arg(
        id = "kubernetes.endpointSlice.name",
        long = "endpoint-slice",
        env = "REDLOCK_ELECTOR_KUBERNETES_ENDPOINT_SLICE_NAME",
        value_name = "NAME",
        help = "The leader Service's EndpointSlice (in the own namespace) that this sidecar writes: its pod IP and ports while leader, no endpoint after, every write fenced by the term's token (empty: off, the Service selects the role label)"
    )]
    pub name: Option<Text>,
    /// `kubernetes.endpointSlice.lease`.
    #[arg(
        id = "kubernetes.endpointSlice.lease",
        long = "endpoint-slice-lease",
        env = "REDLOCK_ELECTOR_KUBERNETES_ENDPOINT_SLICE_LEASE",
        value_name = "NAME",
        help = "The lease whose leader the slice lists; required with several leases or shards [default: the only lease]"
    )]
    pub lease: Option<Text>,
    /// `kubernetes.endpointSlice.ports`. The flag repeats, the env var is comma-separated.
    #[arg(
        id = "kubernetes.endpointSlice.ports",
        long = "endpoint-slice-port",
        env = "REDLOCK_ELECTOR_KUBERNETES_ENDPOINT_SLICE_PORTS",
        value_name = "VALUE",
        help = "The app's ports the slice lists, each [NAME:]PORT[/PROTOCOL] (protocol TCP, UDP or SCTP; default TCP), the name that of the Service's port; repeat for each (1..=100)"
    )]
    pub ports: Option<Vec<String>>,
}

/// `kubernetes.label.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSettings {
    /// `kubernetes.label.key`.
    #[arg(long = "label-key", env = "REDLOCK_ELECTOR_KUBERNETES_LABEL_KEY", value_name = "VALUE",
        help = with_default("Role label key", default::LABEL_KEY))]
    pub key: Option<Text>,
    /// `kubernetes.label.leader`.
    #[arg(long = "label-leader", env = "REDLOCK_ELECTOR_KUBERNETES_LABEL_LEADER",
        value_name = "VALUE", help = with_default("Role label value while leader", default::LABEL_LEADER))]
    pub leader: Option<Text>,
    /// `kubernetes.label.follower`.
    #[arg(long = "label-follower", env = "REDLOCK_ELECTOR_KUBERNETES_LABEL_FOLLOWER",
        value_name = "VALUE", help = with_default("Role label value while follower", default::LABEL_FOLLOWER))]
    pub follower: Option<Text>,
}

/// `log.*`.
#[derive(Args, Deserialize, Default, Debug, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogSettings {
    /// `log.format`.
    #[arg(long = "log-format", env = "REDLOCK_ELECTOR_LOG_FORMAT", value_name = "VALUE",
        value_parser = OneOf(&LogFormat::NAMES),
        help = with_default("Log format", default::LOG_FORMAT.as_str()))]
    pub format: Option<Text>,
    /// `log.level`.
    #[arg(long = "log-level", env = "REDLOCK_ELECTOR_LOG_LEVEL", value_name = "VALUE",
        help = with_default("Log level or tracing filter", default::LOG_LEVEL))]
    pub level: Option<Text>,
}

//! `check-config`: the validated [`Config`] serialized in the config file's own shape (so the
//! output is itself a valid config), with secrets redacted and notes as YAML comments.

use std::path::PathBuf;

use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

use super::{
    AppConfig, Config, Endpoint, KubeEnabled, KubernetesConfig, LeaseConfig, LogConfig,
    PASSWORD_ENV, RedisConfig, RunConfig, Secret, fmt_dur,
};

/// The effective settings as YAML, in the config file's own shape, secrets redacted.
pub fn effective_yaml(c: &Config) -> String {
    let mut notes =
        String::from("# effective settings of redlock-elector (default < file < env < flag)\n");
    if let Some(source) = match (&c.redis.password, &c.redis.password_file) {
        (Some(_), Some(_)) => Some("redis.passwordFile"),
        (Some(_), None) => Some(PASSWORD_ENV),
        _ => None,
    } {
        notes.push_str(&format!(
            "# redis password: {} (from {source})\n",
            Secret::REDACTED
        ));
    }
    if c.kubernetes.enabled == KubeEnabled::Auto {
        notes.push_str(&format!(
            "# kubernetes.enabled: auto resolves to {}\n",
            c.kubernetes.is_enabled()
        ));
    }
    for w in &c.warnings {
        notes.push_str(&format!("# warning: {w}\n"));
    }
    match serde_saphyr::to_string(c) {
        Ok(yaml) => notes + &yaml,
        Err(e) => format!("{notes}# cannot render settings: {e}\n"),
    }
}

/// An optional path, empty when not set (the file's "not given").
fn path(p: &Option<PathBuf>) -> String {
    p.as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

/// `{listen: ADDR}`, the shape of `api` and `ops`.
#[derive(Serialize)]
struct Listen {
    listen: String,
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(Secret::REDACTED)
    }
}

impl Serialize for Endpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted_url())
    }
}

impl Serialize for Config {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Config", 9)?;
        m.serialize_field("identity", &self.identity)?;
        m.serialize_field("lease", &self.lease)?;
        m.serialize_field("redis", &self.redis)?;
        let api = self.api_listen.to_string();
        m.serialize_field("api", &Listen { listen: api })?;
        let ops = self.ops_listen.to_string();
        m.serialize_field("ops", &Listen { listen: ops })?;
        m.serialize_field("kubernetes", &self.kubernetes)?;
        m.serialize_field("log", &self.log)?;
        m.serialize_field("app", &self.app)?;
        m.serialize_field("run", &self.run)?;
        m.end()
    }
}

impl Serialize for AppConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("AppConfig", 7)?;
        m.serialize_field("containers", &self.containers)?;
        let url = self
            .health_url
            .as_ref()
            .map_or(String::new(), |u| u.to_string());
        m.serialize_field("healthUrl", &url)?;
        m.serialize_field("healthInterval", &fmt_dur(self.health_interval))?;
        m.serialize_field("healthTimeout", &fmt_dur(self.health_timeout))?;
        m.serialize_field("healthFailureThreshold", &self.health_failure_threshold)?;
        m.serialize_field("unhealthyGrace", &fmt_dur(self.unhealthy_grace))?;
        m.serialize_field("cooldown", &fmt_dur(self.cooldown))?;
        m.end()
    }
}

impl Serialize for RunConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("RunConfig", 2)?;
        m.serialize_field("killGrace", &fmt_dur(self.kill_grace))?;
        m.serialize_field("onChildExit", self.on_child_exit.as_str())?;
        m.end()
    }
}

impl Serialize for LeaseConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("LeaseConfig", 12)?;
        if let Some(name) = self.sharded_name() {
            m.serialize_field("name", name)?;
            m.serialize_field("shards", &self.shards)?;
        } else if self.names.len() > 1 {
            m.serialize_field("names", &self.names)?;
        } else {
            m.serialize_field("name", &self.name)?;
        }
        m.serialize_field("ttl", &fmt_dur(self.ttl))?;
        m.serialize_field("renewEvery", &fmt_dur(self.renew_every))?;
        m.serialize_field("retryEvery", &fmt_dur(self.retry_every))?;
        m.serialize_field("driftFactor", &self.drift_factor)?;
        m.serialize_field("keyPrefix", &self.key_prefix)?;
        m.serialize_field("prefer", self.prefer.as_str())?;
        m.serialize_field("priority", &self.priority)?;
        m.serialize_field("preferSettle", &fmt_dur(self.prefer_settle))?;
        m.serialize_field("followApp", &self.follow_app)?;
        m.end()
    }
}

/// `redis.tls`, nested in the file but flat in [`RedisConfig`].
struct Tls<'a>(&'a RedisConfig);

impl Serialize for Tls<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let mut m = s.serialize_struct("Tls", 5)?;
        m.serialize_field("caFile", &path(&r.tls_ca_file))?;
        m.serialize_field("certFile", &path(&r.tls_cert_file))?;
        m.serialize_field("keyFile", &path(&r.tls_key_file))?;
        m.serialize_field("serverName", r.tls_server_name.as_deref().unwrap_or(""))?;
        m.serialize_field("insecureSkipVerify", &r.tls_insecure_skip_verify)?;
        m.end()
    }
}

impl Serialize for RedisConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("RedisConfig", 6)?;
        m.serialize_field("endpoints", &self.endpoints)?;
        m.serialize_field("timeout", &fmt_dur(self.timeout))?;
        m.serialize_field("connectTimeout", &fmt_dur(self.connect_timeout))?;
        m.serialize_field("username", self.username.as_deref().unwrap_or(""))?;
        m.serialize_field("passwordFile", &path(&self.password_file))?;
        m.serialize_field("tls", &Tls(self))?;
        m.end()
    }
}

/// `kubernetes.label`, nested in the file but flat in [`KubernetesConfig`].
struct Label<'a>(&'a KubernetesConfig);

impl Serialize for Label<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("Label", 3)?;
        m.serialize_field("key", &self.0.label_key)?;
        m.serialize_field("leader", &self.0.label_leader)?;
        m.serialize_field("follower", &self.0.label_follower)?;
        m.end()
    }
}

impl Serialize for KubernetesConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("KubernetesConfig", 8)?;
        m.serialize_field("enabled", self.enabled.as_str())?;
        m.serialize_field("podName", self.pod_name.as_deref().unwrap_or(""))?;
        m.serialize_field("namespace", self.namespace.as_deref().unwrap_or(""))?;
        m.serialize_field("label", &Label(self))?;
        m.serialize_field("events", &self.events)?;
        m.serialize_field("fencingTokenAnnotation", &self.fencing_token_annotation)?;
        let ip = self.pod_ip.map_or(String::new(), |ip| ip.to_string());
        m.serialize_field("podIP", &ip)?;
        m.serialize_field("endpointSlice", &Slice(self.endpoint_slice.as_ref()))?;
        m.end()
    }
}

/// `kubernetes.endpointSlice`; off shows as an empty name.
struct Slice<'a>(Option<&'a crate::config::EndpointSliceConfig>);

impl Serialize for Slice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("EndpointSlice", 3)?;
        let (name, lease, ports) = match self.0 {
            Some(c) => (
                c.name.as_str(),
                c.lease.as_str(),
                c.ports.iter().map(|p| p.as_text()).collect(),
            ),
            None => ("", "", Vec::new()),
        };
        m.serialize_field("name", name)?;
        m.serialize_field("lease", lease)?;
        m.serialize_field("ports", &ports)?;
        m.end()
    }
}

impl Serialize for LogConfig {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_struct("LogConfig", 2)?;
        m.serialize_field("format", self.format.as_str())?;
        m.serialize_field("level", &self.level)?;
        m.end()
    }
}

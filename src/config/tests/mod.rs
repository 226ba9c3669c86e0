//! Unit tests of the whole config path: file + flags → validated [`Config`] → `check-config`.
//! The `REDLOCK_ELECTOR_*` env vars are read by clap from the process, so these tests use flags
//! (the same clap arguments); tests/cli.rs runs the binary with env vars.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;

mod cli;
mod leases;

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

/// Validate a config file's text.
fn load_yaml(yaml: &str, e: &FakeEnv) -> Result<Config, ConfigError> {
    let settings = file::parse("c.yaml", yaml).map_err(|e| err("c.yaml", e.to_string()))?;
    validate(&settings, e, UnsafeSwitches::default())
}

/// Parse and validate a command line (`re` stands for the binary).
fn load_args(args: &[&str], e: &FakeEnv) -> Result<Invocation, Error> {
    load(std::iter::once("re").chain(args.iter().copied()), e)
}

fn run_config(args: &[&str], e: &FakeEnv) -> Config {
    match load_args(args, e) {
        Ok(Invocation {
            config,
            mode: Mode::Run,
        }) => config,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn invalid_field(args: &[&str], e: &FakeEnv) -> String {
    match load_args(args, e) {
        Err(Error::Invalid(e)) => e.field,
        other => panic!("{args:?}: {other:?}"),
    }
}

const OK: &str =
    "lease: {name: my-app}\nredis: {endpoints: [redis://a:1, redis://b:2, redis://c]}\n";

#[test]
fn defaults() {
    let c = load_yaml(OK, &env()).unwrap();
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
    assert_eq!(load_yaml(OK, &e).unwrap().lease.prefer, Prefer::Newest);
    let c = load_yaml(
        "lease: {name: a, prefer: Oldest, priority: -3, preferSettle: 2s}\nredis: {endpoints: [redis://a]}",
        &env(),
    )
    .unwrap();
    assert_eq!(c.lease.prefer, Prefer::Oldest);
    assert_eq!(c.lease.priority, -3);
    assert_eq!(c.lease.prefer_settle, Duration::from_secs(2));
    let mut e = env();
    e.files.insert("c.yaml".into(), OK.into());
    let c = run_config(
        &["-c", "c.yaml", "--priority", "7", "--prefer", "newest"],
        &e,
    );
    assert_eq!((c.lease.prefer, c.lease.priority), (Prefer::Newest, 7));
    let yaml = effective_yaml(&c);
    assert!(yaml.contains("prefer: newest"), "{yaml}");
    assert!(yaml.contains("priority: 7"), "{yaml}");
    assert!(yaml.contains("preferSettle: 5s"), "{yaml}");
    let c = run_config(
        &[
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
    );
    assert_eq!((c.lease.prefer, c.lease.priority), (Prefer::None, 2));
}

#[test]
fn tls_client_certificate_and_server_name() {
    let mut e = env();
    e.files.insert("/ca".into(), "ca".into());
    e.files.insert("/crt".into(), "crt".into());
    e.files.insert("/key".into(), "key".into());
    let c = load_yaml(
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
        assert_eq!(load_yaml(&yaml, &e).unwrap_err().field, *field, "{yaml}");
    }
    // Flags spell them too.
    let c = run_config(
        &[
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
    );
    assert_eq!(c.redis.tls_server_name.as_deref(), Some("redis.test"));
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
        // The margin at worst (drift + twice the blind band) above ttl/2; 400ms is accepted.
        (
            "lease: {name: a, ttl: 10s, driftFactor: 0.099}\nredis: {endpoints: [redis://a], timeout: 420ms}",
            "lease.ttl, lease.driftFactor, redis.timeout",
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
        let e = load_yaml(yaml, &env()).unwrap_err();
        assert_eq!(&e.field, field, "{yaml}: {e}");
    }
    assert_eq!(
        invalid_field(&["--lease", "a", "--ttl", "1s"], &env()),
        "redis.endpoints"
    );
}

#[test]
fn the_margin_at_worst_is_the_term_margin_and_twice_the_blind_bands() {
    use crate::config::validate::lease_margin;
    let ms = Duration::from_millis;
    // Defaults: the term's margin, 102 ms of drift + 100 ms for the taker's rate + 2 × 1.01 % of
    // the 10.102 s window = 406.06 ms; and twice the band: 2 × 50 ms × 1.01 + 1 % of the window
    // + 1 ms = 203.02 ms.
    let m = lease_margin(Duration::from_secs(10), 0.01, ms(50));
    assert!(m > ms(812) && m < ms(813), "{m:?}");
    let accepted = "lease: {name: a, ttl: 10s, driftFactor: 0.05}\nredis: {endpoints: [redis://a], timeout: 100ms}";
    assert!(load_yaml(accepted, &env()).is_ok());
    // Accepted before issue 52 (a margin of 4.4 s then); the margin it costs now is 8.3 s.
    let refused = "lease: {name: a, ttl: 10s, driftFactor: 0.099}\nredis: {endpoints: [redis://a], timeout: 400ms}";
    let e = load_yaml(refused, &env()).unwrap_err();
    assert!(e.to_string().contains("exceeds half the ttl"), "{e}");
}

#[test]
fn fencing_token_annotation() {
    let c = load_yaml(OK, &env()).unwrap();
    assert!(!c.kubernetes.fencing_token_annotation, "off by default");
    let c = load_yaml(
        &format!("{OK}kubernetes: {{fencingTokenAnnotation: true}}"),
        &env(),
    )
    .unwrap();
    assert!(c.kubernetes.fencing_token_annotation);
    assert!(effective_yaml(&c).contains("fencingTokenAnnotation: true"));
    let e = load_yaml(
        &format!("{OK}kubernetes: {{fencingTokenAnnotation: sometimes}}"),
        &env(),
    )
    .unwrap_err();
    assert_eq!(e.field, "kubernetes.fencingTokenAnnotation", "{e}");
    let mut e = env();
    e.files.insert(
        "c.yaml".into(),
        format!("{OK}kubernetes: {{fencingTokenAnnotation: true}}"),
    );
    let c = run_config(&["-c", "c.yaml", "--fencing-token-annotation", "false"], &e);
    assert!(!c.kubernetes.fencing_token_annotation);
}

#[test]
fn endpoint_slice() {
    let c = load_yaml(OK, &env()).unwrap();
    assert_eq!(c.kubernetes.endpoint_slice, None, "off by default");
    assert!(
        effective_yaml(&c).contains("endpointSlice:\n    name: \"\"\n"),
        "{}",
        effective_yaml(&c)
    );
    let mut e = env();
    e.vars.insert("POD_IP".into(), "10.1.2.3".into());
    let yaml = format!(
        "{OK}kubernetes: {{endpointSlice: {{name: app-leader, ports: [http:8080, dns:53/udp, '9090']}}}}"
    );
    let c = load_yaml(&yaml, &e).unwrap();
    let slice = c.kubernetes.endpoint_slice.clone().unwrap();
    assert_eq!(
        (slice.name.as_str(), slice.lease.as_str()),
        ("app-leader", "my-app")
    );
    let ports: Vec<String> = slice.ports.iter().map(SlicePort::as_text).collect();
    assert_eq!(ports, ["http:8080/TCP", "dns:53/UDP", "9090/TCP"]);
    assert_eq!(
        c.kubernetes.pod_ip,
        Some(std::net::Ipv4Addr::new(10, 1, 2, 3))
    );
    assert!(
        effective_yaml(&c).contains("podIP: \"10.1.2.3\"")
            && effective_yaml(&c).contains("- http:8080/TCP"),
        "{}",
        effective_yaml(&c)
    );
    // Flags: the name, the ports (repeated) and the IP.
    let mut f = env();
    f.files.insert("c.yaml".into(), OK.into());
    let c = run_config(
        &[
            "-c",
            "c.yaml",
            "--endpoint-slice",
            "s",
            "--endpoint-slice-port",
            "http:80",
            "--endpoint-slice-port",
            "metrics:9000",
            "--pod-ip",
            "10.0.0.9",
        ],
        &f,
    );
    assert_eq!(c.kubernetes.endpoint_slice.unwrap().ports.len(), 2);
    // Each mistake names its field, with what to write.
    let cases: &[(&str, &str, &str)] = &[
        (
            "{endpointSlice: {name: s, ports: [http:8080]}}",
            "kubernetes.podIP",
            "POD_IP",
        ),
        (
            "{podIP: '::1', endpointSlice: {name: s, ports: [http:8080]}}",
            "kubernetes.podIP",
            "IPv4",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s}}",
            "kubernetes.endpointSlice.ports",
            "1..=100",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: S_x, ports: [a:1]}}",
            "kubernetes.endpointSlice.name",
            "RFC 1123",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s, ports: [http:0]}}",
            "kubernetes.endpointSlice.ports",
            "1..=65535",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s, ports: [http:80/quic]}}",
            "kubernetes.endpointSlice.ports",
            "TCP, UDP or SCTP",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s, ports: [Http:80]}}",
            "kubernetes.endpointSlice.ports",
            "DNS label",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s, ports: [a:80, a:81]}}",
            "kubernetes.endpointSlice.ports",
            "twice",
        ),
        (
            "{podIP: 10.0.0.1, endpointSlice: {name: s, lease: other, ports: [a:80]}}",
            "kubernetes.endpointSlice.lease",
            "my-app",
        ),
    ];
    for (k, field, says) in cases {
        let e = load_yaml(&format!("{OK}kubernetes: {k}"), &env()).unwrap_err();
        assert_eq!(e.field, *field, "{k}: {e}");
        assert!(e.to_string().contains(says), "{k}: {e}");
    }
    // Several leases: the lease must be named, and one of them.
    let several = "lease: {names: [a, b]}\nredis: {endpoints: [redis://a:1]}\n\
                   kubernetes: {podIP: 10.0.0.1, endpointSlice: {name: s, ports: [h:1]}}";
    let e = load_yaml(several, &env()).unwrap_err();
    assert_eq!(e.field, "kubernetes.endpointSlice.lease", "{e}");
    let named = several.replace("name: s,", "name: s, lease: b,");
    let c = load_yaml(&named, &env()).unwrap();
    assert_eq!(c.kubernetes.endpoint_slice.unwrap().lease, "b");
}

#[test]
fn unknown_keys_are_rejected() {
    let e = load_yaml(
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
    let c = load_yaml(
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
}

//! The command line: flag and env names, precedence over the file, subcommand, errors.

use std::time::Duration;

use super::*;

/// Every flag and env var name, as documented (README "Configuration"): none may change.
#[test]
fn flag_and_env_names() {
    let want = [
        ("identity", "IDENTITY"),
        ("lease", "LEASE_NAME"),
        ("leases", "LEASE_NAMES"),
        ("shards", "LEASE_SHARDS"),
        ("ttl", "LEASE_TTL"),
        ("renew-every", "LEASE_RENEW_EVERY"),
        ("retry-every", "LEASE_RETRY_EVERY"),
        ("drift-factor", "LEASE_DRIFT_FACTOR"),
        ("prefer", "LEASE_PREFER"),
        ("priority", "LEASE_PRIORITY"),
        ("prefer-settle", "LEASE_PREFER_SETTLE"),
        ("key-prefix", "LEASE_KEY_PREFIX"),
        ("follow-app", "LEASE_FOLLOW_APP"),
        ("redis", "REDIS_ENDPOINTS"),
        ("redis-timeout", "REDIS_TIMEOUT"),
        ("redis-connect-timeout", "REDIS_CONNECT_TIMEOUT"),
        ("redis-username", "REDIS_USERNAME"),
        ("redis-password-file", "REDIS_PASSWORD_FILE"),
        ("redis-tls-ca-file", "REDIS_TLS_CA_FILE"),
        ("redis-tls-cert-file", "REDIS_TLS_CERT_FILE"),
        ("redis-tls-key-file", "REDIS_TLS_KEY_FILE"),
        ("redis-tls-server-name", "REDIS_TLS_SERVER_NAME"),
        (
            "redis-tls-insecure-skip-verify",
            "REDIS_TLS_INSECURE_SKIP_VERIFY",
        ),
        ("api-listen", "API_LISTEN"),
        ("ops-listen", "OPS_LISTEN"),
        ("kubernetes", "KUBERNETES_ENABLED"),
        ("pod-name", "KUBERNETES_POD_NAME"),
        ("namespace", "KUBERNETES_NAMESPACE"),
        ("label-key", "KUBERNETES_LABEL_KEY"),
        ("label-leader", "KUBERNETES_LABEL_LEADER"),
        ("label-follower", "KUBERNETES_LABEL_FOLLOWER"),
        ("events", "KUBERNETES_EVENTS"),
        (
            "fencing-token-annotation",
            "KUBERNETES_FENCING_TOKEN_ANNOTATION",
        ),
        ("pod-ip", "KUBERNETES_POD_IP"),
        ("endpoint-slice", "KUBERNETES_ENDPOINT_SLICE_NAME"),
        ("endpoint-slice-lease", "KUBERNETES_ENDPOINT_SLICE_LEASE"),
        ("endpoint-slice-port", "KUBERNETES_ENDPOINT_SLICE_PORTS"),
        ("log-format", "LOG_FORMAT"),
        ("log-level", "LOG_LEVEL"),
        ("app-container", "APP_CONTAINERS"),
        ("app-health-url", "APP_HEALTH_URL"),
        ("app-health-interval", "APP_HEALTH_INTERVAL"),
        ("app-health-timeout", "APP_HEALTH_TIMEOUT"),
        (
            "app-health-failure-threshold",
            "APP_HEALTH_FAILURE_THRESHOLD",
        ),
        ("app-unhealthy-grace", "APP_UNHEALTHY_GRACE"),
        ("app-cooldown", "APP_COOLDOWN"),
        ("kill-grace", "RUN_KILL_GRACE"),
        ("on-child-exit", "RUN_ON_CHILD_EXIT"),
    ];
    let cmd = command();
    let got: Vec<(String, String)> = cmd
        .get_arguments()
        .filter_map(|a| {
            Some((
                a.get_long()?.to_string(),
                a.get_env()?.to_str()?.to_string(),
            ))
        })
        .collect();
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(f, e)| (f.to_string(), format!("REDLOCK_ELECTOR_{e}")))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn check_config_connect_flag() {
    let mut e = env();
    e.files.insert(
        "c.yaml".into(),
        "lease: {name: a}\nredis: {endpoints: [redis://h]}".into(),
    );
    for (args, connect) in [
        (vec!["check-config", "c.yaml"], false),
        (vec!["check-config", "--connect", "c.yaml"], true),
    ] {
        let mode = load_args(&args, &e).unwrap().mode;
        assert_eq!(mode, Mode::CheckConfig { connect });
    }
}

#[test]
fn file_errors_name_the_file_and_exit_2() {
    let mut e = env();
    e.files
        .insert("bad.yaml".into(), "lease: {name: a, tll: 1s}".into());
    let err = load_args(&["check-config", "bad.yaml"], &e).unwrap_err();
    assert!(matches!(err, Error::Syntax { .. }), "{err:?}");
    assert!(err.to_string().starts_with("bad.yaml: "), "{err}");
    assert!(err.to_string().contains("tll"), "{err}");
    let err = load_args(&["--config", "missing.yaml"], &e).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("--config: cannot read missing.yaml: "),
        "{err}"
    );
    assert!(matches!(
        load_args(&["--bogus"], &e),
        Err(Error::Usage(u)) if u.exit_code() == 2
    ));
}

#[test]
fn a_repeated_flag_takes_the_last_value() {
    let c = run_config(
        &[
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
        &env(),
    );
    assert!(c.kubernetes.is_enabled());
    assert_eq!(c.redis.endpoints.len(), 3, "--redis still accumulates");
}

#[test]
fn flags_override_the_file_and_empty_means_default() {
    let mut e = env();
    e.files.insert(
        "f.yaml".into(),
        "lease:\n  name: my-app\n  ttl: 20s\n  keyPrefix: k\nredis: {endpoints: [redis://x:1, redis://y:2]}\n"
            .into(),
    );
    let c = run_config(&["--config", "f.yaml", "--ttl", "3s"], &e);
    assert_eq!(c.lease.ttl, Duration::from_secs(3));
    assert_eq!(c.lease.key_prefix, "k");
    assert_eq!(c.redis.endpoints.len(), 2);
    assert!(c.warnings[0].contains("even"));
    let c = run_config(&["--config", "f.yaml"], &e);
    assert_eq!(c.lease.ttl, Duration::from_secs(20));
    // An empty value overrides the file and means the default; an empty prefix is a prefix.
    let c = run_config(&["--config", "f.yaml", "--ttl=", "--key-prefix="], &e);
    assert_eq!(c.lease.ttl, Duration::from_secs(10));
    assert_eq!(c.lease.key_prefix, "");
    // check-config takes the settings flags too, before or after its file.
    let inv = load_args(&["--ttl", "4s", "check-config", "f.yaml", "--connect"], &e).unwrap();
    assert_eq!(inv.mode, Mode::CheckConfig { connect: true });
    assert_eq!(inv.config.lease.ttl, Duration::from_secs(4));
}

#[test]
fn hidden_test_only_switches() {
    let c = run_config(
        &[
            "--lease",
            "a",
            "--redis",
            "redis://a",
            "--unsafe-disable-quarantine",
            "--no-named-successor",
        ],
        &env(),
    );
    let want = UnsafeSwitches {
        quarantine_off: true,
        clock_check_off: false,
        no_named_successor: true,
        release_proof_check_off: false,
        attestation_check_off: false,
        blind_band_off: false,
        reconnect_taint_off: false,
        no_attestations: false,
        run_deadline_off: false,
        span_band_off: false,
        proof_continuity_off: false,
        renewal_may_shorten: false,
        run_start_delay_ms: None,
        guard_spawn_delay_ms: None,
        endpoint_fence_off: false,
        endpoint_write_delay_ms: None,
    };
    assert_eq!(c.unsafe_switches, want);
    let mut e = env();
    e.files.insert("c.yaml".into(), OK.into());
    let c = load_args(
        &["check-config", "c.yaml", "--unsafe-disable-clock-check"],
        &e,
    )
    .unwrap()
    .config;
    assert!(c.unsafe_switches.clock_check_off);
}

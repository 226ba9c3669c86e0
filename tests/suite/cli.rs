//! The command line of the real binary: bad configs and flags exit 2 naming the field, before
//! any port is bound or Redis contacted; check-config prints effective settings, secrets redacted.

use testkit::common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use common::*;

fn run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("REDLOCK_ELECTOR_REDIS_PASSWORD");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn bad_configs_and_flags_exit_2_naming_the_field_before_binding_or_connecting() {
    // A "Redis" that records whether anyone connects, and ports that must stay unbound.
    let redis = TcpListener::bind("127.0.0.1:0").unwrap();
    redis.set_nonblocking(true).unwrap();
    let redis_url = format!("redis://127.0.0.1:{}", redis.local_addr().unwrap().port());
    let api = free_port();
    let ops = free_port();
    let listen = [
        "--api-listen".to_string(),
        format!("127.0.0.1:{api}"),
        "--ops-listen".to_string(),
        format!("127.0.0.1:{ops}"),
    ];
    let dir = tempdir();
    let good = format!("lease: {{name: my-app}}\nredis: {{endpoints: ['{redis_url}']}}\n");
    let args = |a: &[&str]| -> Vec<String> { a.iter().map(|s| s.to_string()).collect() };
    // A valid lease and endpoint, then `a`: the flag under test is the only fault.
    let valid = |a: &[&str]| args(&[&["--lease", "a", "--redis", &redis_url], a].concat());
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (args(&["--redis", &redis_url]), "", "lease.name"),
        (
            args(&["--lease", "My_App", "--redis", &redis_url]),
            "",
            "lease.name",
        ),
        (args(&["--lease", "a"]), "", "redis.endpoints"),
        (
            args(&["--lease", "a", "--redis", "http://x:1"]),
            "",
            "redis.endpoints[0]",
        ),
        (valid(&["--ttl", "10"]), "", "lease.ttl"),
        (valid(&["--ttl", "50ms"]), "", "lease.ttl"),
        (
            valid(&["--ttl", "1s", "--renew-every", "600ms"]),
            "",
            "lease.renewEvery",
        ),
        (
            valid(&["--ttl", "1s", "--redis-timeout", "100ms"]),
            "",
            "redis.timeout",
        ),
        (valid(&["--drift-factor", "0.2"]), "", "lease.driftFactor"),
        (
            valid(&["--redis-password-file", "/nonexistent/pw"]),
            "",
            "redis.passwordFile",
        ),
        (valid(&["--log-format", "xml"]), "", "log.format"),
        (valid(&["--retry-every", "soon"]), "", "lease.retryEvery"),
        (args(&["--bogus-flag"]), "", "--bogus-flag"),
        (
            args(&[
                "--config",
                &write(&dir, "unknown.yaml", &format!("{good}lease2: {{}}\n")),
            ]),
            "",
            "lease2",
        ),
        (
            args(&[
                "--config",
                &write(
                    &dir,
                    "typo.yaml",
                    "lease: {name: a, tll: 1s}\nredis: {endpoints: [redis://x]}\n",
                ),
            ]),
            "",
            "tll",
        ),
        (
            args(&["--config", "/nonexistent/config.yaml"]),
            "",
            "--config",
        ),
        (
            args(&["--config", &write(&dir, "ok.yaml", &good)]),
            "REDLOCK_ELECTOR_LEASE_TTL=abc",
            "lease.ttl",
        ),
    ];
    for (args, env, field) in &cases {
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        if !args.iter().any(|a| a == "--api-listen") {
            all.extend(listen.iter().map(String::as_str));
        }
        let env: Vec<(&str, &str)> = env.split_once('=').into_iter().collect();
        let (code, _, stderr) = run(&all, &env);
        assert_eq!(
            code,
            Some(2),
            "{all:?} {env:?}: exit 2 expected, stderr: {stderr}"
        );
        assert!(
            stderr.contains(field),
            "{all:?}: stderr names {field}: {stderr}"
        );
        assert!(
            stderr.lines().filter(|l| !l.trim().is_empty()).count() <= 3,
            "short message: {stderr}"
        );
    }
    // Nothing connected to "Redis", and the ports were never bound.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        redis.accept().is_err(),
        "a bad config must not contact Redis"
    );
    TcpListener::bind(("127.0.0.1", api)).expect("api port was left free");
    TcpListener::bind(("127.0.0.1", ops)).expect("ops port was left free");
}

#[test]
fn check_config_prints_effective_settings_with_secrets_redacted() {
    let dir = tempdir();
    let pw = write(&dir, "pw", "file-s3cret\n");
    let cfg = write(
        &dir,
        "c.yaml",
        &format!(
            "lease:\n  name: my-app\n  ttl: 5s\nredis:\n  endpoints: ['redis://user:url-s3cret@redis-0:6380', redis://redis-1]\n  passwordFile: {pw}\n"
        ),
    );
    let (code, out, err) = run(
        &["check-config", &cfg],
        &[("REDLOCK_ELECTOR_LEASE_RETRY_EVERY", "750ms")],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        !out.contains("s3cret") && !err.contains("s3cret"),
        "secret leaked:\n{out}\n{err}"
    );
    assert!(out.contains("<redacted>"), "{out}");
    for want in [
        "name: my-app",
        "ttl: 5s",
        "renewEvery: 1s 666ms",
        "retryEvery: 750ms",
        "redis-0:6380",
        "timeout: 50ms",
        "listen: 127.0.0.1:4040",
    ] {
        assert!(
            out.contains(want),
            "check-config output lacks {want:?}:\n{out}"
        );
    }
    assert!(
        err.contains("even number"),
        "even endpoint count warns: {err}"
    );
    assert!(
        out.contains("# redis password: <redacted> (from redis.passwordFile)"),
        "{out}"
    );
    // The printed YAML is itself a valid config (once the redacted URL password is removed),
    // and checking it again gives the same settings.
    let reparsed = write(
        &dir,
        "again.yaml",
        &out.replace("user:<redacted>@", "user@"),
    );
    let (code, again, err) = run(&["check-config", &reparsed], &[]);
    assert_eq!(code, Some(0), "{err}\n{out}");
    assert_eq!(again, out.replace("user:<redacted>@", "user@"));

    let (code, _, err) = run(
        &[
            "check-config",
            &write(
                &dir,
                "bad.yaml",
                "lease: {name: a, ttl: 10}\nredis: {endpoints: [redis://x]}\n",
            ),
        ],
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        err.contains("lease.ttl") && err.contains("try \"10s\""),
        "{err}"
    );
}

#[test]
fn password_from_env_never_appears_in_logs() {
    let nodes = redis_cluster(1, Duration::from_millis(100));
    let s = Sidecar::start(
        "a",
        &[&nodes[0]],
        &Opts {
            env: vec![("REDLOCK_ELECTOR_REDIS_PASSWORD".into(), "env-s3cret".into())],
            extra: vec!["--log-level".into(), "debug".into()],
            ..Opts::default()
        },
    );
    // The server has no password set, so AUTH fails: errors get logged, the secret must not.
    std::thread::sleep(Duration::from_millis(1500));
    let (_, metrics) = http("GET", s.ops_port, "/metrics").unwrap();
    assert!(!metrics.contains("env-s3cret"));
    let logs = s.logs();
    assert!(!logs.contains("env-s3cret"), "password in logs:\n{logs}");
    assert!(logs.contains("redlock-elector started"));
}

#[test]
fn help_and_version() {
    let (code, out, _) = run(&["--help"], &[]);
    assert_eq!(code, Some(0));
    for flag in [
        "--config",
        "--lease",
        "--redis",
        "--ttl",
        "--identity",
        "--api-listen",
        "--ops-listen",
        "check-config",
    ] {
        assert!(out.contains(flag), "--help documents {flag}:\n{out}");
    }
    assert!(!out.contains("unsafe"), "the test-only switch stays hidden");
    let (code, out, _) = run(&["--version"], &[]);
    assert_eq!(code, Some(0));
    assert!(out.contains(env!("CARGO_PKG_VERSION")));
}

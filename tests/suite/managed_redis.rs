//! Managed-Redis setups against real `redis-server` processes with TLS-only ports (`--port 0`),
//! certificates made by `openssl` in each test: elect and hand over over TLS (CA file, URL host
//! names, `redis.tls.serverName` for endpoints reached by IP), mutual TLS, the documented minimal
//! ACL user, classified failures (wrong CA, hostname mismatch, wrong password, missing ACL
//! permission, refused, timeout, DNS), password rotation while a leader holds the lease, and
//! `check-config --connect`. No password may appear in any log, metric or check-config output.

use testkit::common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Opts, Pki, Redis, Sidecar, binary, free_port, report, sole_leader, wait_for};
use redlock_elector::redlock::BRIEF_ABOVE;

/// The minimal ACL as docs/operating/managed-redis.md and the chart's values.yaml give it
/// (`PASSWORD` is a placeholder). The tests apply exactly this line, with only the password substituted.
const MINIMAL_ACL: &str = "ACL SETUSER redlock-elector reset on >PASSWORD ~redlock-elector:* &redlock-elector:* +info +time +script|load +evalsha +subscribe +get +set +pexpire +pttl +del +publish +hget +hset +hgetall +hdel";
const ACL_USER: &str = "redlock-elector";

/// Apply [`MINIMAL_ACL`] with `password`, minus the rules in `drop` (to make a user that lacks
/// one permission), under another user name if given.
fn apply_acl(node: &Redis, user: &str, password: &str, drop: &[&str]) {
    let words: Vec<String> = MINIMAL_ACL
        .split_whitespace()
        .map(|w| match w {
            ">PASSWORD" => format!(">{password}"),
            ACL_USER => user.to_string(),
            other => other.to_string(),
        })
        .filter(|w| !drop.contains(&w.as_str()))
        .collect();
    let args: Vec<&str> = words.iter().map(String::as_str).collect();
    assert_eq!(
        node.cli(&args).as_deref(),
        Some("OK"),
        "ACL SETUSER failed: {args:?}"
    );
}

/// `n` TLS-only servers, their start-up quarantine (ttl 2s + 1s) waited out.
fn tls_nodes(pki: &Pki, n: usize, client_certs: bool, extra: &[&str]) -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..n)
        .map(|_| Redis::start_tls(pki, client_certs, extra))
        .collect();
    std::thread::sleep(Duration::from_millis(3100));
    nodes
}

/// 3 TLS-only servers with [`MINIMAL_ACL`]'s user (`password`), and the default user off: only
/// the ACL user's rights count.
fn acl_nodes(pki: &Pki, password: &str) -> Vec<Redis> {
    let nodes = tls_nodes(pki, 3, false, &[]);
    for n in &nodes {
        apply_acl(n, ACL_USER, password, &[]);
        assert_eq!(
            n.cli(&["ACL", "SETUSER", "default", "off"]).as_deref(),
            Some("OK")
        );
    }
    nodes
}

/// Assert that `s` warned of no connection failure but timeouts (with the documented ACL
/// nothing is denied, `auth` or `noperm`, nor fails otherwise; a connect that a loaded machine
/// did not finish within the connect timeout says nothing of the ACL) and logged no `secret`.
/// Returns the timeouts it warned of.
fn assert_only_timeouts(s: &Sidecar, secret: &str) -> usize {
    let warnings: Vec<serde_json::Value> = log_lines(s)
        .into_iter()
        .filter(|l| l["level"] == "WARN" && l["reason"].is_string())
        .collect();
    assert!(
        warnings.iter().all(|l| l["reason"] == "timeout"),
        "{}: a connection warning with the minimal ACL:\n{}",
        s.identity,
        s.logs()
    );
    assert_no_secret(s, &[secret]);
    warnings.iter().filter(|l| l["reason"] == "timeout").count()
}

/// `rediss://localhost:<port>`: the server certificate names `localhost`.
fn by_name(nodes: &[Redis]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| format!("rediss://localhost:{}", n.port))
        .collect()
}

fn opts(extra: &[&str], env: &[(&str, &str)]) -> Opts {
    // ttl 2s: room for a 150 ms per-node timeout on a loaded machine.
    Opts {
        ttl: "2s",
        timeout: "150ms",
        extra: extra.iter().map(|s| s.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Opts::default()
    }
}

/// The sidecar's JSON log lines.
fn log_lines(s: &Sidecar) -> Vec<serde_json::Value> {
    s.logs()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Seconds since midnight of an RFC 3339 UTC timestamp (`2026-11-23T11:29:52.333315Z`).
fn secs_of_day(ts: &str) -> f64 {
    let time = ts.split('T').nth(1).unwrap().trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next().unwrap().parse().unwrap();
    let m: f64 = parts.next().unwrap().parse().unwrap();
    let s: f64 = parts.next().unwrap().parse().unwrap();
    h * 3600.0 + m * 60.0 + s
}

/// The first `warn` line about a failed connection to `endpoint` with `reason`.
fn warn_line(s: &Sidecar, endpoint: &str, reason: &str) -> Option<serde_json::Value> {
    log_lines(s)
        .into_iter()
        .find(|l| l["level"] == "WARN" && l["endpoint"] == endpoint && l["reason"] == reason)
}

/// Wait (up to `within` of harness time, generous for a loaded machine) for a warn line with
/// `reason` for every endpoint; then check on the sidecar's own clock that each came within one
/// second of its start line (docs/operating/managed-redis.md: logged on the first failure).
/// Returns the lines.
fn expect_warnings(s: &Sidecar, endpoints: &[String], reason: &str) -> Vec<serde_json::Value> {
    let lines = wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        endpoints
            .iter()
            .map(|e| warn_line(s, e, reason))
            .collect::<Option<Vec<_>>>()
    })
    .unwrap_or_else(|| {
        panic!(
            "{}: no `{reason}` warn line for every endpoint {endpoints:?}:\n{}",
            s.identity,
            s.logs()
        )
    });
    let started = log_lines(s)
        .into_iter()
        .find(|l| l["message"] == "redlock-elector started")
        .expect("start line");
    let t0 = secs_of_day(started["timestamp"].as_str().unwrap());
    let last = lines
        .iter()
        .map(|l| secs_of_day(l["timestamp"].as_str().unwrap()) - t0)
        .fold(0.0, f64::max);
    report(
        &format!(
            "{}: last `{reason}` warning after the start line",
            s.identity
        ),
        format!("{last:.3}s"),
    );
    for l in &lines {
        let after = secs_of_day(l["timestamp"].as_str().unwrap()) - t0;
        assert!(
            after <= 1.0,
            "{}: the `{reason}` warning came {after:.3}s after the start, not within 1s: {l}",
            s.identity
        );
        assert!(
            l["fix"].as_str().is_some_and(|f| !f.is_empty()),
            "warn line without a fix: {l}"
        );
    }
    lines
}

/// For a while: `/leader` keeps answering, never `is_leader: true`, and names no leader.
fn assert_never_leader(s: &Sidecar, for_: Duration) {
    let until = Instant::now() + for_;
    while Instant::now() < until {
        let v = s.leader();
        assert!(
            !v.is_leader && v.leader.is_none() && v.fencing_token.is_none(),
            "{}: expected no leader, got {v:?}",
            s.identity
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `/metrics` text.
fn metrics(s: &Sidecar) -> String {
    common::http("GET", s.ops_port, "/metrics")
        .expect("/metrics")
        .1
}

/// No secret appears in the sidecar's log, nor in its metrics while it runs.
fn assert_no_secret(s: &Sidecar, secrets: &[&str]) {
    let logs = s.logs();
    // A sidecar that has exited (after a handover) has only its log left.
    let m = common::http("GET", s.ops_port, "/metrics").map(|(_, b)| b);
    for secret in secrets {
        assert!(
            !logs.contains(secret),
            "{}: a password is in the log",
            s.identity
        );
        if let Some(m) = &m {
            assert!(
                !m.contains(secret),
                "{}: a password is in /metrics",
                s.identity
            );
        }
    }
}

/// `redlock_elector_redis_connect_errors_total{endpoint, reason}`.
fn connect_errors(s: &Sidecar, endpoint: &str, reason: &str) -> f64 {
    common::metric_sum_where(s, |l| {
        l.starts_with("redlock_elector_redis_connect_errors_total{")
            && l.contains(&format!("endpoint=\"{endpoint}\""))
            && l.contains(&format!("reason=\"{reason}\""))
    })
}

/// `redlock_elector_redis_up` summed over endpoints.
fn redis_up(s: &Sidecar) -> f64 {
    common::metric_sum(s, "redlock_elector_redis_up{")
}

/// Wait until every sidecar has all three nodes up (`redlock_elector_redis_up`), `within` each;
/// else fail naming the sidecar, `what` and its log.
fn wait_all_connected(sidecars: &[Sidecar], within: Duration, what: &str) {
    for s in sidecars {
        wait_for(within, Duration::from_millis(10), || {
            (redis_up(s) == 3.0).then_some(())
        })
        .unwrap_or_else(|| panic!("{} {what}:\n{}", s.identity, s.logs()));
    }
}

fn wait_sole_leader(sidecars: &[&Sidecar], within: Duration) -> usize {
    wait_for(within, Duration::from_millis(10), || sole_leader(sidecars)).unwrap_or_else(|| {
        let logs: Vec<String> = sidecars.iter().map(|s| s.logs()).collect();
        panic!(
            "no single leader within {within:?}:\n{}",
            logs.join("\n----\n")
        )
    })
}

/// SIGTERM the leader; returns how long until another sidecar answers `is_leader: true`.
fn hand_over(sidecars: &mut [Sidecar], leader: usize) -> (usize, Duration) {
    let t0 = Instant::now();
    sidecars[leader].signal("TERM");
    let others: Vec<usize> = (0..sidecars.len()).filter(|&i| i != leader).collect();
    let next = wait_for(Duration::from_secs(5), Duration::from_millis(2), || {
        others
            .iter()
            .copied()
            .find(|&i| sidecars[i].try_leader().is_some_and(|v| v.is_leader))
    })
    .expect("a new leader after the SIGTERM");
    let took = t0.elapsed();
    sidecars[leader].reap();
    (next, took)
}

#[test]
fn elect_and_hand_over_over_tls() {
    let pki = Pki::new();
    let pw = "tls-requirepass-Secret-1";
    let nodes = tls_nodes(&pki, 3, false, &["--requirepass", pw]);
    let dir = common::tempdir();
    let pw_file = dir.path().join("password");
    std::fs::write(&pw_file, format!("{pw}\n")).unwrap();
    let ca = pki.arg("ca.crt");
    let names = by_name(&nodes);
    let ips: Vec<String> = nodes.iter().map(Redis::url).collect();
    let env = [("REDLOCK_ELECTOR_REDIS_PASSWORD", pw)];
    let mut sidecars = vec![
        // Host names in the certificate, password from the environment.
        Sidecar::start_urls("a", &names, &opts(&["--redis-tls-ca-file", &ca], &env)),
        // The password from a file.
        Sidecar::start_urls(
            "b",
            &names,
            &opts(
                &[
                    "--redis-tls-ca-file",
                    &ca,
                    "--redis-password-file",
                    pw_file.to_str().unwrap(),
                ],
                &[],
            ),
        ),
        // Reached by IP: verified against redis.tls.serverName.
        Sidecar::start_urls(
            "c",
            &ips,
            &opts(
                &[
                    "--redis-tls-ca-file",
                    &ca,
                    "--redis-tls-server-name",
                    "redis.test",
                ],
                &env,
            ),
        ),
    ];
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let mut leader = wait_sole_leader(&refs, Duration::from_secs(10));
    let mut led = vec![sidecars[leader].identity.clone()];
    // A quorum granted the lease; the next renewal heals a node that missed it (a reply later
    // than the per-node timeout on a loaded machine).
    let mine = format!("{}#", sidecars[leader].identity);
    let everywhere = wait_for(Duration::from_secs(3), Duration::from_millis(20), || {
        nodes
            .iter()
            .all(|n| {
                n.cli(&["GET", "redlock-elector:test"])
                    .is_some_and(|v| v.starts_with(&mine))
            })
            .then_some(())
    });
    assert!(
        everywhere.is_some(),
        "the leader's key is not on every node"
    );
    for s in &sidecars {
        assert_no_secret(s, &[pw]);
    }
    // Two graceful handovers: each sidecar leads once, over TLS.
    for round in 0..2 {
        let (next, took) = hand_over(&mut sidecars, leader);
        report(
            &format!("TLS handover {round}: SIGTERM -> new leader"),
            format!("{took:?}"),
        );
        assert!(
            took < Duration::from_secs(2),
            "handover took {took:?}: the release notice over TLS did not wake the followers"
        );
        leader = next;
        led.push(sidecars[leader].identity.clone());
    }
    led.sort();
    assert_eq!(led, ["a", "b", "c"], "every sidecar led once");
    for s in &sidecars {
        assert_no_secret(s, &[pw]);
    }
}

#[test]
fn mutual_tls() {
    let pki = Pki::new();
    let nodes = tls_nodes(&pki, 3, true, &[]);
    let names = by_name(&nodes);
    let (ca, cert, key) = (
        pki.arg("ca.crt"),
        pki.arg("client.crt"),
        pki.arg("client.key"),
    );
    let with_cert = [
        "--redis-tls-ca-file",
        &ca,
        "--redis-tls-cert-file",
        &cert,
        "--redis-tls-key-file",
        &key,
    ];
    let mut sidecars = vec![
        Sidecar::start_urls("a", &names, &opts(&with_cert, &[])),
        Sidecar::start_urls("b", &names, &opts(&with_cert, &[])),
    ];
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let leader = wait_sole_leader(&refs, Duration::from_secs(10));
    // Without a client certificate: refused by the server's TLS, said so, never leader.
    let endpoints: Vec<String> = nodes
        .iter()
        .map(|n| format!("localhost:{}", n.port))
        .collect();
    let no_cert = Sidecar::start_urls("no-cert", &names, &opts(&["--redis-tls-ca-file", &ca], &[]));
    let lines = expect_warnings(&no_cert, &endpoints, "tls");
    // TLS 1.3 finishes the client's side of the handshake before the server checks the client
    // certificate: the client then reads the server's CertificateRequired alert, or, when its
    // next write races the server's close, a broken pipe inside the handshake. Both are `tls`.
    let error = lines[0]["error"].as_str().unwrap();
    assert!(
        error.contains("CertificateRequired")
            || error.contains("closed the TLS connection during the handshake"),
        "{}",
        lines[0]
    );
    assert_never_leader(&no_cert, Duration::from_secs(1));
    let (next, took) = hand_over(&mut sidecars, leader);
    report("mTLS handover: SIGTERM -> new leader", format!("{took:?}"));
    assert_ne!(next, leader);
}

/// The documented ACL line (docs/operating/managed-redis.md), applied verbatim: sidecars elect
/// and hand over (the release notice needs SUBSCRIBE and PUBLISH), and `check-config --connect`
/// passes with it.
#[test]
fn minimal_acl_user() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in [
        "docs/operating/managed-redis.md",
        "charts/redlock-elector/values.yaml",
    ] {
        let text = std::fs::read_to_string(repo.join(doc)).unwrap();
        assert!(
            text.contains(MINIMAL_ACL),
            "{doc} does not give the minimal ACL line the tests apply:\n{MINIMAL_ACL}"
        );
    }
    let pki = Pki::new();
    let pw = "acl-user-Secret-2";
    let nodes = acl_nodes(&pki, pw);
    let names = by_name(&nodes);
    let ca = pki.arg("ca.crt");
    let o = opts(
        &["--redis-tls-ca-file", &ca, "--redis-username", ACL_USER],
        &[("REDLOCK_ELECTOR_REDIS_PASSWORD", pw)],
    );
    let mut sidecars = vec![
        Sidecar::start_urls("a", &names, &o),
        Sidecar::start_urls("b", &names, &o),
    ];
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let leader = wait_sole_leader(&refs, Duration::from_secs(10));
    let (_, took) = hand_over(&mut sidecars, leader);
    report(
        "minimal ACL user: SIGTERM -> new leader",
        format!("{took:?}"),
    );
    assert!(took < Duration::from_secs(2), "handover took {took:?}");
    // No connection warning, but a timeout: with the documented ACL nothing is denied (`auth`,
    // `noperm`) nor fails otherwise. A connect that a loaded machine (the suite beside 3 busy
    // loops) did not finish within the connect timeout says `timeout`; it says nothing of the
    // ACL, and is counted, not failed (it failed this test once under that load).
    let timeouts: usize = sidecars.iter().map(|s| assert_only_timeouts(s, pw)).sum();
    report(
        "minimal ACL user: connect timeouts warned (a loaded machine; nothing else warned)",
        timeouts,
    );
    let dir = common::tempdir();
    let pw_file = dir.path().join("password");
    std::fs::write(&pw_file, pw).unwrap();
    let cfg = config_file(
        dir.path(),
        &names,
        &format!(
            "  username: {ACL_USER}\n  passwordFile: {}\n  tls: {{caFile: {ca}}}\n",
            pw_file.display()
        ),
    );
    let (code, out, err) = check_config_connect(&cfg);
    assert_eq!(
        code, 0,
        "check-config --connect with the minimal ACL:\n{out}\n{err}"
    );
    for n in &nodes {
        assert!(
            out.contains(&format!("# localhost:{}: ok (", n.port)),
            "no ok line for {}:\n{out}",
            n.port
        );
    }
    assert!(
        out.contains("# quorum: 3 of 3 endpoints usable, 2 needed: OK"),
        "{out}"
    );
    assert!(
        !out.contains(pw) && !err.contains(pw),
        "check-config printed the password"
    );
}

/// The paths a plain election never takes, under the documented ACL: a renewal that heals the
/// key a node lost (it reads the successor's reservation first), and a follower of more than
/// [`BRIEF_ABOVE`] leases (its brief watch lists the other candidates). Each once called a
/// command the ACL lacks (`EXISTS`, `HKEYS`): the key stayed lost on that node, the follower
/// was denied.
#[test]
fn minimal_acl_user_heals_a_lost_key_and_follows_many_leases() {
    let pki = Pki::new();
    let pw = "acl-user-Secret-5";
    let nodes = acl_nodes(&pki, pw);
    let names = by_name(&nodes);
    let ca = pki.arg("ca.crt");
    let leases: Vec<String> = (0..=BRIEF_ABOVE).map(|i| format!("acl-{i}")).collect();
    let mut extra = vec![
        "--redis-tls-ca-file",
        ca.as_str(),
        "--redis-username",
        ACL_USER,
    ];
    for l in &leases {
        extra.extend(["--leases", l.as_str()]);
    }
    let mut o = opts(&extra, &[("REDLOCK_ELECTOR_REDIS_PASSWORD", pw)]);
    o.lease = String::new();
    let views = |s: &Sidecar| s.try_leases().unwrap_or_default();
    let a = Sidecar::start_urls("a", &names, &o);
    let led = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        (views(&a).iter().filter(|v| v.is_leader).count() == leases.len()).then_some(())
    });
    assert!(led.is_some(), "a did not lead every lease:\n{}", a.logs());
    let b = Sidecar::start_urls("b", &names, &o);
    let follows = wait_for(Duration::from_secs(15), Duration::from_millis(20), || {
        let v = views(&b);
        (v.len() == leases.len() && v.iter().all(|v| v.leader.as_deref() == Some("a")))
            .then_some(())
    });
    assert!(
        follows.is_some(),
        "b did not follow a on every lease:\n{}",
        b.logs()
    );
    // The key node 0 lost (as a restart without persistence loses it), healed by a renewal.
    let key = format!("redlock-elector:{}", leases[0]);
    let held = nodes[0].cli(&["GET", &key]).unwrap_or_default();
    assert!(!held.is_empty(), "a's key is not on node 0");
    assert_eq!(nodes[0].cli(&["DEL", &key]).as_deref(), Some("1"));
    let lost = Instant::now();
    let healed = wait_for(Duration::from_secs(4), Duration::from_millis(5), || {
        (nodes[0].cli(&["GET", &key]).as_deref() == Some(held.as_str())).then_some(())
    });
    assert!(
        healed.is_some(),
        "the renewals did not heal a's key on node 0 (ttl 2s):\n{}",
        a.logs()
    );
    report(
        "minimal ACL user: a lost key healed by the next renewal after",
        format!("{:?}", lost.elapsed()),
    );
    // Several watch periods of b's, brief ones among them.
    std::thread::sleep(Duration::from_secs(3));
    for s in [&a, &b] {
        assert_only_timeouts(s, pw);
    }
    assert!(
        views(&b)
            .iter()
            .all(|v| v.leader.as_deref() == Some("a") && !v.is_leader),
        "b stopped following a:\n{}",
        b.logs()
    );
}

/// A listener that accepts TCP connections (the kernel does) and never answers.
fn silent_listener() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

/// Each misconfiguration: a classified warn line per endpoint within a second of the start, the
/// failures counted by reason, `/leader` served with no leader, no password anywhere.
#[test]
fn failures_are_classified_within_a_second() {
    let pki = Pki::new();
    let pw = "right-Password-3";
    let wrong = "wrong-Password-4";
    let nodes = tls_nodes(&pki, 3, false, &["--requirepass", pw]);
    for n in &nodes {
        apply_acl(n, "no-evalsha", pw, &["+evalsha"]);
        apply_acl(n, "no-script-load", pw, &["+script|load"]);
    }
    let names = by_name(&nodes);
    let by_ip: Vec<String> = nodes.iter().map(Redis::url).collect();
    let name_eps: Vec<String> = nodes
        .iter()
        .map(|n| format!("localhost:{}", n.port))
        .collect();
    let ip_eps: Vec<String> = nodes.iter().map(Redis::endpoint).collect();
    let ca = pki.arg("ca.crt");
    let other_ca = pki.arg("other-ca.crt");
    let listeners: Vec<_> = (0..3).map(|_| silent_listener()).collect();
    let silent: Vec<String> = listeners
        .iter()
        .map(|l| format!("rediss://{}", l.local_addr().unwrap()))
        .collect();
    let silent_eps: Vec<String> = listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    let closed: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let refused: Vec<String> = closed
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let refused_eps: Vec<String> = closed.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let dns = vec![
        "rediss://redis-a.nonexistent.invalid:6379".to_string(),
        "rediss://redis-b.nonexistent.invalid:6379".to_string(),
        "rediss://redis-c.nonexistent.invalid:6379".to_string(),
    ];
    let dns_eps: Vec<String> = dns
        .iter()
        .map(|u| u.trim_start_matches("rediss://").to_string())
        .collect();
    // A TLS node set that cannot answer in time: the connect timeout well below the watchdog's.
    let short_timeout = vec![
        "--redis-tls-ca-file",
        &ca,
        "--redis-connect-timeout",
        "300ms",
    ];
    struct Case<'a> {
        name: &'a str,
        urls: &'a [String],
        endpoints: &'a [String],
        flags: Vec<&'a str>,
        password: &'a str,
        reason: &'a str,
        /// A fragment the error (or the denied command) must contain.
        says: &'a str,
    }
    let cases = [
        Case {
            name: "wrong-ca",
            urls: &names,
            endpoints: &name_eps,
            flags: vec!["--redis-tls-ca-file", &other_ca],
            password: pw,
            reason: "tls",
            says: "UnknownIssuer",
        },
        Case {
            name: "hostname-mismatch",
            urls: &by_ip,
            endpoints: &ip_eps,
            flags: vec!["--redis-tls-ca-file", &ca],
            password: pw,
            reason: "tls",
            says: "not valid for name",
        },
        Case {
            name: "wrong-password",
            urls: &names,
            endpoints: &name_eps,
            flags: vec!["--redis-tls-ca-file", &ca],
            password: wrong,
            reason: "auth",
            says: "refused the credentials",
        },
        Case {
            name: "acl-without-evalsha",
            urls: &names,
            endpoints: &name_eps,
            flags: vec!["--redis-tls-ca-file", &ca, "--redis-username", "no-evalsha"],
            password: pw,
            reason: "noperm",
            says: "evalsha",
        },
        Case {
            name: "acl-without-script-load",
            urls: &names,
            endpoints: &name_eps,
            flags: vec![
                "--redis-tls-ca-file",
                &ca,
                "--redis-username",
                "no-script-load",
            ],
            password: pw,
            reason: "noperm",
            says: "script|load",
        },
        Case {
            name: "refused",
            urls: &refused,
            endpoints: &refused_eps,
            flags: vec![],
            password: pw,
            reason: "refused",
            says: "refused",
        },
        Case {
            name: "timeout",
            urls: &silent,
            endpoints: &silent_eps,
            flags: short_timeout.clone(),
            password: pw,
            reason: "timeout",
            says: "within",
        },
        Case {
            name: "dns",
            urls: &dns,
            endpoints: &dns_eps,
            flags: short_timeout.clone(),
            password: pw,
            reason: "dns",
            says: "nonexistent.invalid",
        },
    ];
    for case in &cases {
        let s = Sidecar::start_urls(
            case.name,
            case.urls,
            &opts(
                &case.flags,
                &[("REDLOCK_ELECTOR_REDIS_PASSWORD", case.password)],
            ),
        );
        let lines = expect_warnings(&s, case.endpoints, case.reason);
        for l in &lines {
            let said = format!("{} {}", l["error"], l["denied"]);
            assert!(said.contains(case.says), "{}: {l}", case.name);
        }
        if case.reason == "noperm" {
            assert_eq!(
                lines[0]["denied"], case.says,
                "{}: names the denied command",
                case.name
            );
        }
        assert_never_leader(&s, Duration::from_millis(800));
        for e in case.endpoints {
            assert!(
                connect_errors(&s, e, case.reason) >= 1.0,
                "{}: {e} not counted under reason {}:\n{}",
                case.name,
                case.reason,
                metrics(&s)
            );
        }
        // Rate limit: the same failure repeats (backoff <= 2 s) but warns once per endpoint.
        let repeats = log_lines(&s)
            .iter()
            .filter(|l| {
                l["level"] == "WARN"
                    && l["reason"] == case.reason
                    && l["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("redis connection"))
            })
            .count();
        assert_eq!(
            repeats,
            case.endpoints.len(),
            "{}: one warning per endpoint:\n{}",
            case.name,
            s.logs()
        );
        assert_no_secret(&s, &[pw, wrong]);
        report(
            &format!("{}: first warning", case.name),
            lines[0]["message"].as_str().unwrap(),
        );
    }
    drop(listeners);
}

/// The password is rotated on the servers (`CONFIG SET requirepass`, or `ACL SETUSER` for an
/// ACL user) and every connection is killed; the sidecars fail with `auth` until the password
/// file is updated, then reconnect with the new password. The leader keeps the lease
/// throughout (same term, never `is_leader: false`) and no password is ever logged.
fn rotate(acl: bool) {
    let pki = Pki::new();
    let (old, new) = ("rotation-Old-5", "rotation-New-6");
    let nodes = if acl {
        let nodes = tls_nodes(&pki, 3, false, &[]);
        for n in &nodes {
            apply_acl(n, ACL_USER, old, &[]);
        }
        nodes
    } else {
        tls_nodes(&pki, 3, false, &["--requirepass", old])
    };
    let user = if acl { ACL_USER } else { "default" };
    let dir = common::tempdir();
    let pw_file = dir.path().join("password");
    std::fs::write(&pw_file, format!("{old}\n")).unwrap();
    let ca = pki.arg("ca.crt");
    let mut flags = vec![
        "--redis-tls-ca-file",
        &ca,
        "--redis-password-file",
        pw_file.to_str().unwrap(),
    ];
    if acl {
        flags.extend(["--redis-username", ACL_USER]);
    }
    let names = by_name(&nodes);
    // ttl 4s: a renewal every 1.3 s; the rotation must not cost the lease.
    let o = Opts {
        ttl: "4s",
        ..opts(&flags, &[])
    };
    let sidecars = [
        Sidecar::start_urls("a", &names, &o),
        Sidecar::start_urls("b", &names, &o),
    ];
    let refs: Vec<&Sidecar> = sidecars.iter().collect();
    let leader = wait_sole_leader(&refs, Duration::from_secs(10));
    let (l, f) = (&sidecars[leader], &sidecars[1 - leader]);
    let before = l.leader();
    // Watch both sidecars throughout the rotation.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (stop, lp, fp) = (stop.clone(), l.api_port, f.api_port);
        std::thread::spawn(move || {
            let mut views = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let get = |p| {
                    common::http("GET", p, "/leader")
                        .map(|(_, b)| serde_json::from_str::<common::View>(&b).unwrap())
                };
                views.push((Instant::now(), get(lp), get(fp)));
                std::thread::sleep(Duration::from_millis(10));
            }
            views
        })
    };
    let t0 = Instant::now();
    for n in &nodes {
        let ok = if acl {
            n.cli(&[
                "ACL",
                "SETUSER",
                ACL_USER,
                &format!(">{new}"),
                &format!("<{old}"),
            ])
        } else {
            n.cli(&["CONFIG", "SET", "requirepass", new])
        };
        assert_eq!(ok.as_deref(), Some("OK"));
        // Every connection of the sidecars' user: both must reconnect with the new password.
        n.cli(&["CLIENT", "KILL", "USER", user]).unwrap();
    }
    // They fail with the old password...
    wait_for(Duration::from_secs(3), Duration::from_millis(5), || {
        sidecars.iter().find(|s| {
            log_lines(s)
                .iter()
                .any(|l| l["level"] == "WARN" && l["reason"] == "auth")
        })
    })
    .unwrap_or_else(|| {
        panic!(
            "no `auth` warning after the rotation:\n{}\n----\n{}",
            l.logs(),
            f.logs()
        )
    });
    report(
        "password rotation: servers rotated -> first `auth` warning",
        format!("{:?}", t0.elapsed()),
    );
    // ...until the Secret is updated (Kubernetes swaps the file; a rename is as atomic).
    let tmp = dir.path().join("password.new");
    std::fs::write(&tmp, format!("{new}\n")).unwrap();
    std::fs::rename(&tmp, &pw_file).unwrap();
    let t_file = Instant::now();
    wait_all_connected(
        &sidecars,
        Duration::from_secs(5),
        "did not reconnect with the new password",
    );
    report(
        "password rotation: file updated -> all nodes reconnected",
        format!("{:?}", t_file.elapsed()),
    );
    // Renewals keep working for a while after, and every connection is (still) up: one that
    // noticed the kill only now has reconnected with the new password too.
    std::thread::sleep(Duration::from_millis(1500));
    wait_all_connected(
        &sidecars,
        Duration::from_secs(3),
        "is not connected to every node",
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let views = watch.join().unwrap();
    // The watch covered the whole rotation without a blind stretch (it polls every 10 ms; a
    // loaded machine may stretch that, but not to a lease's worth).
    let (first, last) = (views.first().map(|v| v.0), views.last().map(|v| v.0));
    assert!(
        first.is_some_and(|f| f <= t0 + Duration::from_millis(500))
            && last.is_some_and(|l| l >= t_file),
        "the watch did not span the rotation"
    );
    let blind = views
        .windows(2)
        .map(|w| w[1].0 - w[0].0)
        .max()
        .unwrap_or_default();
    assert!(
        blind < Duration::from_millis(500),
        "the watch had a blind stretch of {blind:?} ({} observations)",
        views.len()
    );
    for (_, lv, fv) in &views {
        let lv = lv.as_ref().expect("the leader keeps serving /leader");
        assert!(
            lv.is_leader && lv.fencing_token == before.fencing_token,
            "the leader lost the lease or changed term during the rotation: {lv:?} (before {before:?})\n{}",
            l.logs()
        );
        assert!(
            !fv.as_ref().expect("follower serves").is_leader,
            "the follower led"
        );
    }
    // The recovery is logged at info, naming the reason it recovered from (on the connection
    // or on the release-notice subscription, whichever met the old password).
    assert!(
        sidecars
            .iter()
            .any(|s| log_lines(s).iter().any(|x| x["level"] == "INFO"
                && x["message"]
                    .as_str()
                    .is_some_and(|m| m.ends_with("works again"))
                && x["previous_reason"] == "auth")),
        "no recovery line after the `auth` failures"
    );
    let after = l.leader();
    assert!(after.is_leader && after.fencing_token == before.fencing_token);
    for s in &sidecars {
        assert!(
            log_lines(s).iter().any(|x| x["message"]
                .as_str()
                .is_some_and(|m| m.contains("redis.passwordFile changed"))),
            "{}: no note of the new password file:\n{}",
            s.identity,
            s.logs()
        );
        assert_no_secret(s, &[old, new]);
    }
}

#[test]
fn password_rotation_with_requirepass_keeps_the_lease() {
    rotate(false);
}

#[test]
fn password_rotation_with_an_acl_user_keeps_the_lease() {
    rotate(true);
}

/// A config file for check-config: lease `test`, these endpoints, and `redis_extra` lines
/// (indented two spaces, under `redis:`).
fn config_file(dir: &Path, urls: &[String], redis_extra: &str) -> String {
    let mut text = String::from("lease: {name: test, ttl: 2s}\nredis:\n  endpoints:\n");
    for u in urls {
        text.push_str(&format!("    - {u}\n"));
    }
    text.push_str(redis_extra);
    text.push_str("kubernetes: {enabled: \"false\"}\n");
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

/// `check-config --connect FILE` with no `REDLOCK_ELECTOR_*` in the environment but `env`.
fn check_config_connect_env(cfg: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(binary());
    cmd.args(["check-config", "--connect", cfg]);
    for (k, _) in std::env::vars() {
        if k.starts_with("REDLOCK_ELECTOR_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check_config_connect(cfg: &str) -> (i32, String, String) {
    check_config_connect_env(cfg, &[])
}

#[test]
fn check_config_connect_reports_each_endpoint_and_the_quorum() {
    let pki = Pki::new();
    let pw = "preflight-Secret-7";
    // Fresh servers: still in their start-up quarantine.
    let nodes: Vec<Redis> = (0..3)
        .map(|_| Redis::start_tls(&pki, false, &["--requirepass", pw]))
        .collect();
    let dir = common::tempdir();
    let ca = pki.arg("ca.crt");
    let env = [("REDLOCK_ELECTOR_REDIS_PASSWORD", pw)];
    let names = by_name(&nodes);
    let tls = format!("  tls: {{caFile: {ca}}}\n");
    let cfg = config_file(dir.path(), &names, &tls);
    let (code, out, err) = check_config_connect_env(&cfg, &env);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        serde_saphyr::from_str::<serde_json::Value>(&out).is_ok(),
        "stdout is no longer one YAML document:\n{out}"
    );
    for n in &nodes {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("# localhost:{}: ", n.port)))
            .unwrap_or_else(|| panic!("no line for {}:\n{out}", n.port));
        assert!(
            line.contains(": ok (") && line.contains("quarantined for"),
            "{line}"
        );
    }
    assert!(
        out.contains(
            "# quorum: 3 of 3 endpoints usable, 2 needed: OK (3 still in restart quarantine)"
        ),
        "{out}"
    );

    // One good endpoint, one refused, one failing verification: no quorum, exit 1.
    let closed = free_port();
    let urls = vec![
        names[0].clone(),
        format!("redis://127.0.0.1:{closed}"),
        nodes[2].url(),
    ];
    let cfg = config_file(dir.path(), &urls, &tls);
    let (code, out, err) = check_config_connect_env(&cfg, &env);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        out.contains(&format!("# localhost:{}: ok (", nodes[0].port)),
        "{out}"
    );
    assert!(
        out.contains(&format!("# 127.0.0.1:{closed}: refused: ")) && out.contains("fix: "),
        "{out}"
    );
    assert!(
        out.contains(&format!("# 127.0.0.1:{}: tls: ", nodes[2].port)),
        "{out}"
    );
    assert!(
        out.contains("# quorum: 1 of 3 endpoints usable, 2 needed: NOT USABLE"),
        "{out}"
    );
    assert!(err.contains("no quorum"), "{err}");

    // A wrong password: auth, and neither password printed.
    let cfg = config_file(dir.path(), &names, &tls);
    let bad = "not-the-Password-8";
    let (code, out, err) =
        check_config_connect_env(&cfg, &[("REDLOCK_ELECTOR_REDIS_PASSWORD", bad)]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(out.matches(": auth: ").count(), 3, "{out}");
    for secret in [pw, bad] {
        assert!(
            !out.contains(secret) && !err.contains(secret),
            "check-config printed a password"
        );
    }
}

//! The app-facing HTTP API against the real binary: long-poll, SSE, step-down, errors.

use testkit::common;

use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

use common::*;

const TTL: Duration = Duration::from_secs(1);

fn leading(s: &Sidecar) -> View {
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        Some(s.leader()).filter(|v| v.is_leader)
    })
    .unwrap_or_else(|| panic!("{} never led:\n{}", s.identity, s.logs()))
}

#[test]
fn long_poll_returns_on_timeout_and_on_change() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = Sidecar::start("a", &refs, &Opts::default());
    let v = leading(&a);

    // No change: returns after the wait with the same version.
    let t0 = Instant::now();
    let (status, body) = http(
        "GET",
        a.api_port,
        &format!("/leader?wait=500ms&version={}", v.version),
    )
    .unwrap();
    let waited = t0.elapsed();
    assert_eq!(status, 200);
    let same: View = serde_json::from_str(&body).unwrap();
    assert_eq!(same.version, v.version);
    assert!(
        waited >= Duration::from_millis(480) && waited < Duration::from_secs(3),
        "waited {waited:?}"
    );

    // A stale version returns at once.
    let t0 = Instant::now();
    let (_, body) = http("GET", a.api_port, "/leader?wait=10s&version=0").unwrap();
    assert!(t0.elapsed() < Duration::from_secs(1));
    assert_eq!(
        serde_json::from_str::<View>(&body).unwrap().version,
        v.version
    );

    // A change (step-down) releases the waiter early.
    let port = a.api_port;
    let version = v.version;
    let waiter = std::thread::spawn(move || {
        let t0 = Instant::now();
        let r = http_timeout(
            "GET",
            port,
            &format!("/leader?wait=20s&version={version}"),
            Duration::from_secs(30),
        );
        (r, t0.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let (status, _) = http("POST", a.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 200);
    let (r, took) = waiter.join().unwrap();
    let (status, body) = r.unwrap();
    assert_eq!(status, 200);
    let changed: View = serde_json::from_str(&body).unwrap();
    assert!(!changed.is_leader);
    assert!(changed.version > version);
    assert!(
        took < Duration::from_secs(5),
        "long-poll returned on the change, not the 20s wait: {took:?}"
    );
}

/// Read SSE `data:` lines from /leader/watch.
struct Sse {
    reader: BufReader<std::net::TcpStream>,
}

impl Sse {
    fn connect(port: u16) -> Sse {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            b"GET /leader/watch HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n\r\n",
        )
        .unwrap();
        let mut reader = BufReader::new(s);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/event-stream"),
            "{head}"
        );
        Sse { reader }
    }

    fn next(&mut self) -> View {
        loop {
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .expect("SSE event within 10s");
            assert!(n > 0, "SSE stream closed");
            if let Some(data) = line.trim_end().strip_prefix("data:") {
                return serde_json::from_str(data.trim()).unwrap();
            }
        }
    }
}

#[test]
fn sse_delivers_current_state_and_each_change_and_step_down_hands_over() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = Sidecar::start("a", &refs, &Opts::default());
    leading(&a);
    let b = Sidecar::start("b", &refs, &Opts::default());
    wait_for(Duration::from_secs(3), Duration::from_millis(10), || {
        (b.leader().leader.as_deref() == Some("a")).then_some(())
    })
    .expect("b observes a");

    let mut sa = Sse::connect(a.api_port);
    let mut sb = Sse::connect(b.api_port);
    let first_a = sa.next();
    assert!(first_a.is_leader, "current state at connect: {first_a:?}");
    let first_b = sb.next();
    assert!(!first_b.is_leader);
    assert_eq!(first_b.leader.as_deref(), Some("a"));

    // Step-down: a releases; b takes over within milliseconds (the release notice), not a retry period.
    let t0 = Instant::now();
    let (status, body) = http("POST", a.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 200, "{body}");
    let next_a = sa.next();
    assert!(!next_a.is_leader);
    assert_eq!(next_a.version, first_a.version + 1, "one event per change");
    let mut last_b = first_b.clone();
    let mut events_b = vec![];
    while !last_b.is_leader {
        last_b = sb.next();
        events_b.push(last_b.clone());
        assert!(last_b.version > first_b.version);
    }
    let handover = t0.elapsed();
    report(
        "step-down handover observed over SSE, ms",
        handover.as_millis(),
    );
    assert!(handover < Duration::from_secs(1), "handover {handover:?}");
    assert_eq!(last_b.leader.as_deref(), Some("b"));
    // Versions strictly increase event to event.
    for w in events_b.windows(2) {
        assert!(w[1].version > w[0].version, "{events_b:?}");
    }
    // a sits out a cool-down, then names b.
    let a_sees_b = sa.next();
    assert!(!a_sees_b.is_leader);
    assert_eq!(a_sees_b.leader.as_deref(), Some("b"));

    // Step-down on a follower: 409.
    let (status, body) = http("POST", a.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("error"));

    // The leader-elector / nais elector answer on `/`: both name b, with an RFC 3339 time of
    // the last change that is not in the future.
    for s in [&a, &b] {
        let (status, body) = http("GET", s.api_port, "/").unwrap();
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["name"], "b", "{body}");
        let at = humantime::parse_rfc3339(v["last_update"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("last_update is not RFC 3339: {body}: {e}"));
        assert!(at <= std::time::SystemTime::now(), "{body}");
        assert!(
            std::time::SystemTime::now().duration_since(at).unwrap() < Duration::from_secs(60),
            "{body}"
        );
    }
}

#[test]
fn bad_parameters_are_400_unknown_paths_404() {
    let nodes = redis_cluster(1, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = Sidecar::start("a", &refs, &Opts::default());
    for q in [
        "/leader?wait=soon",
        "/leader?wait=1s&version=x",
        "/leader?version=-3",
        "/leader?wait=",
    ] {
        let (status, body) = http("GET", a.api_port, q).unwrap();
        assert_eq!(status, 400, "{q}: {body}");
        let err: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|_| panic!("{q}: JSON error body: {body}"));
        assert!(err["error"].is_string(), "{q}: {body}");
    }
    let (status, _) = http("GET", a.api_port, "/leader?unknown=1&also=2").unwrap();
    assert_eq!(status, 200, "unknown parameters are ignored");
    for p in ["/leaders", "/leader/nope", "/metrics", "/x"] {
        let (status, body) = http("GET", a.api_port, p).unwrap();
        assert_eq!(status, 404, "{p}: {body}");
    }
    let (status, _) = http("GET", a.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 405);

    // Ops probes.
    assert_eq!(http("GET", a.ops_port, "/healthz").unwrap().0, 200);
    assert_eq!(http("GET", a.ops_port, "/readyz").unwrap().0, 200);
    leading(&a);
    assert_eq!(http("GET", a.ops_port, "/readyz/leader").unwrap().0, 200);
    let (status, metrics) = http("GET", a.ops_port, "/metrics").unwrap();
    assert_eq!(status, 200);
    for m in [
        "redlock_elector_is_leader{lease=\"test\"} 1",
        "redlock_elector_leader_transitions_total{lease=\"test\"} 1",
        "redlock_elector_acquire_attempts_total{lease=\"test\",result=\"acquired\"} 1",
        "redlock_elector_renewals_total{lease=\"test\",result=\"ok\"}",
        "redlock_elector_lease_valid_seconds{lease=\"test\"} 0.",
        "redlock_elector_fencing_token{lease=\"test\"} ",
        "redlock_elector_acquire_duration_seconds_bucket{lease=\"test\",le=",
        &format!(
            "redlock_elector_redis_up{{endpoint=\"127.0.0.1:{}\"}} 1",
            nodes[0].port
        ),
        &format!(
            "redlock_elector_redis_quarantined{{endpoint=\"127.0.0.1:{}\"}} 0",
            nodes[0].port
        ),
        "redlock_elector_redis_command_duration_seconds_bucket{command=\"acquire\"",
        "redlock_elector_build_info{version=\"",
    ] {
        assert!(metrics.contains(m), "/metrics lacks {m}:\n{metrics}");
    }
    let (status, _) = http("POST", a.api_port, "/leader/step-down").unwrap();
    assert_eq!(status, 200);
    assert_eq!(http("GET", a.ops_port, "/readyz/leader").unwrap().0, 503);
    assert_eq!(
        http("GET", a.ops_port, "/readyz").unwrap().0,
        200,
        "readiness is not tied to leadership"
    );
}

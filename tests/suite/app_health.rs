//! `lease.followApp` with `app.healthUrl`, on the real binary: each sidecar probes its own
//! app's health URL (a small HTTP server in the test that answers 200 or 503). The leader whose
//! app turns unhealthy hands over to the sidecar whose app is healthy after the grace; with
//! every app unhealthy, one leader remains; the checker polls both throughout.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use testkit::common::*;
use testkit::fault::checker::{Checker, analyze};
use testkit::fault::describe;

const TTL: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_millis(500);

/// An app's health endpoint: 200 while `healthy`, else 503; its URL.
fn health_server(healthy: Arc<AtomicBool>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let status = if healthy.load(Ordering::SeqCst) {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            let _ = write!(
                conn,
                "HTTP/1.1 {status}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    format!("http://127.0.0.1:{port}/healthz")
}

fn opts(url: &str) -> Opts {
    Opts {
        extra: [
            "--follow-app",
            "true",
            "--app-health-url",
            url,
            "--app-health-interval",
            "50ms",
            "--app-health-timeout",
            "200ms",
            "--app-health-failure-threshold",
            "2",
            "--app-unhealthy-grace",
            "500ms",
            "--app-cooldown",
            "5s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..Opts::default()
    }
}

#[test]
fn leadership_follows_the_apps_health_url_and_never_deadlocks() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let health = [
        Arc::new(AtomicBool::new(true)),
        Arc::new(AtomicBool::new(true)),
    ];
    let sidecars = [
        Sidecar::start("a", &refs, &opts(&health_server(health[0].clone()))),
        Sidecar::start("b", &refs, &opts(&health_server(health[1].clone()))),
    ];
    let both: Vec<&Sidecar> = sidecars.iter().collect();
    let checker = Checker::start(&[sidecars[0].api_port, sidecars[1].api_port]);
    let l = wait_for(Duration::from_secs(15), Duration::from_millis(5), || {
        sole_leader(&both)
    })
    .expect("a leader");
    // Both records say ready (healthy) before the test breaks the leader's app.
    wait_for(Duration::from_secs(5), Duration::from_millis(20), || {
        let v = sidecars[l].leader();
        (v.healthy_candidates == Some(1) && v.app_healthy == Some(true)).then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "the other candidate never showed healthy: {:?}",
            sidecars[l].leader()
        )
    });

    // The leader's app turns unhealthy: the other leads after the grace (plus two probes).
    health[l].store(false, Ordering::SeqCst);
    let broke = Instant::now();
    let other = 1 - l;
    let moved = wait_for(GRACE * 3 + TTL, Duration::from_millis(2), || {
        sidecars[other].leader().is_leader.then(Instant::now)
    })
    .unwrap_or_else(|| panic!("no handover for the app's health:\n{}", sidecars[l].logs()));
    report(
        "app unhealthy -> the other leads (grace 500 ms, 2 probes of 50 ms)",
        format!("{:?}", moved - broke),
    );
    let logs = sidecars[l].logs();
    assert!(
        logs.contains("app-unhealthy"),
        "the handover's reason is logged:\n{logs}"
    );
    assert_eq!(sidecars[l].leader().app_healthy, Some(false));

    // Every app unhealthy: one leader remains (some leader beats no leader), and says so.
    health[other].store(false, Ordering::SeqCst);
    std::thread::sleep(GRACE * 3);
    let v = sidecars[other].leader();
    assert!(
        v.is_leader,
        "no deadlock: the leader keeps the lease: {v:?}"
    );
    assert_eq!(
        (v.app_healthy, v.healthy_candidates),
        (Some(false), Some(0))
    );
    assert!(
        sole_leader(&both) == Some(other),
        "exactly one leader with every app unhealthy"
    );
    let obs = checker.finish();
    let r = analyze(&obs.segments);
    assert!(
        r.overlaps.is_empty() && r.token_violations.is_empty(),
        "{}",
        describe(&r)
    );
}

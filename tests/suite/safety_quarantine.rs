//! Quarantine: a node that restarted (empty) does not count toward a quorum until ttl + 1 s of
//! uptime; a replica or a node whose maxmemory-policy evicts TTL keys never counts, and is
//! reported in `/metrics`. Each test also shows what happens without the rule.

use testkit::common;
use testkit::fault;

use std::time::{Duration, Instant};

use common::*;
use fault::metric;

const TTL: Duration = Duration::from_secs(1);

fn quarantined(s: &Sidecar, r: &Redis) -> Option<f64> {
    metric(
        s,
        "redlock_elector_redis_quarantined",
        &[("endpoint", &format!("127.0.0.1:{}", r.port))],
    )
}

fn key() -> &'static str {
    "redlock-elector:test"
}

/// Three nodes, one of them held by a foreign value, so the sidecar needs both others; one of
/// those restarts empty just before the sidecar starts. It may not lead before that node has
/// been up for ttl + 1 s.
#[test]
fn restarted_empty_node_does_not_count_until_ttl_plus_1s() {
    for unsafe_flag in [false, true] {
        let mut nodes = redis_cluster(3, TTL);
        assert_eq!(
            nodes[1]
                .cli(&["SET", key(), "someone-else#0", "PX", "600000"])
                .as_deref(),
            Some("OK")
        );
        let restarted_at = Instant::now();
        nodes[2].restart();
        let refs: Vec<&Redis> = nodes.iter().collect();
        // A fresh sidecar also watches every node's clock for ttl + margin before counting it,
        // which covers a restart just before it started as well; switched off here so the test
        // shows the uptime rule alone.
        let mut opts = Opts {
            extra: vec!["--unsafe-disable-clock-check".into()],
            ..Opts::default()
        };
        if unsafe_flag {
            opts.extra.push("--unsafe-disable-quarantine".into());
        }
        let a = Sidecar::start("a", &refs, &opts);
        let mut saw_quarantine = false;
        let led_at = wait_for(Duration::from_secs(10), Duration::from_millis(2), || {
            if quarantined(&a, &nodes[2]) == Some(1.0) {
                saw_quarantine = true;
            }
            a.leader().is_leader.then(Instant::now)
        })
        .unwrap_or_else(|| panic!("never led (unsafe={unsafe_flag}):\n{}", a.logs()));
        let after = led_at - restarted_at;
        report(
            &format!("first term after an empty restart (unsafe={unsafe_flag})"),
            format!("{after:?}"),
        );
        if unsafe_flag {
            // Without quarantine it counts the empty node at once: the hazard is real.
            assert!(after < TTL, "even without quarantine it took {after:?}");
        } else {
            // Redis computes uptime from two truncated wall-clock seconds, so it can read up to
            // 1 s more than the real uptime: the quarantine of ttl + 1 − uptime then ends at the
            // restart + ttl, the earliest moment no lease the node forgot can still run. The
            // server started after `restarted_at`, so this bound is exact, without slack.
            assert!(
                after >= TTL,
                "led {after:?} after the restart:\n{}",
                a.logs()
            );
            assert!(
                saw_quarantine,
                "quarantine of the restarted node never showed in /metrics"
            );
            assert_eq!(
                quarantined(&a, &nodes[2]),
                Some(0.0),
                "quarantine must end once it counts"
            );
            assert!(a.logs().contains("restarted recently"), "{}", a.logs());
        }
        assert_eq!(quarantined(&a, &nodes[0]), Some(0.0));
    }
}

/// A writable replica and an `allkeys-lru` node both grant `SET NX`, so only the role and policy
/// checks keep them from counting: with one good node of three, no quorum is ever reached.
#[test]
fn replica_and_evicting_nodes_are_reported_and_never_count() {
    let upstream = Redis::start();
    let good = Redis::start();
    let evicting = Redis::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let up = upstream.port.to_string();
    let replica =
        Redis::start_with(&["--replicaof", "127.0.0.1", &up, "--replica-read-only", "no"]);
    std::thread::sleep(TTL + Duration::from_millis(1100));
    assert!(
        replica
            .cli(&["INFO", "replication"])
            .unwrap_or_default()
            .contains("role:slave")
    );
    let nodes = [&good, &evicting, &replica];

    let a = Sidecar::start("a", &nodes, &Opts::default());
    let until = Instant::now() + TTL * 3;
    while Instant::now() < until {
        assert!(
            !a.leader().is_leader,
            "led with one counting node of three:\n{}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(quarantined(&a, &good), Some(0.0));
    assert_eq!(quarantined(&a, &evicting), Some(1.0));
    assert_eq!(quarantined(&a, &replica), Some(1.0));
    let logs = a.logs();
    assert!(
        logs.contains("replica"),
        "replica not reported in the log:\n{logs}"
    );
    assert!(
        logs.contains("allkeys-lru"),
        "evicting policy not reported in the log:\n{logs}"
    );
    assert!(
        metric(
            &a,
            "redlock_elector_acquire_attempts_total",
            &[("result", "no_quorum")]
        )
        .unwrap_or(0.0)
            >= 1.0,
        "attempts were made and failed for want of a quorum"
    );
    drop(a);

    // The same nodes counted blindly: the sidecar leads, so the checks above are what held it back.
    let opts = Opts {
        extra: vec![
            "--unsafe-disable-quarantine".into(),
            "--unsafe-disable-clock-check".into(),
        ],
        ..Opts::default()
    };
    let b = Sidecar::start("b", &nodes, &opts);
    assert!(
        wait_for(Duration::from_secs(5), Duration::from_millis(5), || b
            .leader()
            .is_leader
            .then_some(()))
        .is_some(),
        "without the checks it should lead on these nodes:\n{}",
        b.logs()
    );
}

//! Ambiguous replies: a node whose `SET NX` reply comes after `redis.timeout` may still have
//! executed it. Such a node is not counted as a yes, and the failed attempt's token-checked
//! delete is sent to it too, so the late key does not linger for a whole ttl.
//!
//! Three nodes: node 0 is held by a foreign value, node 1 sits behind the fault proxy with
//! 150 ms of latency toward it (timeout 50 ms), node 2 is direct. Each attempt gets one timely
//! yes (node 2), one no (node 0) and a yes from node 1 that arrives too late: counting it would
//! make a quorum of two. The test watches node 1 directly and measures how long each of the
//! sidecar's values lives there.

use testkit::common;
use testkit::fault;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use fault::proxy::{LinkFault, Proxy};

const TTL: Duration = Duration::from_secs(3);
const KEY: &str = "redlock-elector:test";

#[test]
fn timed_out_node_is_not_counted_and_its_late_key_is_deleted() {
    let nodes = redis_cluster(3, TTL);
    assert_eq!(
        nodes[0]
            .cli(&["SET", KEY, "someone-else#0", "PX", "600000"])
            .as_deref(),
        Some("OK")
    );
    let proxy = Proxy::new(1, &[nodes[1].port]);
    let urls = vec![nodes[0].url(), proxy.urls(0)[0].clone(), nodes[2].url()];
    let opts = Opts {
        ttl: "3s",
        retry_every: "700ms",
        timeout: "50ms",
        ..Opts::default()
    };
    let a = Sidecar::start_urls("a", &urls, &opts);
    // Latency only once the connection is verified, so the handshake itself is not in question.
    let endpoint = proxy.endpoint(0, 0);
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (fault::metric(&a, "redlock_elector_redis_up", &[("endpoint", &endpoint)]) == Some(1.0))
            .then_some(())
    })
    .expect("connection to the proxied node");
    proxy.set(
        0,
        0,
        LinkFault {
            latency: Duration::from_millis(150),
            blackhole: false,
        },
    );

    // Watch node 1 directly: first and last time each of the sidecar's values was seen there.
    // Attempts can win only once a's clock watch ends (about a ttl), then come every
    // retryEvery, and each late key lives about a timeout: a poll descheduled that long on a busy
    // machine misses one. So watch until three values were seen, and the last one is gone, so
    // its lifetime is measured whole too.
    let mut seen: HashMap<String, (Instant, Instant)> = HashMap::new();
    let give_up = Instant::now() + TTL * 6;
    loop {
        let now = Instant::now();
        let value = nodes[1].cli(&["GET", KEY]).filter(|v| v.starts_with("a#"));
        if let Some(v) = &value {
            seen.entry(v.clone())
                .and_modify(|e| e.1 = now)
                .or_insert((now, now));
        }
        if (seen.len() >= 3 && value.is_none()) || now >= give_up {
            break;
        }
        assert!(
            !a.leader().is_leader,
            "a late reply was counted as a yes:\n{}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        !seen.is_empty(),
        "the delayed SET never reached node 1; the test proves nothing"
    );
    for (v, (first, last)) in &seen {
        let lived = *last - *first;
        report("late key lived on the slow node for", format!("{lived:?}"));
        // Without the delete it would live a full ttl (3 s); with it, about the timeout.
        assert!(
            lived < TTL / 3,
            "value {v} stayed {lived:?} on the timed-out node"
        );
    }
    let attempts = fault::metric(
        &a,
        "redlock_elector_acquire_attempts_total",
        &[("result", "no_quorum")],
    )
    .unwrap_or(0.0);
    report("attempts without a quorum", attempts);
    assert!(attempts >= 2.0);
}

//! Release through the library, against real Redis servers: it returns at a quorum of
//! confirmations, and the node that has not answered yet still gets its release.
//!
//! One of three nodes is frozen (SIGSTOP) between acquire and release. The release must return
//! long before that node's per-node timeout, with the key gone from the two live nodes, while
//! `settled()` keeps waiting; after SIGCONT the frozen node deletes the key too and `settled()`
//! resolves. A release that waited for every node (the old behaviour) fails the first check.

use testkit::common;

use std::time::{Duration, Instant};

use common::*;
use redlock_elector::metrics::Metrics;
use redlock_elector::redlock::{Acquire, Notice, Redlock};

/// Per-node timeout: far above a loopback round trip, so "returned before it" cannot be luck.
const TIMEOUT: Duration = Duration::from_millis(1500);
/// A release that waited for the frozen node takes at least TIMEOUT; one that returns at the
/// quorum takes a loopback round trip (about a millisecond).
const QUORUM_BOUND: Duration = Duration::from_millis(750);

fn library(nodes: &[Redis]) -> Redlock {
    let urls: Vec<String> = nodes.iter().map(Redis::url).collect();
    let mut args = vec![
        "--lease",
        "release-test",
        "--ttl",
        "20s",
        "--redis-timeout",
        "1500ms",
        // The health check drops a connection whose INFO takes longer than this; kept above the
        // command timeout so only the timeout could end the frozen node's release.
        "--redis-connect-timeout",
        "3s",
        "--identity",
        "t",
        "--kubernetes",
        "false",
        // The servers and the library were just started; neither the restart quarantine nor the
        // watch of the nodes' clocks (ttl + margin) is what this test is about.
        "--unsafe-disable-quarantine",
        "--unsafe-disable-clock-check",
    ];
    for u in &urls {
        args.extend(["--redis", u.as_str()]);
    }
    let cfg = library_config(&args);
    let metrics =
        Metrics::register(&prometheus::Registry::new(), &cfg.lease.name).expect("metrics");
    Redlock::new(&cfg, metrics).expect("redlock")
}

#[test]
fn release_returns_at_quorum_and_the_slow_node_still_releases() {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let redlock = library(&nodes);
    let stop = tokio_util::sync::CancellationToken::new();
    for node in redlock.nodes() {
        rt.spawn(node.clone().maintain(stop.clone()));
    }
    let up = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
        redlock.nodes().iter().all(|n| n.is_up()).then_some(())
    });
    assert!(
        up.is_some(),
        "the library did not connect to all three nodes"
    );

    let lease = match rt.block_on(redlock.acquire("t", false)) {
        Acquire::Acquired(lease) => lease,
        other => panic!("acquire on three free nodes failed: {other:?}"),
    };
    let key = redlock.key().to_string();
    let holds = |n: &Redis| n.cli(&["GET", &key]).as_deref() == Some(lease.value.as_str());
    // acquire returns at a quorum, and the stragglers' commands are dropped with it: one that
    // the connection had not written yet is never sent (the third node gets the key at the first
    // renewal). Under load that happened, so the node to freeze is one that holds the key: its
    // release is the one that must still arrive after it resumes.
    let _ = wait_for(Duration::from_secs(2), Duration::from_millis(5), || {
        nodes.iter().all(holds).then_some(())
    });
    let holders: Vec<usize> = (0..nodes.len()).filter(|&i| holds(&nodes[i])).collect();
    assert!(
        holders.len() >= 2,
        "acquire returned Acquired but only nodes {holders:?} hold the lease"
    );
    let frozen = *holders.last().expect("two holders");
    let live: Vec<&Redis> = (0..nodes.len())
        .filter(|&i| i != frozen)
        .map(|i| &nodes[i])
        .collect();

    nodes[frozen].stop();
    let started = Instant::now();
    rt.block_on(redlock.release(&lease.value, Notice::Followers));
    let took = started.elapsed();
    report(
        "release with one of three nodes frozen",
        format!("{took:?}"),
    );
    assert!(
        took < QUORUM_BOUND,
        "release took {took:?}: it waited for the frozen node (timeout {TIMEOUT:?}) instead of returning at the quorum"
    );
    for n in &live {
        assert_eq!(
            n.cli(&["GET", &key]).as_deref(),
            Some(""),
            "a live node still holds the key after release returned"
        );
    }
    let settled_early = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), redlock.settled())
            .await
            .is_ok()
    });
    assert!(
        !settled_early,
        "settled() resolved while the frozen node's release was still out"
    );

    nodes[frozen].cont();
    let settled = rt.block_on(async {
        tokio::time::timeout(TIMEOUT * 2, redlock.settled())
            .await
            .is_ok()
    });
    assert!(settled, "settled() did not resolve after the node resumed");
    let gone = wait_for(Duration::from_secs(2), Duration::from_millis(10), || {
        (nodes[frozen].cli(&["GET", &key]).as_deref() == Some("")).then_some(())
    });
    assert!(
        gone.is_some(),
        "the frozen node never got its release: {:?}",
        nodes[frozen].cli(&["GET", &key])
    );
}

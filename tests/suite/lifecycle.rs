//! No task of the sidecar outlives `run`: every task is spawned on one tracker, and the
//! shutdown closes the listeners, drops the connections and awaits the tracker.
//!
//! `run` is driven in-process (the entry point `main` calls) on a runtime of its own, against
//! three real `redis-server` processes: it becomes leader, answers the API and the ops port, and
//! is shut down. Then the runtime must have no task alive. Before the tracker, the API and ops
//! servers, the node maintenance and subscription tasks, the connection drivers and the
//! watchdog were spawned and left running.

use testkit::common;

use std::time::{Duration, Instant};

use common::*;
use redlock_elector::run;

/// How long after `run` returned a task may still be counted: the runtime's teardown of tasks
/// that were told to end. The tasks `run` leaves running without its shutdown (checked by hand:
/// with the listeners and connections left open, five outlive it) never end.
const SETTLE: Duration = Duration::from_millis(500);

#[test]
fn no_task_outlives_run() {
    let nodes: Vec<Redis> = (0..3).map(|_| Redis::start()).collect();
    let (api_port, ops_port) = (free_port(), free_port());
    let (api, ops) = (
        format!("127.0.0.1:{api_port}"),
        format!("127.0.0.1:{ops_port}"),
    );
    let urls: Vec<String> = nodes.iter().map(Redis::url).collect();
    let mut args = vec![
        "--lease",
        "lifecycle",
        "--identity",
        "t",
        "--kubernetes",
        "false",
        "--api-listen",
        api.as_str(),
        "--ops-listen",
        ops.as_str(),
        // Fresh servers and a fresh process: neither the restart quarantine nor the clock watch
        // (a ttl) is what this test is about.
        "--unsafe-disable-quarantine",
        "--unsafe-disable-clock-check",
    ];
    for u in &urls {
        args.extend(["--redis", u.as_str()]);
    }
    let config = library_config(&args);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
    // `run` is the future this thread blocks on (not a spawned task: that one would be counted);
    // another thread waits for leadership, uses both ports, and triggers the shutdown.
    let handle = rt.handle().clone();
    let driver = std::thread::spawn(move || {
        let leader = wait_for(Duration::from_secs(10), Duration::from_millis(20), || {
            http("GET", api_port, "/leader")
                .filter(|(status, body)| *status == 200 && body.contains("\"is_leader\":true"))
        });
        let metrics = http("GET", ops_port, "/metrics").map(|(status, _)| status);
        let running = handle.metrics().num_alive_tasks();
        let _ = shutdown.send(());
        (leader.is_some(), metrics, running, Instant::now())
    });
    let result = rt.block_on(run::run(config, async {
        let _ = stopped.await;
    }));
    let returned = Instant::now();
    // A task that was told to end (aborted, or its connection dropped) is counted until the
    // runtime has polled it once more; under load (the suite's other tests) one such was still
    // counted the moment run returned. A task left running never ends.
    let left = wait_for(SETTLE, Duration::from_millis(5), || {
        (rt.metrics().num_alive_tasks() == 0).then_some(0)
    })
    .unwrap_or_else(|| rt.metrics().num_alive_tasks());
    let settled = returned.elapsed();
    let (led, metrics, running, signalled) = driver.join().expect("the driver thread");
    let took = returned.duration_since(signalled);
    assert!(result.is_ok(), "run failed: {result:?}");
    assert!(led, "the in-process sidecar did not become leader");
    assert_eq!(metrics, Some(200), "the ops port did not answer");
    report(
        "tasks alive while leading, and once run returned",
        format!("{running}, {left} (shutdown {took:?}; none left {settled:?} after it returned)"),
    );
    assert!(
        running > 0,
        "the runtime's task count is not what this test reads"
    );
    assert_eq!(
        left, 0,
        "{left} task(s) still alive {SETTLE:?} after run returned"
    );
    // The key is gone: the release was part of it.
    for n in &nodes {
        assert_eq!(
            n.cli(&["EXISTS", "redlock-elector:lifecycle"]).as_deref(),
            Some("0"),
            "a node still holds the lease after run returned"
        );
    }
}

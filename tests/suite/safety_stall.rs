//! Process pauses (SIGSTOP/SIGCONT) of the leader.
//!
//! - A pause longer than the stall margin but shorter than the lease: the lease is still valid
//!   when the process resumes, so only the stall detector makes it step down. It must: a
//!   process that just lost 400 ms cannot trust its view of time. `/healthz` answers 503 from the
//!   first answer after the resume until the loop has run on time for a while.
//! - A pause longer than the lease: another sidecar leads meanwhile, and the paused one's very
//!   first answer after the resume is "not leader" (the deadline is evaluated at answer time).
//!
//! The checker polls both sidecars throughout and must find no overlap.

use testkit::common;
use testkit::fault;

use std::time::{Duration, Instant};

use common::*;
use fault::checker::{Checker, analyze};
use fault::{describe, healthz, metric};

const TTL: Duration = Duration::from_secs(1);

#[test]
fn paused_leader_steps_down_and_reports_unhealthy() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let sidecars = [
        Sidecar::start("a", &refs, &Opts::default()),
        Sidecar::start("b", &refs, &Opts::default()),
    ];
    let both: Vec<&Sidecar> = sidecars.iter().collect();
    let checker = Checker::start(&[sidecars[0].api_port, sidecars[1].api_port]);

    // ---- a pause between the stall margin (renewEvery/2 ≈ 167 ms) and the lease's remaining
    // validity (≥ ttl − renewEvery − drift ≈ 655 ms) ----
    let l = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        sole_leader(&both)
    })
    .expect("a leader");
    let (leader, other) = (&sidecars[l], &sidecars[1 - l]);
    assert_eq!(healthz(leader, Duration::from_secs(1)), Some(200));
    leader.signal("STOP");
    std::thread::sleep(Duration::from_millis(400));
    leader.signal("CONT");
    let resumed = Instant::now();
    assert_eq!(
        healthz(leader, Duration::from_secs(5)),
        Some(503),
        "the first /healthz answer after a 400 ms pause must report the stall"
    );
    let stepped_down = wait_for(TTL, Duration::from_millis(2), || {
        (!leader.leader().is_leader).then(Instant::now)
    })
    .unwrap_or_else(|| panic!("still leader a lease after a stall:\n{}", leader.logs()));
    let other_led = wait_for(TTL * 3, Duration::from_millis(2), || {
        other.leader().is_leader.then(Instant::now)
    })
    .unwrap_or_else(|| panic!("the other sidecar did not take over:\n{}", other.logs()));
    report(
        "short pause: stepped down after resume",
        format!("{:?}", stepped_down - resumed),
    );
    report(
        "short pause: other leads after resume",
        format!("{:?}", other_led - resumed),
    );
    let logs = leader.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("lost leadership") && l.contains("stalled")),
        "it must step down because of the stall, not the deadline:\n{logs}"
    );
    assert!(metric(leader, "redlock_elector_stalls_total", &[]).unwrap_or(0.0) >= 1.0);
    let healthy_again = wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (healthz(leader, Duration::from_secs(1)) == Some(200)).then(Instant::now)
    })
    .expect("/healthz recovers once the loop runs on time again");
    report(
        "short pause: /healthz 503 for",
        format!("{:?}", healthy_again - resumed),
    );

    // ---- a pause longer than the lease ----
    let l = wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        sole_leader(&both)
    })
    .expect("a leader");
    let (leader, other) = (&sidecars[l], &sidecars[1 - l]);
    // Let it recover fully from anything earlier.
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        (healthz(leader, Duration::from_secs(1)) == Some(200)).then_some(())
    })
    .expect("healthy before the pause");
    leader.signal("STOP");
    let other_led = wait_for(TTL * 3, Duration::from_millis(2), || {
        other.leader().is_leader.then_some(())
    });
    assert!(
        other_led.is_some(),
        "no takeover while the leader was paused:\n{}",
        other.logs()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(other.leader().is_leader);
    leader.signal("CONT");
    let first = leader.leader();
    assert!(
        !first.is_leader,
        "first answer after a pause longer than the lease said leader: {first:?}"
    );
    assert_eq!(first.fencing_token, None);
    assert!(other.leader().is_leader, "the other sidecar leads on");
    assert_eq!(
        healthz(leader, Duration::from_secs(5)),
        Some(503),
        "a 2 s pause is a stall"
    );

    let obs = checker.finish();
    let r = analyze(&obs.segments);
    assert!(
        r.overlaps.is_empty() && r.token_violations.is_empty(),
        "{}",
        describe(&r)
    );
    assert!(r.terms >= 3, "{}", describe(&r));
}

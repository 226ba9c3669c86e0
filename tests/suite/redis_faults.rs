//! Redis node failures and process pauses, with real servers and signals.

use testkit::common;

use std::time::{Duration, Instant};

use common::*;

const TTL: Duration = Duration::from_secs(1);

/// Sidecars `a` and `b` on every node, default options.
fn two_sidecars(nodes: &[Redis]) -> (Sidecar, Sidecar) {
    let refs: Vec<&Redis> = nodes.iter().collect();
    let a = Sidecar::start("a", &refs, &Opts::default());
    let b = Sidecar::start("b", &refs, &Opts::default());
    (a, b)
}

/// The index of the one that leads first (within 5 s).
fn first_leader(both: &[&Sidecar; 2]) -> usize {
    wait_for(Duration::from_secs(5), Duration::from_millis(10), || {
        sole_leader(both)
    })
    .expect("a leader")
}

#[test]
fn minority_down_keeps_leader_majority_down_steps_down_by_deadline_and_recovers() {
    let mut nodes = redis_cluster(5, TTL);
    let (a, b) = two_sidecars(&nodes);
    let both = [&a, &b];
    let l = first_leader(&both);
    let leader = both[l];
    let token = leader.leader().fencing_token;
    // The premise below is "the leader holds the key on the 3 nodes left". Right after the
    // first election a node may still hold the other sidecar's key from its failed attempt: its
    // cleanup is best-effort (a release that times out before it was written is dropped, which
    // a loaded machine and the 50 ms timeout make possible). Such a key expires within the ttl
    // and the leader's next renewal then takes the node, so wait for that.
    let key = format!("redlock-elector:{}", Opts::default().lease);
    let mine = format!("{}#", leader.identity);
    let everywhere = wait_for(TTL * 3, Duration::from_millis(10), || {
        nodes
            .iter()
            .all(|n| n.cli(&["GET", &key]).is_some_and(|v| v.starts_with(&mine)))
            .then_some(())
    });
    assert!(
        everywhere.is_some(),
        "the leader never held the key on all five nodes:\n{}",
        leader.logs()
    );

    // Minority (2 of 5) down: the leader keeps leading through several renewals.
    nodes[0].kill();
    nodes[1].kill();
    let follower = both[1 - l];
    std::thread::sleep(Duration::from_millis(300));
    let before = (watches(follower), attempts(follower, "no_quorum"));
    let until = Instant::now() + TTL * 3;
    while Instant::now() < until {
        let v = leader.leader();
        assert!(
            v.is_leader,
            "leader lost the lease with a quorum of 3 nodes up:\n{}",
            leader.logs()
        );
        assert_eq!(v.fencing_token, token);
        std::thread::sleep(Duration::from_millis(20));
    }
    // The follower still sees the holder on a quorum of the nodes that answer: it keeps
    // watching (an idle follower's refresh, issue 25) and names the leader, and never attempts
    // as if nobody held a quorum.
    let after = (watches(follower), attempts(follower, "no_quorum"));
    assert!(
        after.0 >= before.0 + 3.0 * 3.0,
        "the follower's watch rounds on the 3 nodes left (3 rounds at least): {before:?} -> {after:?}"
    );
    assert_eq!(
        follower.leader().leader.as_deref(),
        Some(leader.identity.as_str()),
        "the follower names the leader"
    );
    assert_eq!(
        after.1, before.1,
        "no attempt counted as no_quorum while a leader holds 3 of 5"
    );

    // Majority down (3 of 5): no renewal can succeed; it must stop saying leader by its deadline.
    // The deadline is read once no renewal can move it any more: a renewal already in flight
    // at the kill ends within the per-node timeout (50 ms), and every later one fails.
    nodes[2].kill();
    std::thread::sleep(Duration::from_millis(100));
    let v = leader.leader();
    assert!(
        v.is_leader,
        "stepped down within 100 ms of losing the majority, ttl {TTL:?}"
    );
    let deadline = Instant::now() + Duration::from_millis(v.valid_for_ms);
    // Judged by when each request was *sent*: an answer is computed after its request was sent,
    // so a `true` to a request sent after the deadline was answered after the deadline. (The
    // time an answer arrives says nothing on a loaded machine; `deadline` may be up to 1 ms
    // early, since `valid_for_ms` is rounded down.)
    let give_up = Instant::now() + TTL * 2;
    let mut last_true_sent = None;
    let stepped = loop {
        let sent = Instant::now();
        if !leader.leader().is_leader {
            break sent;
        }
        last_true_sent = Some(sent);
        assert!(
            sent < give_up,
            "still leader 2×ttl after losing the majority"
        );
        std::thread::sleep(Duration::from_millis(2));
    };
    if let Some(sent) = last_true_sent {
        assert!(
            sent <= deadline + Duration::from_millis(1),
            "answered leader to a request sent {:?} after its deadline",
            sent - deadline
        );
    }
    report(
        "majority loss: step-down relative to deadline (ms before)",
        deadline.saturating_duration_since(stepped).as_millis(),
    );
    // With no quorum, nobody leads.
    std::thread::sleep(TTL);
    assert!(!a.leader().is_leader && !b.leader().is_leader);

    // Bring them back (empty): after their quarantine (ttl + 1s) a leader is elected again.
    for n in &mut nodes[..3] {
        n.start_again();
    }
    let t0 = Instant::now();
    let back = wait_for(Duration::from_secs(10), Duration::from_millis(10), || {
        sole_leader(&both)
    });
    assert!(
        back.is_some(),
        "a leader again after the nodes returned:\n{}\n{}",
        a.logs(),
        b.logs()
    );
    report(
        "re-election after majority returned (includes ttl+1s quarantine), ms",
        t0.elapsed().as_millis(),
    );
    let new_token = both[back.unwrap()].leader().fencing_token.unwrap();
    assert!(
        new_token > token.unwrap(),
        "fencing token increased: {new_token} > {token:?}"
    );
}

#[test]
fn sigstop_longer_than_ttl_never_answers_leader_after_resume() {
    let nodes = redis_cluster(3, TTL);
    let (a, b) = two_sidecars(&nodes);
    let both = [&a, &b];
    let l = first_leader(&both);
    let (paused, other) = (both[l], both[1 - l]);
    paused.signal("STOP");
    let took_over = wait_for(TTL * 3, Duration::from_millis(5), || {
        other.leader().is_leader.then_some(())
    });
    assert!(
        took_over.is_some(),
        "the other sidecar leads while the leader is stopped"
    );
    std::thread::sleep(TTL / 2);
    paused.signal("CONT");
    // Its very first answer after resuming must not claim leadership.
    let first = wait_for(Duration::from_secs(2), Duration::from_millis(1), || {
        paused.try_leader()
    })
    .expect("answers after SIGCONT");
    assert!(
        !first.is_leader,
        "paused leader claimed leadership after resuming: {first:?}"
    );
    assert!(other.leader().is_leader);
    // And for a while after, never two leaders.
    let until = Instant::now() + TTL * 2;
    while Instant::now() < until {
        let n = [&a, &b].iter().filter(|s| s.leader().is_leader).count();
        assert!(n <= 1, "two leaders after resume");
    }
}

/// Watch scripts that answered, summed over the nodes.
fn watches(s: &Sidecar) -> f64 {
    metric_sum_where(s, |l| {
        l.starts_with("redlock_elector_redis_command_duration_seconds_count{")
            && l.contains("command=\"watch\"")
    })
}

fn attempts(s: &Sidecar, result: &str) -> u64 {
    let (_, text) = http("GET", s.ops_port, "/metrics").unwrap();
    let prefix =
        format!("redlock_elector_acquire_attempts_total{{lease=\"test\",result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix} in /metrics"))
        .trim()
        .parse()
        .unwrap()
}

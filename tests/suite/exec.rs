//! `redlock-elector run -- CMD`: the command runs only while its sidecar leads, and two commands
//! of one lease never run at once. The commands are `tests/exec/lease-child.c`, which record
//! their own start, a beat every millisecond and their stop; the checker reads those records, not
//! the sidecars' answers.
//!
//! Through a graceful stop (SIGTERM to `run`), SIGKILL and SIGSTOP of the sidecar, a command
//! that ignores SIGTERM, a command that exits by itself, and Redis faults (a paused majority, a
//! restarted node). With `--unsafe-disable-run-deadline` (the command stopped only when the
//! sidecar sees its term end, and released without waiting for it), a paused sidecar leaves its
//! command running while the next one starts, and the checker finds the overlap.

use std::path::Path;
use std::time::Duration;

use testkit::common::*;

const TTL: Duration = Duration::from_secs(1);

/// `run -- lease-child FILE ID MODE` with these options before `run`.
fn run_opts(file: &Path, id: &str, mode: &str, before: &[&str]) -> Opts {
    let mut extra: Vec<String> = before.iter().map(|s| s.to_string()).collect();
    extra.extend(["run".into(), "--".into()]);
    extra.push(lease_child().to_string_lossy().into_owned());
    extra.extend([file.to_string_lossy().into_owned(), id.into(), mode.into()]);
    Opts {
        extra,
        ..Opts::default()
    }
}

/// Wait until the file shows `n` children started and the newest one alive (a beat or its
/// start within the last 50 ms of the file's records); its identity.
fn wait_children(file: &Path, n: usize, timeout: Duration) -> String {
    wait_for(timeout, Duration::from_millis(5), || {
        let all = lives(file);
        (all.len() >= n).then(|| all[all.len() - 1].id.clone())
    })
    .unwrap_or_else(|| {
        panic!(
            "fewer than {n} commands started within {timeout:?}:\n{:#?}",
            lives(file)
        )
    })
}

fn no_overlap(file: &Path, what: &str) {
    let all = lives(file);
    let found = overlaps(&all);
    assert!(
        found.is_empty(),
        "{what}: two commands of one lease ran at once:\n{found:#?}\nall: {all:#?}"
    );
    let gaps = gaps(&all);
    if let Some(min) = gaps.iter().min() {
        report(
            &format!("{what}: shortest gap from one command's last record to the next's start"),
            format!("{min:?} over {} handovers", gaps.len()),
        );
    }
}

/// Two `run` processes ("a", "b") on three fresh nodes, their commands in `mode`; the nodes,
/// the directory and the file of the commands' records, and the processes.
fn two_runs(
    mode: &str,
    before: &[&str],
) -> (
    Vec<Redis>,
    tempfile::TempDir,
    std::path::PathBuf,
    Vec<Sidecar>,
) {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let dir = tempdir();
    let file = dir.path().join("lives");
    let runs = ["a", "b"]
        .iter()
        .map(|id| Sidecar::start(id, &refs, &run_opts(&file, id, mode, before)))
        .collect();
    (nodes, dir, file, runs)
}

fn position(runs: &[Sidecar], id: &str) -> usize {
    runs.iter()
        .position(|s| s.identity == id)
        .unwrap_or_else(|| panic!("no run {id}"))
}

#[test]
fn commands_never_overlap_through_signals_and_redis_faults() {
    let mut nodes = redis_cluster(3, TTL);
    let dir = tempdir();
    let file = dir.path().join("lives");
    let refs: Vec<&Redis> = nodes.iter().collect();
    let start = |id: &str, refs: &[&Redis]| {
        Sidecar::start(
            id,
            refs,
            &run_opts(&file, id, "term", &["--on-child-exit", "contend"]),
        )
    };
    let mut runs: Vec<Sidecar> = ["r0", "r1", "r2"]
        .iter()
        .map(|id| start(id, &refs))
        .collect();
    let mut n = 1;
    let mut leader = wait_children(&file, n, Duration::from_secs(15));

    // A graceful stop: SIGTERM to `run` stops the command, then releases; `run` exits with the
    // command's status (0: it stops cleanly on SIGTERM).
    let i = position(&runs, &leader);
    let (code, took) = runs[i].terminate();
    assert_eq!(code, Some(0), "run exits with its command's status");
    report("SIGTERM to run: exit took", format!("{took:?}"));
    runs[i] = start("r3", &refs);
    n += 1;
    leader = wait_children(&file, n, Duration::from_secs(5));

    // SIGKILL of the sidecar: its guard stops the command.
    let i = position(&runs, &leader);
    runs[i].kill();
    runs[i] = start("r4", &refs);
    n += 1;
    leader = wait_children(&file, n, Duration::from_secs(5));

    // SIGSTOP of the sidecar for two ttls: its guard stops the command before the deadline.
    let i = position(&runs, &leader);
    runs[i].signal("STOP");
    n += 1;
    let next = wait_children(&file, n, Duration::from_secs(5));
    assert_ne!(
        next, leader,
        "a paused sidecar's command cannot be the newest"
    );
    std::thread::sleep(TTL);
    runs[i].signal("CONT");

    // A paused majority of nodes: no renewal, the command stops by the deadline; then the
    // nodes resume and some sidecar leads again.
    nodes[0].stop();
    nodes[1].stop();
    std::thread::sleep(TTL * 2);
    nodes[0].cont();
    nodes[1].cont();
    n += 1;
    wait_children(&file, n, Duration::from_secs(10));

    // A node restarts empty (quarantined): the lease holds on the other two or passes on;
    // either way no overlap.
    nodes[2].restart();
    std::thread::sleep(TTL * 3);

    for r in &mut runs {
        r.terminate();
    }
    no_overlap(&file, "signals and redis faults");
    let all = lives(&file);
    assert!(all.len() >= n, "every fault handed over: {all:#?}");
    // Every command of the run was stopped before the next one started, and none survives.
    std::thread::sleep(Duration::from_millis(50));
    let after = lives(&file);
    assert_eq!(after, all, "a command still ran after every run exited");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_before_the_lease_passes() {
    let (_nodes, _dir, file, mut runs) = two_runs("ignore", &[]);
    let leader = wait_children(&file, 1, Duration::from_secs(15));
    let i = position(&runs, &leader);
    let (code, took) = runs[i].terminate();
    assert_eq!(
        code,
        Some(128 + 9),
        "the command was killed (SIGKILL): run exits 137"
    );
    // The default kill grace is ttl/5.
    assert!(
        took >= TTL / 5,
        "SIGKILL came before the kill grace: {took:?}"
    );
    report(
        "command ignoring SIGTERM: run exited after",
        format!("{took:?}"),
    );
    wait_children(&file, 2, Duration::from_secs(5));
    for r in &mut runs {
        r.kill();
    }
    no_overlap(&file, "a command ignoring SIGTERM");
}

#[test]
fn a_command_that_exits_by_itself_ends_the_term_at_once() {
    let (_nodes, _dir, file, mut runs) = two_runs("exit:300", &[]);
    let first = wait_children(&file, 1, Duration::from_secs(15));
    let i = position(&runs, &first);
    // `run.onChildExit: exit` (the default): `run` exits with the command's status.
    assert_eq!(runs[i].wait_exit(Duration::from_secs(5)), Some(7));
    let second = wait_children(&file, 2, Duration::from_secs(5));
    assert_ne!(first, second);
    let all = lives(&file);
    let handover = Duration::from_nanos(all[1].start.saturating_sub(all[0].last));
    report(
        "command exited by itself: next command started after",
        format!("{handover:?}"),
    );
    // Far less than a ttl: the release named the other sidecar.
    assert!(
        handover < TTL / 2,
        "the term did not end at the command's exit: {handover:?}\n{}",
        runs[i].logs()
    );
    let j = 1 - i;
    assert_eq!(runs[j].wait_exit(Duration::from_secs(5)), Some(7));
    no_overlap(&file, "a command exiting by itself");
}

/// A leader's sidecar paused for two ttls while its command runs: the overlaps the checker
/// finds in the commands' records.
fn paused_sidecar(before: &[&str]) -> (Vec<Overlap>, Vec<Life>) {
    let (_nodes, _dir, file, runs) = two_runs("term", before);
    let leader = wait_children(&file, 1, Duration::from_secs(15));
    let i = position(&runs, &leader);
    runs[i].signal("STOP");
    wait_children(&file, 2, Duration::from_secs(5));
    std::thread::sleep(TTL);
    runs[i].signal("CONT");
    std::thread::sleep(TTL);
    drop(runs);
    let all = lives(&file);
    (overlaps(&all), all)
}

#[test]
fn without_the_run_deadline_a_paused_sidecar_leaves_its_command_running() {
    let (found, all) = paused_sidecar(&["--unsafe-disable-run-deadline"]);
    assert!(
        !found.is_empty(),
        "with --unsafe-disable-run-deadline the checker must find two commands at once: {all:#?}"
    );
    report(
        "--unsafe-disable-run-deadline, sidecar paused 2 ttls: commands overlapped for",
        format!("{:?}", found[0].overlap),
    );
    let (found, all) = paused_sidecar(&[]);
    assert!(
        found.is_empty(),
        "with the deadline on, no overlap: {found:#?}\n{all:#?}"
    );
}

/// The first sidecar of `runs` to lead (polled every 2 ms): its index and its term's token.
fn first_leader(runs: &[Sidecar], timeout: Duration) -> (usize, u64) {
    wait_for(timeout, Duration::from_millis(2), || {
        runs.iter().enumerate().find_map(|(i, s)| {
            let v = s.try_leader()?;
            v.is_leader.then_some((i, v.fencing_token?))
        })
    })
    .unwrap_or_else(|| panic!("nobody led within {timeout:?}"))
}

/// The pid of `parent`'s guard process, once it runs.
fn guard_of(parent: u32, timeout: Duration) -> u32 {
    let children = || -> Vec<u32> {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            return Vec::new();
        };
        tasks
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
            .flat_map(|s| {
                s.split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect::<Vec<u32>>()
            })
            .collect()
    };
    wait_for(timeout, Duration::from_millis(1), || {
        children().into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"__guard"))
        })
    })
    .unwrap_or_else(|| panic!("no guard process under {parent} within {timeout:?}"))
}

/// A term that ends as it starts: each `run` waits 1 s between reading a new term and starting
/// its command, and 1 s again once it started (`--unsafe-test-run-start-delay`, a runner
/// preempted twice), and the first leader is stepped down inside the first wait. Its release
/// names the other sidecar, whose command starts; the ended term's command must never start
/// (before the fix it did, beside the successor's; the second wait lets it live long enough to
/// leave its records).
#[test]
fn a_term_that_ends_as_it_starts_starts_no_command() {
    let ttl = Duration::from_secs(3);
    let nodes = redis_cluster(3, ttl);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let dir = tempdir();
    let file = dir.path().join("lives");
    let delay = ["--unsafe-test-run-start-delay", "1000"];
    let mut runs: Vec<Sidecar> = ["a", "b"]
        .iter()
        .map(|id| {
            let opts = Opts {
                ttl: "3s",
                ..run_opts(&file, id, "ignore", &delay)
            };
            Sidecar::start(id, &refs, &opts)
        })
        .collect();
    let (i, token) = first_leader(&runs, Duration::from_secs(15));
    // Step down inside the runner's first wait, not before it read the term: stepped down 1.2 ms
    // into its term (the poll saw it at once), a runner woken late under 3 busy loops found no
    // term at all, started nothing and had nothing to report (1 suite run in 5).
    std::thread::sleep(Duration::from_millis(200));
    let (status, _) = http("POST", runs[i].api_port, "/leader/step-down").expect("step-down");
    assert_eq!(status, 200, "step-down refused:\n{}", runs[i].logs());
    let successor = runs[1 - i].identity.clone();
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        lives(&file).iter().any(|l| l.id == successor).then_some(())
    })
    .unwrap_or_else(|| panic!("the successor's command never started: {:#?}", lives(&file)));
    // Past the start delay and the kill grace (ttl/5) of a command started late.
    std::thread::sleep(Duration::from_millis(1500));
    for r in &mut runs {
        r.kill();
    }
    let all = lives(&file);
    let found = overlaps(&all);
    let late: Vec<&Life> = all.iter().filter(|l| l.token == Some(token)).collect();
    assert!(
        late.is_empty() && found.is_empty(),
        "the command of term {token}, stepped down as it began, started (overlapping the next by {:?}): {late:#?}\noverlaps: {found:#?}\nall: {all:#?}",
        found.first().map(|o| o.overlap)
    );
    assert!(
        runs[i]
            .logs()
            .contains("term ended before its command started"),
        "the runner did not report the ended term:\n{}",
        runs[i].logs()
    );
}

/// A guard that starts late: the first leader's guard waits 3 s (three ttls) before starting
/// the command, and 3 s again before it first acts on the deadline
/// (`--unsafe-test-guard-spawn-delay`, a guard starved throughout), and the sidecar is paused
/// meanwhile, so its lease expires and the other sidecar leads and runs its command. The late
/// guard must not start the command of the expired term (before the fix it did, after the
/// successor's; the second wait lets it live long enough to leave its records).
#[test]
fn a_guard_that_starts_past_the_deadline_starts_no_command() {
    let nodes = redis_cluster(3, TTL);
    let refs: Vec<&Redis> = nodes.iter().collect();
    let dir = tempdir();
    let file = dir.path().join("lives");
    let late = ["--unsafe-test-guard-spawn-delay", "3000"];
    let mut a = Sidecar::start("a", &refs, &run_opts(&file, "a", "ignore", &late));
    let (_, token) = first_leader(std::slice::from_ref(&a), Duration::from_secs(15));
    let guard = guard_of(a.pid(), Duration::from_secs(2));
    a.signal("STOP");
    let mut b = Sidecar::start("b", &refs, &run_opts(&file, "b", "ignore", &[]));
    wait_children(&file, 1, Duration::from_secs(10));
    // The late guard decides at 3 s; it is gone by then (before the fix: after its command).
    wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
        (!Path::new(&format!("/proc/{guard}")).exists()
            || std::fs::read_to_string(format!("/proc/{guard}/stat"))
                .is_ok_and(|s| s.contains(") Z ")))
        .then_some(())
    })
    .unwrap_or_else(|| panic!("the late guard {guard} still runs"));
    std::thread::sleep(Duration::from_millis(100));
    a.signal("CONT");
    std::thread::sleep(Duration::from_millis(300));
    let logs = a.logs();
    a.kill();
    b.kill();
    let all = lives(&file);
    let found = overlaps(&all);
    let late: Vec<&Life> = all.iter().filter(|l| l.token == Some(token)).collect();
    assert!(
        late.is_empty() && found.is_empty(),
        "the late guard started the command of term {token} after the lease passed on (overlapping the next by {:?}): {late:#?}\noverlaps: {found:#?}\nall: {all:#?}",
        found.first().map(|o| o.overlap)
    );
    assert!(
        logs.contains("command not started"),
        "the runner did not report the command as not started:\n{logs}"
    );
}

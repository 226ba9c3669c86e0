//! The guard: a small process between `redlock-elector run` and the command it runs, which
//! kills the command before the term's deadline whatever happens to the sidecar.
//!
//! The sidecar re-executes its own binary as `redlock-elector __guard GRACE_MS DEADLINE_NS --
//! CMD ARGS…` for each term it leads. The guard starts the command in a process group of its own
//! and reads the sidecar's orders on stdin, one per line:
//! - `D <ns>`: the term's deadline moved (CLOCK_MONOTONIC, ns);
//! - `T <sig>`: stop: send `sig` now, SIGKILL when the kill grace is over or at the deadline;
//! - `S <sig>`: forward `sig` (SIGHUP) and carry on.
//!
//! On its own it sends SIGTERM at `deadline − grace` and SIGKILL just before the deadline, so a
//! sidecar that is stopped (SIGSTOP), starved or killed cannot leave the command running past
//! the term: a successor's command can start only after the lease's keys expire, later still.
//! End of input (the sidecar died) is a stop with SIGTERM. The command gets SIGKILL from the
//! kernel if the guard itself dies (`PR_SET_PDEATHSIG`). When the command exits, whatever it
//! left in its process group is killed, and the guard exits with the command's status (128 +
//! signal if a signal ended it).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};

/// SIGKILL goes out this long before the deadline: the kill and the conversion between the two
/// processes' views of the monotonic clock (a few µs) fit well within it.
pub const KILL_LEAD: Duration = Duration::from_millis(2);

/// The subcommand `main` recognises before parsing the command line.
pub const SUBCOMMAND: &str = "__guard";

/// The deadline that never comes (`--unsafe-disable-run-deadline`).
pub const NEVER: u64 = u64::MAX;

/// The exit status of a guard that could not start its command (as a shell's "not found").
pub const CANNOT_START: u8 = 127;

/// The byte a guard writes back on its stdin (a socket) when it did not start the command
/// because the term's stop time (deadline less the grace) had passed: `run` then knows that the
/// command did not exit by itself.
pub const LATE: u8 = b'L';

/// The error the command's pre-exec check fails with when the stop time has passed; `execve`
/// never fails with it.
const LATE_ERRNO: i32 = libc::ETIME;

/// The monotonic clock both processes read (std's and tokio's `Instant` use it on Linux), in ns.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` as monotonic ns, for the guard's command line and orders. Rounded down: the
/// guard's deadline is never later than the sidecar's.
pub fn to_ns(at: Instant) -> u64 {
    let now = Instant::now();
    let base = monotonic_ns();
    match at.checked_duration_since(now) {
        Some(ahead) => base + ahead.as_nanos() as u64,
        None => base.saturating_sub(now.duration_since(at).as_nanos() as u64),
    }
    // The two readings of the clock are µs apart; the sidecar sends a deadline already short of
    // the term's by `KILL_LEAD`.
}

/// Monotonic ns as an `Instant` of this process.
fn from_ns(ns: u64) -> Instant {
    let now = Instant::now();
    let base = monotonic_ns();
    if ns >= base {
        // [`NEVER`]: a year on is never for a term.
        let ahead = Duration::from_nanos(ns - base).min(Duration::from_secs(365 * 24 * 3600));
        now + ahead
    } else {
        now.checked_sub(Duration::from_nanos(base - ns))
            .unwrap_or(now)
    }
}

/// The guard's arguments.
struct Args {
    grace: Duration,
    deadline: Instant,
    /// The same deadline as monotonic ns, for the check before the command's exec.
    deadline_ns: u64,
    /// Tests only (`--unsafe-test-guard-spawn-delay`): a wait before starting the command, and
    /// another before acting on the deadline once it started (a guard starved throughout).
    delay: Option<Duration>,
    command: Vec<OsString>,
}

/// `GRACE_MS DEADLINE_NS [DELAY_MS] -- CMD ARGS…`
fn parse(args: &[OsString]) -> Option<Args> {
    let num = |i: usize| args.get(i)?.to_str()?.parse::<u64>().ok();
    let grace = Duration::from_millis(num(0)?);
    let deadline_ns = num(1)?;
    let deadline = from_ns(deadline_ns);
    let (delay, rest) = match args.get(2)?.to_str()? {
        "--" => (None, 3),
        _ => (Some(Duration::from_millis(num(2)?)), 4),
    };
    if args.get(rest - 1)?.to_str()? != "--" || args.len() <= rest {
        return None;
    }
    Some(Args {
        grace,
        deadline,
        deadline_ns,
        delay,
        command: args[rest..].to_vec(),
    })
}

/// Run the guard (`args` after the subcommand); returns its exit status.
pub fn main(args: &[OsString]) -> u8 {
    let Some(args) = parse(args) else {
        eprintln!("redlock-elector {SUBCOMMAND}: internal use only (redlock-elector run -- CMD)");
        return 2;
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("redlock-elector {SUBCOMMAND}: cannot start the runtime: {e}");
            return CANNOT_START;
        }
    };
    let code = rt.block_on(async {
        // SIGINT, SIGTERM and SIGHUP reach the command through the sidecar, which forwards
        // them: a terminal's Ctrl-C must not kill the guard (and with it, abruptly, the
        // command). Handled and never read, they are ignored; unlike SIG_IGN, a handler is not
        // inherited across exec, so the command gets the default dispositions.
        let mut held = Vec::new();
        for kind in [
            SignalKind::interrupt(),
            SignalKind::terminate(),
            SignalKind::hangup(),
        ] {
            match signal(kind) {
                Ok(s) => held.push(s),
                Err(e) => {
                    eprintln!("redlock-elector {SUBCOMMAND}: cannot handle signals: {e}");
                    return CANNOT_START;
                }
            }
        }
        guard(args).await
    });
    // The read of stdin runs on a blocking thread that a normal shutdown would wait for.
    rt.shutdown_background();
    code
}

/// What the guard does next on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// SIGTERM at this instant (`deadline − grace`).
    Term(Instant),
    /// SIGKILL at this instant.
    Kill(Instant),
    /// Nothing: SIGKILL is sent, the command is dying.
    Wait,
}

/// The schedule: SIGTERM at `deadline − grace` until a stop began; SIGKILL at the earlier of
/// the stop's start + grace and the deadline (less [`KILL_LEAD`]).
fn next(deadline: Instant, grace: Duration, stop_began: Option<Instant>, killed: bool) -> Next {
    let kill_by = deadline.checked_sub(KILL_LEAD).unwrap_or(deadline);
    match (killed, stop_began) {
        (true, _) => Next::Wait,
        (false, Some(at)) => Next::Kill((at + grace).min(kill_by)),
        (false, None) => Next::Term(deadline.checked_sub(grace).unwrap_or(deadline).min(kill_by)),
    }
}

async fn guard(args: Args) -> u8 {
    if let Some(delay) = args.delay {
        tokio::time::sleep(delay).await;
    }
    let mut command = std::process::Command::new(&args.command[0]);
    command
        .args(&args.command[1..])
        .stdin(Stdio::null())
        .process_group(0);
    let guard_pid = std::process::id() as libc::pid_t;
    let stop_ns = args
        .deadline_ns
        .saturating_sub(args.grace.as_nanos() as u64);
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (prctl, getppid, _exit, clock_gettime); the error it may return is built without
    // allocating.
    unsafe {
        command.pre_exec(move || {
            // The kernel kills the command if the guard dies (the signal follows the thread that
            // forked: the guard's main thread, which lives as long as the guard).
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The guard died before the signal was armed: nothing would kill the command.
            if libc::getppid() != guard_pid {
                libc::_exit(CANNOT_START as i32);
            }
            // The last moment before the exec: a guard (or sidecar) starved or stopped since
            // `run` checked the term may come when a successor already leads.
            if monotonic_ns() >= stop_ns {
                return Err(std::io::Error::from_raw_os_error(LATE_ERRNO));
            }
            Ok(())
        });
    }
    let mut child = match tokio::process::Command::from(command).spawn() {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(LATE_ERRNO) => {
            eprintln!(
                "redlock-elector run: not starting {}: the term's stop time has passed",
                args.command[0].to_string_lossy()
            );
            // SAFETY: a one-byte write from a live buffer to fd 0; an error (fd 0 not the
            // sidecar's socket) leaves only the exit status.
            unsafe { libc::write(0, [LATE].as_ptr().cast(), 1) };
            return CANNOT_START;
        }
        Err(e) => {
            eprintln!(
                "redlock-elector run: cannot start {}: {e}",
                args.command[0].to_string_lossy()
            );
            return CANNOT_START;
        }
    };
    // A guard starved again once the command started: it acts on the deadline only now.
    if let Some(delay) = args.delay {
        tokio::time::sleep(delay).await;
    }
    let pgid = child.id().map(|p| p as libc::pid_t).unwrap_or(0);
    let signal_group = |sig: libc::c_int| {
        if pgid > 0 {
            // SAFETY: kill with a negative pid signals the command's process group; the group
            // id stays the command's while the guard has not reaped it.
            unsafe { libc::kill(-pgid, sig) };
        }
    };
    let mut deadline = args.deadline;
    let mut stop_began: Option<Instant> = None;
    let mut killed = false;
    let mut orders = BufReader::new(tokio::io::stdin()).lines();
    let mut orders_open = true;
    loop {
        let at = match next(deadline, args.grace, stop_began, killed) {
            Next::Term(at) | Next::Kill(at) => Some(at),
            Next::Wait => None,
        };
        tokio::select! {
            biased;
            status = child.wait() => {
                // Whatever the command left in its group goes with it.
                signal_group(libc::SIGKILL);
                return code(status.ok());
            }
            _ = async { sleep_until(at.unwrap_or_else(Instant::now)).await }, if at.is_some() => {
                match next(deadline, args.grace, stop_began, killed) {
                    Next::Term(_) => {
                        signal_group(libc::SIGTERM);
                        stop_began = Some(Instant::now());
                    }
                    Next::Kill(_) => {
                        signal_group(libc::SIGKILL);
                        killed = true;
                    }
                    Next::Wait => {}
                }
            }
            line = orders.next_line(), if orders_open => match line {
                Ok(Some(line)) => match order(&line) {
                    Some(Order::Deadline(ns)) => deadline = from_ns(ns),
                    Some(Order::Stop(sig)) => {
                        signal_group(sig);
                        stop_began.get_or_insert_with(Instant::now);
                    }
                    Some(Order::Signal(sig)) => signal_group(sig),
                    None => eprintln!("redlock-elector {SUBCOMMAND}: ignoring order {line:?}"),
                },
                // The sidecar is gone: stop now.
                Ok(None) | Err(_) => {
                    orders_open = false;
                    if stop_began.is_none() {
                        signal_group(libc::SIGTERM);
                        stop_began = Some(Instant::now());
                    }
                }
            },
        }
    }
}

/// An order from the sidecar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    Deadline(u64),
    Stop(libc::c_int),
    Signal(libc::c_int),
}

fn order(line: &str) -> Option<Order> {
    let (kind, arg) = line.trim().split_once(' ')?;
    match kind {
        "D" => arg.parse().ok().map(Order::Deadline),
        "T" => arg.parse().ok().map(Order::Stop),
        "S" => arg.parse().ok().map(Order::Signal),
        _ => None,
    }
}

/// A status as a shell reports it: the exit code, or 128 + the signal that ended the process.
pub fn code(status: Option<ExitStatus>) -> u8 {
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => c as u8,
            (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
            (None, None) => 1,
        },
        None => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_terms_at_deadline_less_grace_and_kills_before_the_deadline() {
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_secs(10);
        let grace = Duration::from_secs(2);
        assert_eq!(
            next(deadline, grace, None, false),
            Next::Term(t0 + Duration::from_secs(8))
        );
        // A stop at 1 s: SIGKILL at 3 s.
        let began = t0 + Duration::from_secs(1);
        assert_eq!(
            next(deadline, grace, Some(began), false),
            Next::Kill(t0 + Duration::from_secs(3))
        );
        // A stop at 9 s: SIGKILL before the deadline, not at 11 s.
        let began = t0 + Duration::from_secs(9);
        assert_eq!(
            next(deadline, grace, Some(began), false),
            Next::Kill(deadline - KILL_LEAD)
        );
        assert_eq!(next(deadline, grace, Some(began), true), Next::Wait);
        // A grace longer than the time left: SIGTERM at once (an instant already past).
        let short = t0 + Duration::from_millis(100);
        assert_eq!(next(short, grace, None, false), Next::Term(short - grace));
    }

    #[test]
    fn orders_parse_and_junk_does_not() {
        assert_eq!(order("D 123\n"), Some(Order::Deadline(123)));
        assert_eq!(order("T 15"), Some(Order::Stop(15)));
        assert_eq!(order("S 1"), Some(Order::Signal(1)));
        assert_eq!(order("X 1"), None);
        assert_eq!(order("D"), None);
        assert_eq!(order("D x"), None);
    }

    #[test]
    fn monotonic_ns_round_trips_within_a_millisecond() {
        let at = Instant::now() + Duration::from_secs(3);
        let back = from_ns(to_ns(at));
        let diff = if back > at { back - at } else { at - back };
        assert!(diff < Duration::from_millis(1), "{diff:?}");
    }

    #[test]
    fn codes_follow_the_shell() {
        assert_eq!(code(Some(ExitStatus::from_raw(3 << 8))), 3);
        assert_eq!(code(Some(ExitStatus::from_raw(libc::SIGKILL))), 137);
        assert_eq!(code(None), 1);
    }
}

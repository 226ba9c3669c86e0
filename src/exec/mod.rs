//! `redlock-elector run -- CMD ARGS…`: run a command while this sidecar leads.
//!
//! The [`Runner`] watches leadership. When a term starts, it starts the command through a
//! [`guard`] process, with the term in its environment; it tells the guard every new deadline;
//! when the term ends, it tells the guard to stop the command (SIGTERM, SIGKILL after
//! `run.killGrace`, and never later than the deadline). The elector does not release a term
//! while the command lives ([`crate::elector::Elector::set_gate`]): the lease passes on only
//! once it is dead, or expires by itself.
//!
//! The command ending while this sidecar still leads ends the term at once (a release naming a
//! successor, reason `child-exited`); then `run` exits with the command's status
//! (`run.onChildExit: exit`, the default) or contends again after a ttl (`contend`). SIGTERM
//! and SIGINT are passed to the command, and `run` exits with its status once it has stopped
//! and the lease is released; SIGHUP is passed on only.

#[allow(unsafe_code)]
pub mod guard;

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::process::Child;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::elector::{StepDownReason, StepDownRequest};
use crate::leadership::{Leadership, Term};
use crate::{Error, Result};

/// What `run.onChildExit` asks for when the command exits by itself while leading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OnChildExit {
    /// Release, name a successor, and exit with the command's status (the default: as `consul
    /// lock` does, and a supervisor (the kubelet, systemd) restarts `run` with its back-off).
    Exit,
    /// Release, name a successor, and contend again after a ttl; the command starts again when
    /// this sidecar next leads.
    Contend,
}

impl OnChildExit {
    /// The accepted values of `run.onChildExit`.
    pub const NAMES: [&'static str; 2] = ["exit", "contend"];

    /// The setting's value.
    pub fn as_str(self) -> &'static str {
        match self {
            OnChildExit::Exit => "exit",
            OnChildExit::Contend => "contend",
        }
    }
}

/// What to run and how.
#[derive(Clone, Debug)]
pub struct Spec {
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// From SIGTERM to SIGKILL; the stop of a term starts this long before its deadline.
    pub kill_grace: Duration,
    /// After the command exits by itself.
    pub on_exit: OnChildExit,
    /// The lease, for the command's environment.
    pub lease: String,
    /// This sidecar's identity, for the command's environment.
    pub identity: String,
    /// The guard stops the command by the term's deadline, and the elector releases no term
    /// while it lives; off only with `--unsafe-disable-run-deadline` (tests).
    pub deadline: bool,
    /// Tests only (`--unsafe-test-run-start-delay`): a wait between reading a new term and
    /// starting its command, and another once it started (a runner preempted twice).
    pub start_delay: Option<Duration>,
    /// Tests only (`--unsafe-test-guard-spawn-delay`): the guard's wait before it starts the
    /// command.
    pub guard_delay: Option<Duration>,
}

/// The command's environment variables describing the term.
pub mod env {
    /// The lease name.
    pub const LEASE: &str = "REDLOCK_ELECTOR_LEASE";
    /// This sidecar's identity.
    pub const IDENTITY: &str = "REDLOCK_ELECTOR_IDENTITY";
    /// The term's fencing token.
    pub const FENCING_TOKEN: &str = "REDLOCK_ELECTOR_FENCING_TOKEN";
    /// The term's validity deadline when the command started, RFC 3339 UTC with ms (renewals
    /// move it on: `GET /leader` has the current one).
    pub const DEADLINE: &str = "REDLOCK_ELECTOR_DEADLINE";
    /// The same deadline, in ms since the Unix epoch.
    pub const DEADLINE_UNIX_MS: &str = "REDLOCK_ELECTOR_DEADLINE_UNIX_MS";
}

/// The command running under a term, through its guard.
struct Running {
    /// The guard process.
    guard: Child,
    /// Its stdin: our orders go out on it, its report ([`guard::LATE`]) comes back.
    orders: UnixStream,
    /// The term it runs under.
    token: u64,
    /// The deadline the guard holds.
    deadline: Instant,
    /// A stop was ordered (the term ended, or `run` is stopping).
    stopping: bool,
}

impl Running {
    async fn order(&mut self, line: String) {
        // A guard that is gone reports its exit through `wait`.
        let _ = self.orders.write_all(line.as_bytes()).await;
    }

    /// A renewal moved the term's deadline: tell the guard (unless stopping).
    async fn extend(&mut self, term: &Term, deadline_on: bool) {
        if term.deadline != self.deadline && !self.stopping {
            self.deadline = term.deadline;
            let ns = guard_deadline(term, deadline_on);
            self.order(format!("D {ns}\n")).await;
        }
    }

    async fn stop(&mut self, sig: libc::c_int) {
        if !self.stopping {
            self.stopping = true;
            self.order(format!("T {sig}\n")).await;
        }
    }

    /// Whether the guard, now exited, reported that it did not start the command.
    async fn not_started(&mut self) -> bool {
        let mut byte = [0u8; 1];
        // The guard is gone, so the read ends at once (its report, or end of input); the bound
        // only guards against an inherited copy of its end.
        let read =
            tokio::time::timeout(Duration::from_millis(100), self.orders.read(&mut byte)).await;
        matches!(read, Ok(Ok(1))) && byte[0] == guard::LATE
    }
}

/// What came of starting the command for a term.
enum Start {
    /// The guard runs.
    Running(Box<Running>),
    /// The term ended before the gate was set: nothing started, nothing to end.
    Ended,
    /// The guard could not be started.
    Failed,
}

/// The deadline the guard is given: short of the term's by [`guard::KILL_LEAD`] already, so
/// that no conversion between the processes' clocks can put it later.
fn guard_deadline(term: &Term, on: bool) -> u64 {
    if !on {
        return guard::NEVER;
    }
    guard::to_ns(term.deadline).saturating_sub(guard::KILL_LEAD.as_nanos() as u64)
}

/// Runs the command while this sidecar leads.
pub struct Runner {
    spec: Spec,
    /// SIGTERM, SIGINT and SIGHUP, to pass on to the command.
    signals: Option<[tokio::signal::unix::Signal; 3]>,
    leadership: watch::Receiver<Leadership>,
    step_down: mpsc::Sender<StepDownRequest>,
    /// Set while a command runs (the elector's release waits for it to clear).
    gate: watch::Sender<bool>,
}

impl Runner {
    /// A runner on the elector's leadership and step-down channel, and the gate the elector
    /// waits on before a release.
    pub fn new(
        spec: Spec,
        leadership: watch::Receiver<Leadership>,
        step_down: mpsc::Sender<StepDownRequest>,
    ) -> Result<(Self, watch::Receiver<bool>)> {
        let (gate, rx) = watch::channel(false);
        let install = |kind| signal(kind).map_err(Error::Signal);
        let signals = [
            install(SignalKind::terminate())?,
            install(SignalKind::interrupt())?,
            install(SignalKind::hangup())?,
        ];
        Ok((
            Runner {
                spec,
                signals: Some(signals),
                leadership,
                step_down,
                gate,
            },
            rx,
        ))
    }

    /// Run until `run` should end; returns its exit status: the command's, or 0 when a signal
    /// stopped `run` while no command ran.
    pub async fn run(mut self) -> u8 {
        let [mut term_sig, mut int_sig, mut hup_sig] =
            self.signals.take().expect("run is called once");
        let mut running: Option<Running> = None;
        // The term whose command already ran: never started twice in one term.
        let mut ran_in: Option<u64> = None;
        // SIGTERM or SIGINT came: no new command; end once the running one has.
        let mut stopping = false;
        self.leadership.mark_changed();
        loop {
            tokio::select! {
                biased;
                status = wait(&mut running) => {
                    let mut r = running.take().expect("wait resolves only with a command running");
                    let not_started = r.not_started().await;
                    self.gate.send_replace(false);
                    let code = guard::code(status.ok());
                    let term = self.leadership.borrow().term;
                    let leading = term.is_some_and(|t| t.token == r.token);
                    if not_started {
                        tracing::warn!(
                            token = r.token,
                            "command not started: its guard came after the term's stop time (deadline less run.killGrace)"
                        );
                        if stopping {
                            return 0;
                        }
                        // The term keeps no command (one start per term): pass the lease on.
                        if leading {
                            self.step_down_for_exit().await;
                        }
                        continue;
                    }
                    let by_itself = !r.stopping
                        && Instant::now() + self.spec.kill_grace < r.deadline;
                    tracing::info!(
                        code,
                        token = r.token,
                        by_itself,
                        "command ended"
                    );
                    if stopping {
                        return code;
                    }
                    if leading {
                        self.step_down_for_exit().await;
                    }
                    if by_itself && self.spec.on_exit == OnChildExit::Exit {
                        return code;
                    }
                }
                sig = async {
                    tokio::select! {
                        _ = term_sig.recv() => libc::SIGTERM,
                        _ = int_sig.recv() => libc::SIGINT,
                    }
                } => {
                    tracing::info!(signal = sig, "stop signal received: passing it to the command");
                    stopping = true;
                    match running.as_mut() {
                        Some(r) => r.stop(sig).await,
                        None => return 0,
                    }
                }
                _ = hup_sig.recv() => {
                    if let Some(r) = running.as_mut() {
                        r.order(format!("S {}\n", libc::SIGHUP)).await;
                    }
                }
                Ok(()) = self.leadership.changed() => {
                    let term = self.leadership.borrow_and_update().term;
                    match (term, running.as_mut()) {
                        (Some(t), Some(r)) if t.token == r.token => {
                            r.extend(&t, self.spec.deadline).await
                        }
                        // The term ended (or another began, unseen between): stop.
                        (_, Some(r)) => r.stop(libc::SIGTERM).await,
                        // A term with time for the command: start it (once per term).
                        (Some(t), None)
                            if !stopping
                                && ran_in != Some(t.token)
                                && t.deadline > Instant::now() + self.spec.kill_grace =>
                        {
                            ran_in = Some(t.token);
                            if let Some(delay) = self.spec.start_delay {
                                tokio::time::sleep(delay).await;
                            }
                            match self.start(&t) {
                                Start::Running(r) => {
                                    running = Some(*r);
                                    // A runner preempted again once the command started: it
                                    // sees the term's end only now.
                                    if let Some(delay) = self.spec.start_delay {
                                        tokio::time::sleep(delay).await;
                                    }
                                }
                                Start::Ended => {}
                                Start::Failed => {
                                    // Not started at all: end the term, and `run` with 127.
                                    self.step_down_for_exit().await;
                                    if self.spec.on_exit == OnChildExit::Exit {
                                        return guard::CANNOT_START;
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    /// Start the command's guard for `term`; the gate is set first, and the term checked after.
    fn start(&mut self, term: &Term) -> Start {
        self.gate.send_replace(true);
        // The elector publishes a term's end before its release checks the gate (`PublishEnd`,
        // then `Release`). Seen still current after the gate is set, the term cannot have been
        // released: its release will wait for the gate to clear. Seen ended, it may have been.
        if self
            .leadership
            .borrow()
            .term
            .is_none_or(|now| now.token != term.token)
        {
            self.gate.send_replace(false);
            tracing::info!(
                token = term.token,
                "term ended before its command started: not starting it"
            );
            return Start::Ended;
        }
        let (ours, theirs) =
            match std::os::unix::net::UnixStream::pair().and_then(|(ours, theirs)| {
                ours.set_nonblocking(true)?;
                Ok((UnixStream::from_std(ours)?, theirs))
            }) {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::error!(error = %e, "cannot open the guard's order channel");
                    self.gate.send_replace(false);
                    return Start::Failed;
                }
            };
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                tracing::error!(error = %e, "cannot find the own executable to start the guard");
                self.gate.send_replace(false);
                return Start::Failed;
            }
        };
        let left = term.deadline.saturating_duration_since(Instant::now());
        let until = SystemTime::now() + left;
        let until_ms = until
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut command = tokio::process::Command::new(exe);
        command
            .arg(guard::SUBCOMMAND)
            .arg(self.spec.kill_grace.as_millis().to_string())
            .arg(guard_deadline(term, self.spec.deadline).to_string());
        if let Some(delay) = self.spec.guard_delay {
            command.arg(delay.as_millis().to_string());
        }
        command
            .arg("--")
            .args(&self.spec.command)
            .env(env::LEASE, &self.spec.lease)
            .env(env::IDENTITY, &self.spec.identity)
            .env(env::FENCING_TOKEN, term.token.to_string())
            .env(
                env::DEADLINE,
                humantime::format_rfc3339_millis(until).to_string(),
            )
            .env(env::DEADLINE_UNIX_MS, until_ms.to_string())
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .kill_on_drop(false);
        match command.spawn() {
            Ok(guard) => {
                tracing::info!(
                    token = term.token,
                    valid_ms = left.as_millis() as u64,
                    "command started"
                );
                Start::Running(Box::new(Running {
                    guard,
                    orders: ours,
                    token: term.token,
                    deadline: term.deadline,
                    stopping: false,
                }))
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot start the guard process");
                self.gate.send_replace(false);
                Start::Failed
            }
        }
    }

    /// End the term at once: a release naming a successor, reason `child-exited`.
    async fn step_down_for_exit(&self) {
        let (request, answer) = StepDownRequest::new(StepDownReason::ChildExited);
        if self.step_down.send(request).await.is_ok() {
            let _ = answer.await;
        }
    }
}

/// The guard's exit, if one runs; never otherwise.
async fn wait(running: &mut Option<Running>) -> std::io::Result<std::process::ExitStatus> {
    match running {
        Some(r) => r.guard.wait().await,
        None => std::future::pending().await,
    }
}

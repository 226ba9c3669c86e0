//! `redlock-elector`: parse and validate config (exit 2 on error, before any port is bound or
//! Redis contacted), start logging, run until SIGTERM/SIGINT (exit 0), or fail (exit 1).

use std::process::ExitCode;

use redlock_elector::config::{self, Config, Invocation, Mode, ProcessEnv};
use redlock_elector::{exec, logging, probe, run};

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // `run`'s guard process (src/exec/guard.rs): no config, no logging, no sidecar.
    if args.get(1).is_some_and(|a| a == exec::guard::SUBCOMMAND) {
        return ExitCode::from(exec::guard::main(&args[2..]));
    }
    match config::load(args, &ProcessEnv) {
        Err(e) => ExitCode::from(e.report()),
        Ok(Invocation { config, mode }) => match mode {
            Mode::CheckConfig { connect } => check_config(&config, connect),
            Mode::Run => run_sidecar(config, None),
            Mode::Exec { command } => run_sidecar(config, Some(command)),
        },
    }
}

/// A tokio runtime, or exit 1 naming why not.
fn runtime(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("redlock-elector: cannot start the runtime: {e}");
        ExitCode::from(1)
    })
}

/// `check-config [--connect]`: print the effective settings; with `--connect`, probe every
/// endpoint and exit 1 when no quorum is usable.
fn check_config(c: &Config, connect: bool) -> ExitCode {
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    print!("{}", config::effective_yaml(c));
    if !connect {
        return ExitCode::SUCCESS;
    }
    let rt = match runtime(&mut tokio::runtime::Builder::new_current_thread()) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let report = rt.block_on(probe::run(c));
    print!("{}", report.text);
    if report.usable {
        ExitCode::SUCCESS
    } else {
        eprintln!("redlock-elector: no quorum of Redis endpoints is usable (see the lines above)");
        ExitCode::from(1)
    }
}

/// Run the sidecar until a signal (exit 0) or a fatal error (exit 1); with a command (`run --
/// CMD`), until the command's end or a signal, exiting with the command's status.
fn run_sidecar(cfg: Config, command: Option<Vec<std::ffi::OsString>>) -> ExitCode {
    logging::init(&cfg.log);
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    for w in cfg.unsafe_switches.warnings() {
        tracing::warn!("{w}");
    }
    // Installing the process-wide TLS provider fails only if one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // One worker: the sidecar's work is I/O, and a second worker only added cross-thread
    // wake-ups (a futex and an inter-processor interrupt each) to the handover's path. Measured
    // on the 2-core machine (docs/performance.md): graceful handover p50 0.85 -> 0.76 ms, after a
    // restart 1.05 -> 0.95 ms. A current-thread runtime, which runs every task on the main
    // thread, measured slower than one worker (1.04 ms).
    let rt = match runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(1)) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    let result = rt.block_on(async {
        match command {
            Some(command) => run::run_command(cfg, command).await,
            None => {
                let signals = run::signals()?;
                run::run(cfg, signals).await.map(|()| 0)
            }
        }
    });
    // Do not wait for open long-polls or SSE streams: they end with the process.
    rt.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            tracing::error!(error = %e, "fatal");
            eprintln!("redlock-elector: {e}");
            ExitCode::from(1)
        }
    }
}

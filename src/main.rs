//! `redlock-elector`: parse and validate config (exit 2 on error, before any port is bound or
//! Redis contacted), start logging, run until SIGTERM/SIGINT (exit 0), or fail (exit 1).

use std::process::ExitCode;

use redlock_elector::config::{self, Command, ProcessEnv};
use redlock_elector::{logging, probe, run};

fn main() -> ExitCode {
    let cmd = match config::parse_args(std::env::args_os(), &ProcessEnv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(e.exit_code().clamp(0, 255) as u8);
        }
    };
    match cmd {
        Command::CheckConfig {
            raw,
            switches,
            connect,
        } => {
            let c = match config::validate(&raw, &ProcessEnv, switches) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("redlock-elector: invalid config: {e}");
                    return ExitCode::from(2);
                }
            };
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            print!("{}", config::effective_yaml(&c));
            if !connect {
                return ExitCode::SUCCESS;
            }
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("redlock-elector: cannot start the runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            let report = rt.block_on(probe::run(&c));
            print!("{}", report.text);
            if report.usable {
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "redlock-elector: no quorum of Redis endpoints is usable (see the lines above)"
                );
                ExitCode::from(1)
            }
        }
        Command::Run(raw, switches) => {
            let cfg = match config::validate(&raw, &ProcessEnv, switches) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("redlock-elector: invalid config: {e}");
                    return ExitCode::from(2);
                }
            };
            logging::init(&cfg.log);
            for w in &cfg.warnings {
                tracing::warn!("{w}");
            }
            for w in cfg.unsafe_switches.warnings() {
                tracing::warn!("{w}");
            }
            // Installing the process-wide TLS provider fails only if one is installed already.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("redlock-elector: cannot start the runtime: {e}");
                    return ExitCode::from(1);
                }
            };
            let result = rt.block_on(async {
                let signals = run::signals()?;
                run::run(cfg, signals).await
            });
            // Do not wait for open long-polls or SSE streams: they end with the process.
            rt.shutdown_background();
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "fatal");
                    eprintln!("redlock-elector: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

//! The command line: `redlock-elector [OPTIONS]` runs the sidecar, `check-config FILE` checks a
//! config. Every setting's flag and env var come from [`Settings`]; this file adds `--config`,
//! the subcommand and the hidden test-only switches, and layers flags and env over the file.

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use super::{Env, Error, Settings, file};

/// Kubernetes leader-election sidecar: a Redlock lease over several independent Redis masters
#[derive(Parser, Debug)]
#[command(
    name = "redlock-elector",
    version,
    long_about = None,
    // A later flag overrides an earlier one (wrappers append to a base command line).
    args_override_self = true,
    after_help = "Every setting can also come from the YAML file and from env REDLOCK_ELECTOR_<KEY> \
                  (e.g. REDLOCK_ELECTOR_LEASE_TTL); precedence: default < file < env < flag.\n\
                  The Redis password comes from redis.passwordFile or env REDLOCK_ELECTOR_REDIS_PASSWORD."
)]
struct Cli {
    /// YAML config file
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<String>,
    /// The hidden test-only switches.
    #[command(flatten)]
    switches: UnsafeSwitches,
    /// `check-config`, or none to run.
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// Validate a config file and print the effective settings (secrets redacted)
    #[command(long_about = None)]
    CheckConfig {
        // No help text: `check-config --help` shows a bare `<FILE>`.
        #[arg(value_name = "FILE")]
        file: String,
        /// Also connect to every Redis endpoint with these settings, run the real handshake and
        /// print one line per endpoint and the quorum verdict; exit 1 when no quorum is usable
        #[arg(long)]
        connect: bool,
    },
    /// Run a command while this sidecar leads: it starts with each term and is stopped
    /// (SIGTERM, then SIGKILL after run.killGrace) before the term can pass to anyone else
    #[command(long_about = None)]
    Run {
        /// The command and its arguments, after `--`
        #[arg(value_name = "CMD", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
}

/// Hidden, test-only flags that turn a safety mechanism off so a test can show the hazard it
/// prevents. Never set in production: mutual exclusion is then not guaranteed.
#[derive(Args, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnsafeSwitches {
    /// `--unsafe-disable-quarantine`: restarted nodes count at once.
    #[arg(long = "unsafe-disable-quarantine", hide = true)]
    pub quarantine_off: bool,
    /// `--unsafe-disable-clock-check`: no clock-jump detection, and nodes count without having
    /// been watched for ttl + margin.
    #[arg(long = "unsafe-disable-clock-check", hide = true)]
    pub clock_check_off: bool,
    /// `--no-named-successor`: releases name no successor, so followers race for the lease as
    /// before candidate records existed. Not a safety mechanism (the quorum rule is unchanged);
    /// here so the benchmark can compare handovers with and without a named successor.
    #[arg(long = "no-named-successor", hide = true)]
    pub no_named_successor: bool,
    /// `--unsafe-disable-release-proof-check`: a named successor counts every grant of its
    /// attempt after the notice, whether or not the node confirms the previous holder's release
    /// proof, so a fresh sidecar skips its clock watch on nodes nobody vouched for.
    #[arg(long = "unsafe-disable-release-proof-check", hide = true)]
    pub release_proof_check_off: bool,
    /// `--unsafe-disable-attestation-check`: this sidecar vouches for other sidecars' fresh
    /// watches of a node even where it does not count the node itself (a jump it just saw, its
    /// own watch not over), so a fresh sidecar may count a node whose clock stepped before it
    /// arrived.
    #[arg(long = "unsafe-disable-attestation-check", hide = true)]
    pub attestation_check_off: bool,
    /// `--unsafe-disable-blind-band`: the clock watch behaves as before the blind band was
    /// paid for: a reading however slow becomes the base of the next comparison, only the
    /// latest reading is compared, and terms make no room for a step the watch could miss.
    #[arg(long = "unsafe-disable-blind-band", hide = true)]
    pub blind_band_off: bool,
    /// `--unsafe-disable-reconnect-taint`: the release proof trusts a node whose lock command
    /// went out on a connection since replaced (a dropped straggler may still run there), and
    /// a renewal heals a missing key over a reservation for someone else.
    #[arg(long = "unsafe-disable-reconnect-taint", hide = true)]
    pub reconnect_taint_off: bool,
    /// `--no-attestations`: this sidecar neither asks for nor gives attestations of its clock
    /// watches, so a fresh one waits the whole window (ttl + margin) unless a release proof
    /// serves. Not a safety mechanism (fewer votes count early, never more); here so tests and
    /// the benchmark can take the release-proof path alone and compare.
    #[arg(long = "no-attestations", hide = true)]
    pub no_attestations: bool,
    /// `--unsafe-disable-run-deadline`: `run` stops its command only when it sees the term end,
    /// not by itself before the deadline, and releases without waiting for the command to die:
    /// a paused or starved sidecar leaves its command running while a successor's starts.
    #[arg(long = "unsafe-disable-run-deadline", hide = true)]
    pub run_deadline_off: bool,
    /// `--unsafe-disable-span-band`: terms pay no allowance for what a taker's watch may miss
    /// beyond its band (the rate over the key's life, a step between slow bases), as before
    /// issue 52: forward steps each under `driftFactor` of their gap add up unpaid.
    #[arg(long = "unsafe-disable-span-band", hide = true)]
    pub span_band_off: bool,
    /// `--unsafe-disable-proof-continuity`: a release proof counts for a watch that began
    /// moments ago, and a vouched watch pays nothing for its voucher's blind band, as before
    /// issue 52: a step back before the watch began, undone after the grant, goes unpaid.
    #[arg(long = "unsafe-disable-proof-continuity", hide = true)]
    pub proof_continuity_off: bool,
    /// `--unsafe-allow-renewal-to-shorten`: a renewal sets the key's expiry to the node's now
    /// plus ttl even where that is earlier than the expiry the key has, as before finding 9: a
    /// renewal that lands while a node's clock is stepped back, undone later, cuts short the
    /// key the holder's deadline rests on, and a watch across both steps sees net zero.
    #[arg(long = "unsafe-allow-renewal-to-shorten", hide = true)]
    pub renewal_may_shorten: bool,
    /// `--unsafe-test-run-start-delay MS`: `run` waits this long between reading a new term
    /// and marking its command as running, so a test can end the term in that window, and as
    /// long again once the command started (a runner preempted twice).
    #[arg(long = "unsafe-test-run-start-delay", value_name = "MS", hide = true)]
    pub run_start_delay_ms: Option<u64>,
    /// `--unsafe-test-guard-spawn-delay MS`: the guard waits this long before starting the
    /// command, as a guard starved or stopped between `run`'s check and the spawn would, and as
    /// long again before it first acts on the deadline (starved throughout).
    #[arg(long = "unsafe-test-guard-spawn-delay", value_name = "MS", hide = true)]
    pub guard_spawn_delay_ms: Option<u64>,
    /// `--unsafe-disable-endpoint-fence`: the EndpointSlice writer skips every fence: the
    /// term's deadline at the moment of the write, the slice's token, and the
    /// `resourceVersion` precondition, so a write decided before a pause lands after it.
    #[arg(long = "unsafe-disable-endpoint-fence", hide = true)]
    pub endpoint_fence_off: bool,
    /// `--unsafe-test-endpoint-write-delay MS`: the EndpointSlice writer waits this long
    /// between deciding a write and sending it (a writer preempted mid-write), so a test can
    /// pause it with a write in flight.
    #[arg(
        long = "unsafe-test-endpoint-write-delay",
        value_name = "MS",
        hide = true
    )]
    pub endpoint_write_delay_ms: Option<u64>,
}

impl UnsafeSwitches {
    /// One warning per switch that is on, for the log.
    pub fn warnings(&self) -> Vec<&'static str> {
        let mut w = Vec::new();
        if self.quarantine_off {
            w.push("--unsafe-disable-quarantine: restarted nodes count at once; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.no_named_successor {
            w.push("--no-named-successor: releases name no successor; followers race (benchmark comparison only)");
        }
        if self.no_attestations {
            w.push("--no-attestations: no attestations of the clock watch are asked for or given; a fresh sidecar waits ttl + margin (tests and benchmark comparison only)");
        }
        if self.release_proof_check_off {
            w.push("--unsafe-disable-release-proof-check: a named successor counts nodes that gave no release proof; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.attestation_check_off {
            w.push("--unsafe-disable-attestation-check: this sidecar vouches for nodes it does not count; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.reconnect_taint_off {
            w.push("--unsafe-disable-reconnect-taint: the release proof may vouch for a node a straggler can still reach; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.blind_band_off {
            w.push("--unsafe-disable-blind-band: clock steps within the watch's allowance shorten leases unpaid; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.run_deadline_off {
            w.push("--unsafe-disable-run-deadline: run's command is not stopped by the term's deadline; two commands may run at once (tests only)");
        }
        if self.span_band_off {
            w.push("--unsafe-disable-span-band: small clock steps that add up over a key's life go unpaid; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.proof_continuity_off {
            w.push("--unsafe-disable-proof-continuity: a release proof counts for a fresh clock watch; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.renewal_may_shorten {
            w.push("--unsafe-allow-renewal-to-shorten: a renewal may cut a key's expiry short while a node's clock is stepped back; mutual exclusion is NOT guaranteed (tests only)");
        }
        if self.run_start_delay_ms.is_some() {
            w.push("--unsafe-test-run-start-delay: run starts its command late in each term, to test the term ending meanwhile (tests only)");
        }
        if self.guard_spawn_delay_ms.is_some() {
            w.push("--unsafe-test-guard-spawn-delay: run's guard starts the command late, to test a start past the deadline (tests only)");
        }
        if self.endpoint_fence_off {
            w.push("--unsafe-disable-endpoint-fence: the EndpointSlice is written without the term's fence; a paused old leader can point the Service back at itself (tests only)");
        }
        if self.endpoint_write_delay_ms.is_some() {
            w.push("--unsafe-test-endpoint-write-delay: EndpointSlice writes are sent late, to test a write in flight across a pause (tests only)");
        }
        if self.clock_check_off {
            w.push("--unsafe-disable-clock-check: Redis clock jumps go undetected; mutual exclusion is NOT guaranteed (tests only)");
        }
        w
    }
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Run the sidecar.
    Run,
    /// `run -- CMD ARGS…`: run the sidecar, and the command while leading.
    Exec {
        /// The command and its arguments.
        command: Vec<OsString>,
    },
    /// Validate and print the effective settings (`check-config`).
    CheckConfig {
        /// `--connect`: also connect to every endpoint and run the real handshake.
        connect: bool,
    },
}

/// The command line and the file it names, layered, before validation.
#[derive(Debug)]
pub struct Parsed {
    /// Every setting: flag, else env, else file.
    pub settings: Settings,
    /// The hidden test-only switches.
    pub switches: UnsafeSwitches,
    /// Run or check.
    pub mode: Mode,
}

/// The clap command: `Cli` plus every setting of [`Settings`], all usable before or after
/// the subcommand. The env vars stay out of `--help`: its `after_help` explains them once.
pub fn command() -> clap::Command {
    let cli = Cli::command();
    // Each settings struct's doc would otherwise replace the about text.
    let about = cli.get_about().cloned();
    Settings::augment_args(cli)
        .about(about.unwrap_or_default())
        .mut_args(|a| a.global(true).hide_env(true))
}

/// Parse the command line and read the config file it names; flags and env go over the file.
pub fn parse_args<I, T>(args: I, env: &dyn Env) -> Result<Parsed, Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let matches = command().try_get_matches_from(args)?;
    let cli = Cli::from_arg_matches(&matches)?;
    let (path, mode) = match cli.command {
        Some(Sub::CheckConfig { file, connect }) => (Some(file), Mode::CheckConfig { connect }),
        Some(Sub::Run { command }) => (cli.config, Mode::Exec { command }),
        None => (cli.config, Mode::Run),
    };
    let file = match path {
        Some(path) => file::read(&path, env)?,
        None => Settings::default(),
    };
    Ok(Parsed {
        settings: layered(file, &matches)?,
        switches: cli.switches,
        mode,
    })
}

/// The one precedence rule: what clap found (a flag, else the env var) replaces the file's
/// value; what neither gives keeps the file's, and validation falls back to the default.
fn layered(file: Settings, matches: &clap::ArgMatches) -> Result<Settings, clap::Error> {
    let mut settings = file;
    settings.update_from_arg_matches(matches)?;
    // The env var holds the whole list, comma-separated; a flag is one URL (which may hold a
    // comma in its password).
    let split = |list: Vec<String>| -> Vec<String> {
        list.iter()
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect()
    };
    if matches.value_source("endpoints") == Some(ValueSource::EnvVariable) {
        settings.redis.endpoints = settings.redis.endpoints.map(split);
    }
    if matches.value_source("kubernetes.endpointSlice.ports") == Some(ValueSource::EnvVariable) {
        settings.kubernetes.endpoint_slice.ports =
            settings.kubernetes.endpoint_slice.ports.map(split);
    }
    // The same for the lease names (a name holds no comma).
    if matches.value_source("names") == Some(ValueSource::EnvVariable) {
        settings.lease.names = settings.lease.names.map(split);
    }
    Ok(settings)
}

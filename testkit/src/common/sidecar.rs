//! The real `redlock-elector` binary as a process (`Sidecar`), its options, its `/leader` answer,
//! and the library config the in-process tests build.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::base::{free_port, signal, tempdir, wait_for};
use super::http::http;
use super::redis::Redis;

/// The answer of `GET /leader`.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct View {
    pub lease: String,
    pub identity: String,
    pub is_leader: bool,
    pub leader: Option<String>,
    pub fencing_token: Option<u64>,
    pub valid_for_ms: u64,
    pub version: u64,
    /// Whether a quorum of nodes counts this sidecar's votes now (clock watched long enough,
    /// not quarantined).
    pub eligible: bool,
    /// Per endpoint: whether its vote counts now.
    pub nodes: std::collections::BTreeMap<String, bool>,
    /// The leader's rank as its candidate record shows it.
    #[serde(default)]
    pub leader_rank: Option<serde_json::Value>,
    /// Whether the leader sees a better candidate settling.
    #[serde(default)]
    pub handover_pending: bool,
    /// Whether this sidecar's own candidate record says ready.
    #[serde(default)]
    pub candidate_ready: bool,
    /// `lease.followApp`: this sidecar's app health, null when off.
    #[serde(default)]
    pub app_healthy: Option<bool>,
    /// `lease.followApp`: whether the leader's app is healthy as its record says, null when off
    /// or with no leader.
    #[serde(default)]
    pub leader_app_healthy: Option<bool>,
    /// `lease.followApp`: other candidates whose apps are healthy, null when off.
    #[serde(default)]
    pub healthy_candidates: Option<u32>,
    /// Why a quorum does not count this sidecar's votes yet (`clock_watch`, ...).
    #[serde(default)]
    pub waiting_for: Option<String>,
    /// Milliseconds until a quorum counts (0: it does).
    #[serde(default)]
    pub quorum_counts_in_ms: Option<u64>,
}

/// The validated config for `redlock-elector <args>` (flags only, as the binary parses them,
/// hidden `--unsafe-disable-quarantine` included), for tests and benchmarks of the library API.
pub fn library_config(args: &[&str]) -> redlock_elector::config::Config {
    use redlock_elector::config::{self, ProcessEnv};
    let argv = std::iter::once("redlock-elector")
        .chain(args.iter().copied())
        .map(String::from)
        .collect::<Vec<_>>();
    match config::load(argv, &ProcessEnv) {
        Ok(config::Invocation {
            config,
            mode: config::Mode::Run,
        }) => config,
        other => panic!("invalid library config {args:?}: {other:?}"),
    }
}

/// Options for one sidecar. The defaults (ttl 1s, retryEvery 200ms, timeout 50ms) are what
/// most tests use.
#[derive(Clone)]
pub struct Opts {
    pub lease: String,
    pub ttl: &'static str,
    pub retry_every: &'static str,
    pub timeout: &'static str,
    pub extra: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            lease: "test".into(),
            ttl: "1s",
            retry_every: "200ms",
            timeout: "50ms",
            extra: vec![],
            env: vec![],
        }
    }
}

/// The real `redlock-elector` binary, running.
pub struct Sidecar {
    pub identity: String,
    pub api_port: u16,
    pub ops_port: u16,
    child: Option<Child>,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The `redlock-elector` binary cargo built for this test or bench run (it builds the package's
/// binaries for every integration test and bench): `target/<profile>/redlock-elector`, or
/// `$REDLOCK_ELECTOR_BIN` when set. A panic that says how to build it when it is missing.
pub fn binary() -> &'static str {
    use std::sync::OnceLock;
    static BIN: OnceLock<String> = OnceLock::new();
    if let Some(chosen) = *CHOSEN.read().unwrap_or_else(|e| e.into_inner()) {
        return chosen;
    }
    BIN.get_or_init(|| {
        let path = match std::env::var_os("REDLOCK_ELECTOR_BIN") {
            Some(p) => PathBuf::from(p),
            None => crate::profile_dir().join("redlock-elector"),
        };
        assert!(
            path.is_file(),
            "the sidecar binary {} does not exist: run the tests with `cargo test` (or the bench \
             with `cargo bench`), which builds it, or build it (`cargo build [--release]`) and \
             point REDLOCK_ELECTOR_BIN at it",
            path.display()
        );
        path.to_string_lossy().into_owned()
    })
}

/// The binary [`use_binary`] chose, if any.
static CHOSEN: std::sync::RwLock<Option<&'static str>> = std::sync::RwLock::new(None);

/// Start `bin` wherever [`binary`] would be started, in this whole process, until called again
/// (`None`: back to the built one). The bench's `--against` runs the same sections with another
/// commit's binary this way. The path is leaked: a process calls this a few times.
pub fn use_binary(bin: Option<&std::path::Path>) {
    let leaked = bin.map(|p| &*Box::leak(p.to_string_lossy().into_owned().into_boxed_str()));
    *CHOSEN.write().unwrap_or_else(|e| e.into_inner()) = leaked;
}

impl Sidecar {
    pub fn start(identity: &str, redis: &[&Redis], opts: &Opts) -> Sidecar {
        let urls: Vec<String> = redis.iter().map(|r| r.url()).collect();
        Sidecar::start_urls(identity, &urls, opts)
    }

    pub fn start_urls(identity: &str, urls: &[String], opts: &Opts) -> Sidecar {
        Sidecar::start_bin(std::path::Path::new(binary()), identity, urls, opts)
    }

    /// Start `bin` rather than [`binary`]: another release of the sidecar (the mixed-version
    /// tests run the previous release's binary, [`crate::previous`], beside this one).
    pub fn start_bin(
        bin: &std::path::Path,
        identity: &str,
        urls: &[String],
        opts: &Opts,
    ) -> Sidecar {
        let dir = tempdir();
        let log = dir.path().join("sidecar.log");
        let api_port = free_port();
        let ops_port = free_port();
        let mut cmd = Command::new(bin);
        cmd.args([
            "--identity",
            identity,
            "--lease",
            &opts.lease,
            "--ttl",
            opts.ttl,
        ])
        .args([
            "--retry-every",
            opts.retry_every,
            "--redis-timeout",
            opts.timeout,
        ])
        .args([
            "--api-listen",
            &format!("127.0.0.1:{api_port}"),
            "--ops-listen",
            &format!("127.0.0.1:{ops_port}"),
        ])
        .args(["--log-format", "json", "--kubernetes", "false"]);
        for u in urls {
            cmd.args(["--redis", u]);
        }
        cmd.args(&opts.extra);
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        cmd.env_remove("KUBERNETES_SERVICE_HOST");
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let s = Sidecar {
            identity: identity.into(),
            api_port,
            ops_port,
            child: Some(child),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.try_leader().is_none() {
            assert!(
                Instant::now() < deadline,
                "sidecar {identity} did not start serving:\n{}",
                s.logs()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        s
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.api_port, path)
    }

    pub fn ops_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{}", self.ops_port, path)
    }

    /// `GET /leader`, or `None` if the sidecar does not answer.
    pub fn try_leader(&self) -> Option<View> {
        let (status, body) = http("GET", self.api_port, "/leader")?;
        (status == 200).then(|| serde_json::from_str(&body).expect("valid /leader JSON"))
    }

    /// `GET /leases`, its leases, or `None` if the sidecar does not answer with them.
    pub fn try_leases(&self) -> Option<Vec<View>> {
        #[derive(serde::Deserialize)]
        struct Leases {
            leases: Vec<View>,
        }
        let (status, body) = http("GET", self.api_port, "/leases")?;
        let leases = serde_json::from_str::<Leases>(&body).ok()?.leases;
        (status == 200).then_some(leases)
    }

    /// Wait until a quorum of nodes counts this sidecar's votes (`eligible` in `/leader`): a
    /// fresh sidecar watches the nodes' clocks for ttl + margin first.
    pub fn wait_eligible(&self, timeout: Duration) {
        wait_for(timeout, Duration::from_millis(10), || {
            self.leader().eligible.then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "{} not eligible within {timeout:?}: {:?}\n{}",
                self.identity,
                self.leader(),
                self.logs()
            )
        });
    }

    pub fn leader(&self) -> View {
        self.try_leader().unwrap_or_else(|| {
            panic!(
                "{} does not answer /leader:\n{}",
                self.identity,
                self.logs()
            )
        })
    }

    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait (up to 10 s) for the exit after a signal sent elsewhere, then make sure it is gone.
    pub fn reap(&mut self) {
        if let Some(mut c) = self.child.take()
            && wait_for(Duration::from_secs(10), Duration::from_millis(5), || {
                c.try_wait().ok().flatten()
            })
            .is_none()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait up to `timeout` for an exit that comes by itself (`run`'s command ended); its code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let c = self.child.as_mut().expect("running");
        let status = wait_for(timeout, Duration::from_millis(2), || {
            c.try_wait().ok().flatten()
        })?;
        self.child = None;
        status.code()
    }

    /// Send SIGTERM and wait for the exit; returns the exit code and how long it took.
    pub fn terminate(&mut self) -> (Option<i32>, Duration) {
        let mut c = self.child.take().expect("running");
        let t0 = Instant::now();
        signal(c.id(), "TERM");
        let deadline = t0 + Duration::from_secs(10);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return (st.code(), t0.elapsed());
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("sidecar did not exit within 10s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The one sidecar among `sidecars` that answers `is_leader: true`, if exactly one does.
pub fn sole_leader(sidecars: &[&Sidecar]) -> Option<usize> {
    let leaders: Vec<usize> = sidecars
        .iter()
        .enumerate()
        .filter(|(_, s)| s.try_leader().is_some_and(|v| v.is_leader))
        .map(|(i, _)| i)
        .collect();
    (leaders.len() == 1).then(|| leaders[0])
}

/// Of two sidecars, which leads and which follows, once one of them alone leads (within
/// `within`): `(leader, follower)` as indices into `pair`.
pub fn leader_and_follower(pair: [&Sidecar; 2], within: Duration) -> (usize, usize) {
    match wait_for(within, Duration::from_millis(10), || sole_leader(&pair)) {
        Some(0) => (0, 1),
        Some(_) => (1, 0),
        None => panic!("neither {} nor {} led", pair[0].identity, pair[1].identity),
    }
}

/// The sum of the `/metrics` samples whose line passes `keep`.
pub fn metric_sum_where(s: &Sidecar, keep: impl Fn(&str) -> bool) -> f64 {
    let (_, text) = http("GET", s.ops_port, "/metrics").expect("/metrics");
    text.lines()
        .filter(|l| keep(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of the `/metrics` samples whose line starts with `prefix`.
pub fn metric_sum(s: &Sidecar, prefix: &str) -> f64 {
    metric_sum_where(s, |l| l.starts_with(prefix))
}

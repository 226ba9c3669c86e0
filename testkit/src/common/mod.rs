//! Test harness: real `redis-server` processes on loopback ports and the real sidecar binary.
//! Everything started here is killed on drop, so a failing test leaves nothing behind.
#![allow(dead_code)]

pub mod rollout;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

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
    /// Why a quorum does not count this sidecar's votes yet (`clock_watch`, ...).
    #[serde(default)]
    pub waiting_for: Option<String>,
    /// Milliseconds until a quorum counts (0: it does).
    #[serde(default)]
    pub quorum_counts_in_ms: Option<u64>,
}

/// A port nobody listens on right now, and one this test process has never handed out before.
///
/// Binding port 0 twice in a row may return the same port (the first listener is already
/// closed), which once gave a sidecar the same `api.listen` and `ops.listen`. Ports come from a
/// process-wide counter instead, below Linux's ephemeral range (32768+) so no outgoing connection
/// can take a port a killed Redis is about to be restarted on; the start depends on the pid so two
/// test processes rarely probe the same ports, and every candidate is checked by binding it.
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 12_000;
    const SPAN: u32 = 20_000; // 12000..32000
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id().wrapping_mul(7919) % SPAN));
    for _ in 0..SPAN {
        let port = (LOW + next.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port in {LOW}..{}", LOW + SPAN);
}

/// `redis-server`, or a panic that says how to install it. Never a silent skip.
pub fn redis_server_bin() -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain([
        "/usr/bin",
        "/usr/local/bin",
        "/usr/sbin",
    ]) {
        let p = PathBuf::from(dir).join("redis-server");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "redis-server not found on PATH: these tests need real Redis servers. \
         Install it with `sudo apt-get install -y redis-server` (or run ./scripts/test.sh, which does)"
    );
}

/// Send a signal with kill(1).
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid} failed");
}

/// `openssl`, or a panic that says how to install it. Never a silent skip.
pub fn openssl_bin() -> PathBuf {
    for dir in std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .chain(["/usr/bin", "/usr/local/bin"])
    {
        let p = PathBuf::from(dir).join("openssl");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "openssl not found on PATH: the TLS tests generate their certificates with it. \
         Install it with `sudo apt-get install -y openssl` (or run ./scripts/test.sh, which does)"
    );
}

/// Certificates for TLS tests, made with the `openssl` CLI in a temporary directory:
/// - `ca.crt`/`ca.key`: the CA the servers and the client certificate are signed by;
/// - `server.crt`/`server.key`: for DNS names `localhost` and `redis.test` only (no IP address,
///   so `rediss://127.0.0.1` fails verification unless `redis.tls.serverName` names one);
/// - `client.crt`/`client.key`: a client certificate (extendedKeyUsage clientAuth);
/// - `other-ca.crt`: an unrelated CA (the "wrong CA").
pub struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempdir();
        let run = |args: &[&str]| {
            let out = Command::new(openssl_bin())
                .args(args)
                .current_dir(dir.path())
                .output()
                .expect("run openssl");
            assert!(
                out.status.success(),
                "openssl {args:?} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "redlock-test-ca"), ("other-ca", "some-other-ca")] {
            let (key, crt, subj) = (
                format!("{name}.key"),
                format!("{name}.crt"),
                format!("/CN={cn}"),
            );
            let mut args = vec!["req", "-x509"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &crt, "-days", "2", "-subj", &subj]);
            run(&args);
        }
        std::fs::write(
            dir.path().join("server.ext"),
            "subjectAltName=DNS:localhost,DNS:redis.test\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("client.ext"),
            "extendedKeyUsage=clientAuth\n",
        )
        .unwrap();
        for name in ["server", "client"] {
            let (key, csr, crt, ext) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
                format!("{name}.ext"),
            );
            let subj = format!("/CN={name}");
            let mut args = vec!["req"];
            args.extend(ec);
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            run(&args);
            run(&[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ]);
        }
        Pki { dir }
    }

    /// A file of this PKI.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The same as a `&str` for command lines.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_string()
    }
}

/// A temporary directory removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("redlock-elector-test")
        .tempdir()
        .unwrap()
}

/// One `redis-server` process without persistence.
pub struct Redis {
    pub port: u16,
    /// When the current process started (its start-up quarantine runs from here).
    pub started: Instant,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// Whether the server runs under the clockshift library (see [`Redis::shift_clock`]).
    shiftable: bool,
    /// The wall-clock offset in force, ms.
    offset_ms: std::sync::atomic::AtomicI64,
    /// TLS-only (`--port 0 --tls-port`): the test talks to it over a unix socket as `admin`.
    tls: Option<TlsServer>,
}

/// The clockshift `LD_PRELOAD` library (`tests/clockshift/clockshift.c`), built once per test
/// process with `cc`: it offsets a process's wall clock by the milliseconds in a file.
pub fn clockshift_lib() -> PathBuf {
    use std::sync::OnceLock;
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let src = crate::repo().join("tests/clockshift/clockshift.c");
        let dir = crate::profile_dir();
        let out = dir.join("libclockshift.so");
        // Built under a private name, then renamed: test binaries may build it concurrently.
        let tmp = dir.join(format!("libclockshift.{}.so", std::process::id()));
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o"])
            .arg(&tmp)
            .arg(&src)
            .status()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run cc ({e}): the clock-jump tests build an LD_PRELOAD library with it. \
                     Install it with `sudo apt-get install -y gcc` (or run ./scripts/test.sh, which does)"
                )
            });
        assert!(status.success(), "cc failed to build {}", src.display());
        std::fs::rename(&tmp, &out).expect("install libclockshift.so");
        out
    })
    .clone()
}

/// How a TLS-only server is started.
#[derive(Clone)]
struct TlsServer {
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    /// `--tls-auth-clients yes`: a client certificate is required.
    auth_clients: bool,
}

/// The ACL user the harness uses on TLS servers (over their unix socket), whatever the test
/// does to the default user's password.
pub const ADMIN_USER: &str = "harness-admin";
pub const ADMIN_PASSWORD: &str = "harness-admin-pw";

impl Redis {
    /// Start on a free port.
    pub fn start() -> Redis {
        Redis::start_with(&[])
    }

    /// Start on a free port with extra arguments (e.g. `--maxmemory-policy allkeys-lru`).
    pub fn start_with(extra: &[&str]) -> Redis {
        Redis::launch(extra, false)
    }

    /// Start on a free port under the clockshift library, so [`Redis::shift_clock`] can move
    /// its wall clock while it runs.
    pub fn start_shiftable() -> Redis {
        Redis::launch(&[], true)
    }

    fn launch(extra: &[&str], shiftable: bool) -> Redis {
        let mut r = Redis {
            port: free_port(),
            started: Instant::now(),
            child: None,
            dir: tempdir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            shiftable,
            offset_ms: Default::default(),
            tls: None,
        };
        r.spawn();
        r
    }

    fn offset_file(&self) -> PathBuf {
        self.dir.path().join("clock-offset-ms")
    }

    /// Set the server's wall-clock offset to `offset_ms` (absolute, from true time); takes
    /// effect within a millisecond. A restarted server keeps the offset in force.
    pub fn shift_clock(&self, offset_ms: i64) {
        assert!(
            self.shiftable,
            "start the server with Redis::start_shiftable()"
        );
        let tmp = self.dir.path().join("clock-offset-ms.tmp");
        std::fs::write(&tmp, offset_ms.to_string()).unwrap();
        std::fs::rename(&tmp, self.offset_file()).unwrap();
        self.offset_ms
            .store(offset_ms, std::sync::atomic::Ordering::SeqCst);
        // The library re-reads the file at most once per ms of its own monotonic time.
        std::thread::sleep(Duration::from_millis(3));
    }

    /// Move the wall clock by `delta_ms` from where it is.
    pub fn jump_clock(&self, delta_ms: i64) {
        self.shift_clock(self.clock_offset_ms() + delta_ms);
    }

    /// The wall-clock offset in force, ms.
    pub fn clock_offset_ms(&self) -> i64 {
        self.offset_ms.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Start a TLS-only server (no plain port) with `pki`'s server certificate, on a free port.
    /// `client_certs`: `--tls-auth-clients yes`. The test reaches it over a unix socket.
    pub fn start_tls(pki: &Pki, client_certs: bool, extra: &[&str]) -> Redis {
        let mut r = Redis {
            port: free_port(),
            started: Instant::now(),
            child: None,
            dir: tempdir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            shiftable: false,
            offset_ms: Default::default(),
            tls: Some(TlsServer {
                cert: pki.path("server.crt"),
                key: pki.path("server.key"),
                ca: pki.path("ca.crt"),
                auth_clients: client_certs,
            }),
        };
        r.spawn();
        r
    }

    /// The unix socket of a TLS server.
    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(redis_server_bin());
        if self.shiftable {
            cmd.env("LD_PRELOAD", clockshift_lib())
                .env("CLOCKSHIFT_FILE", self.offset_file());
        }
        match &self.tls {
            None => {
                cmd.args(["--port", &self.port.to_string()]);
            }
            Some(t) => {
                cmd.args(["--port", "0", "--tls-port", &self.port.to_string()])
                    .args(["--tls-cert-file", t.cert.to_str().unwrap()])
                    .args(["--tls-key-file", t.key.to_str().unwrap()])
                    .args(["--tls-ca-cert-file", t.ca.to_str().unwrap()])
                    .args([
                        "--tls-auth-clients",
                        if t.auth_clients { "yes" } else { "no" },
                    ])
                    .args(["--unixsocket", self.socket().to_str().unwrap()])
                    .args(["--unixsocketperm", "700"])
                    .args([
                        "--user",
                        ADMIN_USER,
                        "on",
                        &format!(">{ADMIN_PASSWORD}"),
                        "~*",
                        "&*",
                        "+@all",
                    ]);
            }
        }
        let child = cmd
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--dir", self.dir.path().to_str().unwrap()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        self.started = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server on {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The `host:port` the sidecar names this endpoint by (metric label, logs).
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("redis is running").id()
    }

    /// SIGKILL the server (data is lost: there is no persistence).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Start again after a kill.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "still running");
        self.spawn();
    }

    pub fn stop(&self) {
        signal(self.pid(), "STOP");
    }

    pub fn cont(&self) {
        signal(self.pid(), "CONT");
    }

    /// Run a command over a raw RESP connection; `None` if the server is unreachable. A TLS
    /// server is reached over its unix socket, authenticated as [`ADMIN_USER`].
    pub fn cli(&self, args: &[&str]) -> Option<String> {
        if self.tls.is_some() {
            let s = std::os::unix::net::UnixStream::connect(self.socket()).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
            let mut r = std::io::BufReader::new(s);
            let auth = resp_roundtrip(&mut r, &["AUTH", ADMIN_USER, ADMIN_PASSWORD])?;
            assert_eq!(auth, "OK", "harness admin AUTH failed");
            return resp_roundtrip(&mut r, args);
        }
        resp_command(self.port, args)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The request form of a Redis command: a RESP array of bulk strings.
pub fn resp_encode(args: &[&str]) -> String {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{}\r\n", a.len(), a));
    }
    req
}

/// Minimal RESP client for assertions (GET, PING, INFO), independent of the code under test.
pub fn resp_command(port: u16, args: &[&str]) -> Option<String> {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    resp_roundtrip(&mut std::io::BufReader::new(s), args)
}

/// Send one command and read its reply (simple, error, integer or bulk string; arrays are
/// returned as their first line).
pub fn resp_roundtrip<S: std::io::Read + std::io::Write>(
    r: &mut std::io::BufReader<S>,
    args: &[&str],
) -> Option<String> {
    use std::io::{BufRead, Read};
    r.get_mut().write_all(resp_encode(args).as_bytes()).ok()?;
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let line = line.trim_end().to_string();
    match line.chars().next()? {
        '+' | '-' | ':' => Some(line[1..].to_string()),
        '$' => {
            let n: i64 = line[1..].parse().ok()?;
            if n < 0 {
                return Some(String::new());
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf).ok()?;
            buf.truncate(n as usize);
            Some(String::from_utf8_lossy(&buf).into_owned())
        }
        _ => Some(line),
    }
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

/// One HTTP request to a sidecar on loopback; `None` when it cannot be made or answered within
/// 5 s. Returns (status, body).
pub fn http(method: &str, port: u16, path: &str) -> Option<(u16, String)> {
    http_timeout(method, port, path, Duration::from_secs(5))
}

/// [`http`] with its own limit on the whole exchange.
pub fn http_timeout(
    method: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Option<(u16, String)> {
    http_host(method, "127.0.0.1", port, path, timeout)
}

/// [`http_timeout`] to another loopback address (the stand-in kubelet's pods listen on their own).
///
/// Blocking reqwest, so the sync tests can call it; from async code call it in `spawn_blocking`.
/// A fresh connection per request (no pool): the tests kill and restart sidecars on the same
/// ports, and a pooled connection to a dead one would fail a request a new connection passes.
pub fn http_host(
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Option<(u16, String)> {
    use std::sync::OnceLock;
    static CLIENT: OnceLock<reqwest::blocking::Client> = OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        reqwest::blocking::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .tcp_nodelay(true)
            .build()
            .expect("build the harness's HTTP client")
    });
    let method = reqwest::Method::from_bytes(method.as_bytes()).ok()?;
    let resp = client
        .request(method, format!("http://{host}:{port}{path}"))
        .timeout(timeout)
        .body("")
        .send()
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.text().ok()?))
}

/// Poll `f` every `every` until it returns `Some` or `timeout` passes.
pub fn wait_for<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(every);
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

/// Start `n` Redis servers and wait out their start-up quarantine (ttl + 1 s), so elections in
/// the test are not delayed by it.
pub fn redis_cluster(n: usize, ttl: Duration) -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..n).map(|_| Redis::start()).collect();
    std::thread::sleep(ttl + Duration::from_millis(1100));
    nodes
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

/// Return just after the holder of `key` renewed it on `node` (its PTTL jumped up), polling
/// every 0.5 ms for up to `within`. Lets a test act between two renewals rather than racing one.
pub fn just_after_renewal(node: &Redis, key: &str, within: Duration) {
    let pttl = || {
        node.cli(&["PTTL", key])
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(-2)
    };
    let mut last = pttl();
    let found = wait_for(within, Duration::from_micros(500), || {
        let now = pttl();
        let renewed = now > last + 100;
        last = now;
        renewed.then_some(())
    });
    assert!(
        found.is_some(),
        "no renewal of {key} seen on node {}",
        node.port
    );
}

/// Print a measured figure so it lands in the test output (`--nocapture`) and CI logs.
pub fn report(what: &str, value: impl std::fmt::Display) {
    eprintln!("[figure] {what}: {value}");
}

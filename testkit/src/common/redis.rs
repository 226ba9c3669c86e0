//! Real `redis-server` processes on loopback ports (plain, TLS, ACL, clock-shifted), and the RESP
//! helpers that talk to them without a client library.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::base::{free_port, signal, tempdir, wait_for};
use super::pki::Pki;

mod clock;

use clock::ClockSetting;
pub use clock::{clockshift_lib, unix_ns};

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

/// `valkey-server`: `$VALKEY_SERVER` (`scripts/valkey.sh` prints it and fetches Valkey once),
/// or a panic that says how to get it. Never a silent skip.
pub fn valkey_server_bin() -> PathBuf {
    match std::env::var_os("VALKEY_SERVER").map(PathBuf::from) {
        Some(p) if p.is_file() => p,
        other => panic!(
            "TEST_SERVER asks for Valkey, but VALKEY_SERVER ({other:?}) is not a file: run \
             `export VALKEY_SERVER=$(scripts/valkey.sh)` (it fetches valkey-server 8.1.8 once), \
             or ./scripts/test.sh, which does"
        ),
    }
}

/// Which server a test node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Redis,
    Valkey,
}

impl Server {
    /// The server for a test's next plain node, by `TEST_SERVER`: `redis` (the default),
    /// `valkey`, or `mixed`: Redis and Valkey in turn within each test (a test runs on a thread
    /// of its own), so its first three nodes are Redis, Valkey, Redis. A TLS node is always Redis
    /// (this Valkey build has no TLS).
    fn next() -> Server {
        use std::cell::Cell;
        thread_local!(static NODES: Cell<usize> = const { Cell::new(0) });
        match std::env::var("TEST_SERVER").as_deref() {
            Err(_) | Ok("" | "redis") => Server::Redis,
            Ok("valkey") => Server::Valkey,
            Ok("mixed") => {
                let n = NODES.with(|c| c.replace(c.get() + 1));
                if n % 2 == 1 {
                    Server::Valkey
                } else {
                    Server::Redis
                }
            }
            Ok(other) => panic!("TEST_SERVER={other}: expected redis, valkey or mixed"),
        }
    }

    fn bin(self) -> PathBuf {
        match self {
            Server::Redis => redis_server_bin(),
            Server::Valkey => valkey_server_bin(),
        }
    }
}

/// One `redis-server` (or `valkey-server`, see [`Server`]) process without persistence.
pub struct Redis {
    pub port: u16,
    /// The server it runs.
    pub server: Server,
    /// When the current process started (its start-up quarantine runs from here).
    pub started: Instant,
    child: Option<Child>,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    /// Whether the server runs under the clockshift library (see [`Redis::shift_clock`]).
    shiftable: bool,
    /// The wall-clock offset and rate in force.
    clock: std::sync::Mutex<ClockSetting>,
    /// TLS-only (`--port 0 --tls-port`): the test talks to it over a unix socket as `admin`.
    tls: Option<TlsServer>,
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
        Redis::launch_with(extra, shiftable, None)
    }

    /// Start on a free port: plain, or TLS-only with `tls`.
    fn launch_with(extra: &[&str], shiftable: bool, tls: Option<TlsServer>) -> Redis {
        let server = if tls.is_some() {
            Server::Redis
        } else {
            Server::next()
        };
        let mut r = Redis {
            port: free_port(),
            server,
            started: Instant::now(),
            child: None,
            dir: tempdir(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            shiftable,
            clock: Default::default(),
            tls,
        };
        r.spawn();
        r
    }

    /// Start a TLS-only server (no plain port) with `pki`'s server certificate, on a free port.
    /// `client_certs`: `--tls-auth-clients yes`. The test reaches it over a unix socket.
    pub fn start_tls(pki: &Pki, client_certs: bool, extra: &[&str]) -> Redis {
        let tls = TlsServer {
            cert: pki.path("server.crt"),
            key: pki.path("server.key"),
            ca: pki.path("ca.crt"),
            auth_clients: client_certs,
        };
        Redis::launch_with(extra, false, Some(tls))
    }

    /// The unix socket of a TLS server.
    fn socket(&self) -> PathBuf {
        self.dir.path().join("redis.sock")
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(self.server.bin());
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
            .unwrap_or_else(|e| panic!("spawn {:?}: {e}", self.server));
        self.child = Some(child);
        self.started = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.cli(&["PING"]).as_deref() != Some("PONG") {
            assert!(
                Instant::now() < deadline,
                "{:?} on {} did not start",
                self.server,
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

/// Start `n` Redis servers and wait out their start-up quarantine (ttl + 1 s), so elections in
/// the test are not delayed by it.
pub fn redis_cluster(n: usize, ttl: Duration) -> Vec<Redis> {
    let nodes: Vec<Redis> = (0..n).map(|_| Redis::start()).collect();
    std::thread::sleep(ttl + Duration::from_millis(1100));
    nodes
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

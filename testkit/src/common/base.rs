//! The small helpers every file of the harness uses: free ports, signals, temporary
//! directories, waiting for a condition, and printing a measured figure.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

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

/// A temporary directory removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("redlock-elector-test")
        .tempdir()
        .unwrap()
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

/// Print a measured figure so it lands in the test output (`--nocapture`) and CI logs.
pub fn report(what: &str, value: impl std::fmt::Display) {
    eprintln!("[figure] {what}: {value}");
}

/// Build the C source `src` (relative to the repository) with `cc` into `target/<profile>/out`,
/// with these flags beside `-O2 -Wall -Werror`; the harness's small helpers in C (the clockshift
/// library, the `run` tests' child). A panic that says how to install `cc` when it is missing.
pub fn cc(src: &str, out: &str, flags: &[&str]) -> std::path::PathBuf {
    let src = crate::repo().join(src);
    let dir = crate::profile_dir();
    // Built under a private name, then renamed: test binaries may build it concurrently.
    let tmp = dir.join(format!("{out}.{}.tmp", std::process::id()));
    let status = std::process::Command::new("cc")
        .args(flags)
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run cc ({e}): the tests build {} with it. Install it with \
                 `sudo apt-get install -y gcc` (or run ./scripts/test.sh, which does)",
                src.display()
            )
        });
    assert!(status.success(), "cc failed to build {}", src.display());
    let out = dir.join(out);
    std::fs::rename(&tmp, &out).unwrap_or_else(|e| panic!("install {}: {e}", out.display()));
    out
}

/// The nearest-rank percentile `p` (0..=1) of `v`, sorted here; the tests' figures (the
/// benchmark's own `report::pct` interpolates). Panics on an empty `v`.
pub fn nearest_rank<T: Copy + PartialOrd>(v: &[T], p: f64) -> T {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    s[((s.len() as f64 - 1.0) * p).round() as usize]
}

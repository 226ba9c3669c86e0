//! The harness's HTTP client: a fresh connection per request, bounded in time.

use std::time::Duration;

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

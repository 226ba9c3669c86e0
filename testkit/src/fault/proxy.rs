//! The fault proxy: one TCP listener per (sidecar, node) link, so every fault can be aimed at
//! one sidecar's view of one node (a partition) or at every sidecar's view of a node (latency,
//! blackhole, reset).
//!
//! Faults never corrupt the byte stream, because Redis speaks a framed protocol over TCP and a
//! real network cannot corrupt it either: latency delays each chunk from the sidecar to the node
//! (the reply is then late, so the command is *ambiguous*: it ran, but the sidecar timed out);
//! a blackhole holds bytes in both directions until it heals (what TCP does across a partition
//! that heals before the connection times out); a reset aborts every open connection of the
//! link with RST. When the node closes its side (it was killed or restarted), the sidecar's side
//! is closed at once, as a direct connection would be: that is how a client learns a node
//! restarted.

use std::collections::VecDeque;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

/// The fault on one link right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkFault {
    /// Added to every chunk from the sidecar to the node.
    pub latency: Duration,
    /// Hold all bytes in both directions.
    pub blackhole: bool,
}

impl LinkFault {
    /// A partition of the link: every byte held until it heals.
    pub const CUT: LinkFault = LinkFault {
        latency: Duration::ZERO,
        blackhole: true,
    };

    /// `d` of latency on every chunk from the sidecar to the node.
    pub fn latency(d: Duration) -> LinkFault {
        LinkFault {
            latency: d,
            blackhole: false,
        }
    }
}

/// One (sidecar, node) link.
struct Link {
    /// Where the sidecar connects.
    port: u16,
    /// The fault in force.
    fault: watch::Sender<LinkFault>,
    /// Bumped to reset every open connection.
    reset: watch::Sender<u64>,
}

/// All links of a test: `links[sidecar][node]`.
pub struct Proxy {
    /// Runs the accept loops and the pumps in the background.
    rt: Option<tokio::runtime::Runtime>,
    links: Vec<Vec<Link>>,
}

impl Proxy {
    /// A link for every pair of `sidecars` and the Redis servers on `node_ports`.
    pub fn new(sidecars: usize, node_ports: &[u16]) -> Proxy {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_all()
            .build()
            .expect("proxy runtime");
        let mut links = Vec::new();
        for _ in 0..sidecars {
            let mut row = Vec::new();
            for &backend in node_ports {
                let std = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
                std.set_nonblocking(true).unwrap();
                let port = std.local_addr().unwrap().port();
                let (fault, fault_rx) = watch::channel(LinkFault::default());
                let (reset, reset_rx) = watch::channel(0u64);
                rt.spawn(async move {
                    let listener = tokio::net::TcpListener::from_std(std).expect("proxy listener");
                    loop {
                        let Ok((client, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(serve(client, backend, fault_rx.clone(), reset_rx.clone()));
                    }
                });
                row.push(Link { port, fault, reset });
            }
            links.push(row);
        }
        Proxy {
            rt: Some(rt),
            links,
        }
    }

    /// The endpoint URLs sidecar `s` is configured with, in node order.
    pub fn urls(&self, s: usize) -> Vec<String> {
        self.links[s]
            .iter()
            .map(|l| format!("redis://127.0.0.1:{}", l.port))
            .collect()
    }

    /// The `host:port` sidecar `s` knows node `n` by: the endpoint label of its metrics.
    pub fn endpoint(&self, s: usize, n: usize) -> String {
        format!("127.0.0.1:{}", self.links[s][n].port)
    }

    /// Set the fault on link (sidecar `s`, node `n`).
    pub fn set(&self, s: usize, n: usize, f: LinkFault) {
        self.links[s][n].fault.send_replace(f);
    }

    /// The fault on link (`s`, `n`).
    pub fn get(&self, s: usize, n: usize) -> LinkFault {
        *self.links[s][n].fault.borrow()
    }

    /// Abort every open connection of link (`s`, `n`) with RST.
    pub fn reset(&self, s: usize, n: usize) {
        self.links[s][n].reset.send_modify(|g| *g += 1);
    }

    /// Number of sidecars and nodes.
    pub fn shape(&self) -> (usize, usize) {
        (self.links.len(), self.links.first().map_or(0, Vec::len))
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Dropping the runtime in place would wait for the accept loops; they hold nothing.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// One proxied connection: pumps both ways until a side closes or the link is reset.
async fn serve(
    client: TcpStream,
    backend_port: u16,
    fault: watch::Receiver<LinkFault>,
    mut reset: watch::Receiver<u64>,
) {
    reset.borrow_and_update();
    let Ok(backend) = TcpStream::connect(("127.0.0.1", backend_port)).await else {
        // Node down: the sidecar sees the connection close, like a refused connect.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = backend.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut br, mut bw) = backend.into_split();
    tokio::select! {
        // A reset first: a test that resets a link and then heals its blackhole (one call after
        // the other) must see the held bytes dropped with the connection, never delivered. Polled
        // in random order, a busy runtime that woke for both at once flushed them half the time:
        // a follower's timed-out SET NX ran after the heal and held the key for a ttl.
        biased;
        _ = reset.changed() => {
            let _ = cr.as_ref().set_zero_linger();
            let _ = br.as_ref().set_zero_linger();
        }
        // The sidecar closed: what it sent has been delivered (or is held by a blackhole).
        _ = pump(&mut cr, &mut bw, fault.clone(), true) => {}
        // The node closed (killed, restarted): close the sidecar's side now.
        _ = pump(&mut br, &mut cw, fault, false) => {}
    }
}

/// Copy `r` to `w`, delaying (`upstream` only) and holding bytes as the link's fault says.
/// Returns when `r` reached EOF and everything read was written, or on an error.
async fn pump(
    r: &mut OwnedReadHalf,
    w: &mut OwnedWriteHalf,
    mut fault: watch::Receiver<LinkFault>,
    upstream: bool,
) {
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut eof = false;
    loop {
        if eof && queue.is_empty() {
            let _ = w.shutdown().await;
            return;
        }
        let f = *fault.borrow_and_update();
        let due = if f.blackhole {
            None
        } else {
            queue.front().map(|(t, _)| *t)
        };
        tokio::select! {
            n = r.read(&mut buf), if !eof => match n {
                // The node's side closed: close the sidecar's side at once, held bytes or not.
                Ok(0) | Err(_) if !upstream => return,
                Ok(0) | Err(_) => eof = true,
                Ok(n) => {
                    let delay = if upstream { f.latency } else { Duration::ZERO };
                    queue.push_back((Instant::now() + delay, buf[..n].to_vec()));
                }
            },
            _ = sleep_until(early(due)), if due.is_some() => {
                let (at, chunk) = queue.pop_front().expect("a due chunk");
                // A tokio timer fires on a whole-millisecond tick: the rest of the delay, at
                // most 1 ms, is slept precisely (a benchmark adds 2 ms to one node).
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                if w.write_all(&chunk).await.is_err() {
                    return;
                }
            }
            r = fault.changed() => if r.is_err() { return },
        }
    }
}

/// One timer tick before `due` (or now, when nothing is due): the sub-millisecond rest of a
/// delay is slept in [`pump`].
fn early(due: Option<Instant>) -> Instant {
    let tick = Duration::from_millis(1);
    due.map_or_else(Instant::now, |d| d.checked_sub(tick).unwrap_or(d))
}

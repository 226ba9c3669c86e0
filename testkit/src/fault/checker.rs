//! The checker: records every sidecar's leadership from its own answers and verifies S1 (no
//! instant at which two sidecars both answer `is_leader: true`) and S2 (tokens of successive
//! terms strictly increase).
//!
//! One thread per sidecar polls `GET /leader` (or one lease's `GET /leases/NAME`) over a
//! keep-alive connection, every
//! [`POLL_EVERY`] plus the round trip, and stamps each answer with `sent` (before the request was
//! written) and `received` (after the answer was read) on the checker's monotonic clock. The
//! sidecar evaluated its answer at some unknown instant in `[sent, received]`.
//!
//! What the answers prove (the model, S1 and S2) is in [`super::analysis`], re-exported here.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Pause between one answer and the next request; with the round trip, well under 5 ms.
pub const POLL_EVERY: Duration = Duration::from_millis(2);

pub use super::analysis::{Overlap, Report, Segment, TokenViolation, analyze};

/// Where one slot's current process answers.
#[derive(Default)]
struct Target {
    /// API port; 0 while no process runs in the slot.
    port: AtomicU16,
    /// Bumped for every new process.
    generation: AtomicU32,
    /// Answers received so far.
    answered: AtomicU64,
    /// Requests made so far, answered or failed.
    polled: AtomicU64,
}

/// Wait (up to 2 s) until `count` has grown by two since this call: the first may come from a
/// request already in flight.
fn two_more(count: &AtomicU64) {
    let want = count.load(Ordering::SeqCst) + 2;
    let deadline = Instant::now() + Duration::from_secs(2);
    while count.load(Ordering::SeqCst) < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Spacing of one slot's requests, for the report.
#[derive(Clone, Debug, Default)]
pub struct PollStats {
    /// Answers received.
    pub answers: u64,
    /// Failed polls (process down, killed mid-request).
    pub failures: u64,
    /// Histogram of the time between consecutive requests of one connection, 1 ms buckets
    /// (the last bucket collects everything longer).
    pub spacing_ms: Vec<u64>,
}

impl PollStats {
    /// The `q`-quantile of the request spacing, in ms.
    pub fn spacing_quantile(&self, q: f64) -> usize {
        let total: u64 = self.spacing_ms.iter().sum();
        let mut seen = 0;
        for (ms, n) in self.spacing_ms.iter().enumerate() {
            seen += n;
            if seen as f64 >= q * total as f64 {
                return ms;
            }
        }
        self.spacing_ms.len()
    }
}

/// Background pollers of every sidecar slot.
pub struct Checker {
    /// Origin of every timestamp.
    pub t0: Instant,
    targets: Vec<Arc<Target>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<(Vec<Vec<Segment>>, PollStats)>>,
}

/// Everything the pollers saw.
pub struct Observations {
    /// Segments of all slots (of the first lease, when several are polled).
    pub segments: Vec<Segment>,
    /// With several leases polled ([`Checker::start_leases`]): each lease's segments of all
    /// slots, in the order the leases were given.
    pub by_lease: Vec<Vec<Segment>>,
    /// Per-slot polling statistics.
    pub stats: Vec<PollStats>,
}

/// What one poll asks and how its answer is read.
#[derive(Clone)]
enum Ask {
    /// An answer of `/leader`'s shape at this request head.
    One(String),
    /// `GET /leases`: these leases, by name.
    Leases(Vec<String>),
}

impl Ask {
    fn head(&self) -> String {
        let path = match self {
            Ask::One(path) => path.as_str(),
            Ask::Leases(_) => "/leases",
        };
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n")
    }

    fn leases(&self) -> usize {
        match self {
            Ask::One(_) => 1,
            Ask::Leases(names) => names.len(),
        }
    }

    /// Each lease's answer in the body; `None` if a lease is missing.
    fn read(&self, body: &[u8]) -> Option<Vec<Answer>> {
        match self {
            Ask::One(_) => Some(vec![serde_json::from_slice(body).ok()?]),
            Ask::Leases(names) => {
                let all: AllLeases = serde_json::from_slice(body).ok()?;
                names
                    .iter()
                    .map(|n| {
                        all.leases
                            .iter()
                            .find(|a| a.lease.as_deref() == Some(n))
                            .map(|a| Answer {
                                lease: None,
                                is_leader: a.is_leader,
                                fencing_token: a.fencing_token,
                            })
                    })
                    .collect()
            }
        }
    }
}

/// `GET /leases`, the part the checker needs.
#[derive(serde::Deserialize)]
struct AllLeases {
    leases: Vec<Answer>,
}

impl Checker {
    /// Start polling `ports` (one per slot; 0 = nothing runs there yet).
    pub fn start(ports: &[u16]) -> Checker {
        Checker::start_at(ports, "/leader")
    }

    /// Start polling `path` (an answer of `/leader`'s shape: `/leases/NAME` for one lease of a
    /// sidecar with several) on `ports`.
    pub fn start_at(ports: &[u16], path: &str) -> Checker {
        Checker::start_asking(ports, Ask::One(path.to_string()))
    }

    /// Start polling `GET /leases` on `ports`, one request per slot for every lease of
    /// `names` (a sidecar with many leases or shards): [`Observations::by_lease`].
    pub fn start_leases(ports: &[u16], names: &[String]) -> Checker {
        Checker::start_asking(ports, Ask::Leases(names.to_vec()))
    }

    fn start_asking(ports: &[u16], ask: Ask) -> Checker {
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let mut targets = Vec::new();
        let mut threads = Vec::new();
        for (slot, &port) in ports.iter().enumerate() {
            let target = Arc::new(Target::default());
            target.port.store(port, Ordering::SeqCst);
            target.generation.store(1, Ordering::SeqCst);
            let (t, s) = (target.clone(), stop.clone());
            let ask = ask.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("checker-{slot}"))
                    .spawn(move || poll(slot, t0, &t, &s, &ask))
                    .unwrap(),
            );
            targets.push(target);
        }
        Checker {
            t0,
            targets,
            stop,
            threads,
        }
    }

    /// Slot `slot` now runs a new process answering on `port`.
    pub fn point(&self, slot: usize, port: u16) {
        let t = &self.targets[slot];
        t.generation.fetch_add(1, Ordering::SeqCst);
        t.port.store(port, Ordering::SeqCst);
    }

    /// Slot `slot` has no process (about to be killed, or killed). First its poller makes two
    /// more requests (up to 2 s; a dead process fails them at once), so that a term the caller
    /// has just seen, and is about to end, is in the record however late a loaded machine
    /// schedules the poller.
    pub fn down(&self, slot: usize) {
        let t = &self.targets[slot];
        if t.port.load(Ordering::SeqCst) != 0 {
            two_more(&t.polled);
        }
        t.port.store(0, Ordering::SeqCst);
    }

    /// Wait (up to 2 s) until slot `slot` has answered a request sent after this call, so that
    /// what the caller just saw of it (a term that may end a moment later) is in the record,
    /// however late a loaded machine schedules the poller.
    pub fn sync(&self, slot: usize) {
        two_more(&self.targets[slot].answered);
    }

    /// Time since the checker started.
    pub fn now(&self) -> Duration {
        self.t0.elapsed()
    }

    /// Stop polling and hand over what was seen. Every sidecar must answer (not be stopped).
    ///
    /// First every running slot answers a request sent after this call (up to 2 s), so the state
    /// the caller just observed through its own requests is in the record too, however late a
    /// loaded machine schedules the pollers.
    pub fn finish(self) -> Observations {
        let since: Vec<Option<u64>> = self
            .targets
            .iter()
            .map(|t| {
                (t.port.load(Ordering::SeqCst) != 0).then(|| t.answered.load(Ordering::SeqCst))
            })
            .collect();
        // Two more answers: the first may come from a request already in flight.
        let caught_up = || {
            self.targets
                .iter()
                .zip(&since)
                .all(|(t, s)| s.is_none_or(|n| t.answered.load(Ordering::SeqCst) >= n + 2))
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        while !caught_up() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        self.stop.store(true, Ordering::SeqCst);
        let mut by_lease: Vec<Vec<Segment>> = Vec::new();
        let mut stats = Vec::new();
        for t in self.threads {
            let (seg, st) = t.join().expect("checker thread");
            by_lease.resize(seg.len().max(by_lease.len()), Vec::new());
            for (all, one) in by_lease.iter_mut().zip(seg) {
                all.extend(one);
            }
            stats.push(st);
        }
        Observations {
            segments: by_lease.first().cloned().unwrap_or_default(),
            by_lease,
            stats,
        }
    }
}

/// The JSON fields the checker needs.
#[derive(serde::Deserialize)]
struct Answer {
    #[serde(default)]
    lease: Option<String>,
    is_leader: bool,
    fencing_token: Option<u64>,
}

fn poll(
    slot: usize,
    t0: Instant,
    target: &Target,
    stop: &AtomicBool,
    ask: &Ask,
) -> (Vec<Vec<Segment>>, PollStats) {
    let get = ask.head();
    let mut by_lease: Vec<Vec<Segment>> = vec![Vec::new(); ask.leases()];
    let mut stats = PollStats {
        spacing_ms: vec![0; 1001],
        ..PollStats::default()
    };
    let mut conn: Option<(u16, u32, BufReader<TcpStream>)> = None;
    let mut gap = true;
    let mut last_sent: Option<Instant> = None;
    while !stop.load(Ordering::SeqCst) {
        let port = target.port.load(Ordering::SeqCst);
        let generation = target.generation.load(Ordering::SeqCst);
        if port == 0 {
            conn = None;
            gap = true;
            last_sent = None;
            std::thread::sleep(POLL_EVERY);
            continue;
        }
        if conn
            .as_ref()
            .is_none_or(|(p, g, _)| (*p, *g) != (port, generation))
        {
            conn = TcpStream::connect(("127.0.0.1", port)).ok().map(|s| {
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                (port, generation, BufReader::new(s))
            });
            last_sent = None;
        }
        let sent = Instant::now();
        let answer = conn
            .as_mut()
            .and_then(|(_, _, c)| request(c, &get))
            .and_then(|body| ask.read(&body));
        let received = Instant::now();
        target.polled.fetch_add(1, Ordering::SeqCst);
        let Some(answers) = answer else {
            stats.failures += 1;
            conn = None;
            gap = true;
            std::thread::sleep(POLL_EVERY);
            continue;
        };
        if let Some(prev) = last_sent {
            let ms = (sent - prev).as_millis().min(1000) as usize;
            stats.spacing_ms[ms] += 1;
        }
        last_sent = Some(sent);
        stats.answers += 1;
        target.answered.fetch_add(1, Ordering::SeqCst);
        let at = (sent - t0, received - t0);
        for (segments, a) in by_lease.iter_mut().zip(answers) {
            let token = if a.is_leader { a.fencing_token } else { None };
            match segments.last_mut() {
                Some(s)
                    if !gap
                        && s.generation == generation
                        && s.is_leader == a.is_leader
                        && s.token == token =>
                {
                    s.last = at;
                    s.answers += 1;
                }
                _ => segments.push(Segment {
                    slot,
                    generation,
                    is_leader: a.is_leader,
                    token,
                    first: at,
                    last: at,
                    answers: 1,
                }),
            }
        }
        gap = false;
        std::thread::sleep(POLL_EVERY);
    }
    (by_lease, stats)
}

/// One `GET` (`get` is the request's head) on a keep-alive connection: the 200 answer's body.
fn request(c: &mut BufReader<TcpStream>, get: &str) -> Option<Vec<u8>> {
    c.get_mut().write_all(get.as_bytes()).ok()?;
    let mut line = String::new();
    c.read_line(&mut line).ok()?;
    if !line.starts_with("HTTP/1.1 200") {
        return None;
    }
    let mut length = None;
    loop {
        line.clear();
        c.read_line(&mut line).ok()?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    c.read_exact(&mut body).ok()?;
    Some(body)
}

//! The one RESP client of the suite, independent of the code under test: command encoding,
//! reply framing, and a connection that reads replies blocking or polled. The floors
//! (`floors.rs`) and the release-notice subscriber build on it; the async floor shares the
//! framing ([`Replies`]) over a tokio socket.

use std::io::{Read, Write};
use std::net::TcpStream;

/// A command as a RESP array of bulk strings.
pub fn command(args: &[&str]) -> Vec<u8> {
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    req.into_bytes()
}

/// Where the RESP2 reply starting at `at` ends, if all of it has arrived.
fn frame_end(b: &[u8], at: usize) -> Option<usize> {
    let nl = at + b.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let len = || -> i64 {
        std::str::from_utf8(&b[at + 1..nl])
            .ok()
            .and_then(|n| n.parse().ok())
            .expect("RESP length")
    };
    match b[at] {
        b'$' => match usize::try_from(len()) {
            Ok(n) => Some(nl + 2 + n + 2).filter(|&end| b.len() >= end),
            Err(_) => Some(nl + 2),
        },
        b'*' => (0..len().max(0)).try_fold(nl + 2, |pos, _| frame_end(b, pos)),
        _ => Some(nl + 2),
    }
}

/// Bytes read from one node, split into whole replies.
#[derive(Default)]
pub struct Replies {
    /// Read but not yet taken: whole replies first, then perhaps part of the next one.
    pub buf: Vec<u8>,
}

impl Replies {
    /// The first whole reply, removed from the buffer.
    pub fn take(&mut self) -> Option<Vec<u8>> {
        let end = frame_end(&self.buf, 0)?;
        Some(self.buf.drain(..end).collect())
    }
}

/// Whether a reply has `:1` at line `line`: a grant (`*3 :time :1 :epoch`) at 2, a bare `:1`
/// at 0.
pub fn says_yes(reply: &[u8], line: usize) -> bool {
    reply.split(|&b| b == b'\n').nth(line) == Some(b":1\r")
}

/// A blocking connection to one node, with `TCP_NODELAY`.
pub struct Conn {
    /// The socket; non-blocking after [`Conn::nonblocking`].
    stream: TcpStream,
    /// Replies read and not yet taken.
    replies: Replies,
}

impl Conn {
    /// Connect to a `redis://host:port` URL (or a plain `host:port`).
    pub fn connect(url: &str) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(url.trim_start_matches("redis://"))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            replies: Replies::default(),
        })
    }

    /// Switch to polled reads ([`Conn::poll`]).
    pub fn nonblocking(self) -> Conn {
        self.stream.set_nonblocking(true).expect("non-blocking");
        self
    }

    /// Write `cmd` (already encoded).
    pub fn send(&mut self, cmd: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(cmd)
    }

    /// The next reply, waiting for it; `None` when the node closed the connection.
    pub fn reply(&mut self) -> Option<Vec<u8>> {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(r) = self.replies.take() {
                return Some(r);
            }
            match self.stream.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.replies.buf.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Read whatever arrived without waiting; the number of whole replies taken.
    pub fn poll(&mut self) -> usize {
        let mut buf = [0u8; 256];
        match self.stream.read(&mut buf) {
            Ok(0) => panic!("bare client: node closed the connection"),
            Ok(n) => self.replies.buf.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("bare client read: {e}"),
        }
        std::iter::from_fn(|| self.replies.take()).count()
    }
}

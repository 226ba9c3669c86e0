//! The floors under any lock client: the same rounds as an acquire + release over hand-written
//! sockets, so the acquire section can say how far from what the machine allows each client is.
//! [`Bare`] waits for every reply, [`BareQuorum`] busy-polls and decides at the quorum-th, and
//! `direct::Direct` is the async version with our scripts.

use redlock_elector::redlock::{math, scripts};

use crate::resp::{self, Conn};

/// The floor under any client: the same two rounds (SET NX PX, then DEL) over plain blocking
/// sockets with TCP_NODELAY, no runtime, no library, no script: write to every node, then read
/// every reply. Nothing that takes and releases a lock on these nodes can be faster here.
pub struct Bare {
    /// One connection per node.
    conns: Vec<Conn>,
    /// `SET key bare NX PX 1000`, encoded once.
    set: Vec<u8>,
    /// `DEL key`, encoded once.
    del: Vec<u8>,
}

impl Bare {
    pub fn connect(urls: &[String], key: &str) -> Bare {
        Bare {
            conns: urls
                .iter()
                .map(|u| Conn::connect(u).expect("bare client connect"))
                .collect(),
            set: resp::command(&["SET", key, "bare", "NX", "PX", "1000"]),
            del: resp::command(&["DEL", key]),
        }
    }

    /// One round: the command to every node, then one single-line reply from each.
    fn round(conns: &mut [Conn], cmd: &[u8]) {
        for c in conns.iter_mut() {
            c.send(cmd).expect("bare write");
        }
        for c in conns.iter_mut() {
            let line = c.reply().expect("bare read");
            assert!(
                line.starts_with(b"+") || line.starts_with(b":"),
                "bare client: unexpected reply {:?}",
                String::from_utf8_lossy(&line)
            );
        }
    }

    pub fn acquire_release(&mut self) {
        Bare::round(&mut self.conns, &self.set);
        Bare::round(&mut self.conns, &self.del);
    }
}

/// The library's acquire and release commands for the floor clients that run our scripts, with
/// its arguments: a fresh value and a rising fencing proposal per acquisition, so every grant
/// also writes the epoch. The scripts are on the nodes already: the library's handshake loaded
/// them (the script cache is per server) before any floor client runs.
pub struct ScriptedCommands {
    /// The lease key.
    key: String,
    /// The fencing epoch beside it.
    epoch_key: String,
    /// The last fencing proposal sent; rises by one per acquisition.
    proposed: u64,
}

impl ScriptedCommands {
    pub fn new(key: &str) -> ScriptedCommands {
        ScriptedCommands {
            key: key.to_string(),
            epoch_key: format!("{key}:epoch"),
            proposed: 0,
        }
    }

    /// The next (acquire, release) pair. A grant replies `*3 :time :1 :epoch`, a release
    /// `*2 :time :1`.
    pub fn next(&mut self) -> (Vec<u8>, Vec<u8>) {
        let scripts = scripts::scripts();
        let (acquire, release) = (&scripts.acquire, &scripts.release);
        self.proposed += 1;
        let value = format!("bench#{:048x}", self.proposed);
        let proposed = self.proposed.to_string();
        let (key, epoch_key) = (self.key.as_str(), self.epoch_key.as_str());
        let next_key = format!("{key}:next");
        #[rustfmt::skip]
        let take = resp::command(&[
            "EVALSHA", &acquire.sha, "3", key, epoch_key, &next_key, &value, "1000", &proposed,
            "take", "bench",
        ]);
        #[rustfmt::skip]
        let give = resp::command(&[
            "EVALSHA", &release.sha, "2", key, &next_key, &value, "", "", "", "0",
        ]);
        (take, give)
    }
}

/// The same floor, deciding each round at the quorum-th reply like a Redlock client may:
/// non-blocking sockets, busy-polled (faster to notice a reply than any readiness wait). Replies
/// still owed by slower nodes are collected by the next round's poll, untimed between rounds.
/// `scripted` runs our acquire and release scripts instead of `SET`/`DEL`.
pub struct BareQuorum {
    /// One polled connection per node.
    conns: Vec<Conn>,
    /// Replies still owed per node.
    owed: Vec<usize>,
    /// `SET NX PX` and `DEL`, encoded once (unused when `scripted`).
    set_del: (Vec<u8>, Vec<u8>),
    /// Our scripts instead of `SET`/`DEL`.
    scripted: Option<ScriptedCommands>,
}

impl BareQuorum {
    pub fn connect(urls: &[String], key: &str, scripted: bool) -> BareQuorum {
        let bare = Bare::connect(urls, key);
        BareQuorum {
            owed: vec![0; bare.conns.len()],
            conns: bare.conns.into_iter().map(Conn::nonblocking).collect(),
            set_del: (bare.set, bare.del),
            scripted: scripted.then(|| ScriptedCommands::new(key)),
        }
    }

    /// Read whatever arrived, counting replies.
    fn poll(&mut self) {
        for (c, owed) in self.conns.iter_mut().zip(&mut self.owed) {
            *owed = owed
                .checked_sub(c.poll())
                .expect("bare client: more replies than commands");
        }
    }

    /// Send `cmd` everywhere and return once a quorum of nodes owes nothing.
    fn round(&mut self, cmd: &[u8]) {
        let quorum = math::quorum(self.conns.len());
        for (c, owed) in self.conns.iter_mut().zip(&mut self.owed) {
            c.send(cmd).expect("bare write");
            *owed += 1;
        }
        while self.owed.iter().filter(|&&o| o == 0).count() < quorum {
            self.poll();
            std::hint::spin_loop();
        }
    }

    pub fn acquire_release(&mut self) {
        if let Some(commands) = &mut self.scripted {
            let (take, give) = commands.next();
            self.round(&take);
            self.round(&give);
            return;
        }
        // Taken out and put back: no allocation inside the timed rounds.
        let (set, del) = std::mem::take(&mut self.set_del);
        self.round(&set);
        self.round(&del);
        self.set_del = (set, del);
    }

    /// Collect every reply still owed (between timed runs).
    pub fn settle(&mut self) {
        while self.owed.iter().any(|&o| o > 0) {
            self.poll();
        }
    }
}

//! The `run` tests' child (`tests/exec/lease-child.c`) and the checker of its records: each
//! child writes its own start, a beat every millisecond and its stop, and two children of one
//! lease must never have been alive at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::base::cc;

/// The child, built once per test process.
pub fn lease_child() -> PathBuf {
    use std::sync::OnceLock;
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| cc("tests/exec/lease-child.c", "lease-child", &[]))
        .clone()
}

/// One child's life as it recorded it: from its start record to its last record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Life {
    /// The sidecar's identity it ran under.
    pub id: String,
    /// Its pid.
    pub pid: u32,
    /// The fencing token of its term.
    pub token: Option<u64>,
    /// CLOCK_MONOTONIC, ns.
    pub start: u64,
    /// Its last record (a beat, or its stop), ns.
    pub last: u64,
    /// Whether it wrote a stop record (it did not when SIGKILL ended it).
    pub stopped: bool,
}

/// Every child's life in the file, in order of start.
pub fn lives(file: &Path) -> Vec<Life> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    let mut by_pid: BTreeMap<u32, Life> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        match f.first().copied() {
            Some("start") if f.len() == 5 => {
                let (Some(pid), Some(ns)) = (num(2), num(4)) else {
                    continue;
                };
                by_pid.insert(
                    pid as u32,
                    Life {
                        id: f[1].to_string(),
                        pid: pid as u32,
                        token: num(3),
                        start: ns,
                        last: ns,
                        stopped: false,
                    },
                );
            }
            Some(kind @ ("beat" | "stop")) if f.len() == 4 => {
                let (Some(pid), Some(ns)) = (num(2), num(3)) else {
                    continue;
                };
                if let Some(l) = by_pid.get_mut(&(pid as u32)) {
                    l.last = l.last.max(ns);
                    l.stopped |= kind == "stop";
                }
            }
            _ => {}
        }
    }
    let mut all: Vec<Life> = by_pid.into_values().collect();
    all.sort_by_key(|l| l.start);
    all
}

/// An overlap: `later` started while `earlier` was still alive, by its own records.
#[derive(Clone, Debug)]
pub struct Overlap {
    pub earlier: Life,
    pub later: Life,
    pub overlap: Duration,
}

/// Every pair of lives that overlap.
pub fn overlaps(lives: &[Life]) -> Vec<Overlap> {
    let mut found = Vec::new();
    for (i, a) in lives.iter().enumerate() {
        for b in &lives[i + 1..] {
            if b.start <= a.last {
                found.push(Overlap {
                    earlier: a.clone(),
                    later: b.clone(),
                    overlap: Duration::from_nanos(a.last.min(b.last) - b.start),
                });
            }
        }
    }
    found
}

/// The gaps between one child's last record and the next one's start, in order.
pub fn gaps(lives: &[Life]) -> Vec<Duration> {
    lives
        .windows(2)
        .filter(|w| w[1].start > w[0].last)
        .map(|w| Duration::from_nanos(w[1].start - w[0].last))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checker_finds_an_overlap_and_gaps() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("lives");
        std::fs::write(
            &f,
            "start a 10 1 100\nbeat a 10 150\nstop a 10 200\n\
             start b 11 2 190\nbeat b 11 300\n\
             start c 12 3 400\nbeat c 12 500\n",
        )
        .unwrap();
        let l = lives(&f);
        assert_eq!(l.len(), 3);
        assert!(l[0].stopped && !l[1].stopped);
        let o = overlaps(&l);
        assert_eq!(o.len(), 1);
        assert_eq!((o[0].earlier.pid, o[0].later.pid), (10, 11));
        assert_eq!(o[0].overlap, Duration::from_nanos(10));
        assert_eq!(gaps(&l), vec![Duration::from_nanos(100)]);
    }
}

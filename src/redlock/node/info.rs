//! The pure rules a node's `INFO` feeds: what the reply says, whether the node may count and
//! until when a restart quarantines it. Plain functions on any time type, so the model check
//! (`tests/model.rs`) runs the same code on integer time.

use std::time::Duration;

use tokio::time::Instant;

/// Why a node does not count toward a quorum right now. Generic over the time type only so the
/// model check (`tests/model.rs`) can run [`classify_at`] and [`counts_from_at`] on integer time;
/// the sidecar uses the default, `Instant`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Exclusion<T = Instant> {
    /// Restarted recently (uptime below ttl + 1 s, or run_id changed): until this instant.
    Restarted { until: T },
    /// The node is a replica.
    Replica,
    /// Its maxmemory-policy may evict keys with a TTL.
    Evicting(String),
}

/// Parsed fields of `INFO`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// `run_id`: changes on every restart.
    pub run_id: String,
    /// `uptime_in_seconds` (one-second resolution).
    pub uptime_secs: u64,
    /// `role`: master | slave.
    pub role: String,
    /// `maxmemory_policy`.
    pub maxmemory_policy: String,
}

/// Parse the fields we need from an `INFO` reply.
pub fn parse_info(text: &str) -> Info {
    let mut info = Info::default();
    for line in text.lines() {
        let Some((k, v)) = line.trim().split_once(':') else {
            continue;
        };
        match k {
            "run_id" => info.run_id = v.to_string(),
            // Uptime is computed from the wall clock: after a backward step it is negative, which
            // says nothing about a restart (run_id does, and the clock watch quarantines the
            // step itself), so it reads as long. Anything else unreadable reads as a restart.
            "uptime_in_seconds" => {
                info.uptime_secs = match v.trim().parse::<i64>() {
                    Ok(secs) if secs < 0 => u64::MAX,
                    Ok(secs) => secs as u64,
                    Err(_) => 0,
                }
            }
            "role" => info.role = v.to_string(),
            "maxmemory_policy" => info.maxmemory_policy = v.to_string(),
            _ => {}
        }
    }
    info
}

/// Whether a node with this INFO may count, and until when it is quarantined.
///
/// `previous_run_id` is the run_id seen on the previous connection. Uptime has one-second
/// resolution and is truncated, so the real uptime may be up to 1 s more than reported; treating
/// it as the reported value errs on the side of a longer quarantine.
pub fn classify(
    info: &Info,
    previous_run_id: Option<&str>,
    ttl: Duration,
    now: Instant,
) -> Option<Exclusion> {
    classify_at(info, previous_run_id, ttl, now)
}

/// [`classify`] on any time type (the model check runs it on integer µs).
pub fn classify_at<T: std::ops::Add<Duration, Output = T>>(
    info: &Info,
    previous_run_id: Option<&str>,
    ttl: Duration,
    now: T,
) -> Option<Exclusion<T>> {
    if info.role == "slave" || info.role == "replica" {
        return Some(Exclusion::Replica);
    }
    let p = info.maxmemory_policy.as_str();
    if p.starts_with("allkeys-") || p.starts_with("volatile-") {
        return Some(Exclusion::Evicting(p.to_string()));
    }
    let window = ttl + Duration::from_secs(1);
    let by_uptime = window
        .checked_sub(Duration::from_secs(info.uptime_secs))
        .filter(|d| !d.is_zero());
    let restarted = previous_run_id.is_some_and(|prev| prev != info.run_id);
    let wait = match (by_uptime, restarted) {
        (_, true) => Some(window),
        (Some(d), false) => Some(d),
        (None, false) => None,
    };
    wait.map(|d| Exclusion::Restarted { until: now + d })
}

/// Whether a restart quarantine keeps a node from counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quarantine {
    /// It does: the default.
    Enforced,
    /// It does not: the test-only `--unsafe-disable-quarantine`.
    Ignored,
}

/// From when a yes of a node counts: the later of the end of its restart quarantine (unless
/// [`Quarantine::Ignored`]) and `clock_from`, what its clock watch allows
/// ([`crate::redlock::clock::Watch::counts_from`]); `None` while unknown (no clock reading yet)
/// or never (replica, evicting). Pure, on any time type: [`super::Node::counts_from`] and the
/// model check run it.
pub fn counts_from_at<T: Ord + Copy>(
    exclusion: Option<&Exclusion<T>>,
    quarantine: Quarantine,
    clock_from: Option<T>,
) -> Option<T> {
    let restarted = match exclusion {
        _ if quarantine == Quarantine::Ignored => None,
        None => None,
        Some(Exclusion::Restarted { until }) => Some(*until),
        Some(_) => return None,
    };
    let clock = clock_from?;
    Some(restarted.map_or(clock, |r| r.max(clock)))
}

/// Whether a restart quarantine running until `until` is why the node does not count at `now`,
/// given when it counts (`from`, [`counts_from_at`]): only while it decides that moment. A node
/// whose clock watch ends later waits for the watch (a sidecar started beside a node restarted
/// a few seconds before it), and `/leader`'s `waiting_for` says so.
pub fn quarantine_decides<T: Ord + Copy>(until: T, now: T, from: Option<T>) -> bool {
    now < until && from.is_none_or(|from| until >= from)
}

/// The exclusion after a fresh INFO reading: a restart quarantine already running at `now` is
/// never shortened by a later, more relaxed reading.
pub fn keep_running_quarantine<T: Ord + Copy>(
    old: Option<&Exclusion<T>>,
    fresh: Option<Exclusion<T>>,
    now: T,
) -> Option<Exclusion<T>> {
    let running = match old {
        Some(Exclusion::Restarted { until }) if *until > now => *until,
        _ => return fresh,
    };
    match fresh {
        Some(Exclusion::Restarted { until }) => Some(Exclusion::Restarted {
            until: until.max(running),
        }),
        None => Some(Exclusion::Restarted { until: running }),
        other => other,
    }
}

/// Whether the exclusion changed in kind (worth a log line), not merely a running quarantine's
/// end moving; a new run_id is a new restart even while quarantined.
pub fn exclusion_changed<T: PartialEq>(
    old: Option<&Exclusion<T>>,
    new: Option<&Exclusion<T>>,
    run_id_changed: bool,
) -> bool {
    match (old, new) {
        (Some(Exclusion::Restarted { .. }), Some(Exclusion::Restarted { .. })) => run_id_changed,
        (old, new) => old != new,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(uptime: u64, run_id: &str) -> Info {
        Info {
            run_id: run_id.into(),
            uptime_secs: uptime,
            role: "master".into(),
            maxmemory_policy: "noeviction".into(),
        }
    }

    #[test]
    fn parses_info() {
        let i = parse_info(
            "# Server\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n# Replication\r\nrole:master\r\nmaxmemory_policy:noeviction\r\n",
        );
        assert_eq!(i, info(42, "abc"));
    }

    #[test]
    fn negative_uptime_after_a_backward_clock_step_is_not_a_restart() {
        let i = parse_info("run_id:abc\r\nuptime_in_seconds:-24\r\nrole:master\r\n");
        assert_eq!(i.uptime_secs, u64::MAX);
        let ttl = Duration::from_secs(1);
        assert_eq!(classify(&i, Some("abc"), ttl, Instant::now()), None);
        assert_eq!(parse_info("uptime_in_seconds:x\r\n").uptime_secs, 0);
    }

    #[test]
    fn counts_from_is_the_later_of_quarantine_and_clock() {
        const ON: Quarantine = Quarantine::Enforced;
        const OFF: Quarantine = Quarantine::Ignored;
        let r = Exclusion::Restarted { until: 50 };
        assert_eq!(counts_from_at(Some(&r), ON, Some(20)), Some(50));
        assert_eq!(counts_from_at(Some(&r), ON, Some(70)), Some(70));
        assert_eq!(counts_from_at(Some(&r), OFF, Some(20)), Some(20));
        assert_eq!(counts_from_at(None, ON, Some(20)), Some(20));
        assert_eq!(counts_from_at(Some(&r), ON, None), None);
        assert_eq!(counts_from_at(Some(&Exclusion::Replica), ON, Some(1)), None);
        assert_eq!(
            counts_from_at(Some(&Exclusion::Replica), OFF, Some(1)),
            Some(1)
        );
    }

    #[test]
    fn the_quarantine_is_the_reason_only_while_it_decides() {
        // Running, and it ends after the watch: it decides.
        assert!(quarantine_decides(50, 10, Some(50)));
        // Running, but the watch ends later (counts from 70): the watch is the reason.
        assert!(!quarantine_decides(50, 10, Some(70)));
        // Over.
        assert!(!quarantine_decides(50, 50, Some(50)));
        // The watch's end unknown: the running quarantine is the reason.
        assert!(quarantine_decides(50, 10, None));
    }

    #[test]
    fn quarantine_rules() {
        let now = Instant::now();
        let ttl = Duration::from_secs(1);
        assert_eq!(classify(&info(100, "a"), None, ttl, now), None);
        assert_eq!(
            classify(&info(0, "a"), None, ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(2)
            })
        );
        assert_eq!(
            classify(&info(1, "a"), None, ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(1)
            })
        );
        assert_eq!(classify(&info(2, "a"), None, ttl, now), None);
        // A changed run_id quarantines for the whole window even if uptime looks long.
        assert_eq!(
            classify(&info(100, "b"), Some("a"), ttl, now),
            Some(Exclusion::Restarted {
                until: now + Duration::from_secs(2)
            })
        );
        assert_eq!(classify(&info(100, "a"), Some("a"), ttl, now), None);
        let mut r = info(100, "a");
        r.role = "slave".into();
        assert_eq!(classify(&r, None, ttl, now), Some(Exclusion::Replica));
        let mut e = info(100, "a");
        e.maxmemory_policy = "volatile-lru".into();
        assert_eq!(
            classify(&e, None, ttl, now),
            Some(Exclusion::Evicting("volatile-lru".into()))
        );
    }

    #[test]
    fn a_running_quarantine_is_never_shortened() {
        let r = |until| Some(Exclusion::Restarted { until });
        assert_eq!(keep_running_quarantine(r(50).as_ref(), None, 10), r(50));
        assert_eq!(keep_running_quarantine(r(50).as_ref(), r(30), 10), r(50));
        assert_eq!(keep_running_quarantine(r(50).as_ref(), r(70), 10), r(70));
        assert_eq!(keep_running_quarantine(r(50).as_ref(), None, 60), None);
        assert_eq!(
            keep_running_quarantine(r(50).as_ref(), Some(Exclusion::Replica), 10),
            Some(Exclusion::Replica)
        );
        assert!(!exclusion_changed(r(50).as_ref(), r(70).as_ref(), false));
        assert!(exclusion_changed(r(50).as_ref(), r(70).as_ref(), true));
        assert!(exclusion_changed(None, r(70).as_ref(), false));
        assert!(!exclusion_changed::<u64>(None, None, true));
    }
}

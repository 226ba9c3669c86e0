//! The stall watchdog and the election loop's liveness, read by `/healthz`.
//!
//! A timer of the election loop that fires late (CPU starvation, SIGSTOP, a long GC pause of a
//! neighbour) means the lease deadline may have passed unseen: the watchdog notices, the leader
//! steps down, and `/healthz` fails until the loop has been on time again for a while.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The watchdog's tick period is half the margin, within these bounds: frequent enough to see
/// short stalls, rare enough to spare idle wake-ups at long ttls.
const MIN_PERIOD: Duration = Duration::from_millis(50);
/// See [`MIN_PERIOD`].
const MAX_PERIOD: Duration = Duration::from_millis(500);
/// How long ticks must be on time again before a stall counts as over.
const RECOVER_AFTER: Duration = Duration::from_secs(1);

/// Liveness of the election loop, read by `/healthz`.
pub struct LoopHealth {
    /// Set while the loop's timers slip beyond the margin; cleared after a second on time.
    pub stalled: AtomicBool,
    /// Set while the election task runs.
    pub alive: AtomicBool,
    /// Counts detected stalls; the leader loop watches it to step down.
    stall_seq: watch::Sender<u64>,
    /// Origin of `last_tick_ms`.
    base: Instant,
    /// The watchdog's last tick, in ms since `base`.
    last_tick_ms: AtomicU64,
    /// A tick older than this (ms) is a stall in progress; 0 until the watchdog runs.
    stale_after_ms: AtomicU64,
}

impl Default for LoopHealth {
    fn default() -> Self {
        LoopHealth {
            stalled: AtomicBool::new(false),
            alive: AtomicBool::new(false),
            stall_seq: watch::channel(0).0,
            base: Instant::now(),
            last_tick_ms: AtomicU64::new(0),
            stale_after_ms: AtomicU64::new(0),
        }
    }
}

impl LoopHealth {
    /// Whether `/healthz` should answer 200, evaluated at `now`. Like leadership, this is
    /// judged at answer time: right after a pause (SIGSTOP, starvation) the HTTP handler may run
    /// before the watchdog has noticed, and must not answer from the stale flag alone.
    pub fn healthy_at(&self, now: Instant) -> bool {
        let stale_after = self.stale_after_ms.load(Ordering::SeqCst);
        let since_tick = (now.saturating_duration_since(self.base).as_millis() as u64)
            .saturating_sub(self.last_tick_ms.load(Ordering::SeqCst));
        self.alive.load(Ordering::SeqCst)
            && !self.stalled.load(Ordering::SeqCst)
            && (stale_after == 0 || since_tick <= stale_after)
    }

    /// Whether `/healthz` should answer 200 now.
    pub fn healthy(&self) -> bool {
        self.healthy_at(Instant::now())
    }

    /// Stalls detected from now on (the leader steps down on the next one).
    pub(super) fn stalls(&self) -> watch::Receiver<u64> {
        let mut rx = self.stall_seq.subscribe();
        rx.borrow_and_update();
        rx
    }

    fn tick(&self, now: Instant) {
        let ms = now.saturating_duration_since(self.base).as_millis() as u64;
        self.last_tick_ms.store(ms, Ordering::SeqCst);
    }

    /// Mark the election task running until the guard drops.
    pub(super) fn alive(self: &Arc<Self>) -> AliveGuard {
        self.alive.store(true, Ordering::SeqCst);
        AliveGuard(self.clone())
    }
}

/// Clears [`LoopHealth::alive`] when the election task ends, however it ends.
pub(super) struct AliveGuard(
    /// The health whose `alive` flag this guard clears.
    Arc<LoopHealth>,
);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::SeqCst);
    }
}

/// Tick every `margin / 2` (50 ms..=500 ms); when a tick is late by more than `margin`, mark the
/// loop stalled, tell the elector to step down, and keep `/healthz` failing until ticks have been
/// on time for a second.
pub async fn watchdog(
    health: Arc<LoopHealth>,
    metrics: Metrics,
    margin: Duration,
    stop: CancellationToken,
) {
    // A pause longer than margin + period always shows as a late tick. Half the margin keeps
    // that close to the margin while sparing idle wake-ups at long ttls (2 per second at the
    // default ttl of 10 s instead of 20).
    let period = (margin / 2).clamp(MIN_PERIOD, MAX_PERIOD);
    health.tick(Instant::now());
    health
        .stale_after_ms
        .store((period + margin).as_millis() as u64, Ordering::SeqCst);
    let mut next = Instant::now() + period;
    let mut last_stall: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = sleep_until(next) => {}
            _ = stop.cancelled() => return,
        }
        let now = Instant::now();
        let late = now.saturating_duration_since(next);
        if late > margin {
            tracing::warn!(
                late_ms = late.as_millis() as u64,
                "election loop stalled; stepping down until it recovers"
            );
            last_stall = Some(now);
            metrics.stall_detected();
            metrics.set_stalled(true);
            health.stalled.store(true, Ordering::SeqCst);
            health.stall_seq.send_modify(|n| *n += 1);
        } else if last_stall.is_some_and(|t| now.duration_since(t) >= RECOVER_AFTER) {
            last_stall = None;
            metrics.set_stalled(false);
            health.stalled.store(false, Ordering::SeqCst);
            tracing::info!("election loop recovered");
        }
        // After the stall flag is set, so that no answer sees a fresh tick without it.
        health.tick(now);
        next = now + period;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_judged_at_answer_time() {
        let h = LoopHealth::default();
        h.alive.store(true, Ordering::SeqCst);
        let t = h.base + Duration::from_secs(10);
        h.tick(t);
        // Before the watchdog has started, only the flags count.
        assert!(h.healthy_at(t + Duration::from_secs(5)));
        h.stale_after_ms.store(200, Ordering::SeqCst);
        assert!(h.healthy_at(t + Duration::from_millis(200)));
        // The watchdog has not ticked for longer than period + margin: a stall in progress,
        // even though it has not run to set the flag yet.
        assert!(!h.healthy_at(t + Duration::from_millis(201)));
        h.tick(t + Duration::from_millis(300));
        assert!(h.healthy_at(t + Duration::from_millis(301)));
        h.stalled.store(true, Ordering::SeqCst);
        assert!(!h.healthy_at(t + Duration::from_millis(301)));
    }
}

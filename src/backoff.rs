//! The one retry backoff: exponential from `min`, capped at `max`, each delay scaled by a factor
//! drawn uniformly from a jitter range. Used by every retry loop (Redis node reconnects, the INFO
//! watcher, the Kubernetes publisher) so they share one definition of "back off".

use std::ops::Range;
use std::time::Duration;

use rand::{Rng, RngCore};

/// Jittered exponential backoff.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// The first delay (and the delay after [`Backoff::reset`]).
    min: Duration,
    /// The largest un-jittered delay.
    max: Duration,
    /// Each delay is multiplied by a factor drawn from this range, so that replicas that failed
    /// together do not retry together.
    jitter: Range<f64>,
    /// The next un-jittered delay.
    next: Duration,
}

impl Backoff {
    /// A backoff from `min` doubling up to `max`, each delay scaled by a factor from `jitter`.
    /// `min` is clamped to `max`; an empty or negative jitter range means no jitter.
    pub fn new(min: Duration, max: Duration, jitter: Range<f64>) -> Self {
        let min = min.min(max);
        let jitter = if jitter.start >= 0.0 && jitter.start < jitter.end {
            jitter
        } else {
            1.0..1.0
        };
        Backoff {
            min,
            max,
            jitter,
            next: min,
        }
    }

    /// The delay before the next retry; doubles the next one, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter.is_empty() {
            d
        } else {
            d.mul_f64(rand::rng().random_range(self.jitter.clone()))
        }
    }

    /// After a success: start again from `min`.
    pub fn reset(&mut self) {
        self.next = self.min;
    }

    /// Lower the cap (shutdown: retry fast within the little time left).
    pub fn cap(&mut self, max: Duration) {
        self.max = max;
        self.min = self.min.min(max);
        self.next = self.next.min(max);
    }
}

/// A random delay in `range`: spreads replicas that would otherwise act at the same instant.
pub fn jitter(range: Range<Duration>) -> Duration {
    jitter_with(&mut rand::rng(), range)
}

/// [`jitter`] drawn from `rng` (the elector's state machine takes its randomness as an input).
pub fn jitter_with(rng: &mut dyn RngCore, range: Range<Duration>) -> Duration {
    if range.is_empty() {
        return range.start;
    }
    let (lo, hi) = (range.start.as_nanos() as u64, range.end.as_nanos() as u64);
    Duration::from_nanos(rng.random_range(lo..hi))
}

/// `d` scaled by a factor drawn from `factor`.
pub fn scale(d: Duration, factor: Range<f64>) -> Duration {
    scale_with(&mut rand::rng(), d, factor)
}

/// [`scale`] drawn from `rng`.
pub fn scale_with(rng: &mut dyn RngCore, d: Duration, factor: Range<f64>) -> Duration {
    if factor.is_empty() {
        return d.mul_f64(factor.start.max(0.0));
    }
    d.mul_f64(rng.random_range(factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(50 * MS, 400 * MS, 1.0..1.0);
        let got: Vec<_> = (0..6).map(|_| b.next_delay()).collect();
        assert_eq!(
            got,
            [50 * MS, 100 * MS, 200 * MS, 400 * MS, 400 * MS, 400 * MS]
        );
        b.reset();
        assert_eq!(b.next_delay(), 50 * MS);
    }

    #[test]
    fn jitter_stays_in_its_range() {
        let mut b = Backoff::new(100 * MS, 100 * MS, 0.5..1.5);
        for _ in 0..1000 {
            let d = b.next_delay();
            assert!(d >= 50 * MS && d < 150 * MS, "{d:?}");
        }
        for _ in 0..1000 {
            let d = jitter(MS..2 * MS);
            assert!(d >= MS && d < 2 * MS, "{d:?}");
            let s = scale(100 * MS, 0.75..1.25);
            assert!(s >= 75 * MS && s < 125 * MS, "{s:?}");
        }
    }

    #[test]
    fn cap_lowers_the_next_delay_and_min_is_clamped() {
        let mut b = Backoff::new(50 * MS, 2_000 * MS, 1.0..1.0);
        for _ in 0..5 {
            b.next_delay();
        }
        b.cap(30 * MS);
        assert_eq!(b.next_delay(), 30 * MS);
        b.reset();
        assert_eq!(b.next_delay(), 30 * MS);
        assert_eq!(Backoff::new(5 * MS, MS, 1.0..1.0).next_delay(), MS);
    }
}

//! The clockshift harness of [`Redis`]: the `LD_PRELOAD` library that offsets a server's wall
//! clock, and the offset and rate a test sets on a shiftable server.

use std::path::PathBuf;
use std::time::Duration;

use super::Redis;
use crate::common::base::cc;

/// The clockshift `LD_PRELOAD` library (`tests/clockshift/clockshift.c`), built once per test
/// process with `cc`: it offsets a process's wall clock by the milliseconds in a file.
pub fn clockshift_lib() -> PathBuf {
    use std::sync::OnceLock;
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        cc(
            "tests/clockshift/clockshift.c",
            "libclockshift.so",
            &["-shared", "-fPIC"],
        )
    })
    .clone()
}

/// A shiftable server's wall-clock setting: `base_ns` at the real instant `anchor_ns` (ns since
/// the epoch), growing by `ppm` of the real time elapsed since.
#[derive(Clone, Copy, Default)]
pub(super) struct ClockSetting {
    base_ns: i64,
    ppm: i64,
    anchor_ns: i64,
}

impl ClockSetting {
    fn offset_ns(&self, real_ns: i64) -> i64 {
        self.base_ns + (real_ns - self.anchor_ns) * self.ppm / 1_000_000
    }
}

/// The true wall clock (the harness is never shifted), ns since the epoch.
pub fn unix_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the wall clock is after 1970")
        .as_nanos() as i64
}

impl Redis {
    pub(super) fn offset_file(&self) -> PathBuf {
        self.dir.path().join("clock-offset-ms")
    }

    /// Set the server's wall-clock offset to `offset_ms` (absolute, from true time); takes
    /// effect within a millisecond. A restarted server keeps the offset in force. A rate set
    /// with [`Redis::set_clock_rate`] goes on from this offset.
    pub fn shift_clock(&self, offset_ms: i64) {
        self.set_clock(|c| c.base_ns = offset_ms * 1_000_000);
    }

    /// Move the wall clock by `delta_ms` from where it is.
    pub fn jump_clock(&self, delta_ms: i64) {
        self.set_clock(|c| c.base_ns += delta_ms * 1_000_000);
    }

    /// Let the wall clock run at `1 + ppm/10^6` of the true rate from now on, going on from
    /// the offset it has reached (no step); 0 stops the drift and keeps the offset.
    pub fn set_clock_rate(&self, ppm: i64) {
        self.set_clock(|c| c.ppm = ppm);
    }

    /// The wall-clock offset in force, ms (what a rate has added so far included).
    pub fn clock_offset_ms(&self) -> i64 {
        let c = *self.clock.lock().unwrap();
        c.offset_ns(unix_ns()).div_euclid(1_000_000)
    }

    /// The clock's rate in force, ppm.
    pub fn clock_rate_ppm(&self) -> i64 {
        self.clock.lock().unwrap().ppm
    }

    /// Re-anchor the setting at now (so the offset reached so far is its base), edit it, and
    /// write it for the library (`tests/clockshift/clockshift.c` describes the format).
    fn set_clock(&self, edit: impl FnOnce(&mut ClockSetting)) {
        assert!(
            self.shiftable,
            "start the server with Redis::start_shiftable()"
        );
        let mut c = self.clock.lock().unwrap();
        let now = unix_ns();
        c.base_ns = c.offset_ns(now);
        c.anchor_ns = now;
        edit(&mut c);
        let ms = format!(
            "{}{}.{:06}",
            if c.base_ns < 0 { "-" } else { "" },
            c.base_ns.unsigned_abs() / 1_000_000,
            c.base_ns.unsigned_abs() % 1_000_000
        );
        let text = match c.ppm {
            // The one-number form, as before rates existed.
            0 => ms,
            ppm => format!("{ms} {ppm} {}", c.anchor_ns),
        };
        let tmp = self.dir.path().join("clock-offset-ms.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.offset_file()).unwrap();
        drop(c);
        // The library re-reads the file at most once per ms of its own monotonic time.
        std::thread::sleep(Duration::from_millis(3));
    }
}

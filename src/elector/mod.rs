//! The follower ⇄ leader state machine and its timers. Owns the truth about leadership and
//! publishes it as a `watch` of [`Leadership`]; everything else only reads that channel.
//!
//! - `machine/`: every decision, with no I/O ([`machine::Machine`]): when to attempt, watch,
//!   renew, step down, whom to name, how long to wait after a notice, when to hand over to a
//!   preferred candidate. Its module doc lists the events, commands and states.
//! - `driver.rs`: runs the machine's commands against the nodes through [`Rounds`] ([`Live`]:
//!   the real [`Redlock`]) and turns the outside world into its events.
//! - `watchdog.rs`: the stall watchdog and [`LoopHealth`] for `/healthz`.
//! - `settings.rs`: [`Timing`], [`Preference`], [`Standing`].
//! - `balance.rs`: `lease.shards`, the shards spread evenly over the replicas.

pub mod balance;
mod driver;
pub mod machine;
#[cfg(test)]
mod memory;
mod rounds;
mod settings;
mod step_down;
mod watchdog;

pub use self::driver::{Elector, Handles};
pub use self::rounds::{Live, Rounds};
pub use self::settings::{AppGate, GRACE_MARGIN, Preference, Standing, Timing, grace};
pub use self::step_down::{StepDown, StepDownRequest};
pub use self::watchdog::{LoopHealth, watchdog};
pub use crate::leadership::{CandidacyView, StepDownReason};

//! Test harness: real `redis-server` processes on loopback ports and the real sidecar binary.
//! Everything started here is killed on drop, so a failing test leaves nothing behind.
//!
//! One file per concept: `redis.rs` (the servers), `sidecar.rs` (the binary as a process),
//! `http.rs`, `pki.rs` (certificates), `rollout.rs` (rollouts and the leadership observer),
//! `base.rs` (the small helpers they all use: ports, signals, waiting, figures). This file only
//! re-exports them: the files import one another, never this one, so no import goes round.
#![allow(dead_code)]

mod base;
mod http;
mod lives;
mod pki;
mod redis;
pub mod rollout;
mod sidecar;

pub use base::*;
pub use http::*;
pub use lives::*;
pub use pki::*;
pub use redis::*;
pub use sidecar::*;

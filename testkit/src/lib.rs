//! The harness the integration tests (`tests/`) and the benchmark (`benches/`) share. A dev-only
//! crate: a `[dev-dependencies]` entry of redlock-elector, never a normal dependency.
//!
//! - [`common`]: real `redis-server` processes, the real sidecar binary, config helpers, the
//!   rolling-update driver;
//! - [`fault`]: the fault-injecting TCP proxy and the single-leader checker;
//! - [`fakeapi`]: the fake Kubernetes API server (faults a real one cannot produce on demand);
//! - [`cluster`]: a real control plane and the stand-in kubelet;
//! - [`previous`]: the previous release's sidecar binary, built from git (mixed-version tests).

// `new()` here starts processes or makes certificates: a `Default` would hide that.
#![allow(clippy::new_without_default)]

pub mod cluster;
pub mod common;
pub mod fakeapi;
pub mod fault;
pub mod previous;

use std::path::{Path, PathBuf};

/// The repository root (this crate lives in `testkit/`).
pub fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// The cargo profile directory the running test or bench executable was built into
/// (`target/<profile>`): executables live in its `deps/`, beside it the binaries cargo builds
/// for integration tests and benches.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    let deps = exe.parent().expect("the test executable's directory");
    // `target/<profile>/deps/<test>-<hash>`; a test run in place from `target/<profile>` too.
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().expect("target/<profile>").to_path_buf()
    } else {
        deps.to_path_buf()
    }
}

//! Every integration test in one binary (one link instead of one per area), a module per area.
//! The harness they share is the `testkit` crate. The model check (`tests/model.rs`) is its own
//! binary: CI runs it `--release`.
//!
//! Filters: `cargo test --test suite -- election::` runs one area; the control-plane tests are
//! named `cp_*` (`-- cp_` runs them, `--skip cp_` leaves them out: they need the control plane's
//! binaries, `scripts/control-plane.sh build`). Filters match substrings: `rollout::` matches
//! `control_plane_rollout::` too, so add `--skip cp_` when you mean the other areas only.

mod api;
mod app_health;
mod batching;
mod cli;
mod clients;
mod control_plane;
mod control_plane_endpoints;
mod control_plane_node;
mod control_plane_rollout;
mod control_plane_slice_faults;
mod dashboard_series;
mod docs_figures;
mod docs_links;
mod election;
mod exec;
mod fault_schedule;
mod fresh_handover;
mod kube_labels;
mod kube_slices;
mod lanes;
mod lifecycle;
mod managed_redis;
mod mixed_versions;
mod msrv;
mod openapi_live;
mod redis_faults;
mod reference_docs;
mod release;
mod rollout;
mod safety_ambiguous;
mod safety_checker;
mod safety_clock_jump;
mod safety_clock_margin;
mod safety_empty_restart;
mod safety_fencing;
mod safety_quarantine;
mod safety_renewal_expiry;
mod safety_stall;
mod scripts;
mod several_leases;
mod shards;

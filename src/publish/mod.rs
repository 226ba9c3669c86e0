//! Publishers of leadership beyond the sidecar's own HTTP endpoints. Each one only reads the
//! elector's `watch` of [`crate::leadership::Leadership`], so nothing it waits for can delay or
//! change the election.
//!
//! - [`k8s`] — the own pod's role label, the fencing-token annotation and Events in Kubernetes,
//!   and the own pod's standing (revision, age, Ready) for the candidate record.

pub mod k8s;

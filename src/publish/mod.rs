//! Publishers of leadership beyond the sidecar's own HTTP endpoints. Each one only reads the
//! elector's `watch` of [`crate::leadership::Leadership`], so nothing it waits for can delay or
//! change the election.
//!
//! - [`k8s`] — the own pod's role label, the fencing-token annotation and Events in Kubernetes.
//!   (The own pod's standing for the candidate record is an input of the elector, read by
//!   [`crate::k8s::standing`].)

pub mod k8s;

//! The leader Service's EndpointSlice as the fence reads it, and what a write makes of it: pure
//! functions of the slice as read, the wanted role and the fence; no I/O.
//!
//! The fence, on every write ([`decide`]):
//! - a leader lists its address only while the slice carries no higher token of its lease
//!   ([`TOKEN_ANNOTATION`], [`LEASE_ANNOTATION`]), and writes its own token with it;
//! - a sidecar that does not lead only ever removes its own address, and leaves the token as
//!   it is, so the high-water mark never goes down;
//! - every write carries the `resourceVersion` it was decided on (the server refuses it with a
//!   409 if anyone wrote since), and the caller checks the term's deadline at the moment of the
//!   write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::config::SlicePort;

/// Annotation with the lease whose term wrote [`TOKEN_ANNOTATION`].
pub const LEASE_ANNOTATION: &str = "redlock-elector/lease";
/// Annotation with the fencing token of the last term that listed its leader.
pub const TOKEN_ANNOTATION: &str = "redlock-elector/fencing-token";
/// `endpointslice.kubernetes.io/managed-by`: the EndpointSlice controller leaves a slice with
/// another value alone.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// Its value.
pub const MANAGED_BY: &str = "redlock-elector";
/// The label that ties the slice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Who writes: the own pod and what its slice entry says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Own {
    /// The slice's name (and its Service's, for a re-created slice).
    pub slice: String,
    /// The lease whose leader the slice lists.
    pub lease: String,
    /// Own pod IP.
    pub ip: String,
    /// Own pod name (`targetRef`).
    pub pod: String,
    /// Own namespace.
    pub namespace: String,
    /// The ports listed.
    pub ports: Vec<SlicePort>,
}

/// What the slice should say, as the writer sees its term now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    /// List only the own address, for the term with this token.
    Lead {
        /// The term's fencing token.
        token: u64,
    },
    /// Not list the own address.
    Follow,
}

/// What the slice says, as far as the fence reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The token of the lease's last listing term; `None` when absent, unreadable or of
    /// another lease.
    pub token: Option<u64>,
    /// Every address the slice lists.
    pub addresses: Vec<String>,
    /// Whether its ports are the configured ones.
    pub ports_match: bool,
}

impl Seen {
    /// Read `slice` for `own`'s lease.
    pub fn of(slice: &EndpointSlice, own: &Own) -> Seen {
        let annotations = slice.metadata.annotations.as_ref();
        let of_lease = annotations
            .and_then(|a| a.get(LEASE_ANNOTATION))
            .is_some_and(|l| *l == own.lease);
        let token = annotations
            .and_then(|a| a.get(TOKEN_ANNOTATION))
            .filter(|_| of_lease)
            .and_then(|t| t.parse().ok());
        Seen {
            token,
            addresses: slice
                .endpoints
                .iter()
                .flatten()
                .flat_map(|e| e.addresses.iter().cloned())
                .collect(),
            ports_match: slice.ports.as_deref() == Some(&endpoint_ports(&own.ports)[..]),
        }
    }
}

/// What to do with the slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// It says what is wanted already.
    Done,
    /// List only the own address, with this token.
    List {
        /// The writer's term's token.
        token: u64,
    },
    /// Remove the own address (the token stays).
    Empty,
    /// Not sent: a later term of the lease listed its leader (`theirs` > the writer's token), so
    /// this write would point the Service back at a stale leader.
    Refuse {
        /// The slice's token.
        theirs: u64,
    },
}

/// The fence's decision for `want`, given the slice as `seen` and the own address `ip`.
/// `fence` false (`--unsafe-disable-endpoint-fence`) skips the token check.
pub fn decide(seen: &Seen, ip: &str, want: Want, fence: bool) -> Decision {
    match want {
        Want::Lead { token } => match seen.token {
            Some(theirs) if fence && theirs > token => Decision::Refuse { theirs },
            Some(t) if t == token && seen.addresses == [ip] && seen.ports_match => Decision::Done,
            _ => Decision::List { token },
        },
        Want::Follow if seen.addresses.iter().any(|a| a == ip) => Decision::Empty,
        Want::Follow => Decision::Done,
    }
}

/// `slice` after `decision` (`List` or `Empty`; the others leave it as it is), conditional on
/// the version it was read at unless `fence` is off.
pub fn written(slice: &EndpointSlice, own: &Own, decision: Decision, fence: bool) -> EndpointSlice {
    let mut s = slice.clone();
    match decision {
        Decision::List { token } => {
            s.endpoints = Some(vec![endpoint(own)]);
            s.ports = Some(endpoint_ports(&own.ports));
            let a = s.metadata.annotations.get_or_insert_with(BTreeMap::new);
            a.insert(LEASE_ANNOTATION.into(), own.lease.clone());
            a.insert(TOKEN_ANNOTATION.into(), token.to_string());
        }
        Decision::Empty => {
            let kept = s.endpoints.take().unwrap_or_default().into_iter();
            s.endpoints = Some(kept.filter(|e| !e.addresses.contains(&own.ip)).collect());
        }
        Decision::Done | Decision::Refuse { .. } => {}
    }
    if !fence {
        // An unconditional update: it lands whatever was written since.
        s.metadata.resource_version = None;
    }
    s
}

/// A new, empty slice for `own`'s Service; `last` (the slice as last read, if ever) lends its
/// labels and annotations, so a slice its installer (Helm) owned stays recognisably its.
pub fn fresh(own: &Own, last: Option<&ObjectMeta>) -> EndpointSlice {
    let mut labels = last.and_then(|m| m.labels.clone()).unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), own.slice.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(own.slice.clone()),
            namespace: Some(own.namespace.clone()),
            labels: Some(labels),
            annotations: last.and_then(|m| m.annotations.clone()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(Vec::new()),
        ports: Some(endpoint_ports(&own.ports)),
    }
}

/// The own pod as the slice lists it: ready, serving, not terminating.
fn endpoint(own: &Own) -> Endpoint {
    Endpoint {
        addresses: vec![own.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(true),
            serving: Some(true),
            terminating: Some(false),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            name: Some(own.pod.clone()),
            namespace: Some(own.namespace.clone()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The configured ports as the slice lists them.
fn endpoint_ports(ports: &[SlicePort]) -> Vec<EndpointPort> {
    ports
        .iter()
        .map(|p| EndpointPort {
            name: Some(p.name.clone()),
            port: Some(i32::from(p.port)),
            protocol: Some(p.protocol.clone()),
            app_protocol: None,
        })
        .collect()
}

/// The Warning Event on `slice` that reports a refused stale write, from `identity` at `at`.
pub fn stale_write_event(
    own: &Own,
    slice: &EndpointSlice,
    identity: &str,
    message: String,
    at: Timestamp,
) -> Event {
    let time = Time(at);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", own.slice, at.as_nanosecond())),
            namespace: Some(own.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("discovery.k8s.io/v1".into()),
            kind: Some("EndpointSlice".into()),
            name: Some(own.slice.clone()),
            namespace: Some(own.namespace.clone()),
            uid: slice.metadata.uid.clone(),
            ..Default::default()
        },
        reason: Some("StaleEndpointWriteRefused".into()),
        message: Some(message),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(time.clone()),
        last_timestamp: Some(time),
        source: Some(EventSource {
            component: Some("redlock-elector".into()),
            host: None,
        }),
        reporting_component: Some("redlock-elector".into()),
        reporting_instance: Some(identity.to_string()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(ip: &str) -> Own {
        Own {
            slice: "app-leader".into(),
            lease: "my-app".into(),
            ip: ip.into(),
            pod: format!("pod-{ip}"),
            namespace: "ns".into(),
            ports: vec![SlicePort {
                name: "http".into(),
                port: 8080,
                protocol: "TCP".into(),
            }],
        }
    }

    fn seen(token: Option<u64>, addresses: &[&str]) -> Seen {
        Seen {
            token,
            addresses: addresses.iter().map(|a| a.to_string()).collect(),
            ports_match: true,
        }
    }

    const A: &str = "10.0.0.1";
    const B: &str = "10.0.0.2";

    #[test]
    fn a_leader_lists_itself_unless_a_later_term_did() {
        let lead = |token| Want::Lead { token };
        // An empty, fresh slice; one listing the previous leader; one listing itself already.
        assert_eq!(
            decide(&seen(None, &[]), A, lead(5), true),
            Decision::List { token: 5 }
        );
        assert_eq!(
            decide(&seen(Some(4), &[B]), A, lead(5), true),
            Decision::List { token: 5 }
        );
        assert_eq!(
            decide(&seen(Some(5), &[A]), A, lead(5), true),
            Decision::Done
        );
        // Same token, but the list or the ports differ (edited by someone): written again.
        assert_eq!(
            decide(&seen(Some(5), &[A, B]), A, lead(5), true),
            Decision::List { token: 5 }
        );
        let mut s = seen(Some(5), &[A]);
        s.ports_match = false;
        assert_eq!(decide(&s, A, lead(5), true), Decision::List { token: 5 });
        // A later term listed its leader: refused, whatever the slice lists now.
        for listed in [&[B][..], &[], &[A]] {
            assert_eq!(
                decide(&seen(Some(6), listed), A, lead(5), true),
                Decision::Refuse { theirs: 6 }
            );
        }
        // The fence off: written over it.
        assert_eq!(
            decide(&seen(Some(6), &[B]), A, lead(5), false),
            Decision::List { token: 5 }
        );
    }

    #[test]
    fn a_sidecar_that_does_not_lead_removes_only_its_own_address() {
        assert_eq!(
            decide(&seen(Some(5), &[A]), A, Want::Follow, true),
            Decision::Empty
        );
        // Whatever the token: its own address is never right on a follower.
        assert_eq!(
            decide(&seen(Some(9), &[A]), A, Want::Follow, true),
            Decision::Empty
        );
        assert_eq!(
            decide(&seen(Some(6), &[B]), A, Want::Follow, true),
            Decision::Done
        );
        assert_eq!(
            decide(&seen(None, &[]), A, Want::Follow, true),
            Decision::Done
        );
    }

    #[test]
    fn writes_keep_the_token_high_water_mark_and_the_version_precondition() {
        let a = own(A);
        let mut slice = fresh(&a, None);
        slice.metadata.resource_version = Some("41".into());
        let listed = written(&slice, &a, Decision::List { token: 7 }, true);
        assert_eq!(listed.metadata.resource_version.as_deref(), Some("41"));
        assert_eq!(
            Seen::of(&listed, &a),
            Seen {
                token: Some(7),
                addresses: vec![A.into()],
                ports_match: true
            }
        );
        let e = &listed.endpoints.as_ref().unwrap()[0];
        assert_eq!(
            e.target_ref.as_ref().unwrap().name.as_deref(),
            Some("pod-10.0.0.1")
        );
        assert_eq!(e.conditions.as_ref().unwrap().ready, Some(true));
        let emptied = written(&listed, &a, Decision::Empty, true);
        assert_eq!(emptied.endpoints, Some(vec![]));
        assert_eq!(Seen::of(&emptied, &a).token, Some(7), "the token stays");
        // Fence off: no precondition.
        assert_eq!(
            written(&slice, &a, Decision::Empty, false)
                .metadata
                .resource_version,
            None
        );
        // Another lease's token is not comparable: not read.
        let mut other = a.clone();
        other.lease = "other".into();
        assert_eq!(Seen::of(&listed, &other).token, None);
    }

    #[test]
    fn a_recreated_slice_keeps_its_installers_labels_and_names_its_service() {
        let a = own(A);
        let last = ObjectMeta {
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".into(),
                "Helm".into(),
            )])),
            annotations: Some(BTreeMap::from([(
                "meta.helm.sh/release-name".into(),
                "el".into(),
            )])),
            resource_version: Some("9".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        let s = fresh(&a, Some(&last));
        let labels = s.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SERVICE_NAME_LABEL], "app-leader");
        assert_eq!(labels[MANAGED_BY_LABEL], MANAGED_BY);
        assert_eq!(labels["app.kubernetes.io/managed-by"], "Helm");
        assert_eq!(
            s.metadata.annotations.as_ref().unwrap()["meta.helm.sh/release-name"],
            "el"
        );
        assert_eq!((s.metadata.resource_version, s.metadata.uid), (None, None));
        assert_eq!(s.address_type, "IPv4");
    }
}

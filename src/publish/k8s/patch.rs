//! Pure builders of the JSON merge patches and the label selector; no I/O.

use serde_json::{Value, json};

use super::{LEASE_LABEL, Role, TOKEN_ANNOTATION, UPDATED_ANNOTATION};
use crate::k8s::Settings;

impl Settings {
    /// Merge patch for the own pod: lease label, role label, [`UPDATED_ANNOTATION`] = `now`
    /// (RFC 3339), the token annotation, with several leases the led-leases annotation (`led`;
    /// `None` removes it), and the `resourceVersion` precondition if known.
    pub fn own_patch(
        &self,
        role: Role,
        led: Option<&str>,
        resource_version: Option<&str>,
        now: &str,
    ) -> Value {
        let (value, token) = match role {
            Role::Leader { token } => (&self.label_leader, Some(token)),
            Role::Follower => (&self.label_follower, None),
        };
        let mut meta = json!({
            "labels": { LEASE_LABEL: self.lease, &self.label_key: value },
            "annotations": { UPDATED_ANNOTATION: now },
        });
        if self.token_annotation {
            meta["annotations"][TOKEN_ANNOTATION] = json!(token.map(|t| t.to_string()));
        }
        if let Some(annotation) = &self.led_annotation {
            // JSON merge patch: null deletes the key.
            meta["annotations"][annotation.key()] = json!(led);
        }
        with_precondition(meta, resource_version)
    }

    /// Merge patch that demotes another pod of the lease, conditional on the version listed.
    pub fn demote_patch(&self, resource_version: Option<&str>) -> Value {
        let mut meta = json!({ "labels": { &self.label_key: self.label_follower } });
        if self.token_annotation {
            meta["annotations"] = json!({ TOKEN_ANNOTATION: null });
        }
        with_precondition(meta, resource_version)
    }

    /// Selector of the pods of this lease that carry the leader value.
    pub fn leader_selector(&self) -> String {
        format!(
            "{LEASE_LABEL}={},{}={}",
            self.lease, self.label_key, self.label_leader
        )
    }
}

/// `{"metadata": meta}`, with `resourceVersion` set if known: the server then rejects the patch
/// (409) if the object changed since that version was read.
fn with_precondition(mut meta: Value, resource_version: Option<&str>) -> Value {
    if let Some(rv) = resource_version {
        meta["resourceVersion"] = json!(rv);
    }
    json!({ "metadata": meta })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(token_annotation: bool) -> Settings {
        Settings {
            lease: "my-app".into(),
            identity: "pod-a".into(),
            pod: "pod-a".into(),
            namespace: Some("ns1".into()),
            label_key: "redlock-elector/role".into(),
            label_leader: "leader".into(),
            label_follower: "follower".into(),
            events: true,
            token_annotation,
            single_lease: true,
            apps: crate::k8s::Apps::Off,
            led_annotation: None,
        }
    }

    #[test]
    fn patches() {
        let s = settings(false);
        assert_eq!(
            s.own_patch(Role::Leader { token: 7 }, None, Some("42"), "T1"),
            json!({"metadata": {
                "labels": {"redlock-elector/lease": "my-app", "redlock-elector/role": "leader"},
                "annotations": {"redlock-elector/role-updated-at": "T1"},
                "resourceVersion": "42",
            }})
        );
        assert_eq!(
            s.own_patch(Role::Follower, None, None, "T2"),
            json!({"metadata": {
                "labels": {"redlock-elector/lease": "my-app", "redlock-elector/role": "follower"},
                "annotations": {"redlock-elector/role-updated-at": "T2"},
            }})
        );
        assert_eq!(
            s.demote_patch(Some("9")),
            json!({"metadata": {"labels": {"redlock-elector/role": "follower"}, "resourceVersion": "9"}})
        );
        assert_eq!(
            s.leader_selector(),
            "redlock-elector/lease=my-app,redlock-elector/role=leader"
        );
    }

    #[test]
    fn token_annotation_is_set_while_leader_and_removed_after() {
        let s = settings(true);
        let lead = s.own_patch(Role::Leader { token: 7 }, None, None, "T");
        assert_eq!(lead["metadata"]["annotations"][TOKEN_ANNOTATION], "7");
        let follow = s.own_patch(Role::Follower, None, None, "T");
        // JSON merge patch: null deletes the key.
        assert!(follow["metadata"]["annotations"][TOKEN_ANNOTATION].is_null());
        assert!(
            follow["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(TOKEN_ANNOTATION)
        );
        assert!(
            s.demote_patch(None)["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(TOKEN_ANNOTATION)
        );
    }

    #[test]
    fn the_led_annotation_is_written_with_several_leases_only() {
        use crate::k8s::LedAnnotation;
        // One lease: no such key at all, so single-lease pods look as they always did.
        let one = settings(false).own_patch(Role::Leader { token: 7 }, Some("x"), None, "T");
        let keys: Vec<&String> = one["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, ["redlock-elector/role-updated-at"]);
        let mut s = settings(false);
        s.single_lease = false;
        s.led_annotation = Some(LedAnnotation::Names(vec!["a".into(), "b".into()]));
        let lead = s.own_patch(Role::Leader { token: 7 }, Some("a,b"), None, "T");
        assert_eq!(
            lead["metadata"]["annotations"]["redlock-elector/leases"],
            "a,b"
        );
        let follow = s.own_patch(Role::Follower, None, None, "T");
        let annotations = follow["metadata"]["annotations"].as_object().unwrap();
        assert!(annotations["redlock-elector/leases"].is_null());
        s.led_annotation = Some(LedAnnotation::Shards);
        let lead = s.own_patch(Role::Leader { token: 7 }, Some("0,5"), None, "T");
        assert_eq!(
            lead["metadata"]["annotations"]["redlock-elector/shards"],
            "0,5"
        );
        assert!(
            !lead["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key("redlock-elector/leases")
        );
        // The demotion of another pod never touches it (several leases demote nobody anyway).
        assert!(
            s.demote_patch(None)["metadata"]
                .get("annotations")
                .is_none()
        );
    }
}
